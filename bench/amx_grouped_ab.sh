#!/usr/bin/env bash
# On an AMX machine: whether grouped_mm/bf16 should run on AMX tiles by default
# (TITAN_GROUPED_AMX, opt-in since session 31, written on emulated tiles). First
# bench_amx_peak's comparison of this CPU's TDPBF16PS with the emulated one (src/ops/cpu/
# amx_emulate.c; "DIFFERS" lines mean the emulator should follow the hardware), then
# `titan kernels bench grouped_mm/bf16` with the switch off and on, alternated ROUNDS times (the
# VM's noise hits both alike), each run's forward and backward milliseconds of the bf16
# implementation, and the medians.
# usage: bench/amx_grouped_ab.sh [FLAVOR]   (default 30B-A3B-reduced; ROUNDS=3, MIN_TIME=3,
#        BUILD=build, ARGS: more `titan kernels bench` options, e.g. "--batch 1 --seq 128"; the
#        bench's defaults: 4 x 512 tokens)
set -uo pipefail
cd "$(dirname "$0")/.."
FLAVOR=${1:-30B-A3B-reduced}
BUILD=${BUILD:-build}
if ! grep -qw amx_bf16 /proc/cpuinfo; then
  echo "amx_grouped_ab.sh: this CPU has no AMX-BF16 (/proc/cpuinfo): nothing to measure" >&2
  exit 1
fi
grep -m1 'model name' /proc/cpuinfo
cmake --build "$BUILD" --target bench_amx_peak >/dev/null && "$BUILD"/bench_amx_peak 2000000
declare -A fwd bwd
for ((r = 1; r <= ${ROUNDS:-3}; r++)); do
  for g in 0 1; do
    out=$(TITAN_GROUPED_AMX=$g "$BUILD"/titan kernels bench grouped_mm/bf16 --flavor "$FLAVOR" \
      --min-time "${MIN_TIME:-3}" ${ARGS:-} 2>&1) || { echo "$out"; exit 1; }
    [ "$r" = 1 ] && TITAN_GROUPED_AMX=$g "$BUILD"/titan kernels test grouped_mm/bf16 --shapes 1 2>&1 |
      grep -o 'experts: [^)]*' | sed "s/^/TITAN_GROUPED_AMX=$g: /"
    # "grouped_mm bf16 fwd MS DEFAULT_MS SPEEDUP RATE GFLOP/s": the implementation's ms
    f=$(echo "$out" | awk '$1 == "grouped_mm" && $3 == "fwd" && NF >= 6 { print $4 }')
    b=$(echo "$out" | awk '$1 == "grouped_mm" && $3 == "bwd" && NF >= 6 { print $4 }')
    echo "round $r TITAN_GROUPED_AMX=$g: forward $f ms, backward $b ms"
    fwd[$g]+="$f "
    bwd[$g]+="$b "
  done
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
for g in 0 1; do
  echo "TITAN_GROUPED_AMX=$g medians: forward $(echo "${fwd[$g]}" | median) ms," \
    "backward $(echo "${bwd[$g]}" | median) ms"
done
