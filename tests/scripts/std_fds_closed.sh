#!/usr/bin/env bash
# titan started with standard output / error closed (`>&-`, a cron job or a script's
# daemonising): the console's lines go nowhere, not into the first file titan opens, which
# takes descriptor 1 or 2 otherwise (the run lock, whose recorded pid the console overwrote),
# and the command's status is its work's (it was 1: "writing standard output: Bad file
# descriptor" after a finished run). A console piped into a reader that exits early does not
# stop the training (SIGPIPE had killed it mid-run).
set -uo pipefail
titan=$1; out=$(mktemp -d); pid=
trap '[ -n "$pid" ] && kill -9 $pid 2>/dev/null; rm -rf "$out"' EXIT
fail=0
m=(train --set n_layers=1 --set dim=64 --set n_heads=4 --set n_kv_heads=2 --set head_dim=16
   --set ffn_dim=64 --set vocab_size=256 --random-tokens --batch 1 --seq-len 16 --peak-tflops 1
   --log-freq 1 --checkpoint-interval 3)
"$titan" "${m[@]}" --steps 6 --dump-folder "$out/a" >&- 2>&-
rc=$?
if [ $rc = 0 ] && [ -d "$out/a/checkpoint/step-6" ]; then echo "ok   train with stdout and stderr closed: rc 0"
else echo "FAIL train with stdout and stderr closed: rc $rc"; ls -R "$out/a"; fail=1; fi
"$titan" convert "$out/a/checkpoint/step-6" "$out/hf" > /dev/null 2>&1
"$titan" convert "$out/a/checkpoint/step-6" "$out/hf_closed" >&- 2>&-
rc=$?
if [ $rc = 0 ] && cmp -s "$out/hf/model.safetensors" "$out/hf_closed/model.safetensors" &&
   cmp -s "$out/hf/config.json" "$out/hf_closed/config.json"; then
  echo "ok   convert with stdout and stderr closed: rc 0, the same files"
else echo "FAIL convert with stdout and stderr closed: rc $rc"; fail=1; fi
# its console piped into a reader that goes away (`| head -2`): the run trains on to its last
# step and checkpoint, and ends in status 1 naming standard output (SIGPIPE had killed it)
"$titan" "${m[@]}" --steps 300 --checkpoint-interval 100 --dump-folder "$out/p" 2> "$out/p.err" | head -2 > /dev/null
rc=${PIPESTATUS[0]}
if [ "$rc" = 1 ] && [ -d "$out/p/checkpoint/step-300" ] &&
   grep -q "writing standard output: Broken pipe" "$out/p.err"; then
  echo "ok   train | head -2: trained to step 300, status 1 naming standard output"
else echo "FAIL train | head -2: rc $rc, $(ls "$out/p/checkpoint" 2>&1 | tr '\n' ' ')"; tail -3 "$out/p.err"; fail=1; fi
# while a run with stdout closed trains, its lock file holds its pid alone
"$titan" "${m[@]}" --steps 100000000 --dump-folder "$out/b" >&- &
pid=$!
lock=$out/b/checkpoint/.titan.lock
for _ in $(seq 600); do
  [ -n "$(ls "$out/b/checkpoint" 2>/dev/null | grep -E '^step-[0-9]+$')" ] && break
  kill -0 $pid 2>/dev/null || break
  sleep 0.1
done
got=$(cat "$lock" 2>/dev/null | head -c 200)
bg=$pid; kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null; pid=
if [ "$got" = "$bg" ]; then
  echo "ok   the run lock holds its pid ($got)"
else echo "FAIL the run lock of a run with stdout closed holds: '$got'"; fail=1; fi
exit $fail
