#!/usr/bin/env bash
# Multi-process training under mpirun (tests/dist.cmake). Small model, fp32, random tokens.
#  1. FSDP equivalence: the same global batch split over ranks agrees with one rank using
#     gradient accumulation: dp_shard=2 (2 ranks) and dp_shard=4, dp_replicate=2 x dp_shard=2
#     (HSDP, 4 ranks) against 1 rank x 2 microbatches: the losses of 5 steps within 1e-5
#     relative, the final parameters within 1e-5 relative L2. In bf16 (tied and untied),
#     2 ranks with FSDP's bf16 all-gathers against the same run with fp32 ones: bitwise the
#     same losses, validation, checkpoint and export, and the gathered bytes as derived below.
#     The embedding's backward reads no parameters: FSDP does not gather it for it. Against
#     the same runs gathering every unit for its backward (TITAN_FSDP_BWD_GATHER=all, what
#     titan did before), tied and untied, fp32 and bf16, reshard default and never: bitwise
#     the same losses and checkpoint, and the gathered bytes lower by exactly one embedding
#     gather where it was released after forward (untied, default), unchanged elsewhere.
#  2. Resharding: a checkpoint written by 2 ranks at step 5 resumes on 1 rank and on 4 ranks;
#     steps 6..10 match a straight 1-rank run within 1e-5. A weighted dataset mixture on 2
#     ranks resumes bit for bit. Parameter groups (other hyperparameters per group): 2 ranks
#     resumed on 1 against 1 rank x 2 microbatches.
#     The 2-rank save is written in the background (the commit waits for every rank's shard);
#     the HSDP run saves synchronously; both are compared with the 1-rank checkpoint.
#  3. A rank that fails alone stops every rank with its error (no hang); so does a checkpoint
#     folder rank 0 cannot create (and lock) at the start. A divergence whose NaN reaches one
#     rank's gradient shard only stops both ranks at the same microbatch, and the save of the
#     step before, in flight in the background, is committed.
set -euo pipefail
source "$(dirname "$0")/dist_common.sh" "$@" # titan, out, small, mpi, losses, same_losses
model=("${small[@]}")
# (fp32 pinned: where the CPU has bf16 units the default is bf16, whose weights' bf16 copies turn
# the last-bit differences of another summation order into whole bf16 ulps; see below)
for tie in 1 0; do
  m=("${model[@]}" --set tie_embeddings=$tie --steps 5 --training.mixed_precision_param=float32)
  "$titan" train "${m[@]}" --batch 2 --grad-accum 2 --metrics "$out/ref$tie.jsonl" \
      --dump-folder "$out/ref$tie" --checkpoint-interval 5 > "$out/ref$tie.log"
  mpi 2 "${m[@]}" --batch 2 --metrics "$out/fsdp2_$tie.jsonl" --dump-folder "$out/fsdp2_$tie" \
      --checkpoint-interval 5 > "$out/fsdp2_$tie.log"
  grep -q "dp_shard 2" "$out/fsdp2_$tie.log" || { cat "$out/fsdp2_$tie.log"; exit 1; }
  same_losses "dp_shard=2 vs 1 rank x 2 microbatches (tie=$tie)" "$out/ref$tie.jsonl" \
      "$out/fsdp2_$tie.jsonl"
  "$diff_tool" "$out/fsdp2_$tie/checkpoint" "$out/ref$tie/checkpoint" 1e-5
done
# --grad-accum K is K microbatches on every data-parallel rank (global = K x local x dp), not
# K x local split over the ranks (which gave 2 ranks no accumulation for K = 2, and refused K = 3
# naming global_batch_size, a field the command line never set)
mpi 2 "${model[@]}" --steps 1 --batch 2 --grad-accum 3 --dump-folder "$out/ga3" > "$out/ga3.log"
grep -q "2 x .* tokens x 3 microbatches x 2 data-parallel ranks" "$out/ga3.log" ||
  { echo "FAIL --grad-accum 3 on 2 ranks"; cat "$out/ga3.log"; exit 1; }
