"""Writes the seed and malformed inputs of the config fuzz targets (fuzz_config.c,
fuzz_hf_config.c, fuzz_ckpt_meta.c) into corpus/config, corpus/hf_config and
corpus/ckpt_meta. good_* must be accepted, bad_* rejected (tests/fuzz/driver.c checks both,
then mutates the good ones). The job configs are the repository's own (configs/*.toml,
tests/fixtures/torchtitan/*.toml) plus hand-made ones; config.json and metadata.json seeds
are written here from the formats (Hugging Face's Qwen3Config / Qwen3MoeConfig fields; the
metadata.json a 1-step `titan train --checkpoint.enable` run of the debugmodel flavor writes).

usage: python3 tests/fuzz/make_config_corpus.py   (from the repository root)
"""
import copy
import glob
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def write(sub, name, data):
    d = os.path.join(HERE, "corpus", sub)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode("utf-8"))


# ---- job configs (TOML) -----------------------------------------------------------------
for path in sorted(glob.glob(os.path.join(ROOT, "configs", "*.toml"))):
    write("config", "good_configs_" + os.path.basename(path).replace(".toml", ""),
          open(path, "rb").read())
for path in sorted(glob.glob(os.path.join(ROOT, "tests", "fixtures", "torchtitan", "*.toml"))):
    name = os.path.basename(path).replace(".toml", "")
    write("config", "good_torchtitan_" + name,
          open(path, "rb").read())
write("config", "good_syntax", """# every part of titan's TOML subset
[job]
description = "tab\\t quote\\" backslash\\\\ \\u00e9 \\U0001F642"
dump_folder = 'literal\\path'

[training]
steps = 1_000
seed = 0x2A
max_norm = 1e0
local_batch_size = 0b100

[optimizer]
lr = 3.0e-4
eps = +1e-8

[model]
flavor = "debugmodel"
tie_embeddings = false

[checkpoint]
exclude_from_loading = [
  "optimizer",  # a comment inside an array
  "lr_scheduler",
]

[parallelism]
data_parallel_shard_degree = -1
""")
write("config", "good_dotted", 'training.steps = 5\n"model".flavor = "debugmodel"\n'
      'metrics.log_freq = 2\n')
write("config", "good_empty", "")
write("config", "good_comment_only", "# nothing set\n\n   \n")
write("config", "bad_unknown_key", "[training]\nstepz = 3\n")
write("config", "bad_unknown_section", "[trainig]\nsteps = 3\n")
write("config", "bad_key_outside_section", "steps = 3\n")
write("config", "bad_type", '[training]\nsteps = "3"\n')
write("config", "bad_range", "[training]\nsteps = -5\n")
write("config", "bad_int_overflow", "[training]\nsteps = 99999999999999999999\n")
write("config", "bad_duplicate_key", "[training]\nsteps = 3\nsteps = 4\n")
write("config", "bad_duplicate_table", "[training]\nsteps = 3\n[training]\nseed = 1\n")
write("config", "bad_key_and_table", "[training]\nsteps = 3\n[training.steps]\nx = 1\n")
write("config", "bad_inline_table", "[training]\nx = {a = 1}\n")  # an unknown table [training.x]
write("config", "bad_inline_table_in_array", "[kernels]\noverrides = [{a = 1}]\n")
write("config", "good_param_groups", """[training]
steps = 3
[[optimizer.param_groups]]
pattern = '(?:tok_embeddings|output)\\.'
optimizer_name = "AdamW"
optimizer_kwargs = {lr = 8e-4, betas = [0.9, 0.95], eps = 1e-8, weight_decay = 0.0, fused = true}
[[optimizer.param_groups]]
pattern = '\\.router\\.gate\\.'
optimizer_name = "Adam"
optimizer_kwargs.lr = 1e-4
[[optimizer.param_groups]]
pattern = '.*'
optimizer_name = "AdamW"
[optimizer.param_groups.optimizer_kwargs]
lr = 8e-4
weight_decay = 0.1
""")
write("config", "bad_param_groups_regex", "[[optimizer.param_groups]]\npattern = '(x'\n"
      "optimizer_name = 'AdamW'\noptimizer_kwargs = {lr = 1}\n")
