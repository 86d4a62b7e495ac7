"""titan generate on the command line: the edges of its input and output (seconds).

usage: check_generate_cli.py TITAN SHARED_DIR WORK_DIR

1. A model whose vocabulary is padded past its tokenizer's (Qwen3: 151936 rows, 151669 ids)
   may sample a padding id: it prints nothing (HF's decode gives ""), the text is HF's decode
   of the sampled ids, and generation goes on.
2. Any temperature > 0, however tiny (1e-40, 1e-300: below float's range), samples the greedy
   token (the softmax is taken of (logit - max) / T in double), with top-k, top-p or neither.
3. A failed write to stdout (a full disk, a pipe closed with SIGPIPE ignored) ends generate
   with status 1 naming standard output; titan checks stdout at exit for every command.
4. A prompt from stdin keeps its NUL bytes (as titan encode does).
5. A model folder with no tokenizer.json and a vocabulary other than 256 is refused (not one
   token per byte printed as '?'); --bytes asks for bytes; a 256-id model needs nothing.
6. --help lists --ids; --no-thinking without --chat is refused naming --chat.
7. Generation past the context (--max-seq-len) says on stderr that the context slid.
"""
import os
import signal
import subprocess
import sys

from tokenizers import Tokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_generate import crafted_model  # noqa: E402

TITAN = None


def run(args, ok=True, stdin=None, stdout=subprocess.PIPE):
    p = subprocess.run([TITAN] + args, stdout=stdout, stderr=subprocess.PIPE, input=stdin)
    p.err = p.stderr.decode(errors="replace")
    if ok and p.returncode != 0:
        raise AssertionError(f"titan {' '.join(args)} failed ({p.returncode}): {p.err}")
    return p


def fails(args, needle, stdin=None, stdout=subprocess.PIPE):
    p = run(args, ok=False, stdin=stdin, stdout=stdout)
    assert p.returncode == 1, f"{args}: exit {p.returncode} {p.err}"
    assert needle in p.err, f"{args}: {p.err!r} lacks {needle!r}"
    return p


def ids_of(p):
    return [int(x) for x in p.stdout.split()]


def padded_vocab(gen, tok_dir, hf):
    pad = 151754  # past the tokenizer's 151669 ids, inside the model's 151936
    assert hf.get_vocab_size() <= pad
    seen = set()
    for seed in range(3):
        s = ["--top-k", "2", "--temperature", "1", "--seed", str(seed), "--max-new-tokens", "24"]
        ids = ids_of(run(gen + s + ["--ids"]))
        text = run(gen + s).stdout.decode()
        want = hf.decode(ids, skip_special_tokens=False)
        assert text.rstrip("\n") == want, f"seed {seed}: {text!r} != HF's decode {want!r}"
        seen |= set(ids)
    assert seen == {pad, 9707}, f"sampled {seen}: want the padding id and Hello"
    print("padding ids past the tokenizer print nothing: the text is HF's decode of the ids")


def tiny_temperature(gen):
    greedy = ids_of(run(gen + ["--temperature", "0", "--ids"]))
    for t in ["1e-40", "1e-50", "1e-300"]:
        for mode in [["--top-k", "0", "--top-p", "1"], ["--top-k", "0", "--top-p", "0.9"],
                     ["--top-k", "20"]]:
            got = ids_of(run(gen + ["--temperature", t, "--ids"] + mode))
            assert got == greedy, f"--temperature {t} {mode}: {got} != greedy {greedy}"
    print("tiny temperatures (1e-40 .. 1e-300) sample the greedy tokens")


def context_full(model):
    """Generation past the context (--max-seq-len) slides: it says so on stderr, with the
    count, and says nothing when the context holds the whole text."""
    base = model + ["--prompt", "Hi", "--temperature", "0", "--ids"]
    r = run(base + ["--max-seq-len", "4", "--max-new-tokens", "10"])
    assert "the context of 4 positions (--max-seq-len) filled" in r.err and \
        "last 2 tokens" in r.err, r.err
    r = run(base + ["--max-new-tokens", "10"])
    assert "filled" not in r.err, r.err
    print("generation past --max-seq-len says that the context slid")


