#!/usr/bin/env bash
# End-to-end checks of `shardcast optimize`: the --json shape ({"best": {plan, time, memory}, "top",
# "front"}), --write-plan read back by `plan`, --pytorch, the no-fit statement and bad input.
#   usage: run_optimize_cli_tests.sh SHARDCAST_BINARY
set -uo pipefail
# shellcheck source=tests/cli/harness.sh
source "$(dirname "${BASH_SOURCE[0]}")/harness.sh"

bin=${1:?usage: run_optimize_cli_tests.sh SHARDCAST_BINARY}
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"

job=(--model llama-3.1-8b --gpu H100-SXM --nodes 1 --gpus-per-node 8 --seq-len 8192 --global-batch 32)
small=(--wrap every:8,block --ac none,full --fsdp 2)

# --- --json shape, --write-plan, --pytorch ---------------------------------------------------------
expect_exit "optimize --json exits 0" 0 "$bin" optimize "${job[@]}" "${small[@]}" --top 3 --json \
    --write-plan "$tmp/best.json" --pytorch "$tmp/apply.py"
cp "$tmp/out" "$tmp/opt.json"
check "optimize --json: best/top/front with plan, time and memory objects as plan --json prints them" '
import json, sys
d = json.load(open(sys.argv[1]))
assert list(d)[:3] == ["best", "top", "front"], list(d)
assert d["fits"] is True
for e in [d["best"]] + d["top"] + d["front"]:
    assert set(e) == {"plan", "time", "memory"}, set(e)
    assert e["plan"]["format"] == "shardcast-plan", e["plan"]
    assert e["time"]["step_s"] > 0 and e["time"]["tokens_per_s_per_gpu"] > 0
    assert e["memory"]["fits"] is True and e["memory"]["peak_bytes"] <= e["memory"]["budget_bytes"]
assert len(d["top"]) == 3
steps = [e["time"]["step_s"] for e in d["top"]]
assert steps == sorted(steps) and steps[0] == d["best"]["time"]["step_s"], steps
# The front is ordered by the figure the fit judges: reserved memory where the allocator is modelled.
judged = lambda m: m["reserved"]["peak_reserved_bytes"] if m.get("reserved") else m["peak_bytes"]
peaks = [judged(e["memory"]) for e in d["front"]]
fsteps = [e["time"]["step_s"] for e in d["front"]]
assert peaks == sorted(peaks) and fsteps == sorted(fsteps, reverse=True), (peaks, fsteps)
s = d["search"]
assert s["evaluated"] + s["pruned"] == s["space_size"] and s["batch_per_rank"] == 4
st = s["stats"]
assert st["pruned_by_memory"] + st["pruned_by_time"] == s["pruned"], st
assert st["bound_programs"] > 0, st
assert 0 <= st["loss_evaluations"] + st["front_evaluations"] <= s["evaluated"], st
assert d["best"]["plan"]["training"]["micro_batch"] * d["best"]["plan"]["training"]["grad_accum"] == 4
for l in d["losses"]:
    assert l["change"] <= 0, l
' "$tmp/opt.json"

expect_exit "plan reads the written winner back" 0 "$bin" plan "$tmp/best.json" --json
check "the written plan scores as the winner" '
import json, os, sys
d = json.load(open(sys.argv[1]))
o = json.load(open(os.path.join(os.path.dirname(sys.argv[1]), "opt.json")))
assert d["time"]["step_s"] == o["best"]["time"]["step_s"], (d["time"]["step_s"], o["best"]["time"]["step_s"])
assert d["memory"]["peak_bytes"] == o["best"]["memory"]["peak_bytes"]
' "$tmp/out"
check "optimize --pytorch writes valid Python" '
import ast, sys
src = open(sys.argv[1]).read()
ast.parse(src)
assert "fully_shard(model, mesh=mesh, mp_policy=mp)" in src and "micro-batch" in src
' "$tmp/apply.py"

expect_exit "optimize text exits 0" 0 "$bin" optimize "${job[@]}" "${small[@]}"
if grep -q "^Best: " "$tmp/out" && grep -q "^Pareto front" "$tmp/out" && grep -q "instead of" "$tmp/out" \
    && grep -q "tokens/s per GPU" "$tmp/out"; then
    pass "optimize text: best, front and what other choices lose"
else
    fail "optimize text: best, front and what other choices lose" "$(head -c 600 "$tmp/out")"
fi
if grep -q "^Search statistics:" "$tmp/out"; then
    fail "optimize text: statistics only with --stats"
