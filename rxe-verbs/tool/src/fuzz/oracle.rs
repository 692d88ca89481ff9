//! What an oracle is to the fuzzer: the [`Oracle`] trait, through which
//! the driver shows every oracle what happens on the wire and asks it for
//! its checks and its verdict; and the vocabulary the oracles, the
//! campaign, the replay and the minimiser share: a [`Check`]'s result and
//! a [`Finding`].
//!
//! The driver (`super::driver::Driver`) holds the oracles a run checks
//! and calls them at fixed points: when a connection is made, when a
//! step's packets went out, when its answers came, when a live connection
//! is checked, when a recorded packet of an oracle's own is replayed, and
//! at the end for the verdicts. The trait takes the driver as a type
//! parameter `D` rather than naming it, so that this module needs nothing
//! above it: the driver holds `Box<dyn Oracle<Driver>>`s, and an oracle's
//! checks drive the driver (they send through it, so that the other
//! oracles see their packets too).

use super::record::Sent;
use super::session::{Answers, Session};
use std::path::PathBuf;
use std::time::Duration;

/// What a check of a live connection concluded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Check {
    /// The connection answered as it should (the probe was ACKed, the
    /// region read back unchanged, the rping round came back whole).
    Ok,
    /// No answer: the peer's QP is gone (the liveness oracle decides).
    Dead,
    /// The oracle that checked fired (its finding is kept until the end).
    Found,
}

/// An oracle's finding, as written at the end of a run.
#[derive(Debug, Clone)]
pub(crate) struct Finding {
    pub oracle: &'static str,
    pub path: PathBuf,
    /// What we sent (with its sidecar), so `--replay` and `--minimise`
    /// take it.
    pub replayable: bool,
}

/// An oracle, run from the driver `D`. Every hook but [`Oracle::verdict`]
/// and [`Oracle::fired`] has a default that does nothing, so an oracle
/// implements only the points it watches.
///
/// While one of its own methods that take the driver runs, the oracle is
/// out of the driver's list: it is not shown the packets it sends itself.
pub(crate) trait Oracle<D> {
    /// A new connection was made; its first packet will be `rec.sent[next]`.
    fn connected(&mut self, _s: &Session, _next: usize) {}

    /// One step's packets went out on `s` for `arm`: `step` is
    /// `rec.sent[first..]`, in the order they were sent (none when the
    /// socket refused them all).
    fn sent(&mut self, _s: &Session, _arm: &str, _first: usize, _step: &[Sent]) {}

    /// The answers to the step that went out last came. `last_good`: the
    /// index in `rec.sent` of the first packet after the last good
    /// liveness check; `sent`: how many packets are recorded.
    fn answered(&mut self, _s: &Session, _a: &Answers, _last_good: usize, _sent: usize) {}

    /// Whether it checks live connections itself, in place of the
    /// liveness probe (a READ of the peer's region, an rping round). The
    /// driver lets the first such oracle of its list check.
    fn checks(&self) -> bool {
        false
    }

    /// Checks the live connection `s` (only asked of an oracle that
    /// [`Oracle::checks`]): `tries` tries at most, each waiting `window`.
    fn check(&mut self, _d: &mut D, _s: &mut Session, _tries: u32, _window: Duration) -> Check {
        Check::Dead
    }

    /// Replays the recorded packet `p` when it is one of the oracle's own
    /// (a legitimate READ it sent in the campaign) and judges what it got
    /// as the campaign did; `None` when it is not.
    fn replay(&mut self, _d: &mut D, _s: &mut Session, _p: &Sent) -> Option<Check> {
        None
    }

    /// At setup, after the first check of the first connection found
    /// something: why that says the run was set up wrong rather than that
    /// the peer is at fault, if it does.
    fn setup_fault(&self) -> Option<String> {
        None
    }

    /// The name of the oracle whose finding it holds, once it fired.
    fn fired(&self) -> Option<&'static str>;

    /// Prints its verdicts (`oracle NAME: ok`, or the finding, written as
    /// `NAME-TAG.pcap`) and returns its findings.
    fn verdict(&self, d: &D, tag: &str) -> Vec<Finding>;
}
