"""Greedy decoding in HF transformers (Qwen3ForCausalLM, generate(), KV cache) on a model folder,
the peer of `titan generate` in bench/bench_generate.sh. Prefill and decode are timed apart:
generate(max_new_tokens=1) is the prefill (and one token), generate(max_new_tokens=N+1) minus
it the N decode steps; each the median of --repeats runs after one warm-up. Prints the greedy
ids and, last, one JSON line.

  .venv/bin/python bench/generate_hf.py --model DIR --prompt-ids FILE --new N [--threads T]
      [--bf16] [--repeats R]
"""
import argparse
import json
import statistics
import sys
import time

import torch
from transformers import AutoModelForCausalLM

from bench_common import log


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt-ids", required=True, help="a file of decimal token ids")
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--bf16", action="store_true", help="bf16 weights (torch_dtype bfloat16)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    dtype = torch.bfloat16 if a.bf16 else torch.float32
    m = AutoModelForCausalLM.from_pretrained(a.model, dtype=dtype).eval()
    ids = torch.tensor([[int(t) for t in open(a.prompt_ids).read().split()]])

    def gen(n):
        t0 = time.perf_counter()
        with torch.no_grad():
            out = m.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                             pad_token_id=0)
        return time.perf_counter() - t0, out[0, ids.shape[1]:].tolist()

    gen(2)  # warm-up
    pre, full = [], []
    for _ in range(a.repeats):
        pre.append(gen(1)[0])
        t, out = gen(a.new + 1)
        full.append(t)
    t_pre, t_full = statistics.median(pre), statistics.median(full)
    decode = a.new / (t_full - t_pre)
    log(f"HF prefill {ids.shape[1]} tokens {t_pre:.3f} s; decode {a.new} tokens "
        f"{t_full - t_pre:.3f} s = {decode:.2f} tokens/s")
    print(" ".join(str(t) for t in out))
    print(json.dumps({"name": "hf-bf16" if a.bf16 else "hf", "prompt_tokens": ids.shape[1],
                      "prefill_s": t_pre, "decode_tokens_per_s": decode,
                      "torch": torch.__version__}))


if __name__ == "__main__":
    sys.exit(main())
