#!/usr/bin/env bash
# Checkpoint removal never leaves the checkpoint folder: run B's folder holds links to run
# A's checkpoints (step-1, step-2), a stale step-9.tmp link to A's step-4 and a step-5.deleting
# left by a kill during pruning (holding a link to a file outside). B resumes from step-1,
# saves step 2 again (replacing the link), saves up to step 9 and prunes to 2. A's files and
# the outside file must be byte for byte as they were; B's links are unlinked or left alone
# (a warning names step-1), the leftover .deleting is gone at start, nothing is left behind.
set -euo pipefail
titan=$1; out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
m=(train --set n_layers=1 --set dim=64 --set n_heads=4 --set n_kv_heads=2 --set head_dim=16
   --set ffn_dim=64 --set vocab_size=256 --random-tokens --batch 1 --seq-len 16 --peak-tflops 1
   --log-freq 1000 --checkpoint-interval 1 --sync-checkpoint --last-save-full)
"$titan" "${m[@]}" --steps 4 --dump-folder "$out/A" > "$out/a.log"
A=$out/A/checkpoint
digest() { (cd "$1" && find . -type f -exec sha256sum {} + | sort); }
a_before=$(digest "$A")
[ "$(echo "$a_before" | grep -c metadata.json)" = 4 ] || { echo "FAIL: run A saved no 4 steps"; exit 1; }
echo "precious" > "$out/outside.txt"
B=$out/B/checkpoint
mkdir -p "$B/step-5.deleting/sub"
ln -s "$A/step-1" "$B/step-1"
ln -s "$A/step-2" "$B/step-2"
ln -s "$A/step-4" "$B/step-9.tmp"
echo x > "$B/step-5.deleting/rank-00000.safetensors"
ln -s "$out/outside.txt" "$B/step-5.deleting/sub/metadata.json"
ln -s "$A" "$B/step-5.deleting/sub/a"
rc=0
"$titan" "${m[@]}" --steps 9 --keep-latest-k 2 --load-step 1 --dump-folder "$out/B" \
  > "$out/b.log" 2>&1 || rc=$?
[ "$(digest "$A")" = "$a_before" ] ||
  { echo "FAIL: run A's checkpoints changed:"; diff <(echo "$a_before") <(digest "$A"); exit 1; }
[ "$(cat "$out/outside.txt")" = precious ] || { echo "FAIL: a file outside was changed"; exit 1; }
echo "ok: A's checkpoints and the outside file are untouched"
[ $rc = 0 ] || { cat "$out/b.log"; echo "FAIL: run B failed"; exit 1; }
grep -q "resumed from $B/step-1" "$out/b.log" || { cat "$out/b.log"; exit 1; }
[ -L "$B/step-1" ] || { echo "FAIL: the link step-1 was removed (never prune a link)"; exit 1; }
grep -q "warn.*$B/step-1 is not a folder this run wrote" "$out/b.log" ||
  { echo "FAIL: no warning names the link step-1"; exit 1; }
grep -q "removed $B/step-5.deleting, left by an interrupted prune" "$out/b.log" ||
  { echo "FAIL: the leftover step-5.deleting was not finished at start"; exit 1; }
left=$(ls -A "$B" | tr '\n' ' ')
[ "$left" = "step-1 step-8 step-9 " ] || { echo "FAIL: B's folder holds: $left"; exit 1; }
for s in 8 9; do
  [ -d "$B/step-$s" ] && [ ! -L "$B/step-$s" ] && [ -f "$B/step-$s/metadata.json" ] ||
    { echo "FAIL: step-$s is not a real checkpoint folder"; exit 1; }
done
echo "ok: the link step-1 kept and named, step-2 replaced and pruned, leftovers removed"
