"""Encode throughput of Hugging Face `tokenizers` (and `bpe-qwen` when installed) on the
same inputs and in the same modes as bench/tokenizer_speed.c; driven by bench_tokenizer.sh.

  python tokenizer_speed.py gen OUT                 write the Unicode-heavy input (~1 MB)
  python tokenizer_speed.py run TOKDIR FILE LABEL [REPS]
      single-thread modes; set RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false first
  python tokenizer_speed.py batch TOKDIR FILE LABEL THREADS [REPS]
      encode_batch over the documents; set RAYON_NUM_THREADS=THREADS first
  python tokenizer_speed.py table RESULTS_FILE      print the comparison table

Output lines: `IMPL LABEL MODE MB_PER_S TOKENS HASH` (MB = 1e6 bytes of UTF-8 input, HASH =
FNV-1a 64 over the ids as uint32, as in tokenizer_speed.c). Every mode is the best of REPS
runs; "cold" runs use a freshly loaded tokenizer object each time (load time excluded),
"warm" runs reuse one that has already encoded the same input. Documents: the file split on
"\n\n"; their bytes (separators excluded) are what MB/s counts.
"""

import os
import random
import sys
import time

M64 = (1 << 64) - 1


def fnv(ids, h=14695981039346656037):
    for i in ids:
        h = ((h ^ (i & 0xFFFFFFFF)) * 1099511628211) & M64
    return h


# ---------------------------------------------------------------- Unicode-heavy input

CJK_WORDS = ["中文", "日本語", "你好", "世界", "机器学习", "深度学习", "模型", "训练", "数据",
             "東京", "大阪", "漢字", "ひらがな", "カタカナ", "こんにちは", "ありがとう", "한국어",
             "안녕하세요", "서울", "人工智能", "自然语言处理", "北京大学", "計算機"]
CYR_WORDS = ["привет", "мир", "Москва", "язык", "модель", "обучение", "данные", "сеть",
             "Україна", "Київ", "български", "Сербија", "щётка", "ёлка", "Жуковский"]
ARA_WORDS = ["مرحبا", "العالم", "اللغة", "العربية", "نموذج", "تعلم", "البيانات", "القاهرة",
             "كتاب", "مكتبة", "شبكة", "سلام", "שלום", "עברית"]
EMOJI = ["😀", "🚀", "🎉", "❤️", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇯🇵", "🇺🇦", "🤖", "🔥", "✨", "🧪",
         "👩🏿‍💻", "🙈", "⭐", "☕", "🍣"]
ASCII_WORDS = ["the", "model", "token", "Hello", "world", "data", "train", "loss", "GPU",
               "learning", "rate", "batch", "and", "of", "is", "to", "in", "Transformer",
               "attention", "x", "y", "foo_bar", "i++", "f(x)", "--help", "https://example.com"]
COMBINING = ["\u0301", "\u0300", "\u0308", "\u0303", "\u0327", "\u030c", "\u0323", "\u0306",
             "\u0361", "\u20dd"]
BASES = "aeiouAEIOUncszyg"
PUNCT = [",", ".", "!", "?", "、", "。", "，", "：", "؟", "«", "»", "—", "…", "(", ")", "\"", "'"]


def gen_word(rng):
    r = rng.random()
    if r < 0.22:
        if rng.random() < 0.3:  # random CJK run (rare characters too)
            return "".join(chr(rng.randint(0x4E00, 0x9FFF)) for _ in range(rng.randint(1, 6)))
        return "".join(rng.choice(CJK_WORDS) for _ in range(rng.randint(1, 3)))
    if r < 0.38:
        return rng.choice(CYR_WORDS)
    if r < 0.52:
        return rng.choice(ARA_WORDS)
    if r < 0.60:
        return "".join(rng.choice(EMOJI) for _ in range(rng.randint(1, 3)))
    if r < 0.70:  # combining marks: decomposed accents (NFC composes some) and stacks
        return "".join(rng.choice(BASES) + "".join(rng.choice(COMBINING)
                                                   for _ in range(rng.randint(1, 3)))
                       for _ in range(rng.randint(1, 5)))
    if r < 0.80:  # digits
        return str(rng.randint(0, 10 ** rng.randint(1, 12)))
    return rng.choice(ASCII_WORDS)


