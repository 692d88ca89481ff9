#!/usr/bin/env bash
# rxe-verbs/tests/loom.sh - the loom model tests (rxe-verbs/tests/model.rs)
# with a preemption bound these small models never reach: every
# interleaving, not only those with at most 3 preemptions as under
# `cargo test`. About 2.5 minutes of CPU, most of it the rdma_cm model
# (cm_destroy_listener_during_a_connect_request). Arguments go to the test binary, e.g.
#   bash rxe-verbs/tests/loom.sh destroy_cq
# LOOM_MAX_PREEMPTIONS=N bounds it again. See "Concurrency" in
# docs/reliability.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-100}"
exec cargo test -p rxe-verbs --test model -- "$@"
