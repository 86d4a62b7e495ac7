"""Writes Hugging Face `tokenizers` reference encodings for titan's tokenizer parity test.

Corpus: every text in ../shared/data/tokenizer_vectors/*.json, Tiny Shakespeare split into
paragraphs, and generated strings (Unicode categories, emoji, CJK, combining marks, whitespace
runs, digits, contractions, added tokens). Output (little-endian binary):
  b"TOKP", u32 n_cases, then per case:
  u32 len, text (UTF-8) | u32 n, n x i32 ids | u32 len, decode(ids) | u32 len, decode(ids, skip_special)
Encoding uses add_special_tokens=False.
"""
import argparse
import glob
import json
import os
import random
import struct

from tokenizers import AddedToken, Tokenizer


def vector_texts(shared):
    out = []
    for path in sorted(glob.glob(os.path.join(shared, "data", "tokenizer_vectors", "*.json"))):
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
        for key in ("cases", "encode", "chat_template"):
            for c in d.get(key, []) or []:
                t = c.get("text", c.get("rendered"))
                if isinstance(t, str):
                    out.append(t)
    return out


def shakespeare(shared):
    with open(os.path.join(shared, "data", "tinyshakespeare", "input.txt"), encoding="utf-8") as f:
        text = f.read()
    parts = text.split("\n\n")
    out = [p + "\n\n" for p in parts[:-1]] + [parts[-1]]
    out.append(text[:20000])  # one long chunk
    return out


def generated(tok):
    rnd = random.Random(1234)
    s = [
        "DON'T", "I'M", "YOU'RE", "WE'VE", "HE'LL", "SHE'D", "IT'S", "don't", "I'm", "They'Re",
        "0123456789", "3.14159 2718281828 1,000,000", "x" * 3000, " " * 100, "\n" * 50,
        "\t \t  \n \r\n\r\n  a", "a    b", "  leading", "trailing   ", "mixed \u00a0nbsp\u2003em",
        "\u3000ideographic\u3000space", "\u0085nel\u2028ls\u2029ps",
        "你好，世界！这是一个测试。", "日本語のテキストです。カタカナ", "한국어 텍스트입니다",
        "Привет, мир! Ёлка", "Γειά σου Κόσμε", "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया",
        "ภาษาไทย", "😀😃😄😁🤖👩‍👩‍👧‍👦🏳️‍🌈 👍🏽", "e\u0301 a\u0308 A\u030a n\u0303", "\u1e9b\u0323",
        "Å Ω ﬁ ① ² ｶ", "\ufeffBOM", "zero\u200bwidth\u200djoiner", "ＦＵＬＬＷＩＤＴＨ１２３",
        "math: ∑∫∂√∞≈≠≤≥ ∀x∈ℝ", "code: def f(x):\n    return x**2  # comment\n",
        "<html><body>Hi</body></html>", "a<|endoftext|>b", "<|im_start|>user\nhi<|im_end|>",
        "<|im_start|><|im_start|>", "<think>\nreason\n</think>\n\nanswer", "<|endoftext",
        "emoji🙂in😎words", "123abc456DEF", "'s 'S 'll 'LL ''", "\x00\x01\x02\x7f", "\U0001F600" * 20,
        "ǅungla ǈ ǋ", "İstanbul ı", "straße STRASSE", "$$$ ### @@@ !!! ???", "—–-‐ «»“”„",
    ]
    pools = [
        (0x20, 0x7E), (0xA0, 0x24F), (0x300, 0x36F), (0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x6FF),
        (0x900, 0x97F), (0xE00, 0xE7F), (0x1100, 0x11FF), (0x2000, 0x206F), (0x2190, 0x23FF),
        (0x3040, 0x30FF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3), (0xFF00, 0xFFEF), (0x1F300, 0x1FAFF),
    ]
    for _ in range(400):
        n = rnd.randint(1, 60)
        chars = []
        for _ in range(n):
            r = rnd.random()
            if r < 0.15:
                chars.append(rnd.choice(" \t\n\r  "))
            elif r < 0.2:
                chars.append(rnd.choice("0123456789"))
            else:
                lo, hi = rnd.choice(pools)
                chars.append(chr(rnd.randint(lo, hi)))
        s.append("".join(chars))
    specials = [t.content for t in tok.get_added_tokens_decoder().values()]
    for _ in range(50):
        parts = []
        for _ in range(rnd.randint(1, 6)):
            if specials and rnd.random() < 0.4:
                parts.append(rnd.choice(specials))
            else:
                parts.append(rnd.choice(s[:60]))
        s.append("".join(parts))
    return s


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--shared", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    tok = Tokenizer.from_file(os.path.join(a.tokenizer, "tokenizer.json"))
    # The vocabulary as transformers' AutoTokenizer loads the folder: tokenizer_config.json's
    # added_tokens_decoder entries missing from tokenizer.json are added tokens too (torchtitan's
    # test tokenizer lists its special tokens only there).
    cfg_path = os.path.join(a.tokenizer, "tokenizer_config.json")
    if os.path.exists(cfg_path):
        with open(cfg_path, encoding="utf-8") as f:
            decoder = json.load(f).get("added_tokens_decoder") or {}
        have = tok.get_added_tokens_decoder()
        new = [AddedToken(e["content"], special=e.get("special", False), normalized=False)
               for i, e in sorted(decoder.items(), key=lambda kv: int(kv[0]))
               if int(i) not in have and e["content"] not in {t.content for t in have.values()}]
        tok.add_special_tokens([t for t in new if t.special])
        tok.add_tokens([t for t in new if not t.special])
    texts = vector_texts(a.shared) + shakespeare(a.shared) + generated(tok)
    encs = tok.encode_batch(texts, add_special_tokens=False)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    ntok = 0
    with open(a.out, "wb") as f:
        f.write(b"TOKP" + struct.pack("<I", len(texts)))
        for text, e in zip(texts, encs):
            ids = e.ids
            ntok += len(ids)
            b = text.encode("utf-8")
            d0 = tok.decode(ids, skip_special_tokens=False).encode("utf-8")
            d1 = tok.decode(ids, skip_special_tokens=True).encode("utf-8")
            f.write(struct.pack("<I", len(b)) + b)
            f.write(struct.pack("<I", len(ids)) + struct.pack("<%di" % len(ids), *ids))
            f.write(struct.pack("<I", len(d0)) + d0)
            f.write(struct.pack("<I", len(d1)) + d1)
    print("wrote %s: %d texts, %d tokens" % (a.out, len(texts), ntok))


if __name__ == "__main__":
    main()
