# Shared by the CLI test scripts (sourced after they set $tmp, a scratch directory): counters,
# PASS/FAIL lines and the expectations every script uses. A script ends with `finish LABEL`.
# shellcheck shell=bash

passed=0
failed=0
pass() { passed=$((passed + 1)); echo "PASS  $1"; }
fail() { failed=$((failed + 1)); echo "FAIL  $1"; [ -n "${2:-}" ] && printf '      %s\n' "$2"; }

# check NAME PYTHON_SNIPPET FILE: the snippet reads sys.argv[1] and raises on failure.
check() {
    local name=$1 code=$2 file=$3
    if python3 -c "$code" "$file" 2>"$tmp/pyerr"; then pass "$name"; else fail "$name" "$(tail -n 3 "$tmp/pyerr")"; fi
}

# expect_ok NAME CMD...: exit 0.
expect_ok() {
    local name=$1; shift
    if "$@" >"$tmp/out" 2>"$tmp/err"; then
        pass "$name"
    else
        fail "$name" "exit $? from: $* -- stderr: $(head -c 400 "$tmp/err")"
    fi
}

# expect_exit NAME CODE CMD...
expect_exit() {
    local name=$1 want=$2; shift 2
    "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    if [ "$rc" -eq "$want" ]; then pass "$name"; else fail "$name" "expected exit $want, got $rc: $(head -c 300 "$tmp/err")"; fi
}

# expect_bad_input NAME PATTERN CMD...: exit 2 and exactly one stderr line that starts with
# "shardcast: error: " and matches the extended regex PATTERN (the file or flag it must name).
expect_bad_input() {
    local name=$1 pattern=$2; shift 2
    "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    local lines first
    lines=$(wc -l <"$tmp/err")
    first=$(head -n 1 "$tmp/err")
    if [ "$rc" -ne 2 ]; then
        fail "$name" "expected exit 2, got $rc -- stderr: $(head -c 400 "$tmp/err")"
    elif [ "$lines" -ne 1 ]; then
        fail "$name" "expected one stderr line, got $lines: $(head -c 400 "$tmp/err")"
    elif [[ "$first" != "shardcast: error: "* ]]; then
        fail "$name" "stderr does not start with 'shardcast: error: ': $first"
    elif ! grep -Eq -- "$pattern" <<<"$first"; then
        fail "$name" "stderr does not name /$pattern/: $first"
    else
        pass "$name"
    fi
}

# finish [LABEL]: the summary line; the script's exit status is 0 only when nothing failed.
finish() {
    echo "${1:+$1: }$passed passed, $failed failed"
    [ "$failed" -eq 0 ]
}
