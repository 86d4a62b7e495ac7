#!/usr/bin/env bash
# A checkpoint folder the run cannot list, or a step's metadata.json it cannot read, stops the
# resume naming it (they were taken for no checkpoint: the run went back to an older step, or
# started over and replaced the checkpoints it could not read, without a word; an audit's
# finding). Needs root (to run titan as nobody: root reads everything); skipped (77) otherwise.
set -uo pipefail
titan=$1; out=$(mktemp -d); trap 'chmod -R u+rwX "$out" 2>/dev/null; rm -rf "$out"' EXIT
[ "$(id -u)" = 0 ] && command -v setpriv > /dev/null || { echo "skip: needs root and setpriv"; exit 77; }
chmod 777 "$out"
nobody=(setpriv --reuid=65534 --regid=65534 --clear-groups env HOME=/nonexistent)
bin=$out/titan; cp "$titan" "$bin"; chmod 755 "$bin" # a copy nobody can run whatever the tree
m=(train --set n_layers=1 --set dim=64 --set n_heads=4 --set n_kv_heads=2 --set head_dim=16
   --set ffn_dim=128 --set vocab_size=300 --random-tokens --batch 1 --seq-len 8 --threads 1
   --peak-tflops 1 --checkpoint-interval 2 --last-save-full --dump-folder "$out/run")
"${nobody[@]}" "$bin" "${m[@]}" --steps 4 > "$out/a.log" 2>&1 || { cat "$out/a.log"; exit 1; }
ck=$out/run/checkpoint
fail=0
chmod 000 "$ck/step-4/metadata.json"
"${nobody[@]}" "$bin" "${m[@]}" --steps 6 > "$out/b.log" 2>&1; rc=$?
# a named load_step past it loads: the user chose the older step (a damaged newest's way out)
"${nobody[@]}" "$bin" "${m[@]}" --steps 4 --checkpoint.load_step 2 --checkpoint.load_only true \
  > "$out/b2.log" 2>&1; rc2=$?
chmod 644 "$ck/step-4/metadata.json"
grep -q "resumed from $ck/step-2" "$out/b2.log" && [ $rc2 = 0 ] &&
  echo "ok   load_step 2 beside an unreadable step-4: loads" ||
  { echo "FAIL load_step 2 beside an unreadable step-4 (rc $rc2):"; tail -3 "$out/b2.log"; fail=1; }
if [ $rc != 0 ] && grep -q "$ck/step-4/metadata.json: cannot read: Permission denied" "$out/b.log" &&
   ! grep -q "resumed from" "$out/b.log" && [ ! -e "$ck/step-6" ]; then
  echo "ok   an unreadable metadata.json: refused, named"
else echo "FAIL an unreadable metadata.json (rc $rc):"; grep -v 'titan info' "$out/b.log" | tail -5; fail=1; fi
chmod 0333 "$ck"
"${nobody[@]}" "$bin" "${m[@]}" --steps 6 > "$out/c.log" 2>&1; rc=$?
chmod 0755 "$ck"
if [ $rc != 0 ] && grep -q "$ck: cannot list the checkpoint folder: Permission denied" "$out/c.log" &&
   [ "$(ls "$ck" | tr '\n' ' ')" = "step-2 step-4 " ]; then
  echo "ok   an unlistable checkpoint folder: refused, named, its checkpoints untouched"
else echo "FAIL an unlistable checkpoint folder (rc $rc):"; grep -v 'titan info' "$out/c.log" | tail -5; ls -a "$ck"; fail=1; fi
# a step-N that is a file is no checkpoint (warned, as before), not a refusal
touch "$ck/step-9"
"${nobody[@]}" "$bin" "${m[@]}" --steps 4 --checkpoint.load_only true > "$out/f.log" 2>&1; rc=$?
rm -f "$ck/step-9"
[ $rc = 0 ] && grep -q "resumed from $ck/step-4" "$out/f.log" && echo "ok   a file named step-9: passed over" ||
  { echo "FAIL a file named step-9 (rc $rc):"; grep -v 'titan info' "$out/f.log" | tail -3; fail=1; }
# convert / inspect of the folder say the same
chmod 0333 "$ck"
"${nobody[@]}" "$bin" inspect "$ck" > "$out/d.log" 2>&1; rc=$?
chmod 0755 "$ck"
[ $rc != 0 ] && grep -q "cannot list the checkpoint folder" "$out/d.log" &&
  echo "ok   inspect of an unlistable folder: named" ||
  { echo "FAIL inspect of an unlistable folder (rc $rc):"; tail -3 "$out/d.log"; fail=1; }
exit $fail