echo "ok --grad-accum 3 on 2 ranks: 3 microbatches on each"
# bf16 mixed precision under FSDP: each rank's bf16 weight copy is made from the gathered units
# once per step; 2 ranks x 1 microbatch follow 1 rank x 2 microbatches. The all-gathers move as
# bf16 every parameter that only bf16 GEMMs read (rounded before the send: rounding is
# idempotent), the others (norm weights, the embedding table, so a tied lm_head too) exact, so
# the run is BITWISE the fp32-transport one (TITAN_BF16_TRANSPORT=float32): the same losses and
# validation loss, the same checkpoint (param_diff 0) and the same fp32 HF export (the final
# gather is exact).
# Gathered bytes per step and rank (metrics fsdp_gather_bytes; the whole unit per gather) for
# `small` (D 64, 2 blocks of 36864 matrix elements + 160 norm elements, V x D = 19200; the
# embedding gathered for its forward only, its backward reads no parameters):
#   fp32 untied: 4 x (19200 embedding + 4 x 37024 blocks (forward, backward) + 19264 head)
#              = 746240
#   bf16 untied: 19200 x 4 (exact) + 4 x (37024 x 2 + 160 x 4) + 19264 x 2 + 64 x 4
#              = 414336 (0.56: the embedding stays fp32)
#   fp32 tied:   4 x (19200 (pinned: once) + 4 x 37024 + 64) = 669440
#   bf16 tied:   19200 x 4 + 4 x 74688 + 64 x 4 = 375808 (0.56)
mpi_gather() { # mpi_gather DTYPE ARGS...: mpi 2 with TITAN_BF16_TRANSPORT=DTYPE on every rank
  local g=$1; shift
  timeout 120 "$mpirun" -np 2 -x OMP_NUM_THREADS -x TITAN_BF16_TRANSPORT="$g" "$titan" train "$@"
}
gather_bytes() { grep -o '"fsdp_gather_bytes": [^,}]*' "$1" | cut -d' ' -f2 | sort -u | tr '\n' ' '; }
declare -A want=([auto0]="414336 " [float320]="746240 " [auto1]="375808 " [float321]="669440 ")
# validation at step 5 on the training model (its shapes): the forward-only pass leaves the head
# gathered, bf16-rounded, and the export's gather must gather it again exact
for i in $(seq 1 20); do printf 'The quick brown fox %d jumps over the lazy dog.\n\n' "$i"; done \
  > "$out/val.txt"
val=(--validation.enable --validation.dataset_path "$out/val.txt" --validation.freq 5
     --validation.steps 2 --validation.seq_len 32 --validation.local_batch_size 2)
