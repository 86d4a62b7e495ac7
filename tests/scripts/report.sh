#!/usr/bin/env bash
# The report page (src/train/report.c), checked through its DOM by report_check.py:
# - a short run (bytes of Tiny Shakespeare, validation every 6 steps) writes
#   {dump_folder}/report.html at its logged steps: one loss point per metrics.jsonl line, the
#   printed figures those of the file, the facts table naming the model's parameter count as
#   the console header does; nothing fetched or run;
# - a resumed run's page shows the whole history with a mark at the resume;
# - `titan report DIR` draws the same page from metrics.jsonl and the facts file; several runs
#   overlay on one page (--out); --log-steps; metrics.save_report_file "" writes none;
# - a dataset mixture's page has a table of the windows each source gave; parameter groups a
#   facts row each;
# - hostile metrics.jsonl / facts: an error naming FILE:LINE, a torn last line left out with a
#   warning, absurd numbers drawn without a crash.
set -euo pipefail
titan=$1; python=$2; text=$3; here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
check() { "$python" "$here/report_check.py" "$@"; }
fail() { echo "FAIL: $*"; exit 1; }
m=(--set n_layers=2 --set dim=64 --set n_heads=4 --set n_kv_heads=2 --set head_dim=16
   --set ffn_dim=128 --set vocab_size=256 --data "$text" --batch 2 --seq-len 32 --lr 3e-3
   --warmup 3 --seed 7 --peak-tflops 1 --steps 14 --log-freq 5 --metrics.enable_jsonl
   --validation.enable --validation.dataset_path "$text" --validation.freq 6
   --validation.steps 2 --validation.seq_len 32 --validation.local_batch_size 2
   --checkpoint.enable --checkpoint.interval 5 --sync-checkpoint)

# --- a run writes the page; resumed, the page keeps the whole history ---
"$titan" train "${m[@]}" --dump-folder "$out/a" --stop-after-step 8 > "$out/a1.log"
[ -f "$out/a/report.html" ] || fail "no report.html after a run"
params=$(grep -o '[0-9.]*M parameters' "$out/a1.log" | head -1)
check "$out/a/report.html" "$out/a/metrics.jsonl" --fact "model=$params" \
  --fact "tokens per step=64 = 2 x 32" --fact "parallelism=1 process" --fact "precision=fp32" \
  --fact "titan=$("$titan" --version | head -1 | cut -d' ' -f2-)"
"$titan" train "${m[@]}" --dump-folder "$out/a" > "$out/a2.log"
grep -q "resumed from" "$out/a2.log" || fail "no resume"
grep -q '"resumed_from": 8' "$out/a/metrics.jsonl" || fail "no resumed_from 8 in metrics.jsonl"
check "$out/a/report.html" "$out/a/metrics.jsonl"
echo "ok: the run's page after steps 1..8, and after the resume from step 8 (steps 1..14, marked)"

# --- titan report: the same page from the files; several runs; options ---
cp "$out/a/report.html" "$out/live.html"
"$titan" report "$out/a/" > /dev/null
norm() { sed -E 's/updated [0-9: -]+UTC/updated T/' "$1"; }
diff <(norm "$out/live.html") <(norm "$out/a/report.html") > /dev/null ||
  fail "titan report draws another page than the run's last one"
"$titan" train "${m[@]}" --dump-folder "$out/b" --lr 1e-3 --checkpoint.enable=false > /dev/null
"$titan" report "$out/a" "$out/b/metrics.jsonl" --out "$out/both.html" > /dev/null
check "$out/both.html" "$out/a/metrics.jsonl" "$out/b/metrics.jsonl"
"$titan" report "$out/a" --log-steps --out "$out/log.html" > /dev/null
grep -q 'step (log scale)' "$out/log.html" || fail "--log-steps: no log axis"
check "$out/log.html" "$out/a/metrics.jsonl" --log-steps
"$titan" train "${m[@]}" --dump-folder "$out/c" --steps 2 --metrics.save_report_file "" \
  --checkpoint.enable=false > /dev/null
[ ! -e "$out/c/report.html" ] || fail "save_report_file \"\" wrote a page"
"$titan" train "${m[@]}" --dump-folder "$out/moe" --steps 4 --model.num_experts 4 --model.top_k 2 \
  --model.moe_inter_dim 32 --checkpoint.enable=false > /dev/null
