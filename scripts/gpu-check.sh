#!/usr/bin/env bash
# The first thing to run on a new NVIDIA GPU box (issue 8): builds shardcast (reusing the build
# folder if present), runs the GPU tests (ctest label `gpu`), calibrates this machine
# (`shardcast calibrate --backend cuda --quick`: the 8B plan's GEMM shapes, a square sweep, HBM,
# and NCCL over every local GPU when there are two or more), then runs the bundled Llama-3.1-8B
# plan with one unit per block on this machine's GPU, emulating rank 0 of a node of 8 GPUs
# (`--emulate-rank 0`: every allocation and kernel for real, collectives filled locally),
# predicted on the calibrated profile, compares prediction with measurement (`shardcast compare`)
# and prints one summary table; the same for FULL_SHARD with tensor parallelism (--tp 2, its
# collectives emulated too). With two or more GPUs it also runs tiny-llama on 2 GPUs, a thread per
# GPU (`--gpus 2`, NCCL between them, --verify), the same with --tp 2 (NCCL tensor-parallel
# collectives inside the compute tasks) and with --pp 2 (two pipeline stages, ncclSend / ncclRecv,
# 1F1B and Interleaved1F1B), and under mpirun one process per GPU.
# Budget: within 8 minutes on one H100 / H200 with a build folder present (calibration about a
# minute with --quick; each 8B run a few seconds after its warmup).
#   usage: scripts/gpu-check.sh [BUILD_DIR]      (default: build/ beside this script's repository)
# A build folder with no CMakeCache.txt but bin/shardcast and bin/shardcast-cuda (scripts/gpu-pack.sh,
# run through scripts/gpu-prebuilt.sh) is used as it is, the GPU tests run from bin/cuda_gpu_test.
# With compute-sanitizer on the PATH, tiny-llama runs under its memcheck too.
# Environment: GPU_CHECK_KEEP=DIR keeps the calibration, runs and comparisons in
# DIR/gpu-check-results.tar.gz; GPU_CHECK_STRATEGIES (default "FULL_SHARD SHARD_GRAD_OP"), GPU_CHECK_SCALE (a
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

if [ ! -f "$build/CMakeCache.txt" ] && [ -x "$build/bin/shardcast" ] && [ -x "$build/bin/shardcast-cuda" ]; then
    # A prebuilt folder (scripts/gpu-pack.sh): binaries built elsewhere against the same CUDA major, no CMake cache.
    echo "== prebuilt binaries in $build/bin (no CMakeCache.txt): not building"
else
echo "== build ($build, $jobs jobs)"
if [ ! -f "$build/CMakeCache.txt" ]; then
    cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSHARDCAST_BUILD_BENCH=OFF >"$tmp/configure.log" 2>&1 ||
        { cat "$tmp/configure.log"; echo "gpu-check: cmake configure failed" >&2; exit 1; }
fi
cmake --build "$build" -j "$jobs" >"$tmp/build.log" 2>&1 || { tail -50 "$tmp/build.log"; echo "gpu-check: build failed" >&2; exit 1; }
fi
shardcast=$build/bin/shardcast
if ! grep -q "cuda" <("$shardcast" run --help); then
    echo "gpu-check: $shardcast was built without the CUDA backend (see cmake's 'shardcast: CUDA' line)" >&2
    exit 1
fi

if [ -f "$build/CTestTestfile.cmake" ]; then
    echo "== GPU tests (ctest -L gpu)"
    ctest --test-dir "$build" -L gpu --output-on-failure --timeout 300
    tests_rc=$?
else
    echo "== GPU tests ($build/bin/cuda_gpu_test; no CTest files in a prebuilt folder)"
    timeout 600 "$build/bin/cuda_gpu_test"
    tests_rc=$?
fi

