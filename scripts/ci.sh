#!/usr/bin/env bash
# What CI runs (.ci/run): the README's test command (scripts/test.sh: dependencies, Release build,
# the whole suite), then one sanitizer build over every layer: clang in build-clang/ (-O1 with
# assertions; AddressSanitizer, LeakSanitizer, UndefinedBehaviorSanitizer with float-cast-overflow;
# libFuzzer coverage) with the GUI, the MPI backend and the CUDA backend (its host code
# instrumented, its kernels not: nvcc takes no -fsanitize), running the tests, then each fuzz target for
# SHARDCAST_FUZZ_SECONDS (default 30) through scripts/fuzz.sh. Prints the time of each stage.
#   SHARDCAST_SKIP_SANITIZE=1  only scripts/test.sh.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/stages.sh

stage "README test command (scripts/test.sh)" bash scripts/test.sh
if [ "${SHARDCAST_SKIP_SANITIZE:-0}" = 1 ]; then
    echo "ci.sh: SHARDCAST_SKIP_SANITIZE=1, skipping the sanitizer build"
    exit 0
fi

export ASAN_OPTIONS=halt_on_error=1:detect_leaks=1:print_stacktrace=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
stage "dependencies: clang (scripts/install-deps.sh --with-clang)" bash scripts/install-deps.sh --with-clang
stage "configure clang sanitizers (build-clang/)" \
    env CC=clang CXX=clang++ cmake -S . -B build-clang -G Ninja -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=-g -O1" \
    -DSHARDCAST_SANITIZE=ON -DSHARDCAST_FUZZ=ON -DSHARDCAST_BUILD_BENCH=OFF \
    -DSHARDCAST_WERROR="$werror"
stage "build clang sanitizers" cmake --build build-clang -j "$(nproc)"
stage "tests, clang sanitizers" ctest --test-dir build-clang --output-on-failure -j2 -LE gpu
stage "fuzz targets (scripts/fuzz.sh)" bash scripts/fuzz.sh build-clang "${SHARDCAST_FUZZ_SECONDS:-30}"
