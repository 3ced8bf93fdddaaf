"""brevis.decoded_path against a library that opens files by path itself: safetensors' safe_open
(its Rust core maps the file), values compared by bits with what it reads from the original. Also
a folder made by `brevis compress -r` (a base and a fine-tune coded against it), an archive made
against a reference, a damaged archive, and the cleanup (descriptors closed, folder removed)."""

import os

import pytest

from conftest import FIXTURE, need, read

import brevis


def tensors_by_path(path):
    """Every tensor safe_open reads from `path`, as raw bytes (bit for bit) with dtype and shape."""
    st = need("safetensors")
    np = need("numpy")
    assert np is not None
    out = {}
    with st.safe_open(path, framework="np") as f:
        for k in f.keys():
            a = f.get_tensor(k)
            out[k] = (str(a.dtype), a.shape, a.tobytes())
    return out


def open_fds():
    return set(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="decoded_path needs Linux")
def test_safe_open_reads_an_archive_by_path(fixture_archive):
    want = tensors_by_path(FIXTURE)
    before = open_fds()
    with brevis.decoded_path(fixture_archive) as path:
        assert path.startswith("/proc/self/fd/")
        assert read(path) == read(FIXTURE)
        assert tensors_by_path(path) == want
    assert open_fds() == before, "a descriptor was left open"


def nudged(data, every=97):
    """A fine-tune of the fixture: low bits of some bytes of its data flipped."""
    b = bytearray(data)
    n = int.from_bytes(b[:8], "little") + 8
    for i in range(n, len(b), every):
        b[i] ^= 1
    return bytes(b)


@pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="decoded_path needs Linux")
def test_a_folder_and_a_reference(tmp_path, fixture_bytes):
    base, tuned = tmp_path / "m" / "base.safetensors", tmp_path / "m" / "sub" / "tuned.safetensors"
    tuned.parent.mkdir(parents=True)
    base.write_bytes(fixture_bytes)
    tuned.write_bytes(nudged(fixture_bytes))
    (tmp_path / "m" / "config.json").write_text('{"layers": 1}\n')
    # The folder as `brevis compress -r` writes it: each file's archive, the fine-tune against the base.
    out = tmp_path / "m.brv"
    (out / "sub").mkdir(parents=True)
    brevis.compress_file(base, out / "base.safetensors.brv")
    brevis.compress_file_with_ref(tuned, base, out / "sub" / "tuned.safetensors.brv")
    brevis.compress_file(tmp_path / "m" / "config.json", out / "config.json.brv")
    with brevis.decoded_path(out) as folder:
        assert sorted(os.listdir(folder)) == ["base.safetensors", "config.json", "sub"]
        assert tensors_by_path(os.path.join(folder, "base.safetensors")) == tensors_by_path(str(base))
        assert tensors_by_path(os.path.join(folder, "sub", "tuned.safetensors")) == tensors_by_path(str(tuned))
        assert read(os.path.join(folder, "config.json")) == read(tmp_path / "m" / "config.json")
    assert not os.path.exists(folder)
    # The fine-tune alone: with its reference, and without it (an error, nothing yielded).
    with brevis.decoded_path(out / "sub" / "tuned.safetensors.brv", reference=base) as path:
        assert read(path) == read(tuned)
    with pytest.raises(brevis.InvalidArgumentError):
        with brevis.decoded_path(out / "sub" / "tuned.safetensors.brv"):
            pytest.fail("yielded without the reference")


@pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="decoded_path needs Linux")
def test_a_damaged_archive_is_an_error(tmp_path, fixture_archive):
    data = bytearray(read(fixture_archive))
    data[len(data) // 2] ^= 0x40
    bad = tmp_path / "bad.brv"
    bad.write_bytes(bytes(data))
    before = open_fds()
    with pytest.raises(brevis.CorruptArchiveError):
        with brevis.decoded_path(bad):
            pytest.fail("yielded a damaged archive")
    assert open_fds() == before
