#!/usr/bin/env bash
# torchtitan v0.2.2's own TOMLs (tests/fixtures/torchtitan, unmodified) load: each goes
# through --print-config (and its output reads back to the same text), then trains 2 steps
# on a shrunk model with local data, as torchtitan's run script passes the file
# (--job.config_file). Also: keys titan does not act on are refused / noted by name, and
# lr_scheduler.total_steps < training.steps follows torchtitan's schedule past its end.
set -euo pipefail
titan=$1; fixtures=$2; data=$3; out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
text=$data/tinyshakespeare/input.txt; tok=$data/test_tokenizer
# What the fixtures point at that is not here, and a model small enough for seconds.
local_run=(--training.dataset_path "$text" --model.hf_assets_path "$tok"
  --job.dump_folder "$out/run" --training.steps 2 --training.seq_len 32
  --training.local_batch_size 2 --training.threads 2 --metrics.peak_tflops 1
  --model.n_layers 2 --model.dim 32 --model.n_heads 2 --model.n_kv_heads 1
  --model.head_dim 16 --model.ffn_dim 64 --model.vocab_size 2048
  --model.num_experts 4 --model.top_k 2 --model.moe_inter_dim 32)
n=0
for f in "$fixtures"/*.toml; do
  name=$(basename "$f")
  "$titan" train --job.config_file "$f" --print-config > "$out/$name.1" ||
    fail "$name: --print-config"
  "$titan" train --config "$out/$name.1" --print-config > "$out/$name.2"
  diff "$out/$name.1" "$out/$name.2" || fail "$name: printed config does not round-trip"
  extra=()
  # llama3 is not a titan model (refused by name); its debug config trains as qwen3.
  if grep -q '^name = "llama3"' "$f"; then
    if "$titan" train --config "$f" "${local_run[@]}" > "$out/log" 2>&1; then
      fail "$name: model.name llama3 was not refused"; fi
    grep -q "model.name: 'llama3' is not implemented" "$out/log" || { cat "$out/log"; fail "$name"; }
    extra+=(--model.name qwen3)
  fi
  # dense flavors have no experts to override
  grep -q 'flavor = "debugmodel_moe"' "$f" || extra+=(--model.num_experts none --model.top_k none
    --model.moe_inter_dim none)
  rm -rf "$out/run"
  "$titan" train --job.config_file "$f" "${local_run[@]}" "${extra[@]}" > "$out/log" 2>&1 ||
    { cat "$out/log"; fail "$name: 2 training steps"; }
  grep -q '^summary: steps=2 ' "$out/log" || { cat "$out/log"; fail "$name: no summary"; }
  n=$((n + 1))
done
[ "$n" -eq 5 ] || fail "$n fixtures, expected 5"

# job.print_config prints the config, memory_estimation.enable titan plan's table, then both
# train. lr_scheduler.total_steps 3 < 6 steps: torchtitan's LambdaLR factor past the end is
# the same formula (warmup 1, decay 2 steps, the virtual stable step 1):
# 1, 1, 0.5, 0, -0.5, -1 for linear decay, times optimizer.lr 3e-4 (checked against
# torchtitan v0.2.2's build_lr_schedulers with torch: 3e-4 x these).
rm -rf "$out/run"
"$titan" train --job.config_file "$fixtures/qwen3_0.6b.toml" "${local_run[@]}" \
  --model.num_experts none --model.top_k none --model.moe_inter_dim none \
  --activation_checkpoint.mode none --job.print_config --memory_estimation.enable \
  --training.steps 6 --lr_scheduler.total_steps 3 --lr_scheduler.warmup_steps 1 \
  --metrics.enable_jsonl > "$out/log" 2>&1 || { cat "$out/log"; fail "total_steps < steps"; }
grep -q '^description = "Qwen 3 0.6B training"$' "$out/log" || fail "job.print_config printed nothing"
grep -q '^memory per rank' "$out/log" || fail "memory_estimation.enable printed no plan"
grep -q 'lr_scheduler.total_steps 3 < training.steps 6' "$out/log" || fail "no total_steps note"
want="0.0003 0.0003 0.00015 0 -0.00015 -0.0003"
got=$(sed 's/.*"lr": \([^,]*\),.*/\1/' "$out/run/metrics.jsonl" | tr '\n' ' ')
awk -v w="$want" -v g="$got" 'BEGIN { n = split(w, a, " "); m = split(g, b, " ");
  if (n != m) exit 1; for (i = 1; i <= n; i++) { d = a[i] - b[i]; if (d > 1e-12 || d < -1e-12) exit 1 } }' ||
  fail "lr past total_steps: got $got, want $want"
# Every v0.2.2 JobConfig key at torchtitan's default loads; the printed config differs from
# titan's defaults only where titan's defaults are deliberately its own (docs/config.md) or a
# list default has no schema form (torchtitan's non-empty list defaults).
"$titan" train --config "$fixtures/defaults/job_config_v0.2.2.toml" --print-config > "$out/tt" ||
  fail "torchtitan's JobConfig defaults do not load"
"$titan" train --print-config > "$out/titan"
got=$({ diff "$out/titan" "$out/tt" || true; } | sed -n 's/^> \([a-z_0-9]*\) = .*/\1/p' |
  LC_ALL=C sort | tr '\n' ' ')
want="async_mode components dataset description dump_folder filter_fqns hf_assets_path "
want+="mixed_precision_param mode name "
want+="per_op_sac_force_recompute_mm_shapes_by_fqns "
[ "$got" = "$want" ] || fail "defaults differ from torchtitan's in: $got (expected: $want)"
# torchtitan 0.3's launch line (a Python config function by name) is refused pointing at the
# docs' mapping, --module before anything else, a --config naming no file with the hint; a
# missing file with a path keeps the plain message.
"$titan" train --module qwen3 --config qwen3_0_6b > "$out/m" 2>&1 && fail "--module accepted"
grep -q "command line: --module: torchtitan 0.3's .*Coming from torchtitan 0.3" "$out/m" ||
  { cat "$out/m"; fail "--module: no pointer"; }
"$titan" train --config qwen3_0_6b > "$out/m" 2>&1 && fail "--config NAME accepted"
grep -q "qwen3_0_6b: cannot open: .*torchtitan 0.3's --config names a Python config function" \
  "$out/m" || { cat "$out/m"; fail "--config NAME: no pointer"; }
"$titan" train --config "$out/none.toml" > "$out/m" 2>&1 && fail "a missing file accepted"
grep -q "none.toml: cannot open" "$out/m" && ! grep -q "torchtitan 0.3" "$out/m" ||
  { cat "$out/m"; fail "a missing path: the 0.3 hint"; }
# torchtitan 0.3's bf16 AdamW states: taken (the moments in bf16: half their memory, as plan
# says; the training itself: finetune_adam_bf16_states, dist_fsdp)
"$titan" plan --optimizer.implementation fused_opt_states_bf16 > "$out/m" 2>&1 &&
  grep -q "AdamW m + v (bf16 shard)" "$out/m" || { cat "$out/m"; fail "fused_opt_states_bf16 in plan"; }
echo "torchtitan configs ok: $n fixtures"
