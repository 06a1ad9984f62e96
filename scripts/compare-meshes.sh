#!/usr/bin/env bash
# Issue 25's execution check on this machine: for the 2 x 2 mesh (dp 2 x tp 2, 4 ranks) and the
# 2 x 2 x 2 mesh (pp 2 x dp 2 x tp 2, 8 ranks) of the bundled tiny Llama: calibrate with the run's
# rank count, run the plan on the CPU backend once with --verify (the collectives' and sends'
# data checked), then time it without (the checks are CPU work the plan does not have) and compare
# each run with its prediction. Prints each compare's step-time and peak-memory lines (docs/calibration.md, "More
# ranks than cores", has the figures of 5 December 2026). Timings, not a test: a busy machine
# scatters them; run it on an idle one.
# Usage: scripts/compare-meshes.sh [--quick] [--runs N] [--bin build/bin/shardcast]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bin=build/bin/shardcast
quick=()
runs=2
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) quick=(--quick) ;;
        --runs) runs="$2"; shift ;;
        --bin) bin="$2"; shift ;;
        -h|--help) sed -n 2,8p "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "compare-meshes.sh: unknown argument '$1' (valid: --quick, --runs N, --bin PATH)" >&2; exit 2 ;;
    esac
    shift
done
if [ ! -x "$bin" ]; then
    echo "compare-meshes.sh: no shardcast binary at $bin: build it first (cmake --build build --target shardcast)" >&2
    exit 2
fi
if ! [[ "$runs" =~ ^[1-9][0-9]*$ ]]; then
    echo "compare-meshes.sh: --runs must be a positive integer (got '$runs')" >&2
    exit 2
fi

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
model=models/tiny-llama.json

mesh() {  # name ranks flags...
    local name=$1 ranks=$2
    shift 2
    echo "== $name: $ranks ranks ($*)"
    bash scripts/mpirun.sh -np "$ranks" "$bin" calibrate --backend cpu "${quick[@]}" --out "$out/$name.profile.json" \
        >"$out/$name.calibrate.log" 2>&1 || { cat "$out/$name.calibrate.log" >&2; exit 1; }
    grep -E "host_cores|fit rms" "$out/$name.calibrate.log" | sed 's/^/   calibrate: /'
    local plan=(--backend cpu --model "$model" --gpu cpu --gpus-per-node "$ranks" --seq-len 256 --grad-accum 4 "$@"
        --profile "$out/$name.profile.json")
    # --verify checks every collective's data: extra CPU work, so the timed runs go without it.
    bash scripts/mpirun.sh -np "$ranks" "$bin" run "${plan[@]}" --verify --steps 1 >"$out/$name.verify.log" 2>&1 ||
        { cat "$out/$name.verify.log" >&2; exit 1; }
    grep -E "^Verify" "$out/$name.verify.log" | sed "s/^/   /"
    for i in $(seq 1 "$runs"); do
        bash scripts/mpirun.sh -np "$ranks" "$bin" run "${plan[@]}" --out "$out/$name.run.json" >"$out/$name.run.log" 2>&1 ||
            { cat "$out/$name.run.log" >&2; exit 1; }
        "$bin" compare run "$out/$name.run.json" | grep -E "^(step time|total|compute) " | sed "s/^/   run $i: /"
    done
}

mesh "2x2" 4 --tp 2
mesh "2x2x2" 8 --tp 2 --pp 2
