#!/usr/bin/env bash
# Crash safety: a run saving a ~100 MB checkpoint every step is killed with SIGKILL at random
# moments once it is saving (often mid-write); after every kill the newest complete checkpoint must load and
# resume, and no partial folder may ever be taken for one. Delays are printed (and seeded by
# SEED) so a failure can be replayed.
set -euo pipefail
titan=$1; out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
RANDOM=${SEED:-4242}
args=(train --set n_layers=1 --set dim=256 --set n_heads=4 --set n_kv_heads=2 --set head_dim=64
      --set ffn_dim=256 --set vocab_size=32768 --random-tokens --batch 1 --seq-len 16
      --steps 100000 --peak-tflops 1 --log-freq 1000 --dump-folder "$out/run"
      --checkpoint-interval 1 --keep-latest-k 2 --sync-checkpoint --last-save-full)
last=-1
for i in 1 2 3 4 5; do
  delay=$(printf '0.%03d' $((RANDOM % 1000)))
  before=$(ls "$out/run/checkpoint" 2>/dev/null | tr '\n' ' ' || true)
  "$titan" "${args[@]}" > "$out/log$i" 2>&1 &
  pid=$!
  # wait (up to 60 s, however loaded the machine) until this run is saving, then the delay
  # (a start clears the last kill's step-N.tmp: an empty folder is no sign of saving)
  for _ in $(seq 600); do
    now=$(ls "$out/run/checkpoint" 2>/dev/null | tr '\n' ' ' || true)
    [ -n "$now" ] && [ "$now" != "$before" ] && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.1
  done
  sleep "$delay"
  kill -9 $pid 2>/dev/null || true
  wait $pid 2>/dev/null || true
  complete=$(ls "$out/run/checkpoint" 2>/dev/null | grep -E '^step-[0-9]+$' | sed 's/step-//' |
             sort -n | tail -1 || true)
  partial=$(ls "$out/run/checkpoint" 2>/dev/null | grep -vE '^step-[0-9]+$' | tr '\n' ' ' || true)
  echo "kill $i after ${delay}s: newest complete checkpoint step-${complete:-none}; other: ${partial:-none}"
  [ -n "$complete" ] || continue
  if [ "$complete" -lt "$last" ]; then echo "FAIL: the newest checkpoint went back"; exit 1; fi
  last=$complete
  # resume from it without training further: it must load (weights, AdamW state, RNG)
  if ! "$titan" "${args[@]}" --stop-after-step "$complete" > "$out/verify$i" 2>&1; then
    echo "FAIL: checkpoint step-$complete does not load:"; cat "$out/verify$i"; exit 1; fi
  grep -q "resumed from .*step-$complete" "$out/verify$i" || { cat "$out/verify$i"; exit 1; }
done
[ "$last" -ge 1 ] || { echo "FAIL: no checkpoint was ever completed"; exit 1; }
echo "ok: after every SIGKILL the newest complete checkpoint loaded"
