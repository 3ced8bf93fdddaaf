"""Arrays out of archives and into them, for brevis.numpy, brevis.torch, safe_open and load_folder.

A *source* is an archive (decoded one tensor at a time through the library) or a plain
safetensors file; a *framework* (numpy or torch) turns a tensor's bytes into an array and an array
into bytes. Saving writes the safetensors bytes that the `safetensors` package writes for the same
tensors (its order: dtypes of larger alignment first, then names; its JSON header padded with
spaces to 8 bytes) and compresses them.
"""

import json
import math
import mmap
import os
import struct
import tempfile

from . import Archive, archive_identity, compress, decompress

# safetensors dtype -> (bytes per element, numpy dtype (a "ml_dtypes:NAME" needs ml_dtypes),
# torch dtype attribute).
DTYPES = {
    "BOOL": (1, "bool", "bool"),
    "U8": (1, "uint8", "uint8"),
    "I8": (1, "int8", "int8"),
    "F8_E5M2": (1, "ml_dtypes:float8_e5m2", "float8_e5m2"),
    "F8_E4M3": (1, "ml_dtypes:float8_e4m3fn", "float8_e4m3fn"),
    "I16": (2, "<i2", "int16"),
    "U16": (2, "<u2", "uint16"),
    "F16": (2, "<f2", "float16"),
    "BF16": (2, "ml_dtypes:bfloat16", "bfloat16"),
    "I32": (4, "<i4", "int32"),
    "U32": (4, "<u4", "uint32"),
    "F32": (4, "<f4", "float32"),
    "C64": (8, "<c8", "complex64"),
    "F64": (8, "<f8", "float64"),
    "I64": (8, "<i8", "int64"),
    "U64": (8, "<u8", "uint64"),
}

# The order of the safetensors Dtype enum (ascending alignment); files list larger ones first.
_ORDER = ["BOOL", "F4", "F6_E2M3", "F6_E3M2", "U8", "I8", "F8_E5M2", "F8_E4M3", "F8_E8M0", "I16", "U16",
          "F16", "BF16", "I32", "U32", "F32", "C64", "F64", "I64", "U64"]


def numpy_dtype(name):
    """The numpy dtype of safetensors dtype `name`; bf16 and fp8 come from ml_dtypes."""
    import numpy as np

    spec = DTYPES[name][1]
    if spec.startswith("ml_dtypes:"):
        try:
            import ml_dtypes
        except ImportError as e:
            raise ImportError(f"{name} tensors need the ml_dtypes package for numpy (pip install ml_dtypes), "
                              "or use brevis.torch") from e
        return np.dtype(getattr(ml_dtypes, spec.split(":")[1]))
    return np.dtype(spec)