for tie in 1 0; do
  m=("${model[@]}" --set tie_embeddings=$tie --steps 5 --training.mixed_precision_param=bfloat16
     --batch 2 "${val[@]}")
  "$titan" train "${m[@]}" --grad-accum 2 --metrics "$out/bf_ref$tie.jsonl" \
      --dump-folder "$out/bf_ref$tie" > "$out/bf_ref$tie.log" 2>&1
  for g in auto float32; do
    d="$out/bf_${g}_$tie"
    mpi_gather $g "${m[@]}" --metrics "$out/bf_${g}_$tie.jsonl" --dump-folder "$d" \
        --checkpoint-interval 5 --out "$d/hf" > "$d.log" 2>&1 || { cat "$d.log"; exit 1; }
    got=$(gather_bytes "$out/bf_${g}_$tie.jsonl")
    [ "$got" = "${want[$g$tie]}" ] ||
      { echo "FAIL bf16 tie=$tie gather $g: fsdp_gather_bytes $got, want ${want[$g$tie]}"; exit 1; }
  done
  # 1e-4: the ranks' gradients are summed in another order than one rank's microbatches (the
  # second added into the first's), and a weight whose last fp32 bit differs rounds to another
  # bf16 value now and then (one bf16 ulp, 2^-8): measured 0 to 2.4e-6 with the chunked lm_head +
  # CE, 1.4e-5 fused on AMX tiles, on the AMX Xeon of session 22
  same_losses "bf16 (tie=$tie): dp_shard=2 vs 1 rank x 2 microbatches" "$out/bf_ref$tie.jsonl" \
      "$out/bf_auto_$tie.jsonl" 0 1e-4
  vl() { grep -o '"val_loss": [^,}]*' "$1"; }
  [ -n "$(vl "$out/bf_auto_$tie.jsonl")" ] &&
  cmp <(losses "$out/bf_auto_$tie.jsonl"; vl "$out/bf_auto_$tie.jsonl") \
      <(losses "$out/bf_float32_$tie.jsonl"; vl "$out/bf_float32_$tie.jsonl") ||
    { echo "FAIL bf16 tie=$tie: bf16 and fp32 gathers give different (validation) losses"; exit 1; }
  "$diff_tool" "$out/bf_auto_$tie/checkpoint" "$out/bf_float32_$tie/checkpoint" 0
  cmp "$out/bf_auto_$tie/hf/model.safetensors" "$out/bf_float32_$tie/hf/model.safetensors"
  echo "ok bf16 (tie=$tie): bf16 gathers bitwise the fp32 ones (losses, checkpoint, export," \
       "validation);" \
       "gathered bytes per step $(gather_bytes "$out/bf_auto_$tie.jsonl")vs" \
       "$(gather_bytes "$out/bf_float32_$tie.jsonl")"
done
if TITAN_BF16_TRANSPORT=half "$titan" train "${m[@]}" > "$out/bad_env.log" 2>&1; then
  echo "FAIL: TITAN_BF16_TRANSPORT=half accepted"; exit 1; fi
grep -q "TITAN_BF16_TRANSPORT: 'half': expected float32 or auto" "$out/bad_env.log" ||
  { cat "$out/bad_env.log"; exit 1; }
# the two switches TITAN_BF16_TRANSPORT replaced are refused by name, whatever their value
for old in TITAN_FSDP_GATHER TITAN_BF16_EXCHANGE; do
  if env "$old=float32" "$titan" train "${m[@]}" > "$out/bad_env.log" 2>&1; then
    echo "FAIL: $old accepted"; exit 1; fi
  grep -q "$old is no longer read: set TITAN_BF16_TRANSPORT=float32 instead" "$out/bad_env.log" ||
    { cat "$out/bad_env.log"; exit 1; }
done
echo "ok TITAN_BF16_TRANSPORT=half and the old switches are refused"
# No gather for a backward without parameters (the embedding's): against TITAN_FSDP_BWD_GATHER=all
# (every unit gathered again for its backward) the same losses and checkpoint, bit for bit, and
# per step and rank exactly 19200 x 4 = 76800 bytes fewer (one fp32 embedding gather: the
# embedding is exact in bf16 too) where the embedding is released after its forward (untied,
# reshard default); tied (kept from forward for the head) or reshard never: the same bytes.
for tie in 0 1; do
  for prec in float32 bfloat16; do
    for rs in default never; do
      c="bwd_${tie}_${prec}_$rs"
      m=("${model[@]}" --set tie_embeddings=$tie --training.mixed_precision_param=$prec --steps 3
         --batch 2 --checkpoint-interval 3 --parallelism.fsdp_reshard_after_forward $rs)
      for g in all auto; do
        timeout 120 "$mpirun" -np 2 -x OMP_NUM_THREADS -x TITAN_FSDP_BWD_GATHER=$g "$titan" train \
            "${m[@]}" --metrics "$out/$c.$g.jsonl" --dump-folder "$out/$c.$g" > "$out/$c.$g.log" 2>&1 ||
          { cat "$out/$c.$g.log"; exit 1; }
      done
      identical_losses "$c: no embedding gather for its backward vs all" "$out/$c.all.jsonl" \
          "$out/$c.auto.jsonl"
      "$diff_tool" "$out/$c.auto/checkpoint" "$out/$c.all/checkpoint" 0
      saved=0; [ $tie$rs = 0default ] && saved=76800
      a=$(gather_bytes "$out/$c.all.jsonl"); b=$(gather_bytes "$out/$c.auto.jsonl")
      [ "$(wc -w <<< "$a$b")" = 2 ] && [ $((a - b)) = $saved ] ||
        { echo "FAIL $c: gathered bytes per step $b, with every backward gather $a: want $saved fewer"; exit 1; }
      echo "ok $c: gathered bytes per step ${b% } vs ${a% }"
    done
  done
