"""Brevis for Python: lossless compression of safetensors checkpoints.

A thin ctypes layer over the C library (libbrevis.so); no dependency beyond the standard library.
Errors of the library are raised as `BrevisError` subclasses (which also derive from the matching
built-in exception: ValueError, KeyError, OSError).

    import brevis
    archive = brevis.compress(open("model.safetensors", "rb").read(), threads=4)
    with brevis.Archive(archive) as a:
        weight = a["encoder.layer.0.attention.self.query.weight"]   # bytes of one tensor
    original = brevis.decompress(archive)
    delta = brevis.compress_with_ref(finetuned, base)      # against the base checkpoint
    assert brevis.decompress_with_ref(delta, base) == finetuned

Installed with `pip install ./bindings/python`, the package carries its own libbrevis.so. The
library is found through $BREVIS_LIBRARY (a path to libbrevis.so), else the one inside the
package, else the system's search path (ctypes.util.find_library), else the repository's
target/release/ (running from a checkout).

Arrays: `brevis.numpy` and `brevis.torch` mirror `safetensors.numpy` / `safetensors.torch`
(load_file, save_file, load, save); `brevis.safe_open(path, framework="np"|"pt")` decodes one
tensor at a time; `brevis.load_folder(path)` loads a whole folder of archives.

Paths: `with brevis.decoded_path("model.gguf.brv") as path:` gives code that opens files by path
(llama_cpp, safetensors.safe_open, transformers, vLLM) the original, decoded into memory (Linux).
"""

import ctypes
import ctypes.util
import mmap
import os
from collections import namedtuple

__all__ = [
    "compress", "decompress", "decompressed_size", "compress_bound", "compress_file", "decompress_file",
    "compress_with_ref", "decompress_with_ref", "compress_file_with_ref", "decompress_file_with_ref",
    "family_references", "archive_identity",
    "version", "Archive", "TensorInfo", "BrevisError", "InvalidArgumentError", "BufferTooSmallError",
    "CorruptArchiveError", "UnsupportedArchiveError", "ChecksumError", "LimitError", "BrevisIOError",
    "TensorNotFoundError", "InternalError", "safe_open", "load_folder", "decoded_path",
]


def _load():
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [
        os.environ.get("BREVIS_LIBRARY"),
        os.path.join(here, "libbrevis.so"),
        ctypes.util.find_library("brevis"),
        os.path.join(here, "..", "..", "..", "target", "release", "libbrevis.so"),
    ]
    for path in candidates:
        if path and (os.path.isfile(path) or not os.path.isabs(path)):
            return ctypes.CDLL(path)
    raise ImportError("libbrevis.so not found: install the package (pip install ./bindings/python), "
                      "set BREVIS_LIBRARY, or run `cargo build --release` in the repository")


_lib = _load()
_size = ctypes.c_size_t
_u8p = ctypes.c_char_p  # bytes are passed without a copy
_outp = ctypes.POINTER(ctypes.c_char)


class _TensorInfo(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_void_p), ("name_len", _size), ("dtype", ctypes.c_char_p), ("ndim", _size),
        ("shape", ctypes.POINTER(ctypes.c_uint64)), ("nbytes", ctypes.c_uint64), ("offset", ctypes.c_uint64),
        ("compressed_bytes", ctypes.c_uint64),
    ]


def _sig(name, restype, *argtypes):
    f = getattr(_lib, name)
    f.restype, f.argtypes = restype, list(argtypes)
    return f


_c = ctypes.c_int
_error_string = _sig("brevis_error_string", ctypes.c_char_p, _c)
_version = _sig("brevis_version", ctypes.c_char_p)
_bound = _sig("brevis_compress_bound", _size, _size)
_compress = _sig("brevis_compress", _c, _u8p, _size, _outp, _size, ctypes.c_void_p, ctypes.POINTER(_size))
_dsize = _sig("brevis_decompressed_size", _c, _u8p, _size, ctypes.POINTER(ctypes.c_uint64))
_decompress_c = _sig(
    "brevis_decompress_with_options", _c, _u8p, _size, _outp, _size, ctypes.c_void_p, ctypes.POINTER(_size))
_compress_with_ref = _sig(
    "brevis_compress_with_ref", _c, _u8p, _size, _u8p, _size, _outp, _size, ctypes.c_void_p, ctypes.POINTER(_size))
_decompress_with_ref = _sig(
    "brevis_decompress_with_ref_and_options", _c, _u8p, _size, _u8p, _size, _outp, _size, ctypes.c_void_p,
    ctypes.POINTER(_size))
