#!/usr/bin/env bash
# One command: train the same Qwen3 model on the same kind of random tokens in titan and in
# PyTorch, one after the other, and print tokens/s, titan's ratio to each, MFU against this
# machine's measured fp32 GEMM peak, and peak RSS.
#
# Model: dim 512, 8 layers, 8 heads, 4 kv heads, head_dim 64, ffn 1536, vocab 151936 (tied);
# batch 4 x seq 512; AdamW; 2 threads.
#
#   bash bench/bench_train.sh            (or: make bench)
#
# Environment knobs:
#   STEPS=5 WARMUP=2      timed / untimed steps of each PyTorch run (titan gets STEPS+WARMUP
#                         steps; its summary line decides what it times)
#   THREADS=2
#   BUILD=build           titan's CMake build directory
#   BENCH_BUILD=$BUILD/bench   where gemm_peak binaries go
#   PEAK_GFLOPS=<x>       skip the GEMM measurement and use this peak
#   RUNS="titan eager compile torchtitan torchtitan-compile"   which runs, in order; also:
#                         eager-untuned (no tcmalloc, default OMP wait policy), compile-untuned,
#                         torchtitan-compile, torchtitan-flex (torchtitan's default attention:
#                         fails on CPU, FlexAttention has no CPU backward)
#   SKIP_BUILD=1          use the existing $BUILD/titan
#   QUIET_WAIT=0          seconds to wait, before each run, for the other CPUs' load to drop
#                         (the numbers are only meaningful on an otherwise idle machine)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

STEPS=${STEPS:-5}
WARMUP=${WARMUP:-2}
THREADS=${THREADS:-2}
BUILD=${BUILD:-build}
BENCH_BUILD=${BENCH_BUILD:-$BUILD/bench}
RUNS=${RUNS:-titan eager compile torchtitan torchtitan-compile}
QUIET_WAIT=${QUIET_WAIT:-0}
PY=${PY:-.venv/bin/python}
LOGDIR=${LOGDIR:-$(mktemp -d /tmp/titan-bench.XXXXXX)}
mkdir -p "$LOGDIR"
RESULTS="$LOGDIR/results.jsonl"
: >"$RESULTS"

# Model / run configuration (one place; flops per token is derived from it below).
DIM=512 LAYERS=8 HEADS=8 KV_HEADS=4 HEAD_DIM=64 FFN=1536 VOCAB=151936 BATCH=4 SEQ=512

say() { echo "== $*" >&2; }

idle_pct() {  # idle % of all CPUs over $1 seconds
  local a b
  read -r _ u n s i w q sq st _ </proc/stat; a=($((u + n + s + i + w + q + sq + st)) $((i + w)))
  sleep "${1:-1}"
  read -r _ u n s i w q sq st _ </proc/stat; b=($((u + n + s + i + w + q + sq + st)) $((i + w)))
  echo $((100 * (b[1] - a[1]) / (b[0] - a[0] + 1)))
}
check_quiet() {  # warn (or wait up to QUIET_WAIT s) when other processes are using the CPUs
  local waited=0 idle
  idle=$(idle_pct 1)
  while [ "$idle" -lt 90 ] && [ "$waited" -lt "$QUIET_WAIT" ]; do
    sleep 4; waited=$((waited + 5)); idle=$(idle_pct 1)
  done
  if [ "$idle" -lt 90 ]; then
    say "WARNING: CPUs only ${idle}% idle before this run: other processes compete, numbers will be low"
  fi
}

# ---- 1. build ----------------------------------------------------------------------------
if [ -z "${SKIP_BUILD:-}" ]; then
  say "building titan ($BUILD)"
  if ! { cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release && cmake --build "$BUILD" -j "$THREADS"; } \
    >"$LOGDIR/cmake.log" 2>&1; then
    say "titan build failed (see $LOGDIR/cmake.log)"
  fi
fi