done
if TITAN_FSDP_BWD_GATHER=some "$titan" train "${m[@]}" > "$out/bad_env.log" 2>&1; then
  echo "FAIL: TITAN_FSDP_BWD_GATHER=some accepted"; exit 1; fi
grep -q "TITAN_FSDP_BWD_GATHER: 'some': expected all or auto" "$out/bad_env.log" ||
  { cat "$out/bad_env.log"; exit 1; }
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

# a dataset's position saved by 2 ranks is refused on 1, naming the way to read the data from
# its start again, which then resumes
printf 'one two three\n\nfour five\n\nsix seven eight\n\nnine\n' > "$out/few.txt"
d=("${model[@]}" --batch 1 --data "$out/few.txt" --steps 4 --checkpoint-interval 2
   --dump-folder "$out/dp")
mpi 2 "${d[@]}" --stop-after-step 2 > "$out/dp2.log" 2>&1 || { cat "$out/dp2.log"; exit 1; }
if OMP_NUM_THREADS=1 "$titan" train "${d[@]}" > "$out/dp1.log" 2>&1 ||
   ! grep -q 'belong to 2 data-parallel ranks, this run has 1: .*exclude_from_loading = \["dataloader"\]' "$out/dp1.log"; then
  echo "FAIL a dataset position of 2 ranks on 1"; cat "$out/dp1.log"; exit 1; fi
OMP_NUM_THREADS=1 "$titan" train "${d[@]}" --checkpoint.exclude_from_loading dataloader \
  > "$out/dp1x.log" 2>&1 && grep -q "not loaded: dataloader" "$out/dp1x.log" ||
  { echo "FAIL exclude_from_loading dataloader"; cat "$out/dp1x.log"; exit 1; }
echo "ok a dataset position of 2 ranks on 1: refused, naming exclude_from_loading, which resumes"

# a weighted mixture of two sources (each split over the ranks, the same draws on both): the
# resumed steps 3..4 are the straight 2-rank run's, bit for bit
printf '{"text": "alpha beta gamma delta"}\n{"text": "epsilon zeta"}\n{"text": "eta theta"}\n' \
  > "$out/mixb.jsonl"
x=("${model[@]}" --batch 2 --training.dataset_sources "$out/few.txt,$out/mixb.jsonl"
   --training.dataset_weights 1,2 --steps 4 --checkpoint-interval 2)
mpi 2 "${x[@]}" --metrics "$out/mx_full.jsonl" --dump-folder "$out/mx_full" > "$out/mx.log" 2>&1 ||
  { cat "$out/mx.log"; exit 1; }
mpi 2 "${x[@]}" --metrics "$out/mx_a.jsonl" --dump-folder "$out/mx" --stop-after-step 2 \
  > "$out/mx.log" 2>&1 || { cat "$out/mx.log"; exit 1; }
mpi 2 "${x[@]}" --metrics "$out/mx_b.jsonl" --dump-folder "$out/mx" > "$out/mx.log" 2>&1 ||
  { cat "$out/mx.log"; exit 1; }
grep -q "resumed from $out/mx/checkpoint/step-2" "$out/mx.log" || { cat "$out/mx.log"; exit 1; }
identical_losses "a 2-rank mixture resumed at step 2" "$out/mx_full.jsonl" \
  <(cat "$out/mx_a.jsonl" "$out/mx_b.jsonl")

