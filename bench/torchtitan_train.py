"""torchtitan's Qwen3 model (torchtitan from PyPI) trained on random tokens on CPU, fp32.

Same model and step as bench/pytorch_train.py and titan's benchmark run: dim 512, 8 layers,
8 heads, 4 kv heads, head_dim 64, ffn 1536, vocab 151936 tied; batch 4 x seq 512 of random
tokens; mean cross-entropy; clip grad norm 1.0; AdamW(3e-4, (0.9, 0.95), 1e-8, wd 0.1, fused).

What is torchtitan's here and what is not: the model is torchtitan.models.qwen3.Qwen3Model,
built from a config assembled the way torchtitan's own qwen3 flavors are (fused QKV, QK-norm,
CosSinRoPE, weight tying, torchtitan's param init). The training loop is this script's, not
torchtitan's Trainer: the Trainer needs torch.distributed, a tokenizer and a HF `datasets`
pipeline (`datasets` cannot be installed next to the torch 2.15 / fsspec pins of .venv), none
of which changes the arithmetic of a step. --compile compiles each transformer block and the
loss separately, as torchtitan's `compile.enable` does.

Attention: torchtitan 0.3.0 language models only accept FlexAttention (its default) or varlen.
On CPU neither can train: varlen needs CUDA flash attention, and FlexAttention's backward is
not implemented for CPU in torch 2.15 ("FlexAttention does not support backward on CPU"; --attn
flex reproduces it). So the default here, --attn sdpa, swaps in torchtitan's own
ScaledDotProductAttention module (F.scaled_dot_product_attention, is_causal=True; torchtitan
keeps it for other models), which computes the same causal attention for one document per row.

Install (no dependencies, so .venv's torch/fsspec pins stay as they are):
  .venv/bin/pip install --no-deps torchtitan==0.3.0 && .venv/bin/pip install tyro spmd_types==0.2.3
Prints progress to stderr and, last, one JSON line on stdout like pytorch_train.py.
"""
import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import log, run_steps, tcmalloc_loaded  # noqa: E402


DIM, N_LAYERS, N_HEADS, N_KV_HEADS, HEAD_DIM, FFN, VOCAB = 512, 8, 8, 4, 64, 1536, 151936


def build_model(attn: str, seq_len: int):
    from torchtitan.models.common import CosSinRoPE, Embedding, Linear
    from torchtitan.models.common.attention import ScaledDotProductAttention
    from torchtitan.models.qwen3 import (
        _EMBEDDING_SKIP_INIT,
        _LINEAR_INIT,
        Qwen3Model,
        _build_qwen3_layers,
        _qwen3_norm,
    )

    layers = _build_qwen3_layers(
        fuse_qkv=True,
        n_layers=N_LAYERS,
        dim=DIM,
        n_heads=N_HEADS,
        n_kv_heads=N_KV_HEADS,
        head_dim=HEAD_DIM,
        hidden_dim=FFN,
        attn_backend="flex",
        rope=CosSinRoPE.Config(dim=HEAD_DIM, max_seq_len=seq_len, theta=1000000.0),
    )
    if attn == "sdpa":
        for layer in layers:
            layer.attention.inner_attention = ScaledDotProductAttention.Config()
    cfg = Qwen3Model.Config(
        vocab_size=VOCAB,
        dim=DIM,
        norm=_qwen3_norm(DIM),
        enable_weight_tying=True,
        tok_embeddings=Embedding.Config(
            num_embeddings=VOCAB, embedding_dim=DIM, param_init=_EMBEDDING_SKIP_INIT
        ),
        lm_head=Linear.Config(in_features=DIM, out_features=VOCAB, param_init=_LINEAR_INIT),
        layers=layers,
    )
    model = cfg.build()
    with torch.no_grad():
        model.init_states(buffer_device=torch.device("cpu"))
    model.train()
    assert model.tok_embeddings.weight is model.lm_head.weight, "embeddings not tied"
    return model


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=5, help="timed steps")
    ap.add_argument("--warmup-steps", type=int, default=2, help="untimed steps first")
    ap.add_argument("--compile", action="store_true", help="torch.compile each block and the loss")
    ap.add_argument("--attn", choices=["sdpa", "flex"], default="sdpa",
                    help="flex = torchtitan's default; its backward fails on CPU")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--name", default=None)
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    import torchtitan

    cap = torch.backends.cpu.get_cpu_capability()
    tcm = tcmalloc_loaded()
    log(f"torchtitan {torchtitan.__version__}, torch {torch.__version__}, cpu capability {cap}, "
        f"threads {torch.get_num_threads()}, OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '(unset)')}, "
        f"tcmalloc {'yes' if tcm else 'no'}, attention {args.attn}")

    model = build_model(args.attn, args.seq_len)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"torchtitan Qwen3Model: {n_params:,} parameters")

    if args.compile:
        for name, block in model.layers.named_children():
            model.layers.register_module(name, torch.compile(block, fullgraph=True))

    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=0.1, fused=True)

    B, T = args.batch, args.seq_len
    masks = None
    if args.attn == "flex":
        positions = torch.arange(T).unsqueeze(0).expand(B, T)
        masks = model.get_attention_masks(positions)  # one document per row -> causal

    def ce(logits, targets):
        return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())

    loss_fn = torch.compile(ce) if args.compile else ce
    gen = torch.Generator().manual_seed(args.seed)

    def train_step():
        tokens = torch.randint(0, VOCAB, (B, T + 1), generator=gen)
        logits = model(tokens[:, :-1], attention_masks=masks)
        loss = loss_fn(logits, tokens[:, 1:])
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item(), float(gnorm)

    res = run_steps(train_step, args.warmup_steps, args.steps, B * T)
    name = args.name or f"torchtitan-{args.attn}{'-compile' if args.compile else ''}"
    out = {
        "name": name,
        **res,
        "params": n_params,
        "torchtitan": torchtitan.__version__,
        "attn": args.attn,
        "compile": args.compile,
    }
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
