#!/usr/bin/env bash
# One command: train the same Qwen3 model on the same kind of random tokens in titan and in
# PyTorch, one after the other, in fp32 and in bf16 mixed precision (titan:
# --training.mixed_precision_param=bfloat16; PyTorch: torch.autocast("cpu", bfloat16)), and
# print tokens/s, titan's ratios to each, MFU against this machine's measured fp32 GEMM peak,
# and peak RSS.
#
# Model (SHAPE=bench): dim 512, 8 layers, 8 heads, 4 kv heads, head_dim 64, ffn 1536, vocab
# 151936 (tied); batch 4 x seq 512; AdamW; 2 threads. SHAPE=0.6B (or any NAME with
# ../shared/data/qwen3_configs/Qwen3-NAME.json): that model's dims, batch 1 x seq 2048.
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
#   BF16_PEAK_GFLOPS=<x>  the bf16 rows' MFU against this peak (default: the fp32 peak)
#   SHAPE=bench           bench | 0.6B | another dense Qwen3-NAME in ../shared/data/qwen3_configs
#   BATCH= SEQ=           override the shape's batch x seq (bench 4 x 512, others 1 x 2048)
#   RUNS="titan titan-bf16 eager eager-bf16 compile compile-bf16 torchtitan torchtitan-compile"
#                         which runs, in order (-bf16: bf16 mixed precision); also:
#                         titan-bf16-states (bf16 and the AdamW moments in bf16),
#                         eager-untuned (no tcmalloc, default OMP wait policy), compile-untuned,
#                         torchtitan-compile, torchtitan-flex (torchtitan's default attention:
#                         fails on CPU, FlexAttention has no CPU backward). A name may repeat
#                         ("titan-bf16 compile-bf16 titan-bf16 compile-bf16 ..."): alternated
#                         runs, then each one's median and titan's medians over the others'
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
RUNS=${RUNS:-titan titan-bf16 eager eager-bf16 compile compile-bf16 torchtitan torchtitan-compile}
SHAPE=${SHAPE:-bench}
QUIET_WAIT=${QUIET_WAIT:-0}
PY=${PY:-.venv/bin/python}
LOGDIR=${LOGDIR:-$(mktemp -d /tmp/titan-bench.XXXXXX)}
mkdir -p "$LOGDIR"
RESULTS="$LOGDIR/results.jsonl"
: >"$RESULTS"

# Model / run configuration (one place; flops per token is derived from it below).
if [ "$SHAPE" = bench ]; then
  DIM=512 LAYERS=8 HEADS=8 KV_HEADS=4 HEAD_DIM=64 FFN=1536 VOCAB=151936 TIED=1
  BATCH=${BATCH:-4} SEQ=${SEQ:-512}
else
  QCFG=../shared/data/qwen3_configs/Qwen3-$SHAPE.json
  if ! dims=$("$PY" - "$QCFG" <<'PYDIMS'
import json, sys
c = json.load(open(sys.argv[1]))
if c.get("num_experts"):
    sys.exit(f"{sys.argv[1]}: a MoE config; this bench trains dense models")
hd = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
print(f'DIM={c["hidden_size"]} LAYERS={c["num_hidden_layers"]} HEADS={c["num_attention_heads"]} '
      f'KV_HEADS={c["num_key_value_heads"]} HEAD_DIM={hd} FFN={c["intermediate_size"]} '
      f'VOCAB={c["vocab_size"]} TIED={int(bool(c.get("tie_word_embeddings")))}')
PYDIMS
  ); then
    echo "SHAPE=$SHAPE: cannot read a dense model's dims from $QCFG" >&2; exit 1
  fi
  eval "$dims"
  BATCH=${BATCH:-1} SEQ=${SEQ:-2048}
fi

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
model_args=(--dim "$DIM" --layers "$LAYERS" --heads "$HEADS" --kv-heads "$KV_HEADS" --head-dim "$HEAD_DIM"
  --ffn "$FFN" --vocab "$VOCAB" --tied "$TIED")
have_torchtitan() { "$PY" -c "import torchtitan.models.qwen3" >/dev/null 2>&1; }

