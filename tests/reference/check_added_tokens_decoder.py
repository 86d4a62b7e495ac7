"""titan's tokenizer counts tokenizer_config.json's added_tokens_decoder as vocabulary, as
transformers' AutoTokenizer does: for torchtitan's test tokenizer (whose tokenizer.json has no
added_tokens), `titan encode` gives AutoTokenizer's ids for text around every such token, and
`titan decode` (with and without --skip-special) gives its text back.

usage: check_added_tokens_decoder.py TITAN_BINARY TOKENIZER_DIR TEXT_FILE
"""
import json
import subprocess
import sys

from transformers import AutoTokenizer


def run(cmd, data):
    return subprocess.run(cmd, input=data, capture_output=True, check=True).stdout.decode("utf-8")


def main():
    titan, tok_dir, text_file = sys.argv[1:4]
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


if __name__ == "__main__":
    main()
