"""Validation of an MoE trained with the expert bias, against transformers.

usage: check_val_moe_bias.py TITAN TEXT WORK_DIR

A byte-level MoE (8 experts, top 2) trains 3 steps with moe_load_balance = bias and validates
the whole held-out set at every step with a validation batch other than training's (titan then
scores it on a forward-only model of the validation shape). The last step's val_loss must equal
Qwen3MoeForCausalLM on the exported weights with the checkpoint's expert bias added to the
router's selection (torchtitan: selection only; the gates stay the softmax probabilities) over
the same windows. The bias must matter: without it the reference differs by far more than the
tolerance (it did: the validation model routed without the bias).
"""
import json
import os
import shutil
import subprocess
import sys

import torch
import torch.nn.functional as F
from transformers import Qwen3MoeForCausalLM

titan, text, work = sys.argv[1:4]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
raw = open(text, "rb").read()
open(f"{work}/train.txt", "wb").write(raw[:200000])
val = raw[-2000:]
open(f"{work}/val.txt", "wb").write(val)
T, STEPS = 32, 3
run = f"{work}/run"
subprocess.run(
    [titan, "train", "--flavor", "debugmodel_moe", "--set", "n_layers=2", "--set", "dim=64",
     "--set", "n_heads=4", "--set", "n_kv_heads=2", "--set", "head_dim=16", "--set",
     "num_experts=8", "--set", "top_k=2", "--set", "moe_inter_dim=32",
     "--model.moe_load_balance", "bias", "--model.moe_bias_update_rate", "0.03",
     "--data", f"{work}/train.txt", "--batch", "4", "--seq-len", str(T), "--steps", str(STEPS),
     "--peak-tflops", "1", "--dump-folder", run, "--metrics.enable_jsonl",
     "--validation.enable", "--validation.dataset_path", f"{work}/val.txt",
     "--validation.freq", "1", "--validation.steps", "-1", "--validation.seq_len", str(T),
     "--validation.local_batch_size", "3", "--checkpoint.enable", "--checkpoint.interval",
     str(STEPS), "--out", "hf"],
    check=True, stdout=subprocess.DEVNULL, env=dict(os.environ, TITAN_MIXED_PRECISION="float32"))

lines = [json.loads(x) for x in open(f"{run}/metrics.jsonl")]
got = [x for x in lines if x["step"] == STEPS][0]["val_loss"]
bias = json.load(open(f"{run}/checkpoint/step-{STEPS}/metadata.json"))["train"]["expert_bias"]
model = Qwen3MoeForCausalLM.from_pretrained(f"{run}/hf", torch_dtype=torch.float32).eval()
E, K = model.config.num_experts, model.config.num_experts_per_tok
bias = torch.tensor(bias, dtype=torch.float32).view(model.config.num_hidden_layers, E)
assert bias.abs().max() > 0, "the expert bias never moved: the test cannot tell"


def biased_router(gate, b):
    def forward(h):
        h = h.reshape(-1, gate.hidden_dim)
        logits = F.linear(h, gate.weight)
        p = torch.softmax(logits, dtype=torch.float, dim=-1)
        _, idx = torch.topk(p + b, K, dim=-1)  # the bias chooses the experts ...
        top = p.gather(-1, idx)  # ... the gates are their probabilities
        if gate.norm_topk_prob:
            top = top / top.sum(dim=-1, keepdim=True)
        return logits, top.to(logits.dtype), idx
    return forward


n = len(val) // (T + 1)  # every whole window of T + 1 bytes
w = torch.tensor([list(val[i * (T + 1):(i + 1) * (T + 1)]) for i in range(n)])


def loss():
    with torch.no_grad():
        lg = model(w[:, :-1]).logits.double()
    return F.cross_entropy(lg.reshape(-1, lg.shape[-1]), w[:, 1:].reshape(-1)).item()


plain = loss()
for layer, b in zip(model.model.layers, bias):
    layer.mlp.gate.forward = biased_router(layer.mlp.gate, b)
ref = loss()
print(f"val_loss {got:.9f}, transformers with the expert bias {ref:.9f}, without {plain:.9f}")
assert abs(plain - ref) > 1e-4 * ref, "the bias does not change the reference: the test cannot tell"
assert abs(got - ref) <= 1e-5 * ref, f"val_loss {got} != transformers with the bias {ref}"
print("validation of a bias-balanced MoE with its own shape routes with the expert bias")
