#!/usr/bin/env bash
# End-to-end checks of the simulator commands: simulate (Chrome trace), sweep (--json, --csv),
# search (--json, --pytorch) and their exit codes for bad input.
#   usage: run_sim_cli_tests.sh SHARDCAST_BINARY REPO_ROOT
set -uo pipefail
# shellcheck source=tests/cli/harness.sh
source "$(dirname "${BASH_SOURCE[0]}")/harness.sh"

bin=${1:?usage: run_sim_cli_tests.sh SHARDCAST_BINARY REPO_ROOT}
root=${2:?usage: run_sim_cli_tests.sh SHARDCAST_BINARY REPO_ROOT}
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
root=$(cd "$root" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"

plan=(--model llama-3.1-8b --gpu H100-SXM --nodes 1 --gpus-per-node 8)

# --- simulate --trace: Chrome trace JSON ------------------------------------------------------
expect_exit "simulate --trace exits 0" 0 "$bin" simulate "${plan[@]}" --trace "$tmp/trace.json"
check "trace: traceEvents, one thread_name per stream used, counters" '
import json, sys
d = json.load(open(sys.argv[1]))
ev = d["traceEvents"]
names = [e for e in ev if e.get("ph") == "M" and e.get("name") == "thread_name"]
tids_used = {e["tid"] for e in ev if e.get("ph") == "X"}
tids_named = [e["tid"] for e in names]
assert sorted(tids_named) == sorted(tids_used), (tids_named, tids_used)
assert len(set(tids_named)) == len(tids_named)
assert any(e.get("ph") == "C" for e in ev), "no counter events"
assert all(e["dur"] >= 0 for e in ev if e.get("ph") == "X")
' "$tmp/trace.json"
expect_exit "simulate --json exits 0" 0 "$bin" simulate "${plan[@]}" --json
check "simulate --json parses with step_s and peak_bytes" '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["step_s"] > 0 and d["peak_bytes"] > 0
' "$tmp/out"

# --- one source of GPU figures: a profile that lowers the peak moves both the MFU and its label ---
echo '{"gpu": {"peak_flops_bf16": 5e14, "memory_bytes": 42949672960}}' >"$tmp/slow.json"
expect_exit "simulate --profile (throttled GPU) exits 0" 0 "$bin" simulate "${plan[@]}" --profile "$tmp/slow.json"
cp "$tmp/out" "$tmp/slow.txt"
if grep -Eq "^MFU .*/ 500 TFLOP/s bf16 peak" "$tmp/slow.txt" && grep -Eq "Peak memory .* of 40.00 GiB" "$tmp/slow.txt"; then
    pass "simulate labels MFU and capacity with the profile's figures"
else
    fail "simulate labels MFU and capacity with the profile's figures" "$(grep -E "^MFU|^Peak" "$tmp/slow.txt")"
fi
expect_exit "simulate --profile --json exits 0" 0 "$bin" simulate "${plan[@]}" --profile "$tmp/slow.json" --json
check "MFU = model FLOPs / (step x the profile's peak), capacity from the profile" '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["peak_flops"] == 5e14, d["peak_flops"]
assert d["capacity_bytes"] == 42949672960, d["capacity_bytes"]
' "$tmp/out"
"$bin" plan "${plan[@]}" --profile "$tmp/slow.json" --json >"$tmp/plan_slow.json" 2>"$tmp/err"
check "plan --json under the profile: MFU from the profile peak, fit from its capacity" '
import json, sys
d = json.load(open(sys.argv[1]))
t, m = d["time"], d["memory"]
assert abs(t["mfu"] - t["model_flops_per_step"] / (t["step_s"] * 5e14)) < 1e-12, t
assert m["capacity_bytes"] == 42949672960 and m["budget_bytes"] == int(42949672960 * 0.95), m
' "$tmp/plan_slow.json"

# --- sweep --json / --csv ---------------------------------------------------------------------
expect_exit "sweep --json exits 0" 0 "$bin" sweep "${plan[@]}" --json --threads 2
check "sweep --json parses" '
import json, sys
d = json.load(open(sys.argv[1]))
assert len(d["results"]) > 0 and "recommendation" in d
assert all(r["step_s"] > 0 for r in d["results"])
assert any(r["pareto"] for r in d["results"])
' "$tmp/out"
expect_exit "sweep --csv exits 0" 0 "$bin" sweep "${plan[@]}" --csv --threads 2
check "sweep --csv parses" '
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) > 0
assert all(float(r["step_ms"]) > 0 for r in rows)
' "$tmp/out"

