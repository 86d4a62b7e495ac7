#!/usr/bin/env bash
# Expert parallelism under mpirun (tests/dist.cmake). Small MoE model (4 experts, top-2), fp32,
# random tokens, 1 thread per rank.
#  1. ep=2 (2 ranks, dp_shard=2: each rank owns 2 of the 4 experts of every block, tokens
#     dispatched with MPI_Alltoallv) against 1 rank x 2 microbatches, for each load-balancing
#     mode (none, the HF aux loss, the expert bias) and with full activation checkpointing:
#     the losses of 5 steps within 1e-5 relative, the final parameters (checkpoints, full
#     layout) within 1e-5 relative L2.
#  1a. Parameter groups (the router with Adam, the experts a group of their own) on ep=2 x
#      efsdp=2 against 1 rank x 4 microbatches: the bounds of 1.
#  1c. The end-of-run sample of an ep=2 run balanced by bias: one rank's ids.
#  2. An ep=2 checkpoint written at step 5 resumes on 1 rank; steps 6..10 match a straight
#     1-rank run x 2 microbatches within 1e-5.
#  3. ep=2 with dp_shard=4 (4 ranks: two EP groups, each expert stack FSDP-sharded over the
#     2 ranks with the same ep_rank) against 1 rank x 4 microbatches, with the HF aux loss:
#     losses and final parameters within 1e-5 as in 1.
#  3b. bf16 with ep=2 x efsdp=2: the bf16 all-gathers (experts over efsdp too) give bitwise
#     the losses and checkpoint of fp32 all-gathers, with the gathered bytes derived below.
#  4. Refusals, by name: ep that does not divide n_experts, ep that does not divide dp_shard,
#     ep with tensor parallelism, ep on a dense model.
#  5. (before 4.) bf16: the dispatches move bf16, bitwise the same losses as fp32 transport.
# AdamW eps is 1e-6, as in dist_tp.sh (summation-order differences of ~1e-7 in gradients of
# ~1e-8 would otherwise become visible update differences).
set -euo pipefail
source "$(dirname "$0")/dist_common.sh" "$@" # titan, out, small, mpi, losses, same_losses
py=${4:-python3} # wire_check's (tests/dist.cmake passes the venv's)
dense=("${small[@]}" --set tie_embeddings=0 --optimizer.eps 1e-6)
model=("${dense[@]}" --set num_experts=4 --set top_k=2 --set moe_inter_dim=32)
ep2=(--parallelism.expert_parallel_degree 2)

# 1. ep=2 (dp_shard=2) against one rank with 2 microbatches
for mode in none aux_loss bias full_ac; do
  aux=(--model.moe_load_balance aux_loss --model.router_aux_loss_coef 0.01)
  extra=(--model.moe_load_balance "$mode"); ac=none
  [ "$mode" = aux_loss ] && extra=("${aux[@]}")
  [ "$mode" = full_ac ] && extra=("${aux[@]}") && ac=full
  m=("${model[@]}" "${extra[@]}" --steps 5 --checkpoint-interval 5 --batch 2 --ac $ac)
  "$titan" train "${m[@]}" --grad-accum 2 --metrics "$out/ref_$mode.jsonl" \
      --dump-folder "$out/ref_$mode" > /dev/null
  mpi 2 "${m[@]}" "${ep2[@]}" --metrics "$out/ep_$mode.jsonl" --dump-folder "$out/ep_$mode" \
      > "$out/ep_$mode.log"
  grep -q "dp_shard 2 x tp 1 x ep 2" "$out/ep_$mode.log" || { cat "$out/ep_$mode.log"; exit 1; }
  case $mode in aux_loss|full_ac) grep -q '"aux_loss"' "$out/ep_$mode.jsonl" ;; esac
  same_losses "ep=2 vs 1 rank x 2 microbatches ($mode)" "$out/ref_$mode.jsonl" \
      "$out/ep_$mode.jsonl"
  "$diff_tool" "$out/ep_$mode/checkpoint" "$out/ref_$mode/checkpoint" 1e-5
done

# 1a. [[optimizer.param_groups]] as torchtitan's qwen3_debugmodel_moe_param_groups (the router
# with Adam at its own lr), the experts a group of their own (tests/fixtures/param_groups/moe.toml): ep=2 x efsdp=2 (4 ranks: each
# expert stack's local part sharded over efsdp) against 1 rank x 4 microbatches, as 3 below
without model --lr --optimizer.eps
m=("${kept[@]}" --config "$fixtures/param_groups/moe.toml" --model.moe_load_balance aux_loss
   --model.router_aux_loss_coef 0.01 --steps 5 --checkpoint-interval 5 --batch 1)
