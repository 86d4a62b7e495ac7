"""`titan encode` / `titan decode` against the HF Rust tokenizer (PyPI `tokenizers`): the
ids printed for a text (from --file and from stdin) equal HF's, and decoding them gives the
text back. `titan encode --chat` gives the ids of the chat cases in
tokenizer_vectors/qwen3_generated_vectors.json (rendered by a Jinja engine, ids by HF).

usage: check_codec_cli.py TITAN_BINARY TOKENIZER_DIR TEXT_FILE
"""
import subprocess
import sys
import json
import os
import tempfile
import unicodedata

from tokenizers import Tokenizer


def run(cmd, data=None):
    return subprocess.run(cmd, input=data, capture_output=True, check=True).stdout


def main():
    titan, tok_dir, text_file = sys.argv[1:4]
    hf = Tokenizer.from_file(f"{tok_dir}/tokenizer.json")
    base = open(text_file, encoding="utf-8").read()[:30000]
    samples = [base, "Hello, world! DON'T I'M 你好 🤖 e\u0301 <|im_start|>user\nhi<|im_end|>\n\t  12345",
               "   \n\n  trailing spaces   "]
    for i, text in enumerate(samples):
        want = hf.encode(text, add_special_tokens=False).ids
        with tempfile.NamedTemporaryFile("w", encoding="utf-8", suffix=".txt") as f:
            f.write(text)
            f.flush()
            got_file = [int(x) for x in run([titan, "encode", "--tokenizer", tok_dir, "--file", f.name]).split()]
        got_stdin = [int(x) for x in run([titan, "encode", "--tokenizer", tok_dir], text.encode()).split()]
        assert got_file == want, f"sample {i}: --file ids differ from HF at {next(j for j, (a, b) in enumerate(zip(got_file + [-1], want + [-1])) if a != b)}"
        assert got_stdin == want, f"sample {i}: stdin ids differ from HF"
        back = run([titan, "decode", "--tokenizer", tok_dir], " ".join(map(str, want)).encode())
        # The Qwen3 normalizer is NFC, so the round trip gives the NFC form of the text.
        nfc = unicodedata.normalize("NFC", text)
        assert back.decode("utf-8") == hf.decode(want, skip_special_tokens=False) == nfc, f"sample {i}: decode"
        skip = run([titan, "decode", "--tokenizer", tok_dir, "--skip-special"], " ".join(map(str, want)).encode())
        assert skip.decode("utf-8") == hf.decode(want, skip_special_tokens=True), f"sample {i}: --skip-special"
        print(f"sample {i}: {len(want)} tokens identical to HF; decode round-trips")
    vectors = os.path.join(os.path.dirname(os.path.abspath(tok_dir)), "tokenizer_vectors",
                           "qwen3_generated_vectors.json")
    for case in json.load(open(vectors))["chat_template"]:
        opts = case.get("options", {})
        cmd = [titan, "encode", "--tokenizer", tok_dir, "--chat"]
        if not opts.get("add_generation_prompt", False):
            cmd.append("--no-generation-prompt")
        if opts.get("enable_thinking", True) is False:
            cmd.append("--no-thinking")
        got = [int(x) for x in run(cmd, json.dumps(case["messages"]).encode()).split()]
        assert got == case["ids"], f"chat case {case['name']}: ids differ"
        print(f"chat {case['name']}: {len(got)} ids identical")
    # ids whose bytes end or break mid-character (one token of a 3-byte character; it between
    # others): HF's decode gives U+FFFD there (Rust's from_utf8_lossy), and so must titan's
    for ids in ([123970], [64, 123970], [123970, 64, 123970, 236]):
        got = run([titan, "decode", "--tokenizer", tok_dir], " ".join(map(str, ids)).encode())
        assert got.decode("utf-8") == hf.decode(ids, skip_special_tokens=False), f"decode {ids}"
    print("decode of partial characters: U+FFFD as HF")
    bad_chat = subprocess.run([titan, "encode", "--tokenizer", tok_dir, "--chat"],
                              input=b'[{"role": "user"}]', capture_output=True)
    assert bad_chat.returncode != 0 and b"content" in bad_chat.stderr, "chat without content must fail"
    bad = subprocess.run([titan, "decode", "--tokenizer", tok_dir], input=b"12 abc", capture_output=True)
    assert bad.returncode != 0 and b"abc" in bad.stderr, "bad id input must fail naming the token"
    # a NUL inside an id is part of the token (not its end), shown escaped
    for data, shown in [(b"9707\0garbage 1879", b"'9707\\x00garbage' (byte 0)"),
                        (b"\0 1879", b"'\\x00' (byte 0)"), (b"1 2\0 3", b"'2\\x00' (byte 2)")]:
        bad = subprocess.run([titan, "decode", "--tokenizer", tok_dir], input=data, capture_output=True)
        assert bad.returncode == 1 and shown in bad.stderr and not bad.stdout, \
            f"decode {data!r}: {bad.returncode} {bad.stdout!r} {bad.stderr!r}"
    # a lost write on stdout fails (status 1, naming it), never exit 0
    with open("/dev/full", "wb") as full:
        for cmd, data in [("encode", b"hi"), ("decode", b"9707 1879")]:
            r = subprocess.run([titan, cmd, "--tokenizer", tok_dir], input=data, stdout=full,
                               stderr=subprocess.PIPE)
            assert r.returncode == 1 and \
                b"writing standard output: No space left on device" in r.stderr, \
                f"{cmd} >/dev/full: {r.returncode} {r.stderr!r}"
    # the chat options without --chat do nothing: refused, naming --chat
    for opt in ["--no-thinking", "--no-generation-prompt"]:
        r = subprocess.run([titan, "encode", "--tokenizer", tok_dir, opt], input=b"hi",
                           capture_output=True)
        assert r.returncode == 1 and f"{opt} needs --chat".encode() in r.stderr, \
            f"encode {opt} without --chat: {r.returncode} {r.stderr!r}"
    print("ok")


if __name__ == "__main__":
    main()
