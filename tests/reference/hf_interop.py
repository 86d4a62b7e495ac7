"""Hugging Face interop of titan against the real readers and writers (transformers,
safetensors).

  counts TITAN DATA      `titan inspect CONFIG` of every official config.json (dense and MoE)
                         prints HF's parameter count (Qwen3ForCausalLM / Qwen3MoeForCausalLM
                         built on the meta device)
  export HELPER WORK     titan exports (F32/BF16/F16, one file and sharded, tied and untied):
                         the safetensors package opens every file, the index matches the
                         shards (no empty shard, no lm_head when tied), transformers'
                         from_pretrained reports no missing/unexpected keys, holds titan's
                         weights (cast to the export dtype by torch), and its logits equal
                         titan's (max abs diff <= 1e-5)
  import HELPER TITAN WORK
  import_moe HELPER TITAN WORK   the same for Qwen3MoeForCausalLM (experts saved per expert)
                         transformers saves models (save_pretrained, sharded, fp32 and bf16,
                         tied and untied): titan loads them with the same logits (<= 1e-5), and
                         HF -> titan training checkpoint -> HF gives byte-identical weight files
                         and index

  inspect TITAN CORPUS   `titan inspect` exits non-zero naming the file for every bad_* file of
                         the safetensors fuzz corpus, and lists the tensors of every good_* one

  config TITAN WORK      config.json variants as transformers reads them (AutoConfig, then the
                         model it builds): titan's head_dim and RoPE (the inverse frequencies of
                         its theta) equal the model's, or titan refuses the field by name (RoPE
                         scalings, per-layer RoPE, partial rotary, dropout); convert refuses
                         export options for an HF source and an HF folder as its output (files
                         untouched); two differing expert counts (num_experts,
                         num_local_experts) refused; a run trained from a config with
                         max_position_embeddings
                         32768 exports 32768; a tensor in two shards is named as such

  loads HELPER TITAN WORK  what an HF folder's weights load as: a sharded folder mixing BF16,
                         F16 (subnormals, +-65504, -0), F32 and F64 tensors loads as torch's
                         .float() of each, bit for bit (HF -> titan -> HF F32), F64 values that
                         float32 rounds said in a warning; refused naming the file and tensor: a
                         NaN or infinite weight, an F64 value beyond float32, F8_E4M3 / F8_E8M0 /
                         I8 weights, a config.json with quantization_config (Qwen3-*-FP8's:
                         F8_E4M3 weights with weight_scale_inv block scales); an index naming a
                         missing shard, a path outside the folder (../, absolute) or leaving out
                         a shard's tensor; a symlinked shard (the Hub cache's layout) loads. An
                         export in float16 (bfloat16) of a weight beyond its range, 1e5 (3.4e38),
                         is refused naming it (not written as inf); 1e5 in bfloat16 is torch's
                         cast.
                         Qwen3MoeForCausalLM with norm_topk_prob false and router_aux_loss_coef
                         0.05: titan's logits equal HF's, and its bf16 export loads in
                         transformers (default dtype: bfloat16, from config.json) with no
                         missing/unexpected keys, those fields kept and HF's bf16 logits

HELPER is the test_hf_io binary (tests/parity/test_hf_io.c), TITAN the titan binary.
"""
import json
import os
import re
import shutil
import subprocess
import sys

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import (AutoModelForCausalLM, Qwen3Config, Qwen3ForCausalLM, Qwen3MoeConfig,
                          Qwen3MoeForCausalLM)

torch.manual_seed(0)
TOL = 1e-5
FAILS = []


def check(cond, msg):
    if not cond:
        FAILS.append(msg)
        print(f"FAIL {msg}")


def run(*cmd):
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    if r.returncode != 0:
        print(r.stdout, r.stderr)
        raise SystemExit(f"command failed: {' '.join(map(str, cmd))}")
    return r.stdout


def counts(titan, data):
    cfgdir = f"{data}/qwen3_configs"
    for name in sorted(os.listdir(cfgdir)):
        if not name.startswith("Qwen3-") or not name.endswith(".json"):
            continue
        with open(f"{cfgdir}/{name}") as f:
            raw = json.load(f)
        moe = raw["architectures"][0] == "Qwen3MoeForCausalLM"
        cfg = (Qwen3MoeConfig if moe else Qwen3Config)(**raw)
        with torch.device("meta"):
            m = (Qwen3MoeForCausalLM if moe else Qwen3ForCausalLM)(cfg)
        want = sum(p.numel() for p in m.parameters())  # a tied tensor once
        out = run(titan, "inspect", f"{cfgdir}/{name}")
        got = int(re.search(r"^total\s+(\d+)", out, re.M).group(1))
        check(got == want, f"{name}: titan {got} != HF {want}")
        print(f"{name:32s} titan {got:>16,d}  HF {want:>16,d}  {'ok' if got == want else 'MISMATCH'}")


