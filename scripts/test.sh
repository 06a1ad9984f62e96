#!/usr/bin/env bash
# Sets up the dependencies, builds everything into build/ (Release) and runs the test suite.
# Warnings are errors when CI=true.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/install-deps.sh

werror=OFF
if [ "${CI:-}" = true ]; then
    werror=ON
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DSHARDCAST_WERROR="$werror"
cmake --build build -j "$(nproc)"
ctest --test-dir build --output-on-failure -j2
