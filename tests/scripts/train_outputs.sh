#!/usr/bin/env bash
# A short run with TensorBoard, JSONL metrics, validation and an HF export, checked by
# tests/reference/check_train_outputs.py (TensorBoard's reader, transformers); then a run
# that diverges must stop with the step, microbatch and first non-finite gradient named and
# leave its last checkpoint as it was; and a peak below what the run computes (MFU > 100%)
# gets one warning.
set -euo pipefail
titan=$1; python=$2; here=$3; text=$4; out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
head -c 1000000 "$text" > "$out/train.txt"
tail -c 100000 "$text" > "$out/val.txt"
model=(--set n_layers=2 --set dim=64 --set n_heads=4 --set n_kv_heads=2 --set head_dim=16
       --set ffn_dim=128 --data "$out/train.txt" --batch 4 --seq-len 64 --peak-tflops 1)
"$titan" train "${model[@]}" --steps 6 --log-freq 2 --dump-folder "$out/run" \
    --metrics.enable_tensorboard --metrics.enable_jsonl --validation.enable \
    --validation.dataset_path "$out/val.txt" --validation.freq 3 --validation.steps 5 \
    --validation.seq_len 32 --validation.local_batch_size 2 --out hf > "$out/log"
"$python" "$here/reference/check_train_outputs.py" "$out/run" "$out/val.txt" 32 2 5 2 3 6
# the whole validation set, 5 windows of 33 tokens and 3 spare bytes, in batches of 2: the
# short last batch counts (it was dropped: 4 windows scored)
head -c $((5 * 33 + 3)) "$out/val.txt" > "$out/val5.txt"
"$titan" train "${model[@]}" --steps 1 --log-freq 1 --dump-folder "$out/run5" \
    --metrics.enable_tensorboard --metrics.enable_jsonl --validation.enable \
    --validation.dataset_path "$out/val5.txt" --validation.freq 1 --validation.steps -1 \
    --validation.seq_len 32 --validation.local_batch_size 2 --out hf > "$out/log5"
"$python" "$here/reference/check_train_outputs.py" "$out/run5" "$out/val5.txt" 32 2 -1 1 1 1
# validation.steps 4 of 2 windows on that set of 5: torchtitan repeats a bounded validation
# set, so 8 windows wrapping around (they were the 5 there are, silently)
"$titan" train "${model[@]}" --steps 1 --log-freq 1 --dump-folder "$out/run5w" \
    --metrics.enable_tensorboard --metrics.enable_jsonl --validation.enable \
    --validation.dataset_path "$out/val5.txt" --validation.freq 1 --validation.steps 4 \
    --validation.seq_len 32 --validation.local_batch_size 2 --out hf > "$out/log5w"
"$python" "$here/reference/check_train_outputs.py" "$out/run5w" "$out/val5.txt" 32 2 4 1 1 1
# divergence: a huge learning rate makes step 2's loss non-finite
if "$titan" train "${model[@]}" --steps 5 --lr 1e30 --warmup 0 --grad-accum 2 \
    --dump-folder "$out/div" --checkpoint-interval 1 --sync-checkpoint > "$out/div.log" 2>&1; then
  echo "FAIL: a diverging run exited 0"; exit 1; fi
grep -E "step [0-9]+, microbatch 1 of 2: non-finite .*first non-finite gradient: [a-z_.0-9]+.*\(the checkpoints saved before this step are intact\)" \
  "$out/div.log" || { echo "FAIL: divergence message"; cat "$out/div.log"; exit 1; }
# the report page is final and says why (it stayed "live", reloading itself, without the error)
grep -q '<p class="failed">The run ended with an error: step [0-9]*, microbatch 1 of 2: non-finite' \
  "$out/div/report.html" && ! grep -q 'http-equiv="refresh"' "$out/div/report.html" ||
  { echo "FAIL: the diverged run's report page is not final with the error"; exit 1; }
! grep -q "kernel overrides in use" "$out/div.log" ||
  { echo "FAIL: kernel overrides named without any"; exit 1; }
