#!/usr/bin/env python3
"""Writes a large model family for measuring `--ref` in bounded memory: an F32 safetensors
master of about GIB GiB (matrices of normal weights with a scale per row, LayerNorm-like
vectors), its BF16 cast (round to nearest even) as safetensors, and its Q8_0 quantization as
GGUF under llama.cpp-style names (`blk.N.attn_q.weight`, written by the `gguf` package's
writer and quantizer). Every file is written piece by piece, so this script stays small.

Usage: scripts/ref_pair.py OUTDIR [--gib 2]   (needs numpy and gguf)
Then, e.g.:
  /usr/bin/time -v brevis compress --memory-limit 256M --ref OUTDIR/master.safetensors OUTDIR/bf16.safetensors
"""
import argparse
import json
import struct
from pathlib import Path

import numpy as np

COLS = 4096


def layout(gib):
    """(hf name, gguf name, shape) of each tensor: 8 matrices of 4096 columns per layer, a norm."""
    rows = [4096, 1024, 1024, 4096, 11008, 11008, 4096 * 11008 // COLS]
    names = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    gg = ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"]
    per_layer = sum(rows) * COLS * 4
    tensors = []
    for layer in range(max(1, round(gib * 2**30 / per_layer))):
        for n, g, r in zip(names, gg, rows):
            tensors.append((f"model.layers.{layer}.{n}.weight", f"blk.{layer}.{g}.weight", (r, COLS)))
        tensors.append((f"model.layers.{layer}.norm.weight", f"blk.{layer}.attn_norm.weight", (COLS,)))
    return tensors


def values(i, shape):
    rng = np.random.default_rng(i)
    if len(shape) == 1:
        return (1.0 + 0.05 * rng.standard_normal(shape)).astype(np.float32)
    scale = (0.02 * np.exp(0.3 * rng.standard_normal((shape[0], 1)))).astype(np.float32)
    return (rng.standard_normal(shape, dtype=np.float32) * scale).astype(np.float32)


def bf16_rne(x):
    u = x.view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


def write_safetensors(path, tensors, dtype, convert):
    width = {"F32": 4, "BF16": 2}[dtype]
    header, off = {}, 0
    for name, _, shape in tensors:
        n = int(np.prod(shape)) * width
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for i, (_, _, shape) in enumerate(tensors):
            f.write(convert(values(i, shape)).tobytes())


def write_q8_0(path, tensors):
    import gguf

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(max(1, len(tensors) // 8))
    q8 = gguf.GGMLQuantizationType.Q8_0
    for i, (_, name, shape) in enumerate(tensors):
        if len(shape) == 1:
            w.add_tensor_info(name, shape, np.dtype(np.float32), int(np.prod(shape)) * 4)
        else:
            nbytes = shape[0] * (shape[1] // 32) * 34
            w.add_tensor_info(name, (shape[0], nbytes // shape[0]), np.dtype(np.uint8), nbytes, raw_dtype=q8)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for i, (_, name, shape) in enumerate(tensors):
        x = values(i, shape)
        data = x if len(shape) == 1 else gguf.quants.quantize(x, q8)
        w.write_tensor_data(data)
    w.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("outdir", type=Path)
    ap.add_argument("--gib", type=float, default=2.0, help="size of the F32 master in GiB")
    a = ap.parse_args()
    a.outdir.mkdir(parents=True, exist_ok=True)
    tensors = layout(a.gib)
    write_safetensors(a.outdir / "master.safetensors", tensors, "F32", lambda x: x)
    write_safetensors(a.outdir / "bf16.safetensors", tensors, "BF16", bf16_rne)
    write_q8_0(a.outdir / "q8_0.gguf", tensors)
    for p in sorted(a.outdir.iterdir()):
        print(f"{p}: {p.stat().st_size} bytes")


if __name__ == "__main__":
    main()