"$titan" train "${m[@]}" --grad-accum 4 --metrics "$out/pg_ref.jsonl" --dump-folder "$out/pg_ref" \
  > "$out/pg.log"
mpi 4 "${m[@]}" "${ep2[@]}" --metrics "$out/pg_ep.jsonl" --dump-folder "$out/pg_ep" > "$out/pg.log"
grep -q "optimizer: group 1, Adam: 2 parameters .*group 2, AdamW: 6 parameters" \
  <(tr '\n' ' ' < "$out/pg.log") || { cat "$out/pg.log"; exit 1; }
same_losses "param groups: ep=2 x efsdp=2 vs 1 rank x 4 microbatches" "$out/pg_ref.jsonl" \
  "$out/pg_ep.jsonl"
"$diff_tool" "$out/pg_ep/checkpoint" "$out/pg_ref/checkpoint" 1e-5

# 1b. an initial load on ep=2 (the whole model loaded, then each rank's slices taken) restores
# the expert bias of a titan checkpoint (it restarted from zeros): the bias after one step at
# rate 1e-6 is the checkpoint's within 1e-5
mpi 2 "${model[@]}" --model.moe_load_balance bias --model.moe_bias_update_rate 1e-6 --steps 1 \
    --batch 2 "${ep2[@]}" --checkpoint.enable --last-save-full --dump-folder "$out/ep_il" \
    --checkpoint.initial_load_path "$out/ref_bias/checkpoint/step-5" > "$out/ep_il.log"
"$py" -c 'import json, sys
a, b = (json.load(open(f))["train"]["expert_bias"] for f in sys.argv[1:3])
d = max(abs(x - y) for x, y in zip(a, b))
sys.exit(0 if len(a) == len(b) and any(a) and d <= 1e-5 else f"FAIL ep=2 initial load: bias off by {d}")' \
  "$out/ref_bias/checkpoint/step-5/metadata.json" "$out/ep_il/checkpoint/step-1/metadata.json"
echo "ep=2 initial load: the expert bias is the checkpoint's"

# 1c. the end-of-run sample of an ep=2 run balanced by bias (the whole model assembled from
# the ranks' experts) routes with the expert bias, as one rank's: the same ids (it routed
# without it: other ids, at a bias rate large enough to move the routing)
m=("${model[@]}" --model.moe_load_balance bias --model.moe_bias_update_rate 0.05 --steps 5
   --batch 2 --sample 24)
"$titan" train "${m[@]}" --grad-accum 2 --dump-folder "$out/s1" > "$out/s1.log"
mpi 2 "${m[@]}" "${ep2[@]}" --dump-folder "$out/s2" > "$out/s2.log"
sample() { grep -A1 "^sample (temperature" "$1" | tail -1; }
[ -n "$(sample "$out/s1.log")" ] && [ "$(sample "$out/s1.log")" = "$(sample "$out/s2.log")" ] ||
  { echo "FAIL ep=2 sample with the expert bias: $(sample "$out/s2.log") vs one rank's $(sample "$out/s1.log")"; exit 1; }
echo "ep=2 end-of-run sample routes with the expert bias (the ids of one rank's)"

# 2. an ep=2 checkpoint resumes on one rank
m=("${model[@]}" "${aux[@]}" --steps 10 --checkpoint-interval 5 --batch 2)
"$titan" train "${m[@]}" --grad-accum 2 --metrics "$out/straight.jsonl" \
    --dump-folder "$out/straight" > /dev/null
mpi 2 "${m[@]}" "${ep2[@]}" --metrics "$out/w.jsonl" --dump-folder "$out/w" \
    --stop-after-step 5 > /dev/null
ls "$out/w/checkpoint/step-5/rank-00001.safetensors" > /dev/null
"$titan" train "${m[@]}" --grad-accum 2 --metrics "$out/r1.jsonl" --dump-folder "$out/w" \
    > "$out/r1.log"
grep -q "resumed from $out/w/checkpoint/step-5" "$out/r1.log" || { cat "$out/r1.log"; exit 1; }
same_losses "ep=2 checkpoint resumed on 1 rank, steps 6..10" "$out/straight.jsonl" \
    "$out/r1.jsonl" 5

# 3. ep=2 carved from dp_shard=4: experts FSDP-sharded over efsdp = 2
m=("${model[@]}" "${aux[@]}" --steps 5 --checkpoint-interval 5 --batch 2)
"$titan" train "${m[@]}" --grad-accum 4 --metrics "$out/ref4.jsonl" --dump-folder "$out/ref4" \
    > /dev/null
mpi 4 "${m[@]}" "${ep2[@]}" --metrics "$out/efsdp.jsonl" --dump-folder "$out/efsdp" \
    > "$out/efsdp.log"