write("config", "bad_multiline_string", '[job]\ndescription = """a\nb"""\n')
write("config", "bad_array_of_tables", "[[training]]\nsteps = 3\n")
write("config", "bad_date", "[job]\ndescription = 1979-05-27\n")
write("config", "bad_unterminated_string", '[job]\ndescription = "abc\n')
write("config", "bad_unterminated_array", '[checkpoint]\nexclude_from_loading = ["a",\n')
write("config", "bad_escape", '[job]\ndescription = "\\x41"\n')
write("config", "bad_surrogate_escape", '[job]\ndescription = "\\uD800"\n')
write("config", "bad_nul_escape", '[job]\ndescription = "\\u0000"\n')
write("config", "bad_nul_byte", b"[training]\nsteps = 3\x00\n")
write("config", "bad_invalid_utf8", b'[job]\ndescription = "caf\xe9"\n')
write("config", "bad_nested_arrays", "[checkpoint]\nexclude_from_loading = " + "[" * 12 +
      "]" * 12 + "\n")
write("config", "bad_mixed_array", '[checkpoint]\nexclude_from_loading = ["a", 1]\n')
write("config", "bad_empty_quoted_key", '[training]\n"" = 1\n')
write("config", "bad_validate", '[model]\nflavor = "no_such_flavor"\n')
write("config", "bad_no_value", "[training]\nsteps =\n")
write("config", "bad_header_garbage", "[training] x\nsteps = 3\n")

# ---- Hugging Face config.json ------------------------------------------------------------
dense = {
    "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 1, "eos_token_id": 2, "head_dim": 16, "hidden_act": "silu",
    "hidden_size": 64, "initializer_range": 0.02, "intermediate_size": 128,
    "max_position_embeddings": 256, "max_window_layers": 2, "model_type": "qwen3",
    "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2,
    "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000.0,
    "sliding_window": None, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
    "transformers_version": "4.51.0", "use_cache": True, "use_sliding_window": False,
    "vocab_size": 512}
moe = dict(dense, architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe",
           num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
           norm_topk_prob=True, router_aux_loss_coef=0.001, decoder_sparse_step=1,
           mlp_only_layers=[], output_router_logits=False, tie_word_embeddings=False)
del moe["head_dim"]


def hf(name, cfg, **edit):
    c = copy.deepcopy(cfg)
    for k, v in edit.items():
        if v is KeyError:
            c.pop(k, None)
        else:
            c[k] = v
    write("hf_config", name, json.dumps(c, indent=2))


