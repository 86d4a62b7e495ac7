# Sourced by test scripts. without ARRAY OPT...: ARRAY's arguments without each OPT and the value
# after it, into the array kept (a run with [[optimizer.param_groups]] takes no --lr or
# --optimizer.eps: its groups carry them). fixtures: tests/fixtures.
fixtures=$(cd "$(dirname "${BASH_SOURCE[0]}")/../fixtures" && pwd)
without() {
  local -n arr=$1; shift
  local i o drop; kept=()
  for ((i = 0; i < ${#arr[@]}; i++)); do
    drop=0; for o in "$@"; do [ "${arr[i]}" = "$o" ] && drop=1; done
    if ((drop)); then i=$((i + 1)); else kept+=("${arr[i]}"); fi
  done
}
