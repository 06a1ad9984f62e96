#!/usr/bin/env python3
# usage: /work/venv-trace/bin/python scripts/bench-trace-import.py [--bench build-speed/bin/trace_bench]
#            [--repeats 3] [--keep DIR]
"""Issue 23's comparison: how long HolisticTraceAnalysis takes to load a Kineto trace, and how long
shardcast's reader takes on the very same file. Needs `pip install HolisticTraceAnalysis` in the
venv and a built trace_bench (cmake --build BUILD --target trace_bench).

Files: the two public GPU traces of tests/data/traces/gpu-public, inflated to plain .json in a
temporary folder, and the same two as the .json.gz they are stored as.

HTA: wall time of TraceAnalysis(trace_files={0: file}, trace_dir=folder), its documented load
(parse into a DataFrame, then align and filter), with its default parser backend; best of --repeats
loads, in this process after HTA is imported (the import itself is not counted).
shardcast: trace_bench --trace=FILE, which times trace::readKinetoTrace on the file; each repetition
is the mean wall time of as many reads as Google Benchmark runs; best of --repeats repetitions.
Both run on the same machine, one after the other, single-threaded (one file, so HTA starts no
worker processes).
"""
import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRACES = os.path.join(ROOT, "tests", "data", "traces", "gpu-public")
SOURCES = ["ddp-2ranks-nccl-rank0.json.gz", "16ranks-reduce-scatter-rank0.json.gz"]


def hta_load_seconds(path, repeats):
    # HTA logs every parse at warning level; the table is the output here.
    import logging

    from hta.trace_analysis import TraceAnalysis

    logging.getLogger("hta").setLevel(logging.ERROR)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        analysis = TraceAnalysis(trace_files={0: os.path.basename(path)}, trace_dir=os.path.dirname(path))
        best = min(best, time.perf_counter() - t0)
        if not analysis.t.is_parsed:
            sys.exit(f"HTA did not load {path}")
        del analysis
    return best


def shardcast_read_seconds(bench, paths, repeats):
    cmd = [bench] + [f"--trace={p}" for p in paths] + [
        "--benchmark_filter=cmp-",
        f"--benchmark_repetitions={repeats}",
        "--benchmark_format=json",
    ]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    best = {}
    for b in json.loads(out)["benchmarks"]:
        if b.get("run_type") != "iteration":
            continue
        if b.get("error_occurred"):
            sys.exit(f"trace_bench: {b['name']}: {b.get('error_message')}")
        # Names are BM_ReadKineto_<Plain|Gzip>/<file name>/real_time; times in milliseconds.
        name = b["name"].split("/")[1]
        seconds = b["real_time"] / 1e3
        best[name] = min(best.get(name, float("inf")), seconds)
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", default=os.path.join(ROOT, "build-speed", "bin", "trace_bench"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--keep", help="write the files here and keep them (default: a temporary folder)")
    args = ap.parse_args()
    if not os.access(args.bench, os.X_OK):
        sys.exit(f"no trace_bench at {args.bench}: build it (cmake --build BUILD --target trace_bench)")

    folder = args.keep or tempfile.mkdtemp(prefix="shardcast-hta-")
    os.makedirs(folder, exist_ok=True)
    try:
        files = []  # (path, inflated MB)
        for src in SOURCES:
            stem = "cmp-" + src[: -len(".json.gz")]
            with gzip.open(os.path.join(TRACES, src), "rb") as f:
                data = f.read()
            plain = os.path.join(folder, stem + ".json")
            with open(plain, "wb") as f:
                f.write(data)
            packed = os.path.join(folder, stem + ".json.gz")
            shutil.copyfile(os.path.join(TRACES, src), packed)
            files += [(plain, len(data) / 1e6), (packed, len(data) / 1e6)]

        ours = shardcast_read_seconds(args.bench, [p for p, _ in files], args.repeats)
        rows = []
        for path, mb in files:
            hta = hta_load_seconds(path, args.repeats)
            sc = ours[os.path.basename(path)]
            rows.append((os.path.basename(path)[len("cmp-"):], mb, hta, sc, hta / sc))

        print(f"best of {args.repeats}, wall time; MB = inflated JSON")
        print(f"{'file':<42}{'MB':>8}{'HTA load s':>12}{'shardcast s':>13}{'speedup':>9}")
        for name, mb, hta, sc, x in rows:
            print(f"{name:<42}{mb:>8.1f}{hta:>12.3f}{sc:>13.4f}{x:>8.0f}x")
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
