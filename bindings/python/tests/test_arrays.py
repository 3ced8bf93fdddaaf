"""brevis.numpy, brevis.torch, safe_open and load_folder against the safetensors package."""

import json
import os
import struct

import numpy as np
import pytest

import brevis
import brevis.numpy as bnp
from conftest import CORPUS, FIXTURE, ROOT, need, read, skip_or_fail


def same_np(a, b):
    """Bit-for-bit equality of two numpy arrays (dtype, shape and bytes)."""
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def same_pt(a, b):
    import torch

    return a.dtype == b.dtype and a.shape == b.shape and a.device == b.device and \
        torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))


def raw_tensors(data):
    """name -> (dtype, shape, bytes) of safetensors bytes, parsed here without any library."""
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8: 8 + n])
    header.pop("__metadata__", None)
    return {k: (v["dtype"], tuple(v["shape"]), data[8 + n + v["data_offsets"][0]: 8 + n + v["data_offsets"][1]])
            for k, v in header.items()}


def numpy_mix():
    rng = np.random.default_rng(7)
    return {
        "w": rng.standard_normal((3, 5)).astype(np.float32),
        "h": rng.standard_normal(7).astype(np.float16),
        "d": rng.standard_normal((2, 2)),
        "c": (rng.standard_normal(3) + 1j).astype(np.complex64),
        "i64": np.arange(6, dtype=np.int64).reshape(2, 3),
        "u64": np.array(7, dtype=np.uint64),
        "i32": np.arange(-3, 3, dtype=np.int32),
        "u32": np.arange(4, dtype=np.uint32),
        "i16": np.arange(-2, 2, dtype=np.int16),
        "u16": np.arange(5, dtype=np.uint16),
        "i8": np.arange(-4, 4, dtype=np.int8),
        "u8": np.arange(9, dtype=np.uint8).reshape(3, 3),
        "flags": np.array([True, False, True]),
        "empty": np.zeros((2, 0), dtype=np.float32),
        "é.名": np.ones(2, dtype=np.float32),
        "a.same": np.ones(2, dtype=np.float32),
    }


def test_installed_package():
    """With BREVIS_EXPECT_INSTALLED=1 (tests/bindings.rs), brevis is the pip-installed package
    with its own library, not the source tree."""
    if os.environ.get("BREVIS_EXPECT_INSTALLED") != "1":
        pytest.skip("not run against an installed package (tests/bindings.rs sets BREVIS_EXPECT_INSTALLED=1)")
    here = os.path.dirname(os.path.abspath(brevis.__file__))
    assert not here.startswith(os.path.join(ROOT, "bindings")), here
    assert "BREVIS_LIBRARY" not in os.environ
    assert os.path.dirname(os.path.abspath(brevis._lib._name)) == here, brevis._lib._name


def test_numpy_load_file_matches_safetensors(fixture_archive):
    st = need("safetensors.numpy")
    got, want = bnp.load_file(fixture_archive), st.load_file(FIXTURE)
    assert list(got) == sorted(want) and len(got) > 10
    for k in want:
        assert same_np(got[k], want[k]), k


def test_torch_load_file_matches_safetensors(fixture_archive):
    need("torch")
    st = need("safetensors.torch")
    import brevis.torch as bpt

    got, want = bpt.load_file(fixture_archive, device="cpu"), st.load_file(FIXTURE)
    assert sorted(got) == sorted(want)
    for k in want:
        assert same_pt(got[k], want[k]), k


@pytest.mark.parametrize("metadata", [None, {"format": "np"}, {}, {"k\n\"": "v\u2028\x7f\x01é"}])
def test_numpy_save_is_safetensors_bytes(metadata):
    st = need("safetensors.numpy")
    tensors = numpy_mix()
    archive = bnp.save(tensors, metadata=metadata)
    assert brevis.decompress(archive) == st.save(tensors, metadata=metadata)
    back = bnp.load(archive)
    assert sorted(back) == sorted(tensors)
    for k in tensors:
        assert same_np(back[k], tensors[k]), k


