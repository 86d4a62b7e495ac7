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
