"""Checks a titan report page against the metrics.jsonl files it was drawn from.

usage: report_check.py PAGE JSONL [JSONL ...] [--fact LABEL=TEXT ...] [--log-steps]

The page is parsed with Python's html.parser (the DOM, not the bytes titan wrote) and,
for run i (the i-th JSONL):
- the training-loss polyline has one point per line, x linear in the step and y linear in the
  loss (pixel positions within rounding); the validation-loss polyline one point per line with
  val_loss;
- every printed last value is Python's formatting of the last value in the file, at its step
  (MoE: the largest over blocks of tokens_per_expert_max / _mean);
- one page: the headline figures likewise, a resume mark at each "resumed_from", and a
  dataset mixture's table the last "data_source_windows" (each source's windows and share);
- nothing is fetched or run: no script element, no src/href attribute, no url() or @import;
  no nan or inf anywhere (coordinates or figures).
--fact LABEL=TEXT: the facts table's row LABEL contains TEXT. --log-steps: x is linear in log10(step).
"""
import json, math, re, sys
from html.parser import HTMLParser

FMT = {"loss": "%.4f", "val_loss": "%.4f", "lr": "%.3e", "grad_norm": "%.4f",
       "window_tps": "%.1f", "window_mfu": "%.2f", "memory_gib": "%.3f",
       "memory_active_gib": "%.3f", "moe_imbalance": "%.3f"}


class Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.stack, self.text = [], [], {}

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag not in ("line", "polyline", "circle", "meta", "i", "br"):
            self.stack.append((tag, a, len(self.tags) - 1))

    def handle_endtag(self, tag):
        while self.stack:
            t, a, k = self.stack.pop()
            if t == tag:
                break

    def handle_data(self, data):
        for t, a, k in self.stack:
            self.text[k] = self.text.get(k, "") + data


