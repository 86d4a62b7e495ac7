"""Writes the seed and malformed inputs of the data fuzz targets (fuzz_dataset.c,
fuzz_tokenizer.c) into corpus/dataset and corpus/tokenizer. good_* must be accepted, bad_*
rejected (tests/fuzz/driver.c checks both, then mutates the good ones). Shards are written
here from the format in src/data/data.h, independently of titan's writer.

usage: python3 tests/fuzz/make_data_corpus.py   (from the repository root)
"""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
TOKENS, JSONL, JSONL_SKIP, TEXT = b"\x00", b"\x01", b"\x02", b"\x03"


def shard(docs, vocab=300, bos=-1, eos=299, version=1, dtype=1, magic=b"TITANTOK",
          tok_path=b"/tmp/tokenizer", tok_hash=0x0123456789ABCDEF, skipped=()):
    """Version 1: the 48-byte header. Versions 2-3: the tokenizer record (path length, FNV-1a
    hash, the path zero-padded to 8). skipped: document numbers whose end offset carries bit
    63 (version 3's DATA_SHARD_SKIPPED; such a document must be empty)."""
    toks = [t for d in docs for t in d]
    offs = [0]
    for d in docs:
        offs.append(offs[-1] + len(d))
    for i in skipped:
        offs[i + 1] |= 1 << 63
    if version >= 2:
        body = struct.pack("<8sIIQQiiiIQ", magic, version, dtype, len(docs), len(toks), vocab,
                           bos, eos, len(tok_path), tok_hash)
        body += tok_path + b"\0" * (-len(tok_path) % 8)
    else:
        body = struct.pack("<8sIIQQiiiI", magic, version, dtype, len(docs), len(toks), vocab,
                           bos, eos, 0)
    body += struct.pack("<%dI" % len(toks), *toks)
    if len(toks) % 2:
        body += b"\0" * 4
    return body + struct.pack("<%dQ" % len(offs), *offs)


def write(sub, name, data):
    d = os.path.join(HERE, "corpus", sub)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode("utf-8"))


docs = [[1, 2, 3], [], [10, 20, 30, 40, 50], [298]]
good = shard(docs)
write("dataset", "good_shard", TOKENS + good)
write("dataset", "good_shard_bos", TOKENS + shard(docs, bos=7))
write("dataset", "good_jsonl", JSONL + b'{"text": "first doc"}\n\n{"text": "s\\u00e9cond \\ud83d\\ude42", "x": [1]}\n{"text": ""}\n{"text": "last"}')
write("dataset", "good_jsonl_skip", JSONL_SKIP + b'{"text": "ok one"}\n{bad\n{"text": 3}\n[]\n{"text": "ok two and more"}\n')
write("dataset", "good_text", TEXT + "plain text \u00e9\n\x00 with a NUL and \xff".encode("utf-8", "surrogateescape"))
write("dataset", "good_shard_v2", TOKENS + shard(docs, version=2))
write("dataset", "good_shard_v3_skipped", TOKENS + shard(docs, version=3, skipped=(1,)))
write("dataset", "good_shard_v3_last_skipped",
      TOKENS + shard(docs + [[]], version=3, bos=7, skipped=(4,)))
