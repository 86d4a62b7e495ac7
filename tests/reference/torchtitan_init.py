#!/usr/bin/env python3
"""titan's `model.init_weights = "torchtitan"` against torchtitan v0.2.2's Qwen3 init rules
(torchtitan/models/qwen3/model/model.py and models/moe/moe.py at tag v0.2.2,
Qwen3Model.init_weights with depth_init), applied here with torch alone to Hugging Face's
Qwen3 / Qwen3-MoE models (transformers only supplies the forward).

The rules (s_l = 0.02 / sqrt(2 (l + 1)) with depth_init, else 0.02 / sqrt(2 n_layers);
trunc(std, a, b) = torch.nn.init.trunc_normal_, torchtitan's default cut a, b = -2, 2):
  embedding             normal(0, 1)                  (untied; tied: overwritten by lm_head's)
  q, k, v projections   trunc(0.02)                   o projection     trunc(s_l)
  FFN / expert gate     trunc(0.02)                   up, down         trunc(s_l)
  router gate           trunc(s_l)                    RMSNorm weights  1
  lm_head               trunc(D^-0.5, -3 D^-0.5, 3 D^-0.5)

Checks, all seedless (distributions, not draws):
1. groups: for each parameter group (every weight of every block, expert stacks pooled,
   embedding, lm_head) titan's initial weights (a seed checkpoint, exported to HF by
   `titan convert`) have the reference's mean and std within sampling error (5 standard
   errors of the difference), truncated groups stay inside their cut, norms are exactly 1;
   for a tied dense model (depth_init) and an untied MoE model (depth_init = false).
2. first loss: titan's step-1 loss on random tokens (seeds 1..K = 4, 4 x 64 tokens) has the mean of the
   reference model's loss (K torch seeds, uniform random tokens) within 4 standard errors
   (floor 0.01); titan's default init (normal) must fall outside that band (the check can
   fail).
Usage: torchtitan_init.py TITAN [--first-loss-only]
"""
import json
import math
import os
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn.functional as F
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_reference import build_model  # noqa: E402  (the one HF model builder of the tests)

DENSE = dict(flavor="debugmodel", dim=256, n_layers=8, n_heads=16, n_kv_heads=8, head_dim=128,
             ffn_dim=3072, vocab_size=2048, tie_embeddings=1, rope_theta=1e6, norm_eps=1e-6,
             depth_init=True)
# debugmodel_moe cut to 2 blocks of 16 experts, untied, depth_init = false
MOE = dict(flavor="debugmodel_moe", dim=256, n_layers=2, n_heads=16, n_kv_heads=8, head_dim=128,
           ffn_dim=3072, vocab_size=2048, tie_embeddings=0, rope_theta=1e6, norm_eps=1e-6,
           n_experts=16, top_k=8, moe_ffn_dim=768, norm_topk_prob=1, router_aux_loss_coef=0.0,
           aux=0, depth_init=False)


def titan_args(c):
    a = ["--model.flavor", c["flavor"], "--model.n_layers", str(c["n_layers"]),
         "--model.init_weights", "torchtitan"]
    if c.get("n_experts"):
        a += ["--model.num_experts", str(c["n_experts"])]
    if not c["depth_init"]:
        a += ["--model.depth_init", "false"]
    return a


def rule(name, c):
    """(std, cut) of an HF parameter (disk or in-memory name) under torchtitan v0.2.2;
    cut None = no truncation; std None = ones (a norm)."""
    d = c["dim"] ** -0.5
    if name.endswith("norm.weight"):
        return None, None
    if name == "lm_head.weight" or (name == "model.embed_tokens.weight" and c["tie_embeddings"]):
        return d, 3 * d
    if name == "model.embed_tokens.weight":
        return 1.0, None
    layer = int(name.split(".")[2])
    depth = 0.02 / math.sqrt(2 * (layer + 1 if c["depth_init"] else c["n_layers"]))
    plain = any(k in name for k in ("q_proj", "k_proj", "v_proj", "gate_proj"))
    return (0.02 if plain else depth), 2.0


