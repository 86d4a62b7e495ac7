#!/usr/bin/env bash
# Metrics on 2 ranks (tests/dist.cmake):
#  1. global_max_loss is the max over the data-parallel ranks of each rank's own mean loss:
#     the ranks draw different random tokens, so it is above the global mean at every step
#     (with equal token counts the mean is the average of the two ranks' means).
#  2. metrics.save_for_all_ranks: every rank writes its own metrics.jsonl under rank_N/ and
#     its own TensorBoard events under tb/<run>/rank_N (torchtitan's layout), nothing at the
#     single-rank paths.
#  3. tensor parallelism: tps, tflops, mfu, val_tps and the summary's tokens_per_s_per_rank are per
#     rank, torchtitan's (tokens / time / non-data-parallel size): the 2 tp ranks share one
#     data-parallel rank's tokens (they were the group's, 2x)
#  4. MoE expert load (tokens_per_expert_*) counts the global batch in every balance mode: on
#     2 data-parallel ranks its mean is global tokens x top_k / experts (it was rank 0's own
#     counts, half of it, except with moe_load_balance = "bias")
#  5. the config translation's warnings (before the mesh) carry [rankN] as every later line
set -euo pipefail
source "$(dirname "$0")/dist_common.sh" "$@" # titan, out, small, mpi
mpi 2 "${small[@]}" --batch 2 --steps 4 --metrics "$out/a.jsonl" --dump-folder "$out/a" \
    --lr-scheduler.warmup_steps 9 >/dev/null 2> "$out/a.err"
# 5. the config's translation warns before the mesh is built: each rank's line carries its rank
for r in 0 1; do
  grep -q "^\[rank$r\] \[titan warn\] Warmup steps (9) exceed total steps (4)" "$out/a.err" ||
    { echo "FAIL: rank $r's start-up warning without its [rank$r]:"; cat "$out/a.err"; exit 1; }
done
echo "ok: start-up warnings carry their rank"
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
head -c 3000 /dev/urandom > "$out/val.bin"
mpi 2 "${small[@]}" --batch 2 --grad-accum 2 --steps 3 --log-freq 1 --parallelism.tensor_parallel_degree 2 \
    --validation.enable --validation.dataset_path "$out/val.bin" --validation.freq 3 \
    --validation.local_batch_size 2 --validation.seq_len 32 --data-format text \
    --metrics "$out/tp.jsonl" --dump-folder "$out/tp" > "$out/tp.log"
paste <(grep -o '"val_tps": [^,}]*' "$out/tp.jsonl" | cut -d' ' -f2) \
      <(grep -o '"val_s": [^,}]*' "$out/tp.jsonl" | cut -d' ' -f2) \
      <(grep -o '"val_tokens": [^,}]*' "$out/tp.jsonl" | cut -d' ' -f2) | awk '
  { n++; r = $1 * $2 * 2 / $3; if (r < 0.999999 || r > 1.000001) { print "FAIL validation " n ": val_tps " \
    $1 " x val_s " $2 " x 2 ranks is not val_tokens " $3; bad = 1 } }
  END { if (n != 2) { print "FAIL: " n " validations"; exit 1 } exit bad }'
paste <(grep -o '"tps": [^,}]*' "$out/tp.jsonl" | cut -d' ' -f2) \
      <(grep -o '"step_s": [^,}]*' "$out/tp.jsonl" | cut -d' ' -f2) \
      <(grep -o '"ntokens": [^,}]*' "$out/tp.jsonl" | cut -d' ' -f2) | awk '
  { n++; r = $1 * $2 * 2 / $3; if (r < 0.999999 || r > 1.000001) { print "FAIL step " n ": tps " $1 \
    " x step_s " $2 " x 2 ranks is not ntokens " $3; bad = 1 } }
  END { if (n != 3) { print "FAIL: " n " steps"; exit 1 } exit bad }'
grep -o "tokens_per_s=[0-9.]* tokens_per_s_per_rank=[0-9.]*" "$out/tp.log" | tr '=' ' ' | awk '
  { if ($2 < 1.999 * $4 || $2 > 2.001 * $4) { print "FAIL: summary " $0 " (2 ranks)"; exit 1 } n++ }
  END { if (n != 1) { print "FAIL: no summary"; exit 1 } }'
echo "ok: tp 2: tps, tflops, mfu, val_tps and tokens_per_s_per_rank per rank"
mpi 2 "${small[@]}" --set tie_embeddings=0 --set num_experts=4 --set top_k=2 --set moe_inter_dim=32 \
    --model.moe_load_balance none --batch 2 --steps 2 --log-freq 1 \
    --parallelism.expert_parallel_degree 2 --metrics "$out/moe.jsonl" --dump-folder "$out/moe" >/dev/null
# 2 ranks x 2 x 32 tokens x top 2 over 4 experts: 64 per expert and block
m=$(grep -o '"tokens_per_expert_mean": \[[^]]*\]' "$out/moe.jsonl" | grep -o '[0-9.]*' | sort -u | paste -sd' ')
[ "$m" = 64 ] || { echo "FAIL: tokens_per_expert_mean $m, want 64 (global tokens x top_k / experts)"; exit 1; }
echo "ok: MoE expert load over both ranks' tokens (mean 64 per expert and block)"
