#!/usr/bin/env bash
# One command: encode throughput (MB/s of UTF-8 input) of titan's BPE tokenizer against
# Hugging Face `tokenizers` (and `bpe-qwen` when it is installed in the venv), Qwen3 tokenizer,
# on Tiny Shakespeare and on a generated Unicode-heavy text (~1 MB: CJK, Cyrillic, Arabic /
# Hebrew, emoji with ZWJ / skin tones / flags, combining marks, ASCII, digits).
#
#   bash bench/bench_tokenizer.sh
#
# Modes (best of REPS runs each; cold = freshly loaded tokenizer object per run, warm = one
# object that has already encoded the same input; load time excluded):
#   whole-*   the whole file as one string, 1 thread
#   docs-*    the file split on "\n\n" into documents, encoded one by one, 1 thread
#   docs2t-*  the documents on 2 threads: titan = 2 halves, one tokenizer object per thread
#             (pthreads); HF = encode_batch with RAYON_NUM_THREADS=2; bpe-qwen =
#             encode_batch_parallel with RAYON_NUM_THREADS=2
# Also checks that titan's ids equal HF's (token count + FNV-1a hash of the id sequence).
#
# Environment knobs:
#   REPS=3
#   BUILD=/tmp/titan-tokbench-build   CMake build directory for libtitan_core.a
#   SKIP_BUILD=1                      use the existing $BUILD/tokenizer_speed
#   PYTHON=.venv/bin/python
#   TOKDIR=/work/shared/data/qwen3_tokenizer   (or ../shared/data/qwen3_tokenizer)
#   SHAKESPEARE=.../tinyshakespeare/input.txt
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

REPS=${REPS:-3}
BUILD=${BUILD:-/tmp/titan-tokbench-build}
PYTHON=${PYTHON:-.venv/bin/python}
DATA=../shared/data
[ -d "$DATA" ] || DATA=/work/shared/data
TOKDIR=${TOKDIR:-$DATA/qwen3_tokenizer}
SHAKESPEARE=${SHAKESPEARE:-$DATA/tinyshakespeare/input.txt}
OBLAS_DIR=/usr/lib/x86_64-linux-gnu/openblas-openmp

TMP=$(mktemp -d /tmp/titan-tokbench.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
RES=$TMP/results.txt

if [ "${SKIP_BUILD:-0}" != 1 ]; then
    echo "== building libtitan_core.a in $BUILD"
    cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >"$TMP/cmake.log" 2>&1 &&
        cmake --build "$BUILD" -j2 --target titan_core >>"$TMP/cmake.log" 2>&1 ||
        { cat "$TMP/cmake.log"; exit 1; }
    gcc -O2 -std=c11 -Wall -Wextra -Isrc bench/tokenizer_speed.c "$BUILD/libtitan_core.a" \
        -fopenmp "$OBLAS_DIR/libopenblas.so.0" -Wl,-rpath,"$OBLAS_DIR" \
        -ljansson -lutf8proc -lpcre2-8 -ldnnl -lm -lpthread -o "$BUILD/tokenizer_speed" || exit 1
fi
BIN=$BUILD/tokenizer_speed

"$PYTHON" bench/tokenizer_speed.py gen "$TMP/unicode.txt" || exit 1
echo "inputs: shakespeare $(wc -c <"$SHAKESPEARE") bytes, unicode $(wc -c <"$TMP/unicode.txt") bytes (generated)"
"$PYTHON" -c 'import tokenizers; print("tokenizers", tokenizers.__version__)'
"$PYTHON" -c 'import importlib.metadata as m; print("bpe-qwen", m.version("bpe-qwen"))' 2>/dev/null ||
    echo "# bpe-qwen not installed (pip install bpe-qwen)" | tee -a "$RES"
echo "$(nproc) CPUs; load before: $(cut -d' ' -f1-3 /proc/loadavg)"

for input in shakespeare unicode; do
    f=$SHAKESPEARE
    [ $input = unicode ] && f=$TMP/unicode.txt
    echo "== $input: titan"
    "$BIN" "$TOKDIR" "$f" $input "$REPS" | tee -a "$RES" || exit 1
    echo "== $input: HF tokenizers / bpe-qwen, 1 thread"
    RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false \
        "$PYTHON" bench/tokenizer_speed.py run "$TOKDIR" "$f" $input "$REPS" | tee -a "$RES" || exit 1
    echo "== $input: HF encode_batch / bpe-qwen encode_batch_parallel, 2 threads"
    RAYON_NUM_THREADS=2 TOKENIZERS_PARALLELISM=true \
        "$PYTHON" bench/tokenizer_speed.py batch "$TOKDIR" "$f" $input 2 "$REPS" | tee -a "$RES" || exit 1
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
"$PYTHON" bench/tokenizer_speed.py table "$RES"
