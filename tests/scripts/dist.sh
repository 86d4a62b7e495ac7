#!/usr/bin/env bash
# Multi-process training under mpirun (tests/dist.cmake). Small model, fp32, random tokens.
#  1. FSDP equivalence: the same global batch split over ranks agrees with one rank using
#     gradient accumulation: dp_shard=2 (2 ranks) and dp_shard=4, dp_replicate=2 x dp_shard=2
#     (HSDP, 4 ranks) against 1 rank x 2 microbatches: the losses of 5 steps within 1e-5
#     relative, the final parameters within 1e-5 relative L2.
#  2. Resharding: a checkpoint written by 2 ranks at step 5 resumes on 1 rank and on 4 ranks;
#     steps 6..10 match a straight 1-rank run within 1e-5.
#     The 2-rank save is written in the background (the commit waits for every rank's shard);
#     the HSDP run saves synchronously; both are compared with the 1-rank checkpoint.
#  3. A rank that fails alone stops every rank with its error (no hang); so does a checkpoint
#     folder rank 0 cannot create (and lock) at the start.
set -euo pipefail
source "$(dirname "$0")/dist_common.sh" "$@" # titan, out, small, mpi, losses, same_losses
model=("${small[@]}")
for tie in 1 0; do
  m=("${model[@]}" --set tie_embeddings=$tie --steps 5)
  "$titan" train "${m[@]}" --batch 2 --grad-accum 2 --metrics "$out/ref$tie.jsonl" \
      --dump-folder "$out/ref$tie" --checkpoint-interval 5 > "$out/ref$tie.log"
  mpi 2 "${m[@]}" --batch 2 --metrics "$out/fsdp2_$tie.jsonl" --dump-folder "$out/fsdp2_$tie" \
      --checkpoint-interval 5 > "$out/fsdp2_$tie.log"
  grep -q "dp_shard 2" "$out/fsdp2_$tie.log" || { cat "$out/fsdp2_$tie.log"; exit 1; }
  same_losses "dp_shard=2 vs 1 rank x 2 microbatches (tie=$tie)" "$out/ref$tie.jsonl" \
      "$out/fsdp2_$tie.jsonl"
  "$diff_tool" "$out/fsdp2_$tie/checkpoint" "$out/ref$tie/checkpoint" 1e-5
done
# bf16 mixed precision under FSDP: each rank's bf16 weight copy is made from the gathered units
# once per step; 2 ranks x 1 microbatch follow 1 rank x 2 microbatches
m=("${model[@]}" --set tie_embeddings=1 --steps 5 --training.mixed_precision_param=bfloat16)
"$titan" train "${m[@]}" --batch 2 --grad-accum 2 --metrics "$out/bf_ref.jsonl" \
    --dump-folder "$out/bf_ref" > "$out/bf_ref.log" 2>&1
mpi 2 "${m[@]}" --batch 2 --metrics "$out/bf_fsdp2.jsonl" --dump-folder "$out/bf_fsdp2" \
    > "$out/bf_fsdp2.log" 2>&1 || { cat "$out/bf_fsdp2.log"; exit 1; }
same_losses "bf16: dp_shard=2 vs 1 rank x 2 microbatches" "$out/bf_ref.jsonl" "$out/bf_fsdp2.jsonl"
m=("${model[@]}" --set tie_embeddings=1 --steps 5)
mpi 4 "${m[@]}" --batch 1 --metrics "$out/fsdp4.jsonl" --dump-folder "$out/fsdp4" \
    --checkpoint-interval 5 --parallelism.fsdp_reshard_after_forward always > "$out/fsdp4.log"
same_losses "dp_shard=4 (reshard always) vs 1 rank" "$out/ref1.jsonl" "$out/fsdp4.jsonl"
"$diff_tool" "$out/fsdp4/checkpoint" "$out/ref1/checkpoint" 1e-5
mpi 4 "${m[@]}" --batch 1 --metrics "$out/hsdp.jsonl" --dump-folder "$out/hsdp" \
    --checkpoint-interval 5 --parallelism.data_parallel_replicate_degree 2 \
    --parallelism.fsdp_reshard_after_forward never --sync-checkpoint > "$out/hsdp.log"
