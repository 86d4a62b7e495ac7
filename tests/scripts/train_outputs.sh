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
# with [[optimizer.param_groups]] (two AdamW groups and an Adam one): each group's lr under
# torchtitan 0.3's names
groups=$here/fixtures/param_groups/dense.toml
"$titan" train "${model[@]}" --config "$groups" --steps 3 --log-freq 1 --dump-folder "$out/rung" \
    --metrics.enable_tensorboard --metrics.enable_jsonl --validation.enable \
    --validation.dataset_path "$out/val.txt" --validation.freq 3 --validation.steps 1 \
    --validation.seq_len 32 --validation.local_batch_size 2 --out hf > "$out/logg"
"$python" "$here/reference/check_train_outputs.py" "$out/rung" "$out/val.txt" 32 2 1 1 3 3 "$groups"
# the most groups titan takes (64): a step's TensorBoard event holds every learning rate (its
# record had room for ~16 scalars)
for i in $(seq 0 62); do
  printf "[[optimizer.param_groups]]\npattern = '^layers\\\\.%d\\\\.'\noptimizer_name = \"%s\"\n" $i \
    "$([ $((i % 2)) = 1 ] && echo AdamW || echo Adam)"
  printf "optimizer_kwargs = {lr = %d.0e-4}\n" $((i + 1))
done > "$out/g64.toml"
printf "[[optimizer.param_groups]]\npattern = '.*'\noptimizer_name = \"AdamW\"\noptimizer_kwargs = {lr = 1e-3}\n" >> "$out/g64.toml"
"$titan" train --config "$out/g64.toml" --random-tokens --steps 2 --set n_layers=63 --set dim=32 \
  --set n_heads=2 --set n_kv_heads=1 --set head_dim=16 --set ffn_dim=32 --set vocab_size=64 \
  --seq-len 16 --batch 1 --log-freq 1 --dump-folder "$out/g64" --metrics.enable_tensorboard \
  > "$out/g64.log" 2>&1 || { cat "$out/g64.log"; echo "FAIL: 64 parameter groups"; exit 1; }
"$python" - "$out/g64/tb" <<'PY'
import glob, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
acc = EventAccumulator(glob.glob(sys.argv[1] + "/*")[0]); acc.Reload()
lr = sorted(t for t in acc.Tags()["scalars"] if t.startswith("lr/"))
assert len(lr) == 64 and "lr/Adam/31" in lr and "lr/AdamW/31" in lr, lr
assert [e.step for e in acc.Scalars("lr/Adam/31")] == [1, 2], "steps"
# Adam's group 31 is entry 62 (lr 6.3e-3); AdamW's 31 the catch-all (1e-3): the same factor
r = acc.Scalars("lr/Adam/31")[-1].value / acc.Scalars("lr/AdamW/31")[-1].value
assert abs(r - 6.3) < 1e-5, r
print("ok: 64 parameter groups' learning rates in each step's TensorBoard event")
PY
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
