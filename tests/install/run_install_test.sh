#!/usr/bin/env bash
# Installs a build with `cmake --install` into a temporary prefix and checks that the installed
# shardcast finds its bundled models beside itself (bin/../share/shardcast/models), from any
# working directory, after the prefix is moved, and through a symlink; that SHARDCAST_MODELS_DIR
# still overrides; and that only the command and its data are installed.
#   usage: run_install_test.sh CMAKE_COMMAND BUILD_DIR SOURCE_DIR
set -uo pipefail

cmake_command=${1:?usage: run_install_test.sh CMAKE_COMMAND BUILD_DIR SOURCE_DIR}
build=${2:?usage: run_install_test.sh CMAKE_COMMAND BUILD_DIR SOURCE_DIR}
source_dir=${3:?usage: run_install_test.sh CMAKE_COMMAND BUILD_DIR SOURCE_DIR}
source_dir=$(cd "$source_dir" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
unset SHARDCAST_MODELS_DIR

passed=0
failed=0
pass() { passed=$((passed + 1)); echo "PASS  $1"; }
fail() { failed=$((failed + 1)); echo "FAIL  $1"; [ -n "${2:-}" ] && printf '      %s\n' "$2"; }

if ! "$cmake_command" --install "$build" --prefix "$tmp/prefix" >"$tmp/install.log" 2>&1; then
    echo "FAIL  cmake --install $build --prefix $tmp/prefix"
    cat "$tmp/install.log"
    exit 1
fi
pass "cmake --install"

# Exactly the command (and shardcast-cuda, shardcast-gui where the build has them), one file per
# bundled model, and the examples.
cuda_built=0
[ -x "$build/bin/shardcast-cuda" ] && cuda_built=1
expected=$( (echo bin/shardcast
             [ "$cuda_built" = 1 ] && echo bin/shardcast-cuda
             [ -x "$build/bin/shardcast-gui" ] && echo bin/shardcast-gui
             for f in "$source_dir"/models/*.json; do echo "share/shardcast/models/$(basename "$f")"; done
             cd "$source_dir/examples" && find . -type f | sed 's|^\./|share/shardcast/examples/|') | sort)
installed=$(cd "$tmp/prefix" && find . -type f -o -type l | sed 's|^\./||' | sort)
if [ "$installed" = "$expected" ]; then
    pass "installs bin/shardcast, share/shardcast/models/*.json and share/shardcast/examples/*"
else
    fail "installed files" "$(diff <(echo "$expected") <(echo "$installed") | grep '^[<>]' | head -20 | tr '\n' ' ')"
fi

# check_prefix NAME BIN MODELS_DIR: from a fresh directory, BIN lists the models of MODELS_DIR
# (the folder it names must be MODELS_DIR itself, not the source tree) and plans a bundled model.
check_prefix() {
    local name=$1 bin=$2 models=$3
    local work
    work=$(mktemp -d "$tmp/work.XXXXXX")
    if ! (cd "$work" && "$bin" models) >"$tmp/out" 2>"$tmp/err"; then
        fail "$name: models" "exit $?: $(head -c 400 "$tmp/err")"
    elif [ "$(head -n 1 "$tmp/out")" != "Bundled models ($models)" ]; then
        fail "$name: models reads $models" "first line: $(head -n 1 "$tmp/out")"
    elif ! grep -q '^llama-3.1-8b ' "$tmp/out"; then
        fail "$name: models lists llama-3.1-8b" "$(head -c 400 "$tmp/out")"
    else
        pass "$name: models lists llama-3.1-8b from $models"
    fi

    if ! (cd "$work" && "$bin" plan --model llama-3.1-8b --gpu H100-SXM --nodes 1 --gpus-per-node 8) \
            >"$tmp/out" 2>"$tmp/err"; then
        fail "$name: plan --model llama-3.1-8b" "exit $?: $(head -c 400 "$tmp/err")"
    elif ! grep -Eq '^  total \(peak\) +[0-9]+\.[0-9]+$' "$tmp/out" ||
         ! grep -q '^shardcast plan: llama-3.1-8b on 8 x H100-SXM$' "$tmp/out"; then
        fail "$name: plan prints the model and a peak line" "$(head -c 400 "$tmp/out")"
    else
        pass "$name: plan --model llama-3.1-8b prints a peak"
    fi
}

check_prefix "installed" "$tmp/prefix/bin/shardcast" "$tmp/prefix/share/shardcast/models"

example="$tmp/prefix/share/shardcast/examples/llama-3.1-8b-8xh100.json"
if (cd "$tmp" && "$tmp/prefix/bin/shardcast" plan "$example" --json) >"$tmp/out" 2>"$tmp/err" &&
   grep -q '"peak_bytes"' "$tmp/out"; then
    pass "installed: plan of the installed example"
else
    fail "installed: plan of the installed example" "$(head -c 400 "$tmp/err")"
fi

# The CPU-sized models are installed and plan, scaled too (scaling re-reads the installed config).
if (cd "$tmp" && "$tmp/prefix/bin/shardcast" plan --model tiny-llama --scale hidden=128,layers=2 --gpus-per-node 2 \
        --json) >"$tmp/out" 2>"$tmp/err" &&
   grep -q '"name": "tiny-llama@hidden=128,layers=2"' "$tmp/out"; then
    pass "installed: plan --model tiny-llama --scale hidden=128,layers=2"
else
    fail "installed: plan --model tiny-llama --scale" "$(head -c 400 "$tmp/err") $(head -c 200 "$tmp/out")"
fi

# The prefix is relocatable: nothing points back to where it was installed or to the sources.
mkdir -p "$tmp/elsewhere"
mv "$tmp/prefix" "$tmp/elsewhere/moved"
check_prefix "moved prefix" "$tmp/elsewhere/moved/bin/shardcast" "$tmp/elsewhere/moved/share/shardcast/models"

# A symlink to the binary (as from /usr/local/bin) still finds the models beside the real file.
mkdir -p "$tmp/links"
ln -s "$tmp/elsewhere/moved/bin/shardcast" "$tmp/links/shardcast"
check_prefix "symlinked binary" "$tmp/links/shardcast" "$tmp/elsewhere/moved/share/shardcast/models"

# SHARDCAST_MODELS_DIR overrides the installed models.
mkdir -p "$tmp/override"
cp "$source_dir/models/gpt2.json" "$tmp/override/only-gpt2.json"
if SHARDCAST_MODELS_DIR="$tmp/override" "$tmp/elsewhere/moved/bin/shardcast" models >"$tmp/out" 2>"$tmp/err" &&
   [ "$(head -n 1 "$tmp/out")" = "Bundled models ($tmp/override)" ] &&
   grep -q '^only-gpt2 ' "$tmp/out" && ! grep -q '^llama-3.1-8b ' "$tmp/out"; then
    pass "SHARDCAST_MODELS_DIR overrides the installed models"
else
    fail "SHARDCAST_MODELS_DIR overrides the installed models" "$(head -c 400 "$tmp/out") $(head -c 400 "$tmp/err")"
fi

# `run --backend cuda` hands over to the shardcast-cuda installed beside shardcast: with no GPU
# here it must fail as the CUDA backend does (exit 1, naming the device check), not as a build
# without CUDA (exit 2). shardcast itself links no CUDA library.
installed_bin="$tmp/elsewhere/moved/bin/shardcast"
if ! ldd "$installed_bin" >"$tmp/ldd" 2>&1; then
    fail "shardcast links no CUDA library" "ldd $installed_bin failed: $(head -c 300 "$tmp/ldd")"
elif grep -Eq 'libcudart|libnccl|libcublas' "$tmp/ldd"; then
    fail "shardcast links no CUDA library" "$(grep -E 'cuda|nccl|cublas' "$tmp/ldd")"
else
    pass "shardcast links no CUDA library"
fi
if [ "$cuda_built" = 1 ]; then
    (cd "$tmp" && "$installed_bin" run --backend cuda --model tiny-llama --nodes 1 --gpus-per-node 1) \
        >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ "$rc" -eq 1 ] && grep -q "needs a usable NVIDIA GPU" "$tmp/err"; then
        pass "run --backend cuda reaches the installed shardcast-cuda"
    elif nvidia-smi >/dev/null 2>&1; then
        pass "run --backend cuda reaches the installed shardcast-cuda (a GPU is present: exit $rc)"
    else
        fail "run --backend cuda reaches the installed shardcast-cuda" "exit $rc: $(head -c 400 "$tmp/err")"
    fi
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