# ---- 2. fp32 GEMM peak -------------------------------------------------------------------
if [ -z "${PEAK_GFLOPS:-}" ]; then
  say "measuring fp32 SGEMM peak ($THREADS threads, every BLAS on the machine)"
  check_quiet
  SHAPES=square2048,fwd_w1_w3,dx_w2,dw_w1_w3 MIN_TIME=0.3 SKIP_LOADTEST=1 CORETYPES="SkylakeX Haswell" \
    THREADS=$THREADS BENCH_BUILD=$BENCH_BUILD PY=$PY bash bench/gemm_peak.sh >"$LOGDIR/gemm_peak.txt" 2>&1
  PEAK_LINE=$(grep '^machine_peak_gflops=' "$LOGDIR/gemm_peak.txt" | tail -1)
  PEAK_GFLOPS=$(echo "$PEAK_LINE" | sed 's/^machine_peak_gflops=\([0-9.]*\).*/\1/')
  PEAK_FROM=$(echo "$PEAK_LINE" | sed -n 's/.*(\(.*\))/\1/p')
  sed -n '/^shape/,/^peak/p' "$LOGDIR/gemm_peak.txt" >&2
  if [ -z "$PEAK_GFLOPS" ] || [ "$PEAK_GFLOPS" = 0 ]; then
    say "GEMM peak measurement failed (see $LOGDIR/gemm_peak.txt)"; PEAK_GFLOPS=0
  fi
else
  PEAK_FROM="given"
fi

# ---- 3./4. the training runs ---------------------------------------------------------------
TCMALLOC=""
for f in /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 /usr/lib/x86_64-linux-gnu/libtcmalloc.so.4 \
  /usr/lib/aarch64-linux-gnu/libtcmalloc_minimal.so.4; do
  [ -e "$f" ] && { TCMALLOC=$f; break; }
done
[ -z "$TCMALLOC" ] && say "tcmalloc not found (apt-get install libtcmalloc-minimal4): PyTorch runs without it"

torch_env() {  # PyTorch's best CPU settings
  env OMP_NUM_THREADS="$THREADS" OMP_WAIT_POLICY=PASSIVE ${TCMALLOC:+LD_PRELOAD=$TCMALLOC} "$@"
}
untuned_env() {
  env -u OMP_WAIT_POLICY -u LD_PRELOAD OMP_NUM_THREADS="$THREADS" "$@"
}
py_run() {  # label, env-wrapper, script, args...
  local label=$1 wrap=$2 script=$3; shift 3
  say "running $label"
  check_quiet
  if $wrap "$PY" "$script" --steps "$STEPS" --warmup-steps "$WARMUP" --threads "$THREADS" \
    --batch "$BATCH" --seq-len "$SEQ" --name "$label" "$@" >"$LOGDIR/$label.out" 2>"$LOGDIR/$label.err"; then
    tail -1 "$LOGDIR/$label.out" >>"$RESULTS"
  else
    say "$label failed (see $LOGDIR/$label.err):"; tail -3 "$LOGDIR/$label.err" >&2
    echo "{\"name\": \"$label\", \"failed\": true}" >>"$RESULTS"
  fi
}
have_torchtitan() { "$PY" -c "import torchtitan.models.qwen3" >/dev/null 2>&1; }

for run in $RUNS; do
  case $run in
  titan)
    say "running titan"
    check_quiet
    if [ -x "$BUILD/titan" ] && "$BUILD/titan" train --flavor debugmodel --set dim=$DIM --set n_layers=$LAYERS \
      --set n_heads=$HEADS --set n_kv_heads=$KV_HEADS --set head_dim=$HEAD_DIM --set ffn_dim=$FFN \
      --set vocab_size=$VOCAB --set tie_embeddings=1 --random-tokens --batch $BATCH --seq-len $SEQ \
      --steps $((STEPS + WARMUP)) --log-freq 1 --threads "$THREADS" >"$LOGDIR/titan.out" 2>"$LOGDIR/titan.err"; then
      line=$(grep -h '^summary:' "$LOGDIR/titan.out" "$LOGDIR/titan.err" | tail -1)
      tps=$(echo "$line" | grep -o 'tokens_per_s=[0-9.eE+-]*' | cut -d= -f2)
      rss=$(echo "$line" | grep -o 'peak_rss_gib=[0-9.eE+-]*' | cut -d= -f2)
      # best single step after the warm-up steps, from titan's per-step "tps: <x>" log lines
      best=$(grep -h -o 'tps: *[0-9.]*' "$LOGDIR/titan.out" "$LOGDIR/titan.err" | awk -v w="$WARMUP" \
        '{ n++; if (n > w && $2 + 0 > b) b = $2 + 0 } END { if (b) print b }')
      if [ -n "$tps" ]; then
        echo "{\"name\": \"titan\", \"tokens_per_s\": $tps, \"peak_rss_gib\": ${rss:-null}, \"best_tokens_per_s\": ${best:-null}}" >>"$RESULTS"
      else
        say "titan printed no 'summary: ... tokens_per_s=' line (see $LOGDIR/titan.out)"
        echo '{"name": "titan", "failed": true}' >>"$RESULTS"
      fi
    else
      say "titan failed or not built (see $LOGDIR/titan.err):"; tail -3 "$LOGDIR/titan.err" 2>/dev/null >&2
      echo '{"name": "titan", "failed": true}' >>"$RESULTS"
    fi
    ;;
  eager) py_run pytorch-eager torch_env bench/pytorch_train.py ;;
  compile) py_run pytorch-compile torch_env bench/pytorch_train.py --compile ;;
  eager-untuned) py_run pytorch-eager-untuned untuned_env bench/pytorch_train.py ;;
  compile-untuned) py_run pytorch-compile-untuned untuned_env bench/pytorch_train.py --compile ;;
  torchtitan | torchtitan-compile | torchtitan-flex)
    if have_torchtitan; then
      case $run in
      torchtitan) py_run torchtitan-eager torch_env bench/torchtitan_train.py --attn sdpa ;;
      torchtitan-compile) py_run torchtitan-compile torch_env bench/torchtitan_train.py --attn sdpa --compile ;;
      torchtitan-flex) py_run torchtitan-flex torch_env bench/torchtitan_train.py --attn flex ;;
      esac
    else
      say "torchtitan not installed: skipping $run (see bench/README.md)"
    fi
    ;;
  *) say "unknown run '$run'" ;;
  esac