def tokens_file(path, vocab):
    g = torch.Generator().manual_seed(5)
    toks = torch.randint(0, vocab, (2, 12), generator=g)
    save_file({"tokens": toks}, path)
    return toks


def hf_logits(folder, toks):
    model, info = AutoModelForCausalLM.from_pretrained(
        folder, output_loading_info=True, attn_implementation="eager", dtype=torch.float32)
    with torch.no_grad():
        return model, info, model(toks).logits


def titan_logits(helper, folder, tok_path, out):
    run(helper, "logits", folder, tok_path, out)
    with safe_open(out, "pt") as f:
        return f.get_tensor("logits")


def weight_files(folder):
    return sorted(f for f in os.listdir(folder)
                  if f == "model.safetensors" or re.fullmatch(r"model-\d{5}-of-\d{5}\.safetensors", f))


def check_folder_files(folder, tied):
    """Every weight file opens with safetensors; the index (if any) matches them exactly."""
    files = weight_files(folder)
    names = {}
    for fn in files:
        with safe_open(f"{folder}/{fn}", "pt") as f:
            check(f.metadata() == {"format": "pt"}, f"{folder}/{fn}: metadata {f.metadata()}")
            keys = list(f.keys())
            check(len(keys) > 0, f"{folder}/{fn}: empty shard")
            for k in keys:
                check(k not in names, f"{folder}: {k} in two files")
                names[k] = (fn, f.get_slice(k).get_shape(), f.get_slice(k).get_dtype())
    index = f"{folder}/model.safetensors.index.json"
    if len(files) > 1:
        with open(index) as f:
            idx = json.load(f)
        check({k: v[0] for k, v in names.items()} == idx["weight_map"], f"{folder}: index != files")
        esize = {"F32": 4, "BF16": 2, "F16": 2}
        total = sum(esize[d] * torch.Size(s).numel() for _, s, d in names.values())
        check(idx["metadata"]["total_size"] == total, f"{folder}: total_size")
    else:
        check(not os.path.exists(index), f"{folder}: index next to a single file")
    check(("lm_head.weight" in names) != tied, f"{folder}: lm_head.weight present={not tied}")
    return names


def export(helper, work):
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    tok_path = f"{work}/tokens.safetensors"
    toks = tokens_file(tok_path, 128)
    for tie in (0, 1):
        ref = f"{work}/tie{tie}_float32_single"
        run(helper, "export", ref, "float32", "5GB", tie)
        with safe_open(f"{ref}/model.safetensors", "pt") as f:
            master = {k: f.get_tensor(k) for k in f.keys()}  # titan's fp32 weights
        for dtype in ("float32", "bfloat16", "float16"):
            for shard in ("5GB", "20KB"):
                d = f"{work}/tie{tie}_{dtype}_{shard}"
                if d != ref:
                    run(helper, "export", d, dtype, shard, tie)
                names = check_folder_files(d, tie)
                if shard == "20KB":
                    check(len(weight_files(d)) > 2, f"{d}: expected several shards")
                model, info, lh = hf_logits(d, toks)
                bad = {k: v for k, v in info.items() if v}
                check(not bad, f"{d}: loading info {bad}")
                tied = model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
                check(tied == bool(tie), f"{d}: tied {tied}")
                # HF holds titan's weights, rounded to the export dtype by torch
                tdt = getattr(torch, dtype)
                sd = model.state_dict()
                for k, v in master.items():
                    check(torch.equal(sd[k], v.to(tdt).float()), f"{d}: {k} differs from torch's cast")
                lt = titan_logits(helper, d, tok_path, f"{d}.logits.safetensors")
                diff = (lt - lh).abs().max().item()
                check(diff <= TOL, f"{d}: logits max abs diff {diff:.3g}")
                print(f"{'ok ' if not FAILS else 'see'} export {os.path.basename(d):28s} {len(weight_files(d))} file(s), "
                      f"{len(names)} tensors, logits diff {diff:.2e}")


