#!/usr/bin/env bash
# Sets up the dependencies and passes the test suite three times:
#   1. a Release build in build/ (warnings are errors when CI=true);
#   2. a Debug build in build-asan/ with AddressSanitizer, LeakSanitizer and
#      UndefinedBehaviorSanitizer (SHARDCAST_SANITIZE=ON, assertions on, no benchmarks), where any
#      finding fails the test that ran into it;
#   3. a clang build in build-clang/ (the second compiler; -O1 with assertions, ASan + UBSan +
#      float-cast-overflow, libFuzzer; no GUI, MPI, CUDA or benchmarks) running the tests, then each
#      fuzz target for SHARDCAST_FUZZ_SECONDS (default 30) through scripts/fuzz.sh.
#   SHARDCAST_SKIP_SANITIZE=1  only the Release build (a quick local run).
#   SHARDCAST_SKIP_CLANG=1     no clang build.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/install-deps.sh

werror=OFF
if [ "${CI:-}" = true ]; then
    werror=ON
fi

echo "test.sh: Release build (build/)"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DSHARDCAST_WERROR="$werror"
cmake --build build -j "$(nproc)"
ctest --test-dir build --output-on-failure -j2

if [ "${SHARDCAST_SKIP_SANITIZE:-0}" = 1 ]; then
    echo "test.sh: SHARDCAST_SKIP_SANITIZE=1, skipping the sanitizer build"
    exit 0
fi

echo "test.sh: Debug build with ASan + UBSan (build-asan/)"
# Set for the build too: test discovery runs the test programs.
export ASAN_OPTIONS=halt_on_error=1:detect_leaks=1:print_stacktrace=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DSHARDCAST_SANITIZE=ON \
    -DSHARDCAST_BUILD_BENCH=OFF -DSHARDCAST_WERROR="$werror"
cmake --build build-asan -j "$(nproc)"
ctest --test-dir build-asan --output-on-failure -j2

if [ "${SHARDCAST_SKIP_CLANG:-0}" = 1 ]; then
    echo "test.sh: SHARDCAST_SKIP_CLANG=1, skipping the clang build"
    exit 0
fi

echo "test.sh: clang build with ASan + UBSan + libFuzzer (build-clang/)"
CC=clang CXX=clang++ cmake -S . -B build-clang -G Ninja -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=-g -O1" \
    -DSHARDCAST_SANITIZE=ON -DSHARDCAST_FUZZ=ON -DSHARDCAST_BUILD_GUI=OFF -DSHARDCAST_WITH_MPI=OFF \
    -DSHARDCAST_WITH_CUDA=OFF -DSHARDCAST_BUILD_BENCH=OFF -DSHARDCAST_WERROR="$werror"
cmake --build build-clang -j "$(nproc)"
ctest --test-dir build-clang --output-on-failure -j2 -LE "mpi|gpu"
bash scripts/fuzz.sh build-clang "${SHARDCAST_FUZZ_SECONDS:-30}"
