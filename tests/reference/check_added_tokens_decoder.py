"""titan's tokenizer counts tokenizer_config.json's added_tokens_decoder as vocabulary, as
transformers' AutoTokenizer does: for torchtitan's test tokenizer (whose tokenizer.json has no
added_tokens), `titan encode` gives AutoTokenizer's ids for text around every such token, and
`titan decode` (with and without --skip-special) gives its text back.

Then the ids transformers 5 gives entries that are not in the tokenizer yet (the entries in
the numeric order of their keys; a content in model.vocab keeps its vocab id, a new one gets the
next free id, whatever its key says): torchtitan v0.2.2's test tokenizer (keys 128000 / 128001
for bos / eos past a 2002-id vocabulary: AutoTokenizer gives 2002 / 2003, 2004 ids), and a
made-up config with keys out of string order, a key inside the vocabulary with new content, a
vocab token under another key, a content listed twice and a non-special entry. For each, the
ids of text around every entry, bos / eos, and the vocabulary size equal AutoTokenizer's.

Then the special tokens a config names (bos_token ... mask_token, additional_special_tokens,
extra_special_tokens as a list or an object): transformers 5 appends those in neither the
vocabulary nor the added tokens, in that order after added_tokens_decoder's, and makes one that
is an ordinary vocabulary word a special added token (split out of text whole, dropped by
skip_special_tokens). Four configs over v0.2.2's tokenizer.json: encode, decode (with and
without --skip-special) and the size equal AutoTokenizer's.

usage: check_added_tokens_decoder.py TITAN_BINARY TOKENIZER_DIR TEXT_FILE [WORK_DIR]
"""
import json
import os
import re
import shutil
import subprocess
import sys

from transformers import AutoTokenizer


def run(cmd, data):
    return subprocess.run(cmd, input=data, capture_output=True, check=True).stdout.decode("utf-8")


def check_ids(titan, tok_dir, base, work):
    """AutoTokenizer's ids, bos / eos and size for every added_tokens_decoder entry's text."""
    hf = AutoTokenizer.from_pretrained(tok_dir)
    with open(f"{tok_dir}/tokenizer_config.json", encoding="utf-8") as f:
        decoder = json.load(f)["added_tokens_decoder"]
    specials = [e["content"] for e in decoder.values()]
    texts = [base[:300] + "".join(specials) + base[300:400], " ".join(specials),
             "".join(f"x{s}y" for s in specials)]
    for i, text in enumerate(texts):
        want = hf.encode(text, add_special_tokens=False)
        got = [int(x) for x in run([titan, "encode", "--tokenizer", tok_dir], text.encode()).split()]
        assert got == want, f"{tok_dir} text {i}: ids differ from AutoTokenizer: {got[:60]} vs {want[:60]}"
    for name in ("bos_token", "eos_token", "pad_token"):
        tok = getattr(hf, name)
        got = [int(x) for x in run([titan, "encode", "--tokenizer", tok_dir], tok.encode()).split()]
        assert got == [getattr(hf, name + "_id")], f"{tok_dir}: {name} {tok!r} is {got}, HF {getattr(hf, name + '_id')}"
    one = os.path.join(work, "one_doc.txt")
    open(one, "w").write("x\n")
    p = subprocess.run([titan, "data", "--data", one, "--tokenizer", tok_dir, "--vocab-size", "1"],
                       capture_output=True, text=True)
    m = re.search(r"the tokenizer has (\d+) ids", p.stderr)
    assert m and int(m.group(1)) == len(hf), f"{tok_dir}: titan has {m and m.group(1)} ids, HF {len(hf)}: {p.stderr}"
    print(f"ok: {tok_dir}: bos {hf.bos_token_id}, eos {hf.eos_token_id}, {len(hf)} ids, "
          f"{len(texts)} texts as AutoTokenizer")


