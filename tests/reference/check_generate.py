"""titan generate against Hugging Face transformers and on the command line.

usage: check_generate.py TITAN SHARED_DIR WORK_DIR EXPORT_DIR...

1. Greedy parity: for each EXPORT_DIR (a byte-level model written by `titan train --out`),
   `titan generate --temperature 0` produces exactly the token ids of transformers'
   Qwen3ForCausalLM.generate(do_sample=False) from the same byte prompt.
2. Sampling on the command line: the same seed gives the same ids, another seed others, and
   --top-k 1 at temperature 1 is the greedy output.
3. A training checkpoint (step-N folder, and its parent folder) generates exactly what the HF
   export of the same weights generates.
4. --chat with the Qwen3 tokenizer: a crafted model (every position's hidden state is the same,
   its lm_head prefers <|im_end|> with "Hello" second) renders the template (the prompt has
   `titan encode --chat`'s token count, with and without --no-thinking), streams "Hello"s
   and stops at <|im_end|> before max-new-tokens.
5. A Hugging Face folder's own settings, as transformers' generate() takes them: the eos ids of
   its generation_config.json, else of its config.json, end generation where transformers ends
   it (a crafted model whose greedy token is a declared eos id: both stop after it; one that is
   not: both run to max-new-tokens), and its generation_config.json's do_sample / top_k are
   the defaults (do_sample false: greedy; top_k 1); a malformed one is refused by name.
6. Sampling frequencies are those of transformers' warped distribution (temperature, top-k,
   top-p, in HF's order and semantics) on a model with fixed logits.
7. Hostile input: a missing model, a corrupt metadata.json, a truncated safetensors file and
   bad --chat JSON fail with exit status 1 and a message naming the culprit (no crash).
"""
import json
import os
import shutil
import subprocess
import sys

import torch
from safetensors.torch import save_file
from transformers import Qwen3ForCausalLM

TITAN = None


def run(args, ok=True, stdin=None):
    p = subprocess.run([TITAN] + args, capture_output=True, text=True, input=stdin)
    if ok and p.returncode != 0:
        raise AssertionError(f"titan {' '.join(args)} failed ({p.returncode}): {p.stderr}")
    return p


def set_args(cfg):
    m = {"hidden_size": "dim", "num_hidden_layers": "n_layers", "num_attention_heads": "n_heads",
         "num_key_value_heads": "n_kv_heads", "head_dim": "head_dim",
         "intermediate_size": "ffn_dim", "vocab_size": "vocab_size", "rope_theta": "rope_theta",
         "rms_norm_eps": "norm_eps"}
    out = []
    for k, v in m.items():
        out += ["--set", f"{v}={cfg[k]}"]
    out += ["--set", f"tie_embeddings={int(cfg.get('tie_word_embeddings', False))}"]
    return out


def ids_of(p):
    return [int(x) for x in p.stdout.split()]


def greedy_parity(d, prompt, n_new):
    cfg = json.load(open(f"{d}/config.json"))
    model = Qwen3ForCausalLM.from_pretrained(d, attn_implementation="eager").eval()
    x = torch.tensor([list(prompt.encode())])
    with torch.no_grad():
        out = model.generate(x, do_sample=False, max_new_tokens=n_new, min_new_tokens=n_new,
                             eos_token_id=None, pad_token_id=0)
    want = out[0, x.shape[1]:].tolist()
    base = ["generate", "--model", d, "--prompt", prompt, "--max-new-tokens", str(n_new), "--ids",
            "--bytes"]  # a byte-level export: vocabulary 2048, no tokenizer.json
    got = ids_of(run(base + set_args(cfg) + ["--temperature", "0"]))
    assert got == want, f"{d}: titan greedy {got} != HF {want}"
    print(f"{d}: {n_new} greedy tokens identical to transformers generate(do_sample=False)")
    s = ["--temperature", "0.9", "--top-k", "40", "--top-p", "0.9"]
    a = ids_of(run(base + set_args(cfg) + s + ["--seed", "3"]))
    b = ids_of(run(base + set_args(cfg) + s + ["--seed", "3"]))
    c = ids_of(run(base + set_args(cfg) + s + ["--seed", "4"]))
    k1 = ids_of(run(base + set_args(cfg) + ["--temperature", "1", "--top-k", "1", "--seed", "9"]))
    assert a == b, "same seed, different samples"
    assert a != c, "seeds 3 and 4 gave the same 40 samples"
    assert k1 == want, "--top-k 1 differs from greedy"
    print(f"{d}: same seed -> same ids, other seed -> other ids, top-k 1 == greedy")


