#!/usr/bin/env bash
# Decode speed: `titan generate` against HF transformers' generate() (bench/generate_hf.py) on
# the same model folder, greedy, the same prompt ids, 2 threads: prefill seconds and decode
# tokens/s (forwards of one token on the KV cache), each the median of REPEATS runs after a
# warm-up, and whether the greedy ids agree. The model is a randomly initialised HF folder of
# ../shared/data/qwen3_configs/Qwen3-$SHAPE.json (fp32 safetensors; made once into
# $LOGDIR/model), or MODEL=DIR.
#   bash bench/bench_generate.sh
#   SHAPE=1.7B NEW=32 PROMPT_CHARS=4000 bash bench/bench_generate.sh
#   PREC=bfloat16 bash bench/bench_generate.sh   (titan --precision bfloat16, HF bf16 weights)
set -euo pipefail
cd "$(dirname "$0")/.."
SHAPE=${SHAPE:-0.6B}
NEW=${NEW:-64}
THREADS=${THREADS:-2}
REPEATS=${REPEATS:-3}
PROMPT_CHARS=${PROMPT_CHARS:-600}
PREC=${PREC:-float32}
BUILD=${BUILD:-build}
PY=${PY:-.venv/bin/python}
LOGDIR=${LOGDIR:-$(mktemp -d /tmp/titan-gen.XXXXXX)}
mkdir -p "$LOGDIR"
MODEL=${MODEL:-$LOGDIR/model}
say() { echo "== $*" >&2; }

if [ ! -f "$MODEL/config.json" ]; then
  say "making a random Qwen3-$SHAPE folder in $MODEL"
  "$PY" - "$MODEL" "../shared/data/qwen3_configs/Qwen3-$SHAPE.json" <<'PYMODEL'
import json, shutil, glob, sys, torch
from transformers import Qwen3Config, Qwen3ForCausalLM
c = json.load(open(sys.argv[2]))
c = Qwen3Config(**{k: v for k, v in c.items() if k not in ("architectures", "torch_dtype", "dtype", "transformers_version")})
torch.manual_seed(0)
Qwen3ForCausalLM(c).float().save_pretrained(sys.argv[1])
for f in glob.glob("../shared/data/qwen3_tokenizer/*"):
    shutil.copy(f, sys.argv[1])
PYMODEL
fi
head -c "$PROMPT_CHARS" ../shared/data/tinyshakespeare/input.txt > "$LOGDIR/prompt.txt"
"$PY" -c "
import sys; from tokenizers import Tokenizer
t = Tokenizer.from_file(sys.argv[1] + '/tokenizer.json')
print(' '.join(map(str, t.encode(open(sys.argv[2]).read()).ids)))" "$MODEL" "$LOGDIR/prompt.txt" \
  > "$LOGDIR/prompt.ids"

export OMP_NUM_THREADS=$THREADS
# titan: NEW + 1 tokens = NEW forwards on the cache after the prompt's (the first token comes
# from the prompt's logits), as HF's generate(NEW + 1) - generate(1)
titan_run() {
  "$BUILD/titan" generate --model "$MODEL" --prompt "$(cat "$LOGDIR/prompt.txt")" \
    --max-new-tokens $((NEW + 1)) --temperature 0 --ids --threads "$THREADS" --precision "$PREC" \
    >"$LOGDIR/titan.ids" 2>"$LOGDIR/titan.err"
  sed -n 's/^prompt: \([0-9]*\) tokens in \([0-9.]*\) s.*generated \([0-9]*\) tokens in \([0-9.]*\) s.*/\1 \2 \3 \4/p' \
    "$LOGDIR/titan.err"
}
say "titan generate ($PREC, $THREADS threads), warm-up + $REPEATS"
titan_run >/dev/null
: >"$LOGDIR/titan.times"
for _ in $(seq "$REPEATS"); do titan_run >>"$LOGDIR/titan.times"; done
read -r t_np t_pre t_new t_dec < <(sort -k2 -n "$LOGDIR/titan.times" | awk -v r="$REPEATS" \
  'NR == int((r + 1) / 2)')
t_dec=$(sort -k4 -n "$LOGDIR/titan.times" | awk -v r="$REPEATS" 'NR == int((r + 1) / 2) { print $4 }')
[ "$t_new" = $((NEW + 1)) ] || say "titan stopped after $t_new tokens (an eos): its decode figure covers fewer"
say "HF transformers generate"
hf_flag=()
[ "$PREC" = bfloat16 ] && hf_flag=(--bf16)
"$PY" bench/generate_hf.py --model "$MODEL" --prompt-ids "$LOGDIR/prompt.ids" --new "$NEW" \
  --threads "$THREADS" --repeats "$REPEATS" "${hf_flag[@]}" >"$LOGDIR/hf.out" 2>"$LOGDIR/hf.err"
hf_json=$(tail -1 "$LOGDIR/hf.out")
same=$([ "$(head -1 "$LOGDIR/hf.out")" = "$(tr -s ' \n' ' ' <"$LOGDIR/titan.ids" | sed 's/ $//')" ] && echo yes || echo no)
"$PY" - "$t_np" "$t_pre" "$t_new" "$t_dec" "$hf_json" "$same" "$SHAPE" "$PREC" "$THREADS" <<'PYTAB'
import json, sys
np_, pre, new, dec = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
hf = json.loads(sys.argv[5])
tdec = (new - 1) / dec
print(f"Qwen3-{sys.argv[7]} (random weights), {sys.argv[8]}, {sys.argv[9]} threads, "
      f"prompt {np_} tokens (HF {hf['prompt_tokens']}), greedy ids equal: {sys.argv[6]}")
print("| run | prefill s | decode tokens/s |")
print("|---|---|---|")
print(f"| titan generate | {pre:.3f} | {tdec:.2f} |")
print(f"| HF transformers {hf['torch']} generate | {hf['prefill_s']:.3f} | {hf['decode_tokens_per_s']:.2f} |")
print(f"| titan / HF | {hf['prefill_s'] / pre:.2f}x faster | {tdec / hf['decode_tokens_per_s']:.2f}x |")
PYTAB
say "logs in $LOGDIR"
