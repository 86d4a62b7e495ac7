#!/usr/bin/env bash
# A Hugging Face export into a folder that holds an earlier one replaces it whole: its weights
# load alone (no old shard, index or model.safetensors beside them), an old generation config
# does not outlive it, and an export killed midway leaves no config.json, so neither
# transformers nor titan takes the folder for a model (old and new shards had loaded together
# silently). An MoE trained with the expert bias is exported with a warning that HF's model has
# no such bias (an audit's findings).
set -uo pipefail
titan=$1; shared=$2; python=$3; out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
fail=0
args=(train --set n_layers=1 --set dim=64 --set n_heads=4 --set n_kv_heads=2 --set head_dim=16
      --set ffn_dim=128 --set vocab_size=300 --random-tokens --batch 1 --seq-len 8
      --peak-tflops 1 --steps 6 --checkpoint-interval 3 --dump-folder "$out/run")
"$titan" "${args[@]}" > "$out/train.log" 2>&1 || { echo "FAIL: training"; cat "$out/train.log"; exit 1; }
ck=$out/run/checkpoint
printf '{"eos_token_id": [1, 2], "temperature": 0.6}\n' > "$out/gen.json"
# the earlier export: sharded, with a generation config and the tokenizer
"$titan" convert "$ck/step-3" "$out/hf" --max-shard-size 100000 --generation-config "$out/gen.json" \
  --assets "$shared/data/test_tokenizer" > /dev/null 2>&1 || { echo "FAIL: first export"; exit 1; }
ls "$out/hf" | grep -q "model-00002-of-" || { echo "FAIL: the first export is not sharded"; exit 1; }
# the re-export: one file, no generation config, no assets
"$titan" convert "$ck/step-6" "$out/hf" > "$out/re.log" 2>&1 || { echo "FAIL: re-export"; cat "$out/re.log"; exit 1; }
"$titan" convert "$ck/step-6" "$out/fresh" > /dev/null 2>&1 || { echo "FAIL: fresh export"; exit 1; }
left=$(cd "$out/hf" && ls | grep -E "^model-|index.json|generation_config" | tr '\n' ' ')
if [ -z "$left" ] && cmp -s "$out/hf/model.safetensors" "$out/fresh/model.safetensors" &&
   cmp -s "$out/hf/config.json" "$out/fresh/config.json"; then
  echo "ok   a re-export replaces the earlier one's weights, index and generation config"
else echo "FAIL a re-export left: '$left' (or its weights differ from a fresh export's)"; fail=1; fi
if [ -f "$out/hf/tokenizer.json" ] &&
   grep -q "an earlier export's tokenizer files stay as they were (tokenizer.json" "$out/re.log"; then
  echo "ok   the earlier tokenizer files stay, said"
else echo "FAIL the earlier tokenizer files:"; cat "$out/re.log"; fail=1; fi
# assets given from inside the export folder itself: copied onto themselves, not lost
cp "$out/gen.json" "$out/hf/generation_config.json"
"$titan" convert "$ck/step-6" "$out/hf" --assets "$out/hf" > "$out/self.log" 2>&1 &&
  cmp -s "$out/hf/tokenizer.json" "$shared/data/test_tokenizer/tokenizer.json" &&
  cmp -s "$out/hf/generation_config.json" "$out/gen.json" &&
  echo "ok   assets from the export folder itself stay" ||
  { echo "FAIL assets from the export folder itself:"; ls "$out/hf"; cat "$out/self.log"; fail=1; }