grep -q 'data-chart="moe_imbalance"' "$out/moe/report.html" || fail "an MoE run's page has no expert-load chart"
grep -q 'data-chart="moe_imbalance"' "$out/a/report.html" && fail "a dense run's page has an expert-load chart"
check "$out/moe/report.html" "$out/moe/metrics.jsonl" --fact "model=4 experts (top 2"
# a dataset mixture's page: the windows each source gave (its last metrics line's), with shares
printf 'alpha beta gamma\n\ndelta epsilon\n' > "$out/second.txt"
"$titan" train "${m[@]}" --dump-folder "$out/mix" --steps 6 --checkpoint.enable=false \
  --data "" --training.dataset_sources "$text,$out/second.txt" --training.dataset_weights 3,1 \
  > /dev/null
grep -q 'data-section="sources"' "$out/mix/report.html" || fail "a mixture's page has no sources table"
grep -q 'data-section="sources"' "$out/a/report.html" && fail "one dataset's page has a sources table"
check "$out/mix/report.html" "$out/mix/metrics.jsonl"
# [[optimizer.param_groups]]: a facts row each (optimizer, pattern, resolved hyperparameters)
source "$here/args.sh" # without, fixtures
without m --lr
"$titan" train "${kept[@]}" --config "$fixtures/param_groups/dense.toml" --dump-folder "$out/pg" --steps 2 \
  --checkpoint.enable=false > /dev/null 2>&1 || fail "a run with parameter groups"
check "$out/pg/report.html" "$out/pg/metrics.jsonl" --fact "param group 1=Adam [norm]: lr 0.01" \
  --fact "param group 3=AdamW [.*]: lr 0.001, betas (0.9, 0.95), eps 1e-06, weight_decay 0.01" \
  --fact "steps=2 (warmup 3, max norm 1; 4 parameter groups)"
echo "ok: titan report DIR redraws the run's page; two runs overlaid; --log-steps; an MoE's expert load; a mixture's sources; parameter groups; none when off"

# --- hostile input ---
bad() { # bad NAME EXPECTED-MESSAGE: titan report fails with it, no crash
  set +e; "$titan" report "$out/$1" --out "$out/x.html" > "$out/e.log" 2>&1; rc=$?; set -e
  [ $rc = 1 ] && grep -qF -- "$2" "$out/e.log" || { cat "$out/e.log"; fail "$1: rc $rc"; }
}
mkdir -p "$out/h1" "$out/h2" "$out/h3" "$out/h4" "$out/h5" "$out/h6"
{ head -2 "$out/a/metrics.jsonl"; echo '{"step": 3, "loss": "x"}'; } > "$out/h1/metrics.jsonl"
bad h1 "h1/metrics.jsonl:3: \"loss\" is not a number"
{ head -3 "$out/a/metrics.jsonl"; echo 'garbage'; } > "$out/h2/metrics.jsonl"
bad h2 "h2/metrics.jsonl:4: not JSON"
{ head -3 "$out/a/metrics.jsonl"; head -1 "$out/a/metrics.jsonl"; } > "$out/h3/metrics.jsonl"
bad h3 "h3/metrics.jsonl:4: step 1 after step 3"
printf '{"step": 1, "tokens_per_expert_max": [3], "tokens_per_expert_mean": [1, 2]}\n' \
  > "$out/h4/metrics.jsonl"
