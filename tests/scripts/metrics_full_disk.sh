#!/usr/bin/env bash
# A full disk under metrics.jsonl: a clear error naming the file and "No space left", exit
# status 1, and the last checkpoint (on another disk) intact and resumable. Uses a 64 KB tmpfs
# (needs root and mount; otherwise the test is skipped with status 77).
set -uo pipefail
titan=$1; out=$(mktemp -d); fs="$out/fs"
mkdir -p "$fs"
if ! mount -t tmpfs -o size=64k tmpfs "$fs" 2>/dev/null; then
  echo "skipped: cannot mount a tmpfs here (needs root)"; rm -rf "$out"; exit 77
fi
trap 'umount "$fs" 2>/dev/null; rm -rf "$out"' EXIT
# about 10 KB left: the JSONL lines (~600 bytes each) fill it in about 16 steps of 40
head -c $((54 * 1024)) /dev/zero > "$fs/filler"
args=(train --set n_layers=1 --set dim=64 --set n_heads=4 --set n_kv_heads=2 --set head_dim=16
      --set ffn_dim=128 --set vocab_size=256 --random-tokens --steps 40 --batch 1 --seq-len 8
      --peak-tflops 1 --dump-folder "$out/run" --checkpoint-interval 2 --sync-checkpoint
      --metrics "$fs/metrics.jsonl")
"$titan" "${args[@]}" > "$out/log" 2>&1; rc=$?
grep -E "error" "$out/log"
[ $rc -eq 1 ] || { echo "FAIL: exit status $rc, want 1"; tail "$out/log"; exit 1; }
grep -qE "titan: error: $fs/metrics.jsonl: cannot write the metrics of step [0-9]+: No space left on device" \
  "$out/log" || { echo "FAIL: no clear full-disk error naming metrics.jsonl"; exit 1; }
bad=$(grep -oE "metrics of step [0-9]+" "$out/log" | grep -oE "[0-9]+")
good=$(( (bad - 1) / 2 * 2 ))
[ "$good" -ge 2 ] || { echo "FAIL: the disk filled at step $bad, too early for the test"; exit 1; }
# the report page (on the other disk) is final: every step written to metrics.jsonl, the error,
# no refresh (it stayed at the last logged step 10, reloading itself as a live run's page)
grep -q "step $((bad - 1)) of 40" "$out/run/report.html" &&
  grep -q '<p class="failed">The run ended with an error: .*metrics.jsonl: cannot write the metrics of step' \
    "$out/run/report.html" && ! grep -q 'http-equiv="refresh"' "$out/run/report.html" ||
  { echo "FAIL: report.html is not final at step $((bad - 1)) with the error"; exit 1; }
[ -f "$out/run/checkpoint/step-$good/metadata.json" ] || { echo "FAIL: step-$good missing"; exit 1; }
[ ! -e "$out/run/checkpoint/step-$((good + 2))" ] || { echo "FAIL: a checkpoint past it"; exit 1; }
rm -f "$fs/filler" # free space, as an operator would
"$titan" "${args[@]}" --stop-after-step $((good + 2)) > "$out/resume" 2>&1 ||
  { echo "FAIL: step-$good does not resume"; cat "$out/resume"; exit 1; }
grep -q "resumed from .*step-$good" "$out/resume" || { cat "$out/resume"; exit 1; }
want=$(seq 1 $((good + 2)) | tr '\n' ' ')
got=$(grep -o '"step": [0-9]*' "$fs/metrics.jsonl" | cut -d' ' -f2 | tr '\n' ' ')
[ "$got" = "$want" ] || { echo "FAIL: metrics.jsonl holds steps $got, want $want"; exit 1; }
echo "ok: full disk at step $bad: clear error naming metrics.jsonl; step-$good intact, resumed, \
metrics.jsonl whole"