# an export killed midway (SIGXFSZ at a 40 KiB file size limit, while writing the weights):
# no config.json, so the folder is no model to transformers or titan
(ulimit -f 40; exec "$titan" convert "$ck/step-3" "$out/hf" > /dev/null 2>&1) 2> /dev/null; rc=$?
if [ $rc -ne 0 ] && [ ! -e "$out/hf/config.json" ] &&
   ! "$titan" generate --model "$out/hf" --prompt x --max-new-tokens 1 > /dev/null 2>&1 &&
   ! "$python" -c "import sys, transformers; transformers.AutoModelForCausalLM.from_pretrained(sys.argv[1])" \
     "$out/hf" > /dev/null 2>&1; then
  echo "ok   an export killed midway (rc $rc) leaves no config.json: no loader takes the folder"
else echo "FAIL an export killed midway (rc $rc):"; ls "$out/hf"; fail=1; fi
# the finished run rerun with its export missing (killed before config.json): the refusal
# says titan convert writes it from the weights-only last save
"$titan" "${args[@]}" --out "$out/run_hf" > "$out/rerun.log" 2>&1
if grep -q "export $out/run_hf is missing or incomplete: \`titan convert $ck/step-6 $out/run_hf\`" "$out/rerun.log"; then
  echo "ok   a rerun whose export is missing names titan convert"
else echo "FAIL a rerun whose export is missing:"; cat "$out/rerun.log"; fail=1; fi
# the same through ~420-byte paths: the message names each path whole and keeps its hint (a
# 1024-byte error had cut the convert command off)
deep=$out/$(printf 'd%.0s' {1..200})/$(printf 'e%.0s' {1..200})
mkdir -p "$deep" && ln -s "$out/run" "$deep/run"
"$titan" "${args[@]}" --dump-folder "$deep/run" --out "$deep/run_hf" > "$out/rerun_deep.log" 2>&1
if grep -q "export $deep/run_hf is missing or incomplete: \`titan convert $deep/run/checkpoint/step-6 $deep/run_hf\` writes it" "$out/rerun_deep.log"; then
  echo "ok   the hint survives long paths"
else echo "FAIL a rerun with long paths:"; cat "$out/rerun_deep.log"; fail=1; fi
# a folder with both a model.safetensors and an index (a copy over an export): read as
# transformers reads it, the single file, and said
mkdir -p "$out/both" && cp "$out/fresh/"* "$out/both/" && echo '{"weight_map": {}}' > "$out/both/model.safetensors.index.json"
"$titan" inspect "$out/both" > "$out/o" 2>&1
if grep -q "holds both model.safetensors and model.safetensors.index.json" "$out/o"; then echo "ok   a folder with both model.safetensors and an index is said"
else echo "FAIL a folder with both model.safetensors and an index: no warning"; fail=1; fi
# said once by a command that opens the folder twice (convert: its arguments, then its weights)
n=$("$titan" convert "$out/both" "$out/both_conv" 2>&1 | grep -c "holds both model.safetensors")
if [ "$n" = 1 ]; then echo "ok   convert says it once"
else echo "FAIL convert of a folder with both: said $n times"; fail=1; fi
# an MoE with the expert bias: the export says HF's model routes without it
"$titan" train --flavor debugmodel_moe --set n_layers=1 --set dim=64 --set n_heads=4 --set n_kv_heads=2 \
  --set head_dim=16 --set num_experts=4 --set top_k=2 --set moe_inter_dim=32 --set vocab_size=300 \
  --random-tokens --batch 1 --seq-len 8 --peak-tflops 1 --steps 3 --checkpoint-interval 3 \
  --model.moe_load_balance=bias --model.moe_bias_update_rate=0.01 --dump-folder "$out/moe" --out "$out/moe_hf" > "$out/moe.log" 2>&1
"$titan" convert "$out/moe/checkpoint" "$out/moe_hf2" > "$out/moe_conv.log" 2>&1
for f in moe.log moe_conv.log; do
  if grep -q "expert bias .*not part of Hugging Face's Qwen3-MoE" "$out/$f"; then
    echo "ok   $f: the expert bias left out of the export, said"
  else echo "FAIL $f: no word of the expert bias:"; tail -5 "$out/$f"; fail=1; fi
done
exit $fail
