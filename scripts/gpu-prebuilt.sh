#!/usr/bin/env bash
# Runs scripts/gpu-check.sh on a GPU machine with binaries packed by scripts/gpu-pack.sh, without
# building there: puts them in build/bin, finds the machine's own cuBLASLt and NCCL (the CUDA
# toolkit's or a Python wheel's), and links this checkout to the source folder the test binaries
# were built in when that path is free (they name their source folder and shardcast by path).
#   usage: bash scripts/gpu-prebuilt.sh [PACK_DIR]   (default .gpu/); GPU_CHECK_KEEP as gpu-check.sh
set -uo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
pack=${1:-$src/.gpu}
[ -d "$pack/bin" ] || { echo "gpu-prebuilt: $pack/bin is missing: run scripts/gpu-pack.sh where you built" >&2; exit 1; }
mkdir -p "$src/build/bin" && cp "$pack"/bin/* "$src/build/bin/"
libdirs="$pack/lib"
for lib in libcublasLt.so.13 libnccl.so.2; do
    found=$(find /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local /opt /usr/lib -name "$lib" 2>/dev/null | head -1)
    [ -n "$found" ] || { echo "gpu-prebuilt: $lib not found on this machine" >&2; exit 1; }
    echo "gpu-prebuilt: $lib from $found"
    libdirs="$libdirs:$(dirname "$found")"
done
for lib in "$pack"/fallback/*; do
    [ -e "$lib" ] || continue
    ldconfig -p | grep "$(basename "$lib") " >/dev/null || { mkdir -p "$pack/missing"; cp "$lib" "$pack/missing/"; }
done
[ -d "$pack/missing" ] && libdirs="$libdirs:$pack/missing" && echo "gpu-prebuilt: packed fallbacks used: $(ls "$pack/missing" | tr '\n' ' ')"
export LD_LIBRARY_PATH="$libdirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export SHARDCAST_MODELS_DIR="$src/models"
built_in=$(strings "$src/build/bin/cuda_gpu_test" | grep -m1 -o '/[^ ]*/build/bin/shardcast$' | sed 's|/build/bin/shardcast$||')
if [ -n "$built_in" ] && [ "$built_in" != "$src" ]; then
    if [ -e "$built_in" ]; then
        echo "gpu-prebuilt: the tests were built in $built_in, which exists here and is not this checkout" >&2
    else
        mkdir -p "$(dirname "$built_in")" && ln -s "$src" "$built_in" && echo "gpu-prebuilt: linked $built_in -> $src"
    fi
fi
exec bash "$src/scripts/gpu-check.sh" "$src/build"
