#!/usr/bin/env python3
"""Reference outputs of Hugging Face transformers' Qwen3ForCausalLM / Qwen3MoeForCausalLM
(PyTorch, CPU, fp32, eager attention) for titan's parity test (tests/parity/test_hf_parity.c).

MoE configs write experts as HF checkpoints hold them on disk, one tensor per expert
(model.layers.i.mlp.experts.j.{gate,up,down}_proj.weight; transformers 5 fuses them in memory
into gate_up_proj [E, 2F, D] and down_proj [E, D, F]), gradients likewise. With aux = 1 the model
runs with output_router_logits=True: loss = CE mean + router_aux_loss_coef * aux_loss
(load_balancing_loss_func), and ref also holds aux_loss and train_aux_losses.

Writes to --out DIR:
  weights.safetensors  initial weights under HF names (F32; a tied model has no lm_head)
  ref.safetensors      input_ids/targets [B,T] (I64) (and positions [B,T], train_positions
                       [steps,B,T] (I64) for a docs config: documents packed in each window),
                       logits [B,T,V] (F32), loss_sum, loss
                       (F64 scalars), n_valid (I64 scalar), grad.<hf name> (F32) for every
                       parameter of one forward/backward of loss_sum / n_valid; then 10
                       AdamW training steps from the same initial weights:
                       train_input_ids/train_targets [steps,B,T] (I64), train_losses,
                       train_grad_norms (pre-clip), train_lrs [steps] (F64).
  autocast.safetensors the same forward/backward (same weights, same batch) under
                       torch.autocast("cpu", dtype=torch.bfloat16), fp32 master weights as
                       autocast keeps them: logits (F32 of autocast's bf16 logits), loss_sum,
                       loss, aux_loss (F64), grad.<hf name> (F32); read by test_hf_parity
                       --prec bf16, which compares titan's bf16 path with it and both with
                       ref.safetensors' fp32 gradients.
  __metadata__ (in all files): the model args, batch, seq_len, optimizer and schedule.
"""
import argparse
import math
import os
import sys

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

