# shellcheck shell=bash
# tests/interop/verbs_diff.sh - the same libibverbs calls on the kernel's
# rdma_rxe and on rxe-rs, compared (issue 37; tests/c/verbs_diff.c).
#
# Sourced by run.sh once the guest is up, on the 1500-byte link (it uses
# run.sh's RXE, ROOT, HERE, WORK, LOGS, SHARE, gjob/gwait/grun, nsx). Then
# `verbs_diff_run` runs:
#   * the table mode: tests/c/verbs_diff.c's cases, in the guest on rxe0
#     over Debian's libibverbs and kernel rdma_rxe, and on the host in the
#     namespace over the drop-in (`rxe exec -d 10.99.0.1`, a device on the
#     bridge, whose link is the guest's: same MTU);
#   * the randomised mode for RXE_VERBS_DIFF_SEEDS seeds (3), RXE_VERBS_DIFF_STEPS
#     steps each (300): the seeds in tests/interop/verbs_diff_seeds.txt (ones
#     that found a difference once) and new ones from the clock, printed;
# and compares each pair with verbs_diff.py against the list of accepted
# differences in docs/divergences.md. Outputs in $LOGS/verbs-diff/.
# Returns 0 when no run shows an undocumented difference, 1 otherwise.

verbs_diff_compile() {  # the program, built once on the host (the guest's copy is built by build-guest.sh)
    mkdir -p "$WORK/bin"
    gcc -O1 -Wall -Wextra -Wno-missing-field-initializers -o "$WORK/bin/verbs_diff" \
        "$ROOT/tests/c/verbs_diff.c" -libverbs
}

# verbs_diff_pair NAME ARGS...: one run on each side, compared
verbs_diff_pair() {
    local name=$1; shift
    local d="$LOGS/verbs-diff"
    grun "vd-$name" 400 "${VERBS_DIFF_GUEST:-verbs_diff} rxe0 $*" >"$d/$name.kernel" 2>&1
    timeout 400 ip netns exec "$NS" "$RXE" exec -d "$HOST_IP" -- "$WORK/bin/verbs_diff" rxe0 "$@" \
        >"$d/$name.rxe" 2>&1
    python3 "$HERE/verbs_diff.py" "$d/$name.kernel" "$d/$name.rxe" "$ROOT/docs/divergences.md" \
        >"$d/$name.diff" 2>&1
}

verbs_diff_run() {
    local d="$LOGS/verbs-diff" rc=0 seeds s n
    mkdir -p "$d"
    verbs_diff_compile >"$d/build.log" 2>&1 || { cat "$d/build.log"; echo "verbs_diff: the program does not build"; return 1; }
    verbs_diff_pair table table || rc=1
    tail -1 "$d/table.diff"
    grep -E '^(DIFF|verbs_diff: the)' "$d/table.diff" | head -40
    n=${RXE_VERBS_DIFF_SEEDS:-3}
    seeds=$(grep -Eo '^[0-9]+' "$HERE/verbs_diff_seeds.txt" 2>/dev/null | tr '\n' ' ')
    for s in $(seq "$n"); do seeds="$seeds $(( ($(date +%s%N) / 1000 + s * 7919) % 1000000007 ))"; done
    echo "verbs_diff: random seeds $seeds (${RXE_VERBS_DIFF_STEPS:-300} steps each)"
    for s in $seeds; do
        verbs_diff_pair "seed-$s" random "$s" "${RXE_VERBS_DIFF_STEPS:-300}" || rc=1
        echo "  seed $s: $(tail -1 "$d/seed-$s.diff")"
        grep -E '^(DIFF|verbs_diff: the)' "$d/seed-$s.diff" | head -3 | sed 's/^/    /'
    done
    return $rc
}

# ---- librdmacm: tests/c/rdmacm_diff.c, the same way ---------------------------------
rdmacm_diff_compile() {
    mkdir -p "$WORK/bin"
    gcc -O1 -Wall -Wextra -Wno-missing-field-initializers -o "$WORK/bin/rdmacm_diff" \
        "$ROOT/tests/c/rdmacm_diff.c" -lrdmacm -libverbs
}

# Returns 0 when the runs agree but for documented differences, 1 otherwise.
rdmacm_diff_run() {
    local d="$LOGS/verbs-diff" rc=0
    mkdir -p "$d"
    rdmacm_diff_compile >"$d/rdmacm-build.log" 2>&1 || { cat "$d/rdmacm-build.log"; echo "rdmacm_diff: the program does not build"; return 1; }
    grun vd-rdmacm 300 "rdmacm_diff rxe0" >"$d/rdmacm.kernel" 2>&1
    timeout 300 ip netns exec "$NS" "$RXE" exec -d "$HOST_IP" -- "$WORK/bin/rdmacm_diff" rxe0 \
        >"$d/rdmacm.rxe" 2>&1
    python3 "$HERE/verbs_diff.py" "$d/rdmacm.kernel" "$d/rdmacm.rxe" "$ROOT/docs/divergences.md" \
        >"$d/rdmacm.diff" 2>&1 || rc=1
    tail -1 "$d/rdmacm.diff"
    grep -E '^(DIFF|verbs_diff: the)' "$d/rdmacm.diff" | head -40
    return $rc
}