# Memory errors in the backend's kernels and its use of cuBLASLt and NCCL: tiny-llama under
# compute-sanitizer's memcheck, where the toolkit has it (a leak or bad access exits 9; failed API calls
# are not reported: NCCL probes kernels it has no image for, and every call of ours is checked).
sanitizer="skipped (no compute-sanitizer)"
if command -v compute-sanitizer >/dev/null 2>&1; then
    echo "== compute-sanitizer memcheck: tiny-llama, one rank with --verify, then rank 0 of tp 2 x pp 2 emulated"
    sanitizer="clean"
    for extra in "--gpus-per-node 1 --verify" "--gpus-per-node 4 --tp 2 --pp 2 --grad-accum 2 --emulate-rank 0"; do
        # shellcheck disable=SC2086
        timeout 240 compute-sanitizer --tool memcheck --leak-check full --report-api-errors no --error-exitcode 9 "$build/bin/shardcast-cuda" \
            run --backend cuda --model "$src/models/tiny-llama.json" --nodes 1 --seq-len 128 --warmup 0 --steps 1 \
            $extra --out "$tmp/run-sanitized.json" || sanitizer="FAILED ($extra)"
    done
fi

echo "== calibrate (shardcast calibrate --backend cuda --quick)"
profile="$tmp/profile.json"
calibration="calibration failed (see above)"
if timeout 240 "$shardcast" calibrate --backend cuda --quick --model llama-3.1-8b --out "$profile" --json \
    >"$tmp/calibration.json"; then
    calibration="$tmp/calibration.json"
    profile_args=(--profile "$profile")
else
    profile_args=()  # predicted on the plan's GPU preset instead; the summary says so
fi

# Several GPUs and mpirun: one process per GPU with real NCCL collectives between them.
gpu_count=$(grep -c '^GPU ' "$tmp/gpus")
multi="skipped (one GPU)"
threads="skipped (one GPU)"
tiny=(run --backend cuda --model "$src/models/tiny-llama.json" --nodes 1 --gpus-per-node 2 --seq-len 256 --warmup 1
      --steps 3 --verify)
if [ "$gpu_count" -ge 2 ]; then
    echo "== tiny-llama on 2 GPUs, a thread per GPU (--gpus 2, NCCL between threads)"
    if timeout 120 "$shardcast" "${tiny[@]}" --gpus 2 --out "$tmp/run-2gpu-threads.json"; then
        threads="passed"
    else
        threads="FAILED"
    fi
    multi="skipped (no mpirun)"
fi
tp_threads="skipped (one GPU)"
if [ "$gpu_count" -ge 2 ]; then
    echo "== tiny-llama with tensor parallelism over 2 GPUs (--tp 2, NCCL collectives inside the compute tasks)"
    if timeout 120 "$shardcast" "${tiny[@]}" --gpus 2 --tp 2 --out "$tmp/run-2gpu-tp.json"; then
        tp_threads="passed"
    else
        tp_threads="FAILED"
    fi
fi
pp_threads="skipped (one GPU)"
if [ "$gpu_count" -ge 2 ]; then
    echo "== tiny-llama in 2 pipeline stages over 2 GPUs (--pp 2, 1F1B then Interleaved1F1B; ncclSend / ncclRecv)"
    pp_threads="passed"
    for schedule in "--pp-schedule 1F1B" "--pp-schedule Interleaved1F1B --pp-virtual-stages 2"; do
        # shellcheck disable=SC2086
        timeout 120 "$shardcast" "${tiny[@]}" --gpus 2 --pp 2 --grad-accum 4 $schedule --out "$tmp/run-2gpu-pp.json" ||
            pp_threads="FAILED"
    done
fi
if [ "$gpu_count" -ge 2 ] && command -v mpirun >/dev/null 2>&1; then
    echo "== tiny-llama on 2 GPUs under mpirun (NCCL between processes)"
    if timeout 120 "$src/scripts/mpirun.sh" -np 2 "$shardcast" "${tiny[@]}" --out "$tmp/run-2gpu.json"; then
        multi="passed"
    else
        multi="FAILED"
    fi
fi

echo "== Llama-3.1-8B per block, rank 0 of 8 emulated"
rows=()
for strategy in $strategies; do
    out="$tmp/run-$strategy.json"
    args=(run --backend cuda --model llama-3.1-8b --nodes 1 --gpus-per-node 8 --wrap block --strategy "$strategy"
          --emulate-rank 0 --warmup 1 --steps 3 --out "$out" ${profile_args[@]+"${profile_args[@]}"})
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
# The same with tensor parallelism: tp 2 inside the node, FSDP over the 4 dp ranks.
out="$tmp/run-tp2.json"
args=(run --backend cuda --model llama-3.1-8b --nodes 1 --gpus-per-node 8 --wrap block --strategy FULL_SHARD --tp 2
      --emulate-rank 0 --warmup 1 --steps 3 --out "$out" ${profile_args[@]+"${profile_args[@]}"})