def torchtitan_init(model, c, seed):
    """torchtitan's init_weights on an HF model, in its order (embedding, blocks, lm_head)."""
    torch.manual_seed(seed)
    named = dict(model.named_parameters(remove_duplicate=False))
    tt = torch.nn.init.trunc_normal_
    with torch.no_grad():
        torch.nn.init.normal_(named["model.embed_tokens.weight"])
        for name, p in named.items():
            if name in ("model.embed_tokens.weight", "lm_head.weight"):
                continue
            if name.endswith("mlp.experts.gate_up_proj"):  # [E, 2F, D]: gate rows, up rows
                f = p.shape[1] // 2
                g, u = rule(name.replace("gate_up_proj", "0.gate_proj.weight"), c)[0], \
                    rule(name.replace("gate_up_proj", "0.up_proj.weight"), c)[0]
                p[:, :f].copy_(tt(torch.empty_like(p[:, :f]), std=g, a=-2, b=2))
                p[:, f:].copy_(tt(torch.empty_like(p[:, f:]), std=u, a=-2, b=2))
                continue
            std, cut = rule(name.replace("mlp.experts.down_proj", "mlp.experts.0.down_proj.weight"), c)
            if std is None:
                p.fill_(1.0)
            else:
                tt(p, std=std, a=-cut, b=cut)
        std, cut = rule("lm_head.weight", c)
        tt(named["lm_head.weight"], std=std, a=-cut, b=cut)  # tied: the embedding too


def group_of(disk_name):
    """model.layers.0.mlp.experts.5.up_proj.weight -> model.layers.0.mlp.experts.up_proj.weight"""
    parts = disk_name.split(".")
    if "experts" in parts:
        i = parts.index("experts")
        if parts[i + 1].isdigit():
            del parts[i + 1]
    return ".".join(parts)


def groups(tensors):
    out = {}
    for n, t in tensors.items():
        out.setdefault(group_of(n), []).append(t.detach().double().reshape(-1))
    return {g: torch.cat(v) for g, v in out.items()}


def ref_disk(model):
    """The reference model's weights under HF's on-disk names (experts split)."""
    out = {}
    for name, p in model.named_parameters():
        if name.endswith("mlp.experts.gate_up_proj"):
            f = p.shape[1] // 2
            pre = name[: -len("gate_up_proj")]
            for j in range(p.shape[0]):
                out[f"{pre}{j}.gate_proj.weight"] = p[j, :f]
                out[f"{pre}{j}.up_proj.weight"] = p[j, f:]
        elif name.endswith("mlp.experts.down_proj"):
            pre = name[: -len("down_proj")]
            for j in range(p.shape[0]):
                out[f"{pre}{j}.down_proj.weight"] = p[j]
        else:
            out[name] = p
    return out


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {r.returncode}:\n{r.stdout}\n{r.stderr}")
    return r


def check_groups(titan, c, tmp):
    name = c["flavor"]
    d = os.path.join(tmp, name)
    run([titan, "train", *titan_args(c), "--checkpoint.enable", "--checkpoint.create_seed_checkpoint",
         "--training.local_batch_size", "1", "--training.seq_len", "64", "--job.dump_folder", d],
        env=dict(os.environ, OMP_NUM_THREADS="2"))
    run([titan, "convert", os.path.join(d, "checkpoint"), os.path.join(d, "hf")])
    mine = groups(load_file(os.path.join(d, "hf", "model.safetensors")))
    ref_model = build_model(dict(c, seq_len=64))
    torchtitan_init(ref_model, c, seed=1)
    ref = groups(ref_disk(ref_model))
    if c["tie_embeddings"]:
        ref.pop("lm_head.weight", None)  # the same tensor as the embedding; HF exports it once
    if set(mine) != set(ref):
        sys.exit(f"FAIL {name}: groups differ: {sorted(set(mine) ^ set(ref))}")
    worst = 0.0
    for g in sorted(ref):
        a, b = mine[g], ref[g]
        std, cut = rule(g.replace("mlp.experts.", "mlp.experts.0."), c)
        if std is None:
            if not (torch.all(a == 1) and torch.all(b == 1)):
                sys.exit(f"FAIL {name} {g}: a norm weight is not 1")
            continue
        n, m = a.numel(), b.numel()
        sa, sb = a.std().item(), b.std().item()
        # standard errors of the difference: mean (std/sqrt n each), std (std/sqrt(2n) each;
        # a truncated normal's kurtosis is below 3, so this bounds it)
        se_mean = math.sqrt(sa * sa / n + sb * sb / m)
        se_std = math.sqrt(sa * sa / (2 * n) + sb * sb / (2 * m))
        z = max(abs(a.mean().item() - b.mean().item()) / se_mean, abs(sa - sb) / se_std)
        worst = max(worst, z)
        if z > 5:
            sys.exit(f"FAIL {name} {g}: titan mean {a.mean().item():.3e} std {sa:.6f} vs "
                     f"torchtitan reference mean {b.mean().item():.3e} std {sb:.6f} ({z:.1f} SE)")
        if cut is not None and (a.abs().max().item() > cut * (1 + 1e-6)):
            sys.exit(f"FAIL {name} {g}: max |w| {a.abs().max().item():.5f} beyond the cut {cut:.5f}")
        if abs(sb / std - 1) > 0.05:
            sys.exit(f"FAIL {name} {g}: the reference's std {sb} is not its rule's {std}")
    print(f"ok {name}: {len(ref)} parameter groups, titan's mean/std within {worst:.2f} standard "
          f"errors of torchtitan's rules (5 allowed)")


