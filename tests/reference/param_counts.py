"""Parameter counts of titan's flavors against Hugging Face Qwen3ForCausalLM built (on the
meta device, no memory) from the official config.json files.

usage: param_counts.py TITAN_BINARY SHARED_DATA_DIR
"""
import json
import re
import subprocess
import sys

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

FLAVORS = {"0.6B": "Qwen3-0.6B.json", "1.7B": "Qwen3-1.7B.json", "4B": "Qwen3-4B.json",
           "8B": "Qwen3-8B.json", "14B": "Qwen3-14B.json", "32B": "Qwen3-32B.json"}


def hf_count(path):
    with open(path) as f:
        cfg = Qwen3Config(**json.load(f))
    with torch.device("meta"):
        model = Qwen3ForCausalLM(cfg)
    # parameters() yields a tied tensor once.
    return sum(p.numel() for p in model.parameters())


def titan_count(binary, flavor):
    out = subprocess.run([binary, "inspect", "--flavor", flavor], check=True,
                         capture_output=True, text=True).stdout
    return int(re.search(r"^total\s+(\d+)", out, re.M).group(1))


def main():
    binary, data = sys.argv[1], sys.argv[2]
    bad = 0
    for flavor, cfg in FLAVORS.items():
        want, got = hf_count(f"{data}/qwen3_configs/{cfg}"), titan_count(binary, flavor)
        ok = want == got
        bad += not ok
        print(f"{flavor:6s} titan {got:>14,d}  HF {want:>14,d}  {'ok' if ok else 'MISMATCH'}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
