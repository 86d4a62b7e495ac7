#!/usr/bin/env bash
# kernels.plugins are opened only for a run: --print-config and titan plan leave the test
# plugin's constructor marker absent; titan kernels --plugin (and a training run's
# set-up) create it, which shows the marker works.
set -uo pipefail
titan=$1; plugin=$2; out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
export TITAN_TEST_PLUGIN_MARKER=$out/marker
fail=0
check() { # description, want (absent|present), command...
  local what=$1 want=$2; shift 2
  rm -f "$TITAN_TEST_PLUGIN_MARKER"
  "$@" > "$out/o" 2>&1 || { echo "FAIL $what: exit $?"; cat "$out/o"; fail=1; return; }
  local got=absent; [ -e "$TITAN_TEST_PLUGIN_MARKER" ] && got=present
  if [ $got != "$want" ]; then echo "FAIL $what: the plugin's constructor ran: $got"; fail=1
  else echo "ok   $what: marker $got"; fi
}
check "train --print-config" absent "$titan" train --kernels.plugins "[\"$plugin\"]" --print-config
check "plan" absent "$titan" plan --kernels.plugins "[\"$plugin\"]"
check "kernels list --plugin" present "$titan" kernels list --plugin "$plugin"
check "train (one step)" present "$titan" train --kernels.plugins "[\"$plugin\"]" \
  --set n_layers=1 --set dim=64 --set n_heads=4 --set n_kv_heads=2 --set head_dim=16 \
  --set ffn_dim=128 --steps 1 --batch 1 --seq-len 8 --peak-tflops 1 --dump-folder "$out/run"
exit $fail
