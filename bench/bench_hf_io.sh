#!/usr/bin/env bash
# Load/save speed and peak memory of HF checkpoints (issue 4 item 10).
#
# Makes a Qwen3-1.7B-shaped HF folder with transformers (random bf16 weights, save_pretrained
# sharded at 2GB) in $WORK, then times, with a warm page cache:
#   cat of the weight files > /dev/null           (the read ceiling)
#   titan convert HF(bf16) -> training checkpoint (load = read + bf16->fp32; save = fp32 write)
#   titan convert checkpoint -> HF bf16 / fp32    (load fp32; save with conversion)
# Peak RSS from /usr/bin/time -v. usage: bench/bench_hf_io.sh  (BUILD=build WORK=/tmp/titan_hf_bench)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
WORK=${WORK:-/tmp/titan_hf_bench}
CONFIG=${CONFIG:-../shared/data/qwen3_configs/Qwen3-1.7B.json}
mkdir -p "$WORK"
if [ ! -f "$WORK/hf/model.safetensors.index.json" ]; then
  .venv/bin/python - "$CONFIG" "$WORK/hf" <<'PY'
import json, sys, torch
from transformers import Qwen3Config, Qwen3ForCausalLM
cfg = Qwen3Config(**json.load(open(sys.argv[1])))
with torch.device("meta"):
    m = Qwen3ForCausalLM(cfg)
m = m.to_empty(device="cpu").to(torch.bfloat16)
m.tie_weights()  # to_empty unties the shared embedding/lm_head
g = torch.Generator().manual_seed(0)
with torch.no_grad():
    for p in m.parameters():
        p.normal_(0, 0.02, generator=g)
m.save_pretrained(sys.argv[2], max_shard_size="2GB")
PY
fi
t() { /usr/bin/time -f "%e s, peak RSS %M KiB" "$@"; }
echo "== cat (warm)"; cat "$WORK"/hf/*.safetensors > /dev/null
t cat "$WORK"/hf/*.safetensors > /dev/null
# the other ceiling of a load: writing the fp32 model's 6.9 GB into fresh memory (every page
# faulted in and zeroed by the kernel; slow and very variable on a VM)
echo "== first touch of 6.9 GB of fresh memory"
.venv/bin/python -c "import numpy as np, time; t = time.time(); a = np.ones(1720574976, np.float32); \
print(f'{time.time() - t:.2f} s ({a.nbytes / 1e9 / (time.time() - t):.2f} GB/s)')"
echo "== HF bf16 -> training checkpoint (fp32)"; rm -rf "$WORK/ckpt"
t "$BUILD/titan" convert "$WORK/hf" "$WORK/ckpt"
echo "== cat training checkpoint (warm)"; t cat "$WORK/ckpt/model.safetensors" > /dev/null
for dt in bfloat16 float32; do
  echo "== training checkpoint -> HF $dt"; rm -rf "$WORK/out_$dt"
  t "$BUILD/titan" convert "$WORK/ckpt" "$WORK/out_$dt" --dtype $dt --max-shard-size 2GB
done
cmp "$WORK/hf/model-00001-of-00002.safetensors" "$WORK/out_bfloat16/model-00001-of-00002.safetensors" \
  && echo "bf16 round trip byte-identical"
du -sh "$WORK"/*
