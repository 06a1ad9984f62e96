#!/usr/bin/env bash
# `shardcast run --backend cpu` under mpirun, end to end (ctest label `mpi`).
# Usage: run_mpi_tests.sh SHARDCAST RUN_RECORD_CHECK SOURCE_DIR verify2|verify4|verify8|faults|save
#   verify2 / verify4: `run --verify` on 2 / 4 ranks over the strategies, FSDP1 and FSDP2, no_sync
#     accumulation and AC, and (4 ranks) 2 x 2 meshes of FSDP2 over tensor parallelism or inside
#     pipeline stages (1F1B, GPipe, Interleaved1F1B); verify8: 2 x 2 x 2 meshes (pp x dp x tp) on 8
#     ranks; each RUN.json is
#     checked by run_record_check (loads, world size, step count, timeline, counted memory == the
#     prediction's counted allocations, exact bytes).
#   save: run --save stores the run, its plan and prediction; compare --run --prediction reads them;
#     a profile calibrated on other cores (host_cores) gets a note.
#   faults: a corrupted all-gather fails verify naming unit, rank and element; a world-size
#     mismatch and a plan too big for this machine exit 2; a failing or killed rank ends the run
#     within 30 s naming the rank, and no RUN.json is written.
set -uo pipefail
shardcast=$1 check=$2 src=$3 mode=$4
mpirun_sh="$src/scripts/mpirun.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# The bundled tiny models.
llama="$src/models/tiny-llama.json"
gpt2="$src/models/tiny-gpt2.json"
small=(--seq-len 64 --micro-batch 1 --warmup 1 --steps 2)

n=0
# verify NP MODEL FLAGS...: runs `shardcast run --verify` on NP ranks and checks its RUN.json.
verify() {
    local np=$1 model=$2
    shift 2
    n=$((n + 1))
    local out="$tmp/run$n.json" log="$tmp/run$n.log"
    local start=$SECONDS
    if ! timeout 120 "$mpirun_sh" -np "$np" "$shardcast" run --backend cpu --model "$model" --nodes 1 \
        --gpus-per-node "$np" "${small[@]}" --verify --out "$out" "$@" >"$log" 2>&1; then
        fail "np $np $* exited non-zero:"; cat "$log"; return
    fi
    if ! grep -q "Verify              OK" "$log"; then fail "np $np $*: no verify line"; cat "$log"; return; fi
    if ! "$check" "$out" "$np" 2 >>"$log" 2>&1; then fail "np $np $*: RUN.json check"; cat "$log"; return; fi
    # A category whose counted maximum is not the predicted one says by how much, and why (a
    # difference under the printed precision also gets its delta, so only one direction is checked).
    if ! awk '/ max   predicted / { split($0, f, / max   predicted /); m = f[1]; sub(/^ *[A-Za-z ]*[a-z] +/, "", m);
            p = f[2]; sub(/   \(.*$/, "", p); d = (f[2] ~ /from timing\)$/);
            if (m != p && !d) { print "category line wrong: " $0; bad = 1 } } END { exit bad }' "$log"; then
        fail "np $np $*: per-category lines"; cat "$log"; return
    fi
    # compare says the verified run's checks are CPU work the plan does not have (the first only).
    # (grep reads all of compare's output: with -q it would quit at the match, and under pipefail
    # compare's SIGPIPE on its next line would fail the pipeline on a fast machine.)
    if [ "$n" = 1 ] && ! "$shardcast" compare run "$out" 2>&1 | grep "^Verified: the run checked every collective's data" >/dev/null; then
        fail "np $np $*: compare of a --verify run does not say so"; return
    fi
    echo "ok   np $np $(basename "$model") $* ($((SECONDS - start)) s): $(grep -o 'OK: [0-9]* collectives' "$log")"
}

case $mode in
verify2)
    for fsdp in 1 2; do
        for s in NO_SHARD SHARD_GRAD_OP FULL_SHARD; do verify 2 "$llama" --fsdp $fsdp --strategy $s; done
    done
    verify 2 "$llama" --strategy HYBRID_SHARD --shard-size 1
    verify 2 "$llama" --strategy _HYBRID_SHARD_ZERO2 --shard-size 1 --fsdp 1
    verify 2 "$llama" --strategy FULL_SHARD --grad-accum 2 --no-sync
    verify 2 "$llama" --strategy FULL_SHARD --reduce-dtype bf16
    verify 2 "$llama" --strategy SHARD_GRAD_OP --grad-accum 2 --no-sync --fsdp 1
    verify 2 "$llama" --strategy NO_SHARD --grad-accum 2 --no-sync --ac full
    verify 2 "$gpt2" --strategy FULL_SHARD --ac full --fsdp 1
    verify 2 "$gpt2" --strategy FULL_SHARD --ac full --fsdp 2 --grad-accum 2
    ;;
