#!/usr/bin/env bash
# Installs shardcast's build and test dependencies on Debian 12 (bookworm). Idempotent: when
# everything is installed it says so and changes nothing; otherwise it runs `apt-get update` and
# installs only what is missing (as root, or through sudo).
#   SHARDCAST_CORE_DEPS_ONLY=1  skip the optional layers (Qt6 GUI, OpenMPI backend, Xvfb).
#   --with-clang                 also clang, for CI's sanitizer and fuzzing build (scripts/ci.sh).
set -euo pipefail

core_packages=(
    build-essential cmake ninja-build pkg-config
    nlohmann-json3-dev libcli11-dev libfmt-dev
    libgtest-dev libgmock-dev libbenchmark-dev
    libeigen3-dev libsqlite3-dev zlib1g-dev libsimdjson-dev libtomlplusplus-dev libyaml-cpp-dev
)
# Later layers: Qt6 GUI (Widgets and Svg; Debian 12 names: qt6-base-dev, qt6-svg-dev; Qt6Gui's CMake
# package looks for OpenGL, which qt6-base-dev only recommends: libqt6opengl6-dev), OpenMPI CPU backend,
# Xvfb for GUI tests without a display.
optional_packages=(
    qt6-base-dev libqt6opengl6-dev qt6-svg-dev
    libopenmpi-dev openmpi-bin
    xvfb
)

packages=("${core_packages[@]}")
if [ "${SHARDCAST_CORE_DEPS_ONLY:-0}" != 1 ]; then
    packages+=("${optional_packages[@]}")
fi
# clang (clang-14 on Debian 12, with libFuzzer and its sanitizer runtimes): the second compiler CI
# builds with, and the fuzzing build (scripts/ci.sh, scripts/fuzz.sh). The README's test command
# (scripts/test.sh) builds with GCC only and does not install it.
if [ "${1:-}" = --with-clang ]; then
    packages+=(clang)
elif [ -n "${1:-}" ]; then
    echo "install-deps: unknown argument '$1' (valid: --with-clang)" >&2
    exit 2
fi

if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
    echo "install-deps: not a Debian/Ubuntu system (no dpkg-query/apt-get); install these yourself:" >&2
    echo "  ${packages[*]}" >&2
    exit 0
fi

missing=()
for pkg in "${packages[@]}"; do
    status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
    if [ "$status" != "install ok installed" ]; then
        missing+=("$pkg")
    fi
done

if [ "${#missing[@]}" -eq 0 ]; then
    echo "install-deps: all ${#packages[@]} packages already installed; nothing to do."
    exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
    as_root=()
elif command -v sudo >/dev/null 2>&1; then
    as_root=(sudo)
else
    echo "install-deps: missing packages and neither root nor sudo available: ${missing[*]}" >&2
    exit 1
fi

echo "install-deps: installing ${#missing[@]} missing package(s): ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "install-deps: done."
