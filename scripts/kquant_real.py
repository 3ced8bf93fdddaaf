#!/usr/bin/env python3
"""A K-quant test model from real weights: whisper-base's fp16 tensors (from the development
corpus) laid out as a 12-layer llama-style F16 GGUF (token_embd, attn_q/k/v split from the fused
qkv, attn_output, ffn_up, ffn_down, norms as F32), so that llama.cpp's own `llama-quantize` writes
real K-quant mixtures (Q4_K_M, Q6_K, ...) of weights that were never quantized before. The
SmolLM2 files of scripts/llama.sh come from a Q4_1 model (every block of their requantized Q8_0
tensors holds at most 16 distinct values); these do not.
Usage: scripts/kquant_real.py WHISPER_BASE_FP16_SAFETENSORS OUT.gguf  (needs numpy and gguf)
Then: target/llama.cpp/build/bin/llama-quantize OUT.gguf OUT.Q4_K_M.gguf Q4_K_M"""
import json
import struct
import sys

import gguf
import numpy as np

src, out = sys.argv[1], sys.argv[2]
data = open(src, "rb").read()
k = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8 : 8 + k])
header.pop("__metadata__", None)
base = 8 + k


def tensor(name):
    v = header[name]
    a, b = v["data_offsets"]
    return np.frombuffer(data[base + a : base + b], dtype=np.float16).reshape(v["shape"])


by_shape = {}
for name, v in header.items():
    if v["dtype"] == "F16":
        by_shape.setdefault(tuple(v["shape"]), []).append(name)
w = gguf.GGUFWriter(out, "llama")
w.add_block_count(12)
w.add_context_length(2048)
w.add_embedding_length(512)
w.add_feed_forward_length(2048)
w.add_head_count(8)
w.add_head_count_kv(8)
w.add_layer_norm_rms_eps(1e-5)
w.add_file_type(1)
norms = by_shape[(512,)]
w.add_tensor("token_embd.weight", tensor(by_shape[(51865, 512)][0]))
w.add_tensor("output_norm.weight", tensor(norms[0]).astype(np.float32))
for i in range(12):
    qkv = tensor(by_shape[(1536, 512)][i])
    w.add_tensor(f"blk.{i}.attn_norm.weight", tensor(norms[1 + 2 * i]).astype(np.float32))
    w.add_tensor(f"blk.{i}.attn_q.weight", np.ascontiguousarray(qkv[:512]))
    w.add_tensor(f"blk.{i}.attn_k.weight", np.ascontiguousarray(qkv[512:1024]))
    w.add_tensor(f"blk.{i}.attn_v.weight", np.ascontiguousarray(qkv[1024:]))
    w.add_tensor(f"blk.{i}.attn_output.weight", tensor(by_shape[(512, 512)][i]))
    w.add_tensor(f"blk.{i}.ffn_norm.weight", tensor(norms[2 + 2 * i]).astype(np.float32))
    w.add_tensor(f"blk.{i}.ffn_up.weight", tensor(by_shape[(2048, 512)][i]))
    w.add_tensor(f"blk.{i}.ffn_down.weight", tensor(by_shape[(512, 2048)][i]))
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
