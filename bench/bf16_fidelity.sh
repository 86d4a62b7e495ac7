#!/usr/bin/env bash
# bf16 fidelity sweep (issue 16): the same job config run once per (seed, variant), one run at a
# time, each run's end points appended to a TSV. A variant is `name=ENV...;ARGS...`: environment
# settings and extra `titan train` arguments. The default variants tell a kernel layout's effect
# from any last-bit perturbation: `ce_chunk` changes only how the lm_head's weight-gradient sums
# are grouped, so per seed the spread inside {row, row256} and {col, col256} is noise, and a
# layout's bias shows as col - row beyond it.
#   SEEDS="1 2 3" OUT=/tmp/fid.tsv bash bench/bf16_fidelity.sh
#   python3 bench/bf16_fidelity.py /tmp/fid.tsv        # the per-seed table and the summary
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
CONFIG=${CONFIG:-configs/qwen3_debug.toml}
SEEDS=${SEEDS:-"1 2 3 4 5 6 7 8"}
OUT=${OUT:-runs/bf16_fidelity.tsv}
EXTRA=${EXTRA:-}
VARIANTS=${VARIANTS:-"row=TITAN_AMX_LAYOUTS=attention; col=TITAN_AMX_LAYOUTS=attention,lmhead_ce; row256=TITAN_AMX_LAYOUTS=attention;--training.ce_chunk=256 col256=TITAN_AMX_LAYOUTS=attention,lmhead_ce;--training.ce_chunk=256"}
[ -s "$OUT" ] || printf 'seed\tvariant\ttrain_loss\ttrain_last20\tval_loss\tseconds\tconfig\textra\n' >"$OUT"
dir=$(mktemp -d /tmp/titan_fid.XXXXXX)
trap 'rm -rf "$dir"' EXIT
for seed in $SEEDS; do
  for v in $VARIANTS; do
    name=${v%%=*}
    rest=${v#*=}
    envs=${rest%%;*}
    args=${rest#*;}
    rm -rf "$dir/run"
    t0=$(date +%s)
    # shellcheck disable=SC2086
    env $envs "$BUILD/titan" train --config "$CONFIG" --training.seed="$seed" \
      --checkpoint.no_enable --job.sample_tokens=0 --job.dump_folder="$dir/run" $args $EXTRA \
      >"$dir/log" 2>&1 || { echo "seed $seed $name failed:"; tail -5 "$dir/log"; exit 1; }
    t1=$(date +%s)
    python3 - "$dir/run/metrics.jsonl" "$seed" "$name" $((t1 - t0)) "$CONFIG" "$args $EXTRA" >>"$OUT" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
train = [r for r in rows if "loss" in r]
val = [r["val_loss"] for r in rows if "val_loss" in r]
last = train[-20:]
print("\t".join([sys.argv[2], sys.argv[3], "%.6f" % train[-1]["loss"],
                 "%.6f" % (sum(r["loss"] for r in last) / len(last)),
                 "%.6f" % val[-1] if val else "nan", sys.argv[4], sys.argv[5], sys.argv[6].strip()]))
PY
    tail -1 "$OUT"
  done
done