write("dataset", "bad_shard_v2_skipped", TOKENS + shard(docs, version=2, skipped=(1,)))
write("dataset", "bad_shard_v3_skipped_ids", TOKENS + shard(docs, version=3, skipped=(2,)))
write("dataset", "bad_shard_v4", TOKENS + shard(docs, version=4))
write("dataset", "bad_shard_path_nul", TOKENS + shard(docs, version=2, tok_path=b"/tmp\0tok"))
write("dataset", "bad_shard_path_long", TOKENS + shard(docs, version=2, tok_path=b"/" * 4097))
write("dataset", "bad_shard_magic", TOKENS + shard(docs, magic=b"TITANTOX"))
write("dataset", "bad_shard_version", TOKENS + shard(docs, version=0))
write("dataset", "bad_shard_dtype", TOKENS + shard(docs, dtype=2))
write("dataset", "bad_shard_truncated", TOKENS + good[:-5])
write("dataset", "bad_shard_trailing", TOKENS + good + b"\0" * 8)
write("dataset", "bad_shard_header_only", TOKENS + good[:30])
write("dataset", "bad_shard_token_id", TOKENS + shard([[1, 2, 300]]))
write("dataset", "bad_shard_eos", TOKENS + shard(docs, eos=300))
bad_offs = bytearray(good)
struct.pack_into("<Q", bad_offs, len(good) - 16, 2)  # doc_offsets[3] < doc_offsets[2]
write("dataset", "bad_shard_offsets", TOKENS + bytes(bad_offs))
write("dataset", "bad_jsonl_syntax", JSONL + b'{"text": "a"}\n{"text": "b\n')
write("dataset", "bad_jsonl_field", JSONL + b'{"body": "a"}\n')
write("dataset", "bad_jsonl_type", JSONL + b'{"text": null}\n')
write("dataset", "bad_jsonl_duplicate", JSONL + b'{"text": "a", "text": "b"}\n')

# A small Qwen3-style tokenizer: NFC, the Split regex of Qwen3 + ByteLevel, BPE with merges,
# added tokens; and a GPT-2 style ByteLevel one.
QWEN_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
           r"|\s*[\r\n]+|\s+(?!\S)|\s+")
bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b)
        cs.append(256 + n)
        n += 1
byte_chars = [chr(c) for _, c in sorted(zip(bs, cs))]
vocab = {c: i for i, c in enumerate(byte_chars)}
merges = [("h", "e"), ("l", "l"), ("he", "ll"), ("hell", "o"), ("Ġ", "w"), ("o", "r"), ("Ġw", "or")]
for a, b in merges:
    vocab[a + b] = len(vocab)


def tok_json(pre, normalizer, added, merges_as_pairs=False, model_type="BPE"):
    return json.dumps({
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": len(vocab) + i, "content": c, "single_word": False,
                          "lstrip": False, "rstrip": False, "normalized": False,
                          "special": True} for i, c in enumerate(added)],
        "normalizer": normalizer, "pre_tokenizer": pre, "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                    "use_regex": False},
        "model": {"type": model_type, "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab,
                  "merges": [[a, b] for a, b in merges] if merges_as_pairs
                  else ["%s %s" % m for m in merges]}}, ensure_ascii=False)


split_pre = {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": QWEN_RE}, "behavior": "Isolated", "invert": False},
    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]}
gpt2_pre = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
            "use_regex": True}
added = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
cfg = json.dumps({"bos_token": None, "eos_token": "<|im_end|>", "pad_token": {"content": "<|endoftext|>"}})
SEP = "\n@@config@@\n"
write("tokenizer", "good_qwen_style", tok_json(split_pre, {"type": "NFC"}, added) + SEP + cfg)
write("tokenizer", "good_gpt2_style", tok_json(gpt2_pre, None, [], merges_as_pairs=True))
write("tokenizer", "bad_model_type", tok_json(split_pre, None, added, model_type="WordPiece"))
write("tokenizer", "bad_json", tok_json(split_pre, None, added)[:-10])
write("tokenizer", "bad_normalizer", tok_json(split_pre, {"type": "NFKC"}, added))
# a special token named by a number (transformers appends a new name, so a name is no error)
write("tokenizer", "bad_config_token", tok_json(split_pre, None, added) + SEP +
      json.dumps({"eos_token": 5}))
write("tokenizer", "bad_config_json", tok_json(split_pre, None, added) + SEP + "{\"eos_token\": ")
bad_re = json.loads(tok_json(split_pre, None, added))
bad_re["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed"
write("tokenizer", "bad_regex", json.dumps(bad_re))
