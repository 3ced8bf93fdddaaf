"""Shared helpers of the package's pytest tests (bindings/python/tests; run by tests/bindings.rs
against the installed package, or by hand: see bindings/python/README.md)."""

import importlib
import os

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
FIXTURE = os.environ.get("BREVIS_FIXTURE", os.path.join(ROOT, "tests", "fixtures", "silero_vad_16k.safetensors"))
CORPUS = os.environ.get("BREVIS_CORPUS", os.path.expanduser("~/.cache/brevis-corpus"))
STRICT = os.environ.get("BREVIS_REQUIRE_ALL") == "1"


def need(module):
    """Imports `module`, or skips the test (a failure under BREVIS_REQUIRE_ALL=1)."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        reason = f"{module} is not installed ({e}); pip install {module}"
        if STRICT:
            pytest.fail(f"BREVIS_REQUIRE_ALL=1 and {reason}")
        pytest.skip(reason)


def skip_or_fail(reason):
    if STRICT:
        pytest.fail(f"BREVIS_REQUIRE_ALL=1 and {reason}")
    pytest.skip(reason)


def read(path):
    with open(path, "rb") as f:
        return f.read()


@pytest.fixture(scope="session")
def fixture_bytes():
    return read(FIXTURE)


@pytest.fixture(scope="session")
def fixture_archive(tmp_path_factory, fixture_bytes):
    import brevis

    path = tmp_path_factory.mktemp("fixture") / "silero_vad_16k.safetensors.brv"
    path.write_bytes(brevis.compress(fixture_bytes, threads=2))
    return str(path)
