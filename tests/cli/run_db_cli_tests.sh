#!/usr/bin/env bash
# End-to-end checks of the store from the command line (issue 9): --save on plan / simulate /
# sweep / search, --profile NAME, db list / show / export / import / tag / note / delete / check,
# compare --run ID --prediction ID, the default path, and bad store files left untouched.
#   usage: run_db_cli_tests.sh SHARDCAST_BINARY WRITE_TEST_RUN_BINARY
set -uo pipefail
# shellcheck source=tests/cli/harness.sh
source "$(dirname "${BASH_SOURCE[0]}")/harness.sh"

bin=${1:?usage: run_db_cli_tests.sh SHARDCAST_BINARY WRITE_TEST_RUN_BINARY}
writer=${2:?usage: run_db_cli_tests.sh SHARDCAST_BINARY WRITE_TEST_RUN_BINARY}
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
writer=$(cd "$(dirname "$writer")" && pwd)/$(basename "$writer")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
unset SHARDCAST_DB
export HOME=$tmp/home XDG_DATA_HOME=
db=$tmp/s.db
tiny=(--model tiny-llama --gpu H100-SXM --nodes 1 --gpus-per-node 4 --seq-len 512)

# --- saving predictions ---------------------------------------------------------------------
expect_ok "plan --save NAME --json" "$bin" plan "${tiny[@]}" --db "$db" --json --save first
cp "$tmp/out" plan1.json
check "plan --save: saved ids in the JSON" '
import json, sys
d = json.load(open(sys.argv[1]))
s = d["saved"]
assert s["prediction"] == "pred-1" and s["plan"] == "plan-1", s
assert s["db"].endswith("s.db"), s
' plan1.json
expect_ok "the same plan saved again" "$bin" plan "${tiny[@]}" --db "$db" --save
grep -q "Saved pred-2 (plan plan-1)" "$tmp/out" && pass "same plan content: same plan id, new prediction" ||
    fail "same plan content: same plan id, new prediction" "$(tail -n 2 "$tmp/out")"
expect_ok "db list --json" "$bin" db list --db "$db" --json
cp "$tmp/out" list.json
check "db list: 2 predictions, 1 plan, 1 preset profile, newest first" '
import json, sys
d = json.load(open(sys.argv[1]))
kinds = [e["kind"] for e in d]
assert kinds.count("predictions") == 2 and kinds.count("plans") == 1 and kinds.count("profiles") == 1, kinds
ts = [e["created_unix_ms"] for e in d]
assert ts == sorted(ts, reverse=True), ts
p1 = [e for e in d if e["id"] == "pred-1"][0]
assert p1["name"] == "first" and "plan-1" in p1["links"], p1
assert "tiny-llama" in p1["summary"] and "4x H100-SXM" in p1["summary"], p1
' list.json
expect_ok "db list --kind plans --json" "$bin" db list --db "$db" --kind plans --json
check "db list --kind plans: only plans" '
import json, sys
d = json.load(open(sys.argv[1]))
assert [e["id"] for e in d] == ["plan-1"], d
' "$tmp/out"
expect_bad_input "db list --kind bogus names the valid kinds" "plans.*predictions.*runs.*profiles" \
    "$bin" db list --db "$db" --kind bogus

expect_ok "db show pred-1 --json" "$bin" db show pred-1 --db "$db" --json
cp "$tmp/out" pred1.json
expect_ok "simulate --json of the same plan" "$bin" simulate "${tiny[@]}" --json
cp "$tmp/out" sim.json
check "stored prediction: the simulator's figures and a full timeline" '
import json, sys
d = json.load(open(sys.argv[1])); s = json.load(open("sim.json"))
b = d["body"]
assert b["shardcast_version"] and b["headroom"] == 0.05, b.keys()
assert abs(b["summary"]["step_s"] - s["step_s"]) < 1e-12, (b["summary"]["step_s"], s["step_s"])
assert b["summary"]["peak_bytes"] == s["peak_bytes"]
assert len(b["timeline"]["tasks"]) > 20, len(b["timeline"]["tasks"])
assert b["memory"]["curve"], "memory curve missing"
' pred1.json
expect_ok "db show plan-1 (text)" "$bin" db show plan-1 --db "$db"
grep -q "Referenced by   pred-2, pred-1\|Referenced by   pred-1, pred-2" "$tmp/out" && pass "db show: what refers to the plan" ||
    fail "db show: what refers to the plan" "$(head -n 8 "$tmp/out")"

