#!/usr/bin/env bash
# A keep_latest_k prune that cannot remove an old step (here a mount point: rename fails with
# EBUSY) warns and training goes on, as torchtitan's purge: the save itself is complete. (It
# failed the run, reporting the complete save as failed.) Needs root and mount; else skipped
# with status 77.
set -uo pipefail
titan=$1; out=$(mktemp -d); ck="$out/run/checkpoint"
args=(train --set n_layers=1 --set dim=64 --set n_heads=4 --set n_kv_heads=2 --set head_dim=16
      --set ffn_dim=128 --set vocab_size=300 --random-tokens --steps 8 --batch 1 --seq-len 8
      --peak-tflops 1 --log-freq 100 --dump-folder "$out/run" --checkpoint-interval 2
      --last-save-full)
"$titan" "${args[@]}" --keep-latest-k 0 --stop-after-step 4 > /dev/null 2>&1 ||
  { echo "FAIL: first run"; rm -rf "$out"; exit 1; }
mkdir "$ck/step-1"
if ! mount -t tmpfs -o size=1m tmpfs "$ck/step-1" 2>/dev/null; then
  echo "skipped: cannot mount a tmpfs here (needs root)"; rm -rf "$out"; exit 77
fi
trap 'umount "$ck/step-1" 2>/dev/null; rm -rf "$out"' EXIT
sed 's/"step": 2/"step": 1/g; /^ "crc32c": /d' "$ck/step-2/metadata.json" > "$ck/step-1/metadata.json"
"$titan" "${args[@]}" --keep-latest-k 2 > "$out/log" 2>&1; rc=$?
[ $rc -eq 0 ] || { cat "$out/log"; echo "FAIL: exit status $rc, want 0"; exit 1; }
[ "$(grep -c "checkpoint: $ck/step-1: cannot remove old checkpoint: Device or resource busy; it is kept" "$out/log")" = 2 ] ||
  { cat "$out/log"; echo "FAIL: no warning for each prune of the busy step-1"; exit 1; }
[ "$(ls "$ck" | tr '\n' ' ')" = "step-1 step-6 step-8 " ] ||
  { echo "FAIL: left $(ls "$ck" | tr '\n' ' '), want step-1 step-6 step-8"; exit 1; }
echo "ok: a busy old step is warned about and kept; training and pruning go on"
