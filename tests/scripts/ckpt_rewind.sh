#!/usr/bin/env bash
# Saves after a checkpoint.load_step rewind, into a folder holding an earlier run's newer
# steps: a last_save_in_hf export replaces the old step-N whole (never HF files beside the
# old titan shards, which every reader would take), atomically (an export that fails, or is
# killed, leaves the old step-N); keep_latest_k never prunes the step just saved.
set -euo pipefail
titan=$1; shared=$2; out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
M=(--set n_layers=1 --set dim=64 --set n_heads=4 --set n_kv_heads=2 --set head_dim=16
   --set ffn_dim=128 --set vocab_size=300 --seq-len 16 --batch 1 --peak-tflops 1
   --random-tokens --log-freq 100)
fail() { echo "FAIL $*"; exit 1; }
ck="$out/hf/checkpoint"
# run A: titan step-3 and step-6; run B rewinds to step 3 and saves its last step in HF
"$titan" train "${M[@]}" --steps 6 --checkpoint-interval 3 --keep-latest-k 0 \
  --dump-folder "$out/hf" > /dev/null
cp -r "$ck/step-6" "$out/step6-a"
# an export that fails half way (a tokenizer file that is a folder): step-6 untouched
cp -r "$shared/data/test_tokenizer" "$out/tok" && mkdir "$out/tok/chat_template.jinja"
B=(train "${M[@]}" --steps 6 --checkpoint-interval 3 --keep-latest-k 0 --dump-folder "$out/hf"
   --load-step 3 --lr 3e-3 --checkpoint.last_save_in_hf)
if "$titan" "${B[@]}" --model.hf_assets_path "$out/tok" > "$out/b1.log" 2>&1; then
  fail "an export with a folder for a tokenizer file succeeded"; fi
diff -r "$out/step6-a" "$ck/step-6" > /dev/null ||
  fail "a failed export changed the old step-6: $(ls "$ck/step-6" | tr '\n' ' ')"
echo "ok a failed last_save_in_hf export leaves the old step-6 as it was"
"$titan" "${B[@]}" > "$out/b2.log" 2>&1 || { cat "$out/b2.log"; fail "run B"; }
grep -q "removed .*step-6.tmp, left by an interrupted save" "$out/b2.log" ||
  { cat "$out/b2.log"; fail "the failed export's step-6.tmp was not cleaned up"; }
[ "$(ls "$ck/step-6" | tr '\n' ' ')" = "config.json model.safetensors " ] ||
  fail "step-6 after the export holds $(ls "$ck/step-6" | tr '\n' ' ')"
[ "$(ls "$ck" | tr '\n' ' ')" = "step-3 step-6 " ] || fail "left $(ls "$ck" | tr '\n' ' ')"
echo "ok the export replaces the earlier run's titan step-6 whole"
# killed between moving the old step-6 aside and renaming the new one in: put back at start
cp -r "$ck/step-6" "$out/step6-b" && mv "$ck/step-6" "$ck/step-6.old"
"$titan" "${B[@]}" --stop-after-step 3 > "$out/b3.log" 2>&1 || { cat "$out/b3.log"; fail "run C"; }
grep -q "step-6.old put back as .*step-6" "$out/b3.log" && diff -r "$out/step6-b" "$ck/step-6" ||
  { cat "$out/b3.log"; fail "an export's step-6.old was not put back"; }
echo "ok an export's step-6.old (killed between the renames) is put back"
# keep_latest_k after a rewind: run A saved steps 2..10; run B rewinds to step 2 and keeps 3.
# Its saves (4, replacing A's, and 5) stay: pruning counts only steps up to the one just saved
# (it deleted both while logging them saved); A's newer steps are named once at the start.
R=(train "${M[@]}" --steps 10 --checkpoint-interval 2 --last-save-full --dump-folder "$out/rw")
"$titan" "${R[@]}" --keep-latest-k 0 > /dev/null
cp -r "$out/rw" "$out/sg" # for the SIGTERM case below
"$titan" "${R[@]}" --keep-latest-k 3 --load-step 2 --stop-after-step 5 > "$out/rw.log" 2>&1 ||
  { cat "$out/rw.log"; fail "the rewound run"; }
for s in 4 5; do
  grep -q "step $s saved to $out/rw/checkpoint/step-$s" "$out/rw.log" &&
    [ -f "$out/rw/checkpoint/step-$s/metadata.json" ] ||
    { cat "$out/rw.log"; ls "$out/rw/checkpoint"; fail "step-$s logged as saved is gone"; }
done
[ "$(grep -c "load_step rewinds to step-2, but $out/rw/checkpoint holds newer checkpoints of an earlier run: step-4, step-6, step-8, step-10\. .*picks the newest of them, step-10" "$out/rw.log")" = 1 ] ||
  { cat "$out/rw.log"; fail "the newer steps of the earlier run were not named once"; }
echo "ok after a rewind keep_latest_k keeps the steps just saved; the earlier run's newer steps are named"
# the same under SIGTERM: the step the stop message names exists (the run is long, so the
# signal lands mid-run; the earlier run's step-99990/99992 stay newer than any step it saves)
for s in 99990 99992; do
  cp -r "$out/sg/checkpoint/step-6" "$out/sg/checkpoint/step-$s"
  sed -i "s/\"step\": 6/\"step\": $s/g; /^ \"crc32c\": /d" "$out/sg/checkpoint/step-$s/metadata.json"
done
"$titan" train "${M[@]}" --steps 100000 --checkpoint-interval 100000 --dump-folder "$out/sg" \
  --keep-latest-k 2 --load-step 2 --metrics "$out/sig.jsonl" > "$out/sig.log" 2>&1 &
pid=$!
lines=0
for _ in $(seq 6000); do # 300 s, however loaded the machine
  lines=$(cat "$out/sig.jsonl" 2>/dev/null | grep -c . || true)
  [ "$lines" -ge 3 ] && break
  kill -0 $pid 2>/dev/null || { cat "$out/sig.log"; fail "the signalled run exited early"; }
  sleep 0.05
done
[ "$lines" -ge 3 ] || { kill -9 $pid; cat "$out/sig.log"; fail "no third step in 300 s"; }
kill -TERM $pid; rc=0; wait $pid || rc=$?
[ $rc = 143 ] || { cat "$out/sig.log"; fail "exit status $rc after SIGTERM, want 143"; }
named=$(grep -o "the last complete checkpoint is [^ ]*" "$out/sig.log" | cut -d' ' -f6)
[ -n "$named" ] && [ -f "$named/metadata.json" ] ||
  { cat "$out/sig.log"; ls "$out/sg/checkpoint"; fail "the stop named ${named:-nothing}, which is gone"; }
echo "ok after a rewind the SIGTERM save ${named##*/} is kept and named"
