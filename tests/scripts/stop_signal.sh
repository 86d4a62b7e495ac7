#!/usr/bin/env bash
# Preemption: a run sent SIGTERM (SIGINT, job.preemption_signal) finishes its step, saves a
# checkpoint of it, says where, and exits 128 + the signal's number; resuming from that
# checkpoint gives bitwise the losses of a run never stopped. A second signal exits at once.
# The runs have 100000 steps, so every signal lands mid-run however loaded the machine.
set -euo pipefail
titan=$1; out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
model=(--set n_layers=2 --set dim=64 --set n_heads=4 --set n_kv_heads=2 --set head_dim=16
       --set ffn_dim=128 --set vocab_size=300 --random-tokens --steps 100000 --batch 2
       --seq-len 24 --lr 3e-3 --warmup 3 --seed 7 --peak-tflops 1 --log-freq 100000)
field() { grep -o "\"$2\": [^,}]*" "$1"; }
steps_in() { cat "$1" 2>/dev/null | grep -c . || true; }
# start NAME ARGS...: titan train in the background (pid in $pid), once it has logged 3 steps
start() {
  local name=$1; shift
  "$titan" train "${model[@]}" --metrics "$out/$name.jsonl" "$@" > "$out/$name.log" 2>&1 &
  pid=$!
  for _ in $(seq 1200); do
    [ "$(steps_in "$out/$name.jsonl")" -ge 3 ] && return 0
    kill -0 $pid 2>/dev/null || { echo "FAIL $name: exited early"; cat "$out/$name.log"; exit 1; }
    sleep 0.05
  done
  echo "FAIL $name: no 3 steps in 60 s"; exit 1
}
# await NAME WHAT CMD...: polls CMD until it succeeds, up to 300 s (a count of polls ran out
# under ASan on a loaded machine and the signal was sent anyway, too early); fails naming WHAT
await() {
  local name=$1 what=$2 end=$((SECONDS + 300)); shift 2
  until "$@"; do
    [ $SECONDS -lt $end ] || { kill -KILL $pid; echo "FAIL $name: no $what in 300 s"; cat "$out/$name.log"; exit 1; }
    sleep 0.01
  done
}
# finish NAME WANT_RC: waits for $pid, checks its exit status
finish() {
  local rc=0; wait $pid || rc=$?
  [ $rc -eq "$2" ] || { echo "FAIL $1: exit status $rc, want $2"; cat "$out/$1.log"; exit 1; }
}
last_step() { field "$1" step | tail -1 | cut -d' ' -f2; }
# stopped NAME SIGNAL RC: the run stopped after its last logged step N, with step-N saved and
# named, and nothing else in its checkpoint folder (no step-N.tmp, no .deleting)
stopped() {
  local n; n=$(last_step "$out/$1.jsonl")
  [ "$(ls "$out/$1/checkpoint" | tr '\n' ' ')" = "step-$n " ] ||
    { echo "FAIL $1: checkpoint folder holds $(ls "$out/$1/checkpoint" | tr '\n' ' '), want step-$n"
      cat "$out/$1.log"; exit 1; }
  grep -q "$2: stopped after step $n; the last complete checkpoint is $out/$1/checkpoint/step-$n" \
    "$out/$1.log" || { echo "FAIL $1: the stop is not reported"; cat "$out/$1.log"; exit 1; }
  echo "ok $1: $2 -> exit $3 after step $n, checkpoint step-$n complete"
}

# SIGTERM with a background (async) save: exit 143, then resume == never stopped
start term --dump-folder "$out/term" --checkpoint-interval 100000
kill -TERM $pid; finish term 143; stopped term SIGTERM 143
n=$(last_step "$out/term.jsonl")
# the stopped step is the run's last logged one: on the console (log_freq is 100000), and the
# report page no longer refreshes itself as a live run's does (it kept doing so forever)
grep -qE "step: +$n +loss" "$out/term.log" && ! grep -q 'http-equiv="refresh"' "$out/term/report.html" ||
  { echo "FAIL: the stopped step $n is not logged last, or the page still refreshes"; exit 1; }
echo "ok SIGTERM: step $n logged as the last, the report page final"
"$titan" train "${model[@]}" --metrics "$out/straight.jsonl" --stop-after-step $((n + 5)) \
  > /dev/null
"$titan" train "${model[@]}" --metrics "$out/resumed.jsonl" --dump-folder "$out/term" \
  --checkpoint-interval 100000 --stop-after-step $((n + 5)) > "$out/resumed.log"