CONFIGS = {
    # GQA, head_dim != dim / n_heads, tied embeddings
    "gqa_tied": dict(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=32, ffn_dim=96,
                     vocab_size=512, tie_embeddings=1, rope_theta=1e6, norm_eps=1e-6,
                     batch=2, seq_len=33, max_norm=2.0),
    # untied lm_head, 3 kv groups of 3 heads, the classic rope_theta
    "untied": dict(dim=96, n_layers=3, n_heads=6, n_kv_heads=2, head_dim=16, ffn_dim=160,
                   vocab_size=384, tie_embeddings=0, rope_theta=10000.0, norm_eps=1e-6,
                   batch=3, seq_len=20, max_norm=3.0),
    # plain MHA (n_kv_heads == n_heads), longer windows that cross attention tiles, a vocab
    # that is no power of two and a different norm eps
    "mha_long": dict(dim=64, n_layers=2, n_heads=4, n_kv_heads=4, head_dim=16, ffn_dim=112,
                     vocab_size=1000, tie_embeddings=0, rope_theta=1e6, norm_eps=1e-5,
                     batch=1, seq_len=150, max_norm=1.2),
    # MoE: 8 experts, top-2, renormalised gates, no aux loss
    "moe": dict(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16, ffn_dim=96,
                vocab_size=256, tie_embeddings=0, rope_theta=1e6, norm_eps=1e-6,
                n_experts=8, top_k=2, moe_ffn_dim=32, norm_topk_prob=1, router_aux_loss_coef=0.0,
                aux=0, batch=2, seq_len=24, max_norm=2.5),
    # MoE with experts reached by no token (5 tokens x top-2 of 16: 6 or more): their gradients are
    # exactly zero on both sides, and AdamW still decays their weights (one stacked tensor per
    # layer in torchtitan and transformers 5, never a None gradient)
    "moe_sparse": dict(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16, ffn_dim=96,
                       vocab_size=256, tie_embeddings=0, rope_theta=1e6, norm_eps=1e-6,
                       n_experts=16, top_k=2, moe_ffn_dim=32, norm_topk_prob=1,
                       router_aux_loss_coef=0.0, aux=0, batch=1, seq_len=5, max_norm=10.0),
    # MoE with HF's auxiliary load-balancing loss, un-normalised gates, top-3 of 6, 3 blocks
    "moe_aux": dict(dim=48, n_layers=3, n_heads=4, n_kv_heads=4, head_dim=12, ffn_dim=64,
                    vocab_size=200, tie_embeddings=0, rope_theta=1e6, norm_eps=1e-6,
                    n_experts=6, top_k=3, moe_ffn_dim=24, norm_topk_prob=0,
                    router_aux_loss_coef=0.05, aux=1, batch=2, seq_len=20, max_norm=2.2),
    # odd sizes everywhere (SIMD tails, attention tiles): 5 heads of 40 over 1 kv head, dim
    # 72, a prime FFN width and vocabulary, windows of 129 crossing tiles, tied, rope_theta 100,
    # norm eps 1e-12 (a shape audit's combination, session 37)
    "odd_dims": dict(dim=72, n_layers=2, n_heads=5, n_kv_heads=1, head_dim=40, ffn_dim=131,
                     vocab_size=1009, tie_embeddings=1, rope_theta=100.0, norm_eps=1e-12,
                     batch=3, seq_len=129, max_norm=0.9),
    # MoE whose bf16 router logits flip a top-2 choice in block 1 on both bf16 sides (autocast
    # and titan agree to 1e-2; both are 0.1-0.3 off fp32 there); head_dim 128, an odd expert
    # width, 5 experts
    "moe_flip": dict(dim=72, n_layers=2, n_heads=3, n_kv_heads=3, head_dim=128, ffn_dim=64,
                     vocab_size=1009, tie_embeddings=0, rope_theta=1e6, norm_eps=1e-6,
                     n_experts=5, top_k=2, moe_ffn_dim=131, norm_topk_prob=1,
                     router_aux_loss_coef=0.0, aux=0, batch=3, seq_len=33, max_norm=1.9),
    # document masking (titan's attn_mask_type = "block_causal", torchtitan 0.3's flex): each
    # window packed with documents of 1 to 80 tokens (one-token documents, documents crossing
    # attention tiles), positions restarting at 0 in each; HF runs them as packed sequences from
    # position_ids (checked against an explicit block-causal mask)
    "docs": dict(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16, ffn_dim=96,
                 vocab_size=512, tie_embeddings=0, rope_theta=1e4, norm_eps=1e-6,
                 batch=2, seq_len=150, max_norm=0.98, docs=1),
    # the same in an MoE model (routing per token, attention per document); one window of 90:
    # at 3 x 70 and 2 x 48 bf16 router logits flipped choices on both bf16 sides alike, which
    # the bf16 check cannot tell from a defect
    "docs_moe": dict(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16, ffn_dim=96,
                     vocab_size=256, tie_embeddings=1, rope_theta=1e6, norm_eps=1e-6,
                     n_experts=8, top_k=2, moe_ffn_dim=32, norm_topk_prob=1,
                     router_aux_loss_coef=0.0, aux=0, batch=1, seq_len=90, max_norm=1.7, docs=1),
}

# Each config's max_norm sits inside the range of its pre-clip gradient norms, so clipping is
# active in some of the training steps and not in others.

# Optimizer / schedule of the 10-step training check (torchtitan qwen3_debugmodel schedule:
# warmup 2, decay_ratio 0.8 linear; min_lr_factor 0.1 so the floor is exercised).
TRAIN = dict(lr=3e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1,
             warmup_steps=2, decay_ratio=0.8, decay_type="linear", min_lr_factor=0.1, steps=10)


def torch_train_step(opt, sched, params, loss, max_norm):
    """One torchtitan training step on a PyTorch model: backward, clip the total norm (not
    foreach), the optimizer and the LR schedule; returns the loss as a float. opt / sched may
    be lists (torchtitan's OptimizersContainer / LRSchedulersContainer: an optimizer per
    optimizer_name of its param_groups, a LambdaLR each)."""
    opts = opt if isinstance(opt, (list, tuple)) else [opt]
    scheds = sched if isinstance(sched, (list, tuple)) else [sched]
    for o in opts:
        o.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=False)
    for o in opts:
        o.step()
    for s in scheds:
        s.step()
    return loss.item()


