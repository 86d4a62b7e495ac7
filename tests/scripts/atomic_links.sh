#!/usr/bin/env bash
# Atomic writes never write through a link: a stale "<file>.tmp" (or the file itself) that is
# a link to a file elsewhere is replaced, not followed, for titan convert (model.safetensors,
# config.json), titan train's export (--out), metrics.jsonl, a step checkpoint (step-N.tmp a
# link to a folder elsewhere) and titan tokenize's shards. Every victim must keep its bytes and
# every output must be a regular file (or a real folder), with no .tmp left.
set -euo pipefail
titan=$1; shared=$2; out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
m=(train --set n_layers=1 --set dim=64 --set n_heads=4 --set n_kv_heads=2 --set head_dim=16
   --set ffn_dim=64 --set vocab_size=256 --random-tokens --batch 1 --seq-len 16 --peak-tflops 1
   --log-freq 1000 --steps 2 --checkpoint-interval 1 --sync-checkpoint --last-save-full)
mkdir -p "$out/v/dir"
for i in 1 2 3 4 5 6; do echo "victim $i" > "$out/v/$i"; done
echo "victim dir" > "$out/v/dir/file"
victims() { (cd "$out/v" && find . -type f -exec sha256sum {} + | sort); }
before=$(victims)
fail() { echo "FAIL: $*"; exit 1; }
regular() { for f in "$@"; do [ -f "$f" ] && [ ! -L "$f" ] || fail "$f is not a regular file"; done; }
no_tmp() { [ -z "$(find "$1" -name '*.tmp')" ] || fail "a .tmp is left in $1"; }
victims_kept() { [ "$(victims)" = "$before" ] || { diff <(echo "$before") <(victims); fail "$1"; }; }
# a run whose metrics file and export files are planted links
mkdir -p "$out/run/hf"
ln -s "$out/v/1" "$out/run/metrics.jsonl"
ln -s "$out/v/2" "$out/run/hf/model.safetensors.tmp"
ln -s "$out/v/3" "$out/run/hf/config.json.tmp"
rc=0
"$titan" "${m[@]}" --dump-folder "$out/run" --metrics "$out/run/metrics.jsonl" \
  --out "$out/run/hf" > "$out/train.log" 2>&1 || rc=$?
victims_kept "train wrote through a link (metrics.jsonl or the export)"
[ $rc = 0 ] || { cat "$out/train.log"; fail "train failed"; }
regular "$out/run/metrics.jsonl" "$out/run/hf/model.safetensors" "$out/run/hf/config.json"
[ "$(wc -l < "$out/run/metrics.jsonl")" = 2 ] || fail "metrics.jsonl does not hold 2 steps"
no_tmp "$out/run"
echo "ok: train: metrics.jsonl and the export are regular files, the links replaced"
# a run whose first step folder's temporary is a planted link to a folder elsewhere
mkdir -p "$out/ck/checkpoint"
ln -s "$out/v/dir" "$out/ck/checkpoint/step-1.tmp"
"$titan" "${m[@]}" --dump-folder "$out/ck" > "$out/ck.log" 2>&1 || rc=$?
victims_kept "a step checkpoint was written through step-1.tmp"
[ $rc = 0 ] || { cat "$out/ck.log"; fail "train failed"; }
regular "$out/ck/checkpoint/step-1/metadata.json" "$out/ck/checkpoint/step-1/rank-00000.safetensors"
[ ! -L "$out/ck/checkpoint/step-1" ] || fail "step-1 is a link"
no_tmp "$out/ck"
echo "ok: step checkpoint: step-1 is a real folder of regular files, the link replaced"
# titan convert of a step checkpoint into a folder with planted .tmp links
mkdir -p "$out/conv"
ln -s "$out/v/4" "$out/conv/model.safetensors.tmp"
ln -s "$out/v/5" "$out/conv/config.json.tmp"
"$titan" convert "$out/ck/checkpoint/step-2" "$out/conv" > "$out/convert.log" 2>&1 || rc=$?
victims_kept "convert wrote through a link"
[ $rc = 0 ] || { cat "$out/convert.log"; fail "convert failed"; }
regular "$out/conv/model.safetensors" "$out/conv/config.json"
no_tmp "$out/conv"
"$titan" inspect "$out/conv" > /dev/null || fail "the converted folder does not inspect"
echo "ok: convert: model.safetensors and config.json are regular, the links replaced"
# titan tokenize into a folder with a planted shard .tmp link
mkdir -p "$out/tok"
ln -s "$out/v/6" "$out/tok/shard-00000.tok.tmp"
printf 'one document\n' > "$out/doc.txt"
"$titan" tokenize --tokenizer "$shared/data/test_tokenizer" --data "$out/doc.txt" \
  --out "$out/tok" > "$out/tok.log" 2>&1 || rc=$?
victims_kept "tokenize wrote through a link"
[ $rc = 0 ] || { cat "$out/tok.log"; fail "tokenize failed"; }
regular "$out/tok/shard-00000.tok"
no_tmp "$out/tok"
echo "ok: tokenize: the shard is regular, the link replaced"