def gen_text(target_bytes=1_000_000, seed=1234):
    rng = random.Random(seed)
    paras, size = [], 0
    while size < target_bytes:
        lines = []
        for _ in range(rng.randint(1, 6)):
            words = []
            for _ in range(rng.randint(3, 18)):
                w = gen_word(rng)
                if rng.random() < 0.15:
                    w += rng.choice(PUNCT)
                words.append(w)
            sep = " " if rng.random() < 0.8 else ""
            lines.append(sep.join(words))
        p = "\n".join(lines)
        paras.append(p)
        size += len(p.encode("utf-8")) + 2
    return "\n\n".join(paras) + "\n"


# ---------------------------------------------------------------- measurements

def read(path):
    with open(path, "rb") as f:
        return f.read().decode("utf-8")


def emit(impl, label, mode, nbytes, best, ids_n, h):
    print(f"{impl} {label} {mode} {nbytes / 1e6 / best:.3f} {ids_n} {h:016x}", flush=True)


def bench_impl(impl, label, text, docs, doc_bytes, load, enc, reps):
    nbytes = len(text.encode("utf-8"))
    t0 = time.perf_counter()
    load()
    print(f"{impl} {label} load {time.perf_counter() - t0:.3f} 0 0", flush=True)

    def whole(tok):
        a = time.perf_counter()
        ids = enc(tok, text)
        return time.perf_counter() - a, ids

    def per_doc(tok):
        out = []
        a = time.perf_counter()
        for d in docs:
            out.append(enc(tok, d))
        e = time.perf_counter() - a
        return e, [i for ids in out for i in ids]

    for name, fn, nb in (("whole", whole, nbytes), ("docs", per_doc, doc_bytes)):
        (cold, ids_c), (warm, ids_w) = cold_warm(load, fn, reps)
        emit(impl, label, name + "-cold", nb, cold, len(ids_c), fnv(ids_c))
        emit(impl, label, name + "-warm", nb, warm, len(ids_w), fnv(ids_w))


def cold_warm(load, fn, reps):
    """Best time of fn(tok) -> (seconds, ids) over reps runs, each on a freshly loaded
    tokenizer (cold cache), then over reps runs on one tokenizer after a first run (warm).
    Returns ((cold_s, ids), (warm_s, ids))."""
    best, ids = 1e30, None
    for _ in range(reps):
        tok = load()
        e, ids = fn(tok)
        best = min(best, e)
        del tok
    cold = (best, ids)
    tok = load()
    fn(tok)
    best = 1e30
    for _ in range(reps):
        e, ids = fn(tok)
        best = min(best, e)
    return cold, (best, ids)


def split_docs(text):
    docs = text.split("\n\n")
    return docs, sum(len(d.encode("utf-8")) for d in docs)


def cmd_run(tokdir, path, label, reps):
    from tokenizers import Tokenizer

    text = read(path)
    docs, doc_bytes = split_docs(text)
    tj = os.path.join(tokdir, "tokenizer.json")
    bench_impl("hf", label, text, docs, doc_bytes, lambda: Tokenizer.from_file(tj),
               lambda t, s: t.encode(s, add_special_tokens=False).ids, reps)
    try:
        from bpe_qwen.bpe_qwen import QwenTokenizer
    except Exception as e:  # noqa: BLE001
        print(f"# bpe-qwen not available: {type(e).__name__}: {e}", flush=True)
        return
    try:
        bench_impl("bpeqwen", label, text, docs, doc_bytes, lambda: QwenTokenizer(tokdir),
                   lambda t, s: t.encode(s), reps)
    except Exception as e:  # noqa: BLE001
        print(f"# bpe-qwen failed: {type(e).__name__}: {e}", flush=True)