grep -q "resumed from $out/term/checkpoint/step-$n" "$out/resumed.log" ||
  { echo "FAIL: did not resume from step $n"; cat "$out/resumed.log"; exit 1; }
for f in loss grad_norm; do
  diff <(field "$out/straight.jsonl" $f | tail -5) <(field "$out/resumed.jsonl" $f) ||
    { echo "FAIL: resumed run differs in $f"; exit 1; }
done
[ "$(steps_in "$out/resumed.jsonl")" -eq 5 ] || { echo "FAIL: resumed run logged other steps"; exit 1; }
echo "ok resume after SIGTERM: steps $((n + 1))..$((n + 5)) bitwise identical"

# SIGINT (Ctrl-C) while saving synchronously every step with pruning: exit 130, the newest
# checkpoint complete, nothing half-written or half-deleted left
start int --dump-folder "$out/int" --checkpoint-interval 1 --keep-latest-k 2 --sync-checkpoint
kill -INT $pid; finish int 130
n=$(last_step "$out/int.jsonl")
left=$(ls "$out/int/checkpoint" | grep -vE '^step-[0-9]+$' | tr '\n' ' ' || true)
[ -z "$left" ] && [ -d "$out/int/checkpoint/step-$n" ] ||
  { echo "FAIL int: left ${left:-nothing partial}, step-$n present?"; cat "$out/int.log"; exit 1; }
grep -q "SIGINT: stopped after step $n; the last complete checkpoint is .*/step-$n" "$out/int.log" ||
  { echo "FAIL int: not reported"; cat "$out/int.log"; exit 1; }
echo "ok int: SIGINT -> exit 130 after step $n, step-$n complete, no .tmp or .deleting"

# SIGINT without checkpointing: says nothing was saved, exit 130
start nock --dump-folder "$out/nock"
kill -INT $pid; finish nock 130
grep -q "SIGINT: stopped after step [0-9]*; checkpointing is disabled" "$out/nock.log" ||
  { echo "FAIL nock: not reported"; cat "$out/nock.log"; exit 1; }
[ ! -e "$out/nock/checkpoint" ] || { echo "FAIL nock: a checkpoint folder appeared"; exit 1; }
echo "ok nock: SIGINT without checkpointing -> exit 130, says nothing was saved"

# job.preemption_signal = SIGUSR1 (Slurm --signal=USR1@120): exit 138 with a checkpoint
start usr1 --dump-folder "$out/usr1" --checkpoint-interval 100000 --job.preemption_signal SIGUSR1
kill -USR1 $pid; finish usr1 138; stopped usr1 SIGUSR1 138

# a second signal exits at once: both are pending before either is handled (the process is
# stopped meanwhile), so the step cannot end in between; no checkpoint, no stop report
start twice --dump-folder "$out/twice" --checkpoint-interval 100000
kill -STOP $pid; kill -INT $pid; kill -TERM $pid; kill -CONT $pid
rc=0; wait $pid || rc=$?
[ $rc -eq 130 ] || [ $rc -eq 143 ] || { echo "FAIL twice: exit $rc"; cat "$out/twice.log"; exit 1; }
grep -q "again: exiting at once" "$out/twice.log" && ! grep -q "stopped after step" "$out/twice.log" &&
  [ -z "$(ls "$out/twice/checkpoint" 2>/dev/null)" ] ||
  { echo "FAIL twice: did not exit at once"; cat "$out/twice.log"; exit 1; }
echo "ok twice: a second signal exits at once ($rc), nothing saved"

# what an interrupted save or prune leaves (step-N.tmp, step-N.deleting) is removed by the next
# run's saver; a symlink named like one is not followed
mkdir -p "$out/clean/checkpoint/step-7.tmp" "$out/clean/checkpoint/step-3.deleting" "$out/keep"
touch "$out/clean/checkpoint/step-7.tmp/rank-00000.safetensors" "$out/keep/precious"
ln -s "$out/keep" "$out/clean/checkpoint/step-9.tmp"
"$titan" train "${model[@]}" --steps 1 --dump-folder "$out/clean" --checkpoint-interval 1 \
  > "$out/clean.log"
[ "$(ls "$out/clean/checkpoint" | tr '\n' ' ')" = "step-1 " ] && [ -e "$out/keep/precious" ] &&
  [ "$(grep -c "left by an interrupted" "$out/clean.log")" = 3 ] ||
  { echo "FAIL clean: $(ls "$out/clean/checkpoint" | tr '\n' ' ')"; cat "$out/clean.log"; exit 1; }
echo "ok clean: leftover step-7.tmp and step-3.deleting removed, a step-9.tmp link unlinked (its target kept)"