def test_torch_save_is_safetensors_bytes():
    torch = need("torch")
    st = need("safetensors.torch")
    import brevis.torch as bpt

    g = torch.Generator().manual_seed(3)
    tensors = {
        "bf": torch.randn(4, 3, generator=g).to(torch.bfloat16),
        "f16": torch.randn(5, generator=g).half(),
        "f32": torch.randn(2, 2, generator=g),
        "f64": torch.randn(3, generator=g).double(),
        "e5m2": torch.randn(6, generator=g).to(torch.float8_e5m2),
        "e4m3": torch.randn(6, generator=g).to(torch.float8_e4m3fn),
        "b": torch.tensor([True, False]),
        "i64": torch.arange(4),
        "u8": torch.arange(3, dtype=torch.uint8),
        "scalar": torch.tensor(1.5),
        "t": torch.arange(6, dtype=torch.float32).reshape(2, 3).t(),
    }
    for metadata in [None, {"format": "pt"}]:
        archive = bpt.save(tensors, metadata=metadata)
        contiguous = {k: v.contiguous() for k, v in tensors.items()}
        assert brevis.decompress(archive) == st.save(contiguous, metadata=metadata)
        back = bpt.load(archive)
        for k in tensors:
            assert same_pt(back[k], contiguous[k]), k


def test_bf16_and_fp8_in_numpy_are_ml_dtypes():
    ml_dtypes = need("ml_dtypes")
    bits = np.array([0x3F80, 0xC000, 0x7F80, 0xFFC1, 0x0001], dtype=np.uint16)  # 1, -2, inf, a NaN, tiny
    tensors = {"bf": bits.view(ml_dtypes.bfloat16), "e4m3": np.arange(5, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn)}
    data = brevis.decompress(bnp.save(tensors))
    raw = raw_tensors(data)
    assert raw["bf"] == ("BF16", (5,), bits.tobytes()) and raw["e4m3"][0] == "F8_E4M3"
    back = bnp.load(bnp.save(tensors))
    assert back["bf"].dtype == np.dtype(ml_dtypes.bfloat16)
    assert back["bf"].view(np.uint16).tobytes() == bits.tobytes()
    assert same_np(back["e4m3"], tensors["e4m3"])


def test_strided_and_big_endian_arrays_keep_their_values():
    tensors = {"t": np.arange(12, dtype=np.float32).reshape(3, 4).T, "be": np.arange(5, dtype=">i4")}
    back = bnp.load(bnp.save(tensors))
    assert np.array_equal(back["t"], tensors["t"]) and back["t"].dtype == np.float32
    assert np.array_equal(back["be"], tensors["be"]) and back["be"].dtype == np.dtype("<i4")


def test_save_file_is_atomic(tmp_path):
    path = tmp_path / "m.safetensors.brv"
    bnp.save_file(numpy_mix(), str(path), metadata={"a": "b"})
    first = path.read_bytes()
    with pytest.raises(ValueError):
        bnp.save_file({"x": np.array(["text"], dtype=object)}, str(path))
    assert path.read_bytes() == first and sorted(os.listdir(tmp_path)) == ["m.safetensors.brv"]
    with brevis.safe_open(str(path)) as f:
        assert f.metadata() == {"a": "b"}
    with pytest.raises(TypeError):
        bnp.save({"x": np.zeros(1)}, metadata={"a": 1})