def check_named(titan, v022, base, work):
    """Named special tokens, appended or made special as AutoTokenizer does."""
    vocab = json.load(open(os.path.join(v022, "tokenizer.json"), encoding="utf-8"))["model"]["vocab"]
    words = [w for w, i in sorted(vocab.items(), key=lambda kv: kv[1])
             if len(w) >= 3 and w.isascii() and w.isalpha() and w.islower()][:2]
    configs = [dict(bos_token="<B>", eos_token="<E>", unk_token="<U>", pad_token="<P>",
                    mask_token="<M>", sep_token="<S>", cls_token="<C>"),
               dict(pad_token="<P>", bos_token={"content": "<B>", "lstrip": False, "normalized": False,
                                                "rstrip": False, "single_word": False, "special": True,
                                                "__type": "AddedToken"},
                    additional_special_tokens=["<X1>", "<|end_of_text|>", "<X2>"]),
               dict(extra_special_tokens={"foo_token": "<F>", "bar_token": words[0]}, eos_token="<E>"),
               dict(extra_special_tokens=["<L1>", words[1]], bos_token=words[0])]
    names = ["<B>", "<E>", "<U>", "<P>", "<M>", "<S>", "<C>", "<X1>", "<X2>", "<F>", "<L1>",
             "<|end_of_text|>"] + words
    text = "a".join(names) + f" {words[0]} {words[1]} x{words[0]}y " + base[:200]
    for i, extra in enumerate(configs):
        d = os.path.join(work, f"named_{i}")
        os.makedirs(d)
        shutil.copy(os.path.join(v022, "tokenizer.json"), d)
        cfg = json.load(open(os.path.join(v022, "tokenizer_config.json"), encoding="utf-8"))
        cfg.update(extra)
        json.dump(cfg, open(os.path.join(d, "tokenizer_config.json"), "w"), indent=1)
        hf = AutoTokenizer.from_pretrained(d)
        want = hf.encode(text, add_special_tokens=False)
        got = [int(x) for x in run([titan, "encode", "--tokenizer", d], text.encode()).split()]
        assert got == want, f"named config {i}: ids differ from AutoTokenizer: {got[:60]} vs {want[:60]}"
        ids = " ".join(map(str, want)).encode()
        for skip in (False, True):
            back = run([titan, "decode", "--tokenizer", d] + (["--skip-special"] if skip else []), ids)
            assert back == hf.decode(want, skip_special_tokens=skip), f"named config {i}: decode (skip={skip})"
        assert len(hf) > 2004 or i == 3, f"named config {i}: nothing appended"
        check_ids(titan, d, base, work)
    print(f"ok: {len(configs)} configs naming special tokens, ids as AutoTokenizer")


def main():
    titan, tok_dir, text_file = sys.argv[1:4]
    work = sys.argv[4] if len(sys.argv) > 4 else None
    hf = AutoTokenizer.from_pretrained(tok_dir)
    with open(f"{tok_dir}/tokenizer_config.json", encoding="utf-8") as f:
        decoder = json.load(f)["added_tokens_decoder"]
    assert decoder, "the fixture lists no added_tokens_decoder"
    base = open(text_file, encoding="utf-8").read()[:2000]
    specials = [e["content"] for e in decoder.values()]
    texts = [base, "".join(specials), " ".join(specials), "a<|pad|>b<|im_start|>user\nhi<|im_end|>\n",
             base[:300] + specials[0] + base[300:600] + specials[-1]]
    n_special = 0
    for i, text in enumerate(texts):
        want = hf.encode(text, add_special_tokens=False)
        got = [int(x) for x in run([titan, "encode", "--tokenizer", tok_dir], text.encode()).split()]
        assert got == want, f"text {i}: ids differ from AutoTokenizer: {got[:40]} vs {want[:40]}"
        n_special += sum(1 for t in want if str(t) in decoder)
        ids = " ".join(map(str, want)).encode()
        for skip in (False, True):
            back = run([titan, "decode", "--tokenizer", tok_dir] + (["--skip-special"] if skip else []), ids)
            assert back == hf.decode(want, skip_special_tokens=skip), f"text {i}: decode (skip={skip})"
    assert n_special >= 2 * len(specials), "the texts did not exercise the added tokens"
    print(f"ok: {len(texts)} texts, {n_special} added_tokens_decoder tokens, ids as AutoTokenizer")
    if not work:
        return
    if os.path.isdir(work):
        shutil.rmtree(work)
    os.makedirs(work)
    v022 = os.path.join(tok_dir, "v0.2.2")
    check_ids(titan, v022, base, work)
    hf22 = AutoTokenizer.from_pretrained(v022)
    assert (hf22.bos_token_id, hf22.eos_token_id, len(hf22)) == (2002, 2003, 2004), "v0.2.2 fixture"
    # a made-up config over v0.2.2's tokenizer.json (2002 vocab ids, no added_tokens)
    made = os.path.join(work, "made_up")
    os.makedirs(made)
    shutil.copy(os.path.join(v022, "tokenizer.json"), made)
    vocab = json.load(open(os.path.join(v022, "tokenizer.json"), encoding="utf-8"))["model"]["vocab"]
    word = next(w for w, i in sorted(vocab.items(), key=lambda kv: kv[1])
                if len(w) >= 3 and w.isascii() and w.isalpha() and w.islower())
    ent = lambda c, special=True: {"content": c, "lstrip": False, "normalized": False,
                                   "rstrip": False, "single_word": False, "special": special}
    cfg = {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>", "pad_token": "<|pad|>",
           "tokenizer_class": "PreTrainedTokenizerFast",
           "added_tokens_decoder": {
               "128001": ent("<|end_of_text|>"), "128000": ent("<|begin_of_text|>"),
               "10": ent("<|ten|>"), "9": ent("<|nine|>"),  # 9 before 10 (numbers, not strings)
               "5": ent("<|inside|>"),  # a key inside the vocabulary, content new: appended
               "7": ent("<|pad|>"),  # in the vocabulary at 2001: keeps that id
               "11": ent("<|nine|>"),  # listed twice: once
               "3000": ent(word),  # an ordinary vocab word: an added token at its vocab id
               "12": ent("<x>", special=False)}}
    json.dump(cfg, open(os.path.join(made, "tokenizer_config.json"), "w"), indent=1)
    check_ids(titan, made, base, work)
    check_named(titan, v022, base, work)


if __name__ == "__main__":
    main()
