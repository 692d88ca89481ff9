#!/usr/bin/env bash
# tests/run.sh - the README's test command: installs what the tests need
# (tests/setup.sh: Debian packages and scapy, only what is missing), then
# runs every test in the workspace. Arguments go to `cargo test`, e.g.
#   bash tests/run.sh -p rxe-tests --test scapy_crosscheck
# .ci/run calls this same command.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tests/setup.sh
if [ $# = 0 ]; then
  # The test faults' own unit tests: compiled only with the feature that
  # the workspace's default build leaves out (rxe_core::engine::test_fault).
  cargo test -p rxe-core --features test-fault --lib engine::test_fault
fi
exec cargo test --workspace "$@"
