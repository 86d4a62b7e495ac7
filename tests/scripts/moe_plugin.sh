#!/usr/bin/env bash
# The grouped-experts plugin (examples/kernels/grouped_tiles.c) in training, against titan's
# built-in grouped_mm on the same seed:
#   1. the MoE debug flavor (debugmodel_moe: 64 experts, top-8; layers and widths cut) and
#   2. 30B-A3B-reduced shrunk (4 layers, 64 experts, top-4 kept; widths and vocabulary cut)
# each log 5 losses and grad norms equal to the built-in run's within grouped_mm's
# conformance tolerance (1e-5 relative); every MoE layer logs the replacement.
#   3. an override by layer path, layers.0-1.moe.grouped_mm, replaces layers 0 and 1 only,
#      with the same losses;
#   4. a model the plugin cannot serve (dim % 8 != 0) is refused at model build, naming the
#      layer path, the kernel and its broken rule.
# usage: moe_plugin.sh TITAN DATA PLUGIN
set -euo pipefail
titan=$1; data=$2; plugin=$3; out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
run=(train --data "$data" --steps 5 --batch 2 --seq-len 16 --lr 1e-3 --warmup 2 --seed 1234
     --peak-tflops 1 --log-freq 100 --set max_seq_len=64 --dump-folder "$out/dump")
debug=(--flavor debugmodel_moe --set n_layers=2 --set dim=128 --set ffn_dim=256
       --set moe_inter_dim=64 --set vocab_size=512)
reduced=(--flavor 30B-A3B-reduced --set dim=64 --set n_heads=4 --set n_kv_heads=2
         --set head_dim=16 --set ffn_dim=128 --set moe_inter_dim=32 --set vocab_size=512)
plug=(--kernels.plugins "$plugin")

field() { grep -o "\"$2\": [^,}]*" "$1" | sed 's/.*: //'; }
# same count of values, each within rel of the other run's
close() {
  local a=$1 b=$2 f=$3 rel=$4
  paste <(field "$a" "$f") <(field "$b" "$f") | awk -v f="$f" -v rel="$rel" '
    { n++; d = $1 - $2; if (d < 0) d = -d; m = $2 < 0 ? -$2 : $2;
      if (d > rel * m) { printf "FAIL: %s step %d: %s vs %s\n", f, n, $1, $2; bad = 1 } }
    END { if (n != 5) { printf "FAIL: %d values of %s, want 5\n", n, f; bad = 1 }; exit bad }'
}

for model in debug reduced; do
  declare -n margs=$model
  "$titan" "${run[@]}" "${margs[@]}" --metrics "$out/$model.base.jsonl" >/dev/null
  "$titan" "${run[@]}" "${margs[@]}" "${plug[@]}" --metrics "$out/$model.plug.jsonl" \
    --kernels.overrides 'layers.*.moe.grouped_mm=grouped_tiles' >"$out/$model.log" 2>&1
  n=$(grep -c "kernel grouped_mm/grouped_tiles at layers\.[0-9]* (override 'layers.\*.moe.grouped_mm', plugin" "$out/$model.log" || true)
  want=$([ $model = debug ] && echo 2 || echo 4)
  if [ "$n" != "$want" ]; then
    echo "FAIL: $model: $n layers logged the plugin, want $want"; cat "$out/$model.log"; exit 1; fi
  close "$out/$model.base.jsonl" "$out/$model.plug.jsonl" loss 1e-5
  close "$out/$model.base.jsonl" "$out/$model.plug.jsonl" grad_norm 1e-5
  if cmp -s <(field "$out/$model.base.jsonl" loss) <(field "$out/$model.plug.jsonl" loss); then
    echo "note: $model: plugin losses are bit-identical to the built-in's"; fi
  echo "$model: base / plugin losses"
  paste <(field "$out/$model.base.jsonl" loss) <(field "$out/$model.plug.jsonl" loss)
done

# 3. by layer path: layers 0 and 1 of the 4
"$titan" "${run[@]}" "${reduced[@]}" "${plug[@]}" --metrics "$out/path.jsonl" \
  --kernels.overrides 'layers.0-1.moe.grouped_mm=grouped_tiles' >"$out/path.log" 2>&1
got=$(grep -o "kernel grouped_mm/grouped_tiles at layers\.[0-9]*" "$out/path.log" | sort | tr '\n' ' ')
if [ "$got" != "kernel grouped_mm/grouped_tiles at layers.0 kernel grouped_mm/grouped_tiles at layers.1 " ]; then
  echo "FAIL: layers.0-1.moe.grouped_mm replaced: '$got'"; cat "$out/path.log"; exit 1; fi
close "$out/reduced.base.jsonl" "$out/path.jsonl" loss 1e-5

# 4. a constraint the kernel states, checked at model build
if "$titan" "${run[@]}" "${reduced[@]}" "${plug[@]}" --set dim=60 --metrics "$out/bad.jsonl" \
    --kernels.overrides 'layers.*.moe.grouped_mm=grouped_tiles' >"$out/bad.log" 2>&1; then
  echo "FAIL: dim 60 trained with grouped_tiles"; exit 1; fi
if ! grep -q "kernel grouped_mm/grouped_tiles at layers.0: dim % 8 == 0 and moe_ffn_dim % 8 == 0 (dim = 60, moe_ffn_dim = 32)" "$out/bad.log"; then
  echo "FAIL: constraint message"; cat "$out/bad.log"; exit 1; fi
echo "moe plugin ok: losses and grad norms within 1e-5 of the built-in grouped_mm"