def test_safe_open_decodes_one_tensor(fixture_archive):
    st = need("safetensors")
    with st.safe_open(FIXTURE, framework="np") as f:
        want_keys, want_meta = list(f.keys()), f.metadata()
        name = want_keys[len(want_keys) // 2]
        want = f.get_tensor(name)
    with brevis.safe_open(fixture_archive, framework="np") as f:
        assert f.keys() == want_keys and f.metadata() == want_meta
        assert same_np(f.get_tensor(name), want)
        with pytest.raises(KeyError):
            f.get_tensor("no such tensor")
    with pytest.raises(ValueError):
        brevis.safe_open(fixture_archive, framework="jax")


def test_not_an_archive_is_a_clear_error(tmp_path, fixture_archive):
    bad = tmp_path / "bad.brv"
    bad.write_bytes(read(fixture_archive)[:-100])  # truncated
    with pytest.raises(brevis.CorruptArchiveError):
        bnp.load_file(str(bad))
    bad.write_bytes(b"hello")
    with pytest.raises(ValueError):
        bnp.load_file(str(bad))


def split_fixture(fixture_bytes, parts):
    """The fixture's tensors cut into `parts` dicts of numpy arrays (safetensors' order)."""
    st = need("safetensors.numpy")
    tensors = st.load(fixture_bytes)
    names = sorted(tensors)
    return [{k: tensors[k] for k in names[i::parts]} for i in range(parts)], tensors


def test_load_folder(tmp_path, fixture_bytes):
    st = need("safetensors.numpy")
    shards, whole = split_fixture(fixture_bytes, 3)
    (tmp_path / "sub").mkdir()
    bnp.save_file(shards[0], str(tmp_path / "model-00001-of-00003.safetensors.brv"))
    bnp.save_file(shards[1], str(tmp_path / "sub" / "model-00002-of-00003.safetensors.brv"))
    st.save_file(shards[2], str(tmp_path / "model-00003-of-00003.safetensors"))  # a plain file is read too
    st.save_file(shards[0], str(tmp_path / "model-00001-of-00003.safetensors"))  # beside its archive: skipped
    (tmp_path / "config.json.brv").write_bytes(brevis.compress(b'{"model_type": "x"}'))
    got = brevis.load_folder(str(tmp_path))
    assert sorted(got) == sorted(whole)
    for k in whole:
        assert same_np(got[k], whole[k]), k
    st.save_file(shards[1], str(tmp_path / "copy.safetensors"))
    with pytest.raises(ValueError, match="is in both"):
        brevis.load_folder(str(tmp_path))
    with pytest.raises(NotADirectoryError):
        brevis.load_folder(str(tmp_path / "config.json.brv"))


def test_load_folder_torch(tmp_path, fixture_bytes):
    need("torch")
    st = need("safetensors.torch")
    shards, _ = split_fixture(fixture_bytes, 2)
    for i, s in enumerate(shards):
        bnp.save_file(s, str(tmp_path / f"m-{i}.safetensors.brv"))
    got = brevis.load_folder(str(tmp_path), framework="pt")
    want = st.load(fixture_bytes)
    assert sorted(got) == sorted(want)
    for k in want:
        assert same_pt(got[k], want[k]), k


def gguf_files():
    folder = os.path.join(CORPUS, "gguf")
    return sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".gguf")) \
        if os.path.isdir(folder) else []


def test_gguf_tensors_and_raw_blocks(tmp_path):
    """Archives of GGUF files: float tensors as arrays, quant types as uint8 rows of raw blocks,
    both the bytes of the GGUF file at the tensor's offset."""
    files = [f for f in gguf_files() if os.path.basename(f) in ("minilm_q4_0.gguf", "minilm_q8_0.gguf")]
    if not files:
        skip_or_fail(f"no GGUF files of the corpus under {CORPUS}/gguf (.ci/run writes them)")
    for path in files:
        original = read(path)
        archive = brevis.compress(original, threads=2)
        got = bnp.load(archive)
        with brevis.Archive(archive) as a:
            infos = [a.info(i) for i in range(len(a)) if a.info(i).name]
        quant = [t for t in infos if t.dtype.startswith("Q")]
        assert quant and len(got) == len(infos)
        for t in infos:
            arr = got[t.name]
            assert arr.tobytes() == original[t.offset: t.offset + t.nbytes], t.name
            if t.dtype.startswith("Q"):
                assert arr.dtype == np.uint8 and arr.shape[:-1] == t.shape[:-1], (t, arr.shape)
            else:
                assert arr.shape == t.shape and arr.dtype.itemsize * arr.size == t.nbytes


def test_archive_reads_a_memory_map_in_place(fixture_archive, fixture_bytes):
    import mmap

    want = raw_tensors(fixture_bytes)
    with open(fixture_archive, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    with brevis.Archive(mm) as a:
        name = next(iter(a))
        assert a[name] == want[name][2]
    mm.close()  # the archive let go of the map: no BufferError
