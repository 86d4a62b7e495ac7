#!/usr/bin/env bash
# [profiling] on 2 ranks (FSDP, dp_shard 2; tests/dist.cmake): each rank writes its own
# rank{r}_trace.json; check_trace.py finds every op of every layer, the FSDP all-gathers and
# reduce-scatters on the collectives track with their byte counts (the reduce-scatters of a
# step: the whole model's gradients, HF's parameter count x 4 bytes plus padding), and the
# compute events plus the collectives between them sum to each step's time within 15 %; the
# ranks' traces share one time origin (merged, their all-reduces line up).
# usage: dist_profile.sh TITAN MPIRUN DIFF_TOOL PYTHON REPO_DIR
set -euo pipefail
source "$(dirname "$0")/dist_common.sh" "$@" # titan, out, small, mpi
py=$4; repo=$5
# larger than `small` (steps of ~0.1 s, not 1 ms), so that a preemption on a shared machine is
# small against the step
mpi 2 "${small[@]}" --set tie_embeddings=0 --set dim=128 --set ffn_dim=512 --set head_dim=32 \
  --set vocab_size=4000 --seq-len 128 --batch 4 --steps 2 --log-freq 1 \
  --metrics.enable_jsonl true --dump-folder "$out/a" --profiling.enable_profiling true \
  --profiling.profile_freq 2 --profiling.profiler_active 2 --profiling.profiler_warmup 0 >/dev/null
for r in 0 1; do
  "$py" "$repo/tests/reference/check_trace.py" "$out/a/profile_traces/iteration_2/rank${r}_trace.json" \
    "$out/a" --steps 2 --collectives
done
# data loading is the batches alone (torchtitan's data_loading): no collective inside it (the
# loss's valid-token all-reduce waits for the slowest rank, e.g. rank 0 logging)
"$py" - "$out/a/profile_traces/iteration_2" <<'EOF'
import json, sys
for r in (0, 1):
    ev = json.load(open("%s/rank%d_trace.json" % (sys.argv[1], r)))["traceEvents"]
    dl = [e for e in ev if e["ph"] == "X" and e["name"] == "data loading"]
    co = [e for e in ev if e["ph"] == "X" and e.get("cat") == "collective"]
    assert len(dl) == 2 and co, "rank %d: %d data loading phases, %d collectives" % (r, len(dl), len(co))
    for d in dl:
        for c in co:
            assert not (d["ts"] <= c["ts"] < d["ts"] + d["dur"]), \
                "rank %d: %s (%s) inside data loading" % (r, c["name"], c["args"])
print("ok no collective inside data loading")
EOF
# one timeline: an all-reduce ends at the same instant on both ranks, so in the two traces the
# closest pair of matching all-reduce ends is microseconds apart (each rank's first step was
# its ts 0: the ranks' start skew, 5-150 ms here, shifted one trace against the other)
"$py" - "$out/a/profile_traces/iteration_2" <<'EOF'
import json, sys
ev = [[e for e in json.load(open("%s/rank%d_trace.json" % (sys.argv[1], r)))["traceEvents"]
       if e["ph"] == "X" and e["name"] == "all-reduce"] for r in (0, 1)]
assert len(ev[0]) == len(ev[1]) > 0, "all-reduces: %d and %d" % (len(ev[0]), len(ev[1]))
gap = min(abs(a["ts"] + a["dur"] - b["ts"] - b["dur"]) for a, b in zip(*ev))
print("%s: closest all-reduce ends of rank 0 and 1 %.1f us apart"
      % ("ok" if gap < 1000 else "FAIL", gap))
sys.exit(gap >= 1000)
EOF
