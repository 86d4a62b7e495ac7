#!/usr/bin/env bash
# A full disk during a checkpoint save: a clear error naming the folder and "No space left",
# exit status 1, and the previous checkpoint intact and loadable. Uses a 2 MB tmpfs (needs
# root and mount; otherwise the test is skipped with status 77).
set -uo pipefail
titan=$1; out=$(mktemp -d); fs="$out/fs"
mkdir -p "$fs"
if ! mount -t tmpfs -o size=2m tmpfs "$fs" 2>/dev/null; then
  echo "skipped: cannot mount a tmpfs here (needs root)"; rm -rf "$out"; exit 77
fi
trap 'umount "$fs" 2>/dev/null; rm -rf "$out"' EXIT
# ~57k parameters: a checkpoint (weights + AdamW m, v) is ~0.7 MB, so the third one does not fit
args=(train --set n_layers=1 --set dim=64 --set n_heads=4 --set n_kv_heads=2 --set head_dim=16
      --set ffn_dim=128 --set vocab_size=256 --random-tokens --steps 10 --batch 1 --seq-len 8
      --peak-tflops 1 --dump-folder "$fs/run" --checkpoint-interval 1 --keep-latest-k 5
      --sync-checkpoint --last-save-full)
"$titan" "${args[@]}" > "$out/log" 2>&1; rc=$?
grep -E "error" "$out/log"
[ $rc -eq 1 ] || { echo "FAIL: exit status $rc, want 1"; exit 1; }
grep -qE "titan: error: checkpoint at step [0-9]+ failed: .*No space left on device" "$out/log" ||
  { echo "FAIL: no clear full-disk error"; exit 1; }
bad=$(grep -oE "checkpoint at step [0-9]+ failed" "$out/log" | grep -oE "[0-9]+")
good=$((bad - 1))
[ -f "$fs/run/checkpoint/step-$good/metadata.json" ] || { echo "FAIL: step-$good missing"; exit 1; }
[ ! -e "$fs/run/checkpoint/step-$bad" ] || { echo "FAIL: a step-$bad folder exists"; exit 1; }
rm -rf "$fs/run/checkpoint/step-$bad.tmp" # free space, as an operator would
"$titan" "${args[@]}" --stop-after-step "$good" > "$out/resume" 2>&1 ||
  { echo "FAIL: step-$good does not load"; cat "$out/resume"; exit 1; }
grep -q "resumed from .*step-$good" "$out/resume" || { cat "$out/resume"; exit 1; }
echo "ok: full disk at step $bad: clear error; step-$good intact and resumable"
