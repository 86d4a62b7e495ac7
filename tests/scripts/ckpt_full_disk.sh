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

# a full disk under the end-of-run HF export (--out): the error names the file and says where
# the finished run's weights are, with the command that exports them (a rerun refuses: the last
# step's checkpoint holds weights only); that command, once there is space, writes the export
rm -rf "${fs:?}"/*
head -c $((1900 * 1024)) /dev/zero > "$fs/filler" # ~100 KB left: the 0.23 MB weights do not fit
"$titan" train --set n_layers=1 --set dim=64 --set n_heads=4 --set n_kv_heads=2 --set head_dim=16 \
  --set ffn_dim=128 --set vocab_size=256 --random-tokens --steps 3 --batch 1 --seq-len 8 \
  --peak-tflops 1 --dump-folder "$out/hfrun" --checkpoint-interval 100 --out "$fs/hf" \
  > "$out/hf.log" 2>&1; rc=$?
[ $rc -eq 1 ] || { echo "FAIL hf: exit status $rc, want 1"; cat "$out/hf.log"; exit 1; }
hint=$(grep -oE "titan: error: $fs/hf/model.safetensors: .*No space left on device; training finished: $out/hfrun/checkpoint/step-3 holds its weights, and \`titan convert [^\`]*\`" "$out/hf.log") ||
  { echo "FAIL hf: no clear error with the way out"; cat "$out/hf.log"; exit 1; }
[ -z "$(ls "$fs/hf")" ] || { echo "FAIL hf: left $(ls "$fs/hf")"; exit 1; }
rm -f "$fs/filler"
cmd=${hint##*\`titan }; cmd=${cmd%\`}
# shellcheck disable=SC2086 # the command as the message gives it
"$titan" $cmd > "$out/convert.log" 2>&1 && [ -f "$fs/hf/model.safetensors" ] && [ -f "$fs/hf/config.json" ] ||
  { echo "FAIL hf: 'titan $cmd' did not write the export"; cat "$out/convert.log"; exit 1; }
echo "ok: full disk under --out: clear error, and 'titan $cmd' wrote the export"