# [[optimizer.param_groups]] (tests/fixtures/param_groups/dense.toml: other lr, betas and weight
# decay per group, an Adam group): each
# rank steps its shard's pieces of every parameter with that parameter's group. 2 ranks saving
# at step 3, resumed on 1 rank (the spans made again over another sharding), against 1 rank x 2
# microbatches throughout: the losses within 1e-5, the final parameters within 1e-5 relative L2
without model --lr
g=("${kept[@]}" --config "$fixtures/param_groups/dense.toml" --set tie_embeddings=0 --steps 5 --checkpoint-interval 3
    --training.mixed_precision_param=float32)
# groups_2to1 TAG WHAT ARGS...: ARGS on 1 rank x 2 microbatches (TAG_ref), and on 2 ranks saving
# at step 3 then resumed on 1 rank (TAG): the same losses and final parameters, nothing said
groups_2to1() {
  local tag=$1 what=$2
  shift 2
  "$titan" train "$@" --batch 2 --grad-accum 2 --metrics "$out/${tag}_ref.jsonl" \
    --dump-folder "$out/${tag}_ref" > "$out/$tag.log" 2>&1 || { cat "$out/$tag.log"; exit 1; }
  grep -q "optimizer: group 1, Adam: 9 parameters \[norm\]" "$out/$tag.log" ||
    { cat "$out/$tag.log"; exit 1; }
  mpi 2 "$@" --batch 2 --metrics "$out/${tag}_a.jsonl" --dump-folder "$out/$tag" \
    --stop-after-step 3 > "$out/$tag.log" 2>&1 || { cat "$out/$tag.log"; exit 1; }
  OMP_NUM_THREADS=1 "$titan" train "$@" --batch 2 --grad-accum 2 --metrics "$out/${tag}_b.jsonl" \
    --dump-folder "$out/$tag" > "$out/$tag.log" 2>&1 || { cat "$out/$tag.log"; exit 1; }
  grep -q "resumed from $out/$tag/checkpoint/step-3" "$out/$tag.log" &&
    ! grep -q "trained with\|moments" "$out/$tag.log" ||
    { echo "FAIL $what resumed"; cat "$out/$tag.log"; exit 1; }
  same_losses "$what: 2 ranks, resumed on 1, vs 1 rank x 2 microbatches" "$out/${tag}_ref.jsonl" \
    <(cat "$out/${tag}_a.jsonl" "$out/${tag}_b.jsonl")
  "$diff_tool" "$out/$tag/checkpoint/step-5" "$out/${tag}_ref/checkpoint/step-5" 1e-5
}
groups_2to1 pg "param groups" "${g[@]}"
# the same with the AdamW moments in bf16 (optimizer.implementation = "fused_opt_states_bf16"):
# each rank's shard of them saved as BF16 tensors, loaded again over another sharding
groups_2to1 pb "bf16 moments" "${g[@]}" --optimizer.implementation fused_opt_states_bf16
"$titan" inspect "$out/pb/checkpoint/step-3/rank-00001.safetensors" > "$out/pb.ins" 2>&1 &&
  [ "$(grep -cE "^  adam_[mv](@[0-9]+)? +BF16 " "$out/pb.ins")" -ge 2 ] &&
  ! grep -qE "^  adam_[mv](@[0-9]+)? +F32 " "$out/pb.ins" ||
  { echo "FAIL bf16 moments stored"; cat "$out/pb.ins"; exit 1; }
# torchtitan 0.3's DistMuon groups (tests/fixtures/param_groups/muon.toml): titan orthogonalises
# whole matrices on each rank, so 2 HSDP replicas (dp_shard 1: each holds every matrix, the
# gradients summed over them first) follow 1 rank x 2 microbatches (saved at step 3, the
# momentum in the checkpoint, resumed on 1 rank); under FSDP (dp_shard 2) it is refused by name
mu=("${kept[@]}" --config "$fixtures/param_groups/muon.toml" --set tie_embeddings=0 --steps 5
    --checkpoint-interval 3 --training.mixed_precision_param=float32)
