//! Every `RXE_*` environment variable the verbs layer reads, each read in
//! one function here, so that this file is the list of them:
//!
//! | variable | what it sets | read |
//! |---|---|---|
//! | `RXE_PROVIDER` | `soft`, `native` or `auto` (default): which devices [`crate::Device::list`] offers ([`crate::provider`]) | at each listing |
//! | `RXE_DEVICES` | extra soft devices, `name=address,...` | at each listing |
//! | `RXE_LIBIBVERBS` | the libibverbs the native backend loads (default `libibverbs.so.1`) | once, at first load |
//! | `RXE_PCAP` | a capture file per soft device, `{addr}` replaced by its address | at each open |
//! | `RXE_FAULTS` | loss, duplication, reordering, corruption on each soft device's sends ([`rxe_net::faults`]) | at each open |
//! | `RXE_RECV_MODE` | `plain`, `raw` or `auto` (default): how a soft device receives | at each open |
//! | `RXE_SPIN_US` | the initial busy-poll spin of [`crate::Context::set_poll_spin`] | at each open |
//! | `RXE_POST_BATCH_US` | the initial window of [`crate::Context::set_post_batching`] | at each open |
//! | `RXE_TEST_FAULT` | a fault put in on purpose, for testing fuzzers (`rxe_core::engine::test_fault`); only builds with the `test-fault` feature honour it | at each open |
//!
//! rxe-net reads `RXE_GSO` itself (`rxe_net::udp`); the drop-in library
//! and the `rxe` tool read their own (`RXE_DEBUG`, `RXE_DEVVIEW`, ...).
//! Parsing and defaults stay with the code that uses each value.

use rxe_core::engine::TestFault;
use rxe_net::udp::RecvMode;

/// A variable's value, `None` when it is unset, empty or not Unicode.
fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// `RXE_PROVIDER`, as set.
pub(crate) fn provider() -> Option<String> {
    std::env::var("RXE_PROVIDER").ok()
}

/// `RXE_DEVICES`, empty when unset.
pub(crate) fn devices() -> String {
    std::env::var("RXE_DEVICES").unwrap_or_default()
}

/// `RXE_LIBIBVERBS`.
pub(crate) fn libibverbs() -> Option<String> {
    var("RXE_LIBIBVERBS")
}

/// `RXE_PCAP`.
pub(crate) fn pcap() -> Option<String> {
    var("RXE_PCAP")
}

/// `RXE_FAULTS`, as set (an empty value is an error of its parser's).
pub(crate) fn faults() -> Option<String> {
    std::env::var("RXE_FAULTS").ok()
}

/// `RXE_RECV_MODE=plain|raw|auto` (default auto: a raw socket, which sees
/// every IPv4 header and so verifies every ICRC, when the process may open
/// one). Plain mode costs less CPU: the raw socket copies each packet once
/// more (see docs/performance.md).
pub(crate) fn recv_mode() -> RecvMode {
    match std::env::var("RXE_RECV_MODE").as_deref() {
        Ok("plain") => RecvMode::Plain,
        Ok("raw") => RecvMode::Raw,
        _ => RecvMode::Auto,
    }
}

/// `RXE_SPIN_US=N`, in microseconds.
pub(crate) fn spin_us() -> Option<u64> {
    var("RXE_SPIN_US")?.parse().ok()
}

/// `RXE_POST_BATCH_US=N`, in microseconds.
pub(crate) fn post_batch_us() -> Option<u64> {
    var("RXE_POST_BATCH_US")?.parse().ok()
}

/// `RXE_TEST_FAULT`: the fault it names, announced on stderr so that
/// nobody runs a broken device unawares; a value that does not parse is
/// reported and ignored.
#[cfg(feature = "test-fault")]
pub(crate) fn test_fault() -> Option<TestFault> {
    let v = var("RXE_TEST_FAULT")?;
    match TestFault::parse(&v) {
        Ok(f) => {
            eprintln!(
                "rxe: RXE_TEST_FAULT={v}: this device is broken on purpose (for testing fuzzers)"
            );
            Some(f)
        }
        Err(e) => {
            eprintln!("rxe: ignoring RXE_TEST_FAULT: {e}");
            None
        }
    }
}

/// `RXE_TEST_FAULT` in a build without test faults: never honoured, and
/// said so once per process, so that a fuzzer's user who expected a broken
/// peer learns why it is healthy.
#[cfg(not(feature = "test-fault"))]
pub(crate) fn test_fault() -> Option<TestFault> {
    static SAID: std::sync::Once = std::sync::Once::new();
    if var("RXE_TEST_FAULT").is_some() {
        SAID.call_once(|| {
            eprintln!(
                "rxe: ignoring RXE_TEST_FAULT: this build has no test faults \
                 (they are for testing fuzzers: build with `--features test-fault`)"
            )
        });
    }
    None
}
