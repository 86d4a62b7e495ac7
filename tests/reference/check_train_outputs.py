"""A training run's outputs read by independent tools: the TensorBoard event files through
TensorBoard's own reader (EventAccumulator) must hold torchtitan's tags in the run's folder
tb/YYYYmmdd-HHMM at the logged steps (1, every LOG_FREQ, the last) with the values of
metrics.jsonl (as float32; throughput and MFU are the logging window's), the validation tags
at the validation steps, and the last validation loss must equal the
mean cross-entropy that Hugging Face transformers computes with the exported model on the
same held-out windows (byte tokens: windows of seq_len + 1 consecutive bytes).

Each optimizer's learning rates are logged as torchtitan 0.3 logs them
(LRSchedulersContainer.get_metrics: "lr/NAME", or "lr/NAME/i" for an optimizer of several
groups): the names come from real torch.optim optimizers built as 0.3 builds them from
GROUPS_TOML's [[optimizer.param_groups]] (one optimizer per optimizer_name in order of first
appearance, a group per entry) or, without it, one AdamW; the values are each group's lr times
the schedule's factor, in metrics.jsonl and TensorBoard alike.

usage: check_train_outputs.py DUMP_DIR VAL_FILE SEQ_LEN BATCH VAL_STEPS LOG_FREQ VAL_FREQ STEPS
       [GROUPS_TOML]
"""
import json
import math
import os
import sys
import tomllib

import numpy as np
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from transformers import Qwen3ForCausalLM

dump, val_file = sys.argv[1], sys.argv[2]
T, B, vsteps, log_freq, val_freq, steps = map(int, sys.argv[3:9])
fails = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        fails.append(what)


rows = [json.loads(l) for l in open(os.path.join(dump, "metrics.jsonl"))]
by_step = {r["step"]: r for r in rows}
# the JSONL keeps every figure to the double (%.17g): during the linear warmup lr is
# proportional to the step, lr(s) / lr(1) = s to ~1 ulp (it was written to 9 digits: ~1e-9)
lr1 = by_step[1]["lr"]
if steps >= 3:
    ratio_err = max(abs(by_step[s]["lr"] / lr1 - s) / s for s in (2, 3) if s in by_step)
    check(ratio_err < 1e-14, "lr in metrics.jsonl to full precision (warmup ratios off by %.1e)"
          % ratio_err)
runs = os.listdir(os.path.join(dump, "tb"))
check(len(runs) == 1 and len(runs[0]) == 13 and runs[0][8] == "-", "one TensorBoard run folder %s" % runs)
acc = EventAccumulator(os.path.join(dump, "tb", runs[0]), size_guidance={"scalars": 0})
acc.Reload()
tags = set(acc.Tags()["scalars"])
want = {"loss_metrics/global_avg_loss", "grad_norm", "lr", "throughput(tps)", "tflops", "mfu(%)",
        "memory/max_reserved(GiB)", "time_metrics/data_loading(s)", "n_tokens_seen",
        "time_metrics/data_loading(%)", "memory/max_active(GiB)", "memory/max_active(%)",
        "loss_metrics/global_max_loss", "validation_metrics/loss", "validation_metrics/perplexity",
        "validation_metrics/throughput(tps)"}
check(want <= tags, "TensorBoard tags present: missing %s" % sorted(want - tags))
logged = sorted({s for s in range(1, steps + 1) if s == 1 or s % log_freq == 0 or s == steps})
for tag, key in [("loss_metrics/global_avg_loss", "loss"), ("grad_norm", "grad_norm"), ("lr", "lr"),
                 ("throughput(tps)", "window_tps"), ("mfu(%)", "window_mfu"), ("memory/max_reserved(GiB)", "memory_gib"),
                 ("loss_metrics/global_max_loss", "max_loss")]:
    ev = acc.Scalars(tag)
    check([e.step for e in ev] == logged, "%s logged at steps %s" % (tag, [e.step for e in ev]))
    ok = all(np.float32(e.value) == np.float32(by_step[e.step][key]) for e in ev)
    check(ok, "%s values equal metrics.jsonl %s (float32)" % (tag, key))

