#!/usr/bin/env python3
"""The dependency check of docs/architecture.md: every #include "folder/..." of every source file
must point along the layering (towards core), never back up. Prints each include that breaks it,
as FILE:LINE, and exits 1; exits 0 when the layering holds. Also lists the rooms that have grown
past the house limit (about 15 source files or 4,000 lines), without failing on them.

usage: scripts/check-layers.py [REPO_ROOT]
"""
import os
import re
import sys

CORE = ["core/base", "core/model", "core/program", "core/memory", "core/plan", "core/lower", "core/results"]
# What the GUI's rooms may use outside gui/.
GUI_BELOW = CORE + ["simulator", "search", "measured", "trace", "db", "planstore"]
# room -> the rooms its sources may include (besides their own)
ALLOWED = {
    "core/base": [],
    "core/model": ["core/base"],
    "core/program": ["core/base", "core/model"],
    "core/memory": ["core/base", "core/model", "core/program"],
    "core/plan": ["core/base", "core/model", "core/program", "core/memory"],
    "core/lower": ["core/base", "core/model", "core/program", "core/memory", "core/plan"],
    "core/results": ["core/base", "core/model", "core/program", "core/memory"],
    "simulator": CORE,
    "search": CORE + ["simulator"],
    "measured": CORE + ["simulator"],
    "executor": CORE,
    "db": CORE,
    "trace": CORE,
    "configs": CORE,
    "planstore": CORE + ["simulator", "trace", "db"],
    "backend_cpu": CORE + ["simulator", "measured", "executor"],
    "backend_cuda": CORE + ["simulator", "measured", "executor"],
    "gui/widgets": GUI_BELOW,
    "gui/state": GUI_BELOW + ["gui/widgets"],
    "gui/views": GUI_BELOW + ["gui/widgets", "gui/state"],
    "gui/app": GUI_BELOW + ["gui/widgets", "gui/state", "gui/views"],
    "apps": CORE + ["simulator", "search", "measured", "executor", "db", "trace", "configs", "planstore", "backend_cpu",
                    "backend_cuda"],
}
SOURCE = (".cpp", ".hpp", ".cu", ".h")
INCLUDE = re.compile(r'\s*#\s*include\s+"([^"]+)"')


def room_of(path):
    """The room a repository path (or an include path) belongs to, or None."""
    parts = path.split("/")
    if parts[0] in ("core", "gui") and len(parts) > 2:
        return parts[0] + "/" + parts[1]
    if parts[0] in ("core", "gui"):
        return parts[0]  # a file left in core/ or gui/ itself: belongs to no room
    return parts[0] if parts[0] in ALLOWED else None


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    broken, sizes = [], {}
    for room in ALLOWED:
        folder = os.path.join(root, room)
        if not os.path.isdir(folder):
            broken.append(f"{room}/: the room is missing")
            continue
        for dirpath, _, files in os.walk(folder):
            for name in sorted(files):
                if not name.endswith(SOURCE):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root).replace(os.sep, "/")
                here = room_of(rel)
                if here in ("core", "gui"):
                    rooms = [r for r in ALLOWED if r.startswith(here + "/")]
                    broken.append(f"{rel}: a source directly in {here}/; put it in one of its rooms ({', '.join(rooms)})")
                    continue
                with open(path, encoding="utf-8", errors="replace") as f:
                    lines = f.readlines()
                n, size = sizes.get(os.path.dirname(rel), (0, 0))
                sizes[os.path.dirname(rel)] = (n + 1, size + len(lines))
                for i, line in enumerate(lines, 1):
                    m = INCLUDE.match(line)
                    if not m or "/" not in m.group(1):
                        continue
                    target = room_of(m.group(1))
                    if target is None or target == here:
                        continue
                    if target not in ALLOWED[here]:
                        broken.append(f"{rel}:{i}: {here} includes {m.group(1)} ({target}); {here} may include "
                                      f"{', '.join(ALLOWED[here]) or 'nothing outside itself'}")
    for folder, (n, size) in sorted(sizes.items()):
        if n > 16 or size > 4400:
            print(f"note: {folder}/ holds {n} source files, {size} lines (house limit: about 15 files, 4,000 lines)")
    for b in broken:
        print(b)
    if broken:
        print(f"check-layers: {len(broken)} include(s) against the layering (docs/architecture.md)")
        return 1
    print(f"check-layers: the layering holds ({len(sizes)} folders)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
