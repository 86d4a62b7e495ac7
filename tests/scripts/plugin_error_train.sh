#!/usr/bin/env bash
# A kernel plugin returning an error code a few steps into a run (the op cannot report it:
# titan aborts, exit 134): the message names kernel, plugin, layer and direction; metrics.jsonl
# holds steps 1..k; the report page is drawn once more, final, at step k with the error (it
# stayed at the last logged step 1, reloading itself every 30 s as a live run's page).
# usage: plugin_error_train.sh TITAN PLUGIN_DIR
set -uo pipefail
titan=$1; dir=$2; out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
# the 7th call of swiglu at layers.1 fails (step 1 calls it more than once: a few steps in)
TITAN_TEST_FAIL_AFTER=6 "$titan" train --set n_layers=2 --set dim=64 --set n_heads=4 \
  --set n_kv_heads=2 --set head_dim=16 --set ffn_dim=128 --set vocab_size=256 --random-tokens \
  --steps 10 --batch 1 --seq-len 8 --peak-tflops 1 --log-freq 5 --dump-folder "$out/run" \
  --metrics "$out/run/metrics.jsonl" --kernels.plugins "$dir/libtest_plugin_fail.so" \
  --kernels.overrides 'layers.1.feed_forward.swiglu=swiglu_fail' > "$out/log" 2>&1
rc=$?
[ $rc -eq 134 ] || { echo "FAIL: exit $rc, want 134 (abort)"; cat "$out/log"; exit 1; }
msg="kernel swiglu/swiglu_fail (plugin $dir/libtest_plugin_fail.so) at layers.1: forward returned 3"
grep -qF "[titan error] $msg" "$out/log" || { echo "FAIL: no message"; cat "$out/log"; exit 1; }
k=$(grep -c . "$out/run/metrics.jsonl")
[ "$(grep -o '"step": [0-9]*' "$out/run/metrics.jsonl" | cut -d' ' -f2 | tr '\n' ' ')" = \
  "$(seq 1 "$k" | tr '\n' ' ')" ] && [ "$k" -ge 2 ] && [ "$k" -lt 10 ] ||
  { echo "FAIL: metrics.jsonl holds no steps 1..k, 2 <= k < 10"; exit 1; }
page=$out/run/report.html
grep -q "step $k of 10" "$page" && grep -qF "<p class=\"failed\">The run ended with an error: $msg" "$page" &&
  ! grep -q 'http-equiv="refresh"' "$page" ||
  { echo "FAIL: report.html is not final at step $k with the kernel's error"; exit 1; }
echo "ok: a kernel's error at step $((k + 1)): exit 134, named; metrics.jsonl steps 1..$k; the page final"