for run in $RUNS; do
  case $run in
  titan | titan-bf16 | titan-bf16-states)
    [ "$run" = titan ] && prec=float32 || prec=bfloat16
    # titan-bf16-states: and the AdamW moments in bf16 (torchtitan 0.3's fused_opt_states_bf16)
    states=()
    [ "$run" = titan-bf16-states ] && states=(--optimizer.implementation fused_opt_states_bf16)
    say "running $run"
    check_quiet
    if [ -x "$BUILD/titan" ] && "$BUILD/titan" train --flavor debugmodel --set dim=$DIM --set n_layers=$LAYERS \
      --set n_heads=$HEADS --set n_kv_heads=$KV_HEADS --set head_dim=$HEAD_DIM --set ffn_dim=$FFN \
      --set vocab_size=$VOCAB --set tie_embeddings=$TIED --random-tokens --batch $BATCH --seq-len $SEQ \
      --training.mixed_precision_param=$prec "${states[@]}" --dump-folder "$LOGDIR/$run" \
      --steps $((STEPS + WARMUP)) --log-freq 1 --threads "$THREADS" >"$LOGDIR/$run.out" 2>"$LOGDIR/$run.err"; then
      line=$(grep -h '^summary:' "$LOGDIR/$run.out" "$LOGDIR/$run.err" | tail -1)
      tps=$(echo "$line" | grep -o 'tokens_per_s=[0-9.eE+-]*' | cut -d= -f2)
      rss=$(echo "$line" | grep -o 'peak_rss_gib=[0-9.eE+-]*' | cut -d= -f2)
      # best single step after the warm-up steps, from titan's per-step "tps: <x>" log lines
      best=$(grep -h -o 'tps: *[0-9.]*' "$LOGDIR/$run.out" "$LOGDIR/$run.err" | awk -v w="$WARMUP" \
        '{ n++; if (n > w && $2 + 0 > b) b = $2 + 0 } END { if (b) print b }')
      # what titan's header says it ran (the precision and why), for the table's footer
      said=$(grep -h '^ *precision:' "$LOGDIR/$run.out" "$LOGDIR/$run.err" | head -1 | sed 's/^ *//' |
        tr -d '"\\' | tr -c '[:print:]' ' ' | cut -c1-200)
      if [ -n "$tps" ]; then
        echo "{\"name\": \"$run\", \"prec\": \"$prec\", \"tokens_per_s\": $tps, \"peak_rss_gib\": ${rss:-null}, \"best_tokens_per_s\": ${best:-null}, \"titan_says\": \"$said\"}" >>"$RESULTS"
      else
        say "titan printed no 'summary: ... tokens_per_s=' line (see $LOGDIR/$run.out)"
        echo "{\"name\": \"$run\", \"failed\": true}" >>"$RESULTS"
      fi
    else
      say "$run failed or not built (see $LOGDIR/$run.err):"; tail -3 "$LOGDIR/$run.err" 2>/dev/null >&2
      echo "{\"name\": \"$run\", \"failed\": true}" >>"$RESULTS"
    fi
    ;;
  eager) py_run pytorch-eager torch_env bench/pytorch_train.py "${model_args[@]}" ;;
  compile) py_run pytorch-compile torch_env bench/pytorch_train.py "${model_args[@]}" --compile ;;
  eager-bf16) py_run pytorch-eager-bf16 torch_env bench/pytorch_train.py "${model_args[@]}" --bf16 ;;
  compile-bf16) py_run pytorch-compile-bf16 torch_env bench/pytorch_train.py "${model_args[@]}" --compile --bf16 ;;
  eager-untuned) py_run pytorch-eager-untuned untuned_env bench/pytorch_train.py "${model_args[@]}" ;;
  compile-untuned) py_run pytorch-compile-untuned untuned_env bench/pytorch_train.py "${model_args[@]}" --compile ;;
  torchtitan | torchtitan-compile | torchtitan-flex)
    if [ "$SHAPE" != bench ]; then
      say "bench/torchtitan_train.py has the bench model's dims only: skipping $run at SHAPE=$SHAPE"
    elif have_torchtitan; then
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
"$PY" - "$RESULTS" "$PEAK_GFLOPS" "${PEAK_FROM:-}" "${BF16_PEAK_GFLOPS:-0}" $DIM $LAYERS $HEADS $KV_HEADS \
  $HEAD_DIM $FFN $VOCAB $BATCH $SEQ $THREADS $TIED "$SHAPE" <<'EOF'
import json, sys
res_path, peak, peak_from, peak16 = sys.argv[1], float(sys.argv[2]), sys.argv[3], float(sys.argv[4])
D, L, H, KV, HD, F, V, B, S, TH, TIED = map(int, sys.argv[5:16])
shape = sys.argv[16]
# Parameters of the matmuls, the lm_head matrix counted once (tied or not: the embedding is a
# lookup, no matmul).
p_layer = D * H * HD + 2 * D * KV * HD + H * HD * D + 3 * D * F
p_matmul = V * D + L * p_layer
attn = 12 * L * H * HD * S
fpt = 6 * p_matmul + attn
rows = [json.loads(l) for l in open(res_path) if l.strip()]
def ok(n):
    return next((r for r in rows if r.get("name") == n and not r.get("failed")), None)
