#!/usr/bin/env bash
# Tensor + sequence parallelism under mpirun (tests/dist.cmake). Small model, fp32, random
# tokens, 1 thread per rank.
#  1. tp=2 (2 ranks) against 1 rank, tied and untied (untied with full activation
#     checkpointing): the losses of 5 steps within 1e-5 relative, the final parameters
#     (the checkpoints, full layout) within 1e-5 relative L2.
#  2. dp_shard=2 x tp=2 (4 ranks) against 1 rank x 2 microbatches: the same bounds. In bf16
#     (loss parallel off), FSDP's bf16 all-gathers give bitwise the losses and checkpoint of
#     its fp32 ones.
#  3. A checkpoint written by tp=2 at step 5 resumes on 1 rank; steps 6..10 match a
#     straight 1-rank run within 1e-5. Its shards hold one tensor per parameter and buffer
#     at most (a column slice of wo / w2 is one strided tensor, not one per row).
#  4. n_kv_heads that tp does not divide is refused by name.
#  6. (before 1.) parameter groups (other hyperparameters per group, row- and column-split
#     weights among them): tp=2 against 1 rank, the bounds of 1.
#  5. (in 1.) loss parallel off (parallelism.disable_loss_parallel: every rank gathers the
#     lm_head weight and computes the CE over the whole vocabulary) meets the same bounds
#     against the same 1-rank runs; the untied one with selective activation checkpointing
#     (block 1 of 2 recomputed, its collectives again).
# AdamW eps is 1e-6 here: with the default 1e-8 the first steps' updates are
# lr * g / (|g| + 1e-8), which turns the ~1e-7 relative summation-order differences of TP's
# split GEMMs into visible update differences on elements whose gradient is ~1e-8 (measured:
# 3e-6 to 6e-6 relative L2 after 5 steps; with eps 1e-3 the parameter difference after one
# step is 9e-8, the same as gradient accumulation's 8.6e-8).
set -euo pipefail
source "$(dirname "$0")/dist_common.sh" "$@" # titan, out, small, mpi, losses, same_losses
py=${4:-python3} # wire_check's (tests/dist.cmake passes the venv's)
model=("${small[@]}" --optimizer.eps 1e-6)
tp2=(--parallelism.tensor_parallel_degree 2)
# 1. tp=2 against one rank
# (first: [[optimizer.param_groups]] (tests/fixtures/param_groups/dense.toml) under tp=2: each
# rank steps the pieces of its slices with their parameters' groups; the same bounds as below)
without model --lr --optimizer.eps
m=("${kept[@]}" --config "$fixtures/param_groups/dense.toml" --set tie_embeddings=0 --steps 5 --batch 2
   --checkpoint-interval 5)
