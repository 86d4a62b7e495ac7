#!/usr/bin/env bash
# A checkpoint whose trainer state (metadata.json "train") holds an out-of-range value is
# refused at resume with the file and the field named, before any step: a negative AdamW
# step would otherwise train on NaN.
set -uo pipefail
titan=$1; out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
args=(train --set n_layers=1 --set dim=64 --set n_heads=4 --set n_kv_heads=2 --set head_dim=16
      --set ffn_dim=128 --set vocab_size=300 --random-tokens --batch 1 --seq-len 8
      --peak-tflops 1 --steps 4 --checkpoint-interval 2)
"$titan" "${args[@]}" --dump-folder "$out/good" --stop-after-step 2 > /dev/null ||
  { echo "FAIL: first run"; exit 1; }
meta=checkpoint/step-2/metadata.json
fail=0
refused() { # description, sed expression, error regex
  rm -rf "$out/bad"; cp -r "$out/good" "$out/bad"
  sed -i -E "$2" "$out/bad/$meta"
  "$titan" "${args[@]}" --dump-folder "$out/bad" > "$out/o" 2> "$out/e"; local rc=$?
  if [ $rc -ne 1 ] || ! grep -qE "$3" "$out/e" || grep -qE "^(\[titan\] [^ ]+ [^ ]+ - )?step:" "$out/o"; then
    echo "FAIL $1 (rc $rc):"; cat "$out/e"; fail=1
  else
    echo "ok   $1: $(cat "$out/e")"
  fi
}
refused "negative adam_step" 's/"adam_step": 2/"adam_step": -1/' \
  "bad/$meta: train.adam_step = -1 is out of range \[0, 2\]"
refused "adam_step past the step" 's/"adam_step": 2/"adam_step": 9/' \
  "bad/$meta: train.adam_step = 9 is out of range"
refused "negative tokens_seen" 's/"tokens_seen": ([0-9]+)/"tokens_seen": -\1/' \
  "bad/$meta: train.tokens_seen = -[0-9]+ is out of range"
refused "random_tokens_counter a string" 's/"random_tokens_counter": ([0-9]+)/"random_tokens_counter": "\1"/' \
  "bad/$meta: train.random_tokens_counter is of another type, not an integer"
refused "model_only not a boolean" 's/"model_only": false/"model_only": 0/' \
  "bad/$meta: train.model_only is not a boolean"
refused "shards naming another file" 's/"rank-00000.safetensors"/"..\/..\/..\/base.toml"/' \
  "bad/$meta: \"shards\" is not \[\"rank-00000.safetensors\", ...\]"
# the untouched checkpoint resumes
"$titan" "${args[@]}" --dump-folder "$out/good" > "$out/o" 2>&1 && grep -q "resumed from" "$out/o" ||
  { echo "FAIL: the intact checkpoint does not resume:"; cat "$out/o"; fail=1; }
exit $fail
