#!/usr/bin/env bash
# A full disk under metrics.jsonl or the TensorBoard events: the step that could not be logged
# is saved (the checkpoints are on another disk) and the run stops, exit status 1, with a clear
# error naming the file, "No space left" and the checkpoint; the file holds whole lines /
# records only; the same command resumes from that step, saying which line is missing.
# Uses a 64 KB tmpfs (needs root and mount; otherwise the test is skipped with status 77).
set -uo pipefail
titan=$1; py=${2:-}; out=$(mktemp -d); fs="$out/fs"
mkdir -p "$fs"
if ! mount -t tmpfs -o size=64k tmpfs "$fs" 2>/dev/null; then
  echo "skipped: cannot mount a tmpfs here (needs root)"; rm -rf "$out"; exit 77
fi
trap 'umount "$fs" 2>/dev/null; rm -rf "$out"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
model=(--set n_layers=1 --set dim=64 --set n_heads=4 --set n_kv_heads=2 --set head_dim=16
       --set ffn_dim=128 --set vocab_size=256 --random-tokens --steps 40 --batch 1 --seq-len 8
       --peak-tflops 1 --checkpoint-interval 4 --sync-checkpoint)

# 1. metrics.jsonl: about 10 KB left, the lines (~600 bytes each) fill it in about 16 steps
head -c $((54 * 1024)) /dev/zero > "$fs/filler"
args=(train "${model[@]}" --dump-folder "$out/run" --metrics "$fs/metrics.jsonl")
"$titan" "${args[@]}" > "$out/log" 2>&1; rc=$?
grep -E "error" "$out/log"
[ $rc -eq 1 ] || { tail "$out/log"; fail "exit status $rc, want 1"; }
bad=$(grep -oE "metrics of step [0-9]+" "$out/log" | grep -oE "[0-9]+")
[ -n "$bad" ] && [ "$bad" -ge 3 ] || fail "no step named, or the disk filled too early (step '$bad')"
ck="$out/run/checkpoint"
grep -qE "titan: error: $fs/metrics.jsonl: cannot write the metrics of step $bad: No space left on \
device; stopped after step $bad: the last complete checkpoint is $ck/step-$bad \(the same command \
resumes from it" "$out/log" || fail "no clear error naming metrics.jsonl and step-$bad"
[ -f "$ck/step-$bad/metadata.json" ] || fail "step $bad, the step the metrics failed at, not saved"
# whole lines only, steps 1 .. bad-1 (the failed line's bytes cut off, none past it)
want=$(seq 1 $((bad - 1)) | tr '\n' ' ')
got=$(grep -o '"step": [0-9]*' "$fs/metrics.jsonl" | cut -d' ' -f2 | tr '\n' ' ')
[ "$got" = "$want" ] || fail "metrics.jsonl holds steps '$got', want '$want'"
[ -z "$(tail -c 1 "$fs/metrics.jsonl")" ] || fail "metrics.jsonl ends in a partial line"
# the report page (on the other disk) is final with the error, no refresh
grep -q '<p class="failed">The run ended with an error: .*metrics.jsonl: cannot write the metrics of step' \
  "$out/run/report.html" && ! grep -q 'http-equiv="refresh"' "$out/run/report.html" ||
  fail "report.html is not final with the error"
rm -f "$fs/filler" # free space, as an operator would
"$titan" "${args[@]}" --stop-after-step $((bad + 2)) > "$out/resume" 2>&1 ||
  { cat "$out/resume"; fail "step-$bad does not resume"; }
grep -q "resumed from .*step-$bad\$" "$out/resume" || { cat "$out/resume"; fail "not resumed from step-$bad"; }
grep -q "titan warn\] $fs/metrics.jsonl has no line for step $bad, which the checkpoint" "$out/resume" ||
  { cat "$out/resume"; fail "the resume does not say step $bad's line is missing"; }
want="$(seq 1 $((bad - 1)) | tr '\n' ' ')$((bad + 1)) $((bad + 2)) "
got=$(grep -o '"step": [0-9]*' "$fs/metrics.jsonl" | cut -d' ' -f2 | tr '\n' ' ')
[ "$got" = "$want" ] || fail "metrics.jsonl after the resume holds steps '$got', want '$want'"
echo "ok: metrics.jsonl full at step $bad: step-$bad saved, the error names both, whole lines, resumed"
rm -f "$fs/metrics.jsonl"

# 2. the TensorBoard event file (~600-byte records every step with --metrics.log_freq 1)
head -c $((54 * 1024)) /dev/zero > "$fs/filler"
args=(train "${model[@]}" --dump-folder "$out/run2" --metrics.enable_tensorboard
      --metrics.save_tb_folder "$fs/tb" --metrics.log_freq 1)