bad h4 "h4/metrics.jsonl:1: \"tokens_per_expert_max\" and"
mkdir -p "$out/h7"
printf '{"step": 1, "data_source_windows": [3, -1]}\n' > "$out/h7/metrics.jsonl"
bad h7 "h7/metrics.jsonl:1: \"data_source_windows\" must be an array of 1 to 64 integers"
head -3 "$out/a/metrics.jsonl" > "$out/h5/metrics.jsonl"; echo '[["model"]]' > "$out/h5/report.facts.json"
bad h5 "h5/report.facts.json: fact 1 is not"
bad nowhere "no such run folder or metrics file"
# a torn last line: left out with a warning
{ head -3 "$out/a/metrics.jsonl"; printf '{"step": 4, "loss": 5.'; } > "$out/h6/metrics.jsonl"
"$titan" report "$out/h6" > "$out/e.log" 2>&1 || { cat "$out/e.log"; fail "torn last line"; }
grep -q "h6/metrics.jsonl:4: an unfinished last line" "$out/e.log" || fail "no warning: $(cat "$out/e.log")"
head -3 "$out/a/metrics.jsonl" > "$out/h6/three.jsonl"; check "$out/h6/report.html" "$out/h6/three.jsonl"
# absurd numbers, a step near 2^31, an MoE line, <script> in a fact: drawn, escaped
printf '%s\n' '{"step": 1, "loss": 1e308, "lr": -1e308, "grad_norm": 0}' \
  '{"step": 2, "loss": -1e308, "lr": 5e-324, "grad_norm": 0, "resumed_from": 1}' \
  '{"step": 2147483647, "loss": 3, "tokens_per_expert_max": [0, 9, 1e308], "tokens_per_expert_mean": [0, 3, 5e-324], "data_source_windows": [9223372036854775807, 9223372036854775807]}' \
  > "$out/h5/metrics.jsonl"
echo '[["model", "<script>alert(1)</script>"]]' > "$out/h5/report.facts.json"
"$titan" report "$out/h5" > /dev/null || fail "absurd numbers"
grep -q '&lt;script&gt;' "$out/h5/report.html" || fail "a fact is not escaped"
grep -q 'data-series="moe_imbalance" data-run="0" data-step="2147483647">3.000<' "$out/h5/report.html" ||
  fail "MoE imbalance: max / mean of the busiest block"
check "$out/h5/report.html" "$out/h5/metrics.jsonl"
echo "ok: bad lines and facts named by file and line; a torn last line skipped; absurd numbers drawn"
# metrics.save_for_all_ranks: the run's metrics are rank_0/metrics.jsonl (report found none)
"$titan" train "${m[@]}" --dump-folder "$out/ar" --steps 3 --metrics.save_for_all_ranks \
  > /dev/null
rm -f "$out/ar/report.html"
"$titan" report "$out/ar" > /dev/null || fail "report of a save_for_all_ranks run"
check "$out/ar/report.html" "$out/ar/rank_0/metrics.jsonl"
echo "ok: a save_for_all_ranks run's page is drawn from rank_0/metrics.jsonl"
# a 1-step run: every chart's one point is drawn as a dot (a one-point polyline draws nothing)
"$titan" train "${m[@]}" --dump-folder "$out/one" --steps 1 > /dev/null
"$python" - "$out/one/report.html" <<'EOF2' || fail "a 1-step run's charts show nothing"
import re, sys
html = open(sys.argv[1]).read()
lines = re.findall(r'<polyline[^>]*data-series="[a-z_]+"', html)
assert lines and html.count("<circle") >= len(lines), (len(lines), html.count("<circle"))
EOF2
echo "ok: a 1-step run's charts show their one point"
# a 100,000-step history with a one-step loss spike (50 among 2.0) and a dip (0.5): the loss
# line (at most 4000 points) reaches both (every k-th point had drawn it flat under an axis
# fitted to the spike), and ends at the last step
mkdir -p "$out/spike"
"$python" - "$out/spike/metrics.jsonl" <<'EOF2'
import sys
with open(sys.argv[1], "w") as f:
    for s in range(1, 100001):
        v = 50.0 if s == 50003 else 0.5 if s == 77777 else 2.0
        f.write('{"step": %d, "loss": %r}\n' % (s, v))
EOF2
"$titan" report "$out/spike" > /dev/null || fail "report of the spike history"
"$python" - "$out/spike/report.html" <<'EOF2' || fail "a one-step spike or dip left out of the loss line"
import re, sys
html = open(sys.argv[1]).read()
pts = re.search(r'<polyline[^>]*data-series="loss"[^>]*points="([^"]*)"', html).group(1).split()
ys = [float(p.split(",")[1]) for p in pts]
xs = [float(p.split(",")[0]) for p in pts]
assert len(pts) <= 4000, len(pts)
flat = max(set(ys), key=ys.count)
assert min(ys) < flat - 100, (min(ys), flat)  # the spike: far above the line (y grows down)
assert max(ys) > flat, (max(ys), flat)        # the dip
assert xs == sorted(xs) and abs(xs[-1] - 1144.0) < 0.11, ("points out of step order or the end cut", xs[-1])
EOF2
echo "ok: a one-step spike and dip in 100,000 steps are drawn"
