#!/usr/bin/env python3
"""Time to the first token in llama.cpp: a GGUF model against its Brevis archives (the default
level and `fast`), as bindings/cpp/llama_run.cpp reports it (from the program's start: the model
ready, then the first generated token), and its peak RSS. Runs alternate between the files;
medians. With --cold the page cache is dropped before every run (needs root:
/proc/sys/vm/drop_caches), so the file is read from the disk.

Usage: scripts/llama_load_time.py MODEL.gguf [MODEL.gguf ...] [--runs N] [--cold] [--threads T]
Needs: cargo build --release, scripts/llama.sh build, scripts/llama.sh example. The archives are
written to target/llama.cpp/archives/MODEL.gguf.<level>.brv (kept for the next run).
Prints a markdown table: file, size, % of the original, model ready (ms), first token (ms), peak RSS.
"""
import os
import re
import statistics
import subprocess
import sys

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


def once(path, cold, threads):
    if cold:
        subprocess.run(["sync"], check=True)
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    cmd = [RUN, path, "-n", "1", PROMPT] + (["-t", threads] if threads else [])
    err = subprocess.run(cmd, capture_output=True, text=True, check=True).stderr
    m = re.search(r"model ready at ([\d.]+) ms, first token at ([\d.]+) ms, \d+ tokens, peak RSS (\d+) kB", err)
    if not m:
        sys.exit(f"no timing line from llama_run {path}:\n{err[-2000:]}")
    return float(m.group(1)), float(m.group(2)), int(m.group(3)) * 1024


def main():
    models = [a for a in sys.argv[1:] if a.endswith(".gguf")]
    runs, cold, threads = int(arg("--runs", 7)), "--cold" in sys.argv, arg("--threads", None)
    for tool in (BREVIS, RUN):
        if not os.path.exists(tool):
            sys.exit(f"{tool} is missing: cargo build --release; scripts/llama.sh build; scripts/llama.sh example")
    print(f"page cache {'dropped before each run' if cold else 'warm'}; medians of {runs} runs; "
          f"{os.cpu_count()} CPUs; llama_run -n 1 (threads: {threads or 'llama.cpp default'})\n")
    print("| file | size (MB) | % of the GGUF | model ready (ms) | first token (ms) | peak RSS (MB) |")
    print("|---|---|---|---|---|---|")
    for model in models:
        files = [model, archive(model, "default"), archive(model, "fast")]
        results = {f: [] for f in files}
        for f in files:  # warm-up (and the page cache, when not dropped)
            once(f, cold, threads)
        for _ in range(runs):
            for f in files:
                results[f].append(once(f, cold, threads))
        size = os.path.getsize(model)
        for f in files:
            r = results[f]
            ready, first = statistics.median(x[0] for x in r), statistics.median(x[1] for x in r)
            rss = max(x[2] for x in r)
            s = os.path.getsize(f)
            print(f"| {os.path.basename(f)} | {s / 1e6:.1f} | {100 * s / size:.2f}% | {ready:.0f} | {first:.0f} | "
                  f"{rss / 1e6:.0f} |")


if __name__ == "__main__":
    main()
