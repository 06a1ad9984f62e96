#!/usr/bin/env bash
# The first thing to run on a new NVIDIA GPU box (issue 8): builds shardcast (reusing the build
# folder if present), runs the GPU tests (ctest label `gpu`), then runs the bundled Llama-3.1-8B
# plan with one unit per block on this machine's GPU, emulating rank 0 of a node of 8 GPUs
# (`--emulate-rank 0`: every allocation and kernel for real, collectives filled locally), compares
# prediction with measurement (`shardcast compare`) and prints one table. With two or more GPUs and
# mpirun it also runs tiny-llama on 2 GPUs, one process each (NCCL between processes, --verify).
#   usage: scripts/gpu-check.sh [BUILD_DIR]      (default: build/ beside this script's repository)
# Environment: GPU_CHECK_STRATEGIES (default "FULL_SHARD SHARD_GRAD_OP"), GPU_CHECK_SCALE (a
# --scale value, e.g. layers=8, for a GPU with little memory), JOBS (build parallelism).
# Emulated collectives take no communication time, so the measured step is not comparable with
# the predicted one; the compute stream's busy time and the peak memory are.
set -uo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$src/build}
jobs=${JOBS:-$(nproc)}
strategies=${GPU_CHECK_STRATEGIES:-FULL_SHARD SHARD_GRAD_OP}
start=$SECONDS
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >"$tmp/gpus" 2>&1; then
    echo "gpu-check: no NVIDIA GPU or driver here (nvidia-smi -L failed): nothing to check" >&2
    exit 1
fi
echo "== GPUs"; cat "$tmp/gpus"

echo "== build ($build, $jobs jobs)"
if [ ! -f "$build/CMakeCache.txt" ]; then
    cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSHARDCAST_BUILD_BENCH=OFF >"$tmp/configure.log" 2>&1 ||
        { cat "$tmp/configure.log"; echo "gpu-check: cmake configure failed" >&2; exit 1; }
fi
cmake --build "$build" -j "$jobs" >"$tmp/build.log" 2>&1 || { tail -50 "$tmp/build.log"; echo "gpu-check: build failed" >&2; exit 1; }
shardcast=$build/bin/shardcast
if ! grep -q "cuda" <("$shardcast" run --help); then
    echo "gpu-check: $shardcast was built without the CUDA backend (see cmake's 'shardcast: CUDA' line)" >&2
    exit 1
fi

echo "== GPU tests (ctest -L gpu)"
ctest --test-dir "$build" -L gpu --output-on-failure --timeout 300
tests_rc=$?

# Several GPUs and mpirun: one process per GPU with real NCCL collectives between them.
gpu_count=$(grep -c '^GPU ' "$tmp/gpus")
multi="skipped (one GPU)"
if [ "$gpu_count" -ge 2 ] && command -v mpirun >/dev/null 2>&1; then
    echo "== tiny-llama on 2 GPUs under mpirun (NCCL between processes)"
    if timeout 120 "$src/scripts/mpirun.sh" -np 2 "$shardcast" run --backend cuda --model "$src/models/tiny-llama.json" \
        --nodes 1 --gpus-per-node 2 --seq-len 256 --warmup 1 --steps 3 --verify --out "$tmp/run-2gpu.json"; then
        multi="passed"
    else
        multi="FAILED"
    fi
elif [ "$gpu_count" -ge 2 ]; then
    multi="skipped (no mpirun)"
fi

echo "== Llama-3.1-8B per block, rank 0 of 8 emulated"
rows=()
for strategy in $strategies; do
    out="$tmp/run-$strategy.json"
    args=(run --backend cuda --model llama-3.1-8b --nodes 1 --gpus-per-node 8 --wrap block --strategy "$strategy"
          --emulate-rank 0 --warmup 1 --steps 3 --out "$out")
    [ -n "${GPU_CHECK_SCALE:-}" ] && args+=(--scale "$GPU_CHECK_SCALE")
    echo "-- shardcast ${args[*]}"
    if ! timeout 240 "$shardcast" "${args[@]}"; then
        rows+=("$strategy|run failed (see above)")
        continue
    fi
    if ! "$shardcast" compare run "$out" --json >"$tmp/cmp-$strategy.json" 2>"$tmp/cmp-$strategy.err"; then
        rows+=("$strategy|compare failed: $(head -1 "$tmp/cmp-$strategy.err")")
        continue
    fi
    rows+=("$strategy|$tmp/cmp-$strategy.json")
done

echo
echo "== Summary (prediction on the plan's GPU preset; errors are (predicted - measured) / measured)"
for row in "${rows[@]}"; do
    strategy=${row%%|*} what=${row#*|}
    if [ ! -f "$what" ]; then printf '%-14s %s\n' "$strategy" "$what"; continue; fi
    python3 - "$strategy" "$what" <<'PY' || { echo "$strategy: (python3 missing: raw comparison follows)"; cat "$what"; }
import json, sys
strategy, path = sys.argv[1], sys.argv[2]
c = json.load(open(path))
def ms(ns): return f"{ns / 1e6:9.2f} ms"
def err(e): return "      n/a" if e is None else f"{e * 100:+8.1f}%"
comp = c["streams"].get("compute", {})
print(f"{'strategy':<14}{'compute busy pred':>20}{'measured':>13}{'error':>10}   {'peak pred':>12}{'measured':>12}{'error':>10}   {'step pred':>12}{'measured*':>12}")
print(f"{strategy:<14}{ms(comp.get('predicted_busy_ns', 0)):>20}{ms(comp.get('measured_busy_ns', 0)):>13}{err(comp.get('error')):>10}   "
      f"{c['predicted_peak_bytes'] / 2**30:9.2f} GiB{c['measured_peak_bytes'] / 2**30:9.2f} GiB{err(c['peak_memory_error']):>10}   "
      f"{ms(c['predicted_step_ns']):>12}{ms(c['measured_step_ns']):>12}")
PY
done
echo "* measured step with collectives emulated (no communication): not comparable with the prediction"
echo "gpu-check: done in $((SECONDS - start)) s; gpu tests $([ $tests_rc -eq 0 ] && echo passed || echo FAILED); 2-GPU run $multi"
[ $tests_rc -eq 0 ] && [ "$multi" != "FAILED" ]
