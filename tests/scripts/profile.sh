#!/usr/bin/env bash
# [profiling] (docs/profiling.md), checked by tests/reference/check_trace.py against Python's
# json, the run's config.toml, metrics.jsonl and HF's Qwen3 shapes:
#  1. a profiled 3-step run of configs/qwen3_debug.toml: one trace, every op of every layer
#     fwd + bwd, the events sum to each step's time within 15 %;
#  2. torchtitan's schedule: profile_freq 2, active 1, warmup 1 over 4 steps traces steps 2
#     and 4 (iteration_2, iteration_4), nothing else, each with its checkpoint save (interval
#     2) after the step; the losses are bitwise those of the same run unprofiled (the
#     wrappers forward to the real kernels); a run ending inside a window writes the steps it
#     recorded as iteration_{last step} (torchtitan's profiler on exit);
#  3. a kernel plugin on one layer only (layers.1.rope = rope_bhsd) under profiling: that
#     layer's rope events name the plugin, the others 'default', same losses as unprofiled;
#  4. refusals by field name: profile_freq < active + warmup, enable_memory_snapshot, a traces
#     folder that is a file or cannot be created (before the first step).
# usage: profile.sh TITAN PYTHON REPO_DIR SHARED_DIR PLUGIN_SO
set -euo pipefail
titan=$1; py=$2; repo=$3; shared=$4; plugin=$5
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
export OMP_NUM_THREADS=2
losses() { grep -o '"loss": [^,}]*' "$1/metrics.jsonl"; }
debug=(--config "$repo/configs/qwen3_debug.toml"
       --training.dataset_path "$shared/data/tinyshakespeare/input.txt"
       --model.hf_assets_path "$shared/data/qwen3_tokenizer" --training.steps 3
       --validation.enable false --checkpoint.enable false --job.sample_tokens 0
       --checkpoint.hf_export_folder "" --metrics.enable_tensorboard false
       --training.local_batch_size 4 --metrics.log_freq 1 --metrics.peak_tflops 1)
prof=(--profiling.enable_profiling true)

if [ -z "${PROFILE_SKIP_DEBUG:-}" ]; then # (set: the faster parts only, while editing)
"$titan" train "${debug[@]}" --job.dump_folder "$out/a" "${prof[@]}" --profiling.profile_freq 3 \
  --profiling.profiler_active 3 --profiling.profiler_warmup 0 > "$out/a.log"
grep -A4 '^profile: steps 1-3' "$out/a.log"
[ "$(ls "$out/a/profile_traces")" = iteration_3 ] || { echo "FAIL: $(ls "$out/a/profile_traces")"; exit 1; }
"$py" "$repo/tests/reference/check_trace.py" "$out/a/profile_traces/iteration_3/rank0_trace.json" \
  "$out/a" --steps 3 --phase "data loading" --phase "zero grad" --phase "grad norm" \
  --phase "optimizer step"
fi

small=(--flavor debugmodel --set n_layers=2 --set dim=64 --set n_heads=4 --set n_kv_heads=2
       --set head_dim=16 --set ffn_dim=128 --set vocab_size=300 --set tie_embeddings=0 --random-tokens --batch 2
       --seq-len 32 --peak-tflops 1 --log-freq 1 --metrics.enable_jsonl true)
"$titan" train "${small[@]}" --steps 4 --dump-folder "$out/c" "${prof[@]}" \
  --profiling.profile_freq 2 --profiling.profiler_active 1 --profiling.profiler_warmup 1 \
  --checkpoint.enable true --checkpoint.interval 2 >/dev/null
[ "$(ls "$out/c/profile_traces" | tr '\n' ' ')" = "iteration_2 iteration_4 " ] ||
  { echo "FAIL: traces $(ls "$out/c/profile_traces")"; exit 1; }
for s in 2 4; do
  "$py" "$repo/tests/reference/check_trace.py" "$out/c/profile_traces/iteration_$s/rank0_trace.json" \
    "$out/c" --steps 1 --phase "checkpoint save" --no-time # steps of a millisecond: structure only
done
# a run ending inside a window (steps 5 of the window 5-6) writes what it recorded as
# iteration_5, as torchtitan's profiler does on exit (it was dropped)
"$titan" train "${small[@]}" --steps 5 --dump-folder "$out/c5" "${prof[@]}" \
  --profiling.profile_freq 3 --profiling.profiler_active 2 --profiling.profiler_warmup 0 >/dev/null