def lr_factor(s, n, warmup, decay_ratio, decay_type, min_lr_factor):
    """torchtitan linear_warmup_stable_decay: factor for scheduler step s (0-based)."""
    w = min(warmup, n)
    dk = round(n * decay_ratio) if decay_ratio is not None else n - w
    if w + dk > n:
        dk = n - w
    stable = n + 1 - w - dk
    if s < w:
        return (s + 1) / w
    if s < w + stable:
        return 1.0
    p = (s + 1 - (w + stable)) / dk
    if decay_type == "linear":
        g = 1 - p
    elif decay_type == "sqrt":
        g = 1 - math.sqrt(p)
    elif decay_type == "cosine":
        g = 0.5 * (1 + math.cos(math.pi * p))
    else:
        raise ValueError(decay_type)
    return min_lr_factor + (1 - min_lr_factor) * g


def self_check_schedule():
    got = [lr_factor(s, 10, 2, 0.8, "linear", 0.0) for s in range(10)]
    want = [0.5, 1, 1, .875, .75, .625, .5, .375, .25, .125]
    assert all(abs(a - b) < 1e-15 for a, b in zip(got, want)), got


def build_model(c):
    from transformers import Qwen3Config, Qwen3ForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM

    common = dict(
        vocab_size=c["vocab_size"], hidden_size=c["dim"], intermediate_size=c["ffn_dim"],
        num_hidden_layers=c["n_layers"], num_attention_heads=c["n_heads"],
        num_key_value_heads=c["n_kv_heads"], head_dim=c["head_dim"], hidden_act="silu",
        max_position_embeddings=max(2048, c["seq_len"]), rms_norm_eps=c["norm_eps"],
        tie_word_embeddings=bool(c["tie_embeddings"]),
        rope_parameters={"rope_type": "default", "rope_theta": float(c["rope_theta"])},
        attention_bias=False, attention_dropout=0.0, use_sliding_window=False,
        attn_implementation="eager", use_cache=False)
    moe = bool(c.get("n_experts"))
    if moe:
        cfg = Qwen3MoeConfig(
            **common, num_experts=c["n_experts"], num_experts_per_tok=c["top_k"],
            moe_intermediate_size=c["moe_ffn_dim"], norm_topk_prob=bool(c["norm_topk_prob"]),
            router_aux_loss_coef=c["router_aux_loss_coef"], output_router_logits=bool(c["aux"]),
            decoder_sparse_step=1, mlp_only_layers=[],
            # the per-expert loop: transformers' default grouped_mm refuses an expert width
            # that is no multiple of 4 ("strides should be multiple of 16 bytes")
            experts_implementation="eager")
        model = Qwen3MoeForCausalLM(cfg).to(torch.float32)
    else:
        model = Qwen3ForCausalLM(Qwen3Config(**common)).to(torch.float32)
    model.train()  # dropout is 0; train mode only matters for the cache
    assert model.config._attn_implementation == "eager"
    if not moe:
        tied = model.lm_head.weight is model.model.embed_tokens.weight
        assert tied == bool(c["tie_embeddings"]), "HF did not tie/untie as asked"
    return model


def init_weights(model, seed):
    """std 0.02 for matrices, 1 + 0.1*randn for the RMSNorm weights."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.02 * torch.randn(p.shape, generator=g))


def random_batch(g, c, n_ignore):
    b, t, v = c["batch"], c["seq_len"], c["vocab_size"]
    ids = torch.randint(0, v, (b, t), generator=g)
    tgt = torch.randint(0, v, (b, t), generator=g)
    flat = tgt.view(-1)
    idx = torch.randperm(b * t, generator=g)[:n_ignore]
    flat[idx] = -100
    return ids, tgt


def doc_positions(g, b, t, longest=80):
    """[b, t] positions of windows packed with documents of 1 to `longest` tokens: 0 at each
    document's first token, +1 per token after."""
    pos = torch.empty(b, t, dtype=torch.long)
    for r in range(b):
        i = 0
        while i < t:
            n = min(int(torch.randint(1, longest + 1, (1,), generator=g)), t - i)
            pos[r, i:i + n] = torch.arange(n)
            i += n
    assert (pos == 0).sum() > b, "one document per window: no masking tested"
    return pos


def block_causal_mask(pos):
    """[b, 1, t, t] additive mask: query i sees key j <= i of its own document."""
    doc = (pos == 0).cumsum(-1)
    t = pos.shape[1]
    ok = (doc[:, :, None] == doc[:, None, :]) & torch.ones(t, t, dtype=torch.bool).tril()
    return torch.zeros(ok.shape, dtype=torch.float32).masked_fill(
        ~ok, torch.finfo(torch.float32).min)[:, None]


