#!/usr/bin/env bash
# Build bench/gemm_peak.c against every BLAS on this machine, run each on titan's GEMM shapes
# and print one table (best GFLOP/s per shape and library), then test when OpenBLAS reads
# OPENBLAS_CORETYPE. The last line is "machine_peak_gflops=<best over everything> (<variant>)".
#
# Environment knobs:
#   THREADS=2            threads for every library
#   MIN_TIME=0.3         seconds of timed calls per shape (at least 3 calls; best call counts)
#   SHAPES=a,b,...       subset of shapes (see: gemm_peak --list); default all
#   BENCH_BUILD=build/bench   where the gemm_peak binaries go
#   CORETYPES="SkylakeX Haswell Zen Prescott"   forced OpenBLAS cores to try besides autodetect
#   SKIP_TORCH=1         leave out the torch.matmul column (needs .venv/bin/python)
#   SKIP_LOADTEST=1      leave out the OPENBLAS_CORETYPE load-time test
set -euo pipefail
cd "$(dirname "$0")/.."

THREADS=${THREADS:-2}
MIN_TIME=${MIN_TIME:-0.3}
SHAPES=${SHAPES:-}
BENCH_BUILD=${BENCH_BUILD:-build/bench}
CORETYPES=${CORETYPES:-SkylakeX Haswell Zen Prescott}
PY=${PY:-.venv/bin/python}
LIBDIR=/usr/lib/$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
SRC=bench/gemm_peak.c
CFLAGS="-O2 -march=native -Wall -Wextra"

mkdir -p "$BENCH_BUILD"
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

# ---- build -------------------------------------------------------------------------------
# Each BLAS is linked by full path with an rpath to its own directory: Debian's
# libopenblas.so.0 / libblas.so.3 in $LIBDIR are update-alternatives links, so linking by
# name gets whichever build the alternatives currently point at.
built=()
build() {  # name, extra args...
  local name=$1; shift
  if gcc $CFLAGS -o "$BENCH_BUILD/$name" "$SRC" "$@" 2>"$OUT/$name.build.log"; then
    built+=("$name")
  else
    echo "# (skipping $name: build failed, see below)" >&2
    sed 's/^/#   /' "$OUT/$name.build.log" | head -5 >&2
  fi
}
for v in openblas-openmp openblas-pthread; do
  if [ -e "$LIBDIR/$v/libopenblas.so.0" ]; then
    build "gemm_peak_$v" "$LIBDIR/$v/libopenblas.so.0" "-Wl,-rpath,$LIBDIR/$v"
  fi
done
if [ -e "$LIBDIR/blis-openmp/libblis.so.4" ]; then
  build gemm_peak_blis-openmp "$LIBDIR/blis-openmp/libblis.so.4" "-Wl,-rpath,$LIBDIR/blis-openmp"
fi
if [ -e /usr/include/dnnl.h ]; then
  build gemm_peak_onednn -DGEMM_DNNL -ldnnl
fi
build gemm_peak_dlopen -DGEMM_DLOPEN -ldl
# The default-named binary the other scripts use: OpenBLAS (OpenMP build) when present.
for b in gemm_peak_openblas-openmp gemm_peak_openblas-pthread gemm_peak_blis-openmp; do
  if [ -x "$BENCH_BUILD/$b" ]; then cp "$BENCH_BUILD/$b" "$BENCH_BUILD/gemm_peak"; break; fi
done

# ---- run ---------------------------------------------------------------------------------
ARGS=(--threads "$THREADS" --min-time "$MIN_TIME")
[ -n "$SHAPES" ] && ARGS+=(--shapes "$SHAPES")
export OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS BLIS_NUM_THREADS=$THREADS
unset OPENBLAS_CORETYPE || true

labels=()
run() {  # label, then the command
  local label=$1; shift
  echo "# running $label ..." >&2
  if "$@" >"$OUT/$label.txt" 2>"$OUT/$label.err"; then
    labels+=("$label")
  else
    echo "# ($label failed:)" >&2
    tail -3 "$OUT/$label.err" | sed 's/^/#   /' >&2
  fi
}
has() { [[ " ${built[*]} " == *" $1 "* ]]; }

if has gemm_peak_openblas-openmp; then
  run "openblas-omp:auto" "$BENCH_BUILD/gemm_peak_openblas-openmp" "${ARGS[@]}"
  for c in $CORETYPES; do
    run "openblas-omp:$c" env OPENBLAS_CORETYPE="$c" "$BENCH_BUILD/gemm_peak_openblas-openmp" "${ARGS[@]}"
  done
fi
if has gemm_peak_openblas-pthread; then
  run "openblas-pth:auto" "$BENCH_BUILD/gemm_peak_openblas-pthread" "${ARGS[@]}"
fi
if has gemm_peak_blis-openmp; then
  run "blis-omp" "$BENCH_BUILD/gemm_peak_blis-openmp" "${ARGS[@]}"
