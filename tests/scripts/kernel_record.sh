#!/usr/bin/env bash
# What a run records of its kernels: with the example plugin on layers.1-2 only, the header's
# "kernel overrides" line and the report's fact of that name list it with its layers and
# path (the "kernels (layers.0)" summary alone showed rope=default); a plugin writing NaN
# (libtest_plugin_nan.so's swiglu_nan) stops the run with an error naming that kernel, its
# layer and plugin file. A kernel whose constraint the sample after training (batch 1, a
# few tokens per call) breaks (libtest_plugin_tile32.so: rows in tiles of 32) is refused
# before training, naming kernel, layer and rule, instead of being called out of its
# constraints after the last step.
# usage: kernel_record.sh TITAN ROPE_PLUGIN NAN_PLUGIN TILE32_PLUGIN
set -uo pipefail
titan=$1; rope=$2; nan=$3; tile=$4; out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
export OMP_NUM_THREADS=2
small=(--flavor debugmodel --set n_layers=4 --set dim=64 --set n_heads=4 --set n_kv_heads=2
       --set head_dim=16 --set ffn_dim=128 --set vocab_size=300 --random-tokens --batch 2
       --seq-len 16 --peak-tflops 1 --steps 1 --checkpoint.enable false)
fail=0
"$titan" train "${small[@]}" --dump-folder "$out/a" --kernels.plugins "$rope" \
  --kernels.overrides '["layers.1-2.attention.rope=rope_bhsd", "head.rmsnorm=reference"]' \
  > "$out/a.log" 2>&1 || { cat "$out/a.log"; exit 1; }
want="rmsnorm=reference at head; rope=rope_bhsd at layers.1-2 (plugin $rope)"
grep -qF "  kernel overrides: $want" "$out/a.log" ||
  { echo "FAIL header: no line '  kernel overrides: $want'"; grep kernel "$out/a.log"; fail=1; }
grep -qF "[\"kernel overrides\", \"$want\"]" <(tr -d '\n' < "$out/a/report.facts.json" |
  sed 's/\[ *"/["/g; s/", *"/", "/g; s/" *\]/"]/g') ||
  { echo "FAIL report: no fact 'kernel overrides' = '$want'"; cat "$out/a/report.facts.json"; fail=1; }
[ $fail = 0 ] && echo "ok   header and report name the plugin kernel on layers.1-2"
"$titan" train "${small[@]}" --dump-folder "$out/n" --kernels.plugins "$nan" \
  --kernels.overrides 'layers.1.feed_forward.swiglu=swiglu_nan' > "$out/n.log" 2>&1 &&
  { echo "FAIL NaN plugin: the run succeeded"; exit 1; }
grep -qF "non-finite loss" "$out/n.log" &&
  grep -qF "swiglu=swiglu_nan at layers.1 (plugin $nan)" "$out/n.log" ||
  { echo "FAIL NaN plugin: the error does not name the kernel"; tail -3 "$out/n.log"; fail=1; }
[ $fail = 0 ] && echo "ok   a NaN from a plugin: the error names swiglu_nan at layers.1 and its file"
"$titan" train "${small[@]}" --dump-folder "$out/t" --kernels.plugins "$tile" \
  --kernels.overrides 'swiglu=swiglu_tile32' --job.sample_tokens 4 > "$out/t.log" 2>&1
rc=$?
if [ $rc != 1 ] || grep -q "step: *1  loss:" "$out/t.log" ||
   ! grep -qF "job.sample_tokens = 4: inference runs the model at batch 1 and 1 to 16 tokens per call, and a call of 1 breaks a kernel's constraint: kernel swiglu/swiglu_tile32 at layers.0: batch * seq_len % 32 == 0 (batch = 1, seq_len = 1)" "$out/t.log"; then
  echo "FAIL sampling with a kernel for 32-row tiles: exit $rc, not refused before training"
  tail -3 "$out/t.log"; fail=1
else echo "ok   sampling with a kernel for 32-row tiles: refused before training"; fi
exit $fail