def cmd_batch(tokdir, path, label, threads, reps):
    from tokenizers import Tokenizer

    text = read(path)
    docs, doc_bytes = split_docs(text)
    tj = os.path.join(tokdir, "tokenizer.json")
    mode = f"docs{threads}t"

    def hf_batch(tok):
        a = time.perf_counter()
        encs = tok.encode_batch(docs, add_special_tokens=False)
        e = time.perf_counter() - a
        return e, [i for en in encs for i in en.ids]

    def run(impl, load, fn):
        (cold, ids_c), (warm, ids_w) = cold_warm(load, fn, reps)
        emit(impl, label, mode + "-cold", doc_bytes, cold, len(ids_c), 0)
        emit(impl, label, mode + "-warm", doc_bytes, warm, len(ids_w), 0)

    run("hf", lambda: Tokenizer.from_file(tj), hf_batch)
    try:
        from bpe_qwen.bpe_qwen import QwenTokenizer

        def bq_batch(tok):
            a = time.perf_counter()
            out = tok.encode_batch_parallel(docs)
            e = time.perf_counter() - a
            return e, [i for ids in out for i in ids]

        run("bpeqwen", lambda: QwenTokenizer(tokdir), bq_batch)
    except Exception as e:  # noqa: BLE001
        print(f"# bpe-qwen batch failed: {type(e).__name__}: {e}", flush=True)


def cmd_table(path):
    res, notes = {}, []
    order = []
    with open(path) as f:
        for line in f:
            if line.startswith("#"):
                notes.append(line.rstrip())
                continue
            p = line.split()
            if len(p) < 6 or p[2] in ("load", "ndocs"):
                continue
            impl, label, mode, mbps, ntok, h = p[:6]
            res[(impl, label, mode)] = (float(mbps), int(ntok), h)
            if (label, mode) not in order:
                order.append((label, mode))
    has_bq = any(k[0] == "bpeqwen" for k in res)
    hdr = f"{'input':<12} {'mode':<12} {'titan MB/s':>10} {'HF MB/s':>8} {'titan/HF':>8}"
    if has_bq:
        hdr += f" {'bpe-qwen MB/s':>13} {'titan/bq':>8}"
    print(hdr)
    met = True
    for label, mode in order:
        t = res.get(("titan", label, mode))
        h = res.get(("hf", label, mode))
        b = res.get(("bpeqwen", label, mode))
        fmt = lambda r: f"{r[0]:.2f}" if r else "-"  # noqa: E731
        ratio = f"{t[0] / h[0]:.2f}" if t and h else "-"
        if t and h and t[0] < h[0]:
            met = False
        row = f"{label:<12} {mode:<12} {fmt(t):>10} {fmt(h):>8} {ratio:>8}"
        if has_bq:
            rb = f"{t[0] / b[0]:.2f}" if t and b else "-"
            row += f" {fmt(b):>13} {rb:>8}"
        print(row)
    print()
    # id agreement: token counts everywhere, hashes where both sides hash the full sequence
    ok = True
    for label, mode in order:
        t = res.get(("titan", label, mode))
        for impl in ("hf", "bpeqwen"):
            o = res.get((impl, label, mode))
            if not (t and o):
                continue
            same_n = t[1] == o[1]
            same_h = t[2] == o[2] or int(t[2], 16) == 0 or int(o[2], 16) == 0
            if not (same_n and same_h):
                if impl == "hf":
                    ok = False
                print(f"ids differ: titan vs {impl}, {label} {mode}: tokens {t[1]} vs {o[1]}, "
                      f"hash {t[2]} vs {o[2]}")
    for label in sorted({lb for lb, _ in order}):
        t = res.get(("titan", label, "whole-cold"))
        h = res.get(("hf", label, "whole-cold"))
        if t and h:
            print(f"whole-file ids {label}: titan {t[1]} tokens hash {t[2]}, HF {h[1]} tokens "
                  f"hash {h[2]} -> {'EQUAL' if t[1:] == h[1:] else 'DIFFERENT'}")
    for n in notes:
        print(n)
    print(f"ids_match_hf={'yes' if ok else 'no'}")
    print(f"target_met(titan >= HF in every mode)={'yes' if met else 'no'}")


def main(argv):
    cmd = argv[1]
    if cmd == "gen":
        with open(argv[2], "w", encoding="utf-8") as f:
            f.write(gen_text())
    elif cmd == "run":
        cmd_run(argv[2], argv[3], argv[4], int(argv[5]) if len(argv) > 5 else 3)
    elif cmd == "batch":
        cmd_batch(argv[2], argv[3], argv[4], int(argv[5]), int(argv[6]) if len(argv) > 6 else 3)
    elif cmd == "table":
        cmd_table(argv[2])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
