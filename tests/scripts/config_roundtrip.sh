#!/usr/bin/env bash
# Every config in DIR: `titan train --config F --print-config` succeeds, and printing the
# printed config again gives the same text (the printed TOML is the resolved config).
set -euo pipefail
titan=$1; dir=$2; out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
n=0
for f in "$dir"/*.toml; do
  name=$(basename "$f")
  "$titan" train --config "$f" --print-config > "$out/$name.1"
  "$titan" train --config "$out/$name.1" --print-config > "$out/$name.2"
  if ! diff "$out/$name.1" "$out/$name.2"; then echo "FAIL: $name does not round-trip"; exit 1; fi
  # The command line overrides the file, in both spellings.
  "$titan" train --config "$f" --training.steps 7 --optimizer.lr=0.5 --print-config > "$out/o"
  grep -qx 'steps = 7' "$out/o" && grep -qx 'lr = 0.5' "$out/o" ||
    { echo "FAIL: $name: overrides not applied"; exit 1; }
  n=$((n + 1))
done
[ "$n" -ge 6 ] || { echo "FAIL: only $n configs in $dir"; exit 1; }
echo "config round trip ok: $n configs"