"$titan" "${args[@]}" > "$out/log2" 2>&1; rc=$?
grep -E "error" "$out/log2"
[ $rc -eq 1 ] || { tail "$out/log2"; fail "tb: exit status $rc, want 1"; }
ev=$(ls "$fs"/tb/*/events.out.tfevents.*) || fail "no event file"
grep -qE "titan: error: $ev: write failed: No space left on device; stopped after step [0-9]+: the \
last complete checkpoint is $out/run2/checkpoint/step-[0-9]+ " "$out/log2" ||
  fail "no clear error naming the event file and the checkpoint"
bad=$(grep -oE "stopped after step [0-9]+" "$out/log2" | grep -oE "[0-9]+")
[ -f "$out/run2/checkpoint/step-$bad/metadata.json" ] || fail "tb: step $bad not saved"
# whole TFRecords only: the lengths walk to the file's end exactly, the last one step bad-1's
if [ -n "$py" ]; then
  "$py" - "$ev" "$bad" <<'PY' || fail "the event file is not whole records up to step $((bad - 1))"
import struct, sys
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
b = open(sys.argv[1], "rb").read(); at = n = 0
while at < len(b):
    (length,) = struct.unpack("<Q", b[at:at + 8]); at += 12 + length + 4; n += 1
assert at == len(b), f"records end at {at}, the file at {len(b)}"
steps = [e.step for e in EventFileLoader(sys.argv[1]).Load() if e.HasField("summary")]
assert steps == list(range(1, int(sys.argv[2]))), steps
print(f"ok: {n} whole records, steps 1..{steps[-1]}")
PY
fi
rm -f "$fs/filler"
"$titan" "${args[@]}" --stop-after-step $((bad + 1)) > "$out/resume2" 2>&1 ||
  { cat "$out/resume2"; fail "tb: step-$bad does not resume"; }
grep -q "resumed from .*step-$bad\$" "$out/resume2" || fail "tb: not resumed from step-$bad"
# the lost step is said again at the resume (it had been said only when it happened)
grep -q "titan warn\] checkpoint: step-$bad's run could not write TensorBoard's scalars of step $bad" \
  "$out/resume2" || { cat "$out/resume2"; fail "tb: the resume does not say step $bad's scalars are missing"; }
echo "ok: the event file full at step $bad: step-$bad saved, whole records, resumed, the lost step said"

# 3. two ranks (when an mpirun is given), each writing its own file (save_for_all_ranks): the
# rank whose file fills stops both after the step is saved, each naming it; both resume
mpirun=${3:-}
if [ -n "$mpirun" ]; then
# (under `make asan` without leak checking, as every dist_* test: Open MPI's own allocations)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
rm -rf "${fs:?}"/*
head -c $((48 * 1024)) /dev/zero > "$fs/filler"
args=(train "${model[@]}" --dump-folder "$out/run3" --metrics "$fs/metrics.jsonl"
      --metrics.save_for_all_ranks)
ASAN_OPTIONS=detect_leaks=0 timeout 120 "$mpirun" -np 2 -x OMP_NUM_THREADS=1 -x ASAN_OPTIONS "$titan" "${args[@]}" > "$out/log3" 2>&1; rc=$?
[ $rc -ne 0 ] || fail "2 ranks: exit status 0"
bad=$(grep -oE "stopped after step [0-9]+" "$out/log3" | head -1 | grep -oE "[0-9]+")
# every rank's error names the cause (the first to abort may end the other before it prints)
grep -E "titan: error \(rank [01] of 2\)" "$out/log3" > "$out/errs3"
[ -s "$out/errs3" ] || { cat "$out/log3"; fail "2 ranks: no rank's error printed"; }
! grep -vqE "titan: error \(rank [01] of 2\): (rank [01] could not write its metrics: )?$fs/\
rank_[01]/metrics.jsonl: cannot write the metrics of step $bad: No space left on device; stopped \
after step $bad: the last complete checkpoint is $out/run3/checkpoint/step-$bad " "$out/errs3" ||
  { cat "$out/log3"; fail "a rank's error does not name the full file and step-$bad"; }
[ -f "$out/run3/checkpoint/step-$bad/metadata.json" ] || fail "2 ranks: step $bad not saved"
rm -f "$fs/filler"
ASAN_OPTIONS=detect_leaks=0 timeout 120 "$mpirun" -np 2 -x OMP_NUM_THREADS=1 -x ASAN_OPTIONS "$titan" "${args[@]}" \
  --stop-after-step $((bad + 1)) > "$out/resume3" 2>&1 || { cat "$out/resume3"; fail "2 ranks: no resume"; }
grep -q "resumed from .*step-$bad\$" "$out/resume3" || fail "2 ranks: not resumed from step-$bad"
echo "ok: 2 ranks, a rank's metrics file full at step $bad: both stopped naming it, step-$bad saved, resumed"
fi

# 4. the run's last step (a disk full from the start, --steps 1): training has finished, so its
# last save (weights only, by default) and the --out export are written, then the error says
# so (it had said "resumes" of a weights-only checkpoint, and skipped the export)
rm -rf "${fs:?}"/*
head -c $((64 * 1024)) /dev/zero > "$fs/filler" 2>/dev/null
args=(train "${model[@]}" --steps 1 --dump-folder "$out/run4" --metrics "$fs/metrics.jsonl"
      --out "$out/run4/hf")
"$titan" "${args[@]}" > "$out/log4" 2>&1; rc=$?
[ $rc -eq 1 ] || { tail "$out/log4"; fail "last step: exit status $rc, want 1"; }
grep -qE "titan: error: $fs/metrics.jsonl: cannot write the metrics of step 1: No space left on \
device; training had finished \(step 1, the run's last: its checkpoint, export and sample as \
configured were written\); that step's metrics are not in the file" "$out/log4" ||
  { cat "$out/log4"; fail "last step: no clear error"; }
[ -f "$out/run4/hf/config.json" ] && [ -f "$out/run4/checkpoint/step-1/metadata.json" ] ||
  fail "last step: the export or the last checkpoint is missing"
echo "ok: the last step's metrics lost: checkpoint and export written, said"

# 5. checkpoint.load_only (no saves): the error says why nothing was saved
"$titan" train "${model[@]}" --steps 3 --dump-folder "$out/run5" --metrics "$fs/metrics.jsonl" \
  --checkpoint.load_only true > "$out/log5" 2>&1; rc=$?
[ $rc -eq 1 ] && grep -q "cannot write the metrics of step 1: No space left on device; stopped \
after step 1 (checkpoint.load_only is set, so nothing was saved)" "$out/log5" ||
  { cat "$out/log5"; fail "load_only: rc $rc, or the error does not say why nothing was saved"; }
echo "ok: load_only: nothing saved, said why"