def checkpoint_parity(work, shared):
    d = f"{work}/ckpt_run"
    shutil.rmtree(d, ignore_errors=True)  # a fresh run: an earlier one's steps would be resumed
    flags = ["--set", "n_layers=2", "--set", "dim=64", "--set", "n_heads=4", "--set",
             "n_kv_heads=1", "--set", "head_dim=16", "--set", "ffn_dim=96", "--set",
             "tie_embeddings=0"]
    run(["train", "--flavor", "debugmodel"] + flags +
        ["--data", f"{shared}/data/tinyshakespeare/input.txt", "--steps", "4", "--batch", "2",
         "--seq-len", "32", "--peak-tflops", "1", "--dump-folder", d, "--checkpoint-interval",
         "4", "--out", f"{d}/hf"])
    g = ["generate", "--prompt", "KING:", "--max-new-tokens", "20", "--ids", "--temperature", "0"]
    hf = ids_of(run(g + ["--model", f"{d}/hf", "--bytes"] + flags))
    step = ids_of(run(g + ["--model", f"{d}/checkpoint/step-4"]))
    folder = ids_of(run(g + ["--model", f"{d}/checkpoint"]))
    assert hf == step == folder, f"checkpoint {step} / {folder} != export {hf}"
    print("training checkpoint (step folder and its parent) generates as the HF export")
    return d, flags


def crafted_model(d, head_rows, V=151936):
    """A one-block HF model in folder d (no config.json, no tokenizer: its arguments are the
    returned --set flags) whose every position's hidden state is the same, so its logits are
    the same at every step: lm_head row id is head_rows.get(id, 0) * ones (logit 64 x that)."""
    os.makedirs(d, exist_ok=True)
    D, F, hd = 64, 64, 32
    g = torch.Generator().manual_seed(0)
    t = {"model.embed_tokens.weight": torch.ones(V, D), "model.norm.weight": torch.ones(D)}
    p = "model.layers.0."
    for n, shape in [("self_attn.q_proj", (2 * hd, D)), ("self_attn.k_proj", (hd, D)),
                     ("self_attn.v_proj", (hd, D)), ("mlp.gate_proj", (F, D)),
                     ("mlp.up_proj", (F, D))]:
        t[p + n + ".weight"] = torch.randn(*shape, generator=g) * 0.1
    t[p + "self_attn.o_proj.weight"] = torch.zeros(D, 2 * hd)  # blocks add nothing: every
    t[p + "mlp.down_proj.weight"] = torch.zeros(D, F)  # position's state is the embedding (ones)
    for n in ["input_layernorm", "post_attention_layernorm"]:
        t[p + n + ".weight"] = torch.ones(D)
    t[p + "self_attn.q_norm.weight"] = torch.ones(hd)
    t[p + "self_attn.k_norm.weight"] = torch.ones(hd)
    head = torch.zeros(V, D)
    for i, w in head_rows.items():
        head[i] = w
    t["lm_head.weight"] = head
    save_file({k: v.contiguous() for k, v in t.items()}, f"{d}/model.safetensors")
    return ["--set", "n_layers=1", "--set", f"dim={D}", "--set", "n_heads=2", "--set",
            "n_kv_heads=1", "--set", f"head_dim={hd}", "--set", f"ffn_dim={F}", "--set",
            f"vocab_size={V}", "--set", "tie_embeddings=0"]