_compress_file = _sig("brevis_compress_file", _c, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p)
_decompress_file = _sig("brevis_decompress_file", _c, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p)
_compress_file_ref = _sig(
    "brevis_compress_file_with_ref", _c, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p)
_decompress_file_ref = _sig(
    "brevis_decompress_file_with_ref", _c, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p)


class _FileIdentity(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint64), ("hash", ctypes.c_uint64)]


_family = _sig("brevis_family_references", _c, ctypes.POINTER(ctypes.c_char_p), _size,
               ctypes.POINTER(ctypes.c_int64), ctypes.c_void_p)
_identity = _sig("brevis_archive_file_identity", _c, ctypes.c_char_p, ctypes.POINTER(_FileIdentity),
                 ctypes.POINTER(_FileIdentity), ctypes.c_void_p)
_options_new = _sig("brevis_options_new", ctypes.c_void_p)
_options_set = _sig("brevis_options_set", _c, ctypes.c_void_p, _c, ctypes.c_int64)
_options_free = _sig("brevis_options_free", None, ctypes.c_void_p)
_open = _sig("brevis_archive_open_with_options", _c, _u8p, _size, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p))
_count = _sig("brevis_archive_tensor_count", _size, ctypes.c_void_p)
_info = _sig("brevis_archive_tensor_info", _c, ctypes.c_void_p, _size, ctypes.POINTER(_TensorInfo))
_find = _sig("brevis_archive_find", _c, ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(_size))
_decode = _sig("brevis_archive_decode_tensor", _c, ctypes.c_void_p, _size, _outp, _size)
_free = _sig("brevis_archive_free", None, ctypes.c_void_p)


class BrevisError(Exception):
    """An error of the Brevis library; `code` is its BREVIS_ERROR_* value (see brevis.h)."""

    def __init__(self, code, what=""):
        self.code = code
        message = _error_string(code).decode()
        super().__init__(f"{what}: {message}" if what else message)


class InvalidArgumentError(BrevisError, ValueError):
    """BREVIS_ERROR_INVALID_ARGUMENT (and BREVIS_ERROR_NULL_POINTER)."""


class BufferTooSmallError(BrevisError):
    """BREVIS_ERROR_DST_TOO_SMALL."""


class CorruptArchiveError(BrevisError, ValueError):
    """BREVIS_ERROR_CORRUPT: not an archive, or truncated or damaged."""


class UnsupportedArchiveError(BrevisError, ValueError):
    """BREVIS_ERROR_UNSUPPORTED: written by a newer format version."""


class ChecksumError(CorruptArchiveError):
    """BREVIS_ERROR_CHECKSUM."""


class LimitError(BrevisError):
    """BREVIS_ERROR_LIMIT: the memory limit was exceeded."""


class BrevisIOError(BrevisError, OSError):
    """BREVIS_ERROR_IO (file helpers)."""


class TensorNotFoundError(BrevisError, KeyError):
    """BREVIS_ERROR_NOT_FOUND."""

    def __str__(self):
        return Exception.__str__(self)


class InternalError(BrevisError):
    """BREVIS_ERROR_PANIC: a bug in the library, caught before it could crash the process."""


_ERRORS = {
    -1: InvalidArgumentError, -2: InvalidArgumentError, -3: BufferTooSmallError, -4: CorruptArchiveError,
    -5: UnsupportedArchiveError, -6: ChecksumError, -7: LimitError, -8: BrevisIOError, -9: TensorNotFoundError,
    -10: InternalError,
}


def _check(code, what=""):
    if code != 0:
        raise _ERRORS.get(code, BrevisError)(code, what)


# brevis_option keys (fixed values).
_KEYS = {"threads": 1, "chunk_bytes": 2, "sample_elems": 3, "memory_limit": 4, "verify": 5, "level": 6}
_LEVELS = {"fast": 1, "default": 2, "max": 3}


class _Options:
    """A brevis_options handle for one call (None when every setting is the default)."""

    def __init__(self, settings):
        self.handle = None
        settings = {k: v for k, v in settings.items() if v is not None}
        for k in settings:
            if k not in _KEYS:
                raise TypeError(f"unknown option {k!r}")
        if settings:
            self.handle = _options_new()
            if not self.handle:
                raise MemoryError("brevis_options_new")
            for k, v in settings.items():
                _check(_options_set(self.handle, _KEYS[k], int(v)), k)

    def __enter__(self):
        return self.handle

    def __exit__(self, *exc):
        _options_free(self.handle)


def _bytes(data):
    return data if isinstance(data, bytes) else bytes(data)


