#!/usr/bin/env bash
# Issue 16's measurements on a CPU with bf16 units (AMX-BF16 or AVX512_BF16), in one command,
# in the order the closing notes ask for them; each step's output goes to $OUT/<step>.txt and
# a summary to the terminal. On a CPU without bf16 units it says so and stops (the speed
# targets are about bf16 units; FORCE=1 runs it anyway, e.g. to try the script).
#
#   bash bench/bf16_units.sh                 # ~30-60 min on 2 threads
#   STEPS_ONLY="cpu engine gemm attention" bash bench/bf16_units.sh   # a subset
#
# Steps:
#   cpu        the CPU's name and bf16 flags (name it beside every figure)
#   engine     ctest -R bf16_engine: fails unless the bf16 engine here is onednn
#   impls      which oneDNN kernel each bf16 product gets (ONEDNN_VERBOSE) at the bench
#              model's shapes, per op: `ref:` is the reference kernel, a slow path worth fixing.
#              `gemm:jit` is expected for attention's products: in oneDNN 2.6.3 the brgemm
#              matmul takes dense layouts only (its tags are matched with the dense strides,
#              src/common/type_helpers.hpp memory_desc_matches_tag), so a strided view (q, k, v
#              rows of ld H*hd or G*hd) goes to gemm_bf16_matmul, whose gemm driver has its own
#              AMX path; compare its rate with the dense products' before copying operands
#   gemm       build/bench_gemm_bf16 2: fp32 vs bf16 (oneDNN) per GEMM shape of the step,
#              with MKL's cblas_gemm_bf16bf16f32 too when TITAN_BENCH_MKL names libmkl_rt;
#              then `bench_gemm_bf16 50 calls`: the time of one call at 1x1x1 (the engine's
#              overhead per call) and at attention's task shapes (~1.3e5 calls a step at 0.6B)
#   attention  titan kernels bench attention at the 0.6B heads (1 x 2048): the tiled fp32
#              default against attention/bf16 (oneDNN's matmul per product)
#   profile    one profiled bf16 step at 0.6B (1 x 2048): the time per op, then where the time
#              outside the ops goes (bench/trace_gaps.py: the bf16 activation store, zeroing,
#              conversions); PROFILE_ARGS adds options (e.g. a smaller --seq-len to try it)
#   train      bench/bench_train.sh at the bench model and at 0.6B (1 x 2048): titan fp32 and
#              bf16 against PyTorch eager / compile in fp32 and bf16 autocast
# Environment: BUILD=build, OUT=$BUILD/bench-bf16-<date>, THREADS=2, TITAN_BENCH_MKL (optional).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
BUILD=${BUILD:-build}
OUT=${OUT:-$BUILD/bench-bf16-$(date -u +%Y%m%d-%H%M)}
THREADS=${THREADS:-2}
STEPS_ONLY=${STEPS_ONLY:-cpu engine impls gemm attention profile train}
mkdir -p "$OUT" || exit 1

want() { [[ " $STEPS_ONLY " == *" $1 "* ]]; }
flags=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(amx_bf16|avx512_bf16)$' |
  tr '\n' ' ')
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
echo "CPU: $cpu; bf16 flags: ${flags:-none}; threads $THREADS" | tee "$OUT/cpu.txt"
if [ -z "$flags" ] && [ "${FORCE:-0}" != 1 ]; then
  echo "no amx_bf16 / avx512_bf16 here: these measurements need bf16 units (FORCE=1 to run anyway)"
  exit 2
fi

cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release > "$OUT/build.txt" 2>&1 &&
  cmake --build "$BUILD" -j"$(nproc)" --target titan bench_gemm_bf16 >> "$OUT/build.txt" 2>&1 ||
  { echo "build failed: $OUT/build.txt"; exit 1; }
rc=0
if want engine; then
  (cd "$BUILD" && ctest -R '^bf16_engine$' --output-on-failure) > "$OUT/engine.txt" 2>&1 || rc=1
  grep -E 'tests passed|Skipped|Failed' "$OUT/engine.txt" | head -3
fi
if want impls; then
  for op in matmul attention lmhead_ce; do
    echo "== $op/bf16"
    ONEDNN_VERBOSE=1 OMP_NUM_THREADS=$THREADS "$BUILD/titan" kernels bench "$op/bf16" \
      --min-time 0.05 2>&1 | grep '^onednn_verbose,exec,cpu,matmul' |
      awk -F, '{n[$5]++} END {for (k in n) print "  " n[k] " calls: " k}'
  done > "$OUT/impls.txt" 2>&1
  cat "$OUT/impls.txt"
  grep -E 'calls: ref:' "$OUT/impls.txt" > /dev/null &&
    echo "WARNING: some bf16 products run oneDNN's reference kernel (see $OUT/impls.txt)"
fi
if want gemm; then
  OMP_NUM_THREADS=$THREADS "$BUILD/bench_gemm_bf16" 2 > "$OUT/gemm.txt" 2>&1 || rc=1
  tail -n 20 "$OUT/gemm.txt"
  OMP_NUM_THREADS=$THREADS "$BUILD/bench_gemm_bf16" 50 calls > "$OUT/gemm-calls.txt" 2>&1 || rc=1
  grep -E 'us per call|^[^ ]' "$OUT/gemm-calls.txt"
fi
if want attention; then
  for impl in default bf16; do
    TITAN_MIXED_PRECISION= OMP_NUM_THREADS=$THREADS "$BUILD/titan" kernels bench \
      "attention/$impl" --flavor 0.6B --batch 1 --seq 2048 --min-time 1 >> "$OUT/attention.txt" 2>&1 || rc=1
  done
  grep -E '^attention' "$OUT/attention.txt"
fi
if want profile; then
  d="$OUT/profile-run"
  # shellcheck disable=SC2086 # PROFILE_ARGS: words on purpose
  OMP_NUM_THREADS=$THREADS "$BUILD/titan" train --flavor 0.6B --random-tokens --batch 1 \
    --seq-len 2048 --steps 3 --training.mixed_precision_param=bfloat16 \
    --profiling.enable_profiling=true --profiling.profile_freq=3 --profiling.profiler_active=1 \
    --profiling.profiler_warmup=1 --dump-folder "$d" ${PROFILE_ARGS:-} > "$OUT/profile.txt" 2>&1 &&
    python3 bench/trace_gaps.py "$d/profile_traces/iteration_3/rank0_trace.json" \
      >> "$OUT/profile.txt" 2>&1 || rc=1
  sed -n '/op (all layers)/,$p' "$OUT/profile.txt"
fi
if want train; then
  for shape in bench 0.6B; do
    SHAPE=$shape THREADS=$THREADS SKIP_BUILD=1 BUILD=$BUILD \
      RUNS="titan titan-bf16 eager eager-bf16 compile compile-bf16" \
      bash bench/bench_train.sh > "$OUT/train-$shape.txt" 2>&1 || rc=1
    tail -n 15 "$OUT/train-$shape.txt"
  done
fi
echo "outputs in $OUT/ (record them in bench/RESULTS.md with the CPU named above)"
exit $rc
