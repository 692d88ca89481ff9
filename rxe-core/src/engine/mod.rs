//! The protocol engine: RC, UC and UD queue pairs, sans-IO.
//!
//! An [`Engine`] is one soft RDMA device: its protection domains, memory
//! regions and windows, completion queues, shared receive queues and queue
//! pairs. It never touches a socket, a thread or a clock. Its methods sort
//! into four groups, in the manner of quinn-proto's `Connection`:
//!
//! * **commands** from the application: [`Engine::create_qp`],
//!   [`Engine::modify_qp`], [`Engine::post_send`], [`Engine::post_recv`], ...
//! * **inputs** from the outside world: [`Engine::handle_datagram`] for a
//!   received UDP payload and [`Engine::handle_timeout`] when the deadline
//!   from [`Engine::next_timeout`] has passed;
//! * **outputs** to drain after every input or command:
//!   [`Engine::poll_transmit`] (packets to send, until `None`),
//!   [`Engine::poll_cq`] (completions), [`Engine::poll_event`] (async events);
//! * **getters**: [`Engine::counters`], [`Engine::query_qp`], ...
//!
//! A driver loop therefore looks like: feed inputs, then call
//! `poll_transmit` until it returns `None`, then sleep until a datagram
//! arrives or `next_timeout` passes. Time is an argument (`now`) everywhere;
//! a simulation passes a virtual clock and gets the same behaviour every run.
//!
//! Packets leave with their ICRC computed for the IP header a Linux UDP
//! socket writes for an unconnected socket with path MTU discovery on
//! (IPv4 identification 0, don't fragment); see [`crate::wire::icrc::compute_udp`].
//! A transport that builds its own IP headers must write them that way.

mod completer;
pub mod counters;
mod cq;
mod deadlines;
pub mod mcast;
pub mod mem;
mod qp;
mod requester;
mod resp_state;
mod responder;
mod rtt;
mod send_queue;
mod slices;
pub mod state;
pub mod test_fault;
pub mod timers;
mod txpool;

pub use counters::{Counters, DropReason, SendRefusal};
pub use mem::{
    AtomicOp, KeyError, MemError, MemSlice, MemTable, MrKeys, PdId, RegionMemory, VecMemory,
};
pub use test_fault::TestFault;

use crate::fasthash::FastMap;
use crate::psn::Psn;
use crate::types::*;
use crate::wire::{icrc, Packet, ICRC_LEN};
use cq::{Cq, Srq};
use qp::Qp;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, HashSet, VecDeque};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

/// A completion queue handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CqId(pub u32);

/// A shared receive queue handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SrqId(pub u32);

/// Packets of room in the device's budget of packets in flight
/// (`EngineConfig::max_in_flight`) for each QP woken from the wait for it.
const BUDGET_BURST: u32 = 16;

/// How an engine is set up.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Local addresses, indexed by GID index.
    pub gids: Vec<IpAddr>,
    /// Device limits.
    pub caps: DeviceCaps,
    /// The port's active MTU (the largest path MTU a QP may use).
    pub port_mtu: Mtu,
    /// Seed for QP numbers, keys and initial PSNs: the same seed gives the
    /// same numbers, which is what a simulation wants. Use a random seed in
    /// production (the verbs layer does).
    pub seed: u64,
    /// How many PSNs an RC requester may have unacknowledged.
    pub max_unacked_psns: u32,
    /// Set AckReq at least every this many packets of a long message.
    pub ack_every: u32,
    /// How many packets all RC requesters of the device together may have
    /// in flight (sent and not acknowledged, plus the responses of READs
    /// asked for). With many QPs, the per-QP window alone would let them
    /// send far more at once than the receiving socket buffers hold, and
    /// the losses would turn into rounds of retransmissions. Size it to
    /// what the peer's receive buffer holds (the verbs layer derives it
    /// from its socket's). Retransmissions and responses are not held back.
    pub max_in_flight: u32,
    /// The UDP source port of every packet, when the transport cannot
    /// choose one per QP (a UDP socket bound to port 4791 sends from 4791).
    /// `None`: a hash of the local QP number in 0xC000..=0xFFFF (the
    /// kernel's rxe derives its port from the flow label or both QP numbers).
    pub udp_src_port: Option<u16>,
    /// The top 8 bits of every local QP number, when several processes
    /// share one address and a packet's owner is told by its destination
    /// QP (`rxe_net::udp`'s sharing): QP numbers are then
    /// `prefix << 16 | random 16 bits`. `None`: random over all 24 bits.
    pub qpn_prefix: Option<u8>,
    /// A fault put in on purpose, **for testing fuzzers only** (see
    /// [`test_fault`]): `None`, the default, in anything but a test of a
    /// fuzzer's oracles.
    pub test_fault: Option<TestFault>,
}

impl EngineConfig {
    /// A configuration for one local address with the defaults.
    pub fn new(addr: IpAddr, seed: u64) -> Self {
        EngineConfig {
            gids: vec![addr],
            caps: DeviceCaps::default(),
            port_mtu: Mtu::Mtu4096,
            seed,
            max_unacked_psns: 128,
            ack_every: 64,
            max_in_flight: 1024,
            udp_src_port: None,
            qpn_prefix: None,
            test_fault: None,
        }
    }
}

/// A packet for the transport to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    /// Local address to send from.
    pub src: IpAddr,
    /// Peer address; the UDP destination port is always 4791.
    pub dst: IpAddr,
    /// UDP source port (a hash of the QP number, as the kernel's rxe does).
    pub src_port: u16,
    /// IPv4 TOS / IPv6 traffic class.
    pub traffic_class: u8,
    /// TTL / hop limit.
    pub hop_limit: u8,
    /// The UDP payload: BTH through ICRC.
    pub payload: Vec<u8>,
}

impl Transmit {
    /// What a receiver of this packet gets with it when nothing but the
    /// wire lies between them (the simulated networks): its addresses and
    /// port, and the ICRC checked against its bytes, so that a packet
    /// corrupted on the way is `Bad`.
    pub fn received(&self) -> RecvMeta {
        let n = self.payload.len();
        let ok = n >= ICRC_LEN
            && icrc::compute_udp(
                self.src,
                self.dst,
                self.src_port,
                &self.payload[..n - ICRC_LEN],
            )
            .is_ok_and(|c| c.to_le_bytes() == self.payload[n - ICRC_LEN..]);
        RecvMeta {
            src: self.src,
            dst: self.dst,
            src_port: self.src_port,
            icrc: if ok { IcrcStatus::Ok } else { IcrcStatus::Bad },
        }
    }
}

/// What the transport knows about the ICRC of a received packet (defined
/// with the ICRC's other verdicts, in `wire::icrc`).
pub use crate::wire::icrc::IcrcStatus;