verify4)
    verify 4 "$llama" --strategy FULL_SHARD --fsdp 2
    verify 4 "$llama" --strategy SHARD_GRAD_OP --fsdp 1 --ac full
    verify 4 "$llama" --strategy NO_SHARD --fsdp 2 --grad-accum 2 --no-sync
    verify 4 "$llama" --strategy HYBRID_SHARD --shard-size 2 --fsdp 2
    verify 4 "$llama" --strategy _HYBRID_SHARD_ZERO2 --shard-size 2 --fsdp 1 --grad-accum 2 --no-sync
    verify 4 "$gpt2" --strategy HYBRID_SHARD --shard-size 2 --fsdp 1 --ac full
    # 2 x 2 meshes: FSDP2 over tensor parallelism (the tp collectives inside the compute tasks).
    verify 4 "$llama" --strategy FULL_SHARD --tp 2
    verify 4 "$llama" --strategy FULL_SHARD --tp 2 --ac full --sequence-parallel false --loss-parallel false
    # GPT-2 under Megatron-LM's plan (two embeddings, the tied LM head, the uneven vocabulary).
    verify 4 "$gpt2" --strategy FULL_SHARD --tp 2 --grad-accum 2
    # 2 x 2 meshes: FSDP2 inside 2 pipeline stages (P2P sends and receives between them).
    verify 4 "$llama" --strategy FULL_SHARD --pp 2 --grad-accum 3
    verify 4 "$llama" --strategy FULL_SHARD --pp 2 --pp-schedule GPipe --grad-accum 2 --ac full
    # Interleaved1F1B: two stages per rank, the last rank's stage 1 sending to rank 0's stage 2.
    verify 4 "$llama" --strategy FULL_SHARD --pp 2 --pp-schedule Interleaved1F1B --pp-virtual-stages 2 --grad-accum 4
    ;;
verify8)
    # 2 x 2 x 2 meshes: pipeline stages of FSDP2 over tensor parallelism.
    verify 8 "$llama" --strategy FULL_SHARD --pp 2 --tp 2 --grad-accum 4
    verify 8 "$llama" --strategy HYBRID_SHARD --shard-size 1 --pp 2 --tp 2 --grad-accum 2 --pp-schedule GPipe --ac full
    verify 8 "$llama" --strategy FULL_SHARD --pp 2 --tp 2 --grad-accum 4 --pp-schedule Interleaved1F1B --pp-virtual-stages 2 \
        --ac full
    ;;
save)
    # run --save on 2 ranks: rank 0 stores the run, its plan and its prediction once; the stored
    # run compares with the stored prediction; the stored record is the one --out wrote.
    db="$tmp/store.db"
    if ! timeout 120 "$mpirun_sh" -np 2 "$shardcast" run --backend cpu --model "$llama" --nodes 1 --gpus-per-node 2 \
        "${small[@]}" --out "$tmp/saved.json" --db "$db" --save nightly >"$tmp/save.log" 2>&1; then
        fail "run --save exited non-zero"; cat "$tmp/save.log"
    fi
    grep -q "Saved run-1 (plan plan-1, prediction pred-1)" "$tmp/save.log" || { fail "run --save: no saved line"; cat "$tmp/save.log"; }
    [[ $(grep -c "^Saved run-" "$tmp/save.log") == 1 ]] || fail "run --save: not saved exactly once"
    "$shardcast" db list --db "$db" --json >"$tmp/list.json" 2>&1 || fail "db list after run --save"
    python3 - "$tmp/list.json" <<'PY' || fail "db list after run --save: contents"
