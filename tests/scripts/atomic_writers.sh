#!/usr/bin/env bash
# Two processes writing one file atomically at once (two `titan report --out x.html`): the
# second had unlinked the first's "x.html.tmp" as stale and written its own, which the first
# then renamed into place: the first said "wrote x.html" of the other's page, cut short, and
# the second failed its rename (a concurrent-access audit's finding). Now a temporary is locked
# while written: the second refuses, naming the file, and the first's page is whole. strace
# slows the first's writes; skipped (77) without strace or ptrace.
set -uo pipefail
titan=$1; out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
# (LeakSanitizer cannot run under ptrace: off for the traced commands)
command -v strace > /dev/null && strace -o /dev/null true 2> /dev/null ||
  { echo "skipped: no strace, or ptrace not permitted"; exit 77; }
m=(train --set n_layers=1 --set dim=64 --set n_heads=4 --set n_kv_heads=2 --set head_dim=16
   --set ffn_dim=64 --set vocab_size=256 --random-tokens --batch 1 --seq-len 8 --peak-tflops 1
   --steps 30 --metrics.enable_jsonl)
"$titan" "${m[@]}" --dump-folder "$out/a" > /dev/null 2>&1 &&
  "$titan" "${m[@]}" --dump-folder "$out/b" --lr 1e-3 > /dev/null 2>&1 || { echo "FAIL: train"; exit 1; }
# (each write held 0.3 s: the second report must reach its open within the first's ~2 s; at
# 50 ms, 0.3 s in all, a slow start of the second could miss it)
ASAN_OPTIONS=detect_leaks=0 strace -f -o /dev/null -e trace=write -e inject=write:delay_exit=300000 \
  "$titan" report "$out/b" --out "$out/x.html" > "$out/b.log" 2>&1 &
first=$!
undated='s/[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9:]{8} UTC//g' # the page's drawing time
for _ in $(seq 1500); do [ -e "$out/x.html.tmp" ] && break; sleep 0.02; done
"$titan" report "$out/a" --out "$out/x.html" > "$out/a.log" 2>&1; rc=$?
wait $first; rc1=$?
if [ $rc1 -eq 0 ] && [ $rc -eq 1 ] &&
   grep -q "x.html.tmp: another process is writing it now (the file is locked)" "$out/a.log" &&
   "$titan" report "$out/b" --out "$out/ref.html" > /dev/null 2>&1 &&
   cmp -s <(sed -E "$undated" "$out/x.html") <(sed -E "$undated" "$out/ref.html"); then
  echo "ok: a second writer of one file refuses while the first writes; the first's page whole"
else
  echo "FAIL: first rc $rc1, second rc $rc"; cat "$out/a.log" "$out/b.log"; exit 1
fi
[ ! -e "$out/x.html.tmp" ] || { echo "FAIL: x.html.tmp left"; exit 1; }
