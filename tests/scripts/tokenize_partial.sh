#!/usr/bin/env bash
# titan tokenize failing midway (a disk full: a 200 KiB tmpfs in a private mount namespace)
# removes the shards it wrote before the failure and says so: a folder with some of them had
# looked complete and trained on part of the data without a word (an audit's finding).
# Skipped (77) without mount namespaces (root).
set -uo pipefail
titan=$1; tokenizer=$2; python=$3; out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
printf 'one two\n\nthree four\n' > "$out/small.txt"
# a killed tokenize (SIGKILL: no cleanup runs) leaves its mark: every reader refuses the
# folder, naming it, and so does a new tokenize into it (its shards had trained as the whole
# dataset when the kill fell between two shards)
"$python" -c "
import sys
with open(sys.argv[1], 'w') as f:
    for i in range(400000): f.write('document %d with a few words\\n\\n' % i)" "$out/kill.txt"
"$titan" tokenize --tokenizer "$tokenizer" --data "$out/kill.txt" --out "$out/kt" --shard-tokens 5000 \
  --threads 1 > /dev/null 2>&1 &
pid=$!
for _ in $(seq 400); do [ -e "$out/kt/shard-00003.tok" ] && break; sleep 0.05; done
kill -KILL $pid; wait $pid 2>/dev/null
rm -f "$out"/kt/*.tok.tmp # as if the kill fell between two shards
"$titan" data --data "$out/kt" --tokenizer "$tokenizer" > /dev/null 2> "$out/kt.log"
"$titan" data --data "$out/kt/shard-*.tok" --tokenizer "$tokenizer" > /dev/null 2> "$out/ktg.log"
"$titan" tokenize --tokenizer "$tokenizer" --data "$out/small.txt" --out "$out/kt" > "$out/kt2.log" 2>&1
if grep -q "kt: a titan tokenize is writing this folder, or one stopped midway" "$out/kt.log" &&
   grep -q "a titan tokenize is writing this folder, or one stopped midway" "$out/ktg.log" &&
   grep -q "already holds .tok shards" "$out/kt2.log"; then
  echo "ok   a killed tokenize's folder: refused by readers (folder and glob) and by tokenize"
else echo "FAIL a killed tokenize's folder:"; cat "$out/kt.log" "$out/ktg.log" "$out/kt2.log"; exit 1; fi
# a killed tokenize's unfinished shard-N.tok.tmp in the folder: named as such when read (it
# had been called binary data, or a bad magic)
"$titan" tokenize --tokenizer "$tokenizer" --data "$out/small.txt" --out "$out/k" > /dev/null 2>&1
head -c 100 "$out/k/shard-00000.tok" > "$out/k/shard-00001.tok.tmp"
"$titan" data --data "$out/k" --tokenizer "$tokenizer" > /dev/null 2> "$out/k.log"
grep -q "shard-00001.tok.tmp: an unfinished shard of a titan tokenize that was stopped" "$out/k.log" &&
  echo "ok   a killed tokenize's unfinished shard: named" ||
  { echo "FAIL a killed tokenize's unfinished shard:"; cat "$out/k.log"; exit 1; }
unshare -m --propagation private true 2>/dev/null || { echo "skip: no mount namespaces"; exit 77; }
"$python" - "$out/big.txt" <<'PY'
import random, sys
random.seed(1)
with open(sys.argv[1], "w") as f:
    for i in range(3000):
        f.write(" ".join(random.choice(["alpha", "beta", "gamma", "delta"]) for _ in range(60)) + "\n\n")
PY
mkdir -p "$out/full"
unshare -m --propagation private bash -c 'mount -t tmpfs -o size=200k none "$1" || exit 77
  "$2" tokenize --tokenizer "$3" --data "$4" --out "$1/tk" --shard-tokens 20000 --threads 1 \
    > "$5/log" 2>&1; echo "rc=$?" >> "$5/log"; ls -A "$1/tk" > "$5/left"' _ \
  "$out/full" "$titan" "$tokenizer" "$out/big.txt" "$out"
[ $? = 77 ] && { echo "skip: no tmpfs"; exit 77; }
if grep -q "rc=1" "$out/log" && grep -q "No space left on device ([0-9]* shards written before it removed" "$out/log" &&
   [ ! -s "$out/left" ]; then
  echo "ok   a tokenize that fails midway leaves no shard: $(grep -o '[0-9]* shards written' "$out/log")"
else echo "FAIL a tokenize that fails midway:"; cat "$out/log"; echo "left: $(cat "$out/left")"; exit 1; fi