else
    pass "optimize text: statistics only with --stats"
fi

expect_exit "optimize --stats exits 0" 0 "$bin" optimize "${job[@]}" "${small[@]}" --stats
if grep -q "^Search statistics:" "$tmp/out" && grep -q "Programs lowered (not simulated)" "$tmp/out" \
    && grep -q "by the peak-memory bound" "$tmp/out" && grep -q "simulate [0-9.]* ms" "$tmp/out" \
    && grep -q "reserved memory: the caching allocator replayed for [0-9]* of them" "$tmp/out"; then
    pass "optimize --stats: bound Programs, pruning per bound, time per stage"
else
    fail "optimize --stats: bound Programs, pruning per bound, time per stage" "$(head -c 600 "$tmp/out")"
fi

# --- nothing fits: exit 0, the closest configuration, by how much, what would help ---------------
expect_exit "optimize: nothing fits is exit 0" 0 "$bin" optimize --model llama-3.1-70b --nodes 1 --global-batch 8 \
    --strategy FULL_SHARD --fsdp 2 --wrap block --ac full --offload none --json --write-plan "$tmp/none.json"
check "optimize: nothing fits names the closest configuration, the overshoot and what would help" '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["fits"] is False and d["top"] == [] and d["front"] == []
m = d["no_fit"]
assert "Closest: strategy FULL_SHARD" in m and "over" in m and "more GPUs" in m and "--offload" in m, m
assert d["best"]["memory"]["fits"] is False
' "$tmp/out"
if [ ! -e "$tmp/none.json" ]; then pass "optimize: nothing fits writes no plan"; else fail "optimize: nothing fits writes no plan"; fi

# --- bad input: exit 2, one line naming the flag -----------------------------------------------------
expect_bad_input "optimize: batch that does not split over the ranks" "--global-batch 12" \
    "$bin" optimize --model llama-3.1-8b --global-batch 12
# 4 sequences over 8 GPUs: tp 2, 4 and 8 leave 4, 2 and 1 data-parallel ranks, each a divisor of 4.
expect_bad_input "optimize: a batch below one sequence per rank names the tp degrees it splits over" \
    "--global-batch 4 does not split over 8 ranks.*--tp 2,4,8$" "$bin" optimize --model llama-3.1-8b --global-batch 4
# 6 sequences: only tp 4 (2 ranks) and tp 8 (1 rank) divide it.
expect_bad_input "optimize: only the tp degrees the batch splits over are named" \
    "--tp 4,8$" "$bin" optimize --model llama-3.1-8b --global-batch 6
expect_bad_input "optimize: missing --global-batch" "global-batch" "$bin" optimize --model llama-3.1-8b
expect_bad_input "optimize: bad --strategy" "--strategy: 'zero9'" "$bin" optimize "${job[@]}" --strategy zero3,zero9
expect_bad_input "optimize: bad --ac" "--ac" "$bin" optimize "${job[@]}" --ac none,selective
expect_bad_input "optimize: bad --fsdp" "--fsdp: 3" "$bin" optimize "${job[@]}" --fsdp 3
expect_bad_input "optimize: bad --offload" "--offload: 'gpu'" "$bin" optimize "${job[@]}" --offload gpu
expect_bad_input "optimize: bad --shard-size" "--shard-size 3" "$bin" optimize "${job[@]}" --shard-size 3
expect_bad_input "optimize: bad --top" "--top" "$bin" optimize "${job[@]}" --top 0
expect_bad_input "optimize: bad --headroom" "headroom" "$bin" optimize "${job[@]}" --headroom 1.2
expect_bad_input "optimize: unknown model" "no-such-model" "$bin" optimize --model no-such-model --global-batch 8

# --- the fastest allocated fit is AT RISK on reserved memory: the next one wins, the other is shown -
# The README example's plan at 11,264 tokens: layer:2 allocates 65.81 GiB (fits the 75.67 GiB
# budget) but reserves 77.87 GiB; full checkpointing fits.
risk=(--model llama-3.1-8b --nodes 1 --seq-len 11264 --global-batch 8 --strategy FULL_SHARD --fsdp 2 --wrap block
    --ac layer:2,full --offload none --no-prefetch-search)
expect_exit "optimize: an at-risk configuration exits 0" 0 "$bin" optimize "${risk[@]}"
if grep -q "^Best: .*ac full" "$tmp/out" && grep -q "^Faster, but AT RISK (1 configuration:" "$tmp/out" \
    && grep -q "65.81 .*77.87  FULL_SHARD FSDP2, wrap block, ac layer:2" "$tmp/out"; then
    pass "optimize: the at-risk layer:2 is passed over for full checkpointing and shown with both peaks"