"$titan" train "${mu[@]}" --batch 2 --grad-accum 2 --metrics "$out/mu_ref.jsonl" \
  --dump-folder "$out/mu_ref" > "$out/mu.log" 2>&1 || { cat "$out/mu.log"; exit 1; }
mpi 2 "${mu[@]}" --batch 2 --parallelism.data_parallel_replicate_degree 2 \
  --parallelism.data_parallel_shard_degree 1 --metrics "$out/mu_a.jsonl" --dump-folder "$out/mu" \
  --stop-after-step 3 > "$out/mu.log" 2>&1 || { cat "$out/mu.log"; exit 1; }
grep -q "dp_replicate 2 x dp_shard 1" "$out/mu.log" || { cat "$out/mu.log"; exit 1; }
OMP_NUM_THREADS=1 "$titan" train "${mu[@]}" --batch 2 --grad-accum 2 --metrics "$out/mu_b.jsonl" \
  --dump-folder "$out/mu" > "$out/mu.log" 2>&1 || { cat "$out/mu.log"; exit 1; }
grep -q "resumed from $out/mu/checkpoint/step-3" "$out/mu.log" || { cat "$out/mu.log"; exit 1; }
same_losses "DistMuon: 2 HSDP replicas, resumed on 1, vs 1 rank x 2 microbatches" \
  "$out/mu_ref.jsonl" <(cat "$out/mu_a.jsonl" "$out/mu_b.jsonl")
"$diff_tool" "$out/mu/checkpoint/step-5" "$out/mu_ref/checkpoint/step-5" 1e-5
if mpi 2 "${mu[@]}" --batch 1 --dump-folder "$out/mu_fsdp" > "$out/mu_fsdp.log" 2>&1; then
  echo "FAIL DistMuon under FSDP accepted"; cat "$out/mu_fsdp.log"; exit 1; fi
grep -q "(DistMuon) with data_parallel_shard_degree 2 and tensor_parallel_degree 1: titan's DistMuon orthogonalises whole matrices" "$out/mu_fsdp.log" ||
  { cat "$out/mu_fsdp.log"; exit 1; }
echo "ok DistMuon under FSDP refused: $(grep -o "(DistMuon) with data_parallel_shard_degree 2[^:]*" "$out/mu_fsdp.log" | head -1)"

# 3. one rank fails alone (rank 1 has no document of a one-document dataset): all stop
printf '{"text": "only one document here"}\n' > "$out/one.jsonl"
start=$(date +%s)
if mpi 2 "${model[@]}" --steps 3 --batch 1 --data "$out/one.jsonl" --dump-folder "$out/one" \
    > "$out/fail.log" 2>&1; then
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

# divergence (lr 1e30): step 2's NaN is in rank 1's shard only (tok_embeddings); rank 1 stopped
# alone, rank 0 was killed in the next collective and step 1's background save was left as
# step-1.tmp, though the error said "the last checkpoint is intact"
rc=0; mpi 2 "${model[@]}" --steps 10 --batch 2 --lr 1e30 --warmup 0 --dump-folder "$out/div" \
  --checkpoint-interval 1 > "$out/div.log" 2>&1 || rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] &&
  grep -q "titan: error (rank [01] of 2): step 2, microbatch 1 of 1: non-finite" "$out/div.log" &&
  [ "$(ls "$out/div/checkpoint" | tr '\n' ' ')" = "step-1 " ] ||
  { echo "FAIL div: exit $rc, checkpoints: $(ls "$out/div/checkpoint" | tr '\n' ' ')"
    cat "$out/div.log"; exit 1; }
"$titan" train "${model[@]}" --steps 10 --batch 2 --dump-folder "$out/div" --checkpoint-interval 1 \
  --stop-after-step 1 > "$out/div1.log" 2>&1 && grep -q "resumed from $out/div/checkpoint/step-1" \
  "$out/div1.log" || { echo "FAIL div: step-1 does not load"; cat "$out/div1.log"; exit 1; }
echo "ok a divergence on one rank's shard stops both ranks; step 1's save committed and loads"