# --- export / import ------------------------------------------------------------------------
expect_ok "db export plan-1 --out" "$bin" db export plan-1 --db "$db" --out exported.plan.json
expect_ok "the exported plan plans" "$bin" plan exported.plan.json --json
check "exported plan: the same prediction as the original" '
import json, sys
a = json.load(open(sys.argv[1])); b = json.load(open("plan1.json"))
assert a["time"] == b["time"] and a["memory"] == b["memory"], "differs"
' "$tmp/out"
expect_ok "db export pred-1 --json" "$bin" db export pred-1 --db "$db" --json --out pred1.export.json
expect_ok "db import into a second store" "$bin" db import pred1.export.json --db "$tmp/other.db"
expect_ok "db list of the second store" "$bin" db list --db "$tmp/other.db" --json
check "import recreates the prediction with its plan and profile" '
import json, sys
d = json.load(open(sys.argv[1]))
kinds = sorted(e["kind"] for e in d)
assert kinds == ["plans", "predictions", "profiles"], kinds
pred = [e for e in d if e["kind"] == "predictions"][0]
assert len(pred["links"]) == 2, pred
' "$tmp/out"

# --- tags, notes ----------------------------------------------------------------------------
expect_ok "db tag" "$bin" db tag pred-2 --db "$db" baseline june
expect_ok "db note" "$bin" db note pred-2 --db "$db" "before the NCCL upgrade"
expect_ok "db list --tag baseline" "$bin" db list --db "$db" --tag baseline --json
check "db list --tag: only the tagged object" '
import json, sys
d = json.load(open(sys.argv[1]))
assert [e["id"] for e in d] == ["pred-2"] and d[0]["tags"] == ["baseline", "june"], d
' "$tmp/out"
expect_ok "db show pred-2 shows the note" "$bin" db show pred-2 --db "$db"
grep -q "before the NCCL upgrade" "$tmp/out" && pass "the note is shown" || fail "the note is shown"

# --- runs and stored comparisons --------------------------------------------------------------
expect_ok "plan --write-plan" "$bin" plan "${tiny[@]}" --write-plan tiny.plan.json
expect_exit "write_test_run writes a run record" 0 "$writer" tiny.plan.json run.json
expect_ok "db import run.json" "$bin" db import run.json --db "$db"
grep -q "as run-1" "$tmp/out" && pass "the run is run-1" || fail "the run is run-1" "$(cat "$tmp/out")"
expect_ok "compare --run run-1 --prediction pred-1 --save --json" \
    "$bin" compare --run run-1 --prediction pred-1 --db "$db" --save --json
check "stored comparison: the known factor -1/2, saved as cmp-1" '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["step_time_error"] == -0.5 and d["peak_memory_error"] == -0.5, (d["step_time_error"], d["peak_memory_error"])
assert d["saved"].startswith("Saved cmp-1"), d["saved"]
' "$tmp/out"
expect_bad_input "compare --run with a plan id" "not a run id" "$bin" compare --run plan-1 --prediction pred-1 --db "$db"
expect_bad_input "compare --run alone" "--run and --prediction go together" "$bin" compare --run run-1 --db "$db"
expect_bad_input "compare --run of a missing run" "run-99" "$bin" compare --run run-99 --prediction pred-1 --db "$db"

# --- delete ---------------------------------------------------------------------------------
expect_bad_input "db delete of a referenced plan names what refers to it" "pred-1.*--force" \
    "$bin" db delete plan-1 --db "$db"
expect_ok "db delete --force" "$bin" db delete plan-1 --db "$db" --force
check "delete --force removed the plan, its predictions and their comparison" '
import sys
out = open(sys.argv[1]).read()
for id in ("plan-1", "pred-1", "pred-2", "cmp-1"):
    assert id in out, (id, out)
assert "run-1" not in out, out
' "$tmp/out"
expect_ok "db list after delete" "$bin" db list --db "$db" --json
check "after delete: the run and the profile remain" '
import json, sys
d = json.load(open(sys.argv[1]))
assert sorted(e["id"].split("-")[0] for e in d) == ["prof", "run"], d
' "$tmp/out"
expect_bad_input "db show of a deleted object" "pred-1" "$bin" db show pred-1 --db "$db"
expect_bad_input "db show of a bad id" "plan-N" "$bin" db show banana --db "$db"

