#!/usr/bin/env bash
# The README's test command: sets up the dependencies, builds Release in build/ (warnings are
# errors when CI=true) and passes the whole test suite, printing the time of each stage.
# CI runs this, then the sanitizer and fuzzing build (scripts/ci.sh).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/stages.sh

stage "dependencies (scripts/install-deps.sh)" bash scripts/install-deps.sh
stage "configure Release (build/)" \
    cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DSHARDCAST_WERROR="$werror"
stage "build Release" cmake --build build -j "$(nproc)"
stage "tests, Release" ctest --test-dir build --output-on-failure -j2
