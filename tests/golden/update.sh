#!/usr/bin/env bash
# Regenerates tests/golden/NAME.expected.json from NAME.plan.json with the current shardcast.
# Review the diff by hand before committing: a golden file is a claim that the numbers are right.
#   usage: tests/golden/update.sh [SHARDCAST_BINARY]   (default: build/bin/shardcast)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=${1:-$root/build/bin/shardcast}
[ -x "$bin" ] || { echo "update.sh: no shardcast binary at $bin (build first or pass its path)" >&2; exit 1; }

cd "$root"
for plan in tests/golden/*.plan.json; do
    name=$(basename "$plan" .plan.json)
    "$bin" plan "$plan" --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
json.dump({k: d[k] for k in ["model", "plan", "memory", "communication", "pipeline"] if k in d}, sys.stdout, indent=2)
print()' >"tests/golden/$name.expected.json"
    echo "wrote tests/golden/$name.expected.json"
done
