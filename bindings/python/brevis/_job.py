"""The work of `python -m brevis.ray`, one file at a time, without Ray: what to do (a plan of
items), doing one item (run in a Ray task), completion records, and the totals.

Families (as `brevis compress -r`): unless turned off, compress codes each file against the file
of the job that predicts it best (brevis.family_references: a master alone, its casts and
quantizations against it, no cycles), decompress restores an archive against the restored file
its reference is (matched by the identity each archive records), and verify decodes it against
that file's archive. Items carry a `wave`: a file's reference is in an earlier wave, so a job
runs wave after wave (masters before their variants).

Each output is written under a temporary name (`<output>.partial`, itself written atomically by
the library) and renamed into place; then its completion record is written (atomically) under
`<output folder>/.brevis-ray/<relative path>.json`. A rerun skips an item whose record matches
its input (size and modification time) and its output (size), and redoes any other: a file
whose task was killed has no record (and perhaps a `.partial` or a library temporary
`.brevis-*.tmp`, removed by the rerun), so it is done again.
"""

import filecmp
import json
import os
import signal
import tempfile
import time

import brevis

RECORDS = ".brevis-ray"
# Test hook (tests/test_ray.py): a compress task whose input path ends with this string kills its
# own worker process after the partial output is written and before it is renamed into place.
KILL_HOOK = "BREVIS_RAY_TEST_KILL"


def _inputs_of_dir(root, mode, output):
    """(path, path relative to root) of every regular file under root (archives only, for
    decompress and verify), skipping completion records and the output folder."""
    out, skip = [], os.path.abspath(output) if output else None
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != RECORDS and os.path.abspath(os.path.join(folder, d)) != skip)
        for f in sorted(files):
            path = os.path.join(folder, f)
            if not os.path.isfile(path) or os.path.islink(path):
                continue
            if mode != "compress" and not f.endswith(".brv"):
                continue
            out.append((path, os.path.relpath(path, root)))
    return out


def _inputs_of_manifest(manifest):
    """(path, relative path) of each line of a manifest: relative lines are relative to its
    folder (and keep that relative path), absolute ones keep their base name."""
    base = os.path.dirname(os.path.abspath(manifest))
    out = []
    with open(manifest, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            rel = os.path.basename(line) if os.path.isabs(line) else os.path.normpath(line)
            if rel.startswith(".."):
                raise ValueError(f"{manifest}: {line!r} is outside the manifest's folder; give it as an absolute path")
            out.append((os.path.join(base, line), rel))
    return out


def plan(mode, source, output, originals=None, family=True):
    """The items of a job: dicts with mode, src, out (the output path, None for verify), rel,
    record (its completion record's path, None for verify), orig (verify's original), ref (the
    reference file to code or decode it against, or None) and wave."""
    inputs = _inputs_of_dir(source, mode, output) if os.path.isdir(source) else _inputs_of_manifest(source)
    items = []
    for src, rel in inputs:
        item = {"mode": mode, "src": src, "rel": rel, "out": None, "record": None, "orig": None, "ref": None,
                "wave": 0}
        if mode == "compress":
            item["out"] = os.path.join(output, rel + ".brv")
        elif mode == "decompress":
            item["out"] = os.path.join(output, rel[: -len(".brv")])
        elif originals:
            item["orig"] = os.path.join(originals, rel[: -len(".brv")])
        if item["out"]:
            item["record"] = os.path.join(output, RECORDS, os.path.relpath(item["out"], output) + ".json")
        items.append(item)
    # (An archive made against a reference needs it, whatever `family` says.)
    if family or mode != "compress":
        _family(mode, items)
    return items


def _family(mode, items):
    """Sets each item's reference and wave (see the module's documentation)."""
    if mode == "compress":
        # Files that cannot be read are left to fail in their own task.
        ok = [i for i, it in enumerate(items) if os.path.isfile(it["src"])]
        chosen = brevis.family_references([items[i]["src"] for i in ok]) if len(ok) > 1 else [None] * len(ok)
        refs = [None] * len(items)
        for i, j in zip(ok, chosen):
            refs[i] = None if j is None else ok[j]
    else:
        # The archive whose original is an archive's reference; an archive whose reference no
        # archive here restores is told so by its task.
        ids = [_identity(it["src"]) for it in items]
        by_original = {orig: j for j, (orig, _) in enumerate(ids) if orig}
        refs = [by_original.get(ref) if ref else None for _, ref in ids]
        for it, (_, ref), j in zip(items, ids, refs):
            if ref and j is None:
                it["missing_ref"] = ref
    for i, j in enumerate(refs):
        if j is not None:
            # compress: against the reference's original; decompress: against it restored;
            # verify: against its archive (which the library decodes first).
            items[i]["ref"] = {"compress": items[j]["src"], "decompress": items[j]["out"], "verify": items[j]["src"]}[mode]
    for i in range(len(items)):
        depth, j, seen = 0, refs[i], {i}
        while j is not None and j not in seen:
            seen.add(j)
            depth, j = depth + 1, refs[j]
        items[i]["wave"] = depth


def _check_reference(item):
    """Raises the error of an archive whose reference no archive of the job restores."""
    if item.get("missing_ref"):
        size, digest = item["missing_ref"]
        raise FileNotFoundError(f"made against a reference file of {size} bytes with xxh3 {digest:016x}, which no "
                                "archive of this job restores (compress the family's folder as one job)")


def _identity(archive):
    """(original, reference) identities an archive records; (None, None) when it cannot be read
    (its task then reports why)."""
    try:
        return brevis.archive_identity(archive)
    except (brevis.BrevisError, OSError):
        return None, None


def _stamp(path):
    st = os.stat(path)
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def finished(item):
    """Whether the item's completion record matches its input and its output."""
    try:
        with open(item["record"], encoding="utf-8") as f:
            record = json.load(f)
        return record["input"] == _stamp(item["src"]) and record["output_size"] == os.path.getsize(item["out"])
    except (OSError, ValueError, KeyError, TypeError):
        return False


def clean_leftovers(output):
    """Removes what killed tasks of an earlier run left under `output` (`*.partial` outputs and
    the library's `.brevis-*.tmp` temporaries); returns how many. Run before any task starts."""
    n = 0
    for folder, dirs, files in os.walk(output):
        for f in files:
            if f.endswith(".partial") or (f.startswith(".brevis-") and f.endswith(".tmp")):
                os.unlink(os.path.join(folder, f))
                n += 1
    return n


def _write_record(item, result):
    os.makedirs(os.path.dirname(item["record"]), exist_ok=True)
    record = {"input": _stamp(item["src"]), "output_size": result["bytes_out"], "seconds": result["seconds"]}
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(item["record"]), suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(record, f)
    os.replace(tmp, item["record"])


def _same_bytes(a, b):
    return os.path.getsize(a) == os.path.getsize(b) and filecmp.cmp(a, b, shallow=False)


def _verify(item, threads):
    """Decodes the archive (its checksum checked) into a temporary file and compares it with the
    original when there is one."""
    _check_reference(item)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "decoded")
        if item["ref"]:
            brevis.decompress_file_with_ref(item["src"], item["ref"], out, threads=threads, verify=1)
        else:
            brevis.decompress_file(item["src"], out, threads=threads, verify=1)
        if item["orig"] and not _same_bytes(out, item["orig"]):
            raise ValueError(f"decodes to bytes that differ from {item['orig']}")
        return os.path.getsize(out)