/// Where a received datagram came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RecvMeta {
    /// Source address.
    pub src: IpAddr,
    /// Destination (local) address.
    pub dst: IpAddr,
    /// UDP source port.
    pub src_port: u16,
    /// The transport's ICRC verdict.
    pub icrc: IcrcStatus,
}

/// Asynchronous events (`ibv_event_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AsyncEvent {
    /// A QP went to the error state because of an error (`IBV_EVENT_QP_FATAL`).
    QpFatal(u32),
    /// The first packet arrived on a QP in RTR (`IBV_EVENT_COMM_EST`).
    CommEstablished(u32),
    /// The send queue of a QP in SQD drained (`IBV_EVENT_SQ_DRAINED`).
    SqDrained(u32),
    /// A completion queue overran (`IBV_EVENT_CQ_ERR`).
    CqError(CqId),
    /// An SRQ fell below its limit (`IBV_EVENT_SRQ_LIMIT_REACHED`).
    SrqLimitReached(SrqId),
}

/// Errors from commands, each naming what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// No such QP.
    #[error("qp: no QP number {0:#08x}")]
    UnknownQp(u32),
    /// No such CQ.
    #[error("cq: no completion queue {0:?}")]
    UnknownCq(CqId),
    /// No such SRQ.
    #[error("srq: no shared receive queue {0:?}")]
    UnknownSrq(SrqId),
    /// No such PD.
    #[error("pd: no protection domain {0:?}")]
    UnknownPd(PdId),
    /// The QP's state does not allow the call.
    #[error("qp {qpn:#08x} is in state {state}, which does not allow {what}")]
    WrongState {
        /// The QP.
        qpn: u32,
        /// Its state.
        state: QpState,
        /// What was refused.
        what: &'static str,
    },
    /// A queue is full.
    #[error("{queue} is full ({capacity} entries)")]
    QueueFull {
        /// Which queue.
        queue: &'static str,
        /// Its capacity.
        capacity: usize,
    },
    /// An argument is out of range or inconsistent.
    #[error("{name}: {reason}")]
    InvalidArgument {
        /// The argument.
        name: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// A resource is still in use.
    #[error("{0} is still in use")]
    Busy(&'static str),
    /// A device limit was reached (the kernel's ENOMEM).
    #[error("{what}: the device's limit of {limit} is reached")]
    TooMany {
        /// The limit, as `ibv_device_attr` names it.
        what: &'static str,
        /// Its value.
        limit: u32,
    },
    /// A QP attribute modification was refused.
    #[error(transparent)]
    Modify(#[from] state::ModifyError),
    /// A memory registration or window call was refused.
    #[error(transparent)]
    Mem(#[from] MemError),
}

fn mcast_error(e: mcast::McastError) -> EngineError {
    match e {
        mcast::McastError::NotMulticast => invalid("gid", "not a multicast GID"),
        mcast::McastError::TooMany(what, limit) => EngineError::TooMany { what, limit },
        mcast::McastError::NotAttached => invalid("gid", "the QP is not attached to that group"),
    }
}

fn invalid(name: &'static str, reason: impl Into<String>) -> EngineError {
    EngineError::InvalidArgument {
        name,
        reason: reason.into(),
    }
}

/// Creation attributes of a QP (`ibv_qp_init_attr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpInit {
    /// Transport.
    pub qp_type: QpType,
    /// Protection domain.
    pub pd: PdId,
    /// CQ for send completions.
    pub send_cq: CqId,
    /// CQ for receive completions.
    pub recv_cq: CqId,
    /// Shared receive queue, if any.
    pub srq: Option<SrqId>,
    /// Queue capacities.
    pub cap: QpCap,
    /// Every send WR produces a completion.
    pub sq_sig_all: bool,
}

/// Everything the per-QP code may touch besides the QP itself.
pub(crate) struct Ctx<'a> {
    pub now: Instant,
    pub config: &'a EngineConfig,
    pub mem: &'a mut MemTable,
    pub cqs: &'a mut BTreeMap<CqId, Cq>,
    pub srqs: &'a mut BTreeMap<SrqId, Srq>,
    pub events: &'a mut VecDeque<AsyncEvent>,
    pub counters: &'a mut Counters,
    pub pool: &'a mut txpool::TxPool,
    /// Packets in flight over all QPs (see `EngineConfig::max_in_flight`).
    pub in_flight: u32,
    /// Completions delivered to any CQ (see `Engine::completions_delivered`).
    pub delivered: &'a mut u64,
    /// Set by a requester that held a new packet back because the device
    /// has `max_in_flight` packets in flight.
    pub over_budget: bool,
    /// Set by the engine when the requester's next packet ends the QP's
    /// burst with other QPs waiting (see `Engine::poll_transmit`): the
    /// packet asks for an ACK, so that no packet waits unacknowledged while
    /// the QP waits for its next turn.
    pub last_of_turn: bool,
}

/// A [`Ctx`] over the engine's fields other than its QPs (borrowed field
/// by field, so that a QP of `qps` can be borrowed next to it).
macro_rules! ctx {
    ($engine:ident, $now:expr) => {
        Ctx {
            now: $now,
            config: &$engine.config,
            mem: &mut $engine.mem,
            cqs: &mut $engine.cqs,
            srqs: &mut $engine.srqs,
            events: &mut $engine.events,
            counters: &mut $engine.counters,
            pool: &mut $engine.pool,
            in_flight: $engine.in_flight,
            delivered: &mut $engine.delivered,
            over_budget: false,
            last_of_turn: false,
        }
    };
}

/// What [`Engine::settle`] found on a QP, for the device-wide rest.
struct Settle {
    /// The QP's packets in flight as last counted, and now.
    before: u32,
    now: u32,
    /// Whether its deadline changed, and what the timer heap needs then.
    refiled: deadlines::Filed,
}

impl Settle {
    /// Counts QP `qpn`'s packets in flight anew and files its deadline.
    fn note(deadlines: &mut deadlines::Deadlines, qpn: u32, q: &mut Qp) -> Settle {
        let now = q.in_flight();
        let before = std::mem::replace(&mut q.counted_in_flight, now);
        let refiled = deadlines.file(qpn, q);
        Settle {
            before,
            now,
            refiled,
        }
    }
}

impl Ctx<'_> {
    /// Delivers a completion to a CQ; an overrun raises `CqError`.
    pub fn complete(&mut self, cq: CqId, c: Completion, solicited: bool) {
        deliver(self.cqs, self.events, self.delivered, cq, c, solicited);
    }
}