done

# ---- 5. table ------------------------------------------------------------------------------
"$PY" - "$RESULTS" "$PEAK_GFLOPS" "${PEAK_FROM:-}" $DIM $LAYERS $HEADS $KV_HEADS $HEAD_DIM $FFN $VOCAB $BATCH $SEQ $THREADS <<'EOF'
import json, sys
res_path, peak, peak_from = sys.argv[1], float(sys.argv[2]), sys.argv[3]
D, L, H, KV, HD, F, V, B, S, TH = map(int, sys.argv[4:14])
# Parameters of the matmuls, the tied embedding/lm_head matrix counted once (as lm_head).
p_layer = D * H * HD + 2 * D * KV * HD + H * HD * D + 3 * D * F
p_matmul = V * D + L * p_layer
attn = 12 * L * H * HD * S
fpt = 6 * p_matmul + attn
rows = [json.loads(l) for l in open(res_path) if l.strip()]
titan = next((r for r in rows if r.get("name") == "titan" and not r.get("failed")), None)
print()
print(f"model: dim {D}, {L} layers, {H} heads, {KV} kv heads, head_dim {HD}, ffn {F}, vocab {V} tied; "
      f"batch {B} x seq {S}; {TH} threads")
print(f"P_matmul = {p_matmul:,} (tied matrix once); flops/token = 6*P_matmul + 12*L*H*hd*seq "
      f"= {6 * p_matmul:,} + {attn:,} = {fpt:,}")
print(f"fp32 GEMM peak = {peak:.1f} GFLOP/s ({peak_from}); MFU = flops/token * tokens/s / peak")
print()
print(f"{'run':<26} {'tokens/s':>9} {'step s':>8} {'titan/x':>8} {'MFU %':>6} {'peak RSS GiB':>13} "
      f"{'best-step tok/s':>16} {'cpu util':>9}")
for r in rows:
    name = r.get("name", "?")
    if r.get("failed"):
        print(f"{name:<26} {'failed':>9}")
        continue
    tps = float(r["tokens_per_s"])
    step = B * S / tps if tps else float("nan")
    ratio = f"{titan['tokens_per_s'] / tps:.2f}" if titan and tps else "-"
    mfu = f"{100 * fpt * tps / (peak * 1e9):.1f}" if peak else "-"
    rss = r.get("peak_rss_gib")
    rss = f"{rss:.2f}" if isinstance(rss, (int, float)) else "-"
    util = r.get("cpu_util")
    util = f"{util:.2f}" if isinstance(util, (int, float)) else "-"
    best = r.get("best_tokens_per_s") or (B * S / r["best_step_s"] if r.get("best_step_s") else None)
    best = f"{best:.1f}" if best else "-"
    print(f"{name:<26} {tps:>9.1f} {step:>8.2f} {ratio:>8} {mfu:>6} {rss:>13} {best:>16} {util:>9}")
print()
print("tokens/s: mean over the timed steps (titan: its summary line); best-step: the fastest timed step;")
print("cpu util: CPU s per wall s of the timed steps (well under the thread count = CPU contention)")
EOF
echo
echo "logs: $LOGDIR"