[ -n "${GPU_CHECK_SCALE:-}" ] && args+=(--scale "$GPU_CHECK_SCALE")
echo "-- shardcast ${args[*]}"
if ! timeout 240 "$shardcast" "${args[@]}"; then
    rows+=("FULL_SHARD_tp2|run failed (see above)")
elif ! "$shardcast" compare run "$out" --json >"$tmp/cmp-tp2.json" 2>"$tmp/cmp-tp2.err"; then
    rows+=("FULL_SHARD_tp2|compare failed: $(head -1 "$tmp/cmp-tp2.err")")
else
    rows+=("FULL_SHARD_tp2|$tmp/cmp-tp2.json")
fi

echo
echo "== Summary"
summary_args=("$calibration")
for row in "${rows[@]}"; do summary_args+=("$row"); done
python3 - "${summary_args[@]}" <<'PY' || echo "gpu-check: python3 missing or failed: no summary table"
import json, os, sys
calibration, rows = sys.argv[1], sys.argv[2:]
def ms(ns): return f"{ns / 1e6:.2f} ms"
def err(e): return "n/a" if e is None else f"{e * 100:+.1f}%"
if os.path.isfile(calibration):
    c = json.load(open(calibration))
    fit = c["fit"]["gemm_bf16"]
    print(f"calibration: {c['gpus']} x {c['gpu']}: bf16 GEMM max {fit['forward_flops_per_s_max'] / 1e12:.1f} TFLOP/s "
          f"(fit rms {fit['rms_relative_error'] * 100:.1f}%), HBM {c['fit']['memory_bytes_per_s'] / 1e9:.0f} GB/s, "
          f"communication {'measured' if c['communication_measured'] else 'not measured (one GPU)'}; "
          f"predictions below use this profile")
else:
    print(f"calibration: {calibration}; predictions below use the plan's GPU preset")
head = ["strategy", "compute busy pred", "measured", "error", "peak pred", "measured", "error", "step pred", "measured*"]
table, failed = [head], []
for row in rows:
    strategy, what = row.split("|", 1)
    if not os.path.isfile(what):
        failed.append(f"{strategy}: {what}")
        continue
    c = json.load(open(what))
    comp = c["streams"].get("compute", {})
    table.append([strategy, ms(comp.get("predicted_busy_ns", 0)), ms(comp.get("measured_busy_ns", 0)), err(comp.get("error")),
                  f"{c['predicted_peak_bytes'] / 2**30:.2f} GiB", f"{c['measured_peak_bytes'] / 2**30:.2f} GiB",
                  err(c["peak_memory_error"]), ms(c["predicted_step_ns"]), ms(c["measured_step_ns"])])
widths = [max(len(r[i]) for r in table) for i in range(len(head))]
for r in table:
    print("  ".join(f"{v:<{widths[i]}}" if i == 0 else f"{v:>{widths[i]}}" for i, v in enumerate(r)))
for line in failed:
    print(line)
print("* measured step with collectives emulated (no communication): not comparable with the prediction; "
      "errors are (predicted - measured) / measured")
PY
if [ -n "${GPU_CHECK_KEEP:-}" ]; then
    mkdir -p "$GPU_CHECK_KEEP" && tar -czf "$GPU_CHECK_KEEP/gpu-check-results.tar.gz" -C "$tmp" . &&
        echo "gpu-check: calibration, runs and comparisons kept in $GPU_CHECK_KEEP/gpu-check-results.tar.gz"
fi
echo "gpu-check: done in $((SECONDS - start)) s; gpu tests $([ $tests_rc -eq 0 ] && echo passed || echo FAILED);" \
     "compute-sanitizer $sanitizer;" \
     "calibration $([ -f "$calibration" ] && echo "done" || echo FAILED); 2-GPU threads $threads; 2-GPU tp $tp_threads; 2-GPU pp $pp_threads; 2-GPU mpirun $multi"
[ $tests_rc -eq 0 ] && [ -f "$calibration" ] && [ "${sanitizer#FAILED}" = "$sanitizer" ] && [ "$multi" != "FAILED" ] && [ "$threads" != "FAILED" ] && [ "$tp_threads" != "FAILED" ] && [ "$pp_threads" != "FAILED" ]
