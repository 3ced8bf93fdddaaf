"""Tests of the Python binding (unittest). Run by tests/bindings.rs, or by hand:
    cargo build --release && cd bindings/python && python3 -m unittest -v

With $BREVIS_TEST_OUT set (tests/bindings.rs sets it), the tests also write what the binding
returned there, for the Rust side to check against the library: fixture.brv (compress),
tensors.json (the Archive's index), tuned.brv and tuned.out (compress_with_ref and
decompress_with_ref of a fine-tuned copy of the fixture against the fixture).
"""

import json
import os
import struct
import tempfile
import unittest

import brevis

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
OUT = os.environ.get("BREVIS_TEST_OUT")
FIXTURE = os.environ.get("BREVIS_FIXTURE", os.path.join(ROOT, "tests", "fixtures", "silero_vad_16k.safetensors"))


def tensors_of(checkpoint):
    n = struct.unpack("<Q", checkpoint[:8])[0]
    header = json.loads(checkpoint[8 : 8 + n])
    header.pop("__metadata__", None)
    return {k: checkpoint[8 + n + v["data_offsets"][0] : 8 + n + v["data_offsets"][1]] for k, v in header.items()}


def nudged(checkpoint):
    """A fine-tuned copy of a checkpoint: the lowest bit of every 7th byte of its data flipped
    (tests/support/tools.rs derives it the same way)."""
    out = bytearray(checkpoint)
    for i in range(8 + struct.unpack("<Q", checkpoint[:8])[0], len(out), 7):
        out[i] ^= 1
    return bytes(out)


def keep(name, data):
    """Writes what the binding returned to $BREVIS_TEST_OUT/name, for tests/bindings.rs."""
    if OUT:
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)


class BrevisTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(FIXTURE, "rb") as f:
            cls.original = f.read()
        cls.archive = brevis.compress(cls.original, threads=2)

    def test_version(self):
        self.assertRegex(brevis.version(), r"^\d+\.\d+\.\d+$")

    def test_bytes_round_trip(self):
        for data in [b"", b"x", b"hello brevis" * 1000, bytes(range(256)) * 10]:
            packed = brevis.compress(data)
            self.assertLessEqual(len(packed), brevis.compress_bound(len(data)))
            self.assertEqual(brevis.decompressed_size(packed), len(data))
            self.assertEqual(brevis.decompress(packed), data)
        self.assertEqual(brevis.decompress(bytearray(brevis.compress(memoryview(b"abc")))), b"abc")

    def test_checkpoint_round_trip(self):
        self.assertLess(len(self.archive), len(self.original))
        self.assertEqual(brevis.decompress(self.archive, threads=1, verify=True), self.original)

    def test_decompress_returns_new_bytes(self):
        # Decoded straight into a new bytes object (no zero fill, no copy): each call its own,
        # immutable and equal to the original; without CPython's C API, through a copy.
        first, second = brevis.decompress(self.archive), brevis.decompress(self.archive)
        self.assertIs(type(first), bytes)
        self.assertIsNot(first, second)
        self.assertEqual(first, self.original)
        self.assertEqual(hash(first), hash(self.original))
        saved = brevis._new_bytes
        try:
            brevis._new_bytes = None
            self.assertEqual(brevis.decompress(self.archive), self.original)
        finally:
            brevis._new_bytes = saved
        damaged = bytearray(self.archive)
        damaged[len(damaged) // 2] ^= 0x40
        with self.assertRaises(brevis.BrevisError):
            brevis.decompress(bytes(damaged))

    def test_levels(self):
        fast = brevis.compress(self.original, level="fast")
        smallest = brevis.compress(self.original, level="max")
        self.assertEqual(brevis.decompress(fast), self.original)
        self.assertEqual(brevis.decompress(smallest), self.original)
        self.assertLessEqual(len(smallest), len(fast))
        with self.assertRaises(ValueError):
            brevis.compress(b"x", level="fastest")

    def test_archive_reads_one_tensor_by_name(self):
        expected = tensors_of(self.original)
        keep("fixture.brv", self.archive)
        with brevis.Archive(self.archive) as a:
            index = [[t.name, t.dtype, list(t.shape), t.nbytes, t.offset] for t in (a.info(i) for i in range(len(a)))]
            keep("tensors.json", json.dumps(index).encode())
            self.assertEqual(sorted(a), sorted(expected))
            name = "conv1.bias" if "conv1.bias" in a else next(iter(a))
            self.assertIn(name, a)
            self.assertEqual(a[name], expected[name])
            info = a.info(name)
            self.assertEqual(info.name, name)
            self.assertEqual(info.nbytes, len(expected[name]))
            self.assertEqual(self.original[info.offset : info.offset + info.nbytes], expected[name])
            self.assertTrue(info.dtype and info.shape)
            buf = bytearray(info.nbytes + 10)
            self.assertEqual(a.read_into(name, buf), info.nbytes)
            self.assertEqual(bytes(buf[: info.nbytes]), expected[name])
            for i in range(len(a)):
                t = a.info(i)
                self.assertEqual(a.read(i), expected[t.name])

    def test_errors_are_exceptions(self):
        with self.assertRaises(brevis.CorruptArchiveError) as e:
            brevis.decompress(self.archive[: len(self.archive) // 2])
        self.assertEqual(e.exception.code, -4)
        self.assertIsInstance(e.exception, ValueError)
        with self.assertRaises(brevis.CorruptArchiveError):
            brevis.Archive(self.original)
        with self.assertRaises(brevis.CorruptArchiveError):
            brevis.decompressed_size(b"not an archive")
        with brevis.Archive(self.archive) as a:
            with self.assertRaises(KeyError):
                a["no such tensor"]
            with self.assertRaises(brevis.TensorNotFoundError) as e:
                a.index("no such tensor")
            self.assertEqual(e.exception.code, -9)
            with self.assertRaises(brevis.BufferTooSmallError):
                name = next(iter(a))
                a.read_into(name, bytearray(a.info(name).nbytes - 1))
        with self.assertRaises(ValueError):
            a.read(0)  # closed
        with self.assertRaises(brevis.InvalidArgumentError):
            brevis.compress(b"x", chunk_bytes=0)
        with self.assertRaises(TypeError):
            brevis.compress(b"x", budget=3)
        with self.assertRaises(brevis.LimitError):
            brevis.decompress(self.archive, memory_limit=0)

    def test_reference_round_trip(self):
        tuned = nudged(self.original)
        packed = brevis.compress_with_ref(tuned, self.original, threads=2)
        self.assertLess(len(packed), len(brevis.compress(tuned, threads=2)))
        back = brevis.decompress_with_ref(packed, self.original, threads=1, verify=True)
        self.assertEqual(back, tuned)
        keep("tuned.brv", packed)
        keep("tuned.out", back)
        with self.assertRaises(brevis.InvalidArgumentError):
            brevis.decompress(packed)
        with self.assertRaises(brevis.InvalidArgumentError):
            brevis.decompress_with_ref(packed, tuned)
        with self.assertRaises(brevis.LimitError):
            brevis.decompress_with_ref(packed, self.original, memory_limit=16)

    def test_archive_with_options(self):
        with brevis.Archive(self.archive, threads=2) as a:
            largest = max(range(len(a)), key=lambda i: a.info(i).nbytes)
            tensors = [a.read(i) for i in range(len(a))]
        nbytes = len(tensors[largest])
        with brevis.Archive(self.archive, threads=2, memory_limit=nbytes - 1) as a:
            with self.assertRaises(brevis.LimitError):
                a.read(largest)
            smaller = [i for i, t in enumerate(tensors) if len(t) < nbytes]
            self.assertTrue(smaller)
            self.assertEqual([a.read(i) for i in smaller], [tensors[i] for i in smaller])
        with self.assertRaises(brevis.LimitError):
            brevis.Archive(self.archive, memory_limit=16)

    def test_files(self):
        with tempfile.TemporaryDirectory() as d:
            arc, out = os.path.join(d, "m.brv"), os.path.join(d, "m.safetensors")
            brevis.compress_file(FIXTURE, arc, threads=2)
            brevis.decompress_file(arc, out)
            with open(out, "rb") as f:
                self.assertEqual(f.read(), self.original)
            with self.assertRaises(brevis.BrevisIOError) as e:
                brevis.compress_file(os.path.join(d, "missing"), arc)
            self.assertIsInstance(e.exception, OSError)


if __name__ == "__main__":
    unittest.main()