# learning rates per optimizer, torchtitan 0.3's names
groups = (tomllib.load(open(sys.argv[9], "rb"))["optimizer"]["param_groups"] if len(sys.argv) > 9
          else [dict(optimizer_name="AdamW", optimizer_kwargs=dict(lr=lr1))])
by_name = {}
for g in groups:
    by_name.setdefault(g["optimizer_name"], []).append(g["optimizer_kwargs"]["lr"])
want_lr = {}
for name, lrs in by_name.items():  # torchtitan's get_metrics over real optimizers
    opt = getattr(torch.optim, name)([dict(params=[torch.zeros(1, requires_grad=True)], lr=l)
                                      for l in lrs])
    for i, pg in enumerate(opt.param_groups):
        want_lr["lr/%s" % type(opt).__name__ if len(opt.param_groups) == 1
                else "lr/%s/%d" % (type(opt).__name__, i)] = pg["lr"]
first = groups[0]["optimizer_kwargs"]["lr"]
got_lr = {k for k in rows[0] if k.startswith("lr/")}
check(got_lr == set(want_lr), "metrics.jsonl's learning rates %s, torchtitan 0.3's %s"
      % (sorted(got_lr), sorted(want_lr)))
check(all(abs(r[k] - want_lr[k] * r["lr"] / first) <= 1e-12 * want_lr[k] for r in rows
          for k in want_lr if k in r), "each group's lr = its lr x the schedule's factor")
for k in sorted(want_lr):
    ev = acc.Scalars(k) if k in tags else []
    check([e.step for e in ev] == logged and
          all(np.float32(e.value) == np.float32(by_step[e.step][k]) for e in ev),
          "TensorBoard %s at the logged steps, equal to metrics.jsonl" % k)
vev = acc.Scalars("validation_metrics/loss")
# torchtitan validates at step 1 and every val_freq-th step; titan at the last one too
vsteps_logged = [s for s in range(1, steps + 1) if s == 1 or s % val_freq == 0 or s == steps]
check([e.step for e in vev] == vsteps_logged, "validation loss at steps %s" % [e.step for e in vev])
check(all(np.float32(e.value) == np.float32(by_step[e.step]["val_loss"]) for e in vev),
      "validation values equal metrics.jsonl val_loss")
pev = acc.Scalars("validation_metrics/perplexity")
check(len(pev) == len(vev) and all(abs(p.value - math.exp(v.value)) <= 1e-6 * p.value
                                   for p, v in zip(pev, vev)),
      "validation perplexity = exp(validation loss)")

# The last validation loss against transformers on the exported weights.
data = open(val_file, "rb").read()
# steps -1: every whole window once, the last batch may be short (torchtitan's validation
# loader keeps it); steps N: N whole batches of the set read as a repeating stream (torchtitan
# repeats the set for bounded validation: more batches than it holds wrap around)
n_windows = len(data) // (T + 1) if vsteps <= 0 else vsteps * B
data = data * (n_windows * (T + 1) // len(data) + 1)
w = torch.tensor([list(data[i * (T + 1):(i + 1) * (T + 1)]) for i in range(n_windows)])
model = Qwen3ForCausalLM.from_pretrained(os.path.join(dump, "hf"), torch_dtype=torch.float32).eval()
with torch.no_grad():
    logits = model(w[:, :-1]).logits.double()
ce = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1))
ref = ce.item()
got = by_step[steps]["val_loss"]
check(abs(got - ref) <= 1e-5 * abs(ref), "val_loss %.9f vs transformers %.9f (%d windows)" % (got, ref, n_windows))
check(abs(math.exp(got) - math.exp(ref)) / math.exp(ref) < 1e-4, "perplexity %.4f" % math.exp(got))
if fails:
    sys.exit(1)