def loss_of(model, ids, tgt, v, pos=None):
    """logits, CE loss sum, valid targets, aux loss (0 when off). pos: document positions
    (HF's packed sequences: block-causal attention from position_ids), else one sequence."""
    out = model(input_ids=ids) if pos is None else model(input_ids=ids, position_ids=pos)
    logits = out.logits
    loss_sum = F.cross_entropy(logits.reshape(-1, v).float(), tgt.reshape(-1), ignore_index=-100,
                               reduction="sum")
    n_valid = int((tgt != -100).sum())
    aux = getattr(out, "aux_loss", None)
    return logits, loss_sum, n_valid, (aux if aux is not None else torch.tensor(0.0))


def disk_form(name, t):
    """HF's on-disk tensors for one in-memory parameter: fused experts split per expert."""
    if name.endswith("mlp.experts.gate_up_proj"):
        pre, f = name[: -len("gate_up_proj")], t.shape[1] // 2
        for j in range(t.shape[0]):
            yield f"{pre}{j}.gate_proj.weight", t[j, :f]
            yield f"{pre}{j}.up_proj.weight", t[j, f:]
    elif name.endswith("mlp.experts.down_proj"):
        pre = name[: -len("down_proj")]
        for j in range(t.shape[0]):
            yield f"{pre}{j}.down_proj.weight", t[j]
    else:
        yield name, t


