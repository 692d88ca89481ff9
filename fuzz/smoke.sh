#!/bin/sh
# Builds every cargo-fuzz target of rxe-fuzz and runs each for FUZZ_SECONDS
# seconds (default 30; CI uses 20) from its corpus in fuzz/corpus/TARGET/
# (seeded from the bundled captures for the parsers, empty for the engine
# targets), after replaying the inputs in fuzz/regressions/TARGET/ (each
# once found a bug). Exits non-zero if a target does not build or finds a crash (the
# crashing input is left in fuzz/artifacts/TARGET/ and printed by
# cargo-fuzz); prints each target's executions and new corpus entries.
#
# Needs cargo-fuzz (`cargo install cargo-fuzz`). On a stable toolchain the
# sanitizer flags need RUSTC_BOOTSTRAP=1, which this script sets.
#
# Usage: fuzz/smoke.sh [TARGET...]      (default: every target)
#        FUZZ_SECONDS=300 fuzz/smoke.sh
set -eu
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
seconds=${FUZZ_SECONDS:-30}
export RUSTC_BOOTSTRAP=1

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "smoke.sh: cargo-fuzz is missing: cargo install cargo-fuzz" >&2
    exit 2
fi

if [ $# -gt 0 ]; then
    targets=$*
else
    targets=$(cargo fuzz list)
fi
[ -n "$targets" ] || { echo "smoke.sh: no fuzz targets" >&2; exit 2; }

status=0
summary=""
for t in $targets; do
    echo "== $t: build"
    if ! cargo fuzz build "$t"; then
        echo "smoke.sh: $t does not build" >&2
        status=1
        summary="$summary
$t: BUILD FAILED"
        continue
    fi
    # Inputs that once found a bug (fuzz/regressions/TARGET/) run first.
    if [ -d "regressions/$t" ]; then
        echo "== $t: replay regressions/$t"
        if ! cargo fuzz run "$t" "regressions/$t" -- -runs=0; then
            echo "smoke.sh: $t FAILED on a regression input" >&2
            status=1
            summary="$summary
$t: REGRESSION"
            continue
        fi
    fi
    # Seeds: frames and whole files from the bundled captures (see
    # seed-corpus.sh); the engine targets start from nothing.
    if [ ! -d "corpus/$t" ] || [ -z "$(ls -A "corpus/$t" 2>/dev/null)" ]; then
        ./seed-corpus.sh "$t"
    fi
    mkdir -p "corpus/$t"
    echo "== $t: run for ${seconds}s"
    log=$(mktemp)
    # -max_total_time ends the run; a crash, leak, timeout or OOM ends it
    # early with a non-zero exit status.
    if cargo fuzz run "$t" "corpus/$t" -- -max_total_time="$seconds" -print_final_stats=1 \
        >"$log" 2>&1; then
        result=ok
    else
        result=FAILED
        status=1
    fi
    if [ "$result" = ok ]; then
        grep -E '^(Done|stat::)' "$log" || tail -n 5 "$log"
    else
        cat "$log"
    fi
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    added=$(sed -n 's/^stat::new_units_added: *//p' "$log")
    rm -f "$log"
    summary="$summary
$t: $result, ${execs:-?} executions in ${seconds}s, ${added:-?} new corpus entries"
    if [ "$result" = FAILED ]; then
        echo "smoke.sh: $t FAILED (see fuzz/artifacts/$t/)" >&2
    fi
done
echo "== summary$summary"
exit $status
