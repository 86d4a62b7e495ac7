#!/usr/bin/env bash
# A JSONL line the memory cannot hold is an error naming the file and line, never the end of
# the data: glibc's getline sets no error flag when it runs out of memory, and the reader took
# that for the end of the file (the line and every later one silently dropped; an audit's
# finding). titan data runs under an address-space limit (ulimit -v) of its own size after
# start-up plus 64 MiB, measured while it waits on a full pipe, against a 200 MB line between
# two small documents.
set -euo pipefail
titan=$1; out=$(mktemp -d); trap 'rm -rf "$out"; [ -n "${pid:-}" ] && kill "$pid" 2>/dev/null || true' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
args=(data --seq-len 4 --batches 8 --vocab-size 300)
# titan's size after start-up: printing windows into a pipe nobody reads, it blocks once the
# pipe is full; its VmSize then
for i in $(seq 1 2000); do printf '{"text": "document %d of the measurement"}\n' "$i"; done \
  > "$out/small.jsonl"
mkfifo "$out/pipe"
exec 4<> "$out/pipe" # opened for reading and writing: never blocks, never read
"$titan" "${args[@]}" --batches 100000 --data "$out/small.jsonl" > "$out/pipe" 2> /dev/null & pid=$!
# blocked on the full pipe: it has written the pipe's 64 KiB and writes no more (polled; a fixed
# sleep was a race on a loaded machine)
prev=-1
for _ in $(seq 600); do
  now=$(awk '/^wchar:/ { print $2 }' "/proc/$pid/io" 2>/dev/null || echo -1)
  [ "$now" -ge 65536 ] && [ "$now" = "$prev" ] && break
  prev=$now
  sleep 0.2
done
[ "$now" -ge 65536 ] && [ "$now" = "$prev" ] || { echo "FAIL: titan data never filled the pipe"; exit 1; }
vm=$(awk '/^VmSize:/ { print $2 }' "/proc/$pid/status")
kill "$pid"; wait "$pid" 2>/dev/null || true
pid=
exec 4>&-
[ -n "$vm" ] || { echo "FAIL: no VmSize for titan data"; exit 1; }
limit=$((vm + 65536)) # KiB

{ printf '{"text": "first doc"}\n{"text": "'; head -c 200000000 /dev/zero | tr '\0' x
  printf '"}\n{"text": "last doc"}\n'; } > "$out/a.jsonl"
set +e
(ulimit -v "$limit"; timeout 120 "$titan" "${args[@]}" --data "$out/a.jsonl" > "$out/o" 2> "$out/e")
rc=$?
set -e
if [ $rc -eq 1 ] && grep -q "a.jsonl:2: cannot read the line: Cannot allocate memory" "$out/e"; then
  echo "ok a line the memory cannot hold (limit $limit KiB): $(tail -1 "$out/e")"
else
  echo "FAIL: rc $rc under ulimit -v $limit (want an error naming a.jsonl:2):"
  head -c 2000 "$out/e"; head -c 300 "$out/o"; exit 1
fi