def raw_shape(dtype, shape, nbytes):
    """The uint8 shape a tensor of a type without array dtype (a GGUF quant type such as Q4_0)
    is given: its rows (the shape less its last dimension) of raw blocks, else one row."""
    rows = math.prod(shape[:-1]) if len(shape) > 1 else 1
    if rows and nbytes % rows == 0:
        return tuple(shape[:-1]) + (nbytes // rows,)
    return (nbytes,)


class Numpy:
    """numpy arrays (bf16/fp8 as ml_dtypes; quant types as uint8 rows of raw blocks)."""

    def __init__(self, device="cpu"):
        import numpy

        if device not in (None, "cpu"):
            raise ValueError(f"numpy arrays live on the cpu, not {device!r}")
        self.np = numpy

    def empty(self, nbytes):
        return self.np.empty(nbytes, self.np.uint8)

    def buffer(self, raw):
        return raw

    def shaped(self, raw, dtype, shape):
        if dtype not in DTYPES:
            return raw.reshape(raw_shape(dtype, shape, raw.size))
        return raw.view(numpy_dtype(dtype)).reshape(shape)

    def spec(self, name, value):
        np = self.np
        a = np.asarray(value)
        if not a.flags.c_contiguous:
            a = np.ascontiguousarray(a)  # (at least one dimension: only for arrays that have some)
        if a.dtype.byteorder == ">":
            a = a.astype(a.dtype.newbyteorder("<"))
        for st, (_, spec, _) in DTYPES.items():
            if (spec.startswith("ml_dtypes:") and a.dtype.name == spec.split(":")[1]) or \
                    (not spec.startswith("ml_dtypes:") and a.dtype == np.dtype(spec)):
                return st, a.shape, a.reshape(-1).view(np.uint8).data
        raise ValueError(f"tensor {name!r}: dtype {a.dtype} has no safetensors type")


class Torch:
    """torch tensors, moved to `device` (quant types as uint8 rows of raw blocks)."""

    def __init__(self, device="cpu"):
        import torch

        self.torch = torch
        self.device = device

    def empty(self, nbytes):
        return self.torch.empty(nbytes, dtype=self.torch.uint8)

    def buffer(self, raw):
        return raw.numpy()

    def shaped(self, raw, dtype, shape):
        if dtype not in DTYPES:
            t = raw.reshape(raw_shape(dtype, shape, raw.numel()))
        else:
            t = raw.view(getattr(self.torch, DTYPES[dtype][2])).reshape(shape)
        return t if self.device in (None, "cpu") else t.to(self.device)

    def spec(self, name, value):
        t = value.detach().to("cpu").contiguous()
        for st, (_, _, attr) in DTYPES.items():
            if getattr(self.torch, attr, None) == t.dtype:
                return st, tuple(t.shape), t.reshape(-1).view(self.torch.uint8).numpy().data
        raise ValueError(f"tensor {name!r}: dtype {t.dtype} has no safetensors type")


def framework(name, device="cpu"):
    if name in ("np", "numpy"):
        return Numpy(device)
    if name in ("pt", "torch", "pytorch"):
        return Torch(device)
    raise ValueError(f"unknown framework {name!r} (np or pt)")


def _header_of(data):
    """The JSON header of safetensors bytes `data` (a dict), and where its tensor data starts."""
    if len(data) < 8:
        raise ValueError("not a safetensors file: shorter than 8 bytes")
    n = struct.unpack("<Q", bytes(data[:8]))[0]
    if n > len(data) - 8:
        raise ValueError("not a safetensors file: its header length is past the end")
    header = json.loads(bytes(data[8: 8 + n]))
    if not isinstance(header, dict):
        raise ValueError("not a safetensors file: its header is not a JSON object")
    return header, 8 + n


class ArchiveSource:
    """The named tensors of an archive (gaps and streams without a name are left out)."""

    def __init__(self, data):
        self.archive = Archive(data)
        self.data = data
        self.entries = {}
        for i in range(len(self.archive)):
            t = self.archive.info(i)
            if t.name and t.name not in self.entries:
                self.entries[t.name] = (i, t.dtype, t.shape, t.nbytes)
        self._meta = False

    def read(self, fw, name):
        i, dtype, shape, nbytes = self.entries[name]
        raw = fw.empty(nbytes)
        if nbytes:
            self.archive.read_into(i, fw.buffer(raw))
        return fw.shaped(raw, dtype, shape)

    def metadata(self):
        """The safetensors `__metadata__` (None without one, or for a file that is not
        safetensors). The library hands out no header alone: this decodes the whole file once."""
        if self._meta is False:
            try:
                header, _ = _header_of(decompress(self.data))
                self._meta = header.get("__metadata__")
            except ValueError:
                self._meta = None
        return self._meta

    def close(self):
        self.archive.close()
        if isinstance(self.data, mmap.mmap):
            self.data.close()


class PlainSource:
    """The tensors of a safetensors file that is not compressed."""

    def __init__(self, data):
        self.data = memoryview(data)
        header, self.start = _header_of(self.data)
        self.meta = header.pop("__metadata__", None)
        self.entries = {}
        for name, t in header.items():
            a, b = t["data_offsets"]
            if not 0 <= a <= b <= len(self.data) - self.start:
                raise ValueError(f"tensor {name!r}: data_offsets {t['data_offsets']} are out of the file")
            self.entries[name] = (a, t["dtype"], tuple(t["shape"]), b - a)

    def read(self, fw, name):
        a, dtype, shape, nbytes = self.entries[name]
        raw = fw.empty(nbytes)
        fw.buffer(raw)[:] = self.data[self.start + a: self.start + a + nbytes]
        return fw.shaped(raw, dtype, shape)

    def metadata(self):
        return self.meta

    def close(self):
        self.data.release()


MAGIC = b"\x89BRV\r\n\x1a\n"


def read_path(path):
    with open(path, "rb") as f:
        return f.read()


def open_path(path):
    """The source of the file at `path`: an archive is memory-mapped (only the pages of the index
    and of the tensors decoded are read), a plain safetensors file read."""
    with open(path, "rb") as f:
        if f.read(8) == MAGIC:
            _, reference = archive_identity(path)
            if reference:
                raise ValueError(
                    f"{path} was made against a reference file ({reference[0]} bytes, xxh3 {reference[1]:016x}), "
                    "the master of its family: restore it with brevis.decompress_file_with_ref (or `brevis "
                    "decompress -r`, `python -m brevis.ray decompress`) to read its tensors")
            return ArchiveSource(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY))
    return PlainSource(read_path(path))


