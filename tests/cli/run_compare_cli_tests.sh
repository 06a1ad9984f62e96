#!/usr/bin/env bash
# End-to-end checks of `shardcast compare`: a run record written from a prediction with known
# perturbations (write_test_run), compared against its own plan and against a plan file; --json
# keys, --trace, and exit 2 for bad input.
#   usage: run_compare_cli_tests.sh SHARDCAST_BINARY WRITE_TEST_RUN_BINARY
set -uo pipefail
# shellcheck source=tests/cli/harness.sh
source "$(dirname "${BASH_SOURCE[0]}")/harness.sh"

bin=${1:?usage: run_compare_cli_tests.sh SHARDCAST_BINARY WRITE_TEST_RUN_BINARY}
writer=${2:?usage: run_compare_cli_tests.sh SHARDCAST_BINARY WRITE_TEST_RUN_BINARY}
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
writer=$(cd "$(dirname "$writer")" && pwd)/$(basename "$writer")
models=$(cd "$(dirname "$0")/../../models" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"

expect_exit "plan --write-plan tiny-llama" 0 \
    "$bin" plan --model tiny-llama --gpu H100-SXM --nodes 1 --gpus-per-node 4 --seq-len 512 --write-plan "$tmp/tiny.plan.json"
expect_exit "write_test_run writes a run record" 0 "$writer" "$tmp/tiny.plan.json" "$tmp/run.json"

expect_exit "compare run RUN.json --json exits 0" 0 "$bin" compare run "$tmp/run.json" --json --top 3
check "compare --json: every error is the known factor, -1/2" '
import json, sys
d = json.load(open(sys.argv[1]))
for key in ("step_time_error", "peak_memory_error", "streams", "categories", "tasks"):
    assert key in d, key
assert d["step_time_error"] == -0.5, d["step_time_error"]
assert d["measured_step_ns"] == 2 * d["predicted_step_ns"]
assert d["peak_memory_error"] == -0.5, d["peak_memory_error"]
assert d["measured_peak_bytes"] == 2 * d["predicted_peak_bytes"]
assert {"compute", "all-gather", "reduce-scatter"} <= set(d["streams"]), d["streams"]
for name, s in d["streams"].items():
    assert s["error"] == -0.5 and s["measured_busy_ns"] == 2 * s["predicted_busy_ns"], (name, s)
assert "Activation" in d["categories"], d["categories"]
for name, k in d["categories"].items():
    assert k["error"] == -0.5 and k["error_bytes"] == -k["predicted_bytes"], (name, k)
assert len(d["tasks"]) == 3
for t in d["tasks"]:
    assert set(t) >= {"id", "unit", "kind", "stream", "predicted_ns", "measured_ns", "error"}, t
    assert t["measured_ns"] == 2 * t["predicted_ns"] and t["error"] == -0.5, t
devs = [t["measured_ns"] - t["predicted_ns"] for t in d["tasks"]]
assert devs == sorted(devs, reverse=True), devs
' "$tmp/out"

expect_exit "compare PLAN.json RUN.json (the same plan) exits 0" 0 "$bin" compare "$tmp/tiny.plan.json" "$tmp/run.json"
if grep -q "step time" "$tmp/out" && grep -q "predicted (ms)" "$tmp/out" && grep -q "(MiB)" "$tmp/out" &&
   grep -q "predicted (us)" "$tmp/out"; then
    pass "compare text report has units in its headers"
else
    fail "compare text report has units in its headers" "$(head -c 600 "$tmp/out")"
fi

expect_exit "compare --trace exits 0" 0 "$bin" compare run "$tmp/run.json" --trace "$tmp/trace.json"
check "trace: pid 0 predicted and pid 1 measured, the same tasks in each" '
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
names = {e["pid"]: e["args"]["name"] for e in ev if e.get("ph") == "M" and e.get("name") == "process_name"}
assert names == {0: "predicted", 1: "measured"}, names
x = [e for e in ev if e.get("ph") == "X"]
assert len([e for e in x if e["pid"] == 0]) == len([e for e in x if e["pid"] == 1]) > 0
' "$tmp/trace.json"

# --- bad input: exit 2, one line naming what is wrong ---
expect_bad_input "missing run file" "no-such-run.json" "$bin" compare run "$tmp/no-such-run.json"
printf '{"format": "shardcast-run", "version": 1, ' >"$tmp/truncated.json"
expect_bad_input "malformed run JSON names the file" "truncated.json" "$bin" compare run "$tmp/truncated.json"
expect_bad_input "a plan given as RUN.json: wrong format, names the file and field" "tiny.plan.json.*format" \
    "$bin" compare run "$tmp/tiny.plan.json"
python3 -c '
import json, sys
d = json.load(open(sys.argv[1])); del d["timeline"]; json.dump(d, open(sys.argv[2], "w"))' "$tmp/run.json" "$tmp/notimeline.json"
expect_bad_input "a run without a timeline names the field" "notimeline.json.*timeline" \
    "$bin" compare run "$tmp/notimeline.json"
"$writer" "$tmp/tiny.plan.json" "$tmp/short.json" drop-task
expect_bad_input "timeline of another task count names the file, field and both counts" \
    "short.json: timeline.tasks: .*has [0-9]+ tasks but the plan's program has [0-9]+" \
    "$bin" compare run "$tmp/short.json"
"$writer" "$tmp/tiny.plan.json" "$tmp/newer.json" newer-version
expect_bad_input "newer run format" "version" "$bin" compare run "$tmp/newer.json"
"$bin" plan --model tiny-llama --gpu H100-SXM --nodes 1 --gpus-per-node 4 --seq-len 1024 \
    --write-plan "$tmp/other.plan.json" >/dev/null 2>&1
expect_bad_input "a plan other than the run's names the first differing field and both values" \
    "other.plan.json is not the plan .*run.json ran: they differ first in training.seq_len \\(1024 in .*other.plan.json, 512 in .*run.json's plan\\)" \
    "$bin" compare "$tmp/other.plan.json" "$tmp/run.json"
"$bin" simulate "$tmp/tiny.plan.json" --json >"$tmp/prediction.json" 2>/dev/null
expect_bad_input "a simulate --json output is not a plan: says so" "prediction.json.*simulate --json" \
    "$bin" compare "$tmp/prediction.json" "$tmp/run.json"
expect_bad_input "missing arguments" "run|required" "$bin" compare run
expect_bad_input "--trace into a missing folder names the flag" "--trace.*no-such-dir" \
    "$bin" compare run "$tmp/run.json" --trace "$tmp/no-such-dir/t.json"
expect_bad_input "--top must be a count" "--top" "$bin" compare run "$tmp/run.json" --top -1

# The same plan naming its model by a path to the same config is the same plan.
python3 -c '
import json, sys
d = json.load(open(sys.argv[1])); d["model"] = sys.argv[2]; json.dump(d, open(sys.argv[3], "w"))' \
    "$tmp/tiny.plan.json" "$models/tiny-llama.json" "$tmp/by-path.plan.json"
expect_exit "a plan naming the same model by path is the run's plan" 0 \
    "$bin" compare "$tmp/by-path.plan.json" "$tmp/run.json"

# --- --scale on a planning command, kept in the written plan ---
expect_exit "plan --scale writes the scale into the plan" 0 \
    "$bin" plan --model llama-3.1-70b --scale hidden=512,layers=2,seq=256 --gpus-per-node 2 --write-plan "$tmp/scaled.plan.json"
check "scaled plan file: scale and seq_len" '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["model"] == "llama-3.1-70b" and d["scale"] == "hidden=512,layers=2", d
assert d["training"]["seq_len"] == 256, d["training"]
' "$tmp/scaled.plan.json"
"$bin" plan --model llama-3.1-70b --seq-len 256 --gpus-per-node 2 --write-plan "$tmp/unscaled.plan.json" >/dev/null
expect_exit "the scaled plan file reads back" 0 "$bin" plan "$tmp/scaled.plan.json" --json
check "the scaled plan read back is the scaled model (hand-counted 138,021,376 parameters)" '
import json, sys
m = json.load(open(sys.argv[1]))["model"]
# per layer 3,343,360 (see model_scale_test) x 2 + embed and head 2 * 128256 * 512 + final norm 512
assert m["name"] == "llama-3.1-70b@hidden=512,layers=2" and m["layers"] == 2, m
assert m["params"] == 2 * 3343360 + 2 * 128256 * 512 + 512 == 138021376, m
' "$tmp/out"
"$writer" "$tmp/scaled.plan.json" "$tmp/scaled.run.json"
expect_exit "compare the scaled plan with its run" 0 "$bin" compare "$tmp/scaled.plan.json" "$tmp/scaled.run.json" --json
check "compare of the scaled run: step error -1/2" '
import json, sys
assert json.load(open(sys.argv[1]))["step_time_error"] == -0.5
' "$tmp/out"
expect_bad_input "the unscaled plan is not the scaled run's plan: names the model" \
    "differ first in model \\(\"llama-3.1-70b\" in .*, \"llama-3.1-70b@hidden=512,layers=2\" in" \
    "$bin" compare "$tmp/unscaled.plan.json" "$tmp/scaled.run.json"
expect_bad_input "--scale unknown key names the flag and the valid keys" "--scale.*width.*hidden, layers, seq" \
    "$bin" plan --model tiny-llama --scale width=3
expect_bad_input "--scale hidden not a multiple of the heads" "--scale.*multiple of 16" \
    "$bin" plan --model tiny-llama --scale hidden=100

finish "compare CLI"