def import_(helper, titan, work):
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    tok_path = f"{work}/tokens.safetensors"
    toks = tokens_file(tok_path, 160)
    for tie in (False, True):
        cfg = Qwen3Config(vocab_size=160, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                          tie_word_embeddings=tie, rope_theta=10000.0, rms_norm_eps=1e-6,
                          max_position_embeddings=512)
        torch.manual_seed(11 + tie)
        model = Qwen3ForCausalLM(cfg).eval()
        with torch.no_grad():  # non-trivial norms
            for n, p in model.named_parameters():
                if "norm" in n:
                    p.add_(0.1 * torch.randn_like(p))
        roundtrip(model, f"{work}/hf_tie{int(tie)}", helper, titan, tok_path, toks, ("20KB", "50GB"))


def import_moe(helper, titan, work):
    """Qwen3MoeForCausalLM: transformers 5 fuses the experts in memory and saves them per
    expert (mlp.experts.j.{gate,up,down}_proj.weight) in its own order; 11 blocks and 12
    experts so that numeric (not string) ordering of block and expert indices matters."""
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    tok_path = f"{work}/tokens.safetensors"
    toks = tokens_file(tok_path, 96)
    cfg = Qwen3MoeConfig(vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=11,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                         num_experts=12, num_experts_per_tok=3, moe_intermediate_size=16,
                         norm_topk_prob=True, tie_word_embeddings=False, rope_theta=1e6,
                         rms_norm_eps=1e-6, max_position_embeddings=512)
    torch.manual_seed(21)
    model = Qwen3MoeForCausalLM(cfg).eval()
    with torch.no_grad():  # non-trivial norms, a router that is not all ties
        for n, p in model.named_parameters():
            if "norm" in n:
                p.add_(0.1 * torch.randn_like(p))
            if n.endswith("mlp.gate.weight"):
                p.normal_(0, 0.5)
    roundtrip(model, f"{work}/hf_moe", helper, titan, tok_path, toks, ("30KB", "50GB"))


def roundtrip(model, prefix, helper, titan, tok_path, toks, shards):
    """save_pretrained (fp32, bf16; each shard size): titan's logits equal HF's, and
    HF -> titan training checkpoint -> HF gives byte-identical weight files and index."""
    for dtype, flag in ((torch.float32, "float32"), (torch.bfloat16, "bfloat16")):
        for shard in shards:
            d = f"{prefix}_{flag}_{shard}"
            model.to(dtype).save_pretrained(d, max_shard_size=shard)
            model.float()
            # the reference: HF's own model loaded back from what it saved, in fp32
            _, info, lh = hf_logits(d, toks)
            lt = titan_logits(helper, d, tok_path, f"{d}.logits.safetensors")
            diff = (lt - lh).abs().max().item()
            check(diff <= TOL, f"{d}: titan logits differ by {diff:.3g}")
            # HF -> titan training checkpoint -> HF: the same bytes
            ck, back = f"{d}.titan", f"{d}.back"
            run(titan, "convert", d, ck)
            run(titan, "convert", ck, back, "--dtype", flag, "--max-shard-size", shard)
            files = weight_files(d)
            check(files == weight_files(back), f"{back}: files {weight_files(back)} != {files}")
            if len(files) > 1:
                files.append("model.safetensors.index.json")
            n_fail = len(FAILS)
            for fn in files:
                with open(f"{d}/{fn}", "rb") as a, open(f"{back}/{fn}", "rb") as b:
                    check(a.read() == b.read(), f"{back}/{fn} is not byte-identical to {d}/{fn}")
            if len(FAILS) == n_fail:
                print(f"ok  import {os.path.basename(d):28s} {len(weight_files(d))} file(s), "
                  f"logits diff {diff:.2e}, round trip byte-identical ({len(files)} files)")


def inspect(titan, corpus):
    for fn in sorted(os.listdir(corpus)):
        path = f"{corpus}/{fn}"
        r = subprocess.run([titan, "inspect", path], capture_output=True, text=True)
        if fn.startswith("bad_"):
            check(r.returncode != 0 and path in r.stderr and "error" in r.stderr,
                  f"inspect {fn}: rc {r.returncode}, stderr {r.stderr!r}")
        else:
            with safe_open(path, "np") as f:
                keys = list(f.keys())
            check(r.returncode == 0 and all(k in r.stdout for k in keys),
                  f"inspect {fn}: rc {r.returncode}, {r.stdout!r}")
    print(f"ok  titan inspect on {len(os.listdir(corpus))} corpus files")


