#!/usr/bin/env python3
"""Where the `cold` figure of ../shared/corpus/speed_peers.py goes: decoding into fresh memory (a
private anonymous mapping made before the clock starts, as there) against decoding into a buffer
touched once, and the same two for a plain copy of the original bytes (memmove, with the same
huge-page advice Brevis gives its output), so that what fresh memory costs anyone who writes it
is told apart from what it costs the decoder. Fresh memory is measured twice, alternating in
one process:

- `quiet`: as the kernel hands it out to a process that has not just freed memory;
- `after churn`: just after the process has zero-filled and freed four times as much (as
  speed_peers.py's rounds do between its timings: compression, ZipNN, zstd). On a virtual
  machine, whether a page is still backed by the host, and whether a huge page is at hand,
  depend on what was freed last (a balloon device with `free page reporting` gives the host
  back free blocks of 2 MiB and more a few seconds after they are freed).

Calls libbrevis's C ABI with ctypes (default options, all threads); medians of --rounds (7).
Usage: scripts/decode_breakdown.py [--rounds N] FILE... (from the project root, after
`cargo build --release`)."""
import ctypes, mmap, os, statistics, sys, time
from ctypes import POINTER, byref, c_char, c_char_p, c_size_t, c_void_p

lib = ctypes.CDLL(os.path.join("target", "release", "libbrevis.so"))
lib.brevis_compress_bound.restype = c_size_t
lib.brevis_compress_bound.argtypes = [c_size_t]
lib.brevis_compress.argtypes = [c_char_p, c_size_t, c_void_p, c_size_t, c_void_p, POINTER(c_size_t)]
lib.brevis_decompress.argtypes = [c_char_p, c_size_t, c_void_p, c_size_t, POINTER(c_size_t)]
libc = ctypes.CDLL(None, use_errno=True)
libc.madvise.argtypes = [c_void_p, c_size_t, ctypes.c_int]
MADV_HUGEPAGE, HUGE = 14, 2 << 20

args = sys.argv[1:]
rounds = 7
if args[:1] == ["--rounds"]:
    rounds, args = int(args[1]), args[2:]


def fresh(n):
    """An untouched private anonymous mapping of n bytes and its address."""
    m = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    return m, ctypes.addressof(c_char.from_buffer(m))


def churn(n):
    """Zero-fills n bytes of fresh memory and frees it."""
    m, a = fresh(n)
    ctypes.memset(a, 1, n)
    m.close()


def copy_into(dst, src, n):
    """memmove with the huge-page advice Brevis gives its output (work::advise_huge_pages)."""
    lo, hi = (dst + HUGE - 1) // HUGE * HUGE, (dst + n) // HUGE * HUGE
    if n >= 4 * HUGE and hi > lo:
        libc.madvise(lo, hi - lo, MADV_HUGEPAGE)
    ctypes.memmove(dst, src, n)


def ms(v):
    return statistics.median(v) * 1e3


for path in args:
    data = open(path, "rb").read()
    n = len(data)
    cap = lib.brevis_compress_bound(n)
    out, m = bytearray(cap), c_size_t()
    assert lib.brevis_compress(data, n, (c_char * cap).from_buffer(out), cap, None, byref(m)) == 0
    arc = bytes(out[: m.value])
    del out
    keep = (c_char * n).from_buffer(bytearray(data))
    src = ctypes.addressof(keep)
    warm_buf = bytearray(b"\x01") * n
    warm = ctypes.addressof((c_char * n).from_buffer(warm_buf))
    T = {k: [] for k in ("dw", "cw", "d", "c", "db", "cb")}

    def timed(key, fn):
        t = time.perf_counter()
        fn()
        T[key].append(time.perf_counter() - t)

    def decode(at):
        assert lib.brevis_decompress(arc, len(arc), at, n, byref(m)) == 0

    for _ in range(rounds):
        timed("dw", lambda: decode(warm))
        timed("cw", lambda: ctypes.memmove(warm, src, n))
        for churned in (False, True):
            suffix = "b" if churned else ""
            if churned:
                churn(4 * n)
            f, a = fresh(n)
            timed("d" + suffix, lambda: decode(a))
            assert ctypes.string_at(a, n) == data, "round trip differs"
            f.close()
            if churned:
                churn(4 * n)
            f, a = fresh(n)
            timed("c" + suffix, lambda: copy_into(a, src, n))
            f.close()
    dw, cw = ms(T["dw"]), ms(T["cw"])
    print(f"{os.path.basename(path)} ({n / 1e6:.1f} MB), medians of {rounds} in ms:")
    for what, k, w in (("decode", "d", dw), ("memmove", "c", cw)):
        q, c = ms(T[k]), ms(T[k + "b"])
        print(f"  {what}: warm {w:.1f}; cold, quiet {q:.1f} ({w / q:.2f}x warm, {q - w:+.1f} ms); "
              f"cold, after churn {c:.1f} ({w / c:.2f}x warm, {c - w:+.1f} ms)")
