"""Supervised fine-tuning on chat examples end to end (training.dataset_format = "chat",
torchtitan 0.3's ChatDataset): a small random Qwen3ForCausalLM over the Qwen3 tokenizer, saved
by transformers -> `titan train` from it on a JSONL of [user, assistant] pairs -> the per-step
losses equal a PyTorch training of the same steps within 1e-5 relative: the same rows (packed
by check_loader.reference_chat from HF's chat template: prompts masked, examples whole, padded),
each example attended alone (an explicit block-causal mask, positions from 0 per example), the
loss the mean over the answers' tokens, AdamW with torchtitan's schedule and clipping; and the
validation losses (a held-out chat file, one pass in batches of 4, the last short) equal
PyTorch's token mean over every row of that pass at torchtitan's validation steps.

usage: check_chat_sft.py TITAN SHARED WORK
"""
import json
import os
import random
import shutil
import subprocess
import sys

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

sys.argv, argv = sys.argv[:1] + ["-", "-", "-"], sys.argv  # check_loader reads its own argv
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_loader import Tok, reference_chat  # noqa: E402
from hf_reference import block_causal_mask, lr_factor, torch_train_step  # noqa: E402

titan, shared, work = argv[1:4]
qwen = os.path.join(shared, "data", "qwen3_tokenizer")
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
tok = Tok(qwen)

# examples: Tiny Shakespeare lines as questions and answers of 1 to 6 lines, a few with
# reasoning, one too long for a row (dropped)
rnd = random.Random(5)
lines = [l for l in open(os.path.join(shared, "data", "tinyshakespeare", "input.txt"),
                         encoding="utf-8").read().splitlines() if l.strip()]
examples = []
for i in range(40):
    a = " ".join(lines[rnd.randrange(len(lines))] for _ in range(rnd.choice([1, 2, 3, 6])))
    m = [{"role": "user", "content": lines[rnd.randrange(len(lines))]},
         {"role": "assistant", "content": a if i != 7 else a * 20}]
    if i % 3 == 1:  # titan also takes a system message (0.3 does not)
        m.insert(0, {"role": "system", "content": "Answer as the Bard would."})
    if i % 5 == 2:
        m[1]["reasoning_content"] = "Answer in verse."
    examples.append(m)
with open(os.path.join(work, "chat.jsonl"), "w", encoding="utf-8") as f:
    for m in examples[:30]:
        f.write(json.dumps({"messages": m}) + "\n")
with open(os.path.join(work, "val.jsonl"), "w", encoding="utf-8") as f:
    for m in examples[30:]:
        f.write(json.dumps({"messages": m}) + "\n")

torch.manual_seed(0)
V = 151936  # Qwen3's vocabulary (the tokenizer's ids fit)
cfg = Qwen3Config(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                  max_position_embeddings=256, rope_theta=10000.0, rms_norm_eps=1e-6,
                  tie_word_embeddings=True)
Qwen3ForCausalLM(cfg).save_pretrained(os.path.join(work, "hf_in"))

T, B, STEPS, LR, WARM, NORM = 128, 2, 4, 2e-3, 2, 1.0
cmd = [titan, "train", "--model.config_path", os.path.join(work, "hf_in"),
       "--checkpoint.initial_load_path", os.path.join(work, "hf_in"),
       "--checkpoint.initial_load_in_hf", "--checkpoint.enable", "--checkpoint.interval", "1000",
       "--model.hf_assets_path", qwen, "--training.mixed_precision_param", "float32",
       "--training.dataset_path", os.path.join(work, "chat.jsonl"),
       "--training.dataset_format", "chat", "--steps", str(STEPS), "--batch", str(B),
       "--seq-len", str(T), "--lr", str(LR), "--warmup", str(WARM), "--decay-ratio", "0.5",
       "--min-lr-factor", "0.1", "--max-norm", str(NORM), "--peak-tflops", "1",
       "--dump-folder", os.path.join(work, "run"), "--metrics.enable_jsonl",
       "--job.sample_tokens", "0", "--validation.dataset_path", os.path.join(work, "val.jsonl"),
       "--validation.enable", "--validation.freq", "2", "--validation.local_batch_size", "4"]
p = subprocess.run(cmd, capture_output=True, text=True)
if p.returncode:
    sys.exit("titan train failed:\n" + p.stdout + p.stderr)
out = p.stdout + p.stderr
assert "documents masked" in out and "more than seq_len + 1 = 129: dropped" in out, out
lines = [json.loads(l) for l in open(os.path.join(work, "run", "metrics.jsonl"))]
losses = [l["loss"] for l in lines]
val_losses = {l["step"]: l["val_loss"] for l in lines if "val_loss" in l}

rows = reference_chat(examples[:30], tok, qwen, T, STEPS * B)
val_rows = reference_chat(examples[30:], tok, qwen, T, None)  # one pass: every row counts
ref = Qwen3ForCausalLM.from_pretrained(os.path.join(work, "hf_in"), torch_dtype=torch.float32,
                                       attn_implementation="eager")
params = list(ref.parameters())
opt = torch.optim.AdamW(params, lr=LR, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1,
                        foreach=False, fused=False)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, STEPS, WARM, 0.5, "linear",
                                                                  0.1))
ref_losses, ref_val = [], {}


def forward(rows_):
    ids = torch.tensor([r[0] for r in rows_])
    pos = torch.tensor([r[1] for r in rows_])
    lab = torch.tensor([r[2] for r in rows_])
    logits = ref(input_ids=ids, position_ids=pos, attention_mask=block_causal_mask(pos)).logits
    return logits.float().reshape(-1, V), lab.reshape(-1)


for step in range(STEPS):
    logits, lab = forward(rows[step * B:(step + 1) * B])
    loss = torch.nn.functional.cross_entropy(logits, lab, ignore_index=-100)
    ref_losses.append(torch_train_step(opt, sched, params, loss, NORM))
    if step + 1 in (1, 2, 4):  # torchtitan's validation steps at freq 2: 1, every 2nd, the last
        with torch.no_grad():  # the token mean over every row of one pass of the set
            logits, lab = forward(val_rows)
            ref_val[step + 1] = torch.nn.functional.cross_entropy(logits, lab,
                                                                  ignore_index=-100).item()
masked = sum(r[2].count(-100) for r in rows)
print("rows: %d of %d tokens, %d labels masked (prompts and padding)" % (len(rows), T, masked))
fails = len(losses) != STEPS
for s, (a, b) in enumerate(zip(losses, ref_losses), 1):
    ok = abs(a - b) <= 1e-5 * abs(b)
    fails += not ok
    print("%s step %d: titan %.9f torch %.9f" % ("ok  " if ok else "FAIL", s, a, b))
fails += sorted(val_losses) != sorted(ref_val)
for s in sorted(ref_val):
    a, b = val_losses.get(s, float("nan")), ref_val[s]
    ok = abs(a - b) <= 1e-5 * abs(b)
    fails += not ok
    print("%s validation at step %d (%d rows in batches of 4: the last short, its last row padded): titan %.9f torch %.9f"
          % ("ok  " if ok else "FAIL", s, len(val_rows), a, b))
sys.exit(1 if fails else 0)