def disk_dict(named, prefix=""):
    return {prefix + k: x.detach().clone().contiguous()
            for n, t in named for k, x in disk_form(n, t)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True, choices=sorted(CONFIGS))
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()
    self_check_schedule()

    torch.manual_seed(a.seed)
    torch.use_deterministic_algorithms(True)
    c = CONFIGS[a.config]
    v = c["vocab_size"]
    max_norm = c["max_norm"]
    os.makedirs(a.out, exist_ok=True)

    model = build_model(c)
    init_weights(model, a.seed)
    params = dict(model.named_parameters())  # tied: lm_head.weight is deduplicated away
    assert ("lm_head.weight" in params) == (not c["tie_embeddings"])
    init = {k: p.detach().clone().contiguous() for k, p in params.items()}
    coef = c.get("router_aux_loss_coef", 0.0) if c.get("aux") else 0.0

    meta = {k: (repr(float(x)) if isinstance(x, float) else str(x)) for k, x in c.items()}
    meta.update({k: (repr(float(x)) if isinstance(x, float) else str(x))
                 for k, x in TRAIN.items()})
    meta["config"] = a.config
    meta["seed"] = str(a.seed)
    meta["reference"] = f"transformers {__import__('transformers').__version__} " \
                        f"torch {torch.__version__} Qwen3ForCausalLM eager fp32"

    # ---- one forward/backward --------------------------------------------------------
    g = torch.Generator().manual_seed(a.seed + 1)
    n_ignore = max(1, c["batch"] * c["seq_len"] // 10)
    ids, tgt = random_batch(g, c, n_ignore)
    pos = doc_positions(g, c["batch"], c["seq_len"]) if c.get("docs") else None
    if pos is not None:
        # HF must take position_ids as packed documents: the same logits as an explicit block-
        # causal mask, and other ones than one causal sequence at those positions
        with torch.no_grad():
            packed = model(input_ids=ids, position_ids=pos).logits
            masked = model(input_ids=ids, position_ids=pos,
                           attention_mask=block_causal_mask(pos)).logits
            whole = model(input_ids=ids, position_ids=torch.arange(c["seq_len"]).expand_as(pos),
                          attention_mask=block_causal_mask(torch.zeros_like(pos) + 1)).logits
        assert (packed - masked).abs().max() < 1e-5, "HF's packed sequences are not block-causal"
        assert (packed - whole).abs().max() > 1e-2, "documents changed nothing"
    model.zero_grad(set_to_none=False)
    logits, loss_sum, n_valid, aux = loss_of(model, ids, tgt, v, pos)
    loss = loss_sum / n_valid + coef * aux
    loss.backward()
    ref = {
        "input_ids": ids.contiguous(),
        "targets": tgt.contiguous(),
        "logits": logits.detach().float().contiguous(),
        "loss_sum": torch.tensor(loss_sum.item(), dtype=torch.float64),
        "loss": torch.tensor(loss.item(), dtype=torch.float64),
        "n_valid": torch.tensor(n_valid, dtype=torch.int64),
        "aux_loss": torch.tensor(float(aux.item()), dtype=torch.float64),
    }
    if pos is not None:
        ref["positions"] = pos.contiguous()
    ref.update(disk_dict(((k, p.grad) for k, p in params.items()), "grad."))

    # ---- the same forward/backward under bf16 autocast (issue 16's fidelity check) -------
    # Weights stay fp32 (the master copy); autocast rounds each matmul's operands to bf16 and
    # returns bf16 products; norms, softmax (eager attention upcasts) and the CE stay fp32.
    model.zero_grad(set_to_none=False)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits16, loss_sum16, n_valid16, aux16 = loss_of(model, ids, tgt, v, pos)
        loss16 = loss_sum16 / n_valid16 + coef * aux16.float()
    assert logits16.dtype == torch.bfloat16, "autocast did not run the lm_head in bf16"
    loss16.backward()
    autocast = {
        "logits": logits16.detach().float().contiguous(),
        "loss_sum": torch.tensor(loss_sum16.item(), dtype=torch.float64),
        "loss": torch.tensor(loss16.item(), dtype=torch.float64),
        "aux_loss": torch.tensor(float(aux16.item()), dtype=torch.float64),
    }
    autocast.update(disk_dict(((k, p.grad) for k, p in params.items()), "grad."))
    assert all(x.dtype == torch.float32 for k, x in autocast.items() if k.startswith("grad."))

    # ---- training steps from the same initial weights ---------------------------------
    with torch.no_grad():
        for k, p in params.items():
            p.copy_(init[k])
    plist = list(params.values())
    opt = torch.optim.AdamW(plist, lr=TRAIN["lr"], betas=(TRAIN["beta1"], TRAIN["beta2"]),
                            eps=TRAIN["eps"], weight_decay=TRAIN["weight_decay"], foreach=False,
                            fused=False)
    n = TRAIN["steps"]
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: lr_factor(s, n, TRAIN["warmup_steps"], TRAIN["decay_ratio"],
                                 TRAIN["decay_type"], TRAIN["min_lr_factor"]))
    t_ids, t_tgt, t_pos, losses, norms, lrs, auxes = [], [], [], [], [], [], []
    for step in range(1, n + 1):
        ids, tgt = random_batch(g, c, n_ignore + step % 3)
        pos = doc_positions(g, c["batch"], c["seq_len"]) if c.get("docs") else None
        opt.zero_grad(set_to_none=False)
        _, loss_sum, n_valid, aux = loss_of(model, ids, tgt, v, pos)
        loss = loss_sum / n_valid + coef * aux
        loss.backward()
        auxes.append(float(aux.item()))
        norm = torch.nn.utils.clip_grad_norm_(plist, max_norm, foreach=False)
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
        t_ids.append(ids)
        t_tgt.append(tgt)
        t_pos.append(pos)
        losses.append(loss.item())
        norms.append(norm.item())
    ref["train_input_ids"] = torch.stack(t_ids).contiguous()
    ref["train_targets"] = torch.stack(t_tgt).contiguous()
    if c.get("docs"):
        ref["train_positions"] = torch.stack(t_pos).contiguous()
    ref["train_losses"] = torch.tensor(losses, dtype=torch.float64)
    ref["train_grad_norms"] = torch.tensor(norms, dtype=torch.float64)
    ref["train_lrs"] = torch.tensor(lrs, dtype=torch.float64)
    ref["train_aux_losses"] = torch.tensor(auxes, dtype=torch.float64)
    n_clipped = sum(x > max_norm for x in norms)
    if not 0 < n_clipped < n:
        print(f"warning: clipping active in {n_clipped} of {n} steps", file=sys.stderr)

    save_file(disk_dict(init.items()), os.path.join(a.out, "weights.safetensors"), metadata=meta)
    save_file(ref, os.path.join(a.out, "ref.safetensors"), metadata=meta)
    meta16 = dict(meta, reference=meta["reference"] + " under torch.autocast(cpu, bfloat16)")
    save_file(autocast, os.path.join(a.out, "autocast.safetensors"), metadata=meta16)
    print(f"{a.config}: loss {ref['loss'].item():.6f} over {ref['n_valid'].item()} targets; "
          f"train losses {losses[0]:.5f} -> {losses[-1]:.5f}; grad norms "
          f"{min(norms):.3f}..{max(norms):.3f} (clipped in {n_clipped}/{n} steps); "
          f"bf16 autocast loss {autocast['loss'].item():.6f}; "
          f"wrote {a.out}")


if __name__ == "__main__":
    main()