def write_errors(gen):
    with open("/dev/full", "wb") as full:
        fails(gen, "writing standard output: No space left on device", stdout=full)
        fails(gen + ["--ids"], "writing standard output: No space left on device", stdout=full)
        fails(["--version"], "writing standard output: No space left on device", stdout=full)
        fails(["generate", "--help"], "writing standard output", stdout=full)
    # a reader that is gone, SIGPIPE ignored (as under many supervisors): EPIPE, not 0
    p = subprocess.Popen([TITAN] + gen + ["--max-new-tokens", "200", "--ids"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         preexec_fn=lambda: signal.signal(signal.SIGPIPE, signal.SIG_IGN))
    p.stdout.close()
    err = p.stderr.read().decode(errors="replace")
    p.wait()
    assert p.returncode == 1 and "writing standard output: Broken pipe" in err, \
        f"dead pipe: exit {p.returncode}: {err}"
    assert "generated" not in err, f"went on after the pipe closed: {err}"
    print("a full disk or a closed pipe on stdout: status 1 naming standard output")


def nul_prompt(gen, tok_dir, hf):
    text = b"Hello\0world"
    want = hf.encode(text.decode(), add_special_tokens=False).ids
    enc = ids_of(run(["encode", "--tokenizer", tok_dir], stdin=text))
    assert enc == want, f"encode {enc} != HF {want}"
    p = run(gen + ["--max-new-tokens", "1"], stdin=text)
    assert f"prompt: {len(want)} tokens" in p.err, f"stdin prompt with a NUL: {p.err}"
    print(f"a stdin prompt keeps its NUL byte ({len(want)} tokens, as encode)")


def no_tokenizer(work, pad_dir, flags):
    base = ["generate", "--model", pad_dir, "--prompt", "Hi", "--max-new-tokens", "2"] + flags
    fails(base, "its vocabulary is 151936, not 256 (bytes): pass --tokenizer DIR")
    run(base + ["--bytes", "--ids"])
    fails(base + ["--bytes", "--tokenizer", pad_dir], "--bytes")
    d256 = f"{work}/bytes_model"
    f256 = crafted_model(d256, {ord("a"): 1.0}, V=256)
    out = run(["generate", "--model", d256, "--prompt", "Hi", "--max-new-tokens", "3",
               "--temperature", "0"] + f256).stdout
    assert out == b"aaa\n", f"vocabulary 256: {out!r}"
    print("no tokenizer: refused unless the vocabulary is 256 (bytes) or --bytes is given")


def options(gen):
    assert "--ids" in run(["generate", "--help"]).stdout.decode(), "--help lacks --ids"
    fails(gen + ["--no-thinking"], "--no-thinking needs --chat")
    print("--help lists --ids; --no-thinking without --chat refused")


def main():
    global TITAN
    TITAN, shared, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    tok_dir = f"{shared}/data/qwen3_tokenizer"
    hf = Tokenizer.from_file(f"{tok_dir}/tokenizer.json")
    pad_dir = f"{work}/pad_model"
    # a padding id (logit 64) and "Hello" (63.36: p = 0.35 among the top 2)
    flags = crafted_model(pad_dir, {151754: 1.0, 9707: 0.99})
    model = ["generate", "--model", pad_dir, "--tokenizer", tok_dir] + flags
    gen = model + ["--prompt", "Hi", "--max-new-tokens", "6"]
    options(gen)
    no_tokenizer(work, pad_dir, flags)
    tiny_temperature(gen)
    context_full(model)
    write_errors(gen)
    nul_prompt(model, tok_dir, hf)
    padded_vocab(gen, tok_dir, hf)


if __name__ == "__main__":
    main()