"$titan" train "${m[@]}" --metrics "$out/pg_ref.jsonl" --dump-folder "$out/pg_ref" > "$out/pg.log"
mpi 2 "${m[@]}" "${tp2[@]}" --metrics "$out/pg_tp.jsonl" --dump-folder "$out/pg_tp" > "$out/pg.log"
grep -q "optimizer: group 2, AdamW: 4 parameters" "$out/pg.log" || { cat "$out/pg.log"; exit 1; }
same_losses "param groups: tp=2 vs 1 rank" "$out/pg_ref.jsonl" "$out/pg_tp.jsonl"
"$diff_tool" "$out/pg_tp/checkpoint" "$out/pg_ref/checkpoint" 1e-5
for tie in 1 0; do
  ac=none; [ $tie = 0 ] && ac=full
  m=("${model[@]}" --set tie_embeddings=$tie --steps 5 --batch 2 --checkpoint-interval 5 --ac $ac)
  "$titan" train "${m[@]}" --metrics "$out/ref$tie.jsonl" --dump-folder "$out/ref$tie" \
      > "$out/ref$tie.log"
  mpi 2 "${m[@]}" "${tp2[@]}" --metrics "$out/tp$tie.jsonl" --dump-folder "$out/tp$tie" \
      > "$out/tp$tie.log"
  grep -q "dp_shard 1 x tp 2" "$out/tp$tie.log" || { cat "$out/tp$tie.log"; exit 1; }
  same_losses "tp=2 vs 1 rank (tie=$tie, ac=$ac)" "$out/ref$tie.jsonl" "$out/tp$tie.jsonl"
  "$diff_tool" "$out/tp$tie/checkpoint" "$out/ref$tie/checkpoint" 1e-5
  # 5. loss parallel off
  [ $tie = 0 ] && m+=(--ac selective --activation_checkpoint.selective_ac_option 2)
  mpi 2 "${m[@]}" "${tp2[@]}" --parallelism.disable_loss_parallel \
      --metrics "$out/nlp$tie.jsonl" --dump-folder "$out/nlp$tie" > "$out/nlp$tie.log"
  grep -q "loss parallel off" "$out/nlp$tie.log" || { cat "$out/nlp$tie.log"; exit 1; }
  same_losses "tp=2 loss parallel off vs 1 rank (tie=$tie)" "$out/ref$tie.jsonl" \
      "$out/nlp$tie.jsonl"
  "$diff_tool" "$out/nlp$tie/checkpoint" "$out/ref$tie/checkpoint" 1e-5
done

# 2. dp_shard=2 x tp=2 against one rank with 2 microbatches
m=("${model[@]}" --set tie_embeddings=0 --steps 5 --checkpoint-interval 5)
"$titan" train "${m[@]}" --batch 2 --grad-accum 2 --metrics "$out/acc.jsonl" \
    --dump-folder "$out/acc" > /dev/null
mpi 4 "${m[@]}" "${tp2[@]}" --batch 2 --metrics "$out/fsdp_tp.jsonl" \
    --dump-folder "$out/fsdp_tp" > "$out/fsdp_tp.log"
grep -q "dp_shard 2 x tp 2" "$out/fsdp_tp.log" || { cat "$out/fsdp_tp.log"; exit 1; }
same_losses "dp_shard=2 x tp=2 vs 1 rank x 2 microbatches" "$out/acc.jsonl" "$out/fsdp_tp.jsonl"
"$diff_tool" "$out/fsdp_tp/checkpoint" "$out/acc/checkpoint" 1e-5
# bf16 (loss parallel off: the lm_head weight also all-gathered over TP): FSDP's bf16
# all-gathers of each TP rank's slices are bitwise its fp32 ones (TITAN_BF16_TRANSPORT=float32)
m=("${model[@]}" --set tie_embeddings=0 --steps 4 --checkpoint-interval 4 --batch 2 "${tp2[@]}"
   --training.mixed_precision_param=bfloat16 --parallelism.disable_loss_parallel true)
for g in auto float32; do
  timeout 120 "$mpirun" -np 4 -x OMP_NUM_THREADS -x TITAN_BF16_TRANSPORT=$g "$titan" train "${m[@]}" \
      --metrics "$out/bf_$g.jsonl" --dump-folder "$out/bf_$g" > "$out/bf_$g.log" 2>&1 ||
    { cat "$out/bf_$g.log"; exit 1; }
done
cmp <(losses "$out/bf_auto.jsonl") <(losses "$out/bf_float32.jsonl") ||
  { echo "FAIL bf16 dp_shard=2 x tp=2: bf16 and fp32 gathers give different losses"; exit 1; }
"$diff_tool" "$out/bf_auto/checkpoint" "$out/bf_float32/checkpoint" 0
echo "ok bf16 dp_shard=2 x tp=2: bf16 gathers bitwise the fp32 ones"

