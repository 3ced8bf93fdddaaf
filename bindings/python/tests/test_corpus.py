"""Every safetensors file of the development corpus ($BREVIS_CORPUS, default
~/.cache/brevis-corpus; .ci/run builds it): its archive loads through brevis.numpy and
brevis.torch to what safetensors loads from the original, bit for bit; safe_open on whisper-base
decodes one tensor without the others (timed against a full load)."""

import os
import time

import pytest

import brevis
import brevis.numpy as bnp
from conftest import CORPUS, need, skip_or_fail
from test_arrays import raw_tensors, same_np, same_pt


def corpus_files():
    found = []
    for sub in ["language", "derived", "audio", "image"]:
        for folder, _, files in os.walk(os.path.join(CORPUS, sub)):
            found += [os.path.join(folder, f) for f in files if f.endswith(".safetensors")]
    return sorted(found)


FILES = corpus_files()


@pytest.fixture(scope="module")
def archives(tmp_path_factory):
    """path -> its archive (made once for the module)."""
    out, folder = {}, tmp_path_factory.mktemp("corpus")
    for i, path in enumerate(FILES):
        out[path] = str(folder / f"{i}.brv")
        brevis.compress_file(path, out[path], threads=2)
    return out


def test_corpus_is_there():
    if not FILES:
        skip_or_fail(f"no corpus under {CORPUS} (.ci/run builds it)")
    assert len(FILES) >= 8, FILES


@pytest.mark.parametrize("path", FILES, ids=[os.path.basename(f) for f in FILES])
def test_numpy_load_equals_safetensors(path, archives):
    st = need("safetensors.numpy")
    need("ml_dtypes")
    with open(path, "rb") as f:
        raw = raw_tensors(f.read())
    got = bnp.load_file(archives[path])
    assert sorted(got) == sorted(raw)
    plain = {k for k, (dtype, _, _) in raw.items() if dtype not in ("BF16", "F8_E5M2", "F8_E4M3")}
    with st.safe_open(path, framework="np") as f:
        want = {k: f.get_tensor(k) for k in plain}
    for k, (dtype, shape, data) in raw.items():
        # bf16/fp8 (ml_dtypes arrays, which safetensors.numpy does not load): the file's bytes.
        assert same_np(got[k], want[k]) if k in plain else (got[k].shape == shape and got[k].tobytes() == data), k


@pytest.mark.parametrize("path", FILES, ids=[os.path.basename(f) for f in FILES])
def test_torch_load_equals_safetensors(path, archives):
    need("torch")
    st = need("safetensors.torch")
    import brevis.torch as bpt

    got, want = bpt.load_file(archives[path], device="cpu"), st.load_file(path)
    assert sorted(got) == sorted(want)
    for k in want:
        assert same_pt(got[k], want[k]), k


def test_safe_open_decodes_one_tensor_of_whisper(archives):
    path = next((f for f in FILES if "whisper-base" in os.path.basename(f)), None)
    if path is None:
        skip_or_fail("whisper-base is not in the corpus")
    st = need("safetensors.numpy")
    t0 = time.perf_counter()
    full = bnp.load_file(archives[path])
    t_full = time.perf_counter() - t0
    total = sum(a.nbytes for a in full.values())
    name = min(full, key=lambda k: abs(full[k].nbytes - total / 200))  # about 0.5% of the model
    t0 = time.perf_counter()
    with brevis.safe_open(archives[path], framework="np") as f:  # the archive is memory-mapped
        t_open = time.perf_counter() - t0
        one = f.get_tensor(name)
    t_one = time.perf_counter() - t0
    with st.safe_open(path, framework="np") as f:
        assert same_np(one, f.get_tensor(name))
    print(f"\nwhisper-base: safe_open + get_tensor({name!r}, {one.nbytes} bytes) + close {t_one * 1e3:.2f} ms "
          f"(open {t_open * 1e3:.2f} ms); load_file ({len(full)} tensors, {total / 1e6:.1f} MB) {t_full * 1e3:.1f} ms")
    # Decoding every tensor costs about the full load; opening and one tensor of 0.5% far less.
    assert t_one < t_full / 10, (t_one, t_full)
