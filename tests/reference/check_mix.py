"""A weighted mixture of datasets (`titan data --data A --data B --weights ...`,
training.dataset_sources) against torchtitan 0.3's interleaved loaders.

Reference semantics (torchtitan 0.3.0, hf_datasets/interleaved.py and text_datasets.py's
InterleavedHuggingFaceTextDataLoader / InterleavedChatDataLoader): every source is a dataset of
its own (split over the data-parallel ranks and re-looped by itself: infinite), and each sample
(one packed window) comes from the source that `random.Random(seed).choices(range(n),
weights=[w / sum(weights)], k=1)` draws, the same draws on every rank. Written out here with
Python's own `random` over check_loader.py's per-source references (v0.2.2 packing, 0.3's
document packing, map-style order, chat), and compared with 0.3's own InterleavedDataset over
its own HuggingFaceTextDataset / ChatDataset where torchtitan is installed (scripts/deps.sh
--bench). Also: exact resume from the printed state after every batch count tried, and bad
input refused by name.

usage: check_mix.py TITAN SHARED_DIR WORK_DIR
"""

import json
import os
import random
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_loader as cl  # noqa: E402  (reads the same argv)

TITAN, SHARED, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
check = cl.check


def draws(seed, weights, k):
    """0.3's InterleavedDataset.__iter__: the source of each of k samples."""
    rng = random.Random(seed)
    total = sum(weights)
    probs = [w / total for w in weights]
    return [rng.choices(range(len(weights)), weights=probs, k=1)[0] for _ in range(k)]


def interleave(picks, per_source):
    """The samples in draw order, source i's next sample at each pick of i."""
    its = [iter(s) for s in per_source]
    return [next(its[i]) for i in picks]


def documents_windows(rows):
    return [cl.parse_documents(r) for r in rows]


def torchtitan_mix(sources, tok_dir, seq_len, n, weights, seed, dp_rank, dp_size, map_style):
    """0.3's own InterleavedDataset over its own HuggingFaceTextDataset per source (documents
    packing), or None without torchtitan."""
    try:
        import torchtitan  # noqa: F401
    except ImportError:
        return None
    Stream, Map = cl.torchtitan_stubs()
    from torchtitan.hf_datasets import DatasetConfig
    from torchtitan.hf_datasets import text_datasets as td
    from torchtitan.hf_datasets.interleaved import InterleavedDataset
    from torchtitan.components.tokenizer import HuggingFaceTokenizer
    tok = HuggingFaceTokenizer(tokenizer_path=tok_dir)
    dss = []
    for i, docs in enumerate(sources):
        rows = [{"text": d} for d in docs]
        kind = Map if map_style else Stream
        td.DATASETS["titan_mix_%d" % i] = DatasetConfig(
            path="-", loader=lambda p, rows=rows, kind=kind: kind(rows),
            sample_processor=lambda x: x["text"])
        dss.append(td.HuggingFaceTextDataset("titan_mix_%d" % i, None, tok, seq_len=seq_len,
                                             dp_rank=dp_rank, dp_world_size=dp_size,
                                             infinite=True))
    out = []
    for x, y in InterleavedDataset(dss, weights, seed=seed):
        out.append((x["input"].tolist(), x["positions"].tolist(), y.tolist()))
        if len(out) == n:
            return out


def torchtitan_chat_mix(sources, tok_dir, seq_len, n, weights, seed, dp_rank, dp_size):
    """0.3's InterleavedChatDataLoader's dataset: InterleavedDataset over ChatDatasets of
    map-style datasets (load_dataset's), or None without torchtitan."""
    try:
        import torchtitan  # noqa: F401
    except ImportError:
        return None
    Stream, Map = cl.torchtitan_stubs()
    from torchtitan.hf_datasets.text_datasets import ChatDataset
    from torchtitan.hf_datasets.interleaved import InterleavedDataset
    from torchtitan.components.tokenizer import HuggingFaceTokenizer
    tok = HuggingFaceTokenizer(tokenizer_path=tok_dir)
    dss = [ChatDataset(Map(ex), tok, lambda m: m, seq_len=seq_len, dp_rank=dp_rank,
                       dp_world_size=dp_size, infinite=True) for ex in sources]
    out = []
    for x, y in InterleavedDataset(dss, weights, seed=seed):
        out.append((x["input"].tolist(), x["positions"].tolist(), y.tolist()))
        if len(out) == n:
            return out


