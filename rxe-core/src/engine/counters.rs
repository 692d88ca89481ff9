//! Counters, named like the kernel's rxe hardware counters
//! (`rdma statistic show`), plus drops by reason.

use crate::wire;
use std::collections::BTreeMap;

/// Why an incoming packet was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DropReason {
    /// The ICRC did not match.
    IcrcError,
    /// The packet could not be parsed (the wire error says why).
    Malformed,
    /// No QP with that number.
    UnknownQp,
    /// A multicast packet for a group no QP is attached to.
    NoGroup,
    /// The QP is in a state that does not receive (RESET, INIT, ERR...).
    QpState,
    /// The opcode's transport does not match the QP type.
    WrongTransport,
    /// The partition key does not match.
    PkeyMismatch,
    /// The Q_Key does not match (UD).
    QkeyMismatch,
    /// The packet did not come from the QP's peer address.
    WrongSource,
    /// The packet was a duplicate or out of sequence and needed no answer.
    Sequence,
    /// A response that matches nothing outstanding.
    UnexpectedResponse,
    /// No receive buffer (UD/UC silently drop).
    NoReceiveBuffer,
    /// The packet is longer than the path MTU allows.
    TooLong,
    /// The responder's queue of answers is full (a peer asking without reading).
    Backlog,
    /// Anything else the responder refused.
    Other,
}

/// Why the host refused to send a packet the engine produced (it never
/// left; the protocol's retries see it as lost).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SendRefusal {
    /// Larger than the link's MTU (`EMSGSIZE`): a path MTU above the link's.
    TooLong,
    /// No route to the destination (`ENETUNREACH`, `EHOSTUNREACH`,
    /// `EADDRNOTAVAIL`).
    Unreachable,
    /// Anything else.
    Other,
}

/// Counters of one QP or of the whole engine.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counters {
    /// Packets sent.
    pub sent_pkts: u64,
    /// Packets received (before any check).
    pub rcvd_pkts: u64,
    /// Request packets retransmitted.
    pub retransmitted_pkts: u64,
    /// Duplicate requests seen by the responder.
    pub duplicate_request: u64,
    /// Requests ahead of the expected PSN seen by the responder.
    pub out_of_seq_request: u64,
    /// PSN sequence error NAKs sent.
    pub send_seq_err: u64,
    /// PSN sequence error NAKs received.
    pub rcvd_seq_err: u64,
    /// RNR NAKs received.
    pub rcvd_rnr_err: u64,
    /// RNR NAKs sent.
    pub send_rnr_err: u64,
    /// Transport timer timeouts.
    pub retry_timeouts: u64,
    /// Tail loss probes: a silent flight's last packet sent again after a
    /// probe timeout, before the transport timer ([`super::rtt`]).
    pub tail_probes: u64,
    /// Work requests failed with retry exceeded.
    pub retry_exceeded_err: u64,
    /// Work requests failed with RNR retry exceeded.
    pub retry_rnr_exceeded_err: u64,
    /// ACKs the responder coalesced into a later one.
    pub ack_deferred: u64,
    /// Other NAKs sent (invalid request, access, operational).
    pub send_err: u64,
    /// Incoming packets whose ICRC could not be checked (plain UDP sockets over IPv4).
    pub icrc_unverified: u64,
    /// Messages sent (SEND, WRITE with immediate).
    pub rdma_sends: u64,
    /// Messages received into receive WQEs.
    pub rdma_recvs: u64,
    /// Drops by reason.
    pub drops: BTreeMap<DropReason, u64>,
    /// Malformed packets by wire error.
    pub malformed: BTreeMap<String, u64>,
    /// Packets the host refused to send, by reason (counted by the driver
    /// that sends them, [`crate::engine::Engine::note_send_refused`]).
    pub send_refused: BTreeMap<SendRefusal, u64>,
}

impl Counters {
    /// Counts a dropped packet.
    pub fn drop(&mut self, why: DropReason) {
        *self.drops.entry(why).or_default() += 1;
    }
    /// Counts a malformed packet.
    pub fn malformed(&mut self, e: wire::Error) {
        self.drop(DropReason::Malformed);
        // The variant name (not the values) keeps the map small.
        let key = format!("{e:?}");
        let key = key.split([' ', '(', '{']).next().unwrap_or("").to_string();
        *self.malformed.entry(key).or_default() += 1;
    }
    /// Total dropped packets.
    pub fn dropped(&self) -> u64 {
        self.drops.values().sum()
    }
    /// Dropped packets for one reason.
    pub fn dropped_for(&self, why: DropReason) -> u64 {
        self.drops.get(&why).copied().unwrap_or(0)
    }
}
