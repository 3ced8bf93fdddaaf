#!/usr/bin/env python3
"""Writes a model folder as transformers saves a sharded checkpoint, from one safetensors file.

Usage: scripts/shard_folder.py MODEL.safetensors OUT_DIR N
OUT_DIR gets model-0000i-of-0000N.safetensors (the tensors in name order, cut into N shards),
model.safetensors.index.json ({"metadata": {"total_size"}, "weight_map"}), config.json,
tokenizer.json and vocab.txt (made-up contents of realistic size). Needs numpy and safetensors
(/tmp/corpus-venv/bin/python). Used for the folder figures in README.md (brevis compress -r).
"""
import json
import os
import sys

from safetensors.numpy import load_file, save_file


def main():
    src, out, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    tensors = load_file(src)
    names = sorted(tensors)
    os.makedirs(out, exist_ok=True)
    per = (len(names) + n - 1) // n
    weight_map, total = {}, 0
    for i in range(n):
        shard = f"model-{i + 1:05d}-of-{n:05d}.safetensors"
        part = {k: tensors[k] for k in names[i * per:(i + 1) * per]}
        save_file(part, os.path.join(out, shard), metadata={"format": "pt"})
        for k, v in part.items():
            weight_map[k] = shard
            total += v.nbytes
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump({"architectures": ["BertModel"], "hidden_size": 384}, f, indent=2)
    vocab = [f"tok{i}" for i in range(30522)]
    with open(os.path.join(out, "tokenizer.json"), "w") as f:
        json.dump({"version": "1.0", "model": {"vocab": {t: i for i, t in enumerate(vocab)}}}, f)
    with open(os.path.join(out, "vocab.txt"), "w") as f:
        f.write("\n".join(vocab) + "\n")


if __name__ == "__main__":
    main()
