"""A folder exported by `titan train --out DIR` loads in Hugging Face transformers with no
missing or unexpected keys, ties (or not) as configured, holds exactly the saved weights,
and gives a finite next-byte loss close to titan's final training loss.

usage: check_hf_export.py DIR METRICS_JSONL TEXT_FILE
"""
import json
import sys

import torch
from safetensors.torch import load_file
from transformers import Qwen3ForCausalLM


def main():
    out, metrics, text = sys.argv[1:4]
    model, info = Qwen3ForCausalLM.from_pretrained(out, output_loading_info=True,
                                                   attn_implementation="eager")
    bad = {k: v for k, v in info.items() if v}
    assert not bad, f"loading info not clean: {bad}"
    cfg = model.config
    tied = model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert tied == cfg.tie_word_embeddings, f"tied={tied} but config says {cfg.tie_word_embeddings}"
    saved = load_file(f"{out}/model.safetensors")
    sd = model.state_dict()
    for k, v in saved.items():
        assert torch.equal(sd[k], v), f"{k} differs after loading"
    if cfg.tie_word_embeddings:
        assert "lm_head.weight" not in saved, "tied export must not write lm_head.weight"
    # The model was trained on bytes of TEXT_FILE: its loss on a window there should be
    # near titan's last logged loss (same weights, same math, a different window).
    last = [json.loads(l) for l in open(metrics)][-1]["loss"]
    data = open(text, "rb").read()[:4097]
    ids = torch.tensor(list(data), dtype=torch.long)
    T = 64
    with torch.no_grad():
        x = ids[: (len(ids) - 1) // T * T].view(-1, T)
        y = ids[1 : x.numel() + 1].view(-1, T)
        logits = model(x).logits
        loss = torch.nn.functional.cross_entropy(logits.view(-1, cfg.vocab_size), y.reshape(-1))
    print(f"HF loss on the data {loss.item():.4f}, titan's last training loss {last:.4f}")
    assert abs(loss.item() - last) < 0.5, "exported model does not reproduce titan's loss level"
    print(f"ok: {len(saved)} tensors, tied={tied}")


if __name__ == "__main__":
    main()
