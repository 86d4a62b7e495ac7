#!/usr/bin/env bash
# `make train` (and `make build`) install only the build dependencies (scripts/deps.sh
# --build: no Python, no PyTorch); `make test` installs everything. Read from make's dry run
# (make -n prints the commands without running them).
set -uo pipefail
src=$1; fail=0
deps() { make -n -C "$src" "$1" 2>/dev/null | grep -o 'scripts/deps.sh[^;&|]*' | sed 's/ *$//'; }
for t in train build; do
  got=$(deps $t | sort -u | tr '\n' ',')
  [ "$got" = "scripts/deps.sh --build," ] && echo "ok   make $t: $got" ||
    { echo "FAIL make $t runs: $got (want only scripts/deps.sh --build)"; fail=1; }
done
deps test | grep -qx 'scripts/deps.sh' && echo "ok   make test installs the test dependencies" ||
  { echo "FAIL make test does not run scripts/deps.sh (everything)"; fail=1; }
exit $fail