def _in_place(data):
    """What the library reads an archive from: bytes as they are; an mmap.mmap without a copy
    (its pages are read as tensors are decoded; open it with ACCESS_COPY, and keep the file
    unchanged while in use); anything else copied to bytes."""
    if isinstance(data, mmap.mmap) and len(data):
        return (ctypes.c_char * len(data)).from_buffer(data)
    return _bytes(data)


def version():
    """The library's version, "MAJOR.MINOR.PATCH"."""
    return _version().decode()


def compress_bound(n):
    """The largest archive `compress` can produce for `n` bytes of input."""
    return _bound(n)


def _level(level):
    if level is None:
        return None
    if level not in _LEVELS:
        raise ValueError(f"unknown level {level!r} (fast, default or max)")
    return _LEVELS[level]


def compress(data, *, threads=None, chunk_bytes=None, sample_elems=None, level=None):
    """Compresses `data` (any bytes-like object; safetensors gets a program per tensor).
    `level`: "fast" (fastest to decode), "default" or "max" (smallest)."""
    data = _bytes(data)
    dst = ctypes.create_string_buffer(_bound(len(data)))
    n = _size()
    settings = {"threads": threads, "chunk_bytes": chunk_bytes, "sample_elems": sample_elems, "level": _level(level)}
    with _Options(settings) as o:
        _check(_compress(data, len(data), dst, len(dst), o, ctypes.byref(n)), "compress")
    return dst.raw[: n.value]


def compress_with_ref(data, reference, *, threads=None, chunk_bytes=None, sample_elems=None):
    """Compresses `data` against the reference checkpoint `reference` (a safetensors file, or an
    archive of one): tensors that match one of the reference (a fine-tune of its base) are coded
    against it where that is smaller. Decompressing needs the same reference."""
    data, reference = _bytes(data), _bytes(reference)
    dst = ctypes.create_string_buffer(_bound(len(data)))
    n = _size()
    with _Options({"threads": threads, "chunk_bytes": chunk_bytes, "sample_elems": sample_elems}) as o:
        rc = _compress_with_ref(data, len(data), reference, len(reference), dst, len(dst), o, ctypes.byref(n))
        _check(rc, "compress_with_ref")
    return dst.raw[: n.value]


def decompressed_size(archive):
    """The size of the file `archive` decompresses to (reads only its index)."""
    archive = _bytes(archive)
    n = ctypes.c_uint64()
    _check(_dsize(archive, len(archive), ctypes.byref(n)), "decompressed_size")
    return n.value


def _capi(name, restype, *argtypes):
    """A function of CPython's C API with its own prototype (ctypes.pythonapi's shared function
    objects keep the prototypes other code gave them); None elsewhere."""
    try:
        return ctypes.PYFUNCTYPE(restype, *argtypes)((name, ctypes.pythonapi))
    except (AttributeError, OSError):
        return None


_new_bytes = _capi("PyBytes_FromStringAndSize", ctypes.py_object, ctypes.c_void_p, ctypes.c_ssize_t)
_bytes_data = _capi("PyBytes_AsString", ctypes.c_void_p, ctypes.py_object)
_new_bytearray = _capi("PyByteArray_FromStringAndSize", ctypes.py_object, ctypes.c_void_p, ctypes.c_ssize_t)


def _fresh_bytes(size):
    """A new bytes object of `size` bytes whose contents are not initialized yet
    (`PyBytes_FromStringAndSize(NULL, size)`, which the C API makes for its caller to fill) and
    the address of its contents; None where that is not available or size is 0. Decoding into it
    writes every byte: Python neither zero-fills the fresh pages first (single-threaded, about
    as long as the decoding) nor copies the result afterwards."""
    if size == 0 or _new_bytes is None or _bytes_data is None:
        return None
    b = _new_bytes(None, size)
    return b, ctypes.cast(_bytes_data(b), _outp)


def _fresh_bytearray(size):
    """A bytearray of `size` bytes whose contents are not initialized yet
    (`PyByteArray_FromStringAndSize(NULL, size)`), for a decoder that writes every byte."""
    if size > 0 and _new_bytearray is not None:
        return _new_bytearray(None, size)
    return bytearray(size)


def _decompress(what, archive, settings, call):
    """Sizes the output of `archive`, checks it against the memory limit, and lets `call(dst, size,
    options, n)` decode into it: a new bytes object, never seen by anyone before it is complete."""
    size = decompressed_size(archive)
    if settings.get("memory_limit") is not None and size > settings["memory_limit"]:
        raise LimitError(-7, what)
    fresh = _fresh_bytes(size)
    out, dst = fresh if fresh is not None else (None, ctypes.create_string_buffer(max(size, 1)))
    n = _size()
    with _Options(settings) as o:
        _check(call(dst, size, o, ctypes.byref(n)), what)
    if out is None:
        return dst.raw[: n.value]
    return out if n.value == size else out[: n.value]