# with kernel overrides, the message names them as suspects, with where they run (a kernel's
# NaN shows up as some parameter's gradient, not as the kernel)
if "$titan" train "${model[@]}" --steps 5 --lr 1e30 --warmup 0 --dump-folder "$out/div_k" \
    --kernels.overrides 'swiglu=reference' > "$out/div_k.log" 2>&1; then
  echo "FAIL: a diverging run with an override exited 0"; exit 1; fi
grep -q "non-finite .*; kernel overrides in use (\`titan kernels test NAME\` checks each against its op's default): swiglu=reference at layers\.0" "$out/div_k.log" ||
  { echo "FAIL: divergence message with overrides"; cat "$out/div_k.log"; exit 1; }
# without checkpointing the stop says nothing was saved (it said "the last checkpoint is intact")
grep -q "(checkpointing is disabled (checkpoint.enable): nothing was saved)" "$out/div_k.log" &&
  ! grep -q "intact" "$out/div_k.log" ||
  { echo "FAIL: divergence without checkpoints claims one"; cat "$out/div_k.log"; exit 1; }
bad=$(grep -oE "step [0-9]+, microbatch" "$out/div.log" | grep -oE "[0-9]+" | head -1)
good=$((bad - 1))
ls "$out/div/checkpoint"
[ -f "$out/div/checkpoint/step-$good/metadata.json" ] && [ ! -e "$out/div/checkpoint/step-$bad" ] ||
  { echo "FAIL: checkpoint step-$good should be the last one"; exit 1; }
"$titan" train "${model[@]}" --steps 5 --lr 1e30 --warmup 0 --grad-accum 2 \
  --dump-folder "$out/div" --checkpoint-interval 1 --stop-after-step "$good" > "$out/reload.log"
grep -q "resumed from .*step-$good" "$out/reload.log" || { cat "$out/reload.log"; exit 1; }
echo "ok: divergence named, checkpoint step-$good intact and loadable"
# a peak far below what the run computes: MFU above 100%, warned about once
"$titan" train "${model[@]}" --steps 3 --log-freq 1 --peak-tflops 0.000001 \
    --dump-folder "$out/mfu" > "$out/mfu.log" 2>&1
[ "$(grep -c 'MFU above 100%: the configured peak' "$out/mfu.log")" = 1 ] ||
  { echo "FAIL: one MFU warning expected"; cat "$out/mfu.log"; exit 1; }
# the summary of a run of one step (stop_after_step 1 of 10): that step's rate (it said 0 tokens/s:
# the first step was left out by the planned step count, not the steps run)
"$titan" train "${model[@]}" --steps 10 --stop-after-step 1 --dump-folder "$out/one" \
  --metrics.enable_jsonl > "$out/one.log" 2>&1
tps=$(grep -o 'summary: steps=1 tokens_per_s=[0-9.]*' "$out/one.log" | cut -d= -f3)
awk -v t="${tps:-0}" 'BEGIN { exit !(t > 0) }' ||
  { echo "FAIL: a one-step run's summary"; grep summary "$out/one.log"; exit 1; }
echo "ok: a one-step run's summary: $tps tokens/s"
# a fresh run in that dump folder keeps the earlier run's metrics.jsonl (it was replaced
# silently), said
cp "$out/one/metrics.jsonl" "$out/one_metrics"
"$titan" train "${model[@]}" --steps 10 --stop-after-step 1 --dump-folder "$out/one" \
  --metrics.enable_jsonl > "$out/two.log" 2>&1
kept=$(ls "$out/one" | grep -E '^metrics-[0-9]{8}-[0-9]{6}\.jsonl$')
[ -n "$kept" ] && cmp -s "$out/one/$kept" "$out/one_metrics" &&
  grep -q "the earlier run's .*metrics.jsonl kept as .*$kept" "$out/two.log" ||
  { echo "FAIL: the earlier run's metrics"; ls "$out/one"; cat "$out/two.log"; exit 1; }
echo "ok: a fresh run keeps the earlier run's metrics as $kept"