hf("good_dense", dense)
hf("good_moe", moe)
hf("good_dense_minimal", {k: dense[k] for k in (
    "model_type", "hidden_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "intermediate_size", "vocab_size", "head_dim")})
hf("good_rope_parameters", dense, rope_theta=KeyError,
   rope_parameters={"rope_type": "default", "rope_theta": 5e5})
hf("good_moe_local_experts", moe, num_experts=KeyError, num_local_experts=8,
   layer_types=["full_attention"] * 2)
hf("bad_architecture", dense, architectures=["LlamaForCausalLM"])
hf("bad_contradiction", dense, model_type="qwen3_moe")
hf("bad_missing_field", dense, hidden_size=KeyError)
hf("bad_missing_kv_heads", dense, num_key_value_heads=KeyError)
hf("bad_type", dense, num_hidden_layers="2")
hf("bad_float_for_int", dense, num_hidden_layers=2.0)
hf("bad_range", dense, vocab_size=0)
hf("bad_huge", dense, hidden_size=2 ** 31)
hf("bad_rope_scaling", dense, rope_scaling={"rope_type": "yarn", "factor": 4.0})
hf("bad_rope_per_layer", dense, rope_parameters={"full_attention": {"rope_theta": 1e4}})
hf("bad_rope_theta", dense, rope_theta=-1.0)
hf("bad_partial_rotary", dense, partial_rotary_factor=0.5)
hf("bad_sliding", dense, use_sliding_window=True)
hf("bad_layer_types", dense, layer_types=["sliding_attention", "full_attention"])
hf("bad_act", dense, hidden_act="gelu")
hf("bad_bias", dense, attention_bias=True)
hf("bad_dropout", dense, attention_dropout=0.1)
hf("bad_quantized", dense, quantization_config={"quant_method": "fp8"})
hf("bad_heads", dense, num_key_value_heads=3)
hf("bad_eps", dense, rms_norm_eps=0)
hf("bad_experts_differ", moe, num_local_experts=4)
hf("bad_sparse_step", moe, decoder_sparse_step=2)
hf("bad_top_k", moe, num_experts_per_tok=9)
write("hf_config", "bad_not_object", "[1, 2]")
write("hf_config", "bad_not_json", '{"model_type": "qwen3",')
write("hf_config", "bad_duplicate", '{"model_type": "qwen3", "model_type": "qwen3"}')
write("hf_config", "bad_empty", "")

# ---- checkpoint metadata.json ---------------------------------------------------------------
model = {"dim": 256, "ffn_dim": 3072, "head_dim": 128, "max_seq_len": 4096, "n_heads": 16,
         "n_kv_heads": 8, "n_layers": 8, "norm_eps": 1e-6, "rope_theta": 1000000.0,
         "tie_embeddings": 1, "vocab_size": 2048}
loader = {"bad_lines": 0, "byte_off": 0, "content": "FUZZCONTENTHASH0", "doc": 0,
          "doc_tokens": 9, "epoch": 0, "file": 0, "file_doc": 0,
          "fingerprint": "FUZZFINGERPRINT1", "line": 0}
train = {"adam_step": 1, "data_loader": loader, "global_batch_size": 1, "kernel_overrides": "",
         "mixed_precision_param": "bfloat16", "model": model, "model_only": True,
         "random_tokens_counter": 0, "seed": 42, "seq_len": 8, "step": 1, "tokenizer": "bytes",
         "tokens_seen": 8}
meta = {"format": "titan-checkpoint", "shards": ["rank-00000.safetensors"], "step": 1,
        "train": train, "version": 2, "world_size": 1}


def ck(name, edit_meta=None, **edit_train):
    m = copy.deepcopy(meta)
    for k, v in (edit_meta or {}).items():
        if v is KeyError:
            m.pop(k, None)
        else:
            m[k] = v
    for k, v in edit_train.items():
        if v is KeyError:
            m["train"].pop(k, None)
        else:
            m["train"][k] = v
    write("ckpt_meta", name, json.dumps(m, indent=1))


def at(**kw):
    d = dict(loader, **kw)
    return {k: v for k, v in d.items() if v is not KeyError}


ck("good_titan_run")
ck("good_second_paragraph", data_loader=at(doc=1, file_doc=1, doc_tokens=3, byte_off=31))
ck("good_second_file", data_loader=at(doc=3, doc_tokens=2, file=1, file_doc=0, byte_off=0,
                                      content=KeyError))
ck("good_no_content", data_loader=at(content=KeyError, epoch=3))
ck("good_dp2", data_loader=None, data_loaders=[
    at(fingerprint="0000000000000000"),
    at(fingerprint="FUZZFINGERPRINT2", doc=1, file_doc=1, doc_tokens=0, byte_off=31)])
ck("good_expert_bias", expert_bias=[0.5, -1, 0, 2e-3, 1, 1, 1, 1])
ck("good_version1", {"version": 1, "shards": KeyError}, adam_step=0, model_only=False)
# the same positions in the target's JSON Lines (FUZZFINGERPRINTJ / K) and token shard (T / U)
# datasets (fuzz_ckpt_meta.c's setup: line and document offsets)
jl = dict(fingerprint="FUZZFINGERPRINTJ", content="FUZZCONTENTHASHJ")
tk = dict(fingerprint="FUZZFINGERPRINTT", content="FUZZCONTENTHASHT")
ck("good_jsonl", data_loader=at(doc_tokens=3, **jl))
ck("good_jsonl_second_doc", data_loader=at(doc=1, file_doc=1, byte_off=23, line=2, doc_tokens=0,
                                           **jl))
ck("good_jsonl_second_file", data_loader=at(doc=3, file=1, file_doc=1, byte_off=13, line=1,
                                            doc_tokens=2,
                                            fingerprint="FUZZFINGERPRINTJ", content=KeyError))
ck("good_jsonl_dp2", data_loader=None, data_loaders=[
    at(**jl), at(fingerprint="FUZZFINGERPRINTK", doc=1, file_doc=1, byte_off=23, line=2,
                 doc_tokens=0, content=KeyError)])
ck("bad_jsonl_mid_line", data_loader=at(doc=1, file_doc=1, byte_off=5, line=1, doc_tokens=0,
                                        **jl))
# a resume on a dataset that grew (the fingerprint differs: files after the position's changed):
# the growth fields decide; the first files' sizes are fuzz_ckpt_meta.c's ta and ja
ta_size = len(b"First paragraph, a few words.\n\nSecond one\nwith two lines.\n\n\n"
              b"Third \xc3\xa9t\xc3\xa9.\n")
ja_size = len(b'{"text": "first doc"}\n\n{"text": "s\\u00e9cond", "x": 1}\n')
empty_chain = "cbf29ce484222325"  # base_hash_bytes' FNV-1a offset: the files before file 0
grown_j = dict(fingerprint="0000000000000000", content="FUZZCONTENTHASHJ",
               setup="FUZZGROWTHSETUPJ", before=empty_chain, name="FUZZNAMEOFFILE0J",
               size=ja_size)
grown_t = dict(fingerprint="0000000000000000", content="FUZZCONTENTHASH0",
               setup="FUZZGROWTHSETUP1", before=empty_chain, name="FUZZNAMEOFFILE00",
               size=ta_size)
ck("good_grown_jsonl", data_loader=at(doc_tokens=3, **grown_j))
ck("good_grown_text", data_loader=at(doc=1, file_doc=1, doc_tokens=3, byte_off=31, **grown_t))
ck("bad_grown_shrunk", data_loader=at(doc_tokens=3, **dict(grown_j, size=ja_size + 5)))
ck("bad_grown_setup", data_loader=at(doc_tokens=3, **dict(grown_j, setup="0123456789abcdef")))
ck("bad_grown_before", data_loader=at(doc_tokens=3, **dict(grown_j, before="0123456789abcdef")))
ck("bad_grown_name", data_loader=at(doc_tokens=3, **dict(grown_j, name="0123456789abcdef")))
ck("bad_grown_fields_apart", data_loader=at(doc_tokens=3, fingerprint="0000000000000000",
                                            setup="FUZZGROWTHSETUPJ"))
ck("good_tokens", data_loader=at(doc_tokens=2, **tk))
ck("good_tokens_second_file", data_loader=at(doc=5, file=1, file_doc=1, doc_tokens=1,
                                             fingerprint="FUZZFINGERPRINTT", content=KeyError))
ck("good_tokens_dp2", data_loader=None, data_loaders=[
    at(**tk), at(fingerprint="FUZZFINGERPRINTU", doc=3, file_doc=3, doc_tokens=0,
                 content=KeyError)])
ck("bad_tokens_doc_past_end", data_loader=at(doc=9, file=1, file_doc=5, doc_tokens=0,
                                             fingerprint="FUZZFINGERPRINTT", content=KeyError))
ck("bad_tokens_tokens_past_doc", data_loader=at(doc_tokens=4, **tk))
ck("bad_step_type", {"step": "1"})
write("ckpt_meta", "bad_not_json", '{"format": "titan-checkpoint", "step": 1,, }')
write("ckpt_meta", "bad_truncated", json.dumps(meta)[:100])
write("ckpt_meta", "bad_empty", "")
ck("bad_format", {"format": "torch-dcp"})
ck("bad_version", {"version": 3})
ck("bad_step_mismatch", {"step": 2})
ck("bad_world_size", {"world_size": 0})
ck("bad_shards", {"shards": ["rank-00001.safetensors"]})
ck("bad_train_not_object", {"train": [1]})
# metadata.json's own CRC-32C (version 4's member, checked whenever present): a mismatch and a
# malformed value are refused; mutations of these reach the CRC's dump of hostile JSON
ck("bad_crc_mismatch", {"crc32c": "00000000"})
ck("bad_crc_not_hex", {"crc32c": "0000000g"})
ck("bad_crc_number", {"crc32c": 12345678})
ck("bad_adam_step", adam_step=2)
ck("bad_tokens_seen", tokens_seen=-1)
ck("bad_model_only", model_only=1)
ck("bad_model_other", model=dict(model, dim=128))
ck("bad_model_unknown_key", model=dict(model, colour=1))
ck("bad_model_missing", model=KeyError)
ck("bad_loader_type", data_loader=[1])
ck("bad_loader_null", data_loader=None)
ck("bad_loader_negative", data_loader=at(epoch=-1))
ck("bad_loader_missing_field", data_loader={k: v for k, v in loader.items() if k != "doc"})
ck("bad_loader_fingerprint", data_loader=at(fingerprint="0123456789abcdef"))
ck("bad_loader_fingerprint_text", data_loader=at(fingerprint="xyz"))
ck("bad_loader_content", data_loader=at(content="0000000000000001"))
ck("bad_loader_doc_mismatch", data_loader=at(doc=1000, doc_tokens=0))
ck("bad_loader_doc_below_file_doc", data_loader=at(doc=1, file_doc=2, file=1, doc_tokens=0,
                                                   content=KeyError))
ck("bad_loader_tokens_past_doc", data_loader=at(doc_tokens=10 ** 6))
ck("bad_loader_file_past_end", data_loader=at(file=7, content=KeyError))
ck("bad_loader_huge_file", data_loader=at(file=2 ** 40))
ck("bad_loaders_one", data_loaders=[loader])
ck("bad_loaders_three", data_loader=None, data_loaders=[loader, loader, loader])
ck("bad_expert_bias_length", expert_bias=[0.5])
ck("bad_expert_bias_type", expert_bias=[0, 0, 0, 0, 0, 0, 0, "x"])
