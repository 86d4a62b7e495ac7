#!/usr/bin/env bash
# bf16 mixed precision (training.mixed_precision_param = "bfloat16") end to end, on any CPU
# (without bf16 units it runs emulated, with a warning):
#  - the header names the precision and both GEMM peaks; the run warns once on a CPU without
#    bf16 units;
#  - bf16 training follows the fp32 run: every step's loss within 2% of fp32's (the same data
#    and seed), and differs from it (bf16 is in use);
#  - a bf16 run is bitwise deterministic run to run, and resumes bitwise (losses and gradient
#    norms of steps 7..12 identical after a stop at 6);
#  - activations stored as bf16 give the bits a checkpointed recompute gives (dense, MoE), a
#    block whose GEMMs are overridden to fp32 keeps them fp32, and titan plan counts them at
#    under 0.7x fp32's at Qwen3-0.6B;
#  - MoE too (grouped_mm's bf16 path): within 2% of fp32 and deterministic;
#  - mixed_precision_reduce = bfloat16 and an unknown precision are refused by name;
#  - generate --precision bfloat16 runs and names its precision (its tokens are not compared
#    with fp32's: bf16 may flip near-ties of a barely trained model).
set -euo pipefail
titan=$1; shared=$2; out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
model=(--set n_layers=2 --set dim=64 --set n_heads=4 --set n_kv_heads=2 --set head_dim=16
       --set ffn_dim=128 --steps 12 --batch 2 --seq-len 32 --lr 3e-3 --warmup 3 --seed 7
       --random-tokens --set vocab_size=300 --log-freq 100)
field() { grep -o "\"$2\": [^,}]*" "$1" | sed 's/.*: //'; }
bf=(--training.mixed_precision_param=bfloat16)

"$titan" train "${model[@]}" --peak-tflops 1 --metrics "$out/f32.jsonl" --dump-folder "$out/f32" \
    --training.mixed_precision_param=float32 > "$out/f32.log" 2>&1
"$titan" train "${model[@]}" "${bf[@]}" --metrics "$out/bf.jsonl" --dump-folder "$out/bf" \
    > "$out/bf.log" 2>&1 || { cat "$out/bf.log"; exit 1; }
grep -q "precision: bfloat16 (set)" "$out/bf.log" && grep -q "GEMM peak: fp32 .* bf16 " "$out/bf.log" &&
  grep -q "MFU against the bf16 peak" "$out/bf.log" ||
  { echo "FAIL header"; cat "$out/bf.log"; exit 1; }
if ! grep -qE 'amx_bf16|avx512_bf16' /proc/cpuinfo; then
  [ "$(grep -c 'bf16 GEMMs are emulated' "$out/bf.log")" -eq 1 ] ||
    { echo "FAIL: no (or more than one) emulation warning"; cat "$out/bf.log"; exit 1; }
fi
echo "ok header: precision and both peaks; emulation warned once where there are no bf16 units"
# The header's memory estimate is titan plan's (the one the start checks against the RAM): its
# total, and the bf16 weight copy named in a bf16 run only.
plan_total=$("$titan" plan "${model[@]}" "${bf[@]}" | sed -n 's/^  total, no checkpointing *\([0-9.]*\).*/\1/p')
head_total=$(sed -n 's/^  memory estimate: \([0-9.]*\) GiB = .*/\1/p' "$out/bf.log")
[ -n "$plan_total" ] && [ "$(printf "%.2f" "$plan_total")" = "$head_total" ] ||
  { echo "FAIL: header estimate '$head_total' GiB, titan plan '$plan_total'"; exit 1; }