def run_item(item, threads=1, level=None):
    """Does one item; returns a result dict (rel, bytes_in, bytes_out, seconds, skipped, error).
    Errors are returned, not raised, so that one bad file never stops the others."""
    start = time.perf_counter()
    result = {"rel": item["rel"], "bytes_in": 0, "bytes_out": 0, "seconds": 0.0, "skipped": False, "error": None}
    try:
        result["bytes_in"] = os.path.getsize(item["src"])
        if item["mode"] == "verify":
            result["bytes_out"] = _verify(item, threads)
        elif finished(item):
            result["skipped"], result["bytes_out"] = True, os.path.getsize(item["out"])
        else:
            _produce(item, threads, level)
            result["bytes_out"] = os.path.getsize(item["out"])
            result["seconds"] = time.perf_counter() - start
            _write_record(item, result)
    except Exception as e:  # reported in the totals; the job goes on
        result["error"] = f"{type(e).__name__}: {e}"
    result["seconds"] = time.perf_counter() - start
    return result


def _produce(item, threads, level):
    """Writes the item's output through `<output>.partial` and a rename."""
    _check_reference(item)
    os.makedirs(os.path.dirname(item["out"]) or ".", exist_ok=True)
    partial = item["out"] + ".partial"
    if item["mode"] == "compress":
        if item["ref"]:
            brevis.compress_file_with_ref(item["src"], item["ref"], partial, threads=threads, level=level)
        else:
            brevis.compress_file(item["src"], partial, threads=threads, level=level)
        hook = os.environ.get(KILL_HOOK)
        if hook and item["src"].endswith(hook):
            os.kill(os.getpid(), signal.SIGKILL)
    elif item["ref"]:
        brevis.decompress_file_with_ref(item["src"], item["ref"], partial, threads=threads)
    else:
        brevis.decompress_file(item["src"], partial, threads=threads)
    os.replace(partial, item["out"])


def totals(mode, results, seconds, cleaned=0):
    """The job's summary lines (and whether every item succeeded)."""
    done = [r for r in results if not r["error"] and not r["skipped"]]
    skipped = [r for r in results if r["skipped"]]
    failed = [r for r in results if r["error"]]
    ok = done + skipped
    b_in, b_out = sum(r["bytes_in"] for r in ok), sum(r["bytes_out"] for r in ok)
    done_in = sum(r["bytes_in"] for r in done)
    lines = [
        f"brevis.ray {mode}: {len(results)} files: {len(done)} done, {len(skipped)} skipped (finished earlier), "
        f"{len(failed)} failed" + (f"; {cleaned} leftovers of killed tasks removed" if cleaned else ""),
        f"bytes in {b_in} -> out {b_out}" + (f" ({100.0 * b_out / b_in:.2f}%)" if b_in else ""),
        f"{seconds:.2f} s: {len(done) / seconds if seconds else 0:.2f} files/s, "
        f"{done_in / 1e6 / seconds if seconds else 0:.2f} MB/s (files done in this run)",
    ]
    lines += [f"FAILED {r['rel']}: {r['error']}" for r in failed]
    return lines, not failed
