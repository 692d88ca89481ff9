#!/bin/sh
# Builds every cargo-fuzz target of rxe-fuzz and runs each for FUZZ_SECONDS
# seconds (default 30) from the seed corpus. Exits non-zero if a target does
# not build or finds a crash (the crashing input is left in
# fuzz/artifacts/TARGET/ and printed by cargo-fuzz).
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

# Seeds: whole frames from the bundled captures (see seed-corpus.sh).
if [ ! -d corpus/frame_parser ] || [ -z "$(ls -A corpus/frame_parser)" ]; then
    ./seed-corpus.sh corpus/frame_parser
fi

status=0
for t in $targets; do
    echo "== $t: build"
    if ! cargo fuzz build "$t"; then
        echo "smoke.sh: $t does not build" >&2
        status=1
        continue
    fi
    mkdir -p "corpus/$t"
    echo "== $t: run for ${seconds}s"
    # -max_total_time ends the run; a crash, leak, timeout or OOM ends it
    # early with a non-zero exit status.
    if cargo fuzz run "$t" "corpus/$t" -- -max_total_time="$seconds" -print_final_stats=1; then
        echo "== $t: ok"
    else
        echo "smoke.sh: $t FAILED (see fuzz/artifacts/$t/)" >&2
        status=1
    fi
done
exit $status
