"""`python -m brevis.ray` on a local Ray instance over a model folder of real files (the committed
fixture, shards generated from it, an index JSON, config and tokenizer files): a task killed
mid-file is reported and its file left unwritten, a rerun redoes it (and skips the rest), every
archive verifies against its original, decompress restores the folder byte for byte, and a
failing file is reported without stopping the others."""

import filecmp
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import brevis
from conftest import FIXTURE, need
from test_arrays import same_np

KILLED = "model-00002-of-00004.safetensors"


def job(*args, env=None):
    """Runs `python -m brevis.ray ARGS`; returns (exit status, stdout + stderr)."""
    full_env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", **(env or {}))
    p = subprocess.run([sys.executable, "-m", "brevis.ray", *args], capture_output=True, text=True, env=full_env,
                       timeout=900)
    print(p.stdout[-3000:], p.stderr[-3000:])
    return p.returncode, p.stdout + p.stderr


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A sharded model folder: 4 shards made from the fixture's tensors (each scaled by its own
    factor, so that no shard is the fixture's family), its index JSON, the fixture itself and
    small config/tokenizer files."""
    need("ray")
    st = need("safetensors.numpy")
    folder = tmp_path_factory.mktemp("model")
    tensors = st.load_file(FIXTURE)
    names, weight_map = sorted(tensors), {}
    for i in range(4):
        shard = f"model-0000{i + 1}-of-00004.safetensors"
        part = {}
        for k in names:
            v = tensors[k]
            part[f"layer{i}.{k}"] = (v * np.float32(1 + (i + 1) / 8)).astype(v.dtype) if v.dtype.kind == "f" else v
            weight_map[f"layer{i}.{k}"] = shard
        st.save_file(part, str(folder / shard), metadata={"format": "np"})
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    (folder / "config.json").write_text(json.dumps({"model_type": "silero", "layers": 4}))
    (folder / "tokenizer").mkdir()
    (folder / "tokenizer" / "vocab.txt").write_text("\n".join(f"tok{i}" for i in range(500)))
    (folder / "silero_vad_16k.safetensors").write_bytes(open(FIXTURE, "rb").read())
    return folder


def files_under(folder):
    return sorted(os.path.relpath(os.path.join(r, f), folder) for r, d, fs in os.walk(folder)
                  for f in fs if ".brevis-ray" not in r)


def test_killed_task_is_redone_by_rerun(model, tmp_path):
    out = tmp_path / "out"
    rc, log = job("compress", str(model), "--output", str(out), "--workers", "2", env={"BREVIS_RAY_TEST_KILL": KILLED})
    assert rc == 1 and f"FAILED {KILLED}: task died" in log, log
    assert f"{len(files_under(model))} files: {len(files_under(model)) - 1} done, 0 skipped" in log, log
    # Nothing half-written under the final name: the killed file has only its partial output.
    assert not (out / (KILLED + ".brv")).exists() and (out / (KILLED + ".brv.partial")).exists()
    rc, log = job("compress", str(model), "--output", str(out), "--workers", "2")
    n = len(files_under(model))
    assert rc == 0 and f"{n} files: 1 done, {n - 1} skipped (finished earlier), 0 failed; 1 leftovers" in log, log
    assert f"[{n}/{n}]" in log and "bytes in" in log and "files/s" in log
    assert files_under(out) == sorted(f + ".brv" for f in files_under(model))
    rc, log = job("verify", str(out), "--originals", str(model), "--workers", "2")
    assert rc == 0 and f"{n} files: {n} done" in log, log
    back = tmp_path / "back"
    rc, log = job("decompress", str(out), "--output", str(back), "--workers", "2")
    assert rc == 0 and files_under(back) == files_under(model), log
    for f in files_under(model):
        assert filecmp.cmp(model / f, back / f, shallow=False), f
    # The archives' folder loads as the whole model.
    st = need("safetensors.numpy")
    got = brevis.load_folder(str(out))
    want = {}
    for f in files_under(model):
        if f.endswith(".safetensors") and not f.startswith("silero"):
            want.update(st.load_file(str(model / f)))
    want.update({k: v for k, v in st.load_file(FIXTURE).items()})
    assert sorted(got) == sorted(want)
    assert all(same_np(got[k], want[k]) for k in want)


def test_failing_files_do_not_stop_the_others(model, tmp_path):
    manifest = tmp_path / "manifest.txt"
    manifest.write_text(f"# one path a line\n{model / 'config.json'}\n{tmp_path / 'missing.safetensors'}\n"
                        f"{model / 'tokenizer'}\n{model / 'silero_vad_16k.safetensors'}\n")
    rc, log = job("compress", str(manifest), "--output", str(tmp_path / "out"), "--workers", "2")
    assert rc == 1 and "4 files: 2 done, 0 skipped (finished earlier), 2 failed" in log, log
    assert "FAILED missing.safetensors: FileNotFoundError" in log and "FAILED tokenizer: " in log, log
    assert sorted(os.listdir(tmp_path / "out")) == [".brevis-ray", "config.json.brv", "silero_vad_16k.safetensors.brv"]


def test_bad_arguments_exit_2(tmp_path):
    rc, log = job("compress", str(tmp_path / "nowhere"), "--output", str(tmp_path / "o"))
    assert rc == 2 and "does not exist" in log
    rc, log = job("compress", str(tmp_path))
    assert rc == 2 and "needs --output" in log
    rc, log = job("verify", str(tmp_path), "--address", "auto", env={"RAY_ADDRESS": ""})  # no cluster running
    assert rc == 2 and "cannot join Ray at auto: " in log, log


def test_a_family_is_coded_against_its_masters(tmp_path):
    """A folder of two real families (the silero fixture with its GGUF quantizations and a BF16
    cast; SmolLM2 layers with their llama-quantize K-quants): each variant is coded against its
    master, in a later wave; decompress and verify find the masters by the identities the
    archives record; --no-family codes every file alone."""
    need("ray")
    st, ml_dtypes = need("safetensors.numpy"), need("ml_dtypes")
    fixtures = os.path.dirname(FIXTURE)
    fam = tmp_path / "fam"
    fam.mkdir()
    for f in ["silero_vad_16k.safetensors", "silero_family.gguf", "smollm2_kquants_master.gguf", "smollm2_kquants.gguf"]:
        (fam / f).write_bytes(open(os.path.join(fixtures, f), "rb").read())
    cast = {k: v.astype(ml_dtypes.bfloat16) if v.dtype == np.float32 else v for k, v in st.load_file(FIXTURE).items()}
    st.save_file(cast, str(fam / "silero_bf16.safetensors"), metadata={"format": "np"})
    variants = ["silero_family.gguf", "smollm2_kquants.gguf", "silero_bf16.safetensors"]
    sizes = {}
    for flag in [[], ["--no-family"]]:
        out = tmp_path / ("alone" if flag else "family")
        rc, log = job("compress", str(fam), "--output", str(out), "--workers", "2", *flag)
        assert rc == 0 and "5 files: 5 done" in log, log
        sizes[bool(flag)] = {f: os.path.getsize(out / (f + ".brv")) for f in files_under(fam)}
    family, alone = sizes[False], sizes[True]
    for f in variants:
        assert family[f] * 4 < alone[f], (f, family[f], alone[f])
    for f in ["silero_vad_16k.safetensors", "smollm2_kquants_master.gguf"]:
        assert family[f] == alone[f], (f, family[f], alone[f])  # masters are coded alone
    out = tmp_path / "family"
    rc, log = job("verify", str(out), "--originals", str(fam), "--workers", "2")
    assert rc == 0 and "5 files: 5 done" in log, log
    back = tmp_path / "back"
    rc, log = job("decompress", str(out), "--output", str(back), "--workers", "2")
    assert rc == 0 and files_under(back) == files_under(fam), log
    for f in files_under(fam):
        assert filecmp.cmp(fam / f, back / f, shallow=False), f
    # A variant whose master's archive is missing names the reference it needs.
    os.unlink(out / "silero_vad_16k.safetensors.brv")
    rc, log = job("decompress", str(out), "--output", str(tmp_path / "back2"), "--workers", "2")
    assert rc == 1 and "FAILED silero_bf16.safetensors.brv: FileNotFoundError: made against a reference" in log, log
    # Nor are its tensors read without it.
    with pytest.raises(ValueError, match="made against a reference file"):
        brevis.load_folder(str(out))
