"""One run's metrics in its three outputs, read independently: the console log (torchtitan's
`step:` and `validate step:` lines), metrics.jsonl (json) and the TensorBoard events
(TensorBoard's own EventAccumulator and event-file loader) must carry the same values for the
same steps:

- the console's figures are the JSONL's, formatted as the console formats them;
- every TensorBoard tag is at the logged steps (1, every LOG_FREQ, the last; validation tags
  at the validation steps), once each, with the JSONL's value as float32, wall times never
  going back;
- n_tokens_seen is the running sum of the steps' tokens (ntokens x DP ranks);
- memory: the peak RSS never falls, and no RSS sample (max_active) exceeds it (max_reserved).

usage: metrics_check.py DUMP_DIR CONSOLE_LOG LOG_FREQ VAL_FREQ STEPS [DP]
"""
import json
import math
import os
import re
import sys

import numpy as np
from tensorboard.backend.event_processing import event_file_loader
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

dump, log = sys.argv[1], sys.argv[2]
log_freq, val_freq, steps = map(int, sys.argv[3:6])
dp = int(sys.argv[6]) if len(sys.argv) > 6 else 1
fails = []


def check(cond, what):
    if not cond:
        fails.append(what)


rows = [json.loads(l) for l in open(os.path.join(dump, "metrics.jsonl"))]
by = {r["step"]: r for r in rows}
check([r["step"] for r in rows] == list(range(1, steps + 1)), "JSONL steps %s" % list(by))
logged = [s for s in range(1, steps + 1) if s == 1 or s % log_freq == 0 or s == steps]
validated = [s for s in range(1, steps + 1) if s == 1 or s % val_freq == 0 or s == steps]
check([s for s in by if "window_tps" in by[s]] == logged, "window figures at the logged steps")
check([s for s in by if "val_loss" in by[s]] == validated, "val_loss at the validation steps")

# --- the console ---
text = open(log).read()
num = r"([-+0-9.e]+)"
step_re = re.compile(
    r"step: +(\d+)  loss: +%s  grad_norm: +%s  lr: %s  memory: %sGiB\(%s%%\)  tps: %s  "
    r"tflops: %s  mfu: %s%%  data: %ss" % ((num,) * 9))
val_re = re.compile(r"validate step: +(\d+)  loss: +%s  perplexity: %s  memory: %sGiB\(%s%%\)  "
                    r"tps: %s  \((\d+) tokens\)" % ((num,) * 5))
console = {int(m.group(1)): m.groups()[1:] for m in step_re.finditer(text)}
check(sorted(console) == logged, "console logged steps %s, want %s" % (sorted(console), logged))
for s, got in console.items():
    r = by[s]
    want = ("%8.5f" % r["loss"], "%8.4f" % r["grad_norm"], "%.3e" % r["lr"], "%.2f" % r["memory_gib"],
            None, "%.1f" % r["window_tps"], "%.3f" % r["window_tflops"], "%.1f" % r["window_mfu"],
            "%.3f" % r["window_data_s"])
    for name, g, w in zip(["loss", "grad_norm", "lr", "memory", "memory %", "tps", "tflops", "mfu",
                           "data"], got, want):
        check(w is None or g == w.strip(), "step %d: console %s %s, JSONL %s" % (s, name, g, w))
vconsole = {int(m.group(1)): m.groups()[1:] for m in val_re.finditer(text)}
check(sorted(vconsole) == validated, "console validate steps %s" % sorted(vconsole))
for s, got in vconsole.items():
    r = by[s]
    want = ("%8.5f" % r["val_loss"], "%.3f" % math.exp(r["val_loss"]), "%.2f" % r["memory_gib"],
            None, "%.1f" % r["val_tps"], str(r["val_tokens"]))
    for name, g, w in zip(["loss", "perplexity", "memory", "memory %", "tps", "tokens"], got, want):
        check(w is None or g == w.strip(), "step %d: validate %s %s, JSONL %s" % (s, name, g, w))

