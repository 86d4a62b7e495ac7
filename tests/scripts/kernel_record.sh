#!/usr/bin/env bash
# What a run records of its kernels: with the example plugin on layers.1-2 only, the header's
# "kernel overrides" line and the report's fact of that name list it with its layers and
# path (the "kernels (layers.0)" summary alone showed rope=default); a plugin writing NaN
# (libtest_plugin_nan.so's swiglu_nan) stops the run with an error naming that kernel, its
# layer and plugin file.
# usage: kernel_record.sh TITAN ROPE_PLUGIN NAN_PLUGIN
set -uo pipefail
titan=$1; rope=$2; nan=$3; out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
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
exit $fail