/// Puts a completion on CQ `cq` and counts it in `delivered`; an overrun
/// raises `CqError` instead.
fn deliver(
    cqs: &mut BTreeMap<CqId, Cq>,
    events: &mut VecDeque<AsyncEvent>,
    delivered: &mut u64,
    cq: CqId,
    c: Completion,
    solicited: bool,
) {
    if let Some(q) = cqs.get_mut(&cq) {
        if q.push(c, solicited) {
            *delivered += 1;
        } else {
            events.push_back(AsyncEvent::CqError(cq));
        }
    }
}

/// One soft RDMA device's protocol state.
#[derive(Debug)]
pub struct Engine {
    config: EngineConfig,
    /// QP numbers and initial PSNs (and the key table's seed): a CSPRNG
    /// (ChaCha12), so that numbers a peer sees do not predict the others.
    rng: StdRng,
    mem: MemTable,
    pds: HashSet<PdId>,
    next_pd: u32,
    cqs: BTreeMap<CqId, Cq>,
    next_cq: u32,
    srqs: BTreeMap<SrqId, Srq>,
    next_srq: u32,
    qps: FastMap<u32, Qp>,
    /// QPs that may have something to send, in round-robin order (each
    /// once: those with `Qp::active` set).
    active: VecDeque<u32>,
    /// Every QP's next deadline, earliest first.
    deadlines: deadlines::Deadlines,
    events: VecDeque<AsyncEvent>,
    counters: Counters,
    last_now: Option<Instant>,
    pool: txpool::TxPool,
    /// Packets in flight over all RC QPs (the sum of their `counted_in_flight`).
    in_flight: u32,
    /// Completions delivered to any CQ since the engine was created.
    delivered: u64,
    /// QPs that held packets back for `max_in_flight`, to wake in turn
    /// when acknowledgements make room.
    budget_waiters: VecDeque<u32>,
    /// Those of them with packets on the wire that asked for no ACK: they
    /// are woken first (in the order they came), as their packets wait
    /// unacknowledged until they send again.
    stranded: VecDeque<u32>,
    /// Packets the QP at the front of `active` has sent in its turn.
    burst_sent: u32,
    /// QPs woken from `budget_waiters` whose turn has not ended yet.
    woken: u32,
    /// UD multicast groups and the QPs attached to each.
    groups: mcast::Groups,
}