def is_bf16(r):
    return r.get("prec") in ("bfloat16", "bf16-autocast")
titan, titan16 = ok("titan"), ok("titan-bf16")
print()
print(f"model ({shape}): dim {D}, {L} layers, {H} heads, {KV} kv heads, head_dim {HD}, ffn {F}, "
      f"vocab {V} {'tied' if TIED else 'untied'}; batch {B} x seq {S}; {TH} threads")
print(f"P_matmul = {p_matmul:,} (lm_head once, no embedding); flops/token = 6*P_matmul + 12*L*H*hd*seq "
      f"= {6 * p_matmul:,} + {attn:,} = {fpt:,}")
print(f"fp32 GEMM peak = {peak:.1f} GFLOP/s ({peak_from}); MFU = flops/token * tokens/s / peak"
      + (f"; bf16 rows against the bf16 peak {peak16:.1f} GFLOP/s" if peak16 else
         "; bf16 rows against the fp32 peak too (no BF16_PEAK_GFLOPS)"))
print()
print(f"{'run':<26} {'tokens/s':>9} {'step s':>8} {'titan/x':>8} {'t-bf16/x':>8} {'MFU %':>6} "
      f"{'peak RSS GiB':>13} {'best-step tok/s':>16} {'cpu util':>9}")
for r in rows:
    name = r.get("name", "?")
    if r.get("failed"):
        print(f"{name:<26} {'failed':>9}")
        continue
    tps = float(r["tokens_per_s"])
    step = B * S / tps if tps else float("nan")
    ratio = f"{titan['tokens_per_s'] / tps:.2f}" if titan and tps else "-"
    ratio16 = f"{titan16['tokens_per_s'] / tps:.2f}" if titan16 and tps else "-"
    pk = peak16 if is_bf16(r) and peak16 else peak
    mfu = f"{100 * fpt * tps / (pk * 1e9):.1f}" if pk else "-"
    rss = r.get("peak_rss_gib")
    rss = f"{rss:.2f}" if isinstance(rss, (int, float)) else "-"
    util = r.get("cpu_util")
    util = f"{util:.2f}" if isinstance(util, (int, float)) else "-"
    best = r.get("best_tokens_per_s") or (B * S / r["best_step_s"] if r.get("best_step_s") else None)
    best = f"{best:.1f}" if best else "-"
    print(f"{name:<26} {tps:>9.1f} {step:>8.2f} {ratio:>8} {ratio16:>8} {mfu:>6} {rss:>13} {best:>16} "
          f"{util:>9}")
# A run named more than once (RUNS="titan-bf16 compile-bf16 titan-bf16 compile-bf16 ..."): the
# median of each, and titan's medians over the others'. Alternating the runs lets a slow moment
# of a shared machine hit all of them; the table's ratios above use titan's first row only.
from statistics import median
names, reps = [], {}
for r in rows:
    if not r.get("failed"):
        n = r.get("name", "?")
        if n not in reps:
            names.append(n)
            reps[n] = []
        reps[n].append(float(r["tokens_per_s"]))
if any(len(v) > 1 for v in reps.values()):
    med = {n: median(v) for n, v in reps.items()}
    print()
    print(f"{'median over repeats':<26} {'tokens/s':>9} {'runs':>5} {'titan/x':>8} {'t-bf16/x':>8}")
    for n in names:
        t = f"{med['titan'] / med[n]:.2f}" if "titan" in med and med[n] else "-"
        t16 = f"{med['titan-bf16'] / med[n]:.2f}" if "titan-bf16" in med and med[n] else "-"
        print(f"{n:<26} {med[n]:>9.1f} {len(reps[n]):>5} {t:>8} {t16:>8}")
print()
print("titan/x, t-bf16/x: titan fp32's and titan bf16's tokens/s over the row's")
for r in rows:
    if r.get("titan_says"):
        print(f"{r['name']} said: {r['titan_says'].strip()}")
print("tokens/s: mean over the timed steps (titan: its summary line); best-step: the fastest timed step;")
print("cpu util: CPU s per wall s of the timed steps (well under the thread count = CPU contention)")
EOF
echo
echo "logs: $LOGDIR"
