# Sourced by scripts/test.sh and scripts/ci.sh: `stage NAME COMMAND...` runs one stage, and the
# time of every stage run so far is printed when the script ends (whether it passed or not), so
# the next change that slows one is seen. Also sets `werror`: ON under CI=true (warnings are
# errors), else OFF.
werror=OFF
if [ "${CI:-}" = true ]; then
    werror=ON
fi
STAGE_TIMES=()
STAGE_START=$SECONDS
STAGE_CURRENT=
STAGE_T0=0
stage() {
    STAGE_CURRENT=$1
    shift
    STAGE_T0=$SECONDS
    echo "==> $STAGE_CURRENT"
    "$@"
    STAGE_TIMES+=("$(printf '%-44s %5d s' "$STAGE_CURRENT" $((SECONDS - STAGE_T0)))")
    STAGE_CURRENT=
}
print_stage_times() {
    local rc=$?
    echo "==> stage times ($(basename "$0"), exit $rc)"
    local line
    for line in "${STAGE_TIMES[@]}"; do echo "    $line"; done
    if [ -n "$STAGE_CURRENT" ]; then
        printf '    %-44s %5d s (failed)\n' "$STAGE_CURRENT" $((SECONDS - STAGE_T0))
    fi
    printf '    %-44s %5d s\n' "total" $((SECONDS - STAGE_START))
}
trap print_stage_times EXIT