def chat_smoke(work, shared):
    tok = f"{shared}/data/qwen3_tokenizer"
    d = f"{work}/chat_model"
    # <|im_end|>: logit 64; "Hello": logit 63.36, p = 0.35 among the top 2
    flags = crafted_model(d, {151645: 1.0, 9707: 0.99})
    msgs = '[{"role": "user", "content": "Hi there"}]'
    for think in [[], ["--no-thinking"]]:
        want_n = len(run(["encode", "--chat", "--tokenizer", tok] + think, stdin=msgs).stdout.split())
        best = None
        for seed in range(3):
            r = run(["generate", "--model", d, "--tokenizer", tok, "--chat", msgs, "--top-k", "2",
                     "--top-p", "1", "--temperature", "1", "--seed", str(seed),
                     "--max-new-tokens", "60"] + flags + think)
            assert f"prompt: {want_n} tokens" in r.stderr, f"chat prompt count: {r.stderr}"
            assert "stopped at a stop token" in r.stderr, r.stderr
            assert "renders the Qwen3 chat template only" not in r.stderr, r.stderr
            text = r.stdout.rstrip("\n")
            assert text == "Hello" * (len(text) // 5), f"unexpected text {text!r}"
            best = max(best or 0, len(text) // 5)
        assert best and best > 0, "no seed produced any Hello before <|im_end|>"
        print(f"--chat{' --no-thinking' if think else ''}: template ({want_n} tokens), "
              f"streamed up to {best} Hellos, stopped at <|im_end|>")
    # a tokenizer whose template is not Qwen3's: rendered with Qwen3's all the same, said
    other = f"{shared}/data/test_tokenizer"
    for cmd in (["encode", "--chat", "--tokenizer", other],
                ["generate", "--model", d, "--tokenizer", other, "--chat", msgs,
                 "--max-new-tokens", "1"] + flags):
        r = subprocess.run([TITAN] + cmd, input=msgs, capture_output=True, text=True)
        assert "titan renders the Qwen3 chat template only" in r.stderr, (cmd[0], r.stderr)
    print("--chat with another template: said (encode, generate)")
    return d, flags


def hf_constant_model(d, head, eos_token_id=None, V=300):
    """A one-block Qwen3ForCausalLM saved in folder d (no generation_config.json) whose every
    position's hidden state is ones (embedding and norms ones, o_proj / down_proj zero), so its
    logits are the same at every step: head(w) fills lm_head.weight w [V, 64] (logit = 64 x a
    row's value). Returns the model."""
    from transformers import Qwen3Config
    D, F, hd = 64, 64, 32
    shutil.rmtree(d, ignore_errors=True)
    cfg = Qwen3Config(vocab_size=V, hidden_size=D, intermediate_size=F, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=hd,
                      tie_word_embeddings=False, eos_token_id=eos_token_id, bos_token_id=None,
                      pad_token_id=None)
    model = Qwen3ForCausalLM(cfg).eval()
    sd = model.state_dict()
    with torch.no_grad():
        for k in sd:
            if k.endswith("norm.weight") or k.endswith("layernorm.weight") or "embed" in k:
                sd[k].fill_(1.0)
            elif "o_proj" in k or "down_proj" in k:
                sd[k].zero_()
        head(sd["lm_head.weight"])
    model.save_pretrained(d)
    if os.path.exists(f"{d}/generation_config.json"):
        os.remove(f"{d}/generation_config.json")
    return model


def hf_defaults(work):
    """Folders of a one-block byte-level model (vocabulary 300) whose every step's greedy
    token is 258 (the crafted_model construction: a constant hidden state; lm_head rows 258
    and 257 score 64 and 63.36, so sampling at temperature 1 draws 257 with p = 0.35),
    declaring eos ids and sampling settings in generation_config.json or config.json:
    `titan generate` with no sampling option gives transformers' generate() with none (ids
    and stop), which takes them from the folder."""
    cases = [  # name, config.json eos, generation_config.json (None: no file)
        ("gen_list", 257, {"eos_token_id": [258, 257]}),
        ("config_only", 258, None),
        ("not_greedy", 257, {"eos_token_id": 257, "do_sample": False}),
        ("top_k_1", 1, {"do_sample": True, "top_k": 1, "temperature": 1.0}),
    ]
    for name, cfg_eos, gen in cases:
        d = f"{work}/hf_defaults_{name}"

        def head(w):  # 258 first, 257 a close second, the rest 0
            w.zero_()
            w[258], w[257] = 1.0, 0.99
        hf_constant_model(d, head, eos_token_id=cfg_eos)
        if gen is not None:
            json.dump(gen, open(f"{d}/generation_config.json", "w"))
        ref = Qwen3ForCausalLM.from_pretrained(d, attn_implementation="eager").eval()
        x = torch.tensor([list(b"ab")])
        with torch.no_grad():
            want = ref.generate(x, max_new_tokens=8, pad_token_id=0)[0, 2:].tolist()
        eos = (gen or {}).get("eos_token_id", cfg_eos)
        eos = set(eos if isinstance(eos, list) else [eos])
        stops = bool(want) and want[-1] in eos
        r = run(["generate", "--model", d, "--bytes", "--ids", "--prompt", "ab",
                 "--max-new-tokens", "8"])
        got = ids_of(r)
        assert got == (want[:-1] if stops else want), f"{name}: titan {got}, HF {want}"
        assert (f"generated {len(want)} tokens" in r.stderr and
                ("stopped at a stop token" in r.stderr) == stops), f"{name}: {r.stderr}"
        assert "does not apply" not in r.stderr, r.stderr
        print(f"{name}: {len(want)} tokens, {'stopped at eos' if stops else 'no stop'}, as HF")
    # a setting transformers applies and titan does not is said, not dropped (null, or a
    # neutral value, is nothing to say)
    d = f"{work}/hf_defaults_top_k_1"
    json.dump({"do_sample": True, "top_k": 1, "repetition_penalty": 1.3, "min_p": None,
               "typical_p": 1.0}, open(f"{d}/generation_config.json", "w"))
    r = run(["generate", "--model", d, "--bytes", "--prompt", "ab", "--max-new-tokens", "2"])
    assert "sets repetition_penalty, which titan generate does not apply" in r.stderr and \
        "min_p" not in r.stderr and "typical_p" not in r.stderr, r.stderr
    d = f"{work}/hf_defaults_gen_list"
    open(f"{d}/generation_config.json", "w").write('{"eos_token_id": [258,')
    r = run(["generate", "--model", d, "--bytes", "--prompt", "ab"], ok=False)
    assert r.returncode == 1 and "generation_config.json" in r.stderr, r.stderr
    print("a folder's eos ids (generation_config.json, else config.json) and sampling settings "
          "(generation_config.json) as in transformers")


def sampling_distribution(work):
    """Sampling draws from the distribution transformers' warpers leave (temperature, then
    top-k, then top-p on the scaled softmax of the survivors): a crafted byte-level model whose
    logits are the same at every step (ids 100..104 at log 0.4, 0.3, 0.15, 0.1, 0.05, all
    others at -30) generates 2000 tokens per setting; every id's frequency must be its
    probability under LogitsProcessorList(Temperature, TopK, TopP) within 4.5 standard errors,
    and ids that list removes are never drawn (top-p before the temperature would keep id 103
    at T 0.5, top-p 0.9)."""
    from transformers.generation.logits_process import (LogitsProcessorList,
                                                        TemperatureLogitsWarper,
                                                        TopKLogitsWarper, TopPLogitsWarper)
    V, D = 300, 64
    d = f"{work}/sampling_model"
    p0 = torch.tensor([0.4, 0.3, 0.15, 0.1, 0.05])

    def head(w):  # hidden state ones: logit = D x row value
        w.fill_(-30.0 / D)
        w[100:105] = (p0.log() / D)[:, None]
    model = hf_constant_model(d, head, V=V)
    with torch.no_grad():
        logits = model(torch.tensor([[65]])).logits[0, -1:].float()
    N = 2000
    for T, k, p in [(0.5, 0, 0.9), (2.0, 3, 0.8), (1.0, 0, 1.0), (0.7, 4, 0.95)]:
        procs = LogitsProcessorList([TemperatureLogitsWarper(T)] +
                                    ([TopKLogitsWarper(k)] if k else []) +
                                    ([TopPLogitsWarper(p)] if p < 1 else []))
        want = torch.softmax(procs(None, logits.clone()), -1)[0].double()
        r = run(["generate", "--model", d, "--bytes", "--ids", "--prompt", "A",
                 "--max-new-tokens", str(N), "--temperature", str(T), "--top-k", str(k),
                 "--top-p", str(p), "--seed", "11"])
        ids = ids_of(r)
        assert len(ids) == N, f"{len(ids)} ids, {N} expected"
        got = torch.bincount(torch.tensor(ids), minlength=V).double() / N
        removed = want == 0
        assert got[removed].sum() == 0, \
            f"T {T} k {k} p {p}: drew ids HF removes: {got.nonzero().flatten().tolist()}"
        se = (want * (1 - want) / N).sqrt()
        worst = ((got - want).abs() / se.clamp_min(1e-12))[~removed].max().item()
        assert worst < 4.5, f"T {T} k {k} p {p}: {got[100:105].tolist()} vs HF {want[100:105].tolist()}"
        print(f"T {T} top-k {k} top-p {p}: frequencies of HF's warped distribution "
              f"(kept {int((~removed).sum())} ids, worst {worst:.1f} standard errors)")


def hostile(work, ckpt_dir, flags):
    def fails(args, needle, stdin=None):
        r = run(args, ok=False, stdin=stdin)
        assert r.returncode == 1, f"{args}: exit {r.returncode} {r.stderr}"
        assert needle in r.stderr, f"{args}: {r.stderr!r} lacks {needle!r}"
    fails(["generate", "--model", f"{work}/nope", "--prompt", "x"], f"{work}/nope")
    bad = f"{work}/bad_ckpt/step-2"
    os.makedirs(bad, exist_ok=True)
    open(f"{bad}/metadata.json", "w").write('{"format": ')
    fails(["generate", "--model", bad, "--prompt", "x"], "metadata.json")
    trunc = f"{work}/trunc"
    os.makedirs(trunc, exist_ok=True)
    data = open(f"{ckpt_dir}/hf/model.safetensors", "rb").read()
    open(f"{trunc}/model.safetensors", "wb").write(data[: len(data) // 2])
    fails(["generate", "--model", trunc, "--prompt", "x"] + flags, "model.safetensors")
    fails(["generate", "--model", f"{ckpt_dir}/hf", "--prompt", "x", "--chat", "[", ] + flags,
          "exclude")
    print("hostile input: clear errors, exit status 1")


def main():
    global TITAN
    TITAN, shared, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    torch.manual_seed(0)
    for d in sys.argv[4:]:
        greedy_parity(d, "ROMEO:\nWhat say", 40)
    ckpt_dir, flags = checkpoint_parity(work, shared)
    chat_smoke(work, shared)
    hf_defaults(work)
    sampling_distribution(work)
    hostile(work, ckpt_dir, flags)


if __name__ == "__main__":
    main()