def main():
    if os.path.isdir(WORK):
        shutil.rmtree(WORK)
    os.makedirs(WORK)
    tok = cl.Tok(cl.TEST_TOK)
    rnd = random.Random(5)
    words = "the quick brown fox jumps over a lazy dog while seven zebras sing".split()

    def text(k):
        return " ".join(rnd.choice(words) for _ in range(k))

    # three sources of different sizes and formats: two JSON Lines files and a text file
    srcs = [[text(3 + i % 7) for i in range(23)], [text(2 + i % 11) for i in range(9)],
            [text(4 + i % 5) for i in range(14)]]
    paths = []
    for i, docs in enumerate(srcs[:2]):
        p = os.path.join(WORK, "src%d.jsonl" % i)
        with open(p, "w") as f:
            for d in docs:
                f.write(json.dumps({"text": d}) + "\n")
        paths.append(p)
    p = os.path.join(WORK, "src2.txt")
    with open(p, "w") as f:
        f.write("\n\n".join(srcs[2]) + "\n")
    paths.append(p)
    base = ["--tokenizer", cl.TEST_TOK]
    for p in paths:
        base += ["--data", p]

    def args(weights, seed, *extra):
        a = base + ["--weights", ",".join(map(str, weights))] + list(extra)
        return a + (["--mix-seed", str(seed)] if seed is not None else [])

    # v0.2.2 packing: windows of seq_len + 1 of each rank's stream, the draws' interleaving
    for weights, seed, dp_rank, dp_size in (([0.5, 0.3, 0.2], None, 0, 1),
                                            ([3, 1, 1], 7, 1, 2),
                                            ([1, 0, 2.5], 2**40 + 5, 2, 3)):
        B, N, T = 3, 14, 12
        rows, state = cl.titan_data(args(weights, seed, "--seq-len", str(T), "--batch", str(B),
                                         "--batches", str(N), "--dp-rank", str(dp_rank),
                                         "--dp-size", str(dp_size)))
        picks = draws(42 if seed is None else seed, weights, B * N)
        per = [cl.flat(cl.reference(docs, tok, T, 1, picks.count(i), dp_rank, dp_size))
               if picks.count(i) else [] for i, docs in enumerate(srcs)]
        want = interleave(picks, per)
        check(rows == want, "mixture, weights %s seed %s, rank %d of %d: %d windows as 0.3's "
              "interleaver draws them" % (weights, seed, dp_rank, dp_size, len(want)))
        st = json.loads(state)
        check(st["mix_draws"] == B * N and len(st["sources"]) == 3,
              "mixture state: %d draws, a position per source" % st["mix_draws"])
        check(st["mix_rows"] == [picks.count(i) for i in range(3)],
              "mixture state: the rows each source gave, %s" % st["mix_rows"])
        # the generator's state is Python's getstate() after those draws (0.3 saves that)
        rng = random.Random(42 if seed is None else seed)
        for _ in range(B * N):
            rng.random()
        mt = rng.getstate()[1]
        check(st["mix_rng"] == "".join("%08x" % w for w in mt[:624])
              and st["mix_rng_index"] == mt[624],
              "mixture state: the generator is Python's getstate() after %d draws" % (B * N))
        if 0 in weights:
            check(picks.count(weights.index(0)) == 0, "a weight of 0 is never drawn")

    # document masking's packing (0.3's HuggingFaceTextDataset), streaming and map-style, against
    # the reference and 0.3's own InterleavedDataset
    for map_style, dp_rank, dp_size, weights, seed in ((False, 0, 1, [2, 1, 1], 42),
                                                       (False, 1, 2, [0.2, 0.7, 0.1], 9),
                                                       (True, 0, 2, [1, 1, 1], 3)):
        T, N = 10, 40
        extra = ["--documents", "--seq-len", str(T), "--batches", str(N), "--batch", "1",
                 "--dp-rank", str(dp_rank), "--dp-size", str(dp_size)]
        if map_style:
            extra += ["--streaming", "false"]
        rows, _ = cl.titan_data(args(weights, seed, *extra))
        got = documents_windows(rows)
        picks = draws(seed, weights, N)
        per = [cl.reference_documents(docs, tok, T, picks.count(i), dp_rank, dp_size,
                                      map_style=map_style) if picks.count(i) else []
               for i, docs in enumerate(srcs)]
        want = [(x, p, y) for x, p, y in interleave(picks, per)]
        what = "mixture, documents packing, %s, rank %d of %d" % (
            "map-style" if map_style else "streaming", dp_rank, dp_size)
        check(got == want, what + ": the reference's windows")
        tt = torchtitan_mix(srcs, cl.TEST_TOK, T, N, weights, seed, dp_rank, dp_size, map_style)
        if tt is not None:
            check(got == tt, what + ": torchtitan 0.3's own InterleavedDataset")
        else:
            print("skip torchtitan 0.3 not installed (scripts/deps.sh --bench)")

    # a JSON Lines source of another field (0.3's sources each have their own sample_processor):
    # --fields ",content" reads the second source's "content" as the first one's "text"
    p1c = os.path.join(WORK, "src1_content.jsonl")
    with open(p1c, "w") as f:
        for d in srcs[1]:
            f.write(json.dumps({"content": d, "text": "not this"}) + "\n")
    a = ["--tokenizer", cl.TEST_TOK, "--data", paths[0], "--data", p1c, "--data", paths[2],
         "--weights", "0.5,0.3,0.2", "--seq-len", "12", "--batch", "3", "--batches", "14"]
    check(cl.titan_data(a + ["--fields", ",content,"])[0] == cl.titan_data(base + [
        "--weights", "0.5,0.3,0.2", "--seq-len", "12", "--batch", "3", "--batches", "14"])[0],
          "mixture with a field a source (--fields): the windows of the sources' own fields")
    p = cl.titan_data(a + ["--fields", "content"], expect_ok=False)
    check(p.returncode != 0 and "--fields has 1 fields for 3" in p.stderr,
          "refused: --fields of another count")
    p = cl.titan_data(a + ["--fields", ",nosuch,"], expect_ok=False)
    check(p.returncode != 0 and 'dataset mixture, source 2: %s:1: no "nosuch" field' % p1c
          in p.stderr, "a field missing in a source: the error names the source and the line")

    # exact resume: the state printed after k batches, then the rest, is the straight run
    T, B, N = 8, 2, 12
    common = args([0.6, 0.25, 0.15], 11, "--seq-len", str(T), "--batch", str(B))
    straight, _ = cl.titan_data(common + ["--batches", str(N)])
    for k in (1, 4, 7, 11):
        first, st = cl.titan_data(common + ["--batches", str(k)])
        rest, _ = cl.titan_data(common + ["--batches", str(N - k), "--state", st])
        check(first + rest == straight, "mixture resumed after %d batches: the same windows" % k)
    # chained: resume from a resumed run's state
    a, st = cl.titan_data(common + ["--batches", "3"])
    b, st = cl.titan_data(common + ["--batches", "3", "--state", st])
    c, _ = cl.titan_data(common + ["--batches", str(N - 6), "--state", st])
    check(a + b + c == straight, "mixture resumed twice: the same windows")
    _, st_straight = cl.titan_data(common + ["--batches", str(N)])
    check(json.loads(st)["mix_rows"] != json.loads(st_straight)["mix_rows"]
          and cl.titan_data(common + ["--batches", str(N - 6), "--state", st])[1] == st_straight,
          "mixture resumed twice: the final state (rows each source gave included) is the "
          "straight run's")

    # chat sources: 0.3's InterleavedChatDataLoader (ChatDataset per source, map-style)
    chat_src = []
    for s in range(2):
        ex = [[{"role": "user", "content": text(2 + (i + s) % 5)},
               {"role": "assistant", "content": text(1 + (3 * i + s) % 6)}] for i in range(7 + 4 * s)]
        p = os.path.join(WORK, "chat%d.jsonl" % s)
        with open(p, "w") as f:
            for m in ex:
                f.write(json.dumps({"messages": m}) + "\n")
        chat_src.append((p, ex))
    T, N, weights, seed = 48, 16, [1, 3], 42
    a = ["--format", "chat", "--tokenizer", cl.QWEN, "--seq-len", str(T), "--batches", str(N),
         "--weights", "1,3", "--dp-rank", "1", "--dp-size", "2"]
    for p, _ in chat_src:
        a += ["--data", p]
    rows, _ = cl.titan_data(a)
    got = documents_windows(rows)
    qwen = cl.Tok(cl.QWEN)
    picks = draws(seed, weights, N)
    per = [cl.reference_chat(ex, qwen, cl.QWEN, T, max(picks.count(i), 1), 1, 2)
           for i, (_, ex) in enumerate(chat_src)]
    want = interleave(picks, per)
    check(got == want, "mixture of chat sources (rank 1 of 2): the reference's rows")
    tt = torchtitan_chat_mix([ex for _, ex in chat_src], cl.QWEN, T, N, weights, seed, 1, 2)
    if tt is not None:
        check(got == tt, "mixture of chat sources: torchtitan 0.3's own InterleavedDataset over "
              "ChatDatasets")

    # a source of token shards (titan tokenize's of the first source) beside the text source,
    # on rank 1 of 2: its windows are the first source's
    shards = os.path.join(WORK, "shards")
    subprocess.run([TITAN, "tokenize", "--tokenizer", cl.TEST_TOK, "--data", paths[0], "--out",
                    shards, "--threads", "1"], check=True, capture_output=True)
    T, N, weights = 9, 30, [1, 2]
    rows, _ = cl.titan_data(["--tokenizer", cl.TEST_TOK, "--data", shards, "--data", paths[2],
                             "--weights", "1,2", "--seq-len", str(T), "--batches", str(N),
                             "--dp-rank", "1", "--dp-size", "2"])
    picks = draws(42, weights, N)
    per = [cl.flat(cl.reference(docs, tok, T, 1, max(picks.count(i), 1), 1, 2))
           for i, docs in enumerate((srcs[0], srcs[2]))]
    check(rows == interleave(picks, per), "mixture of token shards and text (rank 1 of 2): the "
          "reference's windows")

    # bad input, refused by name
    one_state = cl.titan_data(["--data", paths[0], "--seq-len", "8"])[1]
    mix_state = cl.titan_data(base + ["--seq-len", "8"])[1]
    for what, a, needle in (
            ("one dataset's state for a mixture", base + ["--state", one_state],
             "the position is of one dataset; this run reads a mixture of 3 sources"),
            ("a mixture's state for one dataset", ["--data", paths[0], "--state", mix_state],
             "the position is of a mixture of 3 sources"),
            ("a mixture's state for two sources", ["--data", paths[0], "--data", paths[1],
                                                   "--state", mix_state],
             "a mixture of 3 sources; this run reads 2"),
            ("sources reordered", ["--tokenizer", cl.TEST_TOK, "--data", paths[1], "--data",
                                   paths[0], "--data", paths[2],
                                   "--seq-len", "8", "--state", mix_state],
             "the position's source 1 is this run's source 2"),
            ("weights for other sources", base + ["--weights", "1,2"], "2 weights for 3"),
            ("a negative weight", base + ["--weights", "1,-2,1"], "'-2' is no finite number"),
            ("weights summing to 0", base + ["--weights", "0,0,0"], "sum above 0"),
            ("a finite mixture", base + ["--finite"], "a finite loader reads one dataset"),
            ("a missing source", base + ["--data", os.path.join(WORK, "nope.txt")],
             "source 4: "),
            ("a bad mix_draws", base + ["--state", mix_state.replace('"mix_draws": 1',
                                                                       '"mix_draws": -1')],
             "\"mix_draws\" must be an integer from 0 to 2^62"),
            ("mix_rows at 2^62", base + ["--state", json.dumps(dict(
                json.loads(mix_state), mix_rows=[2**62, 0, 0]))],
             "\"mix_rows\" must be 3 integers from 0 to 2^62"),
            ("mix_draws at 2^62", base + ["--state", json.dumps(dict(
                json.loads(mix_state), mix_draws=2**62))], "from 0 to 2^62"),
            ("a generator state of another length", base + ["--state", mix_state.replace('", "mix_weights"',
                                                                                 '0", "mix_weights"')],
             "\"mix_rng\" (624 words"),
            ("weights that are no numbers", base + ["--state", mix_state.replace(
                '"mix_weights": [1, 1, 1]', '"mix_weights": ["a", 1, 1]')], "must be 3 numbers"),
            ("sources that are no array", base + ["--state", mix_state.replace(
                '"sources": [', '"sources": {"x": [').replace(']}', ']}}')],
             "\"sources\" must be an array"),
            ("a state that is no object", base + ["--state", "[1, 2]"], "not a JSON object"),
            ("token shards beside text without a tokenizer", ["--data", shards, "--data", paths[2]],
             "source 1's token shards"),
            ("--weights for one source", ["--data", paths[0], "--weights", "2"],
             "need two or more --data sources"),
            ("--mix-seed for one source", ["--data", paths[0], "--mix-seed", "3"],
             "need two or more --data sources")):
        p = cl.titan_data(a, expect_ok=False)
        check(p.returncode != 0 and needle in p.stderr,
              "refused: %s: %s" % (what, p.stderr.strip().splitlines()[-1][:150]
                                   if p.stderr.strip() else "(nothing said)"))

    if cl.failures:
        print("%d checks failed" % len(cl.failures))
        sys.exit(1)
    print("all mixture checks passed")


if __name__ == "__main__":
    main()
