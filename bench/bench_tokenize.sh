#!/usr/bin/env bash
# `titan tokenize` (a JSONL dataset -> token shards, both cores) against the Hugging Face
# Rust tokenizer doing the same encoding work on both cores (encode_batch over chunks of
# 4096 documents read line by line, RAYON_NUM_THREADS=2) in the same run, on a generated
# JSONL file of SIZE_MB (Tiny Shakespeare paragraphs, with some Unicode-heavy documents).
# Reports MB/s of JSONL input, peak RSS (the dataset is streamed: memory must not grow with
# the file), and checks both produce the same number of tokens.
#
#   bash bench/bench_tokenize.sh            # SIZE_MB=256 by default
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE_MB=${SIZE_MB:-256}
PYTHON=${PYTHON:-.venv/bin/python}
DATA=../shared/data
TOK=$DATA/qwen3_tokenizer
TMP=$(mktemp -d /tmp/titan-tokenize-bench.XXXXXX)
trap 'rm -rf "$TMP"' EXIT

"$PYTHON" - "$DATA/tinyshakespeare/input.txt" "$TMP/docs.jsonl" "$SIZE_MB" <<'PY'
import json, random, sys
paras = [p for p in open(sys.argv[1], encoding="utf-8").read().split("\n\n") if p.strip()]
uni = "漢字かなカナ 한국어 Ünïcödé e\u0301 🙂👍🏽 Привет мир مرحبا"
rnd, size, n = random.Random(1), int(sys.argv[3]) << 20, 0
with open(sys.argv[2], "w", encoding="utf-8") as f:
    while n < size:
        k = rnd.randint(1, 8)
        i = rnd.randrange(len(paras) - k)
        text = "\n\n".join(paras[i:i + k]) + (" " + uni if rnd.random() < 0.1 else "")
        line = json.dumps({"text": text, "id": n}, ensure_ascii=False) + "\n"
        f.write(line)
        n += len(line.encode("utf-8"))
PY
BYTES=$(stat -c %s "$TMP/docs.jsonl")
echo "input: $TMP/docs.jsonl, $((BYTES >> 20)) MiB"

/usr/bin/time -f "%e %M" -o "$TMP/t_titan" build/titan tokenize --tokenizer "$TOK" \
    --data "$TMP/docs.jsonl" --out "$TMP/shards" --threads 2 > "$TMP/titan.out"
cat "$TMP/titan.out"
TT=$(grep -o 'into [0-9]* tokens' "$TMP/titan.out" | grep -o '[0-9]*')

RAYON_NUM_THREADS=2 /usr/bin/time -f "%e %M" -o "$TMP/t_hf" "$PYTHON" - "$TOK" "$TMP/docs.jsonl" \
    > "$TMP/hf.out" <<'PY'
import json, sys
from tokenizers import Tokenizer
tk = Tokenizer.from_file(sys.argv[1] + "/tokenizer.json")
n, chunk = 0, []
def flush():
    global n
    n += sum(len(e.ids) for e in tk.encode_batch(chunk, add_special_tokens=False))
    chunk.clear()
for line in open(sys.argv[2], encoding="utf-8"):
    if line.strip():
        chunk.append(json.loads(line)["text"])
        if len(chunk) == 4096:
            flush()
flush()
print(n)
PY
HT=$(cat "$TMP/hf.out")
read -r T_TITAN RSS_TITAN < "$TMP/t_titan"
read -r T_HF RSS_HF < "$TMP/t_hf"
"$PYTHON" - "$BYTES" "$T_TITAN" "$RSS_TITAN" "$T_HF" "$RSS_HF" "$TT" "$HT" <<'PY'
import sys
b, tt, rt, th, rh, nt, nh = sys.argv[1:]
b, tt, th = int(b), float(tt), float(th)
print("%-34s %8s %10s %12s" % ("tokenize JSONL, 2 threads", "MB/s", "peak RSS", "tokens"))
print("%-34s %8.1f %7.0f MiB %12s" % ("titan tokenize (+ shard writing)", b / tt / 1e6, int(rt) / 1024, nt))
print("%-34s %8.1f %7.0f MiB %12s" % ("HF tokenizers encode_batch", b / th / 1e6, int(rh) / 1024, nh))
print("ratio titan / HF: %.2fx;  token counts %s" % (th / tt, "match" if nt == nh else "DIFFER"))
PY
