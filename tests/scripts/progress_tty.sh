#!/usr/bin/env bash
# The progress line on a terminal (a pseudo-terminal from script(1)): every progress line
# replaces the one before it ("\r" + erase first: unlogged steps' lines had run on into one
# endless line, 2.7 MB in 6 s), at most ~10 a second, and its ETA reads as a duration
# (h:mm:ss, "Nd hh:mm:ss"), not a raw count of seconds. Skipped (77) without script(1).
set -uo pipefail
titan=$1; python=$2; out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
command -v script > /dev/null || { echo "skip: no script(1)"; exit 77; }
cmd="$titan train --random-tokens --set vocab_size=64 --set dim=16 --set n_layers=1 --set n_heads=2 \
--set n_kv_heads=1 --set head_dim=8 --set ffn_dim=32 --batch 1 --seq-len 8 --threads 1 \
--peak-tflops 1 --steps 100000000 --log-freq 20000 --dump-folder $out/run \
--checkpoint.enable false --metrics.save_report_file ''"
start=$(date +%s%N)
timeout -s INT 7 script -qfc "$cmd" "$out/tty" > /dev/null 2>&1
took=$(( ($(date +%s%N) - start) / 1000000 ))
"$python" - "$out/tty" "$took" <<'PY'
import re, sys
d = open(sys.argv[1], "rb").read().decode("utf-8", "replace")
took = float(sys.argv[2]) / 1000
segs = [m.start() for m in re.finditer(r"  \[[# ]{30}\] step \d+/100000000", d)]
assert len(segs) >= 3, ("no progress lines", d[-500:])
bad = [i for i in segs if not d[:i].endswith("\r\x1b[K")]
assert not bad, ("a progress line not replacing the last", repr(d[bad[0] - 80:bad[0] + 60]))
logged = len(re.findall(r"step: +\d+ +loss", d))
assert len(segs) <= 12 * took + 2 * logged + 5, ("too many progress lines", len(segs), took)
etas = re.findall(r"eta (\S+(?: \S+)?)  ", d)
assert etas and all(re.fullmatch(r"\d+s|\d+:\d\d|\d+:\d\d:\d\d|\d+d \d\d:\d\d:\d\d", e) for e in etas), etas[:3]
print("ok: %d progress lines in %.1f s, each replacing the last; eta %s" % (len(segs), took, etas[-1]))
PY
