#!/usr/bin/env python3
# usage: python3 scripts/trace_labels.py TRACE.json[.gz]... [--example REGEX]...
"""Lists the event names of PyTorch profiler Chrome traces (torch.profiler export_chrome_trace),
grouped by the event's "cat", with counts summed over the files given. FSDP unit names are
normalized ("FSDP::pre_forward (model.layers.0)" -> "FSDP::pre_forward (<unit>)", "... for
model.layers.3" -> "... for <unit>"); each FSDP label (FSDP2 "FSDP::...", FSDP1
"FullyShardedDataParallel...") is marked with the phases it occurs in: forward, backward
(at or after the step's first "autograd::engine::evaluate_function" event), optimizer (inside
"Optimizer.step#..."). Per category, the threads it appears on: "main" (tid == pid) or the
thread's name from the trace's thread_name metadata (e.g. pt_gloo_runloop), with the raw tids.
--example REGEX prints the first event (in file order) whose name matches, pretty-printed.
Standard library only.
"""
import argparse
import bisect
import gzip
import json
import re
import sys
from collections import Counter, defaultdict

UNIT_PAREN = re.compile(r" \((?=[^()]*[A-Za-z0-9_])[^()]*\)$")   # " (model.layers.0)", not " ()"
UNIT_FOR = re.compile(r" for [A-Za-z0-9_.]+$")                   # " for model.layers.3"


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def normalize(name):
    if name.startswith("FSDP") or name.startswith("FullyShardedDataParallel"):
        name = UNIT_PAREN.sub(" (<unit>)", name)
        name = UNIT_FOR.sub(" for <unit>", name)
    return name


def is_fsdp(name):
    return name.startswith("FSDP") or name.startswith("FullyShardedDataParallel")


def thread_names(events):
    """tid -> short name: 'main' for the process's own thread, else its thread_name metadata."""
    names = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            m = re.match(r"thread \d+ \((.*)\)$", str(e.get("args", {}).get("name", "")))
            label = m.group(1) if m else str(e.get("args", {}).get("name"))
            if e.get("tid") == e.get("pid"):
                label = "main"
            if label != "python" or e["tid"] not in names:
                names[e["tid"]] = label
    return names


def phase_finder(events):
    """Returns f(ts) -> 'forward' | 'backward' | 'optimizer' from the step structure."""
    opt = sorted((e["ts"], e["ts"] + e.get("dur", 0)) for e in events
                 if e.get("ph") == "X" and str(e.get("name", "")).startswith("Optimizer.step#"))
    bwd = sorted(e["ts"] for e in events if e.get("ph") == "X"
                 and str(e.get("name", "")).startswith("autograd::engine::evaluate_function"))
    opt_ends = [b for _, b in opt]

    def phase(ts):
        i = bisect.bisect_right([a for a, _ in opt], ts) - 1
        if i >= 0 and ts <= opt[i][1]:
            return "optimizer"
        j = bisect.bisect_right(opt_ends, ts) - 1
        step_start = opt_ends[j] if j >= 0 else float("-inf")
        k = bisect.bisect_right(bwd, ts) - 1   # last backward event that started at or before ts
        return "backward" if k >= 0 and bwd[k] >= step_start else "forward"
    return phase


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--example", action="append", default=[], metavar="REGEX")
    a = ap.parse_args()

    counts = defaultdict(Counter)            # cat -> normalized name -> count
    phases = defaultdict(set)                # normalized FSDP name -> phases
    threads = defaultdict(Counter)           # cat -> thread name -> count
    raw_tids = defaultdict(lambda: defaultdict(set))  # cat -> file -> tids
    examples = {rx: None for rx in a.example}
    for path in a.traces:
        d = load(path)
        events = d["traceEvents"] if isinstance(d, dict) else d
        keys = [k for k in d] if isinstance(d, dict) else []
        print(f"# {path}: {len(events)} events; top-level keys: {', '.join(keys)}")
        tname = thread_names(events)
        phase = phase_finder(events)
        for e in events:
            cat = e.get("cat", "(no cat, ph=%s)" % e.get("ph"))
            name = str(e.get("name", ""))
            n = normalize(name)
            counts[cat][n] += 1
            tid = e.get("tid")
            threads[cat][tname.get(tid, "main" if isinstance(tid, int) and tid == e.get("pid") else repr(tid))] += 1
            raw_tids[cat][path].add(tid)
            if is_fsdp(name) and e.get("ph") == "X":
                phases[n].add(phase(e["ts"]))
            for rx in examples:
                if examples[rx] is None and re.search(rx, name):
                    examples[rx] = e

    order = ["forward", "backward", "optimizer"]
    for cat in sorted(counts, key=lambda c: -sum(counts[c].values())):
        total = sum(counts[cat].values())
        print(f"\n## cat {cat}: {total} events, {len(counts[cat])} names")
        print("   threads: " + ", ".join(f"{t} x{c}" for t, c in threads[cat].most_common()))
        for path, tids in raw_tids[cat].items():
            print(f"   tids in {path}: {sorted(tids, key=str)}")
        for name, c in sorted(counts[cat].items(), key=lambda kv: (-kv[1], kv[0])):
            ph = ""
            if name in phases:
                ph = "  [" + ",".join(p for p in order if p in phases[name]) + "]"
            print(f"{c:8d}  {name}{ph}")
    for rx, e in examples.items():
        print(f"\n## example /{rx}/")
        print(json.dumps(e, indent=1) if e is not None else "(none)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