def decompress(archive, *, threads=None, verify=None, memory_limit=None):
    """Decompresses a whole archive back to the original bytes."""
    archive = _bytes(archive)
    settings = {"threads": threads, "verify": verify, "memory_limit": memory_limit}
    return _decompress("decompress", archive, settings, lambda dst, size, o, n: _decompress_c(
        archive, len(archive), dst, size, o, n))


def decompress_with_ref(archive, reference, *, threads=None, verify=None, memory_limit=None):
    """Decompresses an archive made by `compress_with_ref`, given the same reference; a missing or
    different reference raises InvalidArgumentError."""
    archive, reference = _bytes(archive), _bytes(reference)
    settings = {"threads": threads, "verify": verify, "memory_limit": memory_limit}
    return _decompress("decompress_with_ref", archive, settings, lambda dst, size, o, n: _decompress_with_ref(
        archive, len(archive), reference, len(reference), dst, size, o, n))


def compress_file(src, dst, *, threads=None, chunk_bytes=None, sample_elems=None, level=None):
    """Compresses the file `src` into the archive `dst` (replaced atomically); `level` as in compress."""
    settings = {"threads": threads, "chunk_bytes": chunk_bytes, "sample_elems": sample_elems, "level": _level(level)}
    with _Options(settings) as o:
        _check(_compress_file(os.fsencode(src), os.fsencode(dst), o), f"compress_file({src!r})")


def decompress_file(src, dst, *, threads=None, verify=None, memory_limit=None):
    """Decompresses the archive `src` into the file `dst` (replaced atomically)."""
    with _Options({"threads": threads, "verify": verify, "memory_limit": memory_limit}) as o:
        _check(_decompress_file(os.fsencode(src), os.fsencode(dst), o), f"decompress_file({src!r})")


def compress_file_with_ref(src, reference, dst, *, threads=None, chunk_bytes=None, sample_elems=None,
                           level=None, memory_limit=None):
    """Compresses the file `src` against the file `reference` (safetensors or GGUF, or an archive
    of one) into the archive `dst` (replaced atomically); both are read in windows, within
    `memory_limit`. Decoding needs the same reference (decompress_file_with_ref)."""
    settings = {"threads": threads, "chunk_bytes": chunk_bytes, "sample_elems": sample_elems, "level": _level(level),
                "memory_limit": memory_limit}
    with _Options(settings) as o:
        rc = _compress_file_ref(os.fsencode(src), os.fsencode(reference), os.fsencode(dst), o)
        _check(rc, f"compress_file_with_ref({src!r}, {reference!r})")


def decompress_file_with_ref(src, reference, dst, *, threads=None, verify=None, memory_limit=None):
    """Decompresses the archive `src`, made against the file `reference`, into the file `dst`
    (replaced atomically); a missing or different reference raises InvalidArgumentError."""
    with _Options({"threads": threads, "verify": verify, "memory_limit": memory_limit}) as o:
        rc = _decompress_file_ref(os.fsencode(src), os.fsencode(reference), os.fsencode(dst), o)
        _check(rc, f"decompress_file_with_ref({src!r}, {reference!r})")


def family_references(paths, *, threads=None, memory_limit=None):
    """For each of `paths` (the files of one model family), the index of the path it is best coded
    against (compress_file_with_ref), or None for a file coded alone: what `brevis compress -r`
    chooses (no cycles; masters come first)."""
    paths = [os.fsencode(p) for p in paths]
    arr = (ctypes.c_char_p * max(1, len(paths)))(*paths)
    out = (ctypes.c_int64 * max(1, len(paths)))()
    with _Options({"threads": threads, "memory_limit": memory_limit}) as o:
        _check(_family(arr, len(paths), out, o), "family_references")
    return [None if out[i] < 0 else int(out[i]) for i in range(len(paths))]


def archive_identity(path):
    """(original, reference) as the archive at `path` records them: each a (size, xxh3-64) pair of
    a file, reference None when the archive needs none."""
    original, reference = _FileIdentity(), _FileIdentity()
    _check(_identity(os.fsencode(path), ctypes.byref(original), ctypes.byref(reference), None),
           f"archive_identity({path!r})")
    return (original.size, original.hash), ((reference.size, reference.hash) if reference.size else None)