# a signal during the end-of-run sample (100M tokens: hours) ends it at the next token: exit
# 143 within seconds, the run's last checkpoint and its HF export written, and said (the sample
# went on until killed, exit 0 if ever)
"$titan" train "${model[@]}" --steps 2 --metrics "$out/samp.jsonl" --dump-folder "$out/samp" \
  --checkpoint-interval 100000 --out "$out/samp/hf" --sample 100000000 > "$out/samp.log" 2>&1 &
pid=$!
await samp "sample" grep -q "^sample (temperature" "$out/samp.log"
kill -TERM $pid
for _ in $(seq 200); do kill -0 $pid 2>/dev/null || break; sleep 0.05; done
if kill -0 $pid 2>/dev/null; then
  kill -KILL $pid; echo "FAIL samp: still sampling 10 s after SIGTERM"; exit 1; fi
finish samp 143
grep -q "SIGTERM: training had finished (step 2, the run's last); its checkpoint is $out/samp/checkpoint/step-2; the Hugging Face export was written; the sample was cut short" \
  "$out/samp.log" && [ -f "$out/samp/hf/model.safetensors" ] && [ -d "$out/samp/checkpoint/step-2" ] ||
  { echo "FAIL samp: not reported, or no export / checkpoint"; tail -3 "$out/samp.log"; exit 1; }
echo "ok samp: SIGTERM during the sample -> exit 143 at the next token; export and step-2 there"

# a signal during the last step: the run has finished training, so its HF export is still
# written (it was skipped, and the message said the same command resumes, which it refuses:
# the last step's checkpoint holds weights only); the process is paused after step 2 is logged
# so the signal lands in step 3 (or step 2's save) whatever the machine's speed
# (a wider model, steps of 0.1..1 s rather than ~1 ms: the pause comes before step 3 ends)
"$titan" train "${model[@]}" --set dim=256 --set head_dim=64 --set ffn_dim=512 --seq-len 128 \
  --batch 8 --steps 3 --metrics "$out/last.jsonl" --dump-folder "$out/last" \
  --checkpoint-interval 100000 --out "$out/last/hf" --sample 50 > "$out/last.log" 2>&1 &
pid=$!
two_steps() { [ "$(steps_in "$out/last.jsonl")" -ge 2 ]; }
await last "step 2" two_steps
kill -STOP $pid; kill -TERM $pid; kill -CONT $pid
finish last 143
grep -q "SIGTERM: training had finished (step 3, the run's last); its checkpoint is $out/last/checkpoint/step-3; the Hugging Face export was written; the sample was skipped" \
  "$out/last.log" && [ -f "$out/last/hf/model.safetensors" ] && ! grep -q "^sample" "$out/last.log" &&
  [ "$(last_step "$out/last.jsonl")" = 3 ] ||
  { echo "FAIL last: not reported, or no export, or sampled"; tail -4 "$out/last.log"; exit 1; }
echo "ok last: SIGTERM during the last step -> exit 143, the export written, the sample skipped"

# a signal before or during validation of the whole set (40k windows: a minute or more) abandons
# it at the next batch: the step is saved and the run exits 143 within seconds, the step's line
# without a validation loss (validation went on to the end, past a scheduler's grace period).
# The signal is sent once the header is out, so it lands before step 1's validation ends.
head -c 1500000 /dev/urandom | base64 -w 100 > "$out/val.txt" # 2 MB of text
"$titan" train "${model[@]}" --steps 3 --metrics "$out/val.jsonl" --dump-folder "$out/val" \
  --checkpoint-interval 100000 --validation.enable --validation.dataset_path "$out/val.txt" \
  --validation.seq_len 24 --validation.local_batch_size 2 > "$out/val.log" 2>&1 &
pid=$!
await val "header" grep -q "GEMM peak" "$out/val.log"
kill -TERM $pid
for _ in $(seq 200); do kill -0 $pid 2>/dev/null || break; sleep 0.05; done
if kill -0 $pid 2>/dev/null; then
  kill -KILL $pid; echo "FAIL val: still validating 10 s after SIGTERM"; exit 1; fi
finish val 143; stopped val SIGTERM 143
grep -q "SIGTERM: validation abandoned after [0-9]* batches" "$out/val.log" &&
  ! grep -q val_loss "$out/val.jsonl" ||
  { echo "FAIL val: not said, or a validation loss logged"; tail -3 "$out/val.log"; exit 1; }
echo "ok val: SIGTERM during validation -> abandoned at the next batch, exit 143"
