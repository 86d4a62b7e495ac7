#!/usr/bin/env bash
# Same seed, same config: bitwise-identical losses and gradient norms (printed with %.17g).
# Also: full activation checkpointing recomputes the same numbers bit for bit.
set -euo pipefail
titan=$1; data=$2; out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
common=(train --flavor debugmodel --set n_layers=2 --set dim=128 --set n_heads=4 --set n_kv_heads=2
        --set head_dim=32 --set ffn_dim=256 --set vocab_size=512 --data "$data" --steps 6
        --batch 4 --seq-len 64 --lr 1e-3 --warmup 2 --seed 1234 --peak-tflops 1 --log-freq 100)
"$titan" "${common[@]}" --metrics "$out/a.jsonl" >/dev/null
"$titan" "${common[@]}" --metrics "$out/b.jsonl" >/dev/null
"$titan" "${common[@]}" --metrics "$out/c.jsonl" --ac full >/dev/null
"$titan" "${common[@]}" --metrics "$out/d.jsonl" --seed 99 >/dev/null
field() { grep -o "\"$2\": [^,]*" "$1"; }
for run in a b c d; do
  for f in loss grad_norm; do
    n=$(field "$out/$run.jsonl" $f | grep -c .)
    if [ "$n" -ne 6 ]; then echo "FAIL: run $run logged $n values of $f, want 6"; exit 1; fi
  done
done
for f in loss grad_norm; do
  if ! diff <(field "$out/a.jsonl" $f) <(field "$out/b.jsonl" $f); then
    echo "FAIL: two runs with the same seed differ in $f"; exit 1; fi
  if ! diff <(field "$out/a.jsonl" $f) <(field "$out/c.jsonl" $f); then
    echo "FAIL: --ac full differs from --ac none in $f"; exit 1; fi
done
if diff -q <(field "$out/a.jsonl" loss) <(field "$out/d.jsonl" loss) >/dev/null; then
  echo "FAIL: a different seed gave the same losses"; exit 1; fi
field "$out/a.jsonl" loss
echo "determinism ok: identical losses and grad norms across runs and AC modes"
