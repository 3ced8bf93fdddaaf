#!/usr/bin/env python3
"""Time to a loaded model and the first token in llama.cpp, and peak RSS: a GGUF model against
its Brevis archives, every way a program can load one, as bindings/cpp/llama_run.cpp reports it
(from the start of the command: the model ready, then the first generated token):

- `.gguf`: llama.cpp's own loading of the file (memory-mapped; `--no-mmap`: read);
- `loader`: the archive through llama.cpp's loader API (brevis_llama_load_model: the
  stream of brevis_reader_fopen read by llama_model_load_from_file_ptr), default level and fast;
- `memfd`: the fallback, the archive decoded whole into a memfd that llama.cpp maps;
- `brevis exec`: `brevis exec ARCHIVE -- llama_run ARCHIVE`, what a stock program gets (times
  from the start of brevis).

Also the time of `brevis decompress -c ARCHIVE > /dev/null` (default level), and the bound the
loader is held to: (that time + the `.gguf`'s model ready) x 1.15. Runs alternate between the
ways; medians. With --cold the page cache is dropped before every run (needs root:
/proc/sys/vm/drop_caches), so files are read from the disk.

Usage: scripts/llama_load_time.py MODEL.gguf [MODEL.gguf ...] [--runs N] [--cold] [--threads T]
Needs: cargo build --release, scripts/llama.sh build, scripts/llama.sh example. The archives are
written to target/llama.cpp/archives/MODEL.gguf.<level>.brv (kept for the next run).
"""
import os
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BREVIS = os.path.join(ROOT, "target", "release", "brevis")
RUN = os.path.join(ROOT, "target", "llama.cpp", "llama_run")
PROMPT = "The capital of France is"


def arg(name, default):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


def archive(model, level):
    os.makedirs(os.path.join(ROOT, "target", "llama.cpp", "archives"), exist_ok=True)
    out = os.path.join(ROOT, "target", "llama.cpp", "archives", f"{os.path.basename(model)}.{level}.brv")
    if not os.path.exists(out) or os.path.getmtime(out) < os.path.getmtime(model):
        subprocess.run([BREVIS, "compress", "-q", "-f", "--level", level, model, "-o", out], check=True)
    return out


def drop_caches():
    subprocess.run(["sync"], check=True)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def once(way, cold, threads):
    """(model ready ms, first token ms, peak RSS bytes) of one run of `way` (a label, a path, flags)."""
    _, path, flags = way
    if cold:
        drop_caches()
    t0 = time.time_ns()
    cmd = [RUN, path, "-n", "1", "--t0-ns", str(t0), PROMPT] + (["-t", threads] if threads else [])
    if "exec" in flags:
        cmd = [BREVIS, "exec", path, "--"] + cmd
    else:
        cmd[2:2] = flags
    err = subprocess.run(cmd, capture_output=True, text=True, check=True).stderr
    m = re.search(r"model ready at ([\d.]+) ms, first token at ([\d.]+) ms, \d+ tokens, peak RSS (\d+) kB", err)
    if not m:
        sys.exit(f"no timing line from {' '.join(cmd)}:\n{err[-2000:]}")
    return float(m.group(1)), float(m.group(2)), int(m.group(3)) * 1024


def decompress_ms(path, cold):
    if cold:
        drop_caches()
    t = time.perf_counter()
    with open(os.devnull, "wb") as null:
        subprocess.run([BREVIS, "decompress", "-q", "-c", path], stdout=null, check=True)
    return 1000 * (time.perf_counter() - t)


def main():
    models = [a for a in sys.argv[1:] if a.endswith(".gguf")]
    runs, cold, threads = int(arg("--runs", 7)), "--cold" in sys.argv, arg("--threads", None)
    for tool in (BREVIS, RUN):
        if not os.path.exists(tool):
            sys.exit(f"{tool} is missing: cargo build --release; scripts/llama.sh build; scripts/llama.sh example")
    print(f"page cache {'dropped before each run' if cold else 'warm'}; medians of {runs} runs; "
          f"{os.cpu_count()} CPUs; llama_run -n 1 (threads: {threads or 'llama.cpp default'})\n")
    print("| model | how | file (MB) | model ready (ms) | first token (ms) | peak RSS (MB) |")
    print("|---|---|---|---|---|---|")
    bounds = []
    for model in models:
        default, fast = archive(model, "default"), archive(model, "fast")
        ways = [
            (".gguf, mapped", model, []),
            (".gguf, read (--no-mmap)", model, ["--no-mmap"]),
            ("loader, default", default, []),
            ("loader, fast", fast, []),
            ("memfd fallback, default", default, ["--memfd"]),
            ("brevis exec, default", default, ["exec"]),
        ]
        results = {w[0]: [] for w in ways}
        dec = []
        for w in ways:  # warm-up (and the page cache, when not dropped)
            once(w, cold, threads)
        for _ in range(runs):
            for w in ways:
                results[w[0]].append(once(w, cold, threads))
            dec.append(decompress_ms(default, cold))
        name = os.path.basename(model)
        for label, path, _ in ways:
            r = results[label]
            ready, first = statistics.median(x[0] for x in r), statistics.median(x[1] for x in r)
            rss = max(x[2] for x in r)
            print(f"| {name} | {label} | {os.path.getsize(path) / 1e6:.1f} | {ready:.0f} | {first:.0f} | "
                  f"{rss / 1e6:.0f} |")
            name = ""
        gguf_ready = statistics.median(x[0] for x in results[".gguf, mapped"])
        loader_ready = statistics.median(x[0] for x in results["loader, default"])
        bound = 1.15 * (statistics.median(dec) + gguf_ready)
        bounds.append(f"{os.path.basename(model)}: brevis decompress -c {statistics.median(dec):.0f} ms; "
                      f"loader {loader_ready:.0f} ms against (decompress + .gguf ready) x 1.15 = {bound:.0f} ms")
    print()
    for b in bounds:
        print(b)


if __name__ == "__main__":
    main()
