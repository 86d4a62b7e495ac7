#!/usr/bin/env bash
# [model] attn_backend: sdpa, flex and varlen are names of titan's one attention, attn_mask_type
# causal or block_causal (unset: block_causal with varlen, as torchtitan's varlen, else causal;
# flex then warns that torchtitan 0.3's is block_causal). On random tokens (one document per
# window) all give the same losses bitwise; on packed documents block_causal gives other losses
# than causal, the same whichever backend names it. varlen with causal, anything else is
# refused by name from the command line and from a TOML file; model.depth_init without
# init_weights = "torchtitan" is refused. Argument: TITAN.
set -uo pipefail
titan=$1
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
export OMP_NUM_THREADS=1
small=(--model.n_layers 2 --model.dim 64 --model.n_heads 4 --model.n_kv_heads 2 --model.head_dim 16
       --model.ffn_dim 128 --model.vocab_size 300 --training.seq_len 32 --training.local_batch_size 2
       --training.steps 3 --metrics.enable_jsonl)
fail() { echo "FAIL: $1"; cat "$2"; exit 1; }
run() { # NAME ARGS...: trains, NAME.losses gets its 3 losses
  local n=$1; shift
  "$titan" train "${small[@]}" "$@" --job.dump_folder "$out/$n" > "$out/$n.log" 2>&1 ||
    fail "$n refused" "$out/$n.log"
  grep -o '"loss": [^,}]*' "$out/$n/metrics.jsonl" > "$out/$n.losses"
  [ "$(wc -l < "$out/$n.losses")" = 3 ] || fail "$n: not 3 losses" "$out/$n.log"
}
same() { cmp -s "$out/$1.losses" "$out/$2.losses" || fail "$2: other losses than $1" "$out/$2.losses"; }
for b in sdpa flex varlen; do run $b --model.attn_backend $b; same sdpa $b; done
run block --model.attn_mask_type block_causal; same sdpa block
grep -q "attn_backend = flex with attn_mask_type unset: .*torchtitan 0.3's flex is always block_causal" \
  "$out/flex.log" || fail "flex: no warning" "$out/flex.log"
! grep -q "attn_backend\|attn_mask" "$out/sdpa.log" "$out/block.log" || fail "a warning" "$out/sdpa.log"
grep -q "attn_backend = varlen: attention within each document" "$out/varlen.log" ||
  fail "varlen: no info line" "$out/varlen.log"
echo "ok random tokens: sdpa, flex, varlen, block_causal the same losses ($(tr '\n' ' ' < "$out/sdpa.losses"))"

# packed documents (byte tokens, 1 to 40 bytes each): block_causal changes the losses; varlen is it
awk 'BEGIN { for (i = 1; i <= 60; i++) { s = ""; for (k = 0; k <= (i * 7) % 40; k++)
  s = s substr("abcdefghijklmnopqrstuvwxyz", i % 26 + 1, 1); printf "{\"text\": \"%s\"}\n", s } }' > "$out/docs.jsonl"
data=(--training.dataset_path "$out/docs.jsonl")
run docs_causal "${data[@]}"
run docs_block "${data[@]}" --model.attn_mask_type block_causal
run docs_varlen "${data[@]}" --model.attn_backend varlen
run docs_flex "${data[@]}" --model.attn_backend flex --model.attn_mask_type block_causal
! cmp -s "$out/docs_causal.losses" "$out/docs_block.losses" ||
  fail "block_causal: the causal losses on packed documents" "$out/docs_block.losses"
grep -q "data: .*; documents masked (block_causal" "$out/docs_block.log" ||
  fail "block_causal: the header does not say it" "$out/docs_block.log"
! grep -q "documents masked" "$out/docs_causal.log" || fail "causal: documents masked" "$out/docs_causal.log"
grep -q "documents masked" "$out/docs_block/report.facts.json" ||
  fail "block_causal: the report's facts do not say it" "$out/docs_block/report.facts.json"
same docs_block docs_varlen
same docs_block docs_flex
# the recompute of full activation checkpointing sees the same documents (bitwise), and so
# does each microbatch of gradient accumulation (1 x 2 microbatches: within 1e-6)
run docs_block_ac "${data[@]}" --model.attn_mask_type block_causal --activation_checkpoint.mode full
same docs_block docs_block_ac
run docs_block_ga "${data[@]}" --model.attn_mask_type block_causal --training.local_batch_size 1 \
  --training.global_batch_size 2
paste "$out/docs_block.losses" "$out/docs_block_ga.losses" | awk '{ d = $2 - $4; if (d < 0) d = -d;
  if (d > 1e-6 * $2) bad = 1 } END { exit bad }' ||
  fail "block_causal, 2 microbatches: other losses" "$out/docs_block_ga.losses"
echo "ok documents: causal $(tr '\n' ' ' < "$out/docs_causal.losses")/ block_causal $(tr '\n' ' ' < "$out/docs_block.losses")"
"$titan" train "${small[@]}" --model.attn_backend varlen --model.attn_mask_type causal \
  --job.dump_folder "$out/v" > "$out/v.log" 2>&1 && fail "varlen with causal accepted" "$out/v.log"
grep -q "model.attn_mask_type: 'causal' with attn_backend = varlen" "$out/v.log" ||
  fail "varlen with causal: the message" "$out/v.log"

# chat examples (torchtitan 0.3's ChatDataset) are attended one by one: causal refused by name,
# and they need the tokenizer (its chat template and eos)
"$titan" train "${small[@]}" --training.dataset_format chat --model.attn_mask_type causal \
  --job.dump_folder "$out/c" > "$out/c.log" 2>&1 && fail "chat with causal accepted" "$out/c.log"
grep -q "model.attn_mask_type: 'causal' with training.dataset_format = chat" "$out/c.log" ||
  fail "chat with causal: the message" "$out/c.log"
"$titan" train "${small[@]}" --training.dataset_format chat --job.dump_folder "$out/c" \
  --training.dataset_path "$out/docs.jsonl" > "$out/c.log" 2>&1 && fail "chat without a tokenizer accepted" "$out/c.log"
grep -q "training.dataset_format: chat needs model.hf_assets_path" "$out/c.log" ||
  fail "chat without a tokenizer: the message" "$out/c.log"
"$titan" train "${small[@]}" --training.dataset_format chat --job.dump_folder "$out/c" \
  > "$out/c.log" 2>&1 && fail "chat on random tokens accepted" "$out/c.log"
grep -q "training.dataset_format: chat without training.dataset_path" "$out/c.log" ||
  fail "chat without a dataset: the message" "$out/c.log"
echo "ok chat: causal, a missing tokenizer and a missing dataset refused by name"
"$titan" train "${small[@]}" --training.dataset_streaming false --job.dump_folder "$out/c" \
  > "$out/c.log" 2>&1 && fail "dataset_streaming on random tokens accepted" "$out/c.log"
grep -q "training.dataset_streaming: set without training.dataset_path" "$out/c.log" ||
  fail "dataset_streaming without a dataset: the message" "$out/c.log"
echo "ok training.dataset_streaming without a dataset refused by name"

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
