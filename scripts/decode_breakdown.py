#!/usr/bin/env python3
"""Where the in-process decompression time of ../shared/corpus/speed_peers.py goes: allocating the
output (`bytearray(n)`, which zero-fills fresh pages inside the timed call) against decoding into
a buffer that is already there; and, as a C loader does, decoding into fresh memory from
`malloc(n)` that nothing has touched (its first-touch faults in the decode, under Brevis's
huge-page advice). Calls libbrevis's C ABI with ctypes, default options, medians of 7.
Usage: scripts/decode_breakdown.py FILE... (from the project root, after `cargo build --release`)."""
import ctypes, os, statistics, sys, time
from ctypes import POINTER, byref, c_char, c_char_p, c_size_t, c_void_p

lib = ctypes.CDLL(os.path.join("target", "release", "libbrevis.so"))
lib.brevis_compress_bound.restype = c_size_t
lib.brevis_compress_bound.argtypes = [c_size_t]
lib.brevis_compress.argtypes = [c_char_p, c_size_t, c_void_p, c_size_t, c_void_p, POINTER(c_size_t)]
lib.brevis_decompress.argtypes = [c_char_p, c_size_t, c_void_p, c_size_t, POINTER(c_size_t)]
libc = ctypes.CDLL(None)
libc.malloc.restype = c_void_p
libc.malloc.argtypes = [c_size_t]
libc.free.argtypes = [c_void_p]


def median_ms(v):
    return statistics.median(v) * 1e3


for path in sys.argv[1:]:
    data = open(path, "rb").read()
    n = len(data)
    cap = lib.brevis_compress_bound(n)
    out, m = bytearray(cap), c_size_t()
    assert lib.brevis_compress(data, n, (c_char * cap).from_buffer(out), cap, None, byref(m)) == 0
    arc = bytes(out[: m.value])
    del out
    alloc, warm, both, fresh = [], [], [], []
    # First, before Python's zero-filled buffers have broken up the free memory into small pages.
    for _ in range(7):
        p = libc.malloc(n)
        t = time.perf_counter()
        assert lib.brevis_decompress(arc, len(arc), p, n, byref(m)) == 0
        fresh.append(time.perf_counter() - t)
        assert ctypes.string_at(p, n) == data, "round trip differs"
        libc.free(p)
    buf = bytearray(n)
    for _ in range(7):
        t = time.perf_counter()
        b = bytearray(n)
        alloc.append(time.perf_counter() - t)
        del b
        t = time.perf_counter()
        assert lib.brevis_decompress(arc, len(arc), (c_char * n).from_buffer(buf), n, byref(m)) == 0
        warm.append(time.perf_counter() - t)
        t = time.perf_counter()
        b = bytearray(n)
        assert lib.brevis_decompress(arc, len(arc), (c_char * n).from_buffer(b), n, byref(m)) == 0
        both.append(time.perf_counter() - t)
        assert b == data, "round trip differs"
        del b
    print(
        f"{os.path.basename(path)}: bytearray({n}) {median_ms(alloc):.1f} ms, decode into an existing "
        f"buffer {median_ms(warm):.1f} ms ({n / statistics.median(warm) / 1e6:.0f} MB/s), both {median_ms(both):.1f} ms; "
        f"into fresh malloc(n) {median_ms(fresh):.1f} ms ({statistics.median(warm) / statistics.median(fresh):.2f}x the "
        f"existing buffer's speed)"
    )
