#!/usr/bin/env bash
# A checkpoint whose trainer state (metadata.json "train") holds an out-of-range value is
# refused at resume with the file and the field named, before any step: a negative AdamW
# step would otherwise train on NaN. An AdamW moment that is NaN / infinite (or a negative
# second moment) in a shard without checksums is refused the same way, naming the step folder,
# the moment and the parameter (it surfaced one step later as a "non-finite gradient").
set -uo pipefail
titan=$1; python=${2:-python3}; out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
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
  sed -i '/^ "crc32c": /d' "$out/bad/$meta" # an edit made on purpose: its own CRC deleted
  "$titan" "${args[@]}" --dump-folder "$out/bad" > "$out/o" 2> "$out/e"; local rc=$?
  if [ $rc -ne 1 ] || ! grep -qE "$3" "$out/e" || grep -qE "^(\[titan\] [^ ]+ [^ ]+ - )?step:" "$out/o"; then
    echo "FAIL $1 (rc $rc):"; cat "$out/e"; fail=1
  else
    echo "ok   $1: $(cat "$out/e")"
  fi
}
# a seed in training.seed's whole range (5e18: above the 2^62 the resume had allowed) resumes
"$titan" "${args[@]}" --seed 5000000000000000000 --dump-folder "$out/seed" --stop-after-step 2 > /dev/null 2>&1
if "$titan" "${args[@]}" --seed 5000000000000000000 --dump-folder "$out/seed" > "$out/o" 2>&1 &&
   grep -q "resumed from" "$out/o"; then echo "ok   a run with seed 5e18 resumes"
else echo "FAIL a run with seed 5e18 does not resume:"; tail -3 "$out/o"; fail=1; fi
# metadata.json's own CRC-32C (version 4): an in-range edit of the trainer state (adam_step 2 ->
# 1 would train on silently) is refused naming the file; the same edit with the "crc32c" line
# deleted (as the message says to) loads with a warning; a re-indented file still matches (the
# CRC is of the parsed contents, not of the bytes)
rm -rf "$out/bad"; cp -r "$out/good" "$out/bad"
sed -i 's/"adam_step": 2/"adam_step": 1/' "$out/bad/$meta"
if "$titan" "${args[@]}" --dump-folder "$out/bad" > "$out/o" 2> "$out/e" ||
   ! grep -q "bad/$meta: its contents do not match its \"crc32c\"" "$out/e"; then
  echo "FAIL an in-range edit with the CRC kept:"; cat "$out/e"; fail=1
else echo "ok   an in-range edit with the CRC kept: $(cat "$out/e")"; fi
sed -i '/^ "crc32c": /d' "$out/bad/$meta"
if "$titan" "${args[@]}" --dump-folder "$out/bad" > "$out/o" 2>&1 &&
   grep -q "bad/$meta: no \"crc32c\" (removed after an edit?): its trainer state is loaded unchecked" \
     "$out/o" && [ "$(grep -c "loaded unchecked" "$out/o")" = 1 ] && grep -q "resumed from" "$out/o"
then echo "ok   the edit with its CRC deleted loads, said once"
else echo "FAIL the edit with its CRC deleted:"; cat "$out/o"; fail=1; fi
# the same edit with "version" lowered to 3 (or a byte of it damaged): the CRC that is there
# is still checked (a version below 4 had turned the check off)
rm -rf "$out/bad"; cp -r "$out/good" "$out/bad"
sed -i 's/"adam_step": 2/"adam_step": 1/; s/"version": 4/"version": 3/' "$out/bad/$meta"
if "$titan" "${args[@]}" --dump-folder "$out/bad" > "$out/o" 2> "$out/e" ||
   ! grep -q "bad/$meta: its contents do not match its \"crc32c\"" "$out/e"; then
  echo "FAIL an edit with the version lowered:"; cat "$out/e"; fail=1
else echo "ok   an edit with the version lowered to 3 is refused too"; fi
rm -rf "$out/bad"; cp -r "$out/good" "$out/bad"
"$python" -c "import json, sys; m = json.load(open(sys.argv[1])); json.dump(m, open(sys.argv[1], 'w'), indent=4)" \
  "$out/bad/$meta"
if "$titan" "${args[@]}" --dump-folder "$out/bad" > "$out/o" 2>&1 && grep -q "resumed from" "$out/o" &&
   ! grep -q "crc32c" "$out/o"; then echo "ok   a re-indented metadata.json still matches its CRC"
else echo "FAIL a re-indented metadata.json:"; cat "$out/o"; fail=1; fi
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
# moments: element 0 of adam_m / adam_v set, the shard's CRC-32C records dropped and
# metadata.json made version 2 (no shard identities, no CRC): a checkpoint written before titan
# recorded either
moment() { # description, tensor, value, error regex
  rm -rf "$out/bad"; cp -r "$out/good" "$out/bad"
  "$python" - "$out/bad/checkpoint/step-2/rank-00000.safetensors" "$2" "$3" <<'PY'
import json, struct, sys
path, name, value = sys.argv[1], sys.argv[2], float(sys.argv[3])
b = bytearray(open(path, "rb").read())
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
h["__metadata__"] = {k: v for k, v in h["__metadata__"].items() if not k.endswith(".crc32c")}
text = json.dumps(h).encode()
text += b" " * (n - len(text))  # the same header length: the offsets stay valid
at = 8 + n + h[name]["data_offsets"][0]
b[at:at + 4] = struct.pack("<f", value)
open(path, "wb").write(b[:8] + text + b[8 + n:])
meta = path.rsplit("/", 1)[0] + "/metadata.json"
m = json.load(open(meta))
m["version"] = 2
del m["shard_headers"], m["crc32c"]
json.dump(m, open(meta, "w"))
PY
  "$titan" "${args[@]}" --dump-folder "$out/bad" > "$out/o" 2> "$out/e"; local rc=$?
  if [ $rc -ne 1 ] || ! grep -qE "$4" "$out/e" || grep -qE "^(\[titan\] [^ ]+ [^ ]+ - )?step:" "$out/o"; then
    echo "FAIL $1 (rc $rc):"; cat "$out/e"; fail=1
  else
    echo "ok   $1: $(cat "$out/e")"
  fi
}
moment "NaN in adam_m" adam_m nan \
  "bad/checkpoint/step-2: adam_m of [a-z_.]+ holds a NaN or an infinity"
moment "NaN in adam_v" adam_v nan \
  "bad/checkpoint/step-2: adam_v of [a-z_.]+ holds a NaN or an infinity or a negative value"
moment "negative adam_v" adam_v -1 \
  "bad/checkpoint/step-2: adam_v of tok_embeddings.weight holds a NaN or an infinity or a negative"
# the untouched checkpoint resumes
"$titan" "${args[@]}" --dump-folder "$out/good" > "$out/o" 2>&1 && grep -q "resumed from" "$out/o" ||
  { echo "FAIL: the intact checkpoint does not resume:"; cat "$out/o"; fail=1; }
exit $fail
