#!/usr/bin/env bash
# A run started beside a titan tokenize writing its data folder: never trained on the shards
# written so far (a concurrent-access audit's finding: it had trained on 1 of 4 shards, exit
# 0). The run's check of the tokenize's mark is held open 10 s by strace (-P: that path's
# access only) while the tokenize, its renames held, writes its first shard; the run's
# listing then holds that shard alone, and it must refuse the folder. Skipped (77) without
# strace or ptrace.
set -uo pipefail
titan=$1; tokenizer=$2; python=$3; out=$(mktemp -d)
cleanup() { # the held tokenize: strace's child first (it would be reparented), then strace
  [ -n "$tok" ] && { pkill -KILL -P "$tok"; kill -KILL "$tok"; wait "$tok"; } 2>/dev/null
  rm -rf "$out"
}
trap cleanup EXIT
tok=
# (LeakSanitizer cannot run under ptrace: off for the traced commands)
command -v strace > /dev/null && strace -o /dev/null true 2> /dev/null ||
  { echo "skipped: no strace, or ptrace not permitted"; exit 77; }
"$python" -c "
import sys
with open(sys.argv[1], 'w') as f:
    for i in range(20000): f.write('document %d with a few words\\n\\n' % i)" "$out/d.txt"
mkdir "$out/tk"
mark="$out/tk/.titan-tokenize-unfinished"
ASAN_OPTIONS=detect_leaks=0 strace -f -o /dev/null -P "$mark" -e trace=access -e inject=access:delay_exit=10000000:when=1 \
  "$titan" train --set n_layers=1 --set dim=64 --set n_heads=4 --set n_kv_heads=2 \
  --set head_dim=16 --set ffn_dim=128 --set vocab_size=2048 --tokenizer "$tokenizer" \
  --data "$out/tk" --steps 1 --batch 1 --seq-len 8 --peak-tflops 1 --dump-folder "$out/run" \
  > "$out/train.log" 2>&1 &
tr=$!
sleep 1 # the run is inside its first check, which found no mark
ASAN_OPTIONS=detect_leaks=0 strace -f -o /dev/null -e trace=rename,renameat,renameat2 \
  -e inject=rename,renameat,renameat2:delay_exit=60000000 \
  "$titan" tokenize --data "$out/d.txt" --tokenizer "$tokenizer" --out "$out/tk" \
  --shard-tokens 5000 --threads 1 > "$out/tok.log" 2>&1 &
tok=$!
for _ in $(seq 160); do [ -e "$out/tk/shard-00000.tok" ] && break; sleep 0.05; done
[ -e "$out/tk/shard-00000.tok" ] || { echo "skipped: the tokenize wrote no shard in 8 s"; exit 77; }
wait $tr; rc=$?
if [ $rc -eq 1 ] && grep -q "tk: a titan tokenize is writing this folder" "$out/train.log"; then
  echo "ok: a run started beside a tokenize refuses its folder (it had trained on its first shard)"
else
  echo "FAIL: rc $rc"; grep -E "data:|error" "$out/train.log"; exit 1
fi
