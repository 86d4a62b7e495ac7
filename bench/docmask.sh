#!/usr/bin/env bash
# Document masking's cost: the same job with model.attn_mask_type causal and block_causal, one
# after the other, on Tiny Shakespeare with the Qwen3 tokenizer (a paragraph is a document:
# 7,222 of 42.8 tokens on average with the eos, so a 2048-token window holds ~48), tokens/s
# averaged over the steps after the first WARMUP, and the ratio. Model: the bench model's widths (dim 512, 8 heads of
# 64 over 4 kv heads, ffn 1536, vocab 151936 tied) at LAYERS blocks, batch 1 x SEQ tokens.
# Usage: bash bench/docmask.sh   (env: BUILD=build SEQ=2048 LAYERS=4 STEPS=6 WARMUP=2
#        THREADS=2 PREC=float32 EXTRA="more titan train options")
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build} SEQ=${SEQ:-2048} LAYERS=${LAYERS:-4} STEPS=${STEPS:-6} WARMUP=${WARMUP:-2}
THREADS=${THREADS:-2} PREC=${PREC:-float32}
shared=${TITAN_SHARED:-../shared}
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
export OMP_NUM_THREADS=$THREADS
grep -m1 'model name' /proc/cpuinfo | sed 's/.*: /CPU: /'
echo "bf16 flags: $(grep -o -w -E 'amx_bf16|avx512_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
args=(--model.dim 512 --model.n_layers "$LAYERS" --model.n_heads 8 --model.n_kv_heads 4
      --model.head_dim 64 --model.ffn_dim 1536 --model.vocab_size 151936 --model.tie_embeddings
      --model.hf_assets_path "$shared/data/qwen3_tokenizer"
      --training.dataset_path "$shared/data/tinyshakespeare/input.txt"
      --training.local_batch_size 1 --training.seq_len "$SEQ" --training.steps "$STEPS"
      --training.mixed_precision_param "$PREC" --metrics.log_freq 1 --metrics.enable_jsonl
      ${EXTRA:-})
for mask in causal block_causal; do
  "$BUILD/titan" train "${args[@]}" --model.attn_mask_type $mask --job.dump_folder "$out/$mask" \
    > "$out/$mask.log" 2>&1 || { cat "$out/$mask.log"; exit 1; }
  tps=$(grep -o '"tps": [0-9.e+-]*' "$out/$mask/metrics.jsonl" | tail -n +$((WARMUP + 1)) |
        awk '{ s += $2; n++ } END { printf "%.1f", s / n }')
  loss=$(grep -o '"loss": [0-9.e+-]*' "$out/$mask/metrics.jsonl" | tail -1 | awk '{ print $2 }')
  echo "$mask: $tps tokens/s (steps $((WARMUP + 1))-$STEPS), last loss $loss"
  eval "tps_$mask=$tps"
done
awk -v a="$tps_block_causal" -v b="$tps_causal" 'BEGIN { printf "block_causal / causal: %.3f\n", a / b }'