grep -q "dp_replicate 2 x dp_shard 2" "$out/hsdp.log" || { cat "$out/hsdp.log"; exit 1; }
same_losses "HSDP 2 x 2 (reshard never) vs 1 rank" "$out/ref1.jsonl" "$out/hsdp.jsonl"
"$diff_tool" "$out/hsdp/checkpoint" "$out/ref1/checkpoint" 1e-5

# 2. resharding: 2 ranks write step 5 (two shard files), 1 and 4 ranks continue
m=("${model[@]}" --steps 10 --checkpoint-interval 5)
"$titan" train "${m[@]}" --batch 2 --grad-accum 2 --metrics "$out/straight.jsonl" \
    --dump-folder "$out/straight" > /dev/null
mpi 2 "${m[@]}" --batch 2 --metrics "$out/w2.jsonl" --dump-folder "$out/w2" \
    --stop-after-step 5 > "$out/w2.log"
grep -q "step 5 saved to .* (background)" "$out/w2.log" || { cat "$out/w2.log"; exit 1; }
ls "$out/w2/checkpoint/step-5/rank-00001.safetensors" > /dev/null
cp -r "$out/w2" "$out/w2b"
"$titan" train "${m[@]}" --batch 2 --grad-accum 2 --metrics "$out/r1.jsonl" \
    --dump-folder "$out/w2" > "$out/r1.log"
grep -q "resumed from $out/w2/checkpoint/step-5" "$out/r1.log" || { cat "$out/r1.log"; exit 1; }
same_losses "2-rank checkpoint resumed on 1 rank, steps 6..10" "$out/straight.jsonl" \
    "$out/r1.jsonl" 5
mpi 4 "${m[@]}" --batch 1 --metrics "$out/r4.jsonl" --dump-folder "$out/w2b" > "$out/r4.log"
grep -q "resumed from $out/w2b/checkpoint/step-5" "$out/r4.log" || { cat "$out/r4.log"; exit 1; }
same_losses "2-rank checkpoint resumed on 4 ranks, steps 6..10" "$out/straight.jsonl" \
    "$out/r4.jsonl" 5

# 3. one rank fails alone (rank 1 has no document of a one-document dataset): all stop
printf '{"text": "only one document here"}\n' > "$out/one.jsonl"
start=$(date +%s)
if mpi 2 "${model[@]}" --steps 3 --batch 1 --data "$out/one.jsonl" > "$out/fail.log" 2>&1; then
  echo "FAIL: a rank without data did not fail the run"; cat "$out/fail.log"; exit 1; fi
grep -q "titan: error (rank 1 of 2)" "$out/fail.log" || { cat "$out/fail.log"; exit 1; }
echo "ok a failing rank stops all ranks with its error in $(( $(date +%s) - start )) s:"
grep "titan: error" "$out/fail.log" | head -1

# a checkpoint folder under a regular file: found before the first step (train_preflight),
# both ranks stop with it
touch "$out/afile"
if mpi 2 "${model[@]}" --steps 2 --batch 1 --checkpoint-interval 1 \
    --checkpoint.folder "$out/afile/ck" > "$out/ckfail.log" 2>&1; then
  echo "FAIL: an uncreatable checkpoint folder did not fail the run"; cat "$out/ckfail.log"; exit 1; fi
grep -q "checkpoint.folder: .*afile is not a folder" "$out/ckfail.log" &&
  ! grep -qE "^(\[titan\] [^ ]+ [^ ]+ - )?step:" "$out/ckfail.log" || { cat "$out/ckfail.log"; exit 1; }
echo "ok an uncreatable checkpoint folder stops both ranks:"
grep "titan: error" "$out/ckfail.log" | head -2