# 3. a tp=2 checkpoint resumes on one rank
m=("${model[@]}" --steps 10 --checkpoint-interval 5 --batch 2)
"$titan" train "${m[@]}" --metrics "$out/straight.jsonl" --dump-folder "$out/straight" > /dev/null
mpi 2 "${m[@]}" "${tp2[@]}" --metrics "$out/w.jsonl" --dump-folder "$out/w" --stop-after-step 5 \
    > /dev/null
ls "$out/w/checkpoint/step-5/rank-00001.safetensors" > /dev/null
# the safetensors header (u64 length, JSON): 3 buffers x 25 parameter tensors (2 blocks x 11,
# embedding, final norm, lm_head) at most; one piece per row would be over 3 x 2 x (64 + 64)
for r in 0 1; do
  f="$out/w/checkpoint/step-5/rank-0000$r.safetensors"
  hl=$(od -An -t u8 -N 8 "$f" | tr -d ' ')
  nt=$(head -c $((8 + hl)) "$f" | tail -c "$hl" | grep -o '"data_offsets"' | wc -l)
  [ "$nt" -ge 3 ] && [ "$nt" -le 75 ] ||
    { echo "FAIL: rank $r of a tp=2 save holds $nt tensors (header $hl bytes)"; exit 1; }
  echo "ok tp=2 shard $r: $nt tensors, header $hl bytes"
done
"$titan" train "${m[@]}" --metrics "$out/r1.jsonl" --dump-folder "$out/w" > "$out/r1.log"
grep -q "resumed from $out/w/checkpoint/step-5" "$out/r1.log" || { cat "$out/r1.log"; exit 1; }
same_losses "tp=2 checkpoint resumed on 1 rank, steps 6..10" "$out/straight.jsonl" \
    "$out/r1.jsonl" 5

# 4. kv heads are split, never replicated: n_kv_heads must divide by tp
if mpi 2 "${model[@]}" --set n_kv_heads=1 --steps 1 "${tp2[@]}" > "$out/kv.log" 2>&1; then
  echo "FAIL: n_kv_heads=1 with tp=2 was accepted"; exit 1; fi
grep -q "n_kv_heads (1) must be a multiple of tensor_parallel_degree (2)" "$out/kv.log" ||
  { cat "$out/kv.log"; exit 1; }
echo "ok n_kv_heads=1 with tp=2 is refused"

# 6. bf16: the all-gathers read only by bf16 GEMMs move bf16 (model_bf16_wire). Against the same
#    run with fp32 transport (TITAN_BF16_TRANSPORT=float32) the losses are bitwise equal and the
#    profiled step 5 makes the same collectives, these at half the bytes: per block 6 of the
#    [N,D] = [64,64] norm outputs and residual gradients (2 forward, 4 backward; a checkpointed
#    block 2 more), the final norm's output, and (loss parallel off) the lm_head weight
#    [300,64]; the embedding gradient's gather (read by the fp32 embedding backward) and every
#    reduce-scatter and all-reduce unchanged. Cases: tied; untied with full AC and loss
#    parallel off; tied with block 1's matmul on the fp32 "default" implementation (a
#    [kernels] override), whose gathers then stay fp32 (block 0's 6 and the final norm's
#    halved). Against 1 rank in bf16 within 1e-4 (measured 2.6e-5: the row-parallel partial
#    sums change the fp32 summation order, and bf16 rounding of the next GEMM's operands turns
#    some of those last-bit differences into bf16 steps).
bf=(--training.mixed_precision_param=bfloat16 --steps 5 --batch 2 --profiling.enable_profiling true
    --profiling.profile_freq 5 --profiling.profiler_active 1 --profiling.profiler_warmup 0)
