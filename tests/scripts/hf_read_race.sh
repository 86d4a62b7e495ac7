#!/usr/bin/env bash
# A Hugging Face folder re-exported while titan reads it: titan generate had taken the index
# and first shard of one model and the second shard of the other, and sampled from the mix
# with exit 0 (a concurrent-access audit's finding). strace holds generate's open of the second
# shard 10 s while `titan convert` replaces the folder; generate must refuse, naming the file.
# Skipped (77) without strace or ptrace.
set -uo pipefail
titan=$1; out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
# (LeakSanitizer cannot run under ptrace: off for the traced commands)
command -v strace > /dev/null && strace -o /dev/null true 2> /dev/null ||
  { echo "skipped: no strace, or ptrace not permitted"; exit 77; }
m=(--set n_layers=2 --set dim=64 --set n_heads=4 --set n_kv_heads=2 --set head_dim=16
   --set ffn_dim=128 --set vocab_size=2000 --random-tokens --batch 1 --seq-len 8 --peak-tflops 1)
"$titan" train "${m[@]}" --steps 2 --checkpoint-interval 1 --last-save-full --lr 0.05 \
  --dump-folder "$out/run" > "$out/train.log" 2>&1 || { cat "$out/train.log"; exit 1; }
ck=$out/run/checkpoint
"$titan" convert "$ck/step-1" "$out/hf" --max-shard-size 300KB > /dev/null 2>&1 &&
  [ -f "$out/hf/model.safetensors.index.json" ] || { echo "FAIL: no sharded export"; exit 1; }
second=$(ls "$out/hf"/model-00002-of-*.safetensors) || { echo "FAIL: one shard only"; exit 1; }
gen=(generate --model "$out/hf" --bytes --ids --prompt "ab" --max-new-tokens 4 --temperature 0)
ASAN_OPTIONS=detect_leaks=0 strace -f -o /dev/null -P "$second" -e trace=openat -e inject=openat:delay_enter=10000000:when=1 \
  "$titan" "${gen[@]}" > "$out/gen.out" 2> "$out/gen.err" &
g=$!
# generate has read the index and mapped the first shard (then it waits at the second's open):
# its maps name the first shard (polled, however loaded the machine; a fixed sleep was a race)
first=$(ls "$out/hf"/model-00001-of-*.safetensors)
for _ in $(seq 600); do
  kid=$(pgrep -P $g | head -1 || true)
  [ -n "$kid" ] && grep -qF "$first" "/proc/$kid/maps" 2>/dev/null && break
  kill -0 $g 2>/dev/null || break
  sleep 0.1
done
[ -n "$kid" ] && grep -qF "$first" "/proc/$kid/maps" 2>/dev/null ||
  { echo "FAIL: generate never mapped $first: $(tail -3 "$out/gen.err")"; exit 1; }
"$titan" convert "$ck/step-2" "$out/hf" --max-shard-size 300KB > "$out/conv.log" 2>&1 ||
  { cat "$out/conv.log"; exit 1; }
wait $g; rc=$?
if [ $rc -eq 1 ] && grep -q "replaced while titan read $out/hf" "$out/gen.err"; then
  echo "ok: a folder re-exported while generate read it: refused, naming the replaced file"
else
  echo "FAIL: generate rc $rc: $(cat "$out/gen.err" | tail -3)"; exit 1
fi
# the same reads, undisturbed, load the new export
"$titan" "${gen[@]}" > /dev/null 2>&1 || { echo "FAIL: the new export does not load"; exit 1; }
echo "ok: the replaced folder then reads as the new export"
