#!/usr/bin/env bash
# Packs a build's CUDA binaries for a GPU machine that lacks the build's Debian packages (a bare
# CUDA image with the same CUDA major version): the shardcast and shardcast-cuda executables, the
# GPU test binaries, and the shared libraries they need that such an image lacks (fmt, yaml-cpp,
# simdjson, SQLite, Open MPI and what it loads, the CUDA runtime). cuBLASLt and NCCL (hundreds of
# MB) are not packed: scripts/gpu-prebuilt.sh finds the GPU machine's own.
#   usage: scripts/gpu-pack.sh [BUILD_DIR] [OUT_DIR]   (defaults: build/, .gpu/ in the repository)
# Then on the GPU machine, in the repository root: bash scripts/gpu-prebuilt.sh [OUT_DIR]
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$src/build}
out=${2:-$src/.gpu}
bins=(shardcast shardcast-cuda cuda_gpu_test cuda_cli_test cuda_calibrate_test)
for b in "${bins[@]}"; do
    [ -x "$build/bin/$b" ] || { echo "gpu-pack: $build/bin/$b is missing: build with the CUDA toolkit first" >&2; exit 1; }
done
rm -rf "$out" && mkdir -p "$out/bin" "$out/lib"
for b in "${bins[@]}"; do cp "$build/bin/$b" "$out/bin/"; done
# Every library the binaries load, less the C and C++ runtimes the image has and the two big CUDA
# libraries it has too.
for b in "${bins[@]}"; do ldd "$build/bin/$b"; done | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
while read -r name path; do
    case "$name" in
        libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|libgcc_s.so*|libstdc++.so*) ;;
        libz.so*|libudev.so*) mkdir -p "$out/fallback" && cp -L "$path" "$out/fallback/$name" ;;  # used only if missing there
        libcublas*|libnccl*|libcuda.so*) ;;
        *) cp -L "$path" "$out/lib/$name" ;;
    esac
done
echo "gpu-pack: $(du -sh "$out" | cut -f1) in $out: $(ls "$out/lib" | tr '\n' ' ')(fallback: $(ls "$out/fallback" 2>/dev/null | tr '\n' ' '))"
