#!/usr/bin/env bash
# The oneDNN bf16 engine (src/ops/cpu/bf16.c), wherever oneDNN can run a bf16 matmul:
#  - on a CPU with bf16 units (amx_bf16 / avx512_bf16 in /proc/cpuinfo) the engine IS onednn:
#    a self-check failure there falls back to the emulated engine with only a warning, which
#    every other bf16 test would pass through unnoticed, so here it fails;
#  - every bf16 implementation passes its conformance test on onednn (titan kernels test bf16);
#  - dense and MoE bf16 training on onednn follows the emulated engine step by step (the two
#    compute the same bf16 products and differ only in fp32 summation order): losses within
#    3e-4 relative, gradient norms within 5e-3 (measured with oneDNN's reference matmul:
#    2.6e-5 and 2.1e-3 dense, 7.2e-5 and 2.6e-3 MoE, since attention rounds P, whose roundings
#    the engines' summation orders flip differently; a wrong stride, transpose or accumulation
#    is off by O(1)), and the onednn run is not the fp32 run;
#  - train_bf16.sh's properties (determinism, bitwise resume, stored activations == recomputed,
#    fp32-overridden blocks) hold on onednn too.
# Where oneDNN has no bf16 matmul (Debian's 2.6.3 on a CPU without AVX-512: every bf16 matmul
# is unimplemented, even the reference one) the test is skipped (exit 77). scripts/onednn_ref.sh
# builds a oneDNN whose reference matmul takes bf16 on any x86-64 CPU, to run it there.
# usage: bf16_engine.sh TITAN SHARED
set -euo pipefail
titan=$1; shared=$2; here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
native=0
grep -qwE 'amx_bf16|avx512_bf16' /proc/cpuinfo && native=1
krc=0
TITAN_BF16_ENGINE=onednn "$titan" kernels test bf16 > "$out/k.log" 2>&1 || krc=$?
engine=$(sed -n 's/^bf16 engine: \([a-z]*\).*/\1/p' "$out/k.log")
if [ "$engine" != onednn ]; then
  if [ $native = 1 ]; then
    echo "FAIL: this CPU has bf16 units but the bf16 engine is '$engine' (a oneDNN self-check"
    echo "failure names the case below; a titan built without oneDNN says nothing)"
    grep -i "bf16 engine" "$out/k.log"; exit 1
  fi
  echo "skip: oneDNN here has no bf16 matmul (engine '$engine' with TITAN_BF16_ENGINE=onednn);"
  echo "      scripts/onednn_ref.sh builds one whose reference matmul runs on any x86-64 CPU"
  exit 77
fi
[ $krc -eq 0 ] || { echo "FAIL: kernels test on the onednn engine"; grep -E "FAIL|error" "$out/k.log"; exit 1; }
echo "ok every bf16 implementation passes conformance on onednn ($(grep -c '^ok' "$out/k.log") checks)"

# A configured bf16 peak: the peak probe (2 GFLOP GEMMs, several bursts) takes minutes on
# oneDNN's reference matmul, and MFU is not what is checked here.
cat > "$out/titan" <<EOF
#!/usr/bin/env bash
if [ "\$1" = train ]; then shift; exec "$titan" train --peak-tflops 1 "\$@"; fi
exec "$titan" "\$@"
EOF
chmod +x "$out/titan"
model=(--set n_layers=2 --set dim=64 --set n_heads=4 --set n_kv_heads=2 --set head_dim=16
       --set ffn_dim=128 --steps 12 --batch 2 --seq-len 32 --lr 3e-3 --warmup 3 --seed 7
       --random-tokens --set vocab_size=300 --log-freq 100)
moe=(--set num_experts=8 --set top_k=2 --set moe_inter_dim=32)
field() { grep -o "\"$2\": [^,}]*" "$1" | sed 's/.*: //'; }
run() { # name engine precision args...
  local name=$1 eng=$2 prec=$3; shift 3
  TITAN_BF16_ENGINE=$eng "$out/titan" train "${model[@]}" "$@" --metrics "$out/$name.jsonl" \
    --training.mixed_precision_param=$prec --dump-folder "$out/$name" > "$out/$name.log" 2>&1 ||
    { cat "$out/$name.log"; exit 1; }
}
near() { # what, field, a.jsonl, b.jsonl, bound: every step within bound relative
  paste <(field "$3" "$2") <(field "$4" "$2") | awk -v w="$1" -v f="$2" -v b="$5" '
    { r = ($2 - $1) / $1; if (r < 0) r = -r; if (r > m) m = r }
    END { if (NR != 12 || m > b) { printf "FAIL %s: %s off by %.3e (bound %g, %d steps)\n", w, f, m, b, NR; exit 1 }
          printf "ok %s: %s within %.2e over %d steps\n", w, f, m, NR }'
}
for kind in dense moe; do
  extra=(); [ $kind = moe ] && extra=("${moe[@]}")
  run ${kind}_dnnl onednn bfloat16 "${extra[@]}"
  grep -q "engine onednn" "$out/${kind}_dnnl.log" || { echo "FAIL: $kind not on onednn"; exit 1; }
  run ${kind}_emu emulated bfloat16 "${extra[@]}"
  grep -q "engine emulated" "$out/${kind}_emu.log" || { echo "FAIL: $kind not emulated"; exit 1; }
  run ${kind}_f32 onednn float32 "${extra[@]}"
  near "$kind onednn vs emulated" loss "$out/${kind}_emu.jsonl" "$out/${kind}_dnnl.jsonl" 3e-4
  near "$kind onednn vs emulated" grad_norm "$out/${kind}_emu.jsonl" "$out/${kind}_dnnl.jsonl" 5e-3
  ! diff -q <(field "$out/${kind}_f32.jsonl" loss) <(field "$out/${kind}_dnnl.jsonl" loss) > /dev/null ||
    { echo "FAIL: $kind onednn bf16 losses are the fp32 run's: bf16 not in use"; exit 1; }
done
TITAN_BF16_ENGINE=onednn bash "$here/train_bf16.sh" "$out/titan" "$shared"
echo "ok train_bf16 on the onednn engine"