grep -q "dp_shard 4 x tp 1 x ep 2" "$out/efsdp.log" || { cat "$out/efsdp.log"; exit 1; }
same_losses "ep=2 x efsdp=2 vs 1 rank x 4 microbatches" "$out/ref4.jsonl" "$out/efsdp.jsonl"
"$diff_tool" "$out/efsdp/checkpoint" "$out/ref4/checkpoint" 1e-5

# 3b. bf16 mixed precision, ep=2 x efsdp=2 (4 ranks): every rank all-gathers its blocks' dense
# part over dp_shard=4 and its 2 experts' stacks over efsdp=2, the router and the expert
# stacks (only bf16 GEMMs read them) as bf16, the norm weights and the embedding exact: bitwise
# the fp32 transport (TITAN_BF16_TRANSPORT=float32). Bytes per step and rank (fsdp_gather_bytes,
# whole units; `model`: D 64, 4 experts of 3 x 32 x 64, 4 block gathers): a block's dense
# part is 12544 matrix (attention, router) + 160 norm elements, its experts' part 12288;
#   fp32: 4 x (4 x (12704 + 12288) + 19200 embedding + 19264 head) = 553728
#   bf16: 4 x (12704 x 2 + 160 x 4 + 12288 x 2) + 19200 x 4 + 19264 x 2 + 64 x 4 = 318080
# (the embedding gathered for its forward only: its backward reads no parameters)
m=("${model[@]}" "${aux[@]}" --steps 4 --checkpoint-interval 4 --batch 2
   --training.mixed_precision_param=bfloat16 "${ep2[@]}")
for g in auto float32; do
  timeout 120 "$mpirun" -np 4 -x OMP_NUM_THREADS -x TITAN_BF16_TRANSPORT=$g "$titan" train "${m[@]}" \
      --metrics "$out/bf_$g.jsonl" --dump-folder "$out/bf_$g" > "$out/bf_$g.log" 2>&1 ||
    { cat "$out/bf_$g.log"; exit 1; }
done
gb() { grep -o '"fsdp_gather_bytes": [^,}]*' "$1" | cut -d' ' -f2 | sort -u | tr '\n' ' '; }
[ "$(gb "$out/bf_auto.jsonl")" = "318080 " ] && [ "$(gb "$out/bf_float32.jsonl")" = "553728 " ] ||
  { echo "FAIL bf16 ep: gathered bytes $(gb "$out/bf_auto.jsonl")/ $(gb "$out/bf_float32.jsonl")"; exit 1; }
cmp <(losses "$out/bf_auto.jsonl") <(losses "$out/bf_float32.jsonl") ||
  { echo "FAIL bf16 ep: bf16 and fp32 gathers give different losses"; exit 1; }
"$diff_tool" "$out/bf_auto/checkpoint" "$out/bf_float32/checkpoint" 0
echo "ok bf16 ep=2 x efsdp=2: bf16 gathers bitwise the fp32 ones; bytes per step" \
     "$(gb "$out/bf_auto.jsonl")vs $(gb "$out/bf_float32.jsonl")"

