#!/usr/bin/env bash
# Runs the fuzz targets of a fuzzing build (clang, -DSHARDCAST_FUZZ=ON; scripts/ci.sh makes one in
# build-clang/) for a bounded time each, one after the other, from the checked-in corpus and the
# seeds tests/fuzz/<target>.seeds lists. New inputs go to BUILD_DIR/fuzz-work/<target>/, never into
# the source tree; a finding (crash, leak, timeout, out of memory) is written there as crash-*,
# leak-*, timeout-* or oom-* and fails the script. Add it to tests/fuzz/corpus/<target>/ with the fix.
#   scripts/fuzz.sh BUILD_DIR [SECONDS_PER_TARGET (default 60)] [TARGET...]
# Targets: hf_config module_tree plan_file gpu_file profile_file run_record (all by default).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [ $# -lt 1 ]; then
    echo "usage: scripts/fuzz.sh BUILD_DIR [SECONDS_PER_TARGET] [TARGET...]" >&2
    exit 2
fi
build=$1
seconds=${2:-60}
shift $(($# < 2 ? $# : 2))
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    # Every target tests/fuzz/ has (its <name>_fuzz.cpp), so a new one is never left out.
    for src in tests/fuzz/*_fuzz.cpp; do
        name=$(basename "$src" _fuzz.cpp)
        targets+=("$name")
    done
fi

status=0
for t in "${targets[@]}"; do
    bin="$build/bin/fuzz_$t"
    if [ ! -x "$bin" ]; then
        echo "fuzz.sh: $bin not found: build with clang and -DSHARDCAST_FUZZ=ON" >&2
        exit 2
    fi
    work="$build/fuzz-work/$t"
    mkdir -p "$work"
    seeds=()
    if [ -f "tests/fuzz/$t.seeds" ]; then
        while IFS= read -r line; do
            [ -n "$line" ] && [ "${line:0:1}" != "#" ] && seeds+=("$line")
        done <"tests/fuzz/$t.seeds"
    fi
    # A dictionary of the keys and strings the seeds use: the loaders are keyed by names a random
    # mutation would almost never spell.
    dict="$build/fuzz-work/$t.dict"
    grep -RhaoE '"[A-Za-z0-9_.:+-]{1,40}"' "tests/fuzz/corpus/$t" "${seeds[@]}" 2>/dev/null | sort -u |
        sed 's/\\/\\\\/g; s/"/\\"/g; s/.*/"&"/' >"$dict" || true
    dict_flag=()
    [ -s "$dict" ] && dict_flag=(-dict="$dict")
    echo "fuzz.sh: fuzz_$t for ${seconds} s ($(wc -l <"$dict") dictionary entries)"
    if ! "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
        "${dict_flag[@]}" -artifact_prefix="$work/" "$work" "tests/fuzz/corpus/$t" "${seeds[@]}" \
        >"$build/fuzz-work/$t.log" 2>&1; then
        echo "fuzz.sh: fuzz_$t FOUND A PROBLEM; see $build/fuzz-work/$t.log and the artifact it names" >&2
        grep -E "^(==[0-9]+==ERROR|SUMMARY|artifact_prefix|Test unit written)" "$build/fuzz-work/$t.log" >&2 || true
        status=1
        continue
    fi
    grep -E "^(#[0-9]+.*DONE|stat::number_of_executed_units|stat::peak_rss_mb)" "$build/fuzz-work/$t.log" || true
done
exit $status
