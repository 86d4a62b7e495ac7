"""Checks a profiler trace (docs/profiling.md) of a dense Qwen3 run against independent
references: Python's json parser, the run's resolved config.toml (tomllib), its
metrics.jsonl, and the Hugging Face Qwen3 model built on the meta device for the shapes of the
linear layers and the parameter count.

usage: check_trace.py TRACE_JSON DUMP_FOLDER --steps N [--collectives] [--impl UNIT/OP=IMPL]
                      [--phase NAME] [--no-time]
  TRACE_JSON   {dump_folder}/{save_traces_folder}/iteration_{step}/rank{r}_trace.json
  --steps N    the number of recorded steps expected (profiler_active)
  --collectives  a multi-rank FSDP run: the collectives track must hold all-gathers and
               reduce-scatters of the whole model's parameters every step

Checks, per recorded step: every op kind of the model appears for every layer, forward and
backward (and the embedding and head units theirs); the linear layers' FLOPs equal HF's
shapes, and the bytes of the embedding, the head's norm, add_rmsnorm and rope's backward
are those of their tensors; the compute track's events (ops and trainer phases, which never overlap) plus the
collectives outside them sum to the step's duration within 15 %, and rank 0's step duration
is metrics.jsonl's step_s.
"""
import argparse
import json
import os
import re
import sys
import tomllib

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

