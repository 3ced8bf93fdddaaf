"""Compress, decompress or verify many files on a Ray cluster, one Ray task per file.

    python -m brevis.ray compress MANIFEST_OR_DIR --output OUT_DIR [--workers N | --address ADDR] [--no-family]
    python -m brevis.ray decompress ARCHIVE_DIR --output DIR
    python -m brevis.ray verify ARCHIVE_DIR [--originals DIR]

A DIR input means every regular file under it (compress: OUT_DIR/<relative path>.brv, the layout
of `brevis compress -r`), or every `*.brv` under it (decompress: the relative path less `.brv`;
verify). A MANIFEST is a text file of paths, one a line. Tasks get paths, not file bytes: every
node must see the same files (a shared file system) and have this package installed.

The files of a job are a family, as with `brevis compress -r`: each is coded against the file of
the job that predicts it best (a master alone, its casts and quantizations against it), and
decompress and verify find each archive's reference among the job's archives by the identity it
records. Tasks run in waves, masters before their variants (brevis._job). `--no-family` codes
every file alone.

Without --address a local Ray instance is started with --workers CPUs (one task per CPU); with
--address (or $RAY_ADDRESS) it joins that cluster: `ray.init(address="ray://head:10001")` or
`ray.init(address="auto")` on a node of it. Outputs are written atomically beside a completion
record (brevis._job), so a rerun skips finished files and redoes the rest. Exit status: 0 when
every file succeeded, 1 when some failed (each is listed with its error), 2 for bad arguments or
when Ray is missing or cannot be started or joined.
"""

import argparse
import os
import sys
import time

from . import _job


class RayUnavailable(RuntimeError):
    """Ray could not be started or joined."""


def _task(ray):
    """The Ray remote function: one item, on one CPU, not retried (a killed task is reported
    as failed and redone by a rerun, never silently retried half-way)."""
    return ray.remote(num_cpus=1, max_retries=0)(_job.run_item)


def _collect(ray, futures, items, before=0, total=None):
    """The results of every task as they finish; a task that died becomes a failed result.
    Progress lines count `before` results of earlier waves, out of `total`."""
    results, pending = [], dict(zip(futures, items))
    total = total or len(items)
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1)
        for f in ready:
            item = pending.pop(f)
            try:
                r = ray.get(f)
            except Exception as e:  # the worker died (killed, out of memory) or Ray failed
                r = {"rel": item["rel"], "bytes_in": 0, "bytes_out": 0, "seconds": 0.0, "skipped": False,
                     "error": f"task died: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
            results.append(r)
            state = "FAILED" if r["error"] else ("skipped" if r["skipped"] else "done")
            print(f"[{before + len(results)}/{total}] {state} {r['rel']}", flush=True)
    return results


def run(mode, source, output=None, originals=None, workers=None, address=None, threads=1, level=None,
        family=True):
    """Runs a job and returns (summary lines, ok)."""
    import ray

    items = _job.plan(mode, source, output, originals, family)
    cleaned = _job.clean_leftovers(output) if output and os.path.isdir(output) else 0
    try:
        if address:
            ray.init(address=address, log_to_driver=False)
        else:
            ray.init(num_cpus=workers or os.cpu_count(), include_dashboard=False, log_to_driver=False)
    except Exception as e:  # no cluster at that address, or Ray could not start
        raise RayUnavailable(f"cannot {'join Ray at ' + address if address else 'start Ray'}: {e}") from e
    try:
        start = time.perf_counter()
        task = _task(ray)
        results = []
        # Wave after wave: a file's reference is finished before the file's task starts.
        for wave in sorted({item["wave"] for item in items}):
            batch = [item for item in items if item["wave"] == wave]
            futures = [task.remote(item, threads, level) for item in batch]
            results += _collect(ray, futures, batch, len(results), len(items))
        return _job.totals(mode, results, time.perf_counter() - start, cleaned)
    finally:
        ray.shutdown()


def _args(argv):
    p = argparse.ArgumentParser(prog="python -m brevis.ray", description=__doc__.split("\n\n")[0])
    p.add_argument("mode", choices=["compress", "decompress", "verify"])
    p.add_argument("source", help="a folder, or a manifest file (one path a line)")
    p.add_argument("--output", "-o", help="output folder (compress, decompress)")
    p.add_argument("--originals", help="verify: the folder of the original files to compare with")
    p.add_argument("--workers", type=int, help="local Ray: CPUs (parallel tasks); default: every core")
    p.add_argument("--address", default=os.environ.get("RAY_ADDRESS"), help="a Ray cluster to join")
    p.add_argument("--threads", type=int, default=1, help="library threads per task (default 1)")
    p.add_argument("--level", choices=["fast", "default", "max"], help="compression level")
    p.add_argument("--no-family", action="store_true", help="compress: code every file alone")
    a = p.parse_args(argv)
    if a.mode != "verify" and not a.output:
        p.error(f"{a.mode} needs --output")
    if not os.path.exists(a.source):
        p.error(f"{a.source} does not exist")
    return a


def main(argv=None):
    a = _args(argv)
    try:
        import ray  # noqa: F401
    except ImportError:
        print("brevis.ray needs Ray: pip install ray (or pip install './bindings/python[ray]')", file=sys.stderr)
        return 2
    try:
        lines, ok = run(a.mode, a.source, a.output, a.originals, a.workers, a.address, a.threads, a.level,
                        not a.no_family)
    except RayUnavailable as e:
        print(f"brevis.ray: {e}", file=sys.stderr)
        return 2
    print("\n".join(lines), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
