#!/usr/bin/env bash
# Metrics on 2 ranks (tests/dist.cmake):
#  1. global_max_loss is the max over the data-parallel ranks of each rank's own mean loss:
#     the ranks draw different random tokens, so it is above the global mean at every step
#     (with equal token counts the mean is the average of the two ranks' means).
#  2. metrics.save_for_all_ranks: every rank writes its own metrics.jsonl under rank_N/ and
#     its own TensorBoard events under tb/<run>/rank_N (torchtitan's layout), nothing at the
#     single-rank paths.
set -euo pipefail
source "$(dirname "$0")/dist_common.sh" "$@" # titan, out, small, mpi
mpi 2 "${small[@]}" --batch 2 --steps 4 --metrics "$out/a.jsonl" --dump-folder "$out/a" >/dev/null
paste <(grep -o '"loss": [^,}]*' "$out/a.jsonl" | cut -d' ' -f2) \
      <(grep -o '"max_loss": [^,}]*' "$out/a.jsonl" | cut -d' ' -f2) | awk '
  { n++; if (!($2 > $1)) { print "FAIL step " n ": max_loss " $2 " not above loss " $1; bad = 1 } }
  END { if (n != 4) { print "FAIL: " n " steps"; exit 1 } exit bad }'
echo "ok: 2 ranks: global_max_loss above global_avg_loss at every step"
mpi 2 "${small[@]}" --batch 2 --steps 3 --log-freq 1 --dump-folder "$out/b" \
    --metrics.enable_jsonl --metrics.enable_tensorboard --metrics.save_for_all_ranks >/dev/null
for r in 0 1; do
  n=$(grep -c '"step"' "$out/b/rank_$r/metrics.jsonl")
  [ "$n" = 3 ] || { echo "FAIL: rank_$r/metrics.jsonl has $n lines"; exit 1; }
  ls "$out"/b/tb/*/rank_$r/events.out.tfevents.* >/dev/null ||
    { echo "FAIL: no TensorBoard events for rank $r"; find "$out/b"; exit 1; }
done
[ ! -e "$out/b/metrics.jsonl" ] || { echo "FAIL: a shared metrics.jsonl as well"; exit 1; }
[ "$(ls "$out/b/tb" | wc -l)" = 1 ] || { echo "FAIL: the ranks chose different run folders"; exit 1; }
diff <(grep -o '"loss": [^,}]*' "$out/b/rank_0/metrics.jsonl") \
     <(grep -o '"loss": [^,}]*' "$out/b/rank_1/metrics.jsonl") ||
  { echo "FAIL: the ranks logged different global losses"; exit 1; }
echo "ok: save_for_all_ranks: rank_0/ and rank_1/ metrics.jsonl, tb/<run>/rank_0 and rank_1"
