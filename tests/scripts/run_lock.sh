#!/usr/bin/env bash
# One folder, one run: while a run trains (checkpoints and metrics into its dump folder), a
# second titan train on the same folder (also one writing only its report page and config.toml)
# and a titan convert into it refuse at once, naming the
# first run's PID, and write nothing there; after the first is killed with SIGKILL a new run
# proceeds and resumes from its checkpoint; a clean exit leaves no lock file behind.
set -euo pipefail
titan=$1; out=$(mktemp -d); pid=
trap '[ -n "$pid" ] && kill -9 $pid 2>/dev/null; rm -rf "$out"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
m=(train --set n_layers=1 --set dim=64 --set n_heads=4 --set n_kv_heads=2 --set head_dim=16
   --set ffn_dim=64 --set vocab_size=256 --random-tokens --batch 1 --seq-len 16 --peak-tflops 1
   --log-freq 1000 --checkpoint-interval 5 --sync-checkpoint --last-save-full
   --dump-folder "$out/run" --metrics "$out/run/metrics.jsonl")
"$titan" "${m[@]}" --steps 100000000 > "$out/first.log" 2>&1 &
pid=$!
# wait (up to 60 s, however loaded the machine) until the first run has saved a checkpoint
for _ in $(seq 600); do
  [ -n "$(ls "$out/run/checkpoint" 2>/dev/null | grep -E '^step-[0-9]+$')" ] && break
  kill -0 $pid 2>/dev/null || { cat "$out/first.log"; fail "the first run stopped"; }
  sleep 0.1
done
[ -n "$(ls "$out/run/checkpoint" | grep -E '^step-[0-9]+$')" ] || fail "no checkpoint in 60 s"
if "$titan" "${m[@]}" --steps 2 > "$out/second.log" 2>&1; then
  fail "a second run trained in the folder the first is writing"
fi
grep -qE "titan: error: .*$out/run.* is in use by another titan run \(pid $pid," "$out/second.log" ||
  { cat "$out/second.log"; fail "the refusal does not name the folder and pid $pid"; }
grep -q "^step:" "$out/second.log" && fail "the second run trained a step before refusing"
echo "ok: a second titan train refuses, naming pid $pid"
step=$(ls "$out/run/checkpoint" | grep -E '^step-[0-9]+$' | sort -t- -k2 -n | tail -1)
if "$titan" convert "$out/run/checkpoint/$step" "$out/run/checkpoint" > "$out/convert.log" 2>&1
then fail "convert wrote into the folder a run is training in"; fi
grep -q "is in use by another titan run (pid $pid," "$out/convert.log" ||
  { cat "$out/convert.log"; fail "convert's refusal does not name pid $pid"; }
echo "ok: titan convert into the run's folder refuses, naming pid $pid"
# a run with no checkpoints and no metrics there still writes the folder's report page and
# config.toml: refused too (it was accepted and rewrote them)
cp "$out/run/config.toml" "$out/config.before"
if "$titan" train --set n_layers=1 --set dim=64 --set n_heads=4 --set n_kv_heads=2 \
    --set head_dim=16 --set ffn_dim=64 --set vocab_size=256 --random-tokens --batch 1 \
    --seq-len 16 --steps 2 --dump-folder "$out/run" > "$out/fourth.log" 2>&1; then
  fail "a run without checkpoints or metrics wrote into the folder the first is writing"
fi
grep -q "is in use by another titan run (pid $pid," "$out/fourth.log" &&
  cmp -s "$out/config.before" "$out/run/config.toml" ||
  { cat "$out/fourth.log"; fail "the report-only run was not refused, or changed config.toml"; }
echo "ok: a run writing only the report page and config.toml there refuses too"
kill -9 $pid; wait $pid 2>/dev/null || true; pid=
"$titan" "${m[@]}" --stop-after-step 1 > "$out/third.log" 2>&1 ||
  { cat "$out/third.log"; fail "a new run after SIGKILL of the first did not proceed"; }
grep -q "resumed from $out/run/checkpoint/step-" "$out/third.log" || fail "no resume"
[ -z "$(find "$out/run" -name .titan.lock)" ] || fail "a lock file is left after a clean exit"
echo "ok: after SIGKILL a new run proceeds; a clean exit leaves no lock file"
