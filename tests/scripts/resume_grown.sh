#!/usr/bin/env bash
# A resume on a dataset that grew after the checkpoint continues at the saved position: 3 steps
# on the data as it was, a checkpoint, the data grown, 3 more steps from step-3. The first 3
# steps read less than one epoch of the old data, so they are the first 3 of a run over the
# grown data too: the resumed steps 4..6 must be bitwise those of a straight 6-step run over the
# grown data (losses and gradient norms, %.17g), and differ from a run over the old data (they
# read the new documents). Covered: a JSON Lines file appended to (byte tokens), a text file
# appended to (Tiny Shakespeare's paragraphs, byte tokens), a glob of titan tokenize folders
# gaining a folder of shards (the test tokenizer), and, given an mpirun, a JSONL file on 2
# data-parallel ranks (each resumes its own position, in its own documents). Refused, by name: a
# rewrite inside the bytes read that also grew, a shrink, a JSONL field changed, a folder of the
# glob that a tokenize still writes (its mark).
set -euo pipefail
titan=$1; shared=$2; mpirun=${3:-}; out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
launch=() # how titan runs: one process, or under mpirun (the 2-rank case)
tok=$shared/data/test_tokenizer
model=(--set n_layers=2 --set dim=64 --set n_heads=4 --set n_kv_heads=2 --set head_dim=16
       --set ffn_dim=128 --steps 6 --batch 2 --seq-len 24 --lr 3e-3 --warmup 3 --seed 7
       --peak-tflops 1 --log-freq 100)
field() { grep -o "\"$2\": [^,}]*" "$1"; }
# name, the data as it was (made), grow (a command), data args...: the resumed run against the
# straight runs over the grown and the old data
grown() {
  local name=$1 grow=$2; shift 2
  "${launch[@]}" "$titan" train "${model[@]}" "$@" --metrics "$out/$name-old.jsonl" \
      --dump-folder "$out/$name-old" > /dev/null
  "${launch[@]}" "$titan" train "${model[@]}" "$@" --metrics "$out/$name-a.jsonl" --dump-folder "$out/$name" \
      --checkpoint-interval 3 --stop-after-step 3 > /dev/null
  for k in setup before name; do
    grep -q "\"$k\": \"[0-9a-f]\{16\}\"" "$out/$name/checkpoint/step-3/metadata.json" ||
      { echo "FAIL $name: step-3 records no \"$k\""; exit 1; }
  done
  cp -r "$out/$name/checkpoint/step-3" "$out/$name-step3"
  $grow
  "${launch[@]}" "$titan" train "${model[@]}" "$@" --metrics "$out/$name-full.jsonl" \
      --dump-folder "$out/$name-full" > /dev/null
  "${launch[@]}" "$titan" train "${model[@]}" "$@" --metrics "$out/$name-b.jsonl" --dump-folder "$out/$name" \
      --checkpoint-interval 3 > "$out/$name.log" 2>&1 ||
    { echo "FAIL $name: the resume on the grown data failed"; cat "$out/$name.log"; exit 1; }
  grep -q "resumed from $out/$name/checkpoint/step-3" "$out/$name.log" ||
    { echo "FAIL $name: did not resume from step 3"; cat "$out/$name.log"; exit 1; }
  grep -q "data: .* grew since the checkpoint (.*): resuming at its saved position (epoch 0, document [0-9]*); the new data is read after it" "$out/$name.log" ||
    { echo "FAIL $name: no line saying the data grew"; cat "$out/$name.log"; exit 1; }
  [ "$(field "$out/$name-b.jsonl" step | tr '\n' ' ')" = '"step": 4 "step": 5 "step": 6 ' ] ||
    { echo "FAIL $name: the resumed run's steps"; cat "$out/$name-b.jsonl"; exit 1; }
  for f in loss grad_norm; do
    diff <(field "$out/$name-full.jsonl" $f | tail -3) <(field "$out/$name-b.jsonl" $f) > /dev/null ||
      { echo "FAIL $name: steps 4..6 resumed on the grown data differ in $f from a run over it"
        diff <(field "$out/$name-full.jsonl" $f | tail -3) <(field "$out/$name-b.jsonl" $f); exit 1; }
  done
  ! diff <(field "$out/$name-old.jsonl" loss | tail -3) <(field "$out/$name-b.jsonl" loss) > /dev/null ||
    { echo "FAIL $name: steps 4..6 read no new data (the old data's losses)"; exit 1; }
  echo "ok $name: resumed at step 3 on the grown data; steps 4..6 are a straight run's over it"
}
# name, regex, folder (a copy of a step-3 checkpoint goes there), data args...
refused() {
  local name=$1 re=$2 src=$3; shift 3
  rm -rf "$out/r" && mkdir -p "$out/r/checkpoint" && cp -r "$src" "$out/r/checkpoint/step-3"
  if "$titan" train "${model[@]}" "$@" --dump-folder "$out/r" --checkpoint-interval 3 \
      > "$out/r.log" 2>&1; then
    echo "FAIL $name: resumed"; cat "$out/r.log"; exit 1; fi
  grep -qE "$re" "$out/r.log" || { echo "FAIL $name:"; cat "$out/r.log"; exit 1; }
  echo "ok $name refused: $(grep -oE "$re" "$out/r.log" | head -1)"
}
bytes=(--set vocab_size=256)
# JSON Lines: 156 byte tokens an epoch, 150 read by step 3
doc() { printf '{"text": "%s"}\n' "$@"; }
doc "The quick brown fox jumps over the lazy dog." "Pack my box with five dozen liquor jugs." \
    "How vexingly quick daft zebras jump!" "Sphinx of black quartz, judge my vow." > "$out/docs.jsonl"