def titan_args(titan, cfg_path):
    """(rc, head_dim, rope_theta, stderr) of `titan inspect CONFIG`."""
    r = subprocess.run([titan, "inspect", cfg_path], capture_output=True, text=True)
    if r.returncode:
        return r.returncode, None, None, r.stderr
    hd = int(re.search(r"head_dim (\d+)", r.stdout).group(1))
    th = float(re.search(r"rope_theta ([0-9.e+-]+)", r.stdout).group(1))
    return 0, hd, th, r.stderr


def config(titan, work):
    from transformers import AutoConfig
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    dense = Qwen3Config(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=1,
                        num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                        max_position_embeddings=32768).to_dict()
    moe = Qwen3MoeConfig(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2, num_experts=4,
                         num_experts_per_tok=2, moe_intermediate_size=16).to_dict()
    moe.pop("head_dim", None)  # Qwen3MoeConfig has none: hidden_size / heads
    rp = {"rope_type": "default", "rope_theta": 10000.0}
    # name, base, edit (None: same as HF; a string: titan refuses naming it)
    cases = [
        ("theta in rope_parameters wins over the top level", dense,
         lambda c: c.update(rope_theta=500.0, rope_parameters=dict(rp)), None),
        ("top-level theta alone", dense,
         lambda c: (c.pop("rope_parameters", None), c.update(rope_theta=500.0)), None),
        ("rope_scaling replaces rope_parameters", dense,
         lambda c: c.update(rope_scaling={"rope_type": "default"},
                            rope_parameters={"rope_type": "default", "rope_theta": 300.0}), None),
        ("an empty rope_scaling does not", dense,
         lambda c: c.update(rope_scaling={}, rope_parameters={"rope_type": "default",
                                                              "rope_theta": 300.0}), None),
        ("legacy 'type'", dense,
         lambda c: c.update(rope_parameters={"type": "default", "rope_theta": 2e4}), None),
        ("no head_dim (dense: 128)", dense, lambda c: c.pop("head_dim"), None),
        ("MoE without head_dim", moe, lambda c: None, None),
        ("MoE with head_dim 32", moe, lambda c: c.update(head_dim=32), None),
        ("linear scaling by its legacy 'type'", dense,
         lambda c: c.update(rope_parameters={"type": "linear", "factor": 4.0, "rope_theta": 1e4}),
         "rope_parameters.type"),
        ("yarn rope_scaling", dense,
         lambda c: c.update(rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                          "original_max_position_embeddings": 4096}),
         "rope_scaling.rope_type"),
        ("per-layer-type RoPE", dense,
         lambda c: c.update(rope_parameters={"full_attention": dict(rp)}),
         "rope_parameters.full_attention"),
        ("partial rotary", dense, lambda c: c.update(partial_rotary_factor=0.5),
         "partial_rotary_factor"),
        ("attention dropout", dense, lambda c: c.update(attention_dropout=0.1),
         "attention_dropout"),
        ("MoE with num_experts 8 beside num_local_experts 4 (transformers 5 takes 4)", moe,
         lambda c: c.update(num_experts=8, num_local_experts=4), "num_local_experts"),
    ]
    for i, (name, base, edit, refused) in enumerate(cases):
        c = json.loads(json.dumps(base))
        edit(c)
        d = f"{work}/cfg{i}"
        os.makedirs(d)
        with open(f"{d}/config.json", "w") as f:
            json.dump(c, f)
        rc, hd, th, err = titan_args(titan, f"{d}/config.json")
        if refused:
            check(rc != 0 and refused in err, f"{name}: titan rc {rc}, {err.strip()!r}")
            if rc != 0 and refused in err:
                print(f"ok  config: {name}: refused ({err.strip()[:110]})")
            continue
        if rc:
            check(False, f"{name}: titan refused: {err.strip()}")
            continue
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(d))
        attn = model.model.layers[0].self_attn
        inv = model.model.rotary_emb.inv_freq.double()
        mine = 1.0 / th ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd)
        ok = attn.head_dim == hd and inv.shape == mine.shape and torch.allclose(inv, mine,
                                                                                rtol=1e-6)
        check(ok, f"{name}: titan head_dim {hd} theta {th}; HF head_dim {attn.head_dim}, "
                  f"inv_freq {inv[:3].tolist()}")
        if ok:
            print(f"ok  config: {name}: head_dim {hd}, rope_theta {th:g} as HF's model")

    # convert: export options with an HF source; an HF folder as the output
    hf = f"{work}/hf"
    Qwen3ForCausalLM(Qwen3Config(**{k: v for k, v in dense.items()
                                   if k not in ("architectures", "model_type")})).save_pretrained(
        hf, max_shard_size="20KB")
    r = subprocess.run([titan, "convert", hf, f"{work}/ck", "--dtype", "bfloat16"],
                       capture_output=True, text=True)
    check(r.returncode != 0 and "--dtype" in r.stderr and not os.path.exists(f"{work}/ck"),
          f"convert HF with --dtype: rc {r.returncode} {r.stderr!r}")
    other = f"{work}/other"
    shutil.copytree(hf, other)
    before = {fn: open(f"{other}/{fn}", "rb").read() for fn in os.listdir(other)}
    r = subprocess.run([titan, "convert", hf, other], capture_output=True, text=True)
    after = {fn: open(f"{other}/{fn}", "rb").read() for fn in os.listdir(other)}
    check(r.returncode != 0 and "Hugging Face model folder" in r.stderr and before == after,
          f"convert into an HF folder: rc {r.returncode} {r.stderr!r}, changed {before != after}")
    print("ok  convert: export options and an HF output folder refused, nothing written")

    # the context a run was trained with reaches the export's config.json
    run(titan, "train", "--model.config_path", hf, "--random-tokens", "--steps", "1", "--batch",
        "1", "--seq-len", "8", "--dump-folder", f"{work}/run", "--checkpoint.enable",
        "--training.mixed_precision_param", "float32")
    run(titan, "convert", f"{work}/run/checkpoint", f"{work}/back")
    got = AutoConfig.from_pretrained(f"{work}/back").max_position_embeddings
    check(got == 32768, f"trained from max_position_embeddings 32768, exported {got}")
    print(f"ok  export of a trained checkpoint: max_position_embeddings {got}")
    # a config.json without the field: transformers' default, 32768 (titan had read 0 and
    # exported 4096, generate's context too)
    nomax = f"{work}/nomax"
    shutil.copytree(hf, nomax)
    c = json.load(open(f"{nomax}/config.json"))
    del c["max_position_embeddings"]
    json.dump(c, open(f"{nomax}/config.json", "w"))
    run(titan, "train", "--model.config_path", nomax, "--random-tokens", "--steps", "1", "--batch",
        "1", "--seq-len", "8", "--dump-folder", f"{work}/run2", "--checkpoint.enable",
        "--training.mixed_precision_param", "float32")
    run(titan, "convert", f"{work}/run2/checkpoint", f"{work}/back2")
    want = AutoConfig.from_pretrained(nomax).max_position_embeddings
    got = AutoConfig.from_pretrained(f"{work}/back2").max_position_embeddings
    check(got == want == 32768, f"config.json without max_position_embeddings: HF reads {want}, "
          f"titan exported {got}")
    print(f"ok  no max_position_embeddings: {got}, as transformers' default")

    # a tensor stored in two shards: said so, not blamed on the index
    shards = sorted(fn for fn in os.listdir(hf) if fn.startswith("model-"))
    with safe_open(f"{hf}/{shards[-1]}", "pt") as f:
        name = next(iter(f.keys()))
        extra = f.get_tensor(name)
    with safe_open(f"{hf}/{shards[0]}", "pt") as f:
        first = {k: f.get_tensor(k) for k in f.keys()}
    first[name] = extra
    save_file(first, f"{hf}/{shards[0]}", metadata={"format": "pt"})
    r = subprocess.run([titan, "inspect", hf], capture_output=True, text=True)
    check(r.returncode != 0 and "in two shards" in r.stderr and name in r.stderr,
          f"tensor in two shards: rc {r.returncode} {r.stderr!r}")
    print(f"ok  a tensor in two shards: {r.stderr.strip()[:120]}")


