#!/usr/bin/env bash
# Same seed, same config: bitwise-identical losses and gradient norms (printed with %.17g).
# Also: full and selective activation checkpointing (torchtitan's layer SAC, every 2nd of the
# 2 blocks) recompute the same numbers bit for bit.
# A third argument BALANCE (none | aux_loss | bias) runs an MoE (8 experts, top-2) instead,
# with that load balancing (aux_loss also compares the logged aux loss).
set -euo pipefail
titan=$1; data=$2; out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
common=(train --flavor debugmodel --set n_layers=2 --set dim=128 --set n_heads=4 --set n_kv_heads=2
        --set head_dim=32 --set ffn_dim=256 --set vocab_size=512 --data "$data" --steps 6
        --batch 4 --seq-len 64 --lr 1e-3 --warmup 2 --seed 1234 --peak-tflops 1 --log-freq 100
        --dump-folder "$out/dump") # its own: ctest -j runs the determinism tests side by side
if [ $# -ge 3 ]; then
  common+=(--set num_experts=8 --set top_k=2 --set moe_inter_dim=64
           --model.moe_load_balance "$3" --model.moe_bias_update_rate 0.01)
fi
"$titan" "${common[@]}" --metrics "$out/a.jsonl" >/dev/null
"$titan" "${common[@]}" --metrics "$out/b.jsonl" >/dev/null
"$titan" "${common[@]}" --metrics "$out/c.jsonl" --ac full >/dev/null
"$titan" "${common[@]}" --metrics "$out/d.jsonl" --seed 99 >/dev/null
"$titan" "${common[@]}" --metrics "$out/e.jsonl" --ac selective \
  --activation_checkpoint.selective_ac_option 2 >/dev/null
field() { grep -o "\"$2\": [^,]*" "$1"; }
for run in a b c d e; do
  for f in loss grad_norm; do
    n=$(field "$out/$run.jsonl" $f | grep -c .)
    if [ "$n" -ne 6 ]; then echo "FAIL: run $run logged $n values of $f, want 6"; exit 1; fi
  done
done
fields=(loss grad_norm)
if [ "${3:-}" = aux_loss ]; then fields+=(aux_loss); fi
for f in "${fields[@]}"; do
  if ! diff <(field "$out/a.jsonl" $f) <(field "$out/b.jsonl" $f); then
    echo "FAIL: two runs with the same seed differ in $f"; exit 1; fi
  if ! diff <(field "$out/a.jsonl" $f) <(field "$out/c.jsonl" $f); then
    echo "FAIL: --ac full differs from --ac none in $f"; exit 1; fi
  if ! diff <(field "$out/a.jsonl" $f) <(field "$out/e.jsonl" $f); then
    echo "FAIL: --ac selective differs from --ac none in $f"; exit 1; fi
done
if diff -q <(field "$out/a.jsonl" loss) <(field "$out/d.jsonl" loss) >/dev/null; then
  echo "FAIL: a different seed gave the same losses"; exit 1; fi
field "$out/a.jsonl" loss
echo "determinism ok: identical losses and grad norms across runs and AC modes"
