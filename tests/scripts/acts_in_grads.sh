#!/usr/bin/env bash
# Saved activations in the gradients' pages (model_build_opts.acts_in_grads; one rank, one
# microbatch a step): block l's saved tensors live in block l-1's gradient (block 0's in an
# untied embedding's), which its backward writes only after block l's is done.
#  - training is bitwise the run with them in their own buffer (TITAN_ACTS_IN_GRADS=0): every
#    step's loss and gradient norm, and the validation loss on the training model's shape,
#    for bf16 and fp32, tied and untied embeddings (block 0 in the embedding's gradient), full
#    and selective activation checkpointing, MoE with the auxiliary loss. A gradient element a
#    backward left unwritten would carry an activation into AdamW and show here;
#  - titan plan and the train header count those activations once: plan names them for one
#    rank and one microbatch, not with gradient accumulation, and its activation figure is
#    lower by them; a bad TITAN_ACTS_IN_GRADS is refused by name.
set -euo pipefail
titan=$1; out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
model=(--set n_layers=3 --set dim=64 --set n_heads=4 --set n_kv_heads=2 --set head_dim=16
       --set ffn_dim=128 --set vocab_size=300 --random-tokens --seq-len 32 --batch 2 --steps 8
       --lr 3e-3 --warmup 2 --seed 5 --peak-tflops 1 --log-freq 1)
for i in $(seq 1 20); do printf 'The quick brown fox %d jumps over the lazy dog.\n\n' "$i"; done \
  > "$out/val.txt"
val=(--validation.enable --validation.dataset_path "$out/val.txt" --validation.freq 4
     --validation.steps 2 --validation.seq_len 32 --validation.local_batch_size 2)
bf=(--training.mixed_precision_param=bfloat16)
f32=(--training.mixed_precision_param=float32)
field() { grep -o "\"$2\": [^,}]*" "$1" | sed 's/.*: //'; }

same() { # name, then the variant's arguments: the run with and without, bitwise
  local n=$1; shift
  for v in 0 1; do
    TITAN_ACTS_IN_GRADS=$v "$titan" train "${model[@]}" "$@" --metrics "$out/$n$v.jsonl" \
        --dump-folder "$out/$n$v" > "$out/$n$v.log" 2>&1 || { cat "$out/$n$v.log"; exit 1; }
  done
  for f in loss grad_norm val_loss; do
    diff <(field "$out/${n}0.jsonl" $f) <(field "$out/${n}1.jsonl" $f) > /dev/null ||
      { echo "FAIL $n: $f differs with the activations in the gradients' pages"; exit 1; }
  done
  [ "$(field "$out/${n}1.jsonl" loss | wc -l)" -ge 8 ] ||
    { echo "FAIL $n: no losses logged"; cat "$out/${n}1.log"; exit 1; }
  echo "ok $n: bitwise the same losses, gradient norms and validation"
}
same bf16_tied "${bf[@]}" "${val[@]}"
same f32_untied "${f32[@]}" --set tie_embeddings=false "${val[@]}"
same bf16_untied "${bf[@]}" --set tie_embeddings=false
same bf16_ac_full "${bf[@]}" --ac full
same f32_ac_selective "${f32[@]}" --ac selective --activation_checkpoint.selective_ac_option 2
same moe_bf16 "${bf[@]}" --set num_experts=8 --set top_k=2 --set moe_inter_dim=32 \
    --model.moe_load_balance=aux_loss

# titan plan: the saved activations in the gradients, on one rank with one microbatch only
big=(--set n_layers=4 --set dim=256 --set n_heads=4 --set n_kv_heads=2 --set head_dim=64
     --set ffn_dim=768 --set vocab_size=1000 --training.seq_len=256 --training.local_batch_size=4
     "${bf[@]}")
"$titan" plan "${big[@]}" > "$out/plan1.txt"
TITAN_ACTS_IN_GRADS=0 "$titan" plan "${big[@]}" > "$out/plan0.txt"
"$titan" plan "${big[@]}" --training.global_batch_size=8 > "$out/plan_ga.txt"
in_g=$(sed -n 's/^  saved activations in gradients *\([0-9.]*\).*/\1/p' "$out/plan1.txt")
act() { sed -n 's/^  activations, no checkpointing *\([0-9.]*\).*/\1/p' "$1"; }
[ -n "$in_g" ] && awk -v g="$in_g" 'BEGIN { exit !(g > 0) }' ||
  { echo "FAIL: plan names no activations in the gradients"; cat "$out/plan1.txt"; exit 1; }
! grep -q "saved activations in gradients" "$out/plan0.txt" "$out/plan_ga.txt" ||
  { echo "FAIL: activations in the gradients with TITAN_ACTS_IN_GRADS=0 or accumulation"; exit 1; }
awk -v a0="$(act "$out/plan0.txt")" -v a1="$(act "$out/plan1.txt")" -v g="$in_g" \
  'BEGIN { d = a0 - a1 - g; if (d < 0) d = -d; exit !(a1 < a0 && d <= 0.002) }' ||
  { echo "FAIL: plan's activations $(act "$out/plan0.txt") -> $(act "$out/plan1.txt"), in gradients $in_g"; exit 1; }
echo "ok plan: $in_g GiB of activations in the gradients (one rank, one microbatch; none with accumulation)"

if TITAN_ACTS_IN_GRADS=yes "$titan" train "${model[@]}" --steps 1 --dump-folder "$out/bad" \
    > "$out/bad.log" 2>&1; then
  echo "FAIL: TITAN_ACTS_IN_GRADS=yes accepted"; exit 1
fi
grep -q "TITAN_ACTS_IN_GRADS: 'yes'" "$out/bad.log" ||
  { echo "FAIL: the bad value not named"; cat "$out/bad.log"; exit 1; }
echo "ok TITAN_ACTS_IN_GRADS=yes refused by name"