def main():
    args = sys.argv[1:]
    facts = [a.split("=", 1) for i, a in enumerate(args) if i and args[i - 1] == "--fact"]
    files = [a for i, a in enumerate(args) if a != "--fact" and not (i and args[i - 1] == "--fact")]
    log_x = "--log-steps" in files
    files = [f for f in files if f != "--log-steps"]
    page, jsonls = files[0], files[1:]
    raw = open(page, encoding="utf-8").read()
    p = Page()
    p.feed(raw)
    fails = []
    for bad in (r"<script", r"\bsrc\s*=", r"\bhref\s*=", r"url\(", r"@import", r"\b-?(nan|inf)\b"):
        if re.search(bad, raw, re.I):
            fails.append("the page has %s" % bad)

    def find(tag, **want):
        return [(k, a) for k, (t, a) in enumerate(p.tags)
                if t == tag and all(a.get(x.replace("_", "-")) == v for x, v in want.items())]

    for i, path in enumerate(jsonls):
        rows = [json.loads(l) for l in open(path) if l.strip()]
        for r in rows:  # MoE: the busiest block's max / mean tokens per expert
            if "tokens_per_expert_max" in r:
                r["moe_imbalance"] = max(a / b for a, b in zip(r["tokens_per_expert_max"],
                                                               r["tokens_per_expert_mean"])
                                         if b > 0 and math.isfinite(a / b))
        run = str(i)
        for key, want_rows in (("loss", rows), ("val_loss", [r for r in rows if "val_loss" in r])):
            lines = find("polyline", data_series=key, data_run=run)
            if not want_rows:
                if lines:
                    fails.append("run %d: a %s polyline without data" % (i, key))
                continue
            if len(lines) != 1:
                fails.append("run %d: %d %s polylines" % (i, len(lines), key))
                continue
            pts = [tuple(map(float, q.split(","))) for q in lines[0][1]["points"].split()]
            if len(pts) != len(want_rows):
                fails.append("run %d: %s polyline has %d points for %d steps"
                             % (i, key, len(pts), len(want_rows)))
                continue
            xs, ys = [q[0] for q in pts], [q[1] for q in pts]
            steps, vals = [r["step"] for r in want_rows], [r[key] for r in want_rows]
            if log_x:
                steps = [math.log10(x) for x in steps]
            for name, px, data in (("x/step", xs, steps), ("y/" + key, ys, vals)):
                lo, hi = min(range(len(data)), key=data.__getitem__), max(range(len(data)), key=data.__getitem__)
                if data[hi] == data[lo]:
                    continue
                scale = (px[hi] - px[lo]) / (data[hi] - data[lo])
                worst = max(abs(px[lo] + (d - data[lo]) * scale - q) for d, q in zip(data, px))
                if worst > 0.15:
                    fails.append("run %d: %s not linear (off by %.2f px)" % (i, name, worst))
                if (scale > 0) != (name == "x/step"):  # SVG's y grows downwards
                    fails.append("run %d: %s drawn the wrong way round" % (i, name))
        for key, fmt in FMT.items():
            have = [r for r in rows if key in r]
            printed = find("b", data_series=key, data_run=run)
            if not have:
                if printed:
                    fails.append("run %d: %s printed without data" % (i, key))
                continue
            if len(printed) != 1:
                fails.append("run %d: %s printed %d times" % (i, key, len(printed)))
                continue
            k, a = printed[0]
            text = p.text.get(k, "").strip()
            if text != fmt % have[-1][key] or int(a["data-step"]) != have[-1]["step"]:
                fails.append("run %d: last %s printed %r at step %s; the file: %r at step %d"
                             % (i, key, text, a["data-step"], fmt % have[-1][key], have[-1]["step"]))
        if len(jsonls) == 1:
            for k, a in [(k, a) for k, (t, a) in enumerate(p.tags) if "data-kpi" in a]:
                key = a["data-kpi"]
                have = [r for r in rows if key in r]
                if not have or p.text.get(k, "").strip() != FMT[key] % have[-1][key]:
                    fails.append("headline %s: %r" % (key, p.text.get(k)))
            marks = sorted(int(a["data-step"]) for t, a in p.tags if t == "line" and a.get("class") == "resume")
            want = sorted(r["resumed_from"] for r in rows if "resumed_from" in r)
            charts = len([1 for t, a in p.tags if t == "section" and "data-chart" in a])
            if marks != sorted(want * charts):
                fails.append("resume marks at %s, want %s on each of %d charts" % (marks, want, charts))
    if len(jsonls) == 1:  # a dataset mixture: the last line's windows per source, and shares
        rows = [json.loads(l) for l in open(jsonls[0]) if l.strip()]
        have = [r for r in rows if "data_source_windows" in r]
        srcs = sorted((int(a["data-source"]), k) for k, (t, a) in enumerate(p.tags)
                      if t == "tr" and "data-source" in a)
        if have:
            w = have[-1]["data_source_windows"]
            want = ["%d (%.1f%%)" % (n, 100.0 * n / sum(w) if sum(w) else 0.0) for n in w]
            got = [p.text.get(k, "").split("source %d" % i, 1)[-1].strip() for i, k in srcs]
            if [i for i, k in srcs] != list(range(1, len(w) + 1)) or got != want:
                fails.append("data sources: %s, want %s" % (got, want))
        elif srcs:
            fails.append("a data sources table without data_source_windows")
    for label, text in facts:
        rows = [k for k, (t, a) in enumerate(p.tags) if t == "tr" and a.get("data-fact") == label]
        if not rows or text not in p.text.get(rows[0], ""):
            fails.append("fact %s: %r does not contain %r"
                         % (label, p.text.get(rows[0]) if rows else None, text))
    for f in fails:
        print("FAIL:", f)
    if not fails:
        print("ok: %s matches %s" % (page, " ".join(jsonls)))
    sys.exit(1 if fails else 0)


main()
