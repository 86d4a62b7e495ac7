#!/usr/bin/env bash
# Ranks launched with different configs (mpirun's `A : B` form) are refused at start-up,
# naming the rank that differs, before any step; the same config on both ranks trains.
set -uo pipefail
source "$(dirname "$0")/dist_common.sh"
run2() { # args of rank 0 --- args of rank 1
  local a=() b=() second=0
  for x in "$@"; do
    if [ "$x" = "---" ]; then second=1; elif [ $second = 1 ]; then b+=("$x"); else a+=("$x"); fi
  done
  timeout 120 "$mpirun" -np 1 -x OMP_NUM_THREADS "$titan" train "${a[@]}" : \
    -np 1 -x OMP_NUM_THREADS "$titan" train "${b[@]}"
}
args=("${small[@]}" --steps 2 --batch 2 --dump-folder "$out/run")
run2 "${args[@]}" --- "${args[@]}" --optimizer.lr 0.5 > "$out/bad.log" 2>&1; rc=$?
if [ $rc -eq 0 ] || ! grep -q "rank 1 was started with another config than rank 0" "$out/bad.log" ||
   grep -qE "^(\[titan\] [^ ]+ [^ ]+ - )?step:" "$out/bad.log"; then
  echo "FAIL: mismatched configs (rc $rc):"; cat "$out/bad.log"; exit 1
fi
echo "ok mismatched configs refused: $(grep -m1 'another config' "$out/bad.log")"
run2 "${args[@]}" --- "${args[@]}" > "$out/good.log" 2>&1 ||
  { echo "FAIL: the same config on both ranks:"; cat "$out/good.log"; exit 1; }
grep -qE "^(\[titan\] [^ ]+ [^ ]+ - )?step:" "$out/good.log" || { echo "FAIL: no step ran"; cat "$out/good.log"; exit 1; }
echo "ok the same config on both ranks trains"

# Settings each rank resolves for itself and that decide which collectives run must agree too:
# the precision (unset, it follows each rank's CPU; here TITAN_MIXED_PRECISION stands in for a
# rank on a bf16 CPU) and the transport switches. Refused by name before any step.
mismatch() { # NAME EXPECTED ENV_OF_RANK_0
  timeout 120 "$mpirun" -np 1 -x OMP_NUM_THREADS env "$3" "$titan" train "${args[@]}" : \
    -np 1 -x OMP_NUM_THREADS "$titan" train "${args[@]}" > "$out/$1.log" 2>&1; local rc=$?
  if [ $rc -eq 0 ] || ! grep -q "$2" "$out/$1.log" ||
     grep -qE "^(\[titan\] [^ ]+ [^ ]+ - )?step:" "$out/$1.log"; then
    echo "FAIL: $1 (rc $rc):"; cat "$out/$1.log"; exit 1
  fi
  echo "ok $1 refused: $(grep -m1 "$2" "$out/$1.log")"
}
mismatch precision "rank 1 resolved training.mixed_precision_param to float32, rank 0 to bfloat16" \
  TITAN_MIXED_PRECISION=bfloat16
mismatch bf16_transport "rank 1 has other TITAN_BF16_TRANSPORT / TITAN_FSDP_BWD_GATHER" \
  TITAN_BF16_TRANSPORT=float32
