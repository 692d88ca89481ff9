#!/usr/bin/env bash
# tests/tsan.sh - the verbs layer's threads under ThreadSanitizer: the
# progress thread with its real socket, application threads posting and
# polling over real UDP, completion channels, destroy during traffic
# (rxe-verbs/tests/threads.rs), and rxe-verbs' unit tests. What a model
# checker cannot reach (tests/model.rs covers the rest); see "Concurrency"
# in docs/reliability.md.
#
# The standard library comes prebuilt, not instrumented (no rust-src here
# for -Zbuild-std): its own synchronisation is invisible to TSan, so
# tests/tsan.supp names the std internals whose reports are false
# positives. Nothing of rxe-rs is suppressed. Any report fails the run
# (halt_on_error). A few minutes, most of them building; the build goes to
# target/tsan. Arguments go to the test binaries.
set -euo pipefail
cd "$(dirname "$0")/.."
export RUSTC_BOOTSTRAP=1
export RUSTFLAGS="-Zsanitizer=thread -Cunsafe-allow-abi-mismatch=sanitizer"
export CARGO_TARGET_DIR="${TSAN_TARGET_DIR:-$PWD/target/tsan}"
export TSAN_OPTIONS="suppressions=$PWD/tests/tsan.supp halt_on_error=1 abort_on_error=0 exitcode=66 ${TSAN_OPTIONS:-}"
host=$(rustc -vV | sed -n 's/^host: //p')
# --target keeps build scripts and proc macros out of the instrumented build.
exec cargo test -p rxe-verbs --target "$host" --lib --test threads -- "$@"