TensorInfo = namedtuple("TensorInfo", "name dtype shape nbytes offset compressed_bytes")


class Archive:
    """Random access to the tensors of an archive, one at a time.

    Holds a reference to `data` (the library reads it in place; an mmap.mmap opened with
    ACCESS_COPY is read without a copy). Use as a context manager, or call close(). Mapping-like: len(a), iter(a) (names), name in a, a[name] -> bytes.
    `memory_limit` bounds the index and the largest tensor it decodes (LimitError above it);
    `threads` > 0 gives it its own pool of that many threads to decode tensors in.
    """

    def __init__(self, data, *, threads=None, memory_limit=None):
        self._handle = None
        self._data = _in_place(data)
        handle = ctypes.c_void_p()
        with _Options({"threads": threads, "memory_limit": memory_limit}) as o:
            _check(_open(self._data, len(self._data), o, ctypes.byref(handle)), "Archive")
        self._handle = handle.value
        self._infos = [self._load_info(i) for i in range(_count(self._handle))]

    def _load_info(self, i):
        t = _TensorInfo()
        _check(_info(self._handle, i, ctypes.byref(t)), "tensor_info")
        name = ctypes.string_at(t.name, t.name_len).decode("utf-8", "surrogateescape")
        return TensorInfo(name, t.dtype.decode(), tuple(t.shape[: t.ndim]), t.nbytes, t.offset, t.compressed_bytes)

    def close(self):
        if self._handle:
            _free(self._handle)
            self._handle = None
        self._data = None  # lets a memory map given to the constructor be closed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()

    def _live(self):
        if not self._handle:
            raise ValueError("the archive is closed")
        return self._handle

    def __len__(self):
        return len(self._infos)

    def __iter__(self):
        return (t.name for t in self._infos)

    def __contains__(self, name):
        return any(t.name == name for t in self._infos)

    def __getitem__(self, name):
        return self.read(name)

    def info(self, key):
        """The TensorInfo of tensor `key` (a name or an index)."""
        return self._infos[self.index(key) if isinstance(key, str) else key]

    def index(self, name):
        """The index of the first tensor named `name`; TensorNotFoundError (a KeyError) if none."""
        i = _size()
        _check(_find(self._live(), name.encode("utf-8", "surrogateescape"), ctypes.byref(i)), repr(name))
        return i.value

    def read_into(self, key, buffer):
        """Decodes tensor `key` (a name or an index) into a writable buffer (bytearray,
        memoryview, numpy array...) of at least its size; returns the number of bytes written."""
        i = self.index(key) if isinstance(key, str) else key
        if not 0 <= i < len(self._infos):
            raise IndexError(i)
        view = memoryview(buffer).cast("B")
        if view.readonly:
            raise TypeError("the buffer is read-only")
        n = self._infos[i].nbytes
        dst = (ctypes.c_char * len(view)).from_buffer(view) if len(view) else None
        _check(_decode(self._live(), i, dst, len(view)), f"tensor {self._infos[i].name!r}")
        return n

    def read(self, key):
        """The bytes of tensor `key` (a name or an index)."""
        i = self.index(key) if isinstance(key, str) else key
        buf = _fresh_bytearray(self._infos[i].nbytes)
        self.read_into(i, buf)
        return bytes(buf)


def safe_open(path, framework="np", device="cpu"):
    """Opens the archive at `path` like `safetensors.safe_open`: keys(), metadata(),
    get_tensor(name) (decodes that tensor only). framework: "np"/"numpy" or "pt"/"torch"."""
    from ._arrays import SafeOpen

    return SafeOpen(path, framework, device)


def decoded_path(archive, *, reference=None, memory_limit=None):
    """A context manager that yields a path to the original of `archive` (a .brv file, or a folder
    made by `brevis compress -r`), decoded into anonymous memory, for code that opens files by path
    (llama_cpp.Llama(model_path=...), safetensors.safe_open, transformers, vLLM); removed when the
    block ends. Linux. See brevis._paths."""
    from ._paths import decoded_path as _decoded_path

    return _decoded_path(archive, reference=reference, memory_limit=memory_limit)


def load_folder(path, framework="np", device="cpu"):
    """Every tensor of a model folder (as written by `brevis compress -r`): the tensors of each
    `*.safetensors.brv` archive and each plain `*.safetensors` file under `path`, as one dict
    name -> array (numpy, or torch with framework="pt"). A name found in two files is an error."""
    from ._arrays import load_folder as _load_folder

    return _load_folder(path, framework, device)