nd=$((64 * 64 * 4))
for case in tied untied_full_nlp block1_fp32; do
  case $case in
    tied) m=("${model[@]}" "${bf[@]}" --set tie_embeddings=1)
          want=("halved 13" "halved-bytes all-gather $nd x 13") ;;
    untied_full_nlp) m=("${model[@]}" "${bf[@]}" --set tie_embeddings=0 --ac full)
          want=("halved 18" "halved-bytes all-gather $nd x 17"
                "halved-bytes all-gather $((300 * 64 * 4)) x 1") ;;
    block1_fp32) m=("${model[@]}" "${bf[@]}" --set tie_embeddings=1
                    --kernels.overrides 'layers.1.matmul=default')
          want=("halved 7" "halved-bytes all-gather $nd x 7") ;;
  esac
  "$titan" train "${m[@]}" --metrics "$out/bf1_$case.jsonl" --dump-folder "$out/bf1_$case" \
      > /dev/null 2>&1
  [ $case = untied_full_nlp ] && m+=(--parallelism.disable_loss_parallel)
  mpi 2 "${m[@]}" "${tp2[@]}" --metrics "$out/bf_$case.jsonl" --dump-folder "$out/bf_$case" \
      > "$out/bf_$case.log" 2>&1 || { cat "$out/bf_$case.log"; exit 1; }
  grep -q "TP exchanges of values rounded to bf16 on arrival anyway moved in bf16" \
      "$out/bf_$case.log" || { cat "$out/bf_$case.log"; exit 1; }
  TITAN_BF16_TRANSPORT=float32 mpi 2 "${m[@]}" "${tp2[@]}" \
      --metrics "$out/bff_$case.jsonl" --dump-folder "$out/bff_$case" > "$out/bff_$case.log" 2>&1 ||
    { cat "$out/bff_$case.log"; exit 1; }
  grep -q "moved in fp32 (TITAN_BF16_TRANSPORT)" "$out/bff_$case.log" ||
    { cat "$out/bff_$case.log"; exit 1; }
  identical_losses "bf16 tp=2, bf16 vs fp32 exchanges ($case)" "$out/bf_$case.jsonl" \
      "$out/bff_$case.jsonl"
  same_losses "bf16 tp=2 vs 1 rank ($case)" "$out/bf1_$case.jsonl" "$out/bf_$case.jsonl" 0 1e-4
  wire_check "bf16 tp=2 collectives ($case)" "$out/bf_$case" "$out/bff_$case" 5 tensor-parallel \
      "${want[@]}"
done

# 6. document masking (model.attn_mask_type = "block_causal") on packed byte-token documents of
#    1 to 40 bytes: tp=2 (each rank attends with its heads per document over every token of the
#    window) against one rank, and against the causal losses (which must differ)
awk 'BEGIN { for (i = 1; i <= 80; i++) { s = ""; for (k = 0; k <= (i * 7) % 40; k++)
  s = s substr("abcdefghijklmnopqrstuvwxyz", i % 26 + 1, 1); printf "{\"text\": \"%s\"}\n", s } }' \
  > "$out/docs.jsonl"
dm=()
for a in "${model[@]}"; do [ "$a" = --random-tokens ] || dm+=("$a"); done
dm+=(--data "$out/docs.jsonl" --steps 5 --batch 2)
"$titan" train "${dm[@]}" --metrics "$out/dc1.jsonl" --dump-folder "$out/dc1" > "$out/dc1.log" ||
  { cat "$out/dc1.log"; exit 1; }
"$titan" train "${dm[@]}" --model.attn_mask_type block_causal --metrics "$out/db1.jsonl" \
    --dump-folder "$out/db1" > "$out/db1.log" || { cat "$out/db1.log"; exit 1; }
mpi 2 "${dm[@]}" --model.attn_mask_type block_causal "${tp2[@]}" --metrics "$out/db2.jsonl" \
    --dump-folder "$out/db2" > "$out/db2.log" || { cat "$out/db2.log"; exit 1; }
same_losses "block_causal tp=2 vs 1 rank" "$out/db1.jsonl" "$out/db2.jsonl"
if cmp -s <(losses "$out/dc1.jsonl") <(losses "$out/db1.jsonl"); then
  echo "FAIL: block_causal gave the causal losses"; exit 1
fi