cp "$out/docs.jsonl" "$out/docs.orig"
grow_jsonl() { doc "Jackdaws love my big sphinx of quartz." "The five boxing wizards jump quickly." \
                   "Bright vixens jump; dozy fowl quack." >> "$out/docs.jsonl"; }
grown jsonl grow_jsonl --data "$out/docs.jsonl" "${bytes[@]}"
# the bytes the run read rewritten (one letter), and grown: refused; shrunk: refused
sed 's/lazy dog/lazy cat/' "$out/docs.jsonl" > "$out/docs.edit" && mv "$out/docs.edit" "$out/docs.jsonl"
refused "a grown JSONL file with a byte changed in what was read" \
  "docs.jsonl: grew since the checkpoint \(209 bytes then, [0-9]+ now\), but its first 209 bytes are not the ones the run read" \
  "$out/jsonl-step3" --data "$out/docs.jsonl" "${bytes[@]}"
head -c 150 "$out/docs.orig" > "$out/docs.jsonl"
refused "a shrunk JSONL file" "docs.jsonl: 150 bytes now, 209 when the run read it: shrunk" \
  "$out/jsonl-step3" --data "$out/docs.jsonl" "${bytes[@]}"
cp "$out/docs.orig" "$out/docs.jsonl" && grow_jsonl
refused "another JSONL field" "belongs to another dataset or setup \(the JSONL field" \
  "$out/jsonl-step3" --data "$out/docs.jsonl" "${bytes[@]}" --data-field body
# text: Tiny Shakespeare's first 4 paragraphs (200 byte tokens with their blank lines), then 8
awk 'BEGIN { RS = ""; ORS = "\n\n" } NR <= 4' "$shared/data/tinyshakespeare/input.txt" > "$out/play.txt"
grow_text() {
  awk 'BEGIN { RS = ""; ORS = "\n\n" } NR > 4 && NR <= 12' "$shared/data/tinyshakespeare/input.txt" \
    >> "$out/play.txt"; }
grown text grow_text --data "$out/play.txt" "${bytes[@]}"
# token shards: a glob over titan tokenize folders (4 documents, 240 tokens with bos and eos, in
# 2 shards), a new folder tokenized beside the first
mkdir -p "$out/parts"
for i in $(seq 1 4); do doc "Line $i of the first part: the shards a pipeline wrote before training."; done \
  > "$out/part0.jsonl"
for i in $(seq 1 3); do doc "Line $i of the second part, written while the run trained."; done \
  > "$out/part1.jsonl"
"$titan" tokenize --tokenizer "$tok" --data "$out/part0.jsonl" --out "$out/parts/p0" \
  --shard-tokens 64 > /dev/null
grow_shards() {
  "$titan" tokenize --tokenizer "$tok" --data "$out/part1.jsonl" --out "$out/parts/p1" \
    --shard-tokens 64 > /dev/null; }
# while a tokenize writes p1 (its mark): refused before any position is looked at
grown shards grow_shards --data "$out/parts/*/shard-*.tok" --tokenizer "$tok"
touch "$out/parts/p1/.titan-tokenize-unfinished"
refused "a glob folder a tokenize still writes" "parts/p1: a titan tokenize is writing this folder" \
  "$out/shards-step3" --data "$out/parts/*/shard-*.tok" --tokenizer "$tok"
rm "$out/parts/p1/.titan-tokenize-unfinished"
# 2 data-parallel ranks, fp32 (a rank reads documents i mod 2 = its rank: 118 and 112 byte
# tokens of the 6 documents, 75 read by step 3 with a batch of 1)
if [ -n "$mpirun" ]; then
  # (under `make asan` without leak checking, as every dist_* test: Open MPI's own allocations)
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
  export ASAN_OPTIONS=detect_leaks=0
  launch=(timeout 120 "$mpirun" -np 2 -x OMP_NUM_THREADS=1 -x ASAN_OPTIONS)
  cp "$out/docs.orig" "$out/docs2.jsonl"
  doc "Jackdaws love my big sphinx of quartz." "The five boxing wizards jump quickly." >> "$out/docs2.jsonl"
  grow_dp2() { doc "Bright vixens jump; dozy fowl quack." "Quick wafting zephyrs vex bold Jim." \
                 >> "$out/docs2.jsonl"; }
  grown jsonl_dp2 grow_dp2 --data "$out/docs2.jsonl" "${bytes[@]}" --batch 1 \
    --training.mixed_precision_param=float32
  [ "$(grep -c "grew since the checkpoint" "$out/jsonl_dp2.log")" = 2 ] ||
    { echo "FAIL 2 ranks: not a growth line from each rank"; exit 1; }
fi
