#!/usr/bin/env python3
"""Cross-checks titan's safetensors writer and reader against the Python `safetensors` package.

  --check PATH   PATH was written by `test_safetensors --write-fixture PATH` (titan's writer):
                 it must load with safetensors and hold exactly the fixture's tensors/metadata.
  --make PATH    writes a file with the Python package (BF16, F16, F32, F64, F8_E4M3, F8_E5M2,
                 every integer type, BOOL, and metadata) for `test_safetensors --check-python PATH` (titan's reader).
  --grads DIR    DIR/titan_grads.safetensors (titan's gradients, written by test_hf_parity)
                 must load with safetensors and match DIR/ref.safetensors' grad.* within 1e-4.
"""
import argparse
import json
import struct
import sys

import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file


def fail(msg):
    print(f"FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def check_layout(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    if n % 8:
        fail(f"{path}: header length {n} is not a multiple of 8")
    hdr = raw[8:8 + n]
    if hdr.rstrip(b" ") != hdr.rstrip() or not hdr.rstrip(b" ").endswith(b"}"):
        fail(f"{path}: header padding is not spaces after the JSON")
    return json.loads(hdr)


def check_fixture(path):
    check_layout(path)
    with safe_open(path, "np") as f:  # numpy has no bfloat16: only the other tensors here
        meta = f.metadata()
        keys = list(f.keys())
        t = {k: f.get_tensor(k) for k in keys if k != "edges_bf16"}
    want_meta = {"format": "pt", "note": 'quote " backslash \\ unicode \u00e9'}
    if meta != want_meta:
        fail(f"{path}: metadata {meta!r} != {want_meta!r}")
    if sorted(keys) != sorted(["f32", "i64", "i32", "scalar", "empty", "edges_bf16", "edges_f16"]):
        fail(f"{path}: tensors {keys}")
    want = {
        "f32": np.array([[-1.0, -0.5, 0.0], [0.5, 1.0, 1.5]], dtype=np.float32),
        "i64": np.array([0, -1, 1099511627776, -9223372036854775807], dtype=np.int64),
        "i32": np.array([[1, -2], [2147483647, -2147483648]], dtype=np.int32),
        "scalar": np.array(3.25, dtype=np.float32),
        "empty": np.zeros((0, 3), dtype=np.float32),
    }
    # titan's fp32 -> BF16/F16 conversion against torch's casts (round to nearest even)
    import torch
    from safetensors.torch import load_file as load_torch
    tt = load_torch(path)
    edges = torch.tensor([1.00390625, 1.01171875, 65519.0, 65520.0, 1e-8, 2.0 ** -25,
                          3 * 2.0 ** -25, 1e5, -0.0, 0.1, 1 / 3, -65504.0, 6.097555e-05,
                          3.4028235e38], dtype=torch.float32)
    for k, dt in (("edges_bf16", torch.bfloat16), ("edges_f16", torch.float16)):
        ref = edges.to(dt)
        if tt[k].dtype != dt or not torch.equal(tt[k].view(torch.int16), ref.view(torch.int16)):
            fail(f"{path}: {k}: titan {tt[k].tolist()} != torch {ref.tolist()}")
    for k, w in want.items():
        got = t[k]
        if got.dtype != w.dtype or got.shape != w.shape or not np.array_equal(got, w):
            fail(f"{path}: tensor {k}: got {got.dtype} {got.shape} {got!r}, want {w!r}")
    print(f"ok: {path} (titan writer) loads with safetensors {keys} and metadata {meta}")


def make(path):
    import torch
    from safetensors.torch import save_file

    vals = [[1.0, -2.5, 0.15625], [0.0, 3.0, -0.0]]
    t = {
        "bf16": torch.tensor(vals, dtype=torch.bfloat16),
        "f16": torch.tensor(vals, dtype=torch.float16),
        "f32": torch.tensor(vals, dtype=torch.float32),
        "f64": torch.tensor(vals, dtype=torch.float64),
        "f16_special": torch.tensor([65504.0, 2.0 ** -24, float("inf")], dtype=torch.float16),
        "i64": torch.tensor([0, -100, 151935, 2147483647], dtype=torch.int64),
        "i32": torch.tensor([-1, 7, -2147483648], dtype=torch.int32),
        "f8_e4m3": torch.tensor(vals, dtype=torch.float8_e4m3fn),
        "f8_e5m2": torch.tensor(vals, dtype=torch.float8_e5m2),
        "f8_e4m3_special": torch.tensor([448.0, 2.0 ** -9, -(2.0 ** -6)]).to(torch.float8_e4m3fn),
        "f8_e5m2_special": torch.tensor([57344.0, 2.0 ** -16, float("-inf")]).to(torch.float8_e5m2),
        "u8": torch.tensor([0, 255, 7], dtype=torch.uint8),
        "i8": torch.tensor([-128, 127, -1], dtype=torch.int8),
        "i16": torch.tensor([-32768, 32767, 5], dtype=torch.int16),
        "u16": torch.tensor([0, 65535, 9], dtype=torch.uint16),
        "u32": torch.tensor([0, 4294967295, 11], dtype=torch.uint32),
        "u64": torch.tensor([0, 2 ** 40, 13], dtype=torch.uint64),
        "bool": torch.tensor([True, False, True]),
    }
    save_file(t, path, metadata={"format": "pt", "writer": "python safetensors"})
    print(f"wrote {path}")


def check_grads(d):
    gpath, rpath = f"{d}/titan_grads.safetensors", f"{d}/ref.safetensors"
    check_layout(gpath)
    g = load_file(gpath)
    with safe_open(gpath, "np") as f:
        meta = f.metadata()
    if meta.get("writer") != "titan test_hf_parity":
        fail(f"{gpath}: metadata {meta}")
    ref = {k[5:]: v for k, v in load_file(rpath).items() if k.startswith("grad.")}
    if sorted(g) != sorted(ref):
        fail(f"{gpath}: names {sorted(set(g) ^ set(ref))} differ from the reference gradients")
    worst = 0.0
    for k, r in ref.items():
        if g[k].dtype != np.float32 or g[k].shape != r.shape:
            fail(f"{gpath}: {k}: {g[k].dtype} {g[k].shape}, reference {r.shape}")
        diff = np.linalg.norm((g[k].astype(np.float64) - r))
        # both exactly zero (an expert no token reached): equal; a zero reference alone: inf
        rel = 0.0 if diff == 0 else diff / np.linalg.norm(r.astype(np.float64))
        worst = max(worst, rel)
        if not rel <= 1e-4:
            fail(f"{gpath}: {k}: rel err {rel:.2e}")
    print(f"ok: {gpath}: {len(g)} gradients load with safetensors, worst rel err {worst:.2e}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    grp = ap.add_mutually_exclusive_group(required=True)
    grp.add_argument("--check", metavar="PATH")
    grp.add_argument("--make", metavar="PATH")
    grp.add_argument("--grads", metavar="DIR")
    a = ap.parse_args()
    if a.check:
        check_fixture(a.check)
    elif a.make:
        make(a.make)
    else:
        check_grads(a.grads)


if __name__ == "__main__":
    main()