impl Engine {
    /// A new engine.
    pub fn new(config: EngineConfig) -> Self {
        let mut rng = StdRng::seed_from_u64(config.seed);
        let mem = MemTable::new(rng.gen());
        Engine {
            config,
            rng,
            mem,
            pds: HashSet::new(),
            next_pd: 1,
            cqs: BTreeMap::new(),
            next_cq: 1,
            srqs: BTreeMap::new(),
            next_srq: 1,
            qps: FastMap::default(),
            active: VecDeque::new(),
            deadlines: deadlines::Deadlines::default(),
            events: VecDeque::new(),
            counters: Counters::default(),
            last_now: None,
            pool: txpool::TxPool::default(),
            in_flight: 0,
            delivered: 0,
            budget_waiters: VecDeque::new(),
            stranded: VecDeque::new(),
            burst_sent: 0,
            woken: 0,
            groups: mcast::Groups::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Changes how many PSNs an RC requester may have unacknowledged.
    pub fn set_max_unacked_psns(&mut self, n: u32) {
        self.config.max_unacked_psns = n.clamp(1, crate::psn::PSN_HALF);
    }

    /// Sets the port's active MTU, when its link changed: UD QPs created
    /// after it use it, and connected QPs are checked against it at their
    /// next `PATH_MTU`.
    pub fn set_port_mtu(&mut self, mtu: Mtu) {
        self.config.port_mtu = mtu;
    }

    /// Sets [`EngineConfig::max_in_flight`] (at least 1).
    pub fn set_max_in_flight(&mut self, n: u32) {
        self.config.max_in_flight = n.max(1);
    }

    /// Counts a packet the host refused to send (the driver saw the
    /// socket refuse it); returns how many were refused for that reason,
    /// this one included.
    pub fn note_send_refused(&mut self, why: SendRefusal) -> u64 {
        let n = self.counters.send_refused.entry(why).or_default();
        *n += 1;
        *n
    }

    /// Engine-wide counters (every QP's packets are counted here too).
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// One QP's counters.
    pub fn qp_counters(&self, qpn: u32) -> Option<&Counters> {
        self.qps.get(&qpn).map(|q| &q.counters)
    }

    /// The memory tables (regions and windows).
    pub fn mem(&self) -> &MemTable {
        &self.mem
    }

    /// Allocates a protection domain.
    pub fn alloc_pd(&mut self) -> PdId {
        let pd = PdId(self.next_pd);
        self.next_pd += 1;
        self.pds.insert(pd);
        pd
    }

    /// Frees a protection domain that nothing uses any more.
    pub fn dealloc_pd(&mut self, pd: PdId) -> Result<(), EngineError> {
        if !self.pds.contains(&pd) {
            return Err(EngineError::UnknownPd(pd));
        }
        if self.qps.values().any(|q| q.pd == pd) || self.srqs.values().any(|s| s.pd == pd) {
            return Err(EngineError::Busy("pd"));
        }
        self.pds.remove(&pd);
        Ok(())
    }

    fn check_pd(&self, pd: PdId) -> Result<(), EngineError> {
        if self.pds.contains(&pd) {
            Ok(())
        } else {
            Err(EngineError::UnknownPd(pd))
        }
    }

    /// Registers a memory region whose bytes `mem` provides, addressed from
    /// `iova` by SGEs and by peers.
    pub fn reg_mr(
        &mut self,
        pd: PdId,
        mem: Arc<dyn RegionMemory>,
        iova: u64,
        access: Access,
    ) -> Result<MrKeys, EngineError> {
        self.check_pd(pd)?;
        if mem.len() as u64 > self.config.caps.max_mr_size {
            return Err(invalid("length", "larger than the device's max_mr_size"));
        }
        Ok(self.mem.reg_mr(pd, mem, iova, access)?)
    }

    /// Deregisters a memory region.
    pub fn dereg_mr(&mut self, lkey: u32) -> Result<(), EngineError> {
        Ok(self.mem.dereg_mr(lkey)?)
    }

    /// Allocates a memory window.
    pub fn alloc_mw(&mut self, pd: PdId, mw_type: mem::MwType) -> Result<u32, EngineError> {
        self.check_pd(pd)?;
        Ok(self.mem.alloc_mw(pd, mw_type)?)
    }

    /// Frees a memory window.
    pub fn dealloc_mw(&mut self, rkey: u32) -> Result<(), EngineError> {
        Ok(self.mem.dealloc_mw(rkey)?)
    }

    /// The current rkey of the memory window in the slot `rkey` names
    /// (see [`mem::MemTable::window_key`]).
    pub fn mw_key(&self, rkey: u32) -> Option<u32> {
        self.mem.window_key(rkey)
    }

    /// Binds a type 1 memory window through QP `qpn` (`ibv_bind_mw`);
    /// returns its new rkey. Type 2 windows are bound with a `BindMw` send
    /// work request.
    pub fn bind_mw(&mut self, qpn: u32, bind: &MwBind) -> Result<u32, EngineError> {
        let pd = self.qps.get(&qpn).ok_or(EngineError::UnknownQp(qpn))?.pd;
        // As libibverbs' `ibv_bind_mw` (EINVAL for any other type): binding a
        // type 2 window here would tie it to this QP and to a key part of the
        // caller's choosing without a BIND_MW work request.
        if self
            .mem
            .query_mw(bind.mw_rkey)
            .is_some_and(|mw| mw.mw_type != mem::MwType::Type1)
        {
            return Err(invalid(
                "mw",
                "ibv_bind_mw binds type 1 windows; bind a type 2 window with a BIND_MW work request",
            ));
        }
        Ok(self.mem.bind_mw(pd, qpn, bind)?)
    }

    /// Creates a completion queue of at least `cqe` entries; its capacity
    /// is [`queue_slots`]`(cqe)`, as the kernel's rxe sizes it.
    pub fn create_cq(&mut self, cqe: u32) -> Result<CqId, EngineError> {
        self.check_cqe(cqe)?;
        let id = CqId(self.next_cq);
        self.next_cq += 1;
        self.cqs.insert(id, Cq::new(queue_slots(cqe) as usize));
        Ok(id)
    }

    fn check_cqe(&self, cqe: u32) -> Result<(), EngineError> {
        if cqe == 0 || cqe > self.config.caps.max_cqe {
            return Err(invalid(
                "cqe",
                format!("must be 1..={}", self.config.caps.max_cqe),
            ));
        }
        Ok(())
    }

    /// A CQ's capacity in completions.
    pub fn cq_capacity(&self, cq: CqId) -> Result<u32, EngineError> {
        let c = self.cqs.get(&cq).ok_or(EngineError::UnknownCq(cq))?;
        Ok(c.capacity as u32)
    }

    /// Resizes a CQ to hold at least `cqe` completions (`ibv_resize_cq`),
    /// up or down, keeping the completions it holds; returns the new
    /// capacity. Fewer entries than it holds is an error, as in the kernel's
    /// `rxe_cq_chk_attr`.
    pub fn resize_cq(&mut self, cq: CqId, cqe: u32) -> Result<u32, EngineError> {
        self.check_cqe(cqe)?;
        let c = self.cqs.get_mut(&cq).ok_or(EngineError::UnknownCq(cq))?;
        if (cqe as usize) < c.entries.len() {
            return Err(invalid(
                "cqe",
                format!("{cqe}: the CQ holds {} completions", c.entries.len()),
            ));
        }
        c.capacity = queue_slots(cqe) as usize;
        Ok(c.capacity as u32)
    }

    /// Destroys a completion queue no QP uses.
    pub fn destroy_cq(&mut self, cq: CqId) -> Result<(), EngineError> {
        if !self.cqs.contains_key(&cq) {
            return Err(EngineError::UnknownCq(cq));
        }
        if self
            .qps
            .values()
            .any(|q| q.send_cq == cq || q.recv_cq == cq)
        {
            return Err(EngineError::Busy("cq"));
        }
        self.cqs.remove(&cq);
        Ok(())
    }

    /// Takes up to `max` completions from a CQ, oldest first.
    pub fn poll_cq(
        &mut self,
        cq: CqId,
        max: usize,
        out: &mut Vec<Completion>,
    ) -> Result<usize, EngineError> {
        let q = self.cqs.get_mut(&cq).ok_or(EngineError::UnknownCq(cq))?;
        Ok(q.take(max, out))
    }

    /// Arms a CQ for one notification (`ibv_req_notify_cq`).
    pub fn req_notify_cq(&mut self, cq: CqId, solicited_only: bool) -> Result<(), EngineError> {
        let q = self.cqs.get_mut(&cq).ok_or(EngineError::UnknownCq(cq))?;
        q.armed = Some(solicited_only);
        Ok(())
    }

    /// True once if an armed CQ received a completion since it was armed.
    pub fn take_cq_notification(&mut self, cq: CqId) -> bool {
        self.cqs
            .get_mut(&cq)
            .is_some_and(|q| std::mem::take(&mut q.notified))
    }

    /// How many completions the engine has delivered to its CQs since it
    /// was created: a driver compares it before and after a call to tell
    /// whether the call produced any (to wake a thread waiting for them).
    pub fn completions_delivered(&self) -> u64 {
        self.delivered
    }

    /// Number of completions waiting in a CQ.
    pub fn cq_len(&self, cq: CqId) -> Option<usize> {
        self.cqs.get(&cq).map(|q| q.entries.len())
    }

    /// Creates a shared receive queue.
    pub fn create_srq(
        &mut self,
        pd: PdId,
        max_wr: u32,
        max_sge: u32,
        limit: u32,
    ) -> Result<SrqId, EngineError> {
        self.check_pd(pd)?;
        self.check_srq_wr(max_wr)?;
        if max_sge > self.config.caps.max_srq_sge {
            return Err(invalid(
                "max_sge",
                format!("at most {}", self.config.caps.max_srq_sge),
            ));
        }
        let id = SrqId(self.next_srq);
        self.next_srq += 1;
        // As the kernel's rxe_srq_from_init: the ring rounded as every
        // queue is, at least one scatter entry, the limit taken as given.
        self.srqs.insert(
            id,
            Srq {
                pd,
                max_wr: queue_slots(max_wr) as usize,
                max_sge: max_sge.max(1) as usize,
                queue: VecDeque::new(),
                limit,
            },
        );
        Ok(id)
    }

    fn check_srq_wr(&self, max_wr: u32) -> Result<(), EngineError> {
        if max_wr == 0 || max_wr > self.config.caps.max_qp_wr {
            return Err(invalid(
                "max_wr",
                format!("must be 1..={}", self.config.caps.max_qp_wr),
            ));
        }
        Ok(())
    }

    /// An SRQ's capacity and scatter entries per receive.
    pub fn srq_size(&self, srq: SrqId) -> Result<(u32, u32), EngineError> {
        let s = self.srqs.get(&srq).ok_or(EngineError::UnknownSrq(srq))?;
        Ok((s.max_wr as u32, s.max_sge as u32))
    }

    /// Arms (limit > 0) or disarms the SRQ limit event (`ibv_modify_srq`).
    pub fn modify_srq(&mut self, srq: SrqId, limit: u32) -> Result<(), EngineError> {
        let s = self
            .srqs
            .get_mut(&srq)
            .ok_or(EngineError::UnknownSrq(srq))?;
        if limit as usize > s.max_wr {
            return Err(invalid("srq_limit", "larger than max_wr"));
        }
        s.limit = limit;
        Ok(())
    }

    /// `ibv_modify_srq` with `IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT`, as kernel
    /// rxe does it: the limit is checked against the queue as it is, then
    /// the queue resized and the limit armed (which may leave it above a
    /// queue that shrank). Returns the new capacity.
    pub fn resize_srq_and_limit(
        &mut self,
        srq: SrqId,
        max_wr: u32,
        limit: u32,
    ) -> Result<u32, EngineError> {
        let s = self.srqs.get(&srq).ok_or(EngineError::UnknownSrq(srq))?;
        if limit as usize > s.max_wr {
            return Err(invalid("srq_limit", "larger than max_wr"));
        }
        let n = self.resize_srq(srq, max_wr)?;
        if let Some(s) = self.srqs.get_mut(&srq) {
            s.limit = limit;
        }
        Ok(n)
    }

    /// Resizes an SRQ to hold at least `max_wr` receives
    /// (`ibv_modify_srq` with `IBV_SRQ_MAX_WR`), keeping those it holds
    /// (never fewer than those); returns the new capacity.
    pub fn resize_srq(&mut self, srq: SrqId, max_wr: u32) -> Result<u32, EngineError> {
        self.check_srq_wr(max_wr)?;
        let s = self
            .srqs
            .get_mut(&srq)
            .ok_or(EngineError::UnknownSrq(srq))?;
        if (max_wr as usize) < s.queue.len() {
            return Err(invalid(
                "max_wr",
                format!("{max_wr}: the SRQ holds {} receives", s.queue.len()),
            ));
        }
        // (as the kernel's rxe_srq_chk_attr: never below an armed limit)
        if s.limit > 0 && max_wr < s.limit {
            return Err(invalid(
                "max_wr",
                format!("{max_wr}: below the armed limit {}", s.limit),
            ));
        }
        s.max_wr = queue_slots(max_wr) as usize;
        Ok(s.max_wr as u32)
    }

    /// Destroys an SRQ no QP uses.
    pub fn destroy_srq(&mut self, srq: SrqId) -> Result<(), EngineError> {
        if !self.srqs.contains_key(&srq) {
            return Err(EngineError::UnknownSrq(srq));
        }
        if self.qps.values().any(|q| q.srq == Some(srq)) {
            return Err(EngineError::Busy("srq"));
        }
        self.srqs.remove(&srq);
        Ok(())
    }

    /// Posts a receive to a shared receive queue.
    pub fn post_srq_recv(&mut self, srq: SrqId, wr: RecvWr) -> Result<(), EngineError> {
        let s = self
            .srqs
            .get_mut(&srq)
            .ok_or(EngineError::UnknownSrq(srq))?;
        if wr.sg_list.len() > s.max_sge {
            return Err(invalid(
                "sg_list",
                format!("{} entries, max_sge is {}", wr.sg_list.len(), s.max_sge),
            ));
        }
        if s.queue.len() >= s.max_wr {
            return Err(EngineError::QueueFull {
                queue: "shared receive queue",
                capacity: s.max_wr,
            });
        }
        s.queue.push_back(wr);
        // A receive may unblock a QP waiting for one (RNR): nothing to do,
        // the sender retries after its RNR timer.
        Ok(())
    }

    /// A free QP number, drawn at random from the device's range: all of
    /// 0x10..0xfffff0 (QP 0 and 1 are special; keep clear of the top few
    /// too), or the 65536 numbers of its prefix (see `qpn_prefix`). `None`
    /// when every number of the range is taken: with a prefix that happens
    /// before `max_qp` QPs exist, and drawing until a free one came up used
    /// to spin for ever.
    fn random_qpn(&mut self) -> Option<u32> {
        let range = match self.config.qpn_prefix {
            None => 0x10..0x00ff_fff0,
            Some(p) => {
                let base = u32::from(p) << 16;
                base.max(0x10)..(base + 0x1_0000).min(0x00ff_fff0)
            }
        };
        for _ in 0..64 {
            let n = self.rng.gen_range(range.clone());
            if !self.qps.contains_key(&n) {
                return Some(n);
            }
        }
        // Crowded: walk the range from a random point.
        let len = range.end - range.start;
        let from = self.rng.gen_range(0..len);
        (0..len)
            .map(|k| range.start + (from + k) % len)
            .find(|n| !self.qps.contains_key(n))
    }

    /// Creates a queue pair in RESET; returns its number (random).
    pub fn create_qp(&mut self, init: QpInit) -> Result<u32, EngineError> {
        self.check_pd(init.pd)?;
        for cq in [init.send_cq, init.recv_cq] {
            if !self.cqs.contains_key(&cq) {
                return Err(EngineError::UnknownCq(cq));
            }
        }
        if let Some(srq) = init.srq {
            if !self.srqs.contains_key(&srq) {
                return Err(EngineError::UnknownSrq(srq));
            }
        }
        let caps = &self.config.caps;
        let c = &init.cap;
        // The kernel's rxe_qp_chk_cap: zero-sized queues are fine (a
        // send-only QP has no receive queue), and with an SRQ the receive
        // caps are not looked at.
        if c.max_send_wr > caps.max_qp_wr {
            return Err(invalid(
                "cap.max_send_wr",
                format!("at most {}", caps.max_qp_wr),
            ));
        }
        if c.max_send_sge > caps.max_sge {
            return Err(invalid(
                "cap.max_send_sge",
                format!("at most {} SGEs", caps.max_sge),
            ));
        }
        if init.srq.is_none() && c.max_recv_wr > caps.max_qp_wr {
            return Err(invalid(
                "cap.max_recv_wr",
                format!("at most {}", caps.max_qp_wr),
            ));
        }
        if init.srq.is_none() && c.max_recv_sge > caps.max_sge {
            return Err(invalid(
                "cap.max_recv_sge",
                format!("at most {} SGEs", caps.max_sge),
            ));
        }
        if c.max_inline_data > caps.max_inline_data {
            return Err(invalid(
                "cap.max_inline_data",
                format!("at most {} bytes", caps.max_inline_data),
            ));
        }
        if self.qps.len() as u32 >= caps.max_qp {
            return Err(EngineError::QueueFull {
                queue: "QP table",
                capacity: caps.max_qp as usize,
            });
        }
        let qpn = self.random_qpn().ok_or(EngineError::QueueFull {
            queue: "QP numbers of this device's range",
            capacity: self.qps.len(),
        })?;
        let initial_psn = Psn::new(self.rng.gen());
        let mut init = init;
        init.cap = init.cap.granted(init.srq.is_some());
        let mut qp = Qp::new(qpn, init, initial_psn);
        if init.qp_type == QpType::Ud {
            // A UD QP has no path MTU of its own (no UD transition accepts
            // IBV_QP_PATH_MTU): its datagrams are limited by the port's
            // active MTU, as the kernel's rxe `get_mtu()` has it. Without
            // this it kept the 1024-byte default, so larger datagrams failed
            // with LOC_LEN_ERR at the sender and were dropped as TooLong at
            // the receiver.
            qp.attr.path_mtu = self.config.port_mtu;
        }
        if let Some(port) = self.config.udp_src_port {
            qp.src_port = port;
        }
        self.qps.insert(qpn, qp);
        Ok(qpn)
    }

    /// Destroys a queue pair. Outstanding work is dropped without completions.
    pub fn destroy_qp(&mut self, qpn: u32) -> Result<(), EngineError> {
        if self.groups.has_qp(qpn) {
            // As the kernel's uverbs: detach first.
            return Err(EngineError::Busy("qp: attached to a multicast group; it"));
        }
        let q = self.qps.remove(&qpn).ok_or(EngineError::UnknownQp(qpn))?;
        if q.budget_woken {
            self.woken_turn_ended();
        }
        self.set_in_flight(self.in_flight - q.counted_in_flight);
        self.budget_waiters.retain(|&w| w != qpn);
        self.stranded.retain(|&w| w != qpn);
        self.active.retain(|&q| q != qpn);
        self.deadlines.tidy(&self.qps);
        Ok(())
    }

    /// The QP's current attributes and state (`ibv_query_qp`).
    pub fn query_qp(&self, qpn: u32) -> Result<(QpAttr, QpCap), EngineError> {
        let q = self.qps.get(&qpn).ok_or(EngineError::UnknownQp(qpn))?;
        let mut a = q.attr;
        a.state = q.state;
        a.cur_state = q.state;
        (a.sq_psn, a.rq_psn) = q.psns();
        Ok((a, q.cap))
    }

    /// Moves a QP through its state machine and sets attributes
    /// (`ibv_modify_qp`). The mask says which fields of `attr` count.
    pub fn modify_qp(
        &mut self,
        qpn: u32,
        attr: &QpAttr,
        mask: QpAttrMask,
    ) -> Result<(), EngineError> {
        let now = self.last_now;
        let in_flight = self.in_flight;
        let (config, mem, cqs, srqs, events, counters, pool, delivered) = (
            &self.config,
            &mut self.mem,
            &mut self.cqs,
            &mut self.srqs,
            &mut self.events,
            &mut self.counters,
            &mut self.pool,
            &mut self.delivered,
        );
        let q = self.qps.get_mut(&qpn).ok_or(EngineError::UnknownQp(qpn))?;
        let next = state::check_modify(
            q.qp_type,
            q.state,
            attr,
            mask,
            &config.caps,
            // A path MTU up to the port's max_mtu, as the kernel's rxe
            // checks it (not the active MTU: a larger one is the
            // program's choice, and a datagram the link refuses is
            // counted as send_refused TooLong)
            Mtu::Mtu4096,
        )?;
        if mask.contains(QpAttrMask::AV) {
            if let Some(av) = &attr.av {
                let sgid = config.gids.get(usize::from(av.sgid_index));
                match sgid {
                    None => return Err(invalid("ah_attr.grh.sgid_index", "no such GID index")),
                    Some(s) if s.is_ipv4() != av.dest.is_ipv4() => {
                        return Err(invalid(
                            "ah_attr.grh.dgid",
                            "address family differs from the source GID",
                        ))
                    }
                    _ => {}
                }
            }
        }
        let mut ctx = Ctx {
            now: now.unwrap_or_else(Instant::now),
            config,
            mem,
            cqs,
            srqs,
            events,
            counters,
            pool,
            in_flight,
            delivered,
            over_budget: false,
            last_of_turn: false,
        };
        q.apply_modify(&mut ctx, attr, mask, next);
        self.settle_active(qpn);
        Ok(())
    }

    /// QP `qpn` and a context over the rest of the engine, borrowed apart so
    /// the QP's code can reach the memory tables, CQs and counters.
    fn qp_ctx(&mut self, qpn: u32, now: Instant) -> Option<(&mut Qp, Ctx<'_>)> {
        let q = self.qps.get_mut(&qpn)?;
        Some((q, ctx!(self, now)))
    }

    fn mark_active(&mut self, qpn: u32) {
        if let Some(q) = self.qps.get_mut(&qpn) {
            if !std::mem::replace(&mut q.active, true) {
                self.active.push_back(qpn);
            }
        }
    }

    /// [`Engine::settle`] and then [`Engine::mark_active`], with one lookup
    /// of the QP when nobody waits for the budget (settling then wakes
    /// nobody, so marking the QP first puts it in the same place).
    fn settle_active(&mut self, qpn: u32) {
        if !self.stranded.is_empty() || !self.budget_waiters.is_empty() {
            self.settle(qpn);
            self.mark_active(qpn);
            return;
        }
        let Some(q) = self.qps.get_mut(&qpn) else {
            return;
        };
        if !std::mem::replace(&mut q.active, true) {
            self.active.push_back(qpn);
        }
        let s = Settle::note(&mut self.deadlines, qpn, q);
        self.settled(s);
    }

    /// Posts a send work request. A request the engine cannot even queue
    /// (wrong state, full queue, bad arguments) is an `Err`; a request that
    /// fails later (a bad lkey, a remote error) completes with an error status.
    pub fn post_send(&mut self, qpn: u32, wr: SendWr) -> Result<(), EngineError> {
        let (q, mut ctx) = self.send_queue_for(qpn, &wr)?;
        q.post_send(&mut ctx, wr);
        self.posted(qpn);
        Ok(())
    }

    /// [`Engine::post_send`] of a borrowed work request: its scatter/gather
    /// list is copied into one a finished request gave back, so that a
    /// driver posting from a slice (`ibv_post_send`) allocates nothing per
    /// request once the queue has turned over. The request is copied once,
    /// into its place on the send queue.
    pub fn post_send_ref(&mut self, qpn: u32, wr: &SendWr) -> Result<(), EngineError> {
        let (q, mut ctx) = self.send_queue_for(qpn, wr)?;
        q.post_send_ref(&mut ctx, wr);
        self.posted(qpn);
        Ok(())
    }

    /// [`Engine::settle_active`] after a send was queued on QP `qpn`. A
    /// post only adds to the send queue (in ERR or SQE it completes the
    /// request at once, flushed): the QP's packets in flight and its
    /// deadline are as they were, so settling changes nothing unless QPs
    /// wait for the budget (settling may wake them). Without waiters,
    /// marking the QP active is all there is to do.
    fn posted(&mut self, qpn: u32) {
        if !self.stranded.is_empty() || !self.budget_waiters.is_empty() {
            self.settle_active(qpn);
            return;
        }
        debug_assert!(
            self.qps.get(&qpn).is_none_or(|q| {
                q.in_flight() == q.counted_in_flight && q.next_timeout() == q.filed
            }),
            "a post changed what settling counts"
        );
        self.mark_active(qpn);
    }

    /// QP `qpn` and a context, if `wr` may be queued on its send queue (one
    /// lookup of the QP for the check and the queueing).
    fn send_queue_for(&mut self, qpn: u32, wr: &SendWr) -> Result<(&mut Qp, Ctx<'_>), EngineError> {
        let now = self.last_now.unwrap_or_else(Instant::now);
        let q = self.qps.get_mut(&qpn).ok_or(EngineError::UnknownQp(qpn))?;
        q.check_post_send(wr, &self.config)?;
        Ok((q, ctx!(self, now)))
    }

    /// [`Engine::post_recv`] of a borrowed work request, its list copied as
    /// [`Engine::post_send_ref`] copies it.
    pub fn post_recv_ref(&mut self, qpn: u32, wr: &RecvWr) -> Result<(), EngineError> {
        let owned = RecvWr {
            wr_id: wr.wr_id,
            sg_list: self.pool.copy_sges(&wr.sg_list),
        };
        self.post_recv(qpn, owned)
    }

    /// Posts a receive work request to a QP's own receive queue.
    pub fn post_recv(&mut self, qpn: u32, wr: RecvWr) -> Result<(), EngineError> {
        let q = self.qps.get_mut(&qpn).ok_or(EngineError::UnknownQp(qpn))?;
        if q.srq.is_some() {
            return Err(invalid(
                "qp",
                "the QP uses a shared receive queue; post to the SRQ",
            ));
        }
        if q.state == QpState::Reset {
            return Err(EngineError::WrongState {
                qpn,
                state: q.state,
                what: "post_recv",
            });
        }
        if wr.sg_list.len() > q.cap.max_recv_sge as usize {
            return Err(invalid(
                "sg_list",
                format!(
                    "{} entries, max_recv_sge is {}",
                    wr.sg_list.len(),
                    q.cap.max_recv_sge
                ),
            ));
        }
        if q.rq.len() >= q.cap.max_recv_wr as usize {
            return Err(EngineError::QueueFull {
                queue: "receive queue",
                capacity: q.cap.max_recv_wr as usize,
            });
        }
        if q.state == QpState::Err {
            let c = q.flush_completion_recv(&wr);
            let cq = q.recv_cq;
            deliver(
                &mut self.cqs,
                &mut self.events,
                &mut self.delivered,
                cq,
                c,
                false,
            );
            return Ok(());
        }
        q.rq.push_back(wr);
        Ok(())
    }

    /// Handles one received UDP payload (BTH through ICRC).
    pub fn handle_datagram(&mut self, now: Instant, meta: RecvMeta, data: &[u8]) {
        self.last_now = Some(now);
        self.counters.rcvd_pkts += 1;
        match meta.icrc {
            IcrcStatus::Bad => {
                self.counters.drop(DropReason::IcrcError);
                return;
            }
            IcrcStatus::Unverified => self.counters.icrc_unverified += 1,
            IcrcStatus::Ok => {}
        }
        let pkt = match Packet::new_checked(data) {
            Ok(p) => p,
            Err(e) => {
                self.counters.malformed(e);
                return;
            }
        };
        let qpn = pkt.bth().dest_qp();
        if qpn == mcast::MULTICAST_QPN {
            return self.handle_multicast(now, &meta, &pkt);
        }
        // One lookup of the QP for the check and the handling.
        let Some(q) = self.qps.get_mut(&qpn) else {
            self.counters.drop(DropReason::UnknownQp);
            return;
        };
        let mut ctx = ctx!(self, now);
        q.counters.rcvd_pkts += 1;
        q.handle_packet(&mut ctx, &meta, &pkt);
        self.settle_active(qpn);
    }

    /// A packet to the multicast QPN: a copy to every QP attached to the
    /// group its destination address names (`rxe_rcv_mcast_pkt`).
    fn handle_multicast(&mut self, now: Instant, meta: &RecvMeta, pkt: &Packet<&[u8]>) {
        let gid = mcast::gid_of_group(meta.dst);
        let members = self.groups.members(&gid).to_vec();
        if members.is_empty() {
            self.counters.drop(DropReason::NoGroup);
            return;
        }
        for qpn in members {
            let Some(q) = self.qps.get_mut(&qpn) else {
                continue;
            };
            let mut ctx = ctx!(self, now);
            q.counters.rcvd_pkts += 1;
            q.handle_packet(&mut ctx, meta, pkt);
            self.settle_active(qpn);
        }
    }

    /// Attaches UD QP `qpn` to multicast group `gid` (`ibv_attach_mcast`;
    /// the LID is ignored on RoCE). [`mcast::Attached::First`] says the
    /// group is new to the device: its IP group is to be joined.
    pub fn attach_mcast(
        &mut self,
        qpn: u32,
        gid: mcast::Mgid,
    ) -> Result<mcast::Attached, EngineError> {
        let q = self.qps.get(&qpn).ok_or(EngineError::UnknownQp(qpn))?;
        if q.qp_type != QpType::Ud {
            return Err(invalid("qp", "only UD QPs join multicast groups"));
        }
        self.groups.attach(gid, qpn).map_err(mcast_error)
    }

    /// Detaches QP `qpn` from group `gid` (`ibv_detach_mcast`).
    /// [`mcast::Detached::Last`] says no QP is left: leave the IP group.
    pub fn detach_mcast(
        &mut self,
        qpn: u32,
        gid: mcast::Mgid,
    ) -> Result<mcast::Detached, EngineError> {
        if !self.qps.contains_key(&qpn) {
            return Err(EngineError::UnknownQp(qpn));
        }
        if mcast::group_of_gid(gid).is_none() {
            return Err(mcast_error(mcast::McastError::NotMulticast));
        }
        self.groups.detach(gid, qpn).map_err(mcast_error)
    }

    /// Detaches QP `qpn` from every group (before destroying it, for a
    /// caller that does not detach one by one); returns the groups left
    /// with no QP.
    pub fn detach_all_mcast(&mut self, qpn: u32) -> Vec<mcast::Mgid> {
        self.groups.detach_all(qpn)
    }

    /// Brings the device's view of QP `qpn` up to date after the QP's code
    /// ran: its packets in flight in the device's count (waking QPs waiting
    /// for room), and its deadline in the timer heap.
    fn settle(&mut self, qpn: u32) {
        let Some(q) = self.qps.get_mut(&qpn) else {
            return;
        };
        let s = Settle::note(&mut self.deadlines, qpn, q);
        self.settled(s);
    }

    /// The rest of [`Engine::settle`] once the QP's part is noted.
    fn settled(&mut self, s: Settle) {
        match s.refiled {
            deadlines::Filed::Unchanged => {}
            deadlines::Filed::Changed => {
                self.deadlines.compact(&self.qps);
            }
            deadlines::Filed::CheckTop => self.deadlines.tidy(&self.qps),
        }
        self.set_in_flight(self.in_flight - s.before + s.now);
    }

    /// A QP woken from the budget waiters ended its turn (or went away).
    fn woken_turn_ended(&mut self) {
        debug_assert!(self.woken > 0, "more woken turns ended than began");
        self.woken = self.woken.saturating_sub(1);
    }

    #[inline]
    fn set_in_flight(&mut self, n: u32) {
        self.in_flight = n;
        // Nobody to wake: the common case, settled after every packet.
        if self.stranded.is_empty() && self.budget_waiters.is_empty() {
            return;
        }
        self.wake_waiters();
    }

    /// Wakes QPs waiting for room in the budget (see `set_in_flight`).
    fn wake_waiters(&mut self) {
        // Waiting QPs are woken in turn, one for every BUDGET_BURST packets
        // of room, so that each sends a burst of consecutive packets (which
        // the responder acknowledges with one ACK) rather than a thousand
        // QPs a packet each. Below half the budget, or when a QP has
        // packets stranded (on the wire with no ACK asked for), one more
        // for a last partial burst: the woken QP's last packet asks for an
        // ACK (it ends the turn or fills the budget). A woken QP holds its
        // burst's share of the room until its turn ends (`woken`): before,
        // every packet sent recomputed the room as if nobody had been woken
        // yet, and with 1024 QPs three QPs were polled for every packet
        // sent, two of them only to find the budget full and go back to
        // waiting.
        let max = self.config.max_in_flight;
        let room = max.saturating_sub(self.in_flight);
        let burst = BUDGET_BURST.min(max / 4).max(1);
        let bursts = if self.in_flight.saturating_mul(2) <= max || !self.stranded.is_empty() {
            room.div_ceil(burst)
        } else {
            room / burst
        };
        for _ in 0..bursts.saturating_sub(self.woken) {
            let Some(w) = self
                .stranded
                .pop_front()
                .or_else(|| self.budget_waiters.pop_front())
            else {
                break;
            };
            if let Some(q) = self.qps.get_mut(&w) {
                q.budget_waiting = false;
                q.budget_woken = true;
                self.woken += 1;
            }
            self.mark_active(w);
        }
    }

    /// The next packet to send, if any. Call until it returns `None` after
    /// every input and command.
    pub fn poll_transmit(&mut self, now: Instant) -> Option<Transmit> {
        self.last_now = Some(now);
        // Every poll that sends nothing takes a QP off `active`; only QPs
        // woken from `budget_waiters` join it meanwhile.
        let mut spins = self.active.len() + self.budget_waiters.len() + self.stranded.len();
        while spins > 0 {
            spins -= 1;
            let qpn = self.active.pop_front()?;
            let turn_ends = self.burst_sent + 1 >= BUDGET_BURST;
            // The turn ends after this packet if the burst is over and
            // another QP wants to send (the requester also ends it when a
            // new packet fills the budget).
            let others = !self.active.is_empty()
                || !self.budget_waiters.is_empty()
                || !self.stranded.is_empty();
            let last_of_turn = turn_ends && others;
            // The QP is looked up once for the poll and the settling after.
            let Some(q) = self.qps.get_mut(&qpn) else {
                continue;
            };
            let mut ctx = ctx!(self, now);
            ctx.last_of_turn = last_of_turn;
            match q.poll_transmit(&mut ctx) {
                Some(t) => {
                    q.counters.sent_pkts += 1;
                    ctx.counters.sent_pkts += 1;
                    let turn_ended = turn_ends && std::mem::take(&mut q.budget_woken);
                    let s = Settle::note(&mut self.deadlines, qpn, q);
                    if turn_ended {
                        self.woken_turn_ended();
                    }
                    self.settled(s);
                    // A QP keeps the turn for a burst of packets (which the
                    // responder can acknowledge with one ACK), then goes to
                    // the back.
                    self.burst_sent += 1;
                    if self.burst_sent < BUDGET_BURST {
                        self.active.push_front(qpn);
                    } else {
                        self.burst_sent = 0;
                        self.active.push_back(qpn);
                    }
                    return Some(t);
                }
                None => {
                    let waits = ctx.over_budget && !std::mem::replace(&mut q.budget_waiting, true);
                    // A QP whose last packets asked for no ACK has them
                    // stranded until it sends again: it goes first. (Rare
                    // since the last packet of a turn asks for an ACK.)
                    let stranded = q.stranded();
                    let turn_ended = std::mem::take(&mut q.budget_woken);
                    q.active = false;
                    let s = Settle::note(&mut self.deadlines, qpn, q);
                    if turn_ended {
                        self.woken_turn_ended();
                    }
                    self.burst_sent = 0;
                    self.settled(s);
                    match (waits, stranded) {
                        (true, true) => self.stranded.push_back(qpn),
                        (true, false) => self.budget_waiters.push_back(qpn),
                        _ => {}
                    }
                }
            }
        }
        None
    }

    /// Hands back the buffer of a packet that has been sent, so that a
    /// later packet is built in it instead of in newly allocated memory.
    /// Optional: a driver that keeps its `Transmit`s loses nothing but speed.
    pub fn recycle(&mut self, t: Transmit) {
        self.pool.give(t.payload);
    }

    /// The earliest time [`Engine::handle_timeout`] has something to do.
    pub fn next_timeout(&self) -> Option<Instant> {
        let next = self.deadlines.next();
        debug_assert_eq!(
            next,
            self.qps.values().filter_map(|q| q.next_timeout()).min(),
            "the timer heap lost track of a QP's deadline"
        );
        next
    }

    /// Runs the timers that expired at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.last_now = Some(now);
        for qpn in self.deadlines.take_due(now, &mut self.qps) {
            if let Some((q, mut ctx)) = self.qp_ctx(qpn, now) {
                q.handle_timeout(&mut ctx);
            }
            self.settle_active(qpn);
        }
    }

    /// The next asynchronous event.
    pub fn poll_event(&mut self) -> Option<AsyncEvent> {
        self.events.pop_front()
    }

    /// Whether an asynchronous event waits for [`Engine::poll_event`].
    pub fn has_events(&self) -> bool {
        !self.events.is_empty()
    }

    /// Number of QPs.
    pub fn num_qps(&self) -> usize {
        self.qps.len()
    }

    /// Whether a parsed packet would be accepted: convenience for tools.
    pub fn is_local(&self, addr: IpAddr) -> bool {
        self.config.gids.contains(&addr)
    }
}