import json, sys
d = json.load(open(sys.argv[1]))
ids = sorted(e["id"] for e in d)
assert ids == ["plan-1", "pred-1", "prof-1", "run-1"], ids
run = [e for e in d if e["id"] == "run-1"][0]
assert run["name"] == "nightly" and run["links"] == ["plan-1"], run
PY
    "$shardcast" db export run-1 --db "$db" --out "$tmp/exported.json" 2>"$tmp/export.log" || fail "db export run-1"
    python3 -c 'import json,sys; a=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2])); assert a == b' \
        "$tmp/exported.json" "$tmp/saved.json" || fail "the stored run record differs from --out's"
    if ! "$shardcast" compare --run run-1 --prediction pred-1 --db "$db" --save >"$tmp/cmp.log" 2>&1; then
        fail "compare --run run-1 --prediction pred-1"; cat "$tmp/cmp.log"
    fi
    grep -q "Saved cmp-1" "$tmp/cmp.log" || { fail "compare --save: no saved line"; cat "$tmp/cmp.log"; }
    echo "ok   run --save, db export, compare --run --prediction --save"
    # A CPU profile calibrated on a machine of other cores: the run says so (and still runs).
    python3 -c 'import json,sys; p=json.load(open(sys.argv[1]))["profile"]; p["host_cores"]=999; json.dump(p, open(sys.argv[2], "w"))' \
        "$tmp/saved.json" "$tmp/other-cores.json" || fail "writing a profile of 999 cores"
    if ! timeout 120 "$mpirun_sh" -np 2 "$shardcast" run --backend cpu --model "$llama" --nodes 1 --gpus-per-node 2 \
        "${small[@]}" --profile "$tmp/other-cores.json" >"$tmp/cores.log" 2>&1; then
        fail "run with a profile of other cores exited non-zero"; cat "$tmp/cores.log"
    fi
    grep -q "note: the profile's host_cores is 999 but this process may run on" "$tmp/cores.log" ||
        { fail "run with a profile of other cores: no note"; cat "$tmp/cores.log"; }
    echo "ok   run with a profile calibrated on other cores says so"
    ;;
