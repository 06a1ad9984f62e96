#!/usr/bin/env python3
"""Each source compiled once (docs/architecture.md): reads a build's compile_commands.json and
fails, naming them, on every source file of the repository that the build compiles more than once
(the same file in two targets, or twice with different flags). A shared source belongs in a
library (static or OBJECT) that each target links. Exits 0 when every source appears once.

usage: scripts/check-compiled-once.py BUILD_DIR REPO_ROOT
"""
import collections
import json
import os
import sys


def main():
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    build, root = sys.argv[1], os.path.realpath(sys.argv[2])
    path = os.path.join(build, "compile_commands.json")
    try:
        with open(path, encoding="utf-8") as f:
            entries = json.load(f)
    except (OSError, ValueError) as e:
        print(f"{path}: cannot read it ({e}); configure with CMAKE_EXPORT_COMPILE_COMMANDS=ON", file=sys.stderr)
        return 2
    counts = collections.Counter()
    outputs = collections.defaultdict(list)
    for e in entries:
        f = os.path.realpath(os.path.join(e.get("directory", ""), e["file"]))
        if not f.startswith(root + os.sep) or f.startswith(os.path.realpath(build) + os.sep):
            continue  # generated sources (moc, autogen) and outside files
        counts[f] += 1
        outputs[f].append(e.get("output", "?"))
    twice = sorted(f for f, n in counts.items() if n > 1)
    for f in twice:
        print(f"{os.path.relpath(f, root)}: compiled {counts[f]} times ({', '.join(outputs[f])})")
    if twice:
        print(f"{len(twice)} source(s) compiled more than once: put each in one library the targets link")
        return 1
    print(f"{len(counts)} sources, each compiled once")
    return 0


if __name__ == "__main__":
    sys.exit(main())
