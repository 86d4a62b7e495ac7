"""PyTorch baseline for bench/bench_train.sh: HF Qwen3ForCausalLM trained on random tokens, CPU,
fp32 or (--bf16) bf16 mixed precision under torch.autocast("cpu", dtype=torch.bfloat16).

Same model and step as titan's benchmark run: by default dim 512, 8 layers, 8 heads, 4 kv heads,
head_dim 64, ffn 1536, vocab 151936 with tied embeddings (--dim, --layers, ... select another
shape, as bench_train.sh's SHAPE=0.6B does); batch 4 x seq 512 of uniformly random token ids
(seeded; a fresh batch every step); loss = mean cross-entropy of next-token prediction over all
batch*seq positions; AdamW(lr 3e-4, betas (0.9, 0.95), eps 1e-8, weight decay 0.1) after
clipping the global grad norm to 1.0. --bf16: the forward and the loss run under autocast
(weights, gradients and AdamW stay fp32, as torchtitan's mixed precision keeps them; autocast
rounds each matmul's operands to bf16 and returns bf16 products; on a CPU without bf16 units
PyTorch's oneDNN kernels emulate the bf16 dot products).

Run it with PyTorch's best CPU settings (bench_train.sh does): OMP_NUM_THREADS=2,
OMP_WAIT_POLICY=PASSIVE, LD_PRELOAD=libtcmalloc_minimal.so.4. The script reports what it saw.

Prints progress to stderr and, last, one JSON line on stdout:
  {"name":..., "tokens_per_s":..., "step_s":..., "peak_rss_gib":..., ...}
Warm-up steps (--warmup-steps; under --compile they include compilation) are not timed.
"""
import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import log, run_steps, tcmalloc_loaded  # noqa: E402


def build_model(a):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = Qwen3Config(
        hidden_size=a.dim,
        num_hidden_layers=a.layers,
        num_attention_heads=a.heads,
        num_key_value_heads=a.kv_heads,
        head_dim=a.head_dim,
        intermediate_size=a.ffn,
        vocab_size=a.vocab,
        tie_word_embeddings=bool(a.tied),
        max_position_embeddings=max(40960, a.seq_len),
        attn_implementation="eager",
        use_cache=False,
    )
    model = Qwen3ForCausalLM(cfg).float().train()
    tied = model.lm_head.weight is model.model.embed_tokens.weight
    assert tied == bool(a.tied), "embeddings not tied/untied as asked"
    return model, cfg


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=5, help="timed steps")
    ap.add_argument("--warmup-steps", type=int, default=2, help="untimed steps first")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (inductor)")
    ap.add_argument("--bf16", action="store_true",
                    help='bf16 mixed precision: torch.autocast("cpu", dtype=torch.bfloat16)')
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--ffn", type=int, default=1536)
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--tied", type=int, choices=[0, 1], default=1)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--optim-impl", choices=["fused", "foreach", "for-loop"], default="fused",
                    help="AdamW implementation (fused is the fastest on CPU)")
    ap.add_argument("--name", default=None, help="label in the JSON line")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    cap = torch.backends.cpu.get_cpu_capability()
    if cap != "AVX512":
        log(f"warning: torch CPU capability is {cap}, not AVX512 (ATEN_CPU_CAPABILITY set?)")
    tcm = tcmalloc_loaded()
    log(f"torch {torch.__version__}, cpu capability {cap}, threads {torch.get_num_threads()}, "
        f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '(unset)')}, tcmalloc {'yes' if tcm else 'no'}")

    model, cfg = build_model(args)
    n_params = sum(p.numel() for p in model.parameters())  # parameters() counts the tied matrix once
    log(f"Qwen3ForCausalLM: {n_params:,} parameters, attn {model.config._attn_implementation}")

    opt_kw = dict(lr=3e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    if args.optim_impl == "fused":
        opt_kw["fused"] = True
    else:
        opt_kw["foreach"] = args.optim_impl == "foreach"
    opt = torch.optim.AdamW(model.parameters(), **opt_kw)

    V = cfg.vocab_size

    def loss_fn(inputs, targets):
        # autocast's CPU policy runs cross_entropy in fp32 (it upcasts the bf16 logits)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
            logits = model(input_ids=inputs).logits
            return F.cross_entropy(logits.view(-1, V), targets.reshape(-1))

    step_loss = torch.compile(loss_fn) if args.compile else loss_fn

    gen = torch.Generator().manual_seed(args.seed)
    B, T = args.batch, args.seq_len

    def train_step():
        tokens = torch.randint(0, V, (B, T + 1), generator=gen)
        loss = step_loss(tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item(), float(gnorm)

    res = run_steps(train_step, args.warmup_steps, args.steps, B * T)
    name = args.name or ("pytorch-compile" if args.compile else "pytorch-eager") + (
        "-bf16" if args.bf16 else "")
    out = {
        "name": name,
        **res,
        "params": n_params,
        "optim": args.optim_impl,
        "compile": args.compile,
        "prec": "bf16-autocast" if args.bf16 else "fp32",
    }
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
