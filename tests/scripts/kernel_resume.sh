#!/usr/bin/env bash
# Kernels change compute only, so a checkpoint trained with a plugin kernel resumes without it
# and the reverse: allowed, and said in one warning naming both sides (the checkpoint records
# its kernel_overrides); a resume with the same kernels says nothing. With the example RoPE
# plugin (bitwise the default) the resumed losses equal the uninterrupted run's, bit for bit.
# usage: kernel_resume.sh TITAN ROPE_PLUGIN
set -uo pipefail
titan=$1; rope=$2; out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
export OMP_NUM_THREADS=2
m=(--flavor debugmodel --set n_layers=2 --set dim=64 --set n_heads=4 --set n_kv_heads=2
   --set head_dim=16 --set ffn_dim=128 --set vocab_size=300 --random-tokens --batch 2
   --seq-len 16 --peak-tflops 1 --log-freq 1 --metrics.enable_jsonl true --seed 3 --steps 4
   --checkpoint.interval 2)
plg=(--kernels.plugins "$rope" --kernels.overrides 'rope=rope_bhsd')
losses() { grep -o '"loss": [^,}]*' "$1/metrics.jsonl"; }
fail=0
"$titan" train "${m[@]}" --checkpoint.enable false --dump-folder "$out/ref" > /dev/null 2>&1 ||
  { echo "FAIL: reference run"; exit 1; }
# case NAME FIRST_ARGS... -- SECOND_ARGS...: steps 1-2, then resumed to 4, in $out/NAME
case_() {
  local name=$1; shift; local first=() second=()
  while [ "$1" != -- ]; do first+=("$1"); shift; done; shift; second=("$@")
  "$titan" train "${m[@]}" --checkpoint.enable true --stop-after-step 2 \
    --dump-folder "$out/$name" "${first[@]}" > "$out/$name.1.log" 2>&1 &&
  "$titan" train "${m[@]}" --checkpoint.enable true --dump-folder "$out/$name" \
    ${second[@]+"${second[@]}"} > "$out/$name.log" 2>&1 ||
    { echo "FAIL $name: a run failed"; tail -3 "$out/$name".*log; fail=1; return 1; }
  grep -q "resumed from $out/$name/checkpoint/step-2" "$out/$name.log" ||
    { echo "FAIL $name: did not resume"; fail=1; return 1; }
  cmp -s <(losses "$out/ref") <(losses "$out/$name") ||
    { echo "FAIL $name: losses differ from the uninterrupted run's"; fail=1; return 1; }
}
want="step-2 was trained with kernel overrides 'rope=rope_bhsd at layers.0-1 (plugin $rope)'; this run with none (the defaults): allowed"
case_ plugin_then_none "${plg[@]}" -- &&
  { grep -qF "$want" "$out/plugin_then_none.log" && echo "ok   plugin -> none: resumes, warned, bitwise" ||
    { echo "FAIL plugin -> none: no warning '$want'"; grep warn "$out/plugin_then_none.log"; fail=1; }; }
want="step-2 was trained with kernel overrides none (the defaults); this run with 'rope=rope_bhsd at layers.0-1 (plugin $rope)': allowed"
case_ none_then_plugin -- "${plg[@]}" &&
  { grep -qF "$want" "$out/none_then_plugin.log" && echo "ok   none -> plugin: resumes, warned, bitwise" ||
    { echo "FAIL none -> plugin: no warning '$want'"; grep warn "$out/none_then_plugin.log"; fail=1; }; }
case_ plugin_both "${plg[@]}" -- "${plg[@]}" &&
  { ! grep -q "trained with kernel overrides" "$out/plugin_both.log" && echo "ok   same kernels: no warning" ||
    { echo "FAIL same kernels: warned"; fail=1; }; }
exit $fail