[ "$(ls "$out/c5/profile_traces" | tr '\n' ' ')" = "iteration_3 iteration_5 " ] ||
  { echo "FAIL: a run ending mid-window: traces $(ls "$out/c5/profile_traces")"; exit 1; }
"$py" "$repo/tests/reference/check_trace.py" "$out/c5/profile_traces/iteration_5/rank0_trace.json" \
  "$out/c5" --steps 1 --no-time
# a run that fails inside a window (a diverging lr: step 2 of the window 1-4 stops on a
# non-finite gradient) writes its recorded steps too, the failed one as far as it ran, with
# the error kept (it was dropped: the trace a divergence is debugged with)
if "$titan" train "${small[@]}" --steps 4 --dump-folder "$out/nan" "${prof[@]}" --optimizer.lr 1e30 \
  --profiling.profile_freq 4 --profiling.profiler_active 4 --profiling.profiler_warmup 0 \
  >"$out/nan.log" 2>&1; then echo "FAIL: the diverging run succeeded"; exit 1; fi
grep -q "step 2.*non-finite" "$out/nan.log" && [ "$(ls "$out/nan/profile_traces" 2>/dev/null)" = iteration_2 ] ||
  { echo "FAIL: a run failing mid-window wrote no trace:"; tail -3 "$out/nan.log"; exit 1; }
"$py" "$repo/tests/reference/check_trace.py" "$out/nan/profile_traces/iteration_2/rank0_trace.json" \
  "$out/nan" --steps 2 --no-time # step 2 as far as it ran
echo "ok: a run failing inside a window writes its trace: $(ls "$out/nan/profile_traces")"
"$titan" train "${small[@]}" --steps 4 --dump-folder "$out/b" >/dev/null
diff <(losses "$out/c") <(losses "$out/b") || { echo "FAIL: profiling changed the losses"; exit 1; }
[ ! -e "$out/b/profile_traces" ] || { echo "FAIL: traces without enable_profiling"; exit 1; }
echo "ok: profiled losses bitwise those of the unprofiled run"

kern=(--kernels.plugins "[\"$plugin\"]" --kernels.overrides '["layers.1.rope=rope_bhsd"]')
"$titan" train "${small[@]}" --steps 2 --dump-folder "$out/d" "${kern[@]}" "${prof[@]}" \
  --profiling.profile_freq 2 --profiling.profiler_active 2 --profiling.profiler_warmup 0 >/dev/null
"$py" "$repo/tests/reference/check_trace.py" "$out/d/profile_traces/iteration_2/rank0_trace.json" \
  "$out/d" --steps 2 --impl layers.1/rope=rope_bhsd --no-time
"$titan" train "${small[@]}" --steps 2 --dump-folder "$out/e" "${kern[@]}" >/dev/null
diff <(losses "$out/d") <(losses "$out/e") || { echo "FAIL: plugin losses differ"; exit 1; }
echo "ok: a plugin on layers.1 only, profiled: its events name it, losses unchanged"

# refused (exit status 1, one line naming the field), never a crash
refuse() {
  local want=$1; shift
  if "$titan" train "${small[@]}" --steps 2 "$@" > "$out/r.log" 2>&1; then
    echo "FAIL: accepted: $*"; exit 1; fi
  local rc=$?
  grep -q -- "$want" "$out/r.log" && [ $rc -lt 128 ] ||
    { echo "FAIL ($rc): no '$want' in:"; cat "$out/r.log"; exit 1; }
  echo "ok: refused: $(grep -- "$want" "$out/r.log" | head -1)"
}
refuse profiling.profile_freq --dump-folder "$out/f" "${prof[@]}" --profiling.profile_freq 3 \
  --profiling.profiler_active 2 --profiling.profiler_warmup 2
refuse profiling.enable_memory_snapshot --dump-folder "$out/g" --profiling.enable_memory_snapshot true
mkdir -p "$out/h"; echo x > "$out/h/traces"
refuse profiling.save_traces_folder --dump-folder "$out/h" "${prof[@]}" --profiling.save_traces_folder traces \
  --profiling.profile_freq 1 --profiling.profiler_warmup 0
# a folder that cannot be made (a file on its path): refused before the first step, not at
# the end of the first window (the steps before it were lost)
refuse profiling.save_traces_folder --dump-folder "$out/h" "${prof[@]}" \
  --profiling.save_traces_folder traces/sub --profiling.profile_freq 2 --profiling.profiler_warmup 0
! grep -q -- "- step: " "$out/r.log" || { echo "FAIL: steps ran before the refusal"; exit 1; }
