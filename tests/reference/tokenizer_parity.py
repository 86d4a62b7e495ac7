"""Writes Hugging Face `tokenizers` reference encodings for titan's tokenizer parity test.

Corpus: every text in ../shared/data/tokenizer_vectors/*.json, Tiny Shakespeare split into
paragraphs, generated strings (Unicode categories, emoji, CJK, combining marks, whitespace
runs, digits, contractions, added tokens), and byte strings that are not UTF-8 (their ids: HF's
for bytes.decode("utf-8", "replace")). Output (little-endian binary):
  b"TOKP", u32 n_cases, then per case:
  u32 len, text (the bytes titan encodes: UTF-8 but for the invalid cases) | u32 n, n x i32 ids |
  u32 len, decode(ids) | u32 len, decode(ids, skip_special)
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
        # U+180E (a space for PCRE2, not for HF), letters and numbers new in Unicode 15-16
        "\u180e's", "a\u180e\u180eb", "a \U0001D2C0", "Todhri: \U000105c0\U000105c1's",
        "\U00011F04\U00011F05 kawi", "\U00013460x1", "digits \U0001E4F0\U0001E4F9",
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
    # every code point (surrogates aside) in two contexts, 4096 a case: the pre-tokenizer's
    # \p{L}, \p{N} and \s are HF's for each (titan's PCRE2 had its own Unicode version)
    cps = [c for c in range(0x110000) if not 0xD800 <= c < 0xE000]
    for ctx in ("x{c}{c}1", " {c}'s"):
        for lo in range(0, len(cps), 4096):
            s.append("|".join(ctx.format(c=chr(c)) for c in cps[lo:lo + 4096]))
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


def invalid_utf8():
    """Byte strings that are not UTF-8: titan replaces each maximal subpart of an ill-formed
    sequence with one U+FFFD, so its ids must be HF's for bytes.decode("utf-8", "replace")
    (Python follows Unicode's recommended substitution). Truncated 2/3/4-byte sequences before
    ASCII, before another lead byte and at the end; surrogates, overlongs, > U+10FFFF, bytes
    that start nothing; then random mixtures of such pieces with valid characters."""
    fixed = [
        b"x\xe4\xb8y", b"x\xf0\x9f\x98y", b"x\xc3y", b"x\xe4y", b"x\xf0y", b"x\xf0\x9fy",
        b"x\xe4\xb8", b"x\xf0\x9f\x98", b"\xc3", b"\xe4\xb8\xe4\xb8\xad", b"\xf0\x9f\x98\xf0\x9f\x98\x80",
        b"\xe4\xb8\xc3\xa9", b"\xc3\xe4\xb8\xad", b"a\xed\xa0\x80b", b"\xed\xbf\xbf", b"\xed\x9f\xbf",
        b"a\xc0\x80b", b"a\xc1\xbfb", b"a\xe0\x80\x80b", b"a\xe0\x9f\xbfb", b"a\xf0\x80\x80\x80b",
        b"a\xf0\x8f\xbf\xbfb", b"a\xf4\x90\x80\x80b", b"a\xf4\x8f\xbf\xbfb", b"a\xf5\x80\x80\x80b",
        b"a\xf8\x88\x80\x80\x80b", b"a\xfc\x84\x80\x80\x80\x80b", b"\xfe\xff", b"\xff\xfe", b"\x80",
        b"\x80\x80\x80", b"\xbf", b"a\x80\xbfb", b"\xc2", b"\xdf", b"\xe0", b"\xe0\xa0", b"\xef\xbf",
        b"\xf4\x8f\xbf", b"\xf1\x80\x80", b"\xf3\xbf\xbf", b"x\xe4\xb8 y", b" \xe4\xb8\n",
        b"\xe4\xb8<|im_end|>", b"<|im_start|>\xf0\x9f\x98", b"caf\xe9 na\xefve", b"123\xe4\xb8456",
        b"\xe4\xb8\xe4\xb8\xe4\xb8", b"e\xcc", b"e\xcc\x81\xcc", b"\xea\xb0\xe1\x84",
    ]
    pieces = [b"a", b" ", b"Z9", b"\n", b"\xc3\xa9", b"\xe4\xb8\xad", b"\xf0\x9f\x98\x80", b"\xcc\x81",
              b"\xc3", b"\xe4", b"\xe4\xb8", b"\xf0", b"\xf0\x9f", b"\xf0\x9f\x98", b"\x80", b"\xbf",
              b"\xc0", b"\xc1", b"\xe0\x80", b"\xe0\xa0", b"\xed\xa0", b"\xed\x9f", b"\xf0\x80",
              b"\xf0\x90", b"\xf4\x8f", b"\xf4\x90", b"\xf5", b"\xf8", b"\xfe", b"\xff"]
    rnd = random.Random(99)
    mixed = [b"".join(rnd.choice(pieces) for _ in range(rnd.randint(1, 10))) for _ in range(1500)]
    mixed += [bytes(rnd.randrange(256) for _ in range(rnd.randint(1, 24))) for _ in range(500)]
    return fixed + mixed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--shared", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    tok = Tokenizer.from_file(os.path.join(a.tokenizer, "tokenizer.json"))
    # The vocabulary as transformers 5's AutoTokenizer loads the folder: tokenizer_config.json's
    # added_tokens_decoder entries whose content tokenizer.json's added tokens lack are added, in
    # the numeric order of their keys, one by one (`tokenizers` gives each its vocab id or the
    # next free one; the key is not the id). torchtitan's test tokenizer lists its special tokens
    # only there.
    cfg_path = os.path.join(a.tokenizer, "tokenizer_config.json")
    if os.path.exists(cfg_path):
        with open(cfg_path, encoding="utf-8") as f:
            decoder = json.load(f).get("added_tokens_decoder") or {}
        for _, e in sorted(decoder.items(), key=lambda kv: int(kv[0])):
            if e["content"] in {t.content for t in tok.get_added_tokens_decoder().values()}:
                continue
            t = AddedToken(e["content"], special=e.get("special", False), normalized=False)
            (tok.add_special_tokens if t.special else tok.add_tokens)([t])
    texts = vector_texts(a.shared) + shakespeare(a.shared) + generated(tok)
    raw = [t.encode("utf-8") for t in texts] + invalid_utf8()  # the bytes titan encodes
    texts += [b.decode("utf-8", "replace") for b in raw[len(texts):]]
    encs = tok.encode_batch(texts, add_special_tokens=False)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    ntok = 0
    with open(a.out, "wb") as f:
        f.write(b"TOKP" + struct.pack("<I", len(texts)))
        for b, e in zip(raw, encs):
            ids = e.ids
            ntok += len(ids)
            d0 = tok.decode(ids, skip_special_tokens=False).encode("utf-8")
            d1 = tok.decode(ids, skip_special_tokens=True).encode("utf-8")
            f.write(struct.pack("<I", len(b)) + b)
            f.write(struct.pack("<I", len(ids)) + struct.pack("<%di" % len(ids), *ids))
            f.write(struct.pack("<I", len(d0)) + d0)
            f.write(struct.pack("<I", len(d1)) + d1)
    print("wrote %s: %d texts, %d tokens" % (a.out, len(texts), ntok))


if __name__ == "__main__":
    main()