# --- search --json, --pytorch ------------------------------------------------------------------
expect_exit "search --json exits 0" 0 "$bin" search "${plan[@]}" --json
check "search --json parses" '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["fits"] is True, d["message"]
assert d["grouping"].startswith("[0") and d["unit_ends"][-1] == 32
assert d["full"]["peak_bytes"] <= d["cap_bytes"]
assert "fully_shard(model, mesh=mesh, mp_policy=mp)" in d["pytorch"]
' "$tmp/out"
expect_exit "search --pytorch FILE exits 0" 0 "$bin" search "${plan[@]}" --pytorch "$tmp/apply.py"
check "search --pytorch writes valid Python" '
import ast, sys
src = open(sys.argv[1]).read()
ast.parse(src)
assert "init_device_mesh" in src and "MixedPrecisionPolicy" in src
' "$tmp/apply.py"
expect_exit "search: nothing fits is exit 0 with fits=false" 0 "$bin" search --model llama-3.1-70b --nodes 1 --json
check "search: nothing fits names a flag that would help" '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["fits"] is False and "--ac full" in d["message"], d["message"]
' "$tmp/out"

# --- long gradient accumulation: simulated by its period, the same figures as every micro-batch ---
expect_exit "simulate 405B x 4096 micro-batches exits 0" 0 "$bin" simulate --model llama-3.1-405b --nodes 16 \
    --grad-accum 4096 --json
check "405B x 4096: by its period, 5 micro-batches simulated, step = 4091 periods beyond them" '
import json, sys
d = json.load(open(sys.argv[1]))
p = d["period"]
assert p["micro_batches"] == 4096 and p["simulated_micro_batches"] == 5, p
assert d["step_s"] > 4091 * p["period_s"] > 0, (d["step_s"], p)
' "$tmp/out"
expect_exit "simulate 40 micro-batches by its period exits 0" 0 "$bin" simulate "${plan[@]}" --grad-accum 40 --json
cp "$tmp/out" "$tmp/period.json"
expect_exit "simulate 40 micro-batches --whole-step exits 0" 0 "$bin" simulate "${plan[@]}" --grad-accum 40 \
    --whole-step --json
check "the period gives the whole step: time, MFU, peak, its task, reserved" '
import json, os, sys
a = json.load(open(os.path.join(os.path.dirname(sys.argv[1]), "period.json"))); b = json.load(open(sys.argv[1]))
assert a["period"]["micro_batches"] == 40 and b["period"] is None, (a["period"], b["period"])
for k in ("step_s", "compute_s", "exposed_comm_s", "comm_s", "peak_bytes", "peak_task", "at_peak_bytes", "stream_busy_s", "fits"):
    assert a[k] == b[k], (k, a[k], b[k])
assert abs(a["mfu"] - b["mfu"]) < 1e-12 and a["reserved"] == b["reserved"]
' "$tmp/out"
expect_exit "plan 40 micro-batches exits 0" 0 "$bin" plan "${plan[@]}" --grad-accum 40
check "plan: the report says the step was simulated by its period" '
import sys
t = open(sys.argv[1]).read()
assert "simulated by its period: micro-batches 0-3 and 39 of 40" in t, t
' "$tmp/out"

# --- progress on a terminal: a second-long evaluation names its stage while it runs, then clears ---
# (600 micro-batches take about 2 s here; 300 took 0.8 s on an idle machine, too short to redraw)
SHARDCAST_STDERR_IS_TTY=1 "$bin" simulate --model llama-3.1-405b --nodes 16 --grad-accum 600 --whole-step \
    >"$tmp/progress.out" 2>"$tmp/progress.err"
check "progress: stage lines redrawn on stderr while it runs, the line cleared before the report" '
import sys
err = open(sys.argv[1], "rb").read().decode()
lines = [l for l in err.split("\r") if l]
assert len(lines) >= 3, err  # first drawn after 0.5 s, redrawn every 0.2 s
assert all(l.startswith("\x1b[Kshardcast: ") and "s so far)" in l for l in lines[:-1]), lines
assert lines[-1] == "\x1b[K", lines[-1]  # cleared
' "$tmp/progress.err"
expect_exit "progress: nothing on stderr when it is not a terminal" 0 "$bin" simulate --model llama-3.1-405b --nodes 16 \
    --grad-accum 300 --whole-step
check "progress: stderr empty off a terminal" '
import sys
assert open(sys.argv[1]).read() == ""
' "$tmp/err"

# --- bad input: exit 2 ---------------------------------------------------------------------------
expect_exit "simulate: unknown model is exit 2" 2 "$bin" simulate --model no-such-model
expect_exit "sweep: bad --strategies is exit 2" 2 "$bin" sweep "${plan[@]}" --strategies zero9
expect_exit "sweep: bad --headroom is exit 2" 2 "$bin" sweep "${plan[@]}" --headroom 1.5
expect_exit "search: bad --headroom is exit 2" 2 "$bin" search "${plan[@]}" --headroom -0.1
expect_exit "search: missing --profile file is exit 2" 2 "$bin" search "${plan[@]}" --profile "$tmp/nope.json"
expect_exit "search: unknown flag is exit 2" 2 "$bin" search "${plan[@]}" --no-such-flag

finish
