"""brevis.decoded_path: a path to an archive's original, for code that opens files by path
(llama_cpp.Llama(model_path=...), safetensors.safe_open, transformers' from_pretrained, vLLM).

An archive is decoded into a sealed anonymous in-memory file (Linux memfd_create), never to disk,
and the path is /proc/self/fd/N of it: any code of this process opens or maps it as the original.
A folder made by `brevis compress -r` becomes a private temporary folder with the same tree, each
NAME.brv a link NAME -> /proc/self/fd/N of its decoded bytes and every other file a link to
itself; archives of a family (made against another file of the folder) are decoded after it,
against it. Everything is closed and removed when the `with` block ends. Linux only.
"""

import contextlib
import ctypes
import fcntl
import os
import shutil
import tempfile

from . import _Options, _c, _check, _sig, _size, archive_identity

_MAGIC = b"\x89BRV\r\n\x1a\n"
_memfd = _sig("brevis_decompress_file_to_memfd", _c, ctypes.c_char_p, ctypes.c_void_p, ctypes.POINTER(_c))
_reader_open = _sig("brevis_reader_open", _c, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p,
                    ctypes.POINTER(ctypes.c_void_p))
_reader_size = _sig("brevis_reader_size", _c, ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint64))
_reader_read = _sig("brevis_reader_read_at", _c, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_void_p, _size)
_reader_free = _sig("brevis_reader_free", None, ctypes.c_void_p)

# A bounded window for decoding an archive made against a reference into a memfd.
_WINDOW = 16 << 20


def _is_archive(path):
    try:
        with open(path, "rb") as f:
            return f.read(8) == _MAGIC
    except OSError:
        return False


def _decode_to_memfd(path, reference, memory_limit):
    """A descriptor of a sealed memfd holding the original of the archive at `path` (decoded
    against the file `reference` when given)."""
    what = f"decoded_path({os.fspath(path)!r})"
    with _Options({"memory_limit": memory_limit}) as o:
        if reference is None:
            fd = _c(-1)
            _check(_memfd(os.fsencode(path), o, ctypes.byref(fd)), what)
            return fd.value
        r = ctypes.c_void_p()
        _check(_reader_open(os.fsencode(path), os.fsencode(reference), o, ctypes.byref(r)), what)
    fd = None
    try:
        size = ctypes.c_uint64()
        _check(_reader_size(r, ctypes.byref(size)), what)
        fd = os.memfd_create("brevis:" + os.path.basename(os.fspath(path)).removesuffix(".brv"),
                             os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        buf = ctypes.create_string_buffer(min(size.value, _WINDOW) or 1)
        view = memoryview(buf)
        at = 0
        while at < size.value:
            n = min(_WINDOW, size.value - at)
            _check(_reader_read(r, at, buf, n), what)
            done = 0
            while done < n:
                done += os.pwrite(fd, view[done:n], at + done)
            at += n
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
                    | fcntl.F_SEAL_SEAL)
        return fd
    except BaseException:
        if fd is not None:
            os.close(fd)
        raise
    finally:
        _reader_free(r)


def _folder(root, tmp, reference, memory_limit, fds):
    """Fills `tmp` with the tree of `root` (see the module's documentation)."""
    archives = []
    for here, dirs, files in os.walk(root):
        rel = os.path.relpath(here, root)
        os.makedirs(os.path.join(tmp, rel), exist_ok=True)
        for name in files:
            src = os.path.join(here, name)
            if name.endswith(".brv") and _is_archive(src):
                archives.append((src, os.path.join(tmp, rel, name[: -len(".brv")])))
            else:
                os.symlink(os.path.realpath(src), os.path.join(tmp, rel, name))
    made = {}  # original identity -> path of its decoded bytes
    stuck = False
    while archives:
        later = []
        for src, dst in archives:
            _, ref = archive_identity(src)
            against = made.get(ref) if ref else None
            if ref and against is None:
                if not (stuck and reference is not None):
                    later.append((src, dst))
                    continue
                against = reference
            fd = _decode_to_memfd(src, against, memory_limit)
            fds.append(fd)
            made[archive_identity(src)[0]] = f"/proc/self/fd/{fd}"
            os.symlink(f"/proc/self/fd/{fd}", dst)
        if len(later) == len(archives):
            if stuck or reference is None:
                raise ValueError(f"decoded_path: {later[0][0]} was made against a file that no archive of "
                                 f"{os.fspath(root)!r} restores (give it as reference=)")
            stuck = True
        archives = later


@contextlib.contextmanager
def decoded_path(archive, *, reference=None, memory_limit=None):
    """Yields a path to the original of `archive` (a .brv file, or a folder made by
    `brevis compress -r`) for code that opens files by path; see the module's documentation.
    `reference`: the file an archive made with `--ref` was made against. Errors of the library
    (a damaged archive, a missing reference) are raised before anything is yielded.

        with brevis.decoded_path("model.gguf.brv") as path:
            llm = llama_cpp.Llama(model_path=path)
        with brevis.decoded_path("model-brv/") as folder:
            model = transformers.AutoModel.from_pretrained(folder)
    """
    if not hasattr(os, "memfd_create"):
        raise NotImplementedError("brevis.decoded_path needs Linux (memfd_create and /proc/self/fd)")
    fds = []
    tmp = None
    try:
        if os.path.isdir(archive):
            tmp = tempfile.mkdtemp(prefix="brevis-")
            _folder(archive, tmp, reference, memory_limit, fds)
            yield tmp
        else:
            fds.append(_decode_to_memfd(archive, reference, memory_limit))
            yield f"/proc/self/fd/{fds[0]}"
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        for fd in fds:
            os.close(fd)