fi
if has gemm_peak_onednn; then
  run "onednn" "$BENCH_BUILD/gemm_peak_onednn" "${ARGS[@]}"
fi
if [ -z "${SKIP_TORCH:-}" ] && [ -x "$PY" ] && "$PY" -c "import torch" 2>/dev/null; then
  TARGS=(--threads "$THREADS" --min-time "$MIN_TIME")
  [ -n "$SHAPES" ] && TARGS+=(--shapes "$SHAPES")
  run "torch" env OMP_WAIT_POLICY=PASSIVE "$PY" bench/torch_gemm.py "${TARGS[@]}"
fi

# ---- table -------------------------------------------------------------------------------
echo
echo "fp32 SGEMM, best GFLOP/s of >=3 calls (>= ${MIN_TIME}s per shape), $THREADS threads, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "ops: NT = x @ W^T (forward), NN = dy @ W (dx), TN = dy^T @ x (dW, beta=1); T = 2048 tokens, lm_head chunk 256"
for l in "${labels[@]}"; do
  info=$(grep -h -E '^# (openblas core|blis arch|onednn version|torch)' "$OUT/$l.txt" | sed 's/^# //' | tr '\n' ' ')
  printf '  %-20s %s\n' "$l" "$info"
done
echo
awk -v labels="${labels[*]}" -v dir="$OUT" '
  BEGIN {
    n = split(labels, L, " ")
    for (i = 1; i <= n; i++) {
      f = dir "/" L[i] ".txt"
      while ((getline line < f) > 0) {
        if (line ~ /^#/ || line ~ /^shape/ || line ~ /^peak/) continue
        split(line, a, " ")
        key = a[1]
        if (!(key in seen)) { seen[key] = 1; order[++ns] = key; desc[key] = sprintf("%-2s %6d %6d %6d", a[2], a[3], a[4], a[5]) }
        v[key, i] = a[6]
        if (a[6] + 0 > best[i] + 0) best[i] = a[6]
      }
      close(f)
    }
    printf "%-12s %-23s", "shape", "op      M      N      K"
    for (i = 1; i <= n; i++) printf " %*s", (length(L[i]) > 8 ? length(L[i]) : 8), L[i]
    printf "\n"
    for (s = 1; s <= ns; s++) {
      k = order[s]
      printf "%-12s %-23s", k, desc[k]
      for (i = 1; i <= n; i++) printf " %*s", (length(L[i]) > 8 ? length(L[i]) : 8), ((k, i) in v ? v[k, i] : "-")
      printf "\n"
    }
    printf "%-12s %-23s", "peak", ""
    for (i = 1; i <= n; i++) printf " %*s", (length(L[i]) > 8 ? length(L[i]) : 8), best[i]
    printf "\n"
  }'

# ---- when does OpenBLAS read OPENBLAS_CORETYPE? ---------------------------------------------
if [ -z "${SKIP_LOADTEST:-}" ] && has gemm_peak_openblas-openmp && has gemm_peak_dlopen; then
  B="$BENCH_BUILD/gemm_peak_openblas-openmp"
  T=(--threads "$THREADS" --min-time 0.1 --shapes square2048)
  line() {  # label, command...
    local label=$1; shift
    local o; o=$("$@" 2>&1) || true
    printf '  %-58s core=%-11s %s GF/s\n' "$label" \
      "$(echo "$o" | sed -n 's/^# openblas core: //p')" "$(echo "$o" | awk '$1=="square2048"{print $6}')"
  }
  echo
  echo "OPENBLAS_CORETYPE load-time test (square2048; Prescott = the slow SSE3 fallback):"
  line "env OPENBLAS_CORETYPE=Prescott before exec" env OPENBLAS_CORETYPE=Prescott "$B" "${T[@]}"
  line "setenv(Prescott) in main, library already loaded" "$B" "${T[@]}" --setenv-coretype Prescott
  line "setenv(Prescott) + gotoblas_dynamic_quit()+init()" "$B" "${T[@]}" --setenv-coretype Prescott --reinit
  line "exec'd with Prescott, setenv(SkylakeX) + quit()+init()" env OPENBLAS_CORETYPE=Prescott "$B" "${T[@]}" --setenv-coretype SkylakeX --reinit
  line "setenv(Prescott) before dlopen(libopenblas)" "$BENCH_BUILD/gemm_peak_dlopen" "${T[@]}" \
    --lib "$LIBDIR/openblas-openmp/libopenblas.so.0" --setenv-coretype Prescott
fi

# ---- machine peak --------------------------------------------------------------------------
echo
best_l=""; best_v=0
for l in "${labels[@]}"; do
  [[ $l == *Prescott* ]] && continue
  p=$(sed -n 's/^peak_gflops=//p' "$OUT/$l.txt")
  if awk -v a="$p" -v b="$best_v" 'BEGIN{exit !(a+0 > b+0)}'; then best_v=$p; best_l=$l; fi
done
echo "machine_peak_gflops=$best_v ($best_l)"
