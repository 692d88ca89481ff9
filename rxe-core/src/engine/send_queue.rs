//! The requester's state in a QP: its send queue of work requests on
//! their way, the PSNs, retry counts and timers. What the requester does
//! with it is in [`super::requester`], what the answers do to it in
//! [`super::completer`].

use super::rtt::Rtt;
use super::slices::Slices;
use crate::psn::Psn;
use crate::types::*;
use std::collections::VecDeque;
use std::time::Instant;

/// A send work request on its way.
#[derive(Debug)]
pub(crate) struct SendWqe {
    pub wr: SendWr,
    /// Message length in bytes.
    pub len: u64,
    /// PSNs the WQE takes (0 for local operations).
    pub npkts: u32,
    pub first_psn: Psn,
    pub started: bool,
    /// Set when the WQE finished; it completes when it reaches the head.
    pub done: Option<WcStatus>,
    /// Validated local memory: the gather list, or where READ data and
    /// atomic results go.
    pub slices: Slices,
    /// READ: bytes placed so far.
    pub read_rcvd: u64,
    /// READ: response packets asked for per READ request (see the module
    /// docs); set when the WQE starts.
    pub read_chunk: u32,
}

impl SendWqe {
    pub(super) fn is_rd_atomic(&self) -> bool {
        matches!(
            self.wr.opcode,
            SendOpcode::RdmaRead
                | SendOpcode::AtomicCmpSwap
                | SendOpcode::AtomicFetchAdd
                | SendOpcode::AtomicWrite
        )
    }
    pub(super) fn last_psn(&self) -> Psn {
        self.first_psn.add(self.npkts.max(1) - 1)
    }
    pub(super) fn holds(&self, psn: Psn) -> bool {
        self.started && self.npkts > 0 && psn.in_window(self.first_psn, self.npkts)
    }
    /// READ: one past the last response packet of the chunk that packet `k`
    /// belongs to. Chunks start at multiples of `read_chunk`, whichever
    /// packet a request (or a retried request) starts from.
    pub(super) fn chunk_end(&self, k: u32) -> u32 {
        let c = self.read_chunk.max(1);
        (k / c + 1).saturating_mul(c).min(self.npkts)
    }
    /// READ and atomic requests sent and not fully answered: a READ counts
    /// one per chunk asked for and not yet received in full. `sent` is how
    /// many of its packets were asked for (`npkts` unless it is the WQE at
    /// the cursor).
    fn requests_outstanding(&self, sent: u32, mtu: u64) -> usize {
        if !self.started || self.done.is_some() || !self.is_rd_atomic() {
            return 0;
        }
        if self.wr.opcode != SendOpcode::RdmaRead {
            return 1;
        }
        let c = self.read_chunk.max(1);
        let asked = sent.div_ceil(c);
        let answered = ((self.read_rcvd / mtu) as u32) / c;
        asked.saturating_sub(answered) as usize
    }
}

#[derive(Debug)]
pub(crate) struct Requester {
    pub sq: VecDeque<SendWqe>,
    /// Index in `sq` of the WQE to send from, and the packet within it.
    pub next: usize,
    pub next_pkt: u32,
    /// The next PSN to assign to a new WQE.
    pub psn: Psn,
    /// One past the highest PSN ever sent (to tell retransmissions apart).
    pub sent_high: Psn,
    pub retry_left: u8,
    pub rnr_left: u8,
    pub retransmit_at: Option<Instant>,
    /// Sending is held until then after an RNR NAK.
    pub rnr_until: Option<Instant>,
    pub since_ackreq: u32,
    pub sqd_notified: bool,
    /// Every PSN up to this one is acknowledged.
    pub acked: Psn,
    /// The PSNs `[from, to)` a go-back is sending again. A NAK for one of
    /// them is about the old copies (stale, after reordering) and must not
    /// start another go-back; if the new copy is lost too, the transport
    /// timer recovers.
    pub round: Option<(Psn, Psn)>,
    /// After a transport timeout or a silent probe timeout, the one PSN
    /// sent again until the responder answers (see `handle_timeout`).
    pub probe: Option<Psn>,
    /// The round trip, measured ([`super::rtt`]).
    pub rtt: Rtt,
    /// When the flight has been silent long enough for a tail loss probe.
    pub tlp_at: Option<Instant>,
    /// The probe out (`probe`) is a tail loss probe, not the transport
    /// timer's: another may follow it (`completer.rs`, `tail_probe`).
    pub tlp_sent: bool,
}

impl Requester {
    pub fn new(psn: Psn) -> Self {
        Requester {
            sq: VecDeque::new(),
            next: 0,
            next_pkt: 0,
            psn,
            sent_high: psn,
            retry_left: 7,
            rnr_left: 7,
            retransmit_at: None,
            rnr_until: None,
            since_ackreq: 0,
            sqd_notified: false,
            acked: psn.sub(1),
            round: None,
            probe: None,
            rtt: Rtt::default(),
            tlp_at: None,
            tlp_sent: false,
        }
    }

    pub fn set_psn(&mut self, psn: Psn) {
        self.probe = None;
        self.rtt.discard();
        self.tlp_at = None;
        self.tlp_sent = false;
        self.psn = psn;
        self.sent_high = psn;
        self.acked = psn.sub(1);
    }

    /// READ and atomic requests of the WQEs before index `i` not yet
    /// answered (a READ counts one per chunk outstanding), and those of
    /// WQE `i` itself when `own` (its packets before the cursor).
    pub(super) fn rd_atomic_in_flight(&self, i: usize, mtu: u64, own: bool) -> usize {
        let mut n: usize = self
            .sq
            .iter()
            .take(i)
            .map(|w| w.requests_outstanding(w.npkts, mtu))
            .sum();
        if own {
            if let Some(w) = self.sq.get(i) {
                let sent = if i == self.next {
                    self.next_pkt
                } else {
                    w.npkts
                };
                n += w.requests_outstanding(sent, mtu);
            }
        }
        n
    }

    /// The first PSN of the oldest unfinished WQE, if one has started: the
    /// left edge of the send window.
    pub fn oldest_unacked(&self) -> Option<Psn> {
        self.sq
            .iter()
            .find(|w| w.done.is_none() && w.npkts > 0)
            .filter(|w| w.started)
            .map(|w| w.first_psn)
    }

    /// The PSN of the packet at the cursor.
    pub(super) fn cursor_psn(&self) -> Psn {
        match self.sq.get(self.next) {
            Some(w) if w.started => w.first_psn.add(self.next_pkt),
            _ => self.psn,
        }
    }

    pub(super) fn anything_outstanding(&self) -> bool {
        self.sq
            .iter()
            .any(|w| w.started && w.done.is_none() && w.npkts > 0)
    }
}