class SafeOpen:
    """`safe_open` of an archive: keys() (sorted, as safetensors), metadata(), get_tensor(name)
    decoding that tensor only, get_tensors()."""

    def __init__(self, path, framework_name="np", device="cpu"):
        self._fw = framework(framework_name, device)
        self._src = open_path(path)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._src.close()

    def keys(self):
        return sorted(self._src.entries)

    def metadata(self):
        return self._src.metadata()

    def get_tensor(self, name):
        if name not in self._src.entries:
            raise KeyError(name)
        return self._src.read(self._fw, name)

    def get_tensors(self):
        return {k: self.get_tensor(k) for k in self.keys()}


def load_bytes(data, framework_name, device="cpu"):
    src = ArchiveSource(data)
    try:
        fw = framework(framework_name, device)
        return {k: src.read(fw, k) for k in sorted(src.entries)}
    finally:
        src.close()


def load_file(path, framework_name, device="cpu"):
    with SafeOpen(path, framework_name, device) as f:
        return f.get_tensors()


def serialize(tensors, metadata, framework_name):
    """The bytes `safetensors.{numpy,torch}.save(tensors, metadata)` returns."""
    fw = framework(framework_name)
    if metadata is not None and not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise TypeError("metadata must map str to str")
    specs = {}
    for name, value in tensors.items():
        if not isinstance(name, str):
            raise TypeError(f"tensor names must be str, not {type(name).__name__}")
        specs[name] = fw.spec(name, value)
    order = sorted(specs, key=lambda n: (-_ORDER.index(specs[n][0]), n.encode("utf-8")))
    header, offset = {}, 0
    if metadata is not None:
        header["__metadata__"] = dict(metadata)
    for name in order:
        dtype, shape, data = specs[name]
        header[name] = {"dtype": dtype, "shape": [int(d) for d in shape], "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * (-len(text) % 8)
    return b"".join([struct.pack("<Q", len(text)), text] + [specs[n][2] for n in order])


def save_bytes(tensors, metadata, framework_name, **options):
    return compress(serialize(tensors, metadata, framework_name), **options)


def write_atomic(path, data):
    """Writes `data` to `path` through a temporary file in the same folder and a rename, so that
    `path` is either its old self or complete."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix="." + os.path.basename(path) + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def save_file(tensors, path, metadata, framework_name, **options):
    write_atomic(path, save_bytes(tensors, metadata, framework_name, **options))


def folder_files(path):
    """The safetensors archives and files of a model folder, in path order: each
    `*.safetensors.brv`, and each `*.safetensors` that has no archive beside it."""
    found = []
    for root, dirs, files in os.walk(path):
        dirs.sort()
        names = set(files)
        for f in sorted(files):
            if f.endswith(".safetensors.brv") or (f.endswith(".safetensors") and f + ".brv" not in names):
                found.append(os.path.join(root, f))
    return found


def load_folder(path, framework_name="np", device="cpu"):
    if not os.path.isdir(path):
        raise NotADirectoryError(path)
    out, where = {}, {}
    for file in folder_files(path):
        for name, value in load_file(file, framework_name, device).items():
            if name in out:
                raise ValueError(f"tensor {name!r} is in both {where[name]} and {file}")
            out[name], where[name] = value, file
    return out
