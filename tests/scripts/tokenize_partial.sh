#!/usr/bin/env bash
# titan tokenize failing midway (a disk full: a 200 KiB tmpfs in a private mount namespace)
# removes the shards it wrote before the failure and says so: a folder with some of them had
# looked complete and trained on part of the data without a word (an audit's finding).
# Skipped (77) without mount namespaces (root).
set -uo pipefail
titan=$1; tokenizer=$2; python=$3; out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
# a killed tokenize's unfinished shard-N.tok.tmp in the folder: named as such when read (it
# had been called binary data, or a bad magic)
printf 'one two\n\nthree four\n' > "$out/small.txt"
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
if grep -q "rc=1" "$out/log" && grep -q "No space left on device (the [0-9]* shards written before it are removed" "$out/log" &&
   [ ! -s "$out/left" ]; then
  echo "ok   a tokenize that fails midway leaves no shard: $(grep -o 'the [0-9]* shards' "$out/log")"
else echo "FAIL a tokenize that fails midway:"; cat "$out/log"; echo "left: $(cat "$out/left")"; exit 1; fi
