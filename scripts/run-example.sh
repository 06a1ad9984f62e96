#!/usr/bin/env bash
# Sets up, builds the shardcast command if needed, plans the bundled Llama-3.1-8B on 8 x H100
# example and prints the report; opens the GUI with the same plan when a display is present.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

example=examples/llama-3.1-8b-8xh100.json

bash scripts/install-deps.sh

if [ ! -f build/build.ninja ]; then
    cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
fi
targets=(shardcast)
if cmake --build build --target help | grep '^shardcast-gui:' >/dev/null; then
    targets+=(shardcast-gui)
fi
cmake --build build -j "$(nproc)" --target "${targets[@]}"

build/bin/shardcast plan "$example"

if [ -n "${DISPLAY:-}${WAYLAND_DISPLAY:-}" ] && [ -x build/bin/shardcast-gui ]; then
    echo
    echo "Opening the GUI with $example ..."
    exec build/bin/shardcast-gui "$example"
fi