def loads(helper, titan, work):
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    cfg = Qwen3Config(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                      tie_word_embeddings=False, max_position_embeddings=128)
    torch.manual_seed(31)
    model = Qwen3ForCausalLM(cfg).eval()
    src = f"{work}/src"
    model.save_pretrained(src, max_shard_size="20KB")
    index = json.load(open(f"{src}/model.safetensors.index.json"))
    wm = index["weight_map"]

    def folder(name, edit, cfg_edit=None, files=None):
        """src with its tensors edited (edit(dict name -> tensor)); written as one file, or
        as src's shards when files is None (each tensor in its own shard)."""
        d = f"{work}/{name}"
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        c = json.load(open(f"{src}/config.json"))
        if cfg_edit:
            cfg_edit(c)
        json.dump(c, open(f"{d}/config.json", "w"))
        sd = {}
        for fn in sorted(set(wm.values())):
            with safe_open(f"{src}/{fn}", "pt") as f:
                sd.update({k: f.get_tensor(k) for k in f.keys()})
        edit(sd)
        if files == "one":
            save_file(sd, f"{d}/model.safetensors", metadata={"format": "pt"})
            return d, sd
        by_file = {}
        for k, v in sd.items():
            by_file.setdefault(wm.get(k, sorted(set(wm.values()))[0]), {})[k] = v
        for fn, part in by_file.items():
            save_file(part, f"{d}/{fn}", metadata={"format": "pt"})
        shutil.copy(f"{src}/model.safetensors.index.json", d)
        return d, sd

    def convert(d):
        shutil.rmtree(f"{d}.titan", ignore_errors=True)
        return subprocess.run([titan, "convert", d, f"{d}.titan"], capture_output=True, text=True)

    # a mixed-dtype sharded folder loads as torch's .float() of each tensor, bit for bit
    q, k, v, e = ("model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.k_proj.weight",
                  "model.layers.1.mlp.down_proj.weight", "model.embed_tokens.weight")

    def mixed(sd):
        sd[e] = sd[e].bfloat16()
        h = sd[q].half()
        special = torch.tensor([2.0 ** -24, -3 * 2.0 ** -24, 1023 * 2.0 ** -24, 2.0 ** -14,
                                65504.0, -65504.0, -0.0, 0.0], dtype=torch.float16)
        h.view(-1)[:special.numel()] = special
        sd[q] = h
        sd[k] = sd[k].double()  # exactly representable: nothing rounded
        sd[v] = sd[v].double() * (1 + 2.0 ** -30)  # rounded by float32
        sd["model.norm.weight"] = sd["model.norm.weight"].double()

    d, sd = folder("mixed", mixed)
    r = convert(d)
    check(r.returncode == 0, f"mixed dtypes: convert rc {r.returncode} {r.stderr!r}")
    if r.returncode == 0:
        back = f"{d}.back"
        shutil.rmtree(back, ignore_errors=True)
        run(titan, "convert", f"{d}.titan", back)
        with safe_open(f"{back}/model.safetensors", "pt") as f:
            bad = [n for n in sd if not torch.equal(f.get_tensor(n), sd[n].float())]
        check(not bad, f"mixed dtypes: not torch's .float(): {bad}")
        n_round = int((sd[v].float().double() != sd[v]).sum())
        m = re.search(r"(\d+) weight value\(s\) stored as F64 \(first in '([^']+)'\) rounded",
                      r.stderr)
        check(m is not None and int(m.group(1)) == n_round and m.group(2) == v,
              f"F64 rounding: want {n_round} values in {v} said, stderr {r.stderr!r}")
        if not bad and m:
            print(f"ok  loads: BF16/F16/F32/F64 shards = torch's .float(); {n_round} F64 "
                  "values rounded, said")

    # refused, naming the file and the tensor or field; nothing written
    w = "model.layers.0.mlp.down_proj.weight"
    fp8_cfg = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
               "weight_block_size": [128, 128]}

    def fp8(sd):
        sd[w] = sd[w].to(torch.float8_e4m3fn)
        sd[w + "_scale_inv"] = torch.ones(1, 1, dtype=torch.float32)

    def setv(dtype, x):
        def f(sd):
            sd[w] = sd[w].to(dtype)
            sd[w].view(-1)[5] = x
        return f

    cases = [
        ("nan_bf16", setv(torch.bfloat16, float("nan")), None, ["model.safetensors", w, "NaN"]),
        ("inf_f16", setv(torch.float16, float("-inf")), None, ["model.safetensors", w, "infinite"]),
        ("f64_overflow", setv(torch.float64, 1e300), None,
         ["model.safetensors", w, "overflows float32"]),
        ("fp8_quantized", fp8, lambda c: c.update(quantization_config=fp8_cfg),
         ["config.json", "quantization_config", "fp8"]),
        ("fp8_no_scale", lambda sd: sd.update({w: sd[w].to(torch.float8_e4m3fn)}), None,
         ["model.safetensors", w, "F8_E4M3"]),
        ("e8m0", lambda sd: sd.update({w: sd[w].to(torch.float8_e8m0fnu)}), None,
         ["model.safetensors", w, "F8_E8M0"]),
        ("i8", lambda sd: sd.update({w: (sd[w] * 100).to(torch.int8)}), None,
         ["model.safetensors", w, "I8"]),
    ]
    for name, edit, cedit, want in cases:
        d, _ = folder(name, edit, cedit, files="one")
        r = convert(d)
        ok = r.returncode != 0 and all(x in r.stderr for x in want) and not os.path.exists(
            f"{d}.titan")
        check(ok, f"{name}: rc {r.returncode}, want {want} in {r.stderr.strip()!r}")
        if ok:
            print(f"ok  loads: {name} refused: {r.stderr.strip()[:150]}")

    # an export in float16 of a weight beyond its range (65504): refused naming the tensor
    # and element, not written as inf; bfloat16 holds it (torch's cast)
    d, sd = folder("big", lambda sd: sd[w].view(-1).__setitem__(3, 1e5), files="one")
    r = convert(d)
    check(r.returncode == 0, f"big: convert rc {r.returncode} {r.stderr!r}")
    for flag, ok_want in (("float16", False), ("bfloat16", True)):
        out = f"{d}.{flag}"
        shutil.rmtree(out, ignore_errors=True)
        r = subprocess.run([titan, "convert", f"{d}.titan", out, "--dtype", flag],
                           capture_output=True, text=True)
        if ok_want:
            with safe_open(f"{out}/model.safetensors", "pt") as f:
                got = f.get_tensor(w)
            ok = r.returncode == 0 and torch.equal(got, sd[w].bfloat16())
        else:
            ok = (r.returncode != 0 and w in r.stderr and "element 3 = 100000" in r.stderr
                  and "float16" in r.stderr and not os.path.exists(f"{out}/model.safetensors"))
        check(ok, f"export {flag} of 1e5: rc {r.returncode} {r.stderr.strip()!r}")
        if ok:
            print(f"ok  loads: export {flag} of a weight 1e5: "
                  f"{'torch cast' if ok_want else r.stderr.strip()[:110]}")
    # 3.4e38 (finite in float32) rounds to inf in bfloat16 as torch casts it: refused
    d, sd = folder("huge", lambda sd: sd[w].view(-1).__setitem__(7, 3.4e38), files="one")
    check(torch.isinf(sd[w].bfloat16().view(-1)[7]), "3.4e38 is inf in torch's bfloat16")
    run(titan, "convert", d, f"{d}.titan")
    shutil.rmtree(f"{d}.bf16", ignore_errors=True)
    r = subprocess.run([titan, "convert", f"{d}.titan", f"{d}.bf16", "--dtype", "bfloat16"],
                       capture_output=True, text=True)
    check(r.returncode != 0 and w in r.stderr and "element 7 = 3.39" in r.stderr,
          f"export bfloat16 of 3.4e38: rc {r.returncode} {r.stderr.strip()!r}")

    # hostile indexes: refused naming the index and the tensor; a symlinked shard loads
    first = sorted(set(wm.values()))[0]
    victim = next(n for n, fn in wm.items() if fn == first)
    idx_cases = [
        ("missing_shard", lambda d, ix: ix["weight_map"].update({victim: "model-00099-of-00099.safetensors"}),
         "does not exist"),
        ("dotdot", lambda d, ix: ix["weight_map"].update({victim: f"../src/{first}"}),
         "is not a file name in the folder"),
        ("absolute", lambda d, ix: ix["weight_map"].update({victim: os.path.abspath(f"{src}/{first}")}),
         "is not a file name in the folder"),
        ("unindexed", lambda d, ix: ix["weight_map"].pop(victim), "is not in the index"),
        ("symlink", lambda d, ix: (os.remove(f"{d}/{first}"),
                                   os.symlink(os.path.abspath(f"{src}/{first}"), f"{d}/{first}")),
         None),
    ]
    for name, edit, want in idx_cases:
        d = f"{work}/idx_{name}"
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(src, d)
        ix = json.load(open(f"{d}/model.safetensors.index.json"))
        edit(d, ix)
        json.dump(ix, open(f"{d}/model.safetensors.index.json", "w"))
        r = convert(d)
        if want is None:
            ok = r.returncode == 0
        else:
            ok = (r.returncode != 0 and want in r.stderr and victim in r.stderr
                  and not os.path.exists(f"{d}.titan"))
        check(ok, f"index {name}: rc {r.returncode} {r.stderr.strip()!r}")
        if ok:
            print(f"ok  loads: index {name}: {'loads' if want is None else r.stderr.strip()[:120]}")

    # MoE: norm_topk_prob false, a non-default aux coefficient; titan's bf16 export in HF
    mcfg = Qwen3MoeConfig(vocab_size=64, hidden_size=32, intermediate_size=48,
                          num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                          head_dim=8, num_experts=6, num_experts_per_tok=2,
                          moe_intermediate_size=16, norm_topk_prob=False,
                          router_aux_loss_coef=0.05, max_position_embeddings=128)
    torch.manual_seed(32)
    moe = Qwen3MoeForCausalLM(mcfg).eval()
    with torch.no_grad():
        for n, p in moe.named_parameters():
            if n.endswith("mlp.gate.weight"):
                p.normal_(0, 0.5)
    md = f"{work}/moe"
    moe.save_pretrained(md)
    tok_path = f"{work}/tokens.safetensors"
    toks = tokens_file(tok_path, 64)
    with torch.no_grad():
        lh = moe(toks).logits
    lt = titan_logits(helper, md, tok_path, f"{md}.logits.safetensors")
    diff = (lt - lh).abs().max().item()
    check(diff <= TOL, f"MoE norm_topk_prob false: titan logits differ by {diff:.3g}")
    run(titan, "convert", md, f"{md}.titan")
    run(titan, "convert", f"{md}.titan", f"{md}.bf16", "--dtype", "bfloat16")
    back, info = AutoModelForCausalLM.from_pretrained(f"{md}.bf16", output_loading_info=True)
    bad = {k: x for k, x in info.items() if x}
    c = back.config
    check(not bad and back.dtype == torch.bfloat16 and c.dtype == torch.bfloat16
          and c.norm_topk_prob is False and c.router_aux_loss_coef == 0.05
          and c.decoder_sparse_step == 1 and c.mlp_only_layers == [],
          f"MoE bf16 export: info {bad}, dtype {back.dtype}/{c.dtype}, norm_topk_prob "
          f"{c.norm_topk_prob}, aux {c.router_aux_loss_coef}")
    # the reference: HF's own bf16 save of the model, loaded the same way (a model cast with
    # .to() would also cast its RoPE buffer, which from_pretrained keeps in fp32)
    moe.to(torch.bfloat16).save_pretrained(f"{md}.hf_bf16")
    ref = AutoModelForCausalLM.from_pretrained(f"{md}.hf_bf16")
    sr, sb = ref.state_dict(), back.state_dict()
    check(sr.keys() == sb.keys() and all(torch.equal(sr[n], sb[n]) for n in sr),
          "MoE bf16 export: weights differ from HF's bf16 save")
    with torch.no_grad():
        want = ref(toks).logits
        got = back(toks).logits
    check(torch.equal(got, want), f"MoE bf16 export: logits differ from HF's bf16 model by "
                                  f"{(got.float() - want.float()).abs().max().item():.3g}")
    print(f"ok  loads: MoE norm_topk_prob false: logits diff {diff:.2e}; bf16 export loads as "
          f"bfloat16 in transformers, same logits as HF's bf16 model")


def main():
    mode = sys.argv[1]
    if mode == "counts":
        counts(*sys.argv[2:4])
    elif mode == "export":
        export(*sys.argv[2:4])
    elif mode == "inspect":
        inspect(*sys.argv[2:4])
    elif mode == "config":
        config(*sys.argv[2:4])
    elif mode == "import":
        import_(*sys.argv[2:5])
    elif mode == "import_moe":
        import_moe(*sys.argv[2:5])
    elif mode == "loads":
        loads(*sys.argv[2:5])
    else:
        raise SystemExit(__doc__)
    if FAILS:
        print(f"{len(FAILS)} failure(s)")
        sys.exit(1)
    print("all checks passed")


if __name__ == "__main__":
    main()