# --- profiles by name -------------------------------------------------------------------------
expect_ok "simulate --save-profile" "$bin" simulate "${tiny[@]}" --save-profile prof.json
python3 -c 'import json; p = json.load(open("prof.json")); p["forward_efficiency_max"] = 0.3; json.dump(p, open("prof.json", "w"))'
expect_ok "db import of a profile --name" "$bin" db import prof.json --db "$db" --name slow-h100
expect_ok "plan --profile FILE" "$bin" plan "${tiny[@]}" --profile prof.json --json
cp "$tmp/out" by-file.json
expect_ok "plan --profile NAME (stored)" "$bin" plan "${tiny[@]}" --profile slow-h100 --db "$db" --json
check "a stored profile predicts as its file does" '
import json, sys
a = json.load(open(sys.argv[1])); b = json.load(open("by-file.json")); c = json.load(open("plan1.json"))
assert a["time"] == b["time"], "stored and file profiles differ"
assert a["time"] != c["time"], "the profile was not applied"
' "$tmp/out"
expect_bad_input "--profile of an unknown name lists the stored ones" "slow-h100" \
    "$bin" plan "${tiny[@]}" --profile fast-h100 --db "$db"

# --- sweep and search ------------------------------------------------------------------------
expect_ok "sweep --save --json" "$bin" sweep "${tiny[@]}" --db "$db" --save --json
cp "$tmp/out" sweep.json
expect_ok "db list --tag sweep-front --json" "$bin" db list --db "$db" --tag sweep-front --json
check "sweep --save: one prediction per Pareto point" '
import json, sys
stored = json.load(open(sys.argv[1])); s = json.load(open("sweep.json"))
front = [r for r in s["results"] if r["pareto"]]
assert len(stored) == len(front) == len(s["saved"]["predictions"]) > 0, (len(stored), len(front))
' "$tmp/out"
expect_ok "search --save --json" "$bin" search "${tiny[@]}" --db "$db" --save --json
check "search --save: the chosen plan saved" '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["saved"]["predictions"][0]["prediction"].startswith("pred-"), d["saved"]
' "$tmp/out"

# --- check, default path, bad files -----------------------------------------------------------
expect_ok "db check --json" "$bin" db check --db "$db" --json
check "db check: ok, schema 2" '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["integrity"] == "ok" and d["schema_version"] == 2 and d["runs"] == 1, d
' "$tmp/out"
expect_ok "--save with no --db uses ~/.local/share" "$bin" plan "${tiny[@]}" --save
[ -f "$HOME/.local/share/shardcast/shardcast.db" ] && pass "default store created on first use" ||
    fail "default store created on first use"
XDG_DATA_HOME=$tmp/xdg expect_ok "--save under XDG_DATA_HOME" "$bin" plan "${tiny[@]}" --save
[ -f "$tmp/xdg/shardcast/shardcast.db" ] && pass "XDG_DATA_HOME honoured" || fail "XDG_DATA_HOME honoured"
SHARDCAST_DB=$tmp/env.db expect_ok "--save under SHARDCAST_DB" "$bin" plan "${tiny[@]}" --save
[ -f "$tmp/env.db" ] && pass "SHARDCAST_DB honoured" || fail "SHARDCAST_DB honoured"
expect_bad_input "db list of a store never created" "nothing has been saved" "$bin" db list --db "$tmp/none.db"
[ ! -e "$tmp/none.db" ] && pass "listing does not create a store" || fail "listing does not create a store"

echo "not a database" >text.db
before=$(sha256sum text.db)
expect_bad_input "a text file as the store" "text.db" "$bin" db list --db text.db
expect_bad_input "--save into a text file" "text.db" "$bin" plan "${tiny[@]}" --db text.db --save
[ "$(sha256sum text.db)" = "$before" ] && pass "the text file is untouched" || fail "the text file is untouched"
head -c 5000 "$db" >cut.db
before=$(sha256sum cut.db)
expect_bad_input "a truncated store" "cut.db" "$bin" db list --db cut.db
[ "$(sha256sum cut.db)" = "$before" ] && pass "the truncated store is untouched" || fail "the truncated store is untouched"

finish db_cli
