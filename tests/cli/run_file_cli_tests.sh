#!/usr/bin/env bash
# End-to-end checks of how the command reads and writes files (issue 12, item 3; docs/limits.md,
# "Files"): paths that are not regular files and files over the cap are bad input (exit 2, one
# line naming the file), refused without reading or waiting; a write that fails reports the path,
# exits 2 and leaves the old file as it was.
#   usage: run_file_cli_tests.sh SHARDCAST_BINARY
set -uo pipefail
# shellcheck source=tests/cli/harness.sh
source "$(dirname "${BASH_SOURCE[0]}")/harness.sh"

bin=${1:?usage: run_file_cli_tests.sh SHARDCAST_BINARY}
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
# Refusals must be immediate: a hang would be a failure, not a slow pass.
sc() { timeout 20 "$bin" "$@"; }
small=(--model tiny-gpt2 --gpu A100-40G --gpus-per-node 2)

# --- reads: only regular files, capped -----------------------------------------------------------
expect_bad_input "plan /dev/zero is refused, not read" "'/dev/zero': it is a character device" sc plan /dev/zero
expect_bad_input "--model /dev/zero is refused" "'/dev/zero': it is a character device" sc plan --model /dev/zero
expect_bad_input "--wrap modules:/dev/zero is refused" "'/dev/zero': it is a character device" \
    sc plan "${small[@]}" --wrap modules:/dev/zero
mkdir "$tmp/profile-dir"
expect_bad_input "a directory as --profile names it" "profile-dir': it is a directory" \
    sc simulate "${small[@]}" --profile "$tmp/profile-dir"
mkfifo "$tmp/model.fifo"
expect_bad_input "a FIFO as --model is refused without waiting" "model\.fifo': it is a FIFO" \
    sc plan --model "$tmp/model.fifo"
# 64 MiB + 1 byte, sparse: refused from its size, before reading.
truncate -s $((64 * 1024 * 1024 + 1)) "$tmp/huge.plan.json"
expect_bad_input "a plan over 64 MiB names the file and the cap" "huge\.plan\.json' is 67108865 bytes, over the 64 MiB limit" \
    sc plan "$tmp/huge.plan.json"

# --- writes: errors reported with the path, exit 2, the old file intact ---------------------------
expect_bad_input "search --pytorch /dev/full fails (ENOSPC)" "--pytorch: cannot write '/dev/full': write: No space left on device" \
    sc search "${small[@]}" --pytorch /dev/full
if [ -c /dev/full ]; then pass "/dev/full is still the device"; else fail "/dev/full is still the device" "$(ls -l /dev/full)"; fi
expect_bad_input "--write-plan onto a directory is refused" "cannot write '$tmp/profile-dir': it is a directory" \
    sc plan "${small[@]}" --write-plan "$tmp/profile-dir"
expect_bad_input "--write-plan into a missing folder names the path" "no/such/dir/p\.json" \
    sc plan "${small[@]}" --write-plan "$tmp/no/such/dir/p.json"

# A write cut short (a file-size limit of 0 stands in for a full disk) keeps the old plan whole. The
# limit binds the command alone: its messages pass through a pipe to cat, which has none.
sc plan "${small[@]}" --write-plan "$tmp/kept.plan.json" >/dev/null 2>&1
cp "$tmp/kept.plan.json" "$tmp/kept.orig"
expect_bad_input "--write-plan that cannot finish is exit 2 naming the file" "kept\.plan\.json': write: File too large" \
    bash -c 'set -o pipefail; (trap "" XFSZ; ulimit -f 0; exec "$@" 2>&1 >/dev/null) | cat >&2' _ \
    "$bin" plan --model llama-3.1-405b --gpus-per-node 8 --nodes 4 --write-plan "$tmp/kept.plan.json"
if cmp -s "$tmp/kept.plan.json" "$tmp/kept.orig"; then pass "the old plan is intact after the failed write"
else fail "the old plan is intact after the failed write" "$(head -c 200 "$tmp/kept.plan.json")"; fi
if ls -a "$tmp" | grep '\.tmp-' >/dev/null; then fail "no temporary file is left" "$(ls -a "$tmp")"; else pass "no temporary file is left"; fi

finish "file CLI tests"