def titan_first_loss(titan, c, seed, init, tmp, batch, seq):
    d = os.path.join(tmp, f"loss-{init}-{seed}")
    args = titan_args(c)
    args[args.index("torchtitan")] = init
    if init != "torchtitan" and "--model.depth_init" in args:
        i = args.index("--model.depth_init")
        del args[i:i + 2]
    run([titan, "train", *args, "--training.steps", "1", "--training.seed", str(seed),
         "--training.local_batch_size", str(batch), "--training.seq_len", str(seq),
         "--metrics.enable_jsonl", "--job.dump_folder", d],
        env=dict(os.environ, OMP_NUM_THREADS="2"))
    with open(os.path.join(d, "metrics.jsonl")) as f:
        return json.loads(f.readline())["loss"]


def ref_first_loss(c, seed, batch, seq):
    model = build_model(dict(c, seq_len=seq))
    torchtitan_init(model, c, seed)
    g = torch.Generator().manual_seed(1000 + seed)
    ids = torch.randint(0, c["vocab_size"], (batch, seq + 1), generator=g)
    with torch.no_grad():
        logits = model(input_ids=ids[:, :-1]).logits
    return F.cross_entropy(logits.reshape(-1, c["vocab_size"]).float(), ids[:, 1:].reshape(-1)).item()


def mean_sd(x):
    m = sum(x) / len(x)
    return m, math.sqrt(sum((v - m) ** 2 for v in x) / (len(x) - 1))


def check_first_loss(titan, c, tmp, k=4, batch=4, seq=64):
    torch.set_num_threads(2)
    t = [titan_first_loss(titan, c, s, "torchtitan", tmp, batch, seq) for s in range(1, k + 1)]
    r = [ref_first_loss(c, s, batch, seq) for s in range(1, k + 1)]
    base = [titan_first_loss(titan, c, 1, "normal", tmp, batch, seq)]
    (mt, st), (mr, sr) = mean_sd(t), mean_sd(r)
    tol = max(0.01, 4 * math.sqrt((st * st + sr * sr) / k))
    line = (f"{c['flavor']} ({c['n_layers']} blocks, vocab {c['vocab_size']}, ln V = "
            f"{math.log(c['vocab_size']):.3f}): first loss titan {mt:.4f} +- {st:.4f}, torchtitan "
            f"reference {mr:.4f} +- {sr:.4f} over {k} seeds (tolerance {tol:.4f}); titan's default "
            f"init {sum(base) / len(base):.4f}")
    if abs(mt - mr) > tol:
        sys.exit("FAIL " + line)
    if all(abs(b - mr) <= tol for b in base):
        sys.exit("FAIL (the check cannot tell the inits apart) " + line)
    print("ok " + line)


def main():
    titan = sys.argv[1]
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        if "--first-loss-only" not in sys.argv:
            for c in (DENSE, MOE):
                check_groups(titan, c, tmp)
        print(f"  ({time.time() - t0:.0f} s)")
        for c in (DENSE, MOE):
            check_first_loss(titan, c, tmp)
            print(f"  ({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