BLOCK_OPS = ["rmsnorm", "matmul", "rope", "attention", "swiglu", "add_rmsnorm"]


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def hf_model(m):
    cfg = Qwen3Config(vocab_size=m["vocab_size"], hidden_size=m["dim"],
                      intermediate_size=m["ffn_dim"], num_hidden_layers=m["n_layers"],
                      num_attention_heads=m["n_heads"], num_key_value_heads=m["n_kv_heads"],
                      head_dim=m["head_dim"], tie_word_embeddings=m["tie_embeddings"])
    with torch.device("meta"):
        return Qwen3ForCausalLM(cfg)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("dump")
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--collectives", action="store_true")
    ap.add_argument("--phase", action="append", default=[],
                    help="a trainer phase that must appear (e.g. 'checkpoint save')")
    ap.add_argument("--no-time", action="store_true",
                    help="skip the timing checks (runs of a few ms per step, where a preemption "
                         "on a shared machine outweighs the step)")
    ap.add_argument("--impl", action="append", default=[],
                    help="UNIT/OP=IMPL: the implementation named on that unit's op events "
                         "(every other op event names 'default')")
    a = ap.parse_args()
    mt = re.search(r"iteration_(\d+)/rank(\d+)_trace\.json$", a.trace)
    if not mt:
        fail(f"{a.trace}: not named iteration_N/rankR_trace.json")
    last, rank = int(mt.group(1)), int(mt.group(2))
    with open(a.trace) as f:
        doc = json.load(f)  # the trace must be valid JSON
    with open(os.path.join(a.dump, "config.toml"), "rb") as f:
        cfg = tomllib.load(f)
    m, tr = cfg["model"], cfg["training"]
    if "tie_embeddings" not in m:
        fail("config.toml does not set model.tie_embeddings: run with it set")
    L, B, T = m["n_layers"], tr["local_batch_size"], tr["seq_len"]
    H, hd, D, V = m["n_heads"], m["head_dim"], m["dim"], m["vocab_size"]
    metrics = {}
    with open(os.path.join(a.dump, "metrics.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            metrics[r["step"]] = r
    hf = hf_model(m)
    N = B * T
    # FLOPs of one block's linear layers for N tokens: 2 N in out each (HF's shapes)
    lin = [mod for mod in hf.model.layers[0].modules() if isinstance(mod, torch.nn.Linear)]
    block_mm_flops = sum(2.0 * N * mod.in_features * mod.out_features for mod in lin)
    n_params = sum(p.numel() for p in hf.parameters())

    impls = dict(x.split("=", 1) for x in a.impl)
    ev = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    for e in ev:
        if e["pid"] != rank or e["tid"] not in (0, 1) or e["dur"] < 0:
            fail(f"bad event {e}")
    steps = sorted((e for e in ev if e["cat"] == "step"), key=lambda e: e["ts"])
    want = [f"ProfilerStep#{s}" for s in range(last - a.steps + 1, last + 1)]
    if [e["name"] for e in steps] != want:
        fail(f"step events {[e['name'] for e in steps]}, expected {want}")
    for st in steps:
        k = int(st["name"].split("#")[1])
        t0, t1 = st["ts"], st["ts"] + st["dur"]
        inside = [e for e in ev if e["cat"] != "step" and e["ts"] >= t0 and
                  e["ts"] + e["dur"] <= t1 + 1e-3]
        comp = sorted((e for e in inside if e["tid"] == 0), key=lambda e: e["ts"])
        for x, y in zip(comp, comp[1:]):
            if y["ts"] < x["ts"] + x["dur"] - 1e-3:
                fail(f"{st['name']}: compute events overlap: {x['name']} and {y['name']}")
        names = {}
        for e in comp:
            if e["cat"] == "op":
                names.setdefault(e["name"], []).append(e)
                op = e["name"].rsplit("_", 1)[0] if e["name"].endswith(("_fwd", "_bwd")) \
                    else e["name"]
                if e["args"].get("impl") != impls.get(op, "default"):
                    fail(f"{e['name']}: impl {e['args'].get('impl')!r}, expected "
                         f"{impls.get(op, 'default')!r}")
        need = ["tok_embeddings/embedding_fwd", "tok_embeddings/embedding_bwd",
                "head/rmsnorm_fwd", "head/rmsnorm_bwd", "head/lmhead_ce"]
        for l in range(L):
            need += [f"layers.{l}/{op}_{d}" for op in BLOCK_OPS for d in ("fwd", "bwd")]
        missing = [n for n in need if n not in names]
        if missing:
            fail(f"{st['name']}: no events for {missing}")
        for l in range(L):
            got = sum(e["args"]["flops"] for e in names[f"layers.{l}/matmul_fwd"])
            if abs(got - block_mm_flops) > 1e-6 * block_mm_flops:
                fail(f"layers.{l}/matmul_fwd: {got} FLOPs, HF's linear shapes give "
                     f"{block_mm_flops}")
            got = sum(e["args"]["flops"] for e in names[f"layers.{l}/attention_fwd"])
            if got != 2.0 * B * H * T * T * hd:
                fail(f"layers.{l}/attention_fwd: {got} FLOPs")
        # memory-bound ops: bytes, every event (4 per fp32 element or int32 token id, each
        # tensor once, an accumulated gradient read and written; the cost model of
        # src/ops/work.c, worked out here from the op's tensors)
        G = m["n_kv_heads"]
        want_bytes = {
            # ids [N], wte rows [N,D] read, out [N,D] written
            "tok_embeddings/embedding_fwd": [4 * (N + 2 * N * D)],
            # ids, dout [N,D]; dwte rows read and written
            "tok_embeddings/embedding_bwd": [4 * (N + 3 * N * D)],
            # inp, out [N,D]; rstd [N]; w [D]
            "head/rmsnorm_fwd": [4 * (2 * N * D + N + D)],
            # dout, inp [N,D], dinp written (the residual gradient's first op: dx_acc 0)
            # [N,D]; rstd [N]; w, dw twice [D]
            "head/rmsnorm_bwd": [4 * (3 * N * D + N + 3 * D)],
        }
        for l in range(L):
            # x, y, h, out [N,D]; rstd [N]; w [D]
            want_bytes[f"layers.{l}/add_rmsnorm_fwd"] = [4 * (4 * N * D + N + D)]
            # q [B,T,H,hd] or k [B,T,G,hd], in place (the block passes dinp == dout): dout
            # read, the result written over it; cos, sin [T, hd/2] each
            want_bytes[f"layers.{l}/rope_bwd"] = [4 * (2 * B * T * h * hd + T * hd)
                                                  for h in (H, G)]
        for name, want in want_bytes.items():
            for e in names[name]:
                if e["args"].get("bytes") not in want or "flops" in e["args"]:
                    fail(f"{name}: {e['args']}, expected bytes in {want}")
        got = sum(e["args"]["flops"] for e in names["head/lmhead_ce"])
        if got != 6.0 * N * D * V:
            fail(f"head/lmhead_ce: {got} FLOPs, expected 6 N D V = {6.0 * N * D * V}")
        total = sum(e["dur"] for e in comp)
        comm = [e for e in inside if e["tid"] == 1]
        # collectives inside a compute event (the loader's token count) are already counted
        total += sum(c["dur"] for c in comm if not any(
            e["ts"] <= c["ts"] and c["ts"] + c["dur"] <= e["ts"] + e["dur"] + 1e-3
            for e in comp))
        ratio = total / st["dur"]
        if not a.no_time and not 0.85 <= ratio <= 1.15:
            fail(f"{st['name']}: events sum to {total:.0f} us of the step's {st['dur']:.0f} us")
        # rank 0's (the other ranks' may differ); a failed step has no metrics line
        ms = metrics[k]["step_s"] * 1e6 if not a.no_time and rank == 0 else 0
        if ms and abs(ms - st["dur"]) > 0.02 * ms + 2000:
            fail(f"{st['name']}: {st['dur']:.0f} us, metrics.jsonl step_s {ms:.0f} us")
        line = (f"{st['name']}: {len(comp)} compute events sum to {100 * ratio:.1f}% of "
                f"{st['dur'] / 1e3:.1f} ms")
        if a.collectives:
            kinds = {c["name"] for c in comm}
            for want_kind in ("all-gather (FSDP parameters)", "reduce-scatter"):
                if not any(n.startswith(want_kind) for n in kinds):
                    fail(f"{st['name']}: no {want_kind} on the collectives track ({kinds})")
            # a non-blocking all-gather's posting ("... launch") has no bytes: they are its wait's
            if any(c["args"].get("bytes", 0) <= 0 for c in comm if not c["name"].endswith(" launch")):
                fail(f"{st['name']}: a collective without its byte count")
            # each rank's gradient shards are reduce-scattered once a step: the whole model,
            # padded to divide by the ranks (a few floats per unit)
            rs = sum(c["args"]["bytes"] for c in comm if c["name"] == "reduce-scatter")
            if not 4 * n_params <= rs <= 4 * n_params + 4 * 64 * (L + 2):
                fail(f"{st['name']}: reduce-scatters moved {rs} bytes; the model's "
                     f"{n_params} parameters are {4 * n_params}")
            line += f"; {len(comm)} collectives, reduce-scatter {rs} bytes = 4 x {n_params} (+pad)"
        print(line)
    for ph in a.phase:
        if not any(e["name"] == ph and e["cat"] == "train" and e["tid"] == 0 for e in ev):
            fail(f"no '{ph}' event")
    print(f"ok: {a.trace}: {len(ev)} events, {a.steps} steps, every op of {L} layers fwd+bwd")


main()
