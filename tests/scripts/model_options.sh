#!/usr/bin/env bash
# [model] attn_backend: sdpa, flex and varlen are names of titan's one attention (the same
# losses, bitwise; varlen warns that it does not stop at documents, flex that torchtitan 0.3's
# masks each document), anything else is refused
# by name from the command line and from a TOML file; model.depth_init without
# init_weights = "torchtitan" is refused. Argument: TITAN.
set -uo pipefail
titan=$1
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
export OMP_NUM_THREADS=1
small=(--model.n_layers 2 --model.dim 64 --model.n_heads 4 --model.n_kv_heads 2 --model.head_dim 16
       --model.ffn_dim 128 --model.vocab_size 300 --training.seq_len 32 --training.local_batch_size 2
       --training.steps 3 --metrics.enable_jsonl)
fail() { echo "FAIL: $1"; cat "$2"; exit 1; }
for b in sdpa flex varlen; do
  "$titan" train "${small[@]}" --model.attn_backend $b --job.dump_folder "$out/$b" > "$out/$b.log" 2>&1 ||
    fail "attn_backend $b refused" "$out/$b.log"
  grep -o '"loss": [^,}]*' "$out/$b/metrics.jsonl" > "$out/$b.losses"
  [ "$(wc -l < "$out/$b.losses")" = 3 ] || fail "attn_backend $b: not 3 losses" "$out/$b.log"
  cmp -s "$out/sdpa.losses" "$out/$b.losses" || fail "attn_backend $b: other losses than sdpa" "$out/$b.losses"
done
grep -q "attn_backend = varlen: .*does not stop at document boundaries" "$out/varlen.log" ||
  fail "varlen: no warning" "$out/varlen.log"
grep -q "attn_backend = flex: .*torchtitan 0.3's flex masks each document" "$out/flex.log" ||
  fail "flex: no warning" "$out/flex.log"
! grep -q "attn_backend" "$out/sdpa.log" || fail "sdpa: a warning" "$out/sdpa.log"
echo "ok sdpa, flex, varlen accepted: the same losses ($(tr '\n' ' ' < "$out/sdpa.losses"))"

# 235B-A22B by name: its RoPE base (HF's 1e6, torchtitan's 5e6) said, not when overridden
"$titan" plan --flavor 235B-A22B > "$out/p.log" 2>&1 || fail "plan 235B-A22B" "$out/p.log"
grep -q "flavor 235B-A22B: RoPE base 1e6, .*torchtitan's flavor has 5e6" "$out/p.log" ||
  fail "235B-A22B: its RoPE base unsaid" "$out/p.log"
"$titan" plan --flavor 235B-A22B --model.rope_theta 5e6 > "$out/p.log" 2>&1 || fail "plan 5e6" "$out/p.log"
! grep -q "RoPE base" "$out/p.log" || fail "235B-A22B with rope_theta set: the note" "$out/p.log"

refused() { # LOG PATTERN: exit non-zero, the pattern in the message, no step run
  grep -q -- "$2" "$1" && ! grep -qE '^(\[titan\] [^ ]+ [^ ]+ - )?step:' "$1" || fail "refusal: $2" "$1"
}
"$titan" train "${small[@]}" --model.attn_backend flash --job.dump_folder "$out/x" > "$out/x.log" 2>&1 &&
  fail "flash accepted" "$out/x.log"
refused "$out/x.log" "command line: --model.attn_backend: 'flash' is not one of sdpa, flex, varlen"
printf '[model]\nattn_backend = "SDPA"\n' > "$out/bad.toml"
"$titan" train --config "$out/bad.toml" "${small[@]}" --job.dump_folder "$out/y" > "$out/y.log" 2>&1 &&
  fail "SDPA accepted" "$out/y.log"
refused "$out/y.log" "bad.toml:2:16: model.attn_backend: 'SDPA' is not one of sdpa, flex, varlen"
"$titan" train "${small[@]}" --model.depth_init false --job.dump_folder "$out/z" > "$out/z.log" 2>&1 &&
  fail "depth_init without torchtitan init accepted" "$out/z.log"
refused "$out/z.log" "model.depth_init: applies to init_weights = \"torchtitan\" only"
"$titan" train "${small[@]}" --model.init_weights xavier --job.dump_folder "$out/w" > "$out/w.log" 2>&1 &&
  fail "init_weights xavier accepted" "$out/w.log"
refused "$out/w.log" "model.init_weights: 'xavier' is not one of normal, torchtitan"
echo "ok flash, SDPA (TOML), depth_init without torchtitan, init_weights xavier refused by name"