grep -q "memory estimate: .* + bf16 weight copy [0-9.]* + other" "$out/bf.log" &&
  ! grep -q "bf16 weight copy" "$out/f32.log" ||
  { echo "FAIL: the bf16 weight copy in the header's estimate"; grep "memory estimate" "$out"/*.log; exit 1; }
echo "ok header: memory estimate = titan plan's ($head_total GiB), bf16 weight copy in bf16 runs"

close() { # name, fp32 metrics, bf16 metrics: per-step loss within 2%, some step not equal
  paste <(field "$2" loss) <(field "$3" loss) | awk -v n="$1" '
    { r = ($2 - $1) / $1; if (r < 0) r = -r; if (r > w) w = r; if ($1 != $2) d = 1 }
    END { if (w > 0.02) { printf "FAIL %s: bf16 loss off fp32 by %.4f\n", n, w; exit 1 }
          if (!d) { printf "FAIL %s: bf16 losses equal fp32 bitwise: bf16 not in use\n", n; exit 1 }
          printf "ok %s: bf16 loss within %.2e of fp32 over %d steps\n", n, w, NR }'
}
close dense "$out/f32.jsonl" "$out/bf.jsonl"

"$titan" train "${model[@]}" "${bf[@]}" --metrics "$out/bf2.jsonl" --dump-folder "$out/bf2" > /dev/null 2>&1
for f in loss grad_norm; do
  diff <(field "$out/bf.jsonl" $f) <(field "$out/bf2.jsonl" $f) > /dev/null ||
    { echo "FAIL: bf16 run not deterministic ($f)"; exit 1; }
done
echo "ok bf16 is bitwise deterministic run to run"

# Saved activations: a block stores its GEMM outputs (q/k/v projections, attention output,
# FFN gate/up; MoE expert rows) as bf16 and expands them in backward; a checkpointed block
# recomputes them instead. Both must give the same bits (stored == recomputed), dense and MoE.
for ac in full selective; do
  "$titan" train "${model[@]}" "${bf[@]}" --ac $ac --activation_checkpoint.selective_ac_option 2 \
      --metrics "$out/ac_$ac.jsonl" --dump-folder "$out/ac_$ac" > /dev/null 2>&1
  for f in loss grad_norm; do
    diff <(field "$out/bf.jsonl" $f) <(field "$out/ac_$ac.jsonl" $f) > /dev/null ||
      { echo "FAIL: bf16 stored activations differ from recomputed ($ac, $f)"; exit 1; }
  done
done
echo "ok bf16 stored activations: bitwise equal to checkpointed recompute (full, selective)"

"$titan" train "${model[@]}" "${bf[@]}" --metrics "$out/a.jsonl" --dump-folder "$out/r" \
    --checkpoint-interval 3 --stop-after-step 6 > /dev/null 2>&1
"$titan" train "${model[@]}" "${bf[@]}" --metrics "$out/b.jsonl" --dump-folder "$out/r" \
    --checkpoint-interval 3 > "$out/r.log" 2>&1
grep -q "resumed from $out/r/checkpoint/step-6" "$out/r.log" || { cat "$out/r.log"; exit 1; }
for f in loss grad_norm; do
  diff <(field "$out/bf.jsonl" $f) <(cat <(field "$out/a.jsonl" $f) <(field "$out/b.jsonl" $f)) ||
    { echo "FAIL: bf16 resume differs in $f"; exit 1; }
done
echo "ok bf16 resumes bitwise (steps 7..12)"
! grep -q "was trained in" "$out/r.log" || { echo "FAIL: a same-precision resume warned"; exit 1; }

# A resume in the other precision is allowed (the checkpoint holds the fp32 master weights;
# the default follows the CPU, so a run moved to a machine without bf16 units changes
# precision without asking) but said, naming both and how this run's was chosen.
for p in bfloat16 float32; do
  q=float32; [ $p = float32 ] && q=bfloat16
  "$titan" train "${model[@]}" --training.mixed_precision_param=$p --dump-folder "$out/x$p" \
      --checkpoint-interval 3 --stop-after-step 3 > /dev/null 2>&1
  "$titan" train "${model[@]}" --training.mixed_precision_param=$q --dump-folder "$out/x$p" \
      --checkpoint-interval 3 --stop-after-step 4 > "$out/x$p.log" 2>&1 || { cat "$out/x$p.log"; exit 1; }
  grep -q "step-3 was trained in $p; this run computes in $q (set)" "$out/x$p.log" ||
    { echo "FAIL: a $p checkpoint resumed in $q without a word"; cat "$out/x$p.log"; exit 1; }
done
echo "ok a resume in the other precision runs and says so"

moe=(--set num_experts=8 --set top_k=2 --set moe_inter_dim=32)
"$titan" train "${model[@]}" "${moe[@]}" --training.mixed_precision_param=float32 \
    --metrics "$out/mf.jsonl" --dump-folder "$out/mf" > "$out/mf.log" 2>&1 || { cat "$out/mf.log"; exit 1; }
"$titan" train "${model[@]}" "${moe[@]}" "${bf[@]}" --metrics "$out/mb.jsonl" \
    --dump-folder "$out/mb" > "$out/mb.log" 2>&1 || { cat "$out/mb.log"; exit 1; }
grep -q "grouped_mm=bf16" "$out/mb.log" || { echo "FAIL: MoE not on grouped_mm bf16"; exit 1; }
close moe "$out/mf.jsonl" "$out/mb.jsonl"
"$titan" train "${model[@]}" "${moe[@]}" "${bf[@]}" --metrics "$out/mb2.jsonl" \
    --dump-folder "$out/mb2" > /dev/null 2>&1
diff <(field "$out/mb.jsonl" loss) <(field "$out/mb2.jsonl" loss) > /dev/null ||
  { echo "FAIL: MoE bf16 not deterministic"; exit 1; }
echo "ok MoE bf16 deterministic"
"$titan" train "${model[@]}" "${moe[@]}" "${bf[@]}" --ac full --metrics "$out/mac.jsonl" \
    --dump-folder "$out/mac" > /dev/null 2>&1
diff <(field "$out/mb.jsonl" loss) <(field "$out/mac.jsonl" loss) > /dev/null ||
  { echo "FAIL: MoE bf16 stored activations differ from recomputed"; exit 1; }
echo "ok MoE bf16 stored activations equal recomputed"

# A block whose GEMMs run fp32 implementations (a [kernels] override or plugin) keeps its
# activations fp32, as an fp32 run would: a bf16 model with every block's matmul and attention
# overridden to the fp32 defaults trains bitwise like an fp32 model whose head alone runs the
# bf16 lm_head (the only bf16 ops left in both).
ov=(--kernels.overrides 'layers.0-1.matmul=default,layers.0-1.attention=default')
"$titan" train "${model[@]}" "${bf[@]}" "${ov[@]}" --metrics "$out/ovb.jsonl" \
    --dump-folder "$out/ovb" > /dev/null 2>&1
"$titan" train "${model[@]}" --training.mixed_precision_param=float32 \
    --kernels.overrides 'head.lmhead_ce=bf16,head.matmul=bf16' --metrics "$out/ovf.jsonl" \
    --dump-folder "$out/ovf" > /dev/null 2>&1
for f in loss grad_norm; do
  diff <(field "$out/ovb.jsonl" $f) <(field "$out/ovf.jsonl" $f) > /dev/null ||
    { echo "FAIL: a bf16 model's fp32-overridden blocks do not train as fp32 ($f)"; exit 1; }
done
echo "ok blocks with fp32 GEMM overrides keep fp32 activations (bitwise an fp32 model + bf16 head)"

# The memory they save, as titan plan counts it (what model_build allocates) at Qwen3-0.6B,
# 1 x 2048 tokens: 3.36 GiB fp32, 2.15 GiB bf16 (the residual stream x, xm stays fp32); all of
# them, not only those outside the gradients' pages (TITAN_ACTS_IN_GRADS=0).
act() { TITAN_ACTS_IN_GRADS=0 "$titan" plan --hf-config "$QWEN_CFG" --training.local_batch_size=1 --training.seq_len=2048 \
          --training.mixed_precision_param=$1 2>/dev/null | awk '/activations, no checkpointing/ { print $4 }'; }
QWEN_CFG=$shared/data/qwen3_configs/Qwen3-0.6B.json
if [ -r "$QWEN_CFG" ]; then
  a32=$(act float32); a16=$(act bfloat16)
  "$titan" plan --hf-config "$QWEN_CFG" "${bf[@]}" | grep -q "precision: bfloat16 (set)" ||
    { echo "FAIL: titan plan does not say its precision"; exit 1; }
  awk -v a="$a32" -v b="$a16" 'BEGIN { r = b / a; printf "activations at 0.6B: fp32 %s GiB, bf16 %s GiB (%.2fx)\n", a, b, r
       if (!(a > 3 && r < 0.7)) { print "FAIL: bf16 activations not smaller"; exit 1 } }'
fi

# The weights' bf16 copy follows every change of the weights: validation (steps 1, 4, 8, on its own
# model, at another sequence length) at step 8 sees step 8's weights, not a copy made at step
# 4's validation; an initial load replaces what the copy was made from. Validating step-8's
# checkpoint as the initial load of a run with lr 0 (its one AdamW step changes nothing) gives
# bitwise the first run's validation loss at step 8; fp32 gives another (bf16 is in use).
for i in $(seq 1 12); do printf 'The quick brown fox %d jumps over the lazy dog.\n\n' "$i"; done \
  > "$out/val.txt"
val=(--validation.enable --validation.dataset_path "$out/val.txt" --validation.freq 4
     --validation.steps 3 --validation.seq_len 16 --validation.local_batch_size 3)
vl() { grep -o '"val_loss": [^,}]*' "$1" | sed 's/.*: //'; }
"$titan" train "${model[@]}" "${bf[@]}" "${val[@]}" --steps 8 --checkpoint-interval 8 \
    --metrics "$out/va.jsonl" --dump-folder "$out/va" > /dev/null 2>&1
for p in bfloat16 float32; do
  "$titan" train "${model[@]}" "${val[@]}" --training.mixed_precision_param=$p --steps 1 --lr 0 \
      --initial-load-path "$out/va/checkpoint/step-8" --metrics "$out/vb$p.jsonl" \
      --dump-folder "$out/vb$p" > "$out/vb$p.log" 2>&1 || { cat "$out/vb$p.log"; exit 1; }
done
[ "$(vl "$out/va.jsonl" | wc -l)" = 3 ] && [ "$(vl "$out/va.jsonl" | tail -1)" = "$(vl "$out/vbbfloat16.jsonl")" ] &&
  [ "$(vl "$out/vbbfloat16.jsonl")" != "$(vl "$out/vbfloat32.jsonl")" ] ||
  { echo "FAIL: bf16 validation at step 8 $(vl "$out/va.jsonl" | tr '\n' ' ')vs step-8 loaded:" \
         "$(vl "$out/vbbfloat16.jsonl") (fp32 $(vl "$out/vbfloat32.jsonl"))"; exit 1; }
echo "ok the bf16 weight copy follows validation and an initial load (validation loss bitwise)"

if "$titan" train "${model[@]}" --training.mixed_precision_reduce=bfloat16 --steps 1 \
    --dump-folder "$out/x" > "$out/x.log" 2>&1; then echo "FAIL: bf16 reduce accepted"; exit 1; fi
grep -q "mixed_precision_reduce.*bfloat16 gradient reduction is not supported" "$out/x.log" ||
  { cat "$out/x.log"; exit 1; }
if "$titan" train "${model[@]}" --training.mixed_precision_param=float16 --steps 1 \
    --dump-folder "$out/y" > "$out/y.log" 2>&1; then echo "FAIL: float16 accepted"; exit 1; fi
grep -q "mixed_precision_param" "$out/y.log" || { cat "$out/y.log"; exit 1; }
echo "ok bf16 reduce and unknown precisions refused by name"

"$titan" generate --model "$out/r" --ids --prompt "1 2 3" --max-new-tokens 4 \
    --temperature 0 --precision bfloat16 > "$out/gen.txt" 2> "$out/gen.log" ||
  { cat "$out/gen.log"; exit 1; }
grep -q "precision bfloat16" "$out/gen.log" && [ -s "$out/gen.txt" ] ||
  { echo "FAIL generate --precision"; cat "$out/gen.log"; exit 1; }
echo "ok generate runs in bf16"
# A training checkpoint records its run's precision: generate follows it (here over the
# suite's TITAN_MIXED_PRECISION=float32 pin of the unset default), --precision overrides it
# (it used to take the CPU's / the pin's default whatever the checkpoint was trained in).
"$titan" generate --model "$out/r" --ids --prompt "1 2 3" --max-new-tokens 4 \
    --temperature 0 > "$out/gen_rec.txt" 2> "$out/gen_rec.log" || { cat "$out/gen_rec.log"; exit 1; }
grep -q "generate: precision bfloat16 (recorded by the training checkpoint" "$out/gen_rec.log" &&
  cmp -s "$out/gen.txt" "$out/gen_rec.txt" ||
  { echo "FAIL: generate on a bf16 checkpoint did not follow its recorded precision"; cat "$out/gen_rec.log"; exit 1; }
"$titan" generate --model "$out/r" --ids --prompt "1 2 3" --max-new-tokens 4 --temperature 0 \
    --precision float32 > /dev/null 2> "$out/gen_f32.log" || { cat "$out/gen_f32.log"; exit 1; }
grep -q "generate: precision float32 (set)" "$out/gen_f32.log" ||
  { echo "FAIL: --precision float32 on a bf16 checkpoint"; cat "$out/gen_f32.log"; exit 1; }
echo "ok generate follows a checkpoint's recorded precision; --precision overrides it"
if "$titan" generate --model "$out/r" --ids --prompt "1" --precision fp16 > /dev/null \
    2> "$out/gen_bad.log"; then echo "FAIL: generate --precision fp16 accepted"; exit 1; fi
grep -q -- "--precision 'fp16': expected bfloat16 or float32" "$out/gen_bad.log" ||
  { cat "$out/gen_bad.log"; exit 1; }
echo "ok generate refuses an unknown --precision by name"

# A CPU without bf16 units, on this one: /proc/cpuinfo without amx_bf16 / avx512_bf16,
# bind-mounted in a private mount namespace (root only; skipped elsewhere). The unset default
# is then float32, said with its reason; bfloat16 asked for runs emulated with one warning
# naming what asked for it (the training key, or generate's --precision); generate's default
# is float32 too.
sed 's/ amx_bf16\b//g; s/ avx512_bf16\b//g' /proc/cpuinfo > "$out/cpuinfo"
nounits() { unshare -m sh -c 'mount --bind "$0" /proc/cpuinfo && exec "$@"' "$out/cpuinfo" "$@"; }
if [ "$(id -u)" = 0 ] && nounits sh -c '! grep -qwE "amx_bf16|avx512_bf16" /proc/cpuinfo' 2> /dev/null; then
  one=(--set n_layers=1 --set dim=64 --set n_heads=4 --set n_kv_heads=2 --set head_dim=16
       --set ffn_dim=128 --steps 1 --batch 2 --seq-len 32 --random-tokens --set vocab_size=300
       --peak-tflops 1)
  nounits env -u TITAN_MIXED_PRECISION "$titan" train "${one[@]}" --dump-folder "$out/nu" \
      > "$out/nu.log" 2>&1 || { cat "$out/nu.log"; exit 1; }
  grep -q "precision: float32 (default: this CPU has no bf16 units" "$out/nu.log" &&
    ! grep -q "emulated" "$out/nu.log" || { echo "FAIL: default without bf16 units"; cat "$out/nu.log"; exit 1; }
  nounits "$titan" train "${one[@]}" "${bf[@]}" --dump-folder "$out/nub" --checkpoint-interval 1 --out hf \
      > "$out/nub.log" 2>&1 ||
    { cat "$out/nub.log"; exit 1; }
  [ "$(grep -c 'training.mixed_precision_param: bfloat16 on a CPU without bf16 units.*bf16 GEMMs are emulated' "$out/nub.log")" -eq 1 ] &&
    grep -q "precision: bfloat16 (set); emulated: no bf16 units" "$out/nub.log" ||
    { echo "FAIL: bf16 without bf16 units: one warning naming the key"; cat "$out/nub.log"; exit 1; }
  gen=(generate --model "$out/nub" --ids --prompt "1 2" --max-new-tokens 2 --temperature 0)
  nounits "$titan" "${gen[@]}" --precision bfloat16 > /dev/null 2> "$out/nug.log" || { cat "$out/nug.log"; exit 1; }
  [ "$(grep -c -- '--precision: bfloat16 on a CPU without bf16 units' "$out/nug.log")" -eq 1 ] &&
    ! grep -q "training.mixed_precision_param" "$out/nug.log" ||
    { echo "FAIL: generate --precision bfloat16 without bf16 units: the warning names --precision"; cat "$out/nug.log"; exit 1; }
  # generate's default for a source that records no precision (an HF export)
  nounits env -u TITAN_MIXED_PRECISION "$titan" generate --model "$out/nub/hf" --bytes --ids \
      --prompt "1 2" --max-new-tokens 2 --temperature 0 > /dev/null 2> "$out/nug2.log" ||
    { cat "$out/nug2.log"; exit 1; }
  grep -q "generate: precision float32 (default: this CPU has no bf16 units" "$out/nug2.log" ||
    { echo "FAIL: generate's default without bf16 units"; cat "$out/nug2.log"; exit 1; }
  # the bf16 checkpoint's recorded precision, emulated here: one warning naming where it came from
  nounits "$titan" "${gen[@]}" > /dev/null 2> "$out/nug3.log" || { cat "$out/nug3.log"; exit 1; }
  [ "$(grep -c "recorded training.mixed_precision_param: bfloat16 on a CPU without bf16 units" "$out/nug3.log")" -eq 1 ] &&
    grep -q "generate: precision bfloat16 (recorded by the training checkpoint; --precision overrides); emulated" "$out/nug3.log" ||
    { echo "FAIL: generate on a bf16 checkpoint without bf16 units"; cat "$out/nug3.log"; exit 1; }
  # titan plan sizes the bf16 copy and activations for the precision a run here would use,
  # and says which, with its reason (a plan made on another machine can differ)
  nounits env -u TITAN_MIXED_PRECISION "$titan" plan --set n_layers=2 > "$out/nup.log" 2>&1 &&
    grep -q "precision: float32 (default: this CPU has no bf16 units" "$out/nup.log" &&
    ! grep -q "bf16 weight copy" "$out/nup.log" ||
    { echo "FAIL: titan plan's precision without bf16 units"; cat "$out/nup.log"; exit 1; }
  echo "ok without bf16 units (cpuinfo masked): float32 by default, bf16 warned once by name"
else
  echo "skip: masking /proc/cpuinfo needs root and unshare -m (the no-bf16-units checks)"
fi
