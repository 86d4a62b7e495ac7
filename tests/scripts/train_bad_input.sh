#!/usr/bin/env bash
# Bad job inputs: each is a one-line error naming the culprit, exit status 1, and no step
# runs (nothing printed as "step:").
set -uo pipefail
titan=$1; shared=$2; out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
mkdir -p "$out/nocfg"
echo "some text" > "$out/t.txt"
base=(train --set n_layers=1 --set dim=64 --set n_heads=4 --set n_kv_heads=2 --set head_dim=16
      --set ffn_dim=128 --data "$out/t.txt" --steps 1 --batch 1 --seq-len 8 --peak-tflops 1
      --dump-folder "$out/run")
fail=0
expect() { # description, regex, args...
  local what=$1 re=$2; shift 2
  "$titan" "${base[@]}" "$@" > "$out/o" 2> "$out/e"; local rc=$?
  local lines; lines=$(grep -c . "$out/e")
  if [ $rc -ne 1 ] || ! grep -qE "$re" "$out/e" || grep -q "^step:" "$out/o" || [ "$lines" -ne 1 ]; then
    echo "FAIL $what (rc $rc):"; cat "$out/e"; fail=1
  else
    echo "ok   $what: $(cat "$out/e")"
  fi
}
expect "missing dataset" "/nonexistent.txt: No such file" --data /nonexistent.txt
expect "missing assets (tokenizer)" "/nonexistent/tokenizer.json: cannot open" \
  --tokenizer /nonexistent
expect "HF folder without config.json" "nocfg/config.json: no such file" \
  --model.config_path "$out/nocfg"
expect "initial load from a folder that is no model" "nocfg: not a model" \
  --checkpoint.enable --checkpoint.initial_load_path "$out/nocfg"
expect "tokenizer vocab larger than the model's" "the tokenizer has 151669 ids but the model's vocab_size is 2048" \
  --tokenizer "$shared/data/qwen3_tokenizer"
expect "seq_len above the model's max" "100000 is above the model's max_seq_len 4096" \
  --seq-len 100000
expect "global batch that does not divide" "global_batch_size: 3 is not a multiple" \
  --training.global_batch_size 3 --batch 2
exit $fail