faults)
    base=(run --backend cpu --model "$llama" --nodes 1 --gpus-per-node 2 "${small[@]}")
    # A corrupted all-gather: verify fails naming the unit, the rank and the element; no record.
    SHARDCAST_TEST_CORRUPT=1 timeout 60 "$mpirun_sh" -np 2 "$shardcast" "${base[@]}" --verify --out "$tmp/bad.json" \
        >"$tmp/corrupt.log" 2>&1
    rc=$?
    if [[ $rc == 0 ]]; then fail "corrupted collective: exit 0"; fi
    if ! grep -Eq "verify failed for unit .* on rank [0-9]+ .*: element [0-9]+ of the all-gathered parameters is .*, expected" \
        "$tmp/corrupt.log"; then
        fail "corrupted collective: no message naming unit, rank and element"; cat "$tmp/corrupt.log"
    fi
    [[ -e "$tmp/bad.json" ]] && fail "corrupted collective: RUN.json written"
    echo "ok   corrupted all-gather -> exit $rc: $(grep -m1 -o 'verify failed.*' "$tmp/corrupt.log" | cut -c1-160)"

    # A corrupted reduce-scatter: the shard holding element 0 is not the mean over the ranks.
    SHARDCAST_TEST_CORRUPT=2 timeout 60 "$mpirun_sh" -np 2 "$shardcast" "${base[@]}" --verify --out "$tmp/bad.json" \
        >"$tmp/corrupt2.log" 2>&1
    rc=$?
    if [[ $rc == 0 ]]; then fail "corrupted reduce-scatter: exit 0"; fi
    if ! grep -Eq "verify failed for unit .* on rank 0 .*: element 0 of the reduce-scattered shard of the gradient .* expected .*mean over ranks \[0,1\]" \
        "$tmp/corrupt2.log"; then
        fail "corrupted reduce-scatter: no message naming unit, rank and element"; cat "$tmp/corrupt2.log"
    fi
    [[ -e "$tmp/bad.json" ]] && fail "corrupted reduce-scatter: RUN.json written"
    echo "ok   corrupted reduce-scatter -> exit $rc: $(grep -m1 -o 'verify failed.*' "$tmp/corrupt2.log" | cut -c1-160)"

    # A corrupted pipeline send (the last stage's input gradient): the receiving stage's verify
    # names the byte, the sending stage and its rank.
    SHARDCAST_TEST_CORRUPT=3 timeout 60 "$mpirun_sh" -np 2 "$shardcast" "${base[@]}" --pp 2 --grad-accum 2 --verify \
        --out "$tmp/bad.json" >"$tmp/corrupt3.log" 2>&1
    rc=$?
    if [[ $rc == 0 ]]; then fail "corrupted pipeline send: exit 0"; fi
    if ! grep -Eq "rank 0, RECV grad mb0 .*verify failed: byte 0 of the input gradients received from stage 1 \(rank 1\)" \
        "$tmp/corrupt3.log"; then
        fail "corrupted pipeline send: no message naming the receive, the byte and the sender"; cat "$tmp/corrupt3.log"
    fi
    [[ -e "$tmp/bad.json" ]] && fail "corrupted pipeline send: RUN.json written"
    echo "ok   corrupted pipeline send -> exit $rc: $(grep -m1 -o 'verify failed.*' "$tmp/corrupt3.log" | cut -c1-160)"

    # World size from mpirun != the plan's: exit 2 naming both numbers.
    timeout 60 "$mpirun_sh" -np 3 "$shardcast" "${base[@]}" >"$tmp/np3.log" 2>&1
    rc=$?
    if [[ $rc != 2 ]]; then fail "world-size mismatch: exit $rc, expected 2"; fi
    grep -q "mpirun started 3 ranks but the plan needs 2" "$tmp/np3.log" || { fail "world-size mismatch message"; cat "$tmp/np3.log"; }
    echo "ok   world-size mismatch -> exit $rc"

    # A 2-rank plan without mpirun: how to launch (and install), exit 2.
    "$shardcast" "${base[@]}" >"$tmp/nompi.log" 2>&1
    rc=$?
    if [[ $rc != 2 ]]; then fail "without mpirun: exit $rc, expected 2"; fi
    grep -q "scripts/mpirun.sh -np 2 shardcast run" "$tmp/nompi.log" && grep -q "libopenmpi-dev openmpi-bin" "$tmp/nompi.log" ||
        { fail "without mpirun: message"; cat "$tmp/nompi.log"; }
    [[ $(wc -l <"$tmp/nompi.log") == 1 ]] || fail "without mpirun: more than one line"
    echo "ok   no mpirun -> exit $rc"

    # A plan too big for this machine's memory: refused before allocating, naming both byte counts.
    "$shardcast" run --backend cpu --model llama-3.1-70b --strategy NO_SHARD --nodes 1 --gpus-per-node 1 \
        --out "$tmp/big.json" >"$tmp/big.log" 2>&1
    rc=$?
    if [[ $rc != 2 ]]; then fail "too big: exit $rc, expected 2"; fi
    grep -Eq "predicted peak is [0-9]+ bytes .* MemAvailable is [0-9]+ bytes" "$tmp/big.log" || { fail "too big: message"; cat "$tmp/big.log"; }
    [[ -e "$tmp/big.json" ]] && fail "too big: RUN.json written"
    echo "ok   too big -> exit $rc"

    # One rank fails a task, one rank is killed: the run ends within 30 s naming the rank.
    for hook in SHARDCAST_TEST_FAIL_RANK SHARDCAST_TEST_KILL_RANK; do
        start=$(date +%s%N)
        env "$hook=1" timeout 60 "$mpirun_sh" -np 2 "$shardcast" "${base[@]}" --out "$tmp/partial.json" >"$tmp/$hook.log" 2>&1
        rc=$?
        ms=$((($(date +%s%N) - start) / 1000000))
        if [[ $rc == 0 || $rc == 124 ]]; then fail "$hook: exit $rc"; fi
        if ((ms > 30000)); then fail "$hook: took $ms ms (> 30 s)"; fi
        grep -Eq "rank 1" "$tmp/$hook.log" || { fail "$hook: rank 1 not named"; cat "$tmp/$hook.log"; }
        [[ -e "$tmp/partial.json" ]] && fail "$hook: RUN.json written"
        echo "ok   $hook=1 -> exit $rc after $ms ms: $(grep -m1 -Eo '.{0,40}rank 1.{0,80}' "$tmp/$hook.log")"
    done
    ;;
*)
    echo "unknown mode $mode"; exit 2 ;;
esac

if ((failures > 0)); then echo "$failures failure(s)"; exit 1; fi
echo "all passed"
