#!/usr/bin/env bash
# Load-only timings of two titan binaries, interleaved (the VM's noise hits both alike), with
# cat and a first touch of fresh memory the size of the fp32 model as the two ceilings.
# `titan convert SRC /dev/null/x` loads, prints its "loaded ..." line, then fails on the
# destination before writing anything.
# usage: OLD=path/to/titan NEW=build/titan bench/bench_load_ab.sh [SRC]   (SRC: an HF folder or
# training checkpoint; default $WORK/hf from bench_hf_io.sh; ROUNDS=3)
set -uo pipefail
cd "$(dirname "$0")/.."
WORK=${WORK:-/tmp/titan_hf_bench}
SRC=${1:-$WORK/hf}
OLD=${OLD:?OLD=path to the old titan binary}
NEW=${NEW:-build/titan}
files=$(ls "$SRC"/*.safetensors)
cat $files > /dev/null
for ((r = 1; r <= ${ROUNDS:-3}; r++)); do
  /usr/bin/time -f "cat: %e s (%U user, %S sys)" cat $files > /dev/null
  .venv/bin/python -c "import numpy as np, time; t = time.time(); a = np.ones(1720574976, np.float32); \
print(f'first touch: {time.time() - t:.2f} s')"
  for v in OLD NEW; do
    /usr/bin/time -f "$v: %e s (%U user, %S sys)" "${!v}" convert "$SRC" /dev/null/x 2>&1 |
      grep -E "^loaded|^$v:" | sed "s/^loaded/$v: loaded/"
  done
done