# 5. bf16: the dispatches (routed rows forward, their gradients backward: read by grouped_mm only,
#    model_bf16_wire) and the forward return of the expert outputs (rounded by the receiving
#    block on arrival, model_keep16: model_bf16_wire_kept) move bf16. ep=2 with the aux loss
#    and full activation checkpointing against the same run with fp32 transport
#    (TITAN_BF16_TRANSPORT=float32; the same routing, as the losses are bitwise equal): the
#    profiled step 5 makes the same collectives, these at exactly half the bytes, the others
#    equal (trace_wire.py's order: = unchanged, h halved). Per block: forward [counts =,
#    dispatch h, return h], then in backward the recompute [= h h], the d y dispatch h and the
#    d xs return = (summed per token: fp32). The dispatches carry this rank's R = 64 x 2 routed
#    rows of 64 (32768 bytes in fp32), the returns the rows its experts received (routing).
#    Again with block 0's grouped_mm on the fp32 "grouped" implementation (a [kernels]
#    override): block 0's exchanges all stay fp32, block 1's 5 are halved. And with block 0's
#    attention on the fp32 "default" implementation while its grouped_mm stays bf16: block 0
#    is no bf16 block (model_block16), keeps y fp32, so its returns move fp32 while its
#    dispatches (read by the bf16 grouped_mm only) are halved. The first case also validates
#    at step 5 at its own shape (2 x 16 tokens: the forward-only model, no stores, the same
#    rounding): its 2 x 2 block forwards return bf16 too, the validation loss bitwise equal.
#    Against 1 rank x 2 microbatches in bf16 within 1e-4 (measured 5.7e-6; 2.3e-9 without the
#    aux loss and AC: a last-bit fp32 difference of the accumulation order, rounded to bf16 by
#    the next GEMM, becomes a bf16 step now and then).
printf 'The quick brown fox %d jumps over the lazy dog.\n' $(seq 1 20) > "$out/val.txt"
for case in bf16 block0_fp32 block0_attn_fp32; do
  m=("${model[@]}" "${aux[@]}" --training.mixed_precision_param=bfloat16 --steps 5 --batch 2
     --ac full --profiling.enable_profiling true --profiling.profile_freq 5
     --profiling.profiler_active 1 --profiling.profiler_warmup 0)
  # forward b0 =hh, b1 =hh; backward b1 =hh (recompute) h (d y) = (d xs), b0 =hhh=;
  # validation 2 x (b0 =hh, b1 =hh)
  want=("halved 18" "order =hh=hh=hhh==hhh==hh=hh=hh=hh")
  [ $case = bf16 ] && m+=(--validation.enable --validation.dataset_path "$out/val.txt"
    --validation.freq 5 --validation.steps 2 --validation.seq_len 16
    --validation.local_batch_size 2)
  [ $case = block0_fp32 ] && m+=(--kernels.overrides 'layers.0.moe.grouped_mm=grouped') &&
    want=("halved 5" "order ====hh=hhh======")
  [ $case = block0_attn_fp32 ] && m+=(--kernels.overrides 'layers.0.attention=default') &&
    want=("halved 8" "order =h==hh=hhh==h=h=")
  mpi 2 "${m[@]}" "${ep2[@]}" --metrics "$out/bf_$case.jsonl" --dump-folder "$out/bf_$case" \
      > "$out/bf_$case.log" 2>&1 || { cat "$out/bf_$case.log"; exit 1; }
  grep -q "EP exchanges of values rounded to bf16 on arrival anyway moved in bf16" \
      "$out/bf_$case.log" || { cat "$out/bf_$case.log"; exit 1; }
  TITAN_BF16_TRANSPORT=float32 mpi 2 "${m[@]}" "${ep2[@]}" --metrics "$out/bff_$case.jsonl" \
      --dump-folder "$out/bff_$case" > "$out/bff_$case.log" 2>&1 || { cat "$out/bff_$case.log"; exit 1; }
  grep -q "moved in fp32 (TITAN_BF16_TRANSPORT)" "$out/bff_$case.log" ||
    { cat "$out/bff_$case.log"; exit 1; }
  identical_losses "bf16 ep=2, bf16 vs fp32 exchanges ($case)" "$out/bf_$case.jsonl" \
      "$out/bff_$case.jsonl"
  wire_check "bf16 ep=2 collectives ($case)" "$out/bf_$case" "$out/bff_$case" 5 expert-parallel \
      "${want[@]}"
  if [ $case = bf16 ]; then
    vl() { grep -o '"val_loss": [^,}]*' "$1"; }
    [ -n "$(vl "$out/bf_$case.jsonl")" ] &&
      cmp -s <(vl "$out/bf_$case.jsonl") <(vl "$out/bff_$case.jsonl") ||
      { echo "FAIL bf16 ep=2: validation losses differ"; exit 1; }
    echo "bf16 ep=2, bf16 vs fp32 exchanges: validation loss bitwise equal"
    "$titan" train "${m[@]}" --grad-accum 2 --metrics "$out/bf1.jsonl" --dump-folder "$out/bf1" \
        > /dev/null 2>&1
    same_losses "bf16 ep=2 vs 1 rank x 2 microbatches" "$out/bf1.jsonl" "$out/bf_$case.jsonl" 0 1e-4
  fi
done

# 4. refusals
refused() { # name, expected message, np, args...
  local name=$1 msg=$2 np=$3; shift 3
  if mpi "$np" "$@" --steps 1 > "$out/refuse.log" 2>&1; then
    echo "FAIL: $name was accepted"; exit 1; fi
  grep -qF "$msg" "$out/refuse.log" || { cat "$out/refuse.log"; exit 1; }
  echo "ok $name is refused"
}
refused "ep=4 with 2 ranks" "expert_parallel_degree 4 must divide data_parallel_shard_degree 2" \
    2 "${model[@]}" --parallelism.expert_parallel_degree 4
refused "n_experts=3 with ep=2" "n_experts (3) must be a multiple of expert_parallel_degree (2)" \
    2 "${model[@]}" --set num_experts=3 "${ep2[@]}"
refused "ep=2 with tp=2" "expert parallelism needs tp = 1" \
    4 "${model[@]}" "${ep2[@]}" --parallelism.tensor_parallel_degree 2
refused "ep=2 on a dense model" "needs an MoE model" \
    2 "${dense[@]}" "${ep2[@]}"