else
    fail "optimize: the at-risk layer:2 is passed over for full checkpointing and shown with both peaks" "$(head -c 1500 "$tmp/out")"
fi
expect_exit "optimize --json: an at-risk configuration" 0 "$bin" optimize "${risk[@]}" --json
check "optimize --json: at_risk lists it; replays counted apart from evaluations" '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["best"]["plan"]["training"]["ac"] == "full", d["best"]["plan"]["training"]
assert len(d["at_risk"]) == 1, d["at_risk"]
r = d["at_risk"][0]
assert r["plan"]["training"]["ac"] == "layer:2", r["plan"]["training"]
budget = d["best"]["memory"]["budget_bytes"]
reserved = r.get("reserved_bytes", r.get("reserved_at_least_bytes"))
assert r["allocated_bytes"] <= budget < reserved, (r, budget)
st = d["search"]["stats"]
assert 1 <= st["reserved_replays"] <= d["search"]["evaluated"] and st["reevaluations"] <= st["reserved_replays"], st
' "$tmp/out"

# --- checkpointing per block (--ac-per-block): the first-N answer, written and applied -------------
# Llama-3.1-8B cut to 4 blocks at 32,768 tokens: none does not fit, full*3,none*1 does and beats full
# (tests/simulator/optimize_test.cpp AFirstNPlanIsTheAnswerWhereNoneDoesNotFit works the figures).
four=(--model llama-3.1-8b --scale layers=4 --gpu H100-SXM --nodes 1 --gpus-per-node 8 --seq-len 32768
      --global-batch 8 --strategy FULL_SHARD --fsdp 2 --wrap block --offload none --no-prefetch-search)
expect_exit "optimize --ac none,full --ac-per-block exits 0" 0 "$bin" optimize "${four[@]}" --ac none,full --ac-per-block \
    --write-plan "$tmp/perblock.json" --pytorch "$tmp/perblock.py"
check "optimize --ac-per-block: the winner checkpoints the first 3 of 4 blocks" '
import sys
out = open(sys.argv[1]).read()
assert "ac blocks:full*3,none*1" in out.split("Best:")[1].splitlines()[0], out
assert "one mode for the whole model" not in out, out
' "$tmp/out"
expect_ok "plan reads the per-block winner back" "$bin" plan "$tmp/perblock.json"
check "plan names the per-block checkpointing" '
import sys
out = open(sys.argv[1]).read()
assert "AC mode      per block: full on blocks 0-2, none on 3" in out, out
' "$tmp/out"
check "--pytorch wraps blocks 0-2 in checkpoint_wrapper before fully_shard" '
import sys
code = open(sys.argv[1]).read()
assert "for i in range(0, 3):\n    model.model.layers[i] = checkpoint_wrapper(model.model.layers[i], preserve_rng_state=False)\n" in code, code
assert code.index("checkpoint_wrapper(model.model.layers[i]") < code.index("fully_shard(")
' "$tmp/perblock.py"
# The same 4 blocks at 8,192 tokens: none wins; each first-N pair of modes is priced once, by its best N.
expect_exit "optimize --ac-per-block at 8,192 tokens exits 0" 0 "$bin" optimize --model llama-3.1-8b --scale layers=4 \
    --gpu H100-SXM --nodes 1 --gpus-per-node 8 --seq-len 8192 --global-batch 32 --ac-per-block
check "optimize --ac-per-block: one loss line per pair of modes, with its best N" '
import re, sys
out = open(sys.argv[1]).read()
losses = out.split("What another choice loses")[1].split("Not searched")[0]
family = [l for l in losses.splitlines() if re.match(r"\s+ac\s+blocks:", l)]
assert len(family) == 3, family
for l in family:
    m = re.match(r"\s+ac\s+blocks:(\w+)\*N,(\w+)\*rest instead of none: -[0-9.]+% \([0-9.]+ ms\)  \[its best: blocks:(\w+)\*[123],(\w+)\*[123]\]$", l)
    assert m and m.group(1) == m.group(3) and m.group(2) == m.group(4), l
' "$tmp/out"
expect_bad_input "optimize --ac with a per-block spec short of the model" "--ac: 'blocks:full\*1,none\*1' covers 2 blocks" \
    "$bin" optimize "${four[@]}" --ac "none,blocks:full*1,none*1"

finish optimize