# --- memory: a peak is never below a sample, and never falls ---
mem = [by[s]["memory_gib"] for s in sorted(by)]
check(all(a <= b for a, b in zip(mem, mem[1:])), "peak RSS (memory_gib) fell: %s" % mem)
for s in logged:
    check(by[s]["memory_active_gib"] <= by[s]["memory_gib"],
          "step %d: max active RSS %.9f GiB above the peak RSS %.9f GiB"
          % (s, by[s]["memory_active_gib"], by[s]["memory_gib"]))

# --- TensorBoard ---
runs = sorted(os.listdir(os.path.join(dump, "tb")))
check(len(runs) == 1, "one TensorBoard run folder: %s" % runs)
run = os.path.join(dump, "tb", runs[-1])
acc = EventAccumulator(run, size_guidance={"scalars": 0})
acc.Reload()
tb = {tag: {e.step: e.value for e in acc.Scalars(tag)} for tag in acc.Tags()["scalars"]}
for tag in tb:
    got = [e.step for e in acc.Scalars(tag)]
    want = validated if tag.startswith("validation_metrics/") else logged
    check(got == want, "TensorBoard %s at steps %s, want %s" % (tag, got, want))
f32 = np.float32
seen, total = {}, 0
for s in sorted(by):
    total += by[s]["ntokens"] * dp
    seen[s] = total
train_keys = {"loss_metrics/global_avg_loss": "loss", "loss_metrics/global_max_loss": "max_loss",
              "grad_norm": "grad_norm", "lr": "lr", "throughput(tps)": "window_tps",
              "tflops": "window_tflops", "mfu(%)": "window_mfu",
              "memory/max_active(GiB)": "memory_active_gib", "memory/max_reserved(GiB)": "memory_gib",
              "time_metrics/data_loading(s)": "window_data_s",
              "time_metrics/data_loading(%)": "window_data_pct",
              "time_metrics/end_to_end(s)": "window_step_s"}
val_keys = {"validation_metrics/loss": "val_loss", "validation_metrics/throughput(tps)": "val_tps",
            "validation_metrics/memory/max_reserved(GiB)": "memory_gib"}
for tag, key in list(train_keys.items()) + list(val_keys.items()):
    check(tag in tb, "TensorBoard tag %s missing" % tag)
    for s, v in tb.get(tag, {}).items():
        check(f32(v) == f32(by[s][key]), "step %d: TensorBoard %s %r, JSONL %s %r"
              % (s, tag, v, key, by[s][key]))
for s, v in tb.get("n_tokens_seen", {}).items():
    check(f32(v) == f32(seen[s]), "step %d: n_tokens_seen %r, want %d" % (s, v, seen[s]))
for s, v in tb.get("validation_metrics/perplexity", {}).items():
    check(abs(v - math.exp(by[s]["val_loss"])) <= 1e-6 * v, "step %d: perplexity" % s)
for s in logged:  # the console's memory % is TensorBoard's max_reserved(%)
    check("%.1f" % tb["memory/max_reserved(%)"][s] == console[s][4],
          "step %d: console memory %% %s, TensorBoard %r" % (s, console[s][4],
                                                           tb["memory/max_reserved(%)"][s]))
for prefix, at in (("", logged), ("validation_metrics/", validated)):
    for s in at:
        for unit in ("GiB", "%"):
            a, r = (tb[prefix + "memory/max_%s(%s)" % (k, unit)][s] for k in ("active", "reserved"))
            check(a <= r, "step %d: TensorBoard %smemory/max_active(%s) %r above max_reserved %r"
                  % (s, prefix, unit, a, r))
for name in os.listdir(run):
    wall = [e.wall_time for e in event_file_loader.EventFileLoader(os.path.join(run, name)).Load()]
    check(all(a <= b for a, b in zip(wall, wall[1:])), "%s: wall times go back" % name)

for f in fails:
    print("FAIL " + f)
print("%d checks failed" % len(fails) if fails else
      "ok: console, metrics.jsonl and TensorBoard agree at steps %s (validation %s)"
      % (logged, validated))
sys.exit(1 if fails else 0)
