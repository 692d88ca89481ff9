//! The Communication Manager (CM) protocol, sans-IO: one [`CmAgent`] per
//! soft device address sets up and tears down connections with CM MADs
//! (IBTA Vol. 1 chapter 12, as the Linux kernel's
//! `drivers/infiniband/core/cm.c` behaves), and resolves UD services (SIDR).
//!
//! The agent has no socket, thread or clock. Its methods sort as in
//! [`crate::engine`]:
//!
//! * **inputs**: [`CmAgent::handle_mad`] (a 256-byte MAD from a peer's GSI
//!   QP, with the peer's address) or [`CmAgent::handle_gsi_packet`] (the
//!   UD packet around it), and [`CmAgent::handle_timeout`] when the
//!   deadline of [`CmAgent::poll_timeout`] has passed;
//! * **commands**: [`CmAgent::listen`], [`CmAgent::connect`],
//!   [`CmAgent::accept`], [`CmAgent::reject`], [`CmAgent::mra`],
//!   [`CmAgent::ready_to_use`], [`CmAgent::notify_established`],
//!   [`CmAgent::disconnect`], [`CmAgent::destroy`],
//!   [`CmAgent::sidr_request`], [`CmAgent::sidr_reply`]; bad arguments
//!   are a typed [`CmError`] naming the argument, and change nothing;
//! * **outputs**, to drain after every input or command:
//!   [`CmAgent::poll_transmit`] (MADs to send to a peer's QP 1),
//!   [`CmAgent::poll_event`] ([`CmEvent`]s for the verbs layer), and
//!   [`CmAgent::poll_timeout`] (when to call `handle_timeout`);
//! * **getters**: [`CmAgent::state`], [`CmAgent::qp_params`],
//!   [`CmAgent::counters`].
//!
//! What it does, in brief (docs/cm.md has the whole story):
//!
//! * **Active side**: `connect` sends a REQ and resends it every
//!   2 × packet lifetime + remote CM response timeout, `max_cm_retries`
//!   times, then reports [`CmEvent::Unreachable`]. The REP gives
//!   [`CmEvent::ConnectResponse`] with the QP's attributes; after moving
//!   its QP to RTR/RTS the verbs layer calls `ready_to_use`, which sends
//!   the RTU (librdmacm does the same from `rdma_connect`'s completion).
//! * **Passive side**: a REQ for a listened service gives
//!   [`CmEvent::ConnectRequest`]; `accept` sends the REP (resent every
//!   local CM response timeout of the REQ until the RTU comes), and the RTU
//!   gives [`CmEvent::Established`]. A REQ nobody listens on is rejected
//!   with reason 8 (invalid service ID), a REQ from a QP still connected
//!   (or in timewait) with 10 (stale connection).
//! * **Duplicates** are answered as Linux answers them: a REQ resent while
//!   the application is slow gets an MRA (rdma_cm's delayed MRA), a REQ
//!   after our REP gets the REP again, a REP after our RTU the RTU again,
//!   a DREQ in timewait (or for a connection long gone) a DREP; others are
//!   dropped and counted.
//! * **Release**: `disconnect` sends a DREQ (established) or the DREP (after
//!   a DREQ came); either way the connection waits out its timewait
//!   before its ID can be reused.

mod types;

pub use types::*;

use crate::mad::cm::{
    self as msg, AttributeId, Drep, Dreq, Mra, MraedMessage, Rej, RejReason, RejectedMessage, Rep,
    Req, Rtu, SidrRep, SidrReq, SidrStatus, TransportServiceType,
};
use crate::mad::{self, CmMad, CmMessage, CmaHeader, FixedBytes, GsiMad, MAD_LEN};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv6Addr};
use std::time::{Duration, Instant};

/// A message waiting for its answer, resent until it comes.
#[derive(Debug, Clone)]
struct Retry {
    mad: [u8; MAD_LEN],
    deadline: Instant,
    interval: Duration,
    left: u8,
}

#[derive(Debug, Clone)]
struct Conn {
    id: u32,
    /// The peer's communication ID, 0 until known (active: until the REP).
    remote_id: u32,
    remote_addr: IpAddr,
    state: CmState,
    active: bool,
    /// The transaction ID of the exchange in progress (the REQ's, then a
    /// DREQ's), which answers reuse.
    tid: u64,
    local_qpn: u32,
    remote_qpn: u32,
    /// The REQ (sent or received).
    req: Req,
    /// The REP (sent or received), once there is one.
    rep: Option<Rep>,
    /// How often this connection's messages are resent (the CM response
    /// timeout that applies, see `connect` and `on_req`).
    timeout: Duration,
    max_retries: u8,
    retry: Option<Retry>,
    /// Passive side, REQ not answered: MRA this if the REQ comes again.
    delayed_mra: Option<u8>,
    /// The MRA we sent (resent on duplicates in MRA_*_SENT).
    mra: Option<[u8; MAD_LEN]>,
    /// The RTU we sent (resent on a duplicate REP).
    rtu: Option<[u8; MAD_LEN]>,
    timewait_until: Option<Instant>,
    /// The listener whose backlog this pending REQ counts against.
    listener: Option<u64>,
    established: bool,
    disconnected: bool,
    /// Destroyed by the application: finish the protocol, report nothing.
    silent: bool,
}

impl Conn {
    fn deadline(&self) -> Option<Instant> {
        match (self.retry.as_ref().map(|r| r.deadline), self.timewait_until) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

#[derive(Debug, Clone)]
struct Listener {
    pending: usize,
}

/// A REQ for a service that stopped listening moments ago, held in case it
/// listens again (see [`CmConfig::relisten_grace`]).
#[derive(Debug, Clone)]
struct Parked {
    from: IpAddr,
    tid: u64,
    req: Req,
    /// When it gets its REJ 8 if nobody listens by then.
    until: Instant,
}

/// REQs held at most at once (the rest are rejected at once).
const MAX_PARKED: usize = 32;

#[derive(Debug, Clone)]
struct SidrOut {
    remote_addr: IpAddr,
    retry: Retry,
}

#[derive(Debug, Clone)]
struct SidrIn {
    from: IpAddr,
    tid: u64,
    request_id: u32,
    service_id: u64,
}

/// The agent's outputs, apart from its tables so both can be borrowed.
#[derive(Debug)]
struct Out {
    tx: VecDeque<Transmit>,
    events: VecDeque<CmEvent>,
    counters: CmCounters,
    psn: u32,
    max_queued: usize,
}

impl Out {
    fn send(&mut self, dst: IpAddr, mad: [u8; MAD_LEN]) {
        if self.tx.len() >= self.max_queued {
            self.counters.tx_overflow += 1;
            return;
        }
        let attr = AttributeId(u16::from_be_bytes([mad[16], mad[17]]));
        *self.counters.sent.entry(attr).or_default() += 1;
        self.tx.push_back(Transmit {
            dst,
            psn: self.psn,
            mad,
        });
        self.psn = (self.psn + 1) & 0xff_ffff;
    }
    fn send_msg(&mut self, dst: IpAddr, tid: u64, m: impl Into<CmMessage>) -> [u8; MAD_LEN] {
        let mad = CmMad::new(tid, m).to_bytes();
        self.send(dst, mad);
        mad
    }
    fn drop(&mut self, why: CmDropReason) {
        *self.counters.drops.entry(why).or_default() += 1;
    }
    fn event(&mut self, c: &Conn, e: CmEvent) {
        if !c.silent {
            self.events.push_back(e);
        }
    }
}

/// One soft device's Communication Manager; see the [module docs](self).
#[derive(Debug)]
pub struct CmAgent {
    cfg: CmConfig,
    local_gid: Ipv6Addr,
    rng: StdRng,
    conns: HashMap<u32, Conn>,
    /// (peer address, peer's communication ID) -> our ID.
    remote_ids: HashMap<(IpAddr, u32), u32>,
    /// (peer address, peer's QPN) -> our ID, for stale-connection checks.
    remote_qpns: HashMap<(IpAddr, u32), u32>,
    listeners: HashMap<u64, Listener>,
    sidr_out: HashMap<u32, SidrOut>,
    sidr_in: HashMap<u32, SidrIn>,
    /// (peer address, request ID) -> our SIDR ID, for duplicates.
    sidr_in_by_remote: HashMap<(IpAddr, u32), u32>,
    /// Services that stopped listening, and until when a REQ for them is
    /// held rather than rejected.
    closed: HashMap<u64, Instant>,
    parked: VecDeque<Parked>,
    out: Out,
}

/// `now + d`, saturating instead of panicking.
fn after(now: Instant, d: Duration) -> Instant {
    now.checked_add(d).unwrap_or(now)
}

fn check_pd<const N: usize>(arg: &'static str, pd: &[u8]) -> Result<FixedBytes<N>, CmError> {
    FixedBytes::from_prefix(pd).ok_or(CmError::PrivateDataTooLong {
        arg,
        len: pd.len(),
        max: N,
    })
}

fn check_bits(arg: &'static str, value: u64, bits: u32) -> Result<(), CmError> {
    if value >> bits != 0 {
        return Err(CmError::OutOfRange {
            arg,
            value,
            why: match bits {
                3 => "a 3-bit field (0..=7)",
                4 => "a 4-bit field (0..=15)",
                5 => "a 5-bit field (0..=31)",
                20 => "a 20-bit field",
                _ => "a 24-bit field",
            },
        });
    }
    Ok(())
}

fn check_qpn(arg: &'static str, qpn: u32) -> Result<(), CmError> {
    check_bits(arg, qpn.into(), 24)?;
    if qpn <= 1 {
        return Err(CmError::OutOfRange {
            arg,
            value: qpn.into(),
            why: "QPs 0 and 1 are the special QPs",
        });
    }
    Ok(())
}

impl CmAgent {
    /// A new agent with no listeners and no connections.
    pub fn new(cfg: CmConfig) -> Self {
        let max_queued = cfg.max_queued_mads;
        CmAgent {
            local_gid: gid_of(cfg.local_addr),
            rng: StdRng::seed_from_u64(cfg.seed),
            cfg,
            conns: HashMap::new(),
            remote_ids: HashMap::new(),
            remote_qpns: HashMap::new(),
            listeners: HashMap::new(),
            sidr_out: HashMap::new(),
            sidr_in: HashMap::new(),
            sidr_in_by_remote: HashMap::new(),
            closed: HashMap::new(),
            parked: VecDeque::new(),
            out: Out {
                tx: VecDeque::new(),
                events: VecDeque::new(),
                counters: CmCounters::default(),
                psn: 0,
                max_queued,
            },
        }
    }

    // ----- getters -----

    /// The configuration.
    pub fn config(&self) -> &CmConfig {
        &self.cfg
    }
    /// Our GID (the address, IPv4-mapped for IPv4).
    pub fn local_gid(&self) -> Ipv6Addr {
        self.local_gid
    }
    /// The counters.
    pub fn counters(&self) -> &CmCounters {
        &self.out.counters
    }
    /// A connection's state, `None` once it is gone.
    pub fn state(&self, conn: ConnId) -> Option<CmState> {
        self.conns.get(&conn.0).map(|c| c.state)
    }
    /// Connections the agent holds (timewait included).
    pub fn connection_count(&self) -> usize {
        self.conns.len()
    }
    /// The peer's communication ID, once known.
    pub fn remote_comm_id(&self, conn: ConnId) -> Option<u32> {
        self.conns
            .get(&conn.0)
            .map(|c| c.remote_id)
            .filter(|&r| r != 0)
    }
    /// The transaction ID the agent gives exchanges it starts with this
    /// local communication ID: Linux's `cm_form_tid`, the high 32 bits
    /// `tid_high` and the low 32 the ID's bytes as a little-endian host
    /// holds the big-endian value.
    pub fn tid_for(&self, local_comm_id: u32) -> u64 {
        (u64::from(self.cfg.tid_high) << 32) | u64::from(local_comm_id.swap_bytes())
    }
    /// The QP attributes of a connection, once the REQ and REP are both
    /// known (see [`QpParams`]).
    pub fn qp_params(&self, conn: ConnId) -> Option<QpParams> {
        self.conns.get(&conn.0).and_then(qp_params)
    }

    // ----- outputs -----

    /// The next MAD to send, if any.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.out.tx.pop_front()
    }
    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<CmEvent> {
        self.out.events.pop_front()
    }
    /// When [`Self::handle_timeout`] should next be called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let conns = self.conns.values().filter_map(Conn::deadline);
        let sidr = self.sidr_out.values().map(|s| s.retry.deadline);
        let parked = self.parked.iter().map(|p| p.until);
        conns.chain(sidr).chain(parked).min()
    }

    // ----- commands -----

    /// Takes REQs and SIDR_REQs for `service_id`.
    pub fn listen(&mut self, service_id: u64) -> Result<(), CmError> {
        if self.listeners.contains_key(&service_id) {
            return Err(CmError::ServiceInUse(service_id));
        }
        self.listeners.insert(service_id, Listener { pending: 0 });
        self.closed.remove(&service_id);
        // REQs that came while the service was between two listeners are
        // the new listener's now, in the order they came.
        let (mine, others): (VecDeque<Parked>, VecDeque<Parked>) = std::mem::take(&mut self.parked)
            .into_iter()
            .partition(|p| p.req.service_id == service_id);
        self.parked = others;
        for p in mine {
            // (`on_req` reads the time only to hold a REQ nobody listens
            // for; this one has its listener.)
            self.on_req(p.until, p.from, p.tid, p.req);
        }
        Ok(())
    }

    /// Stops taking REQs for `service_id`; connections already requested
    /// are not affected. A REQ for it in the next
    /// [`CmConfig::relisten_grace`] is held for a new listener on it, and
    /// rejected (REJ 8) when none comes.
    pub fn unlisten(&mut self, now: Instant, service_id: u64) -> Result<(), CmError> {
        self.listeners
            .remove(&service_id)
            .ok_or(CmError::NotListening(service_id))?;
        if !self.cfg.relisten_grace.is_zero() {
            self.closed
                .insert(service_id, after(now, self.cfg.relisten_grace));
        }
        Ok(())
    }

    fn alloc_id(&mut self) -> Result<u32, CmError> {
        let n = self.conns.len() + self.sidr_out.len() + self.sidr_in.len();
        if n >= self.cfg.max_connections {
            return Err(CmError::TooManyConnections(n));
        }
        for _ in 0..64 {
            let r: u32 = self.rng.gen();
            let id = match self.cfg.comm_id_prefix {
                Some(p) => (u32::from(p) << 24) | (r & 0xff_ffff),
                None => r,
            };
            if id != 0
                && !self.conns.contains_key(&id)
                && !self.sidr_out.contains_key(&id)
                && !self.sidr_in.contains_key(&id)
            {
                return Ok(id);
            }
        }
        Err(CmError::TooManyConnections(n))
    }

    fn conn_mut(&mut self, conn: ConnId) -> Result<&mut Conn, CmError> {
        self.conns
            .get_mut(&conn.0)
            .ok_or(CmError::UnknownConnection(conn))
    }

    /// Active side: sends a REQ; the answer comes as
    /// [`CmEvent::ConnectResponse`], [`CmEvent::Rejected`] or
    /// [`CmEvent::Unreachable`].
    pub fn connect(&mut self, now: Instant, p: &ConnectParams) -> Result<ConnId, CmError> {
        check_qpn("local_qpn", p.local_qpn)?;
        check_bits("starting_psn", p.starting_psn.into(), 24)?;
        check_bits("retry_count", p.retry_count.into(), 3)?;
        check_bits("rnr_retry_count", p.rnr_retry_count.into(), 3)?;
        check_bits(
            "remote_cm_response_timeout",
            p.remote_cm_response_timeout.into(),
            5,
        )?;
        check_bits(
            "local_cm_response_timeout",
            p.local_cm_response_timeout.into(),
            5,
        )?;
        check_bits("max_cm_retries", p.max_cm_retries.into(), 4)?;
        check_bits("local_ack_timeout", p.local_ack_timeout.into(), 5)?;
        check_bits("flow_label", p.flow_label.into(), 20)?;
        let private_data = check_pd::<92>("private_data", &p.private_data)?;
        let id = self.alloc_id()?;
        let req = Req {
            local_comm_id: id,
            vendor_id: 0,
            service_id: p.service_id,
            local_ca_guid: self.cfg.ca_guid,
            local_qkey: 0,
            local_qpn: p.local_qpn,
            responder_resources: p.responder_resources,
            local_eecn: 0,
            initiator_depth: p.initiator_depth,
            remote_eecn: 0,
            remote_cm_response_timeout: p.remote_cm_response_timeout,
            transport_service_type: p.qp_type.transport(),
            end_to_end_flow_control: false,
            starting_psn: p.starting_psn,
            local_cm_response_timeout: p.local_cm_response_timeout,
            retry_count: p.retry_count,
            pkey: 0xffff,
            path_mtu: p.path_mtu as u8,
            rdc_exists: false,
            rnr_retry_count: p.rnr_retry_count,
            max_cm_retries: p.max_cm_retries,
            srq: p.srq,
            extended_transport_type: 0,
            primary_path: roce_path(self.cfg.local_addr, p),
            alternate_path: Default::default(),
            sap_supported: false,
            private_data,
        };
        let tid = self.tid_for(id);
        let plt = msg::timeout(self.cfg.packet_life_time);
        let interval = plt * 2 + msg::timeout(p.remote_cm_response_timeout);
        let mad = self.out.send_msg(p.remote_addr, tid, req);
        let c = Conn {
            id,
            remote_id: 0,
            remote_addr: p.remote_addr,
            state: CmState::ReqSent,
            active: true,
            tid,
            local_qpn: p.local_qpn,
            remote_qpn: 0,
            req,
            rep: None,
            timeout: interval,
            max_retries: p.max_cm_retries,
            retry: Some(Retry {
                mad,
                deadline: after(now, interval),
                interval,
                left: p.max_cm_retries,
            }),
            delayed_mra: None,
            mra: None,
            rtu: None,
            timewait_until: None,
            listener: None,
            established: false,
            disconnected: false,
            silent: false,
        };
        self.conns.insert(id, c);
        Ok(ConnId(id))
    }

    /// Passive side: answers a [`CmEvent::ConnectRequest`] with a REP.
    /// Returns the QP attributes to move the QP to RTR and RTS with (do it
    /// before the REP leaves: before the next `poll_transmit`).
    pub fn accept(
        &mut self,
        now: Instant,
        conn: ConnId,
        p: &AcceptParams,
    ) -> Result<QpParams, CmError> {
        check_qpn("local_qpn", p.local_qpn)?;
        check_bits("starting_psn", p.starting_psn.into(), 24)?;
        check_bits("target_ack_delay", p.target_ack_delay.into(), 5)?;
        check_bits("rnr_retry_count", p.rnr_retry_count.into(), 3)?;
        let private_data = check_pd::<196>("private_data", &p.private_data)?;
        let guid = self.cfg.ca_guid;
        let c = self
            .conns
            .get_mut(&conn.0)
            .ok_or(CmError::UnknownConnection(conn))?;
        if !matches!(c.state, CmState::ReqRcvd | CmState::MraReqSent) {
            return Err(CmError::InvalidState {
                conn,
                state: c.state,
                op: "accept",
            });
        }
        let rep = Rep {
            local_comm_id: c.id,
            remote_comm_id: c.remote_id,
            local_qkey: 0,
            local_qpn: p.local_qpn,
            vendor_id: 0,
            local_eecn: 0,
            starting_psn: p.starting_psn,
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            target_ack_delay: p.target_ack_delay,
            failover_accepted: 0,
            end_to_end_flow_control: false,
            rnr_retry_count: p.rnr_retry_count,
            srq: p.srq,
            local_ca_guid: guid,
            private_data,
        };
        release_backlog(&mut self.listeners, c);
        c.local_qpn = p.local_qpn;
        c.rep = Some(rep);
        c.state = CmState::RepSent;
        c.delayed_mra = None;
        let mad = self.out.send_msg(c.remote_addr, c.tid, rep);
        c.retry = Some(Retry {
            mad,
            deadline: after(now, c.timeout),
            interval: c.timeout,
            left: c.max_retries,
        });
        Ok(qp_params(c).expect("REQ and REP known"))
    }

    /// Refuses a REQ (passive, before `accept`) or a REP (active, before
    /// `ready_to_use`) with a REJ; also aborts a connection still being
    /// set up. `private_data` at most 148 bytes; `ari` at most 72.
    pub fn reject(
        &mut self,
        now: Instant,
        conn: ConnId,
        reason: RejReason,
        ari: &[u8],
        private_data: &[u8],
    ) -> Result<(), CmError> {
        let private_data = check_pd::<148>("private_data", private_data)?;
        let ari_bytes = check_pd::<72>("ari", ari)?;
        let c = self
            .conns
            .get_mut(&conn.0)
            .ok_or(CmError::UnknownConnection(conn))?;
        let message = match c.state {
            CmState::ReqRcvd | CmState::MraReqSent => RejectedMessage::Req,
            CmState::RepRcvd | CmState::MraRepSent => RejectedMessage::Rep,
            CmState::ReqSent | CmState::MraReqRcvd | CmState::RepSent | CmState::MraRepRcvd => {
                RejectedMessage::Other
            }
            state => {
                return Err(CmError::InvalidState {
                    conn,
                    state,
                    op: "reject",
                })
            }
        };
        let rej = Rej {
            local_comm_id: c.id,
            remote_comm_id: c.remote_id,
            message_rejected: message,
            reject_info_length: ari.len() as u8,
            reason,
            ari: ari_bytes,
            private_data,
        };
        self.out.send_msg(c.remote_addr, c.tid, rej);
        if message == RejectedMessage::Rep {
            // Linux: the active side that refuses a REP enters timewait.
            enter_timewait(c, now, self.cfg.packet_life_time);
        } else {
            let id = c.id;
            self.forget(id);
        }
        Ok(())
    }

    /// Sends an MRA now ("your REQ/REP arrived; my answer may take
    /// 4.096 µs × 2^`service_timeout` longer"), passive side before
    /// `accept` or active side before `ready_to_use`; duplicates of the
    /// REQ/REP are answered with it again.
    pub fn mra(&mut self, _now: Instant, conn: ConnId, service_timeout: u8) -> Result<(), CmError> {
        check_bits("service_timeout", service_timeout.into(), 5)?;
        let c = self
            .conns
            .get_mut(&conn.0)
            .ok_or(CmError::UnknownConnection(conn))?;
        let (what, next) = match c.state {
            CmState::ReqRcvd | CmState::MraReqSent => (MraedMessage::Req, CmState::MraReqSent),
            CmState::RepRcvd | CmState::MraRepSent => (MraedMessage::Rep, CmState::MraRepSent),
            state => {
                return Err(CmError::InvalidState {
                    conn,
                    state,
                    op: "mra",
                })
            }
        };
        send_mra(&mut self.out, c, what, service_timeout);
        c.state = next;
        Ok(())
    }

    /// Active side, after [`CmEvent::ConnectResponse`] and moving the QP
    /// to RTS: sends the RTU (`private_data` at most 224 bytes) and
    /// reports [`CmEvent::Established`].
    pub fn ready_to_use(
        &mut self,
        _now: Instant,
        conn: ConnId,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        let pd = check_pd::<224>("private_data", private_data)?;
        let c = self
            .conns
            .get_mut(&conn.0)
            .ok_or(CmError::UnknownConnection(conn))?;
        if !matches!(c.state, CmState::RepRcvd | CmState::MraRepSent) {
            return Err(CmError::InvalidState {
                conn,
                state: c.state,
                op: "ready_to_use",
            });
        }
        let rtu = Rtu {
            local_comm_id: c.id,
            remote_comm_id: c.remote_id,
            private_data: pd,
        };
        c.rtu = Some(self.out.send_msg(c.remote_addr, c.tid, rtu));
        c.state = CmState::Established;
        establish(&mut self.out, c, Vec::new());
        Ok(())
    }

    /// Passive side: the QP received its first packet before the RTU
    /// (`IB_EVENT_COMM_EST`): the connection is established; the REP is
    /// no longer resent.
    pub fn notify_established(&mut self, _now: Instant, conn: ConnId) -> Result<(), CmError> {
        let c = self
            .conns
            .get_mut(&conn.0)
            .ok_or(CmError::UnknownConnection(conn))?;
        match c.state {
            CmState::RepSent | CmState::MraRepRcvd => {
                c.retry = None;
                c.state = CmState::Established;
                establish(&mut self.out, c, Vec::new());
                Ok(())
            }
            CmState::Established => Ok(()),
            state => Err(CmError::InvalidState {
                conn,
                state,
                op: "notify_established",
            }),
        }
    }

    /// Releases a connection (rdma_cm's `rdma_disconnect`): established,
    /// sends a DREQ (resent until the DREP; [`CmEvent::Disconnected`]
    /// comes with the DREP or the timeout); after a DREQ came, sends the
    /// DREP and enters timewait. In DREQ_SENT or timewait it does nothing.
    /// `private_data` at most 220 bytes (DREQ) or 224 (DREP).
    pub fn disconnect(
        &mut self,
        now: Instant,
        conn: ConnId,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        let plt = self.cfg.packet_life_time;
        let tid = self.tid_for(conn.0);
        let c = self
            .conns
            .get_mut(&conn.0)
            .ok_or(CmError::UnknownConnection(conn))?;
        match c.state {
            CmState::Established => {
                let dreq = Dreq {
                    local_comm_id: c.id,
                    remote_comm_id: c.remote_id,
                    remote_qpn_eecn: c.remote_qpn,
                    private_data: check_pd("private_data", private_data)?,
                };
                c.tid = tid;
                let mad = self.out.send_msg(c.remote_addr, tid, dreq);
                c.state = CmState::DreqSent;
                c.retry = Some(Retry {
                    mad,
                    deadline: after(now, c.timeout),
                    interval: c.timeout,
                    left: c.max_retries,
                });
                Ok(())
            }
            CmState::DreqRcvd => {
                let drep = Drep {
                    local_comm_id: c.id,
                    remote_comm_id: c.remote_id,
                    private_data: check_pd("private_data", private_data)?,
                };
                self.out.send_msg(c.remote_addr, c.tid, drep);
                enter_timewait(c, now, plt);
                Ok(())
            }
            CmState::DreqSent | CmState::Timewait => Ok(()),
            state => Err(CmError::InvalidState {
                conn,
                state,
                op: "disconnect",
            }),
        }
    }

    /// The application is done with a connection in any state (Linux's
    /// `ib_destroy_cm_id`): a REQ or REP being set up is rejected (reason
    /// 4 timeout with our CA GUID for our own unanswered REQ, 28 consumer
    /// defined otherwise), an established connection sends a DREQ, a
    /// received DREQ is answered; what remains of the protocol (DREQ
    /// retries, timewait) runs on with no more events.
    pub fn destroy(&mut self, now: Instant, conn: ConnId) -> Result<(), CmError> {
        let plt = self.cfg.packet_life_time;
        let guid = self.cfg.ca_guid;
        let state = self.conn_mut(conn)?.state;
        match state {
            CmState::ReqSent | CmState::MraReqRcvd => {
                self.reject(now, conn, RejReason::TIMEOUT, &guid.to_be_bytes(), &[])?;
            }
            CmState::ReqRcvd
            | CmState::MraReqSent
            | CmState::RepSent
            | CmState::MraRepRcvd
            | CmState::RepRcvd
            | CmState::MraRepSent => {
                self.reject(now, conn, RejReason::CONSUMER_DEFINED, &[], &[])?;
            }
            CmState::Established | CmState::DreqRcvd => {
                self.disconnect(now, conn, &[])?;
            }
            CmState::DreqSent | CmState::Timewait => {}
        }
        if let Some(c) = self.conns.get_mut(&conn.0) {
            c.silent = true;
            if c.state == CmState::DreqSent && state == CmState::Established {
                // Linux does not wait for the DREP of a destroyed ID.
                c.retry = None;
                enter_timewait(c, now, plt);
            }
        }
        Ok(())
    }

    /// Asks `remote_addr` which UD QP serves a service ID; the answer comes
    /// as [`CmEvent::SidrReply`] or [`CmEvent::SidrUnreachable`].
    pub fn sidr_request(&mut self, now: Instant, p: &SidrParams) -> Result<SidrId, CmError> {
        check_bits("timeout", p.timeout.into(), 5)?;
        check_bits("max_cm_retries", p.max_cm_retries.into(), 4)?;
        let private_data = check_pd::<216>("private_data", &p.private_data)?;
        let id = self.alloc_id()?;
        let req = SidrReq {
            request_id: id,
            pkey: p.pkey,
            service_id: p.service_id,
            private_data,
        };
        let tid = self.tid_for(id);
        let mad = self.out.send_msg(p.remote_addr, tid, req);
        let interval = msg::timeout(p.timeout);
        self.sidr_out.insert(
            id,
            SidrOut {
                remote_addr: p.remote_addr,
                retry: Retry {
                    mad,
                    deadline: after(now, interval),
                    interval,
                    left: p.max_cm_retries,
                },
            },
        );
        Ok(SidrId(id))
    }

    /// Answers a [`CmEvent::SidrRequest`].
    pub fn sidr_reply(
        &mut self,
        _now: Instant,
        id: SidrId,
        p: &SidrReplyParams,
    ) -> Result<(), CmError> {
        check_bits("qpn", p.qpn.into(), 24)?;
        let private_data = check_pd::<136>("private_data", &p.private_data)?;
        let s = self.sidr_in.remove(&id.0).ok_or(CmError::UnknownSidr(id))?;
        self.sidr_in_by_remote.remove(&(s.from, s.request_id));
        if let Some(l) = self.listeners.get_mut(&s.service_id) {
            l.pending = l.pending.saturating_sub(1);
        }
        let rep = SidrRep {
            request_id: s.request_id,
            status: p.status,
            additional_info_length: 0,
            vendor_id: 0,
            qpn: p.qpn,
            service_id: s.service_id,
            qkey: p.qkey,
            additional_info: FixedBytes::zeroed(),
            private_data,
        };
        self.out.send_msg(s.from, s.tid, rep);
        Ok(())
    }

    // ----- inputs -----

    /// A UD packet to our QP 1 (BTH to ICRC, the UDP payload) from `from`.
    /// Packets that are not a MAD for the GSI are dropped and counted.
    pub fn handle_gsi_packet(&mut self, now: Instant, from: IpAddr, packet: &[u8]) {
        match GsiMad::parse(packet) {
            Ok(g) => self.handle_mad(now, from, &g.mad[..]),
            Err(_) => {
                self.out.counters.mads_received += 1;
                self.out.drop(CmDropReason::Malformed);
            }
        }
    }

    /// A MAD (256 bytes) that `from`'s GSI QP sent to ours.
    pub fn handle_mad(&mut self, now: Instant, from: IpAddr, mad: &[u8]) {
        self.out.counters.mads_received += 1;
        let m = match CmMad::parse(mad) {
            Ok(m) => m,
            Err(mad::Error::NotCm(_)) => return self.out.drop(CmDropReason::NotCm),
            Err(_) => return self.out.drop(CmDropReason::Malformed),
        };
        let attr = m.message.attribute_id();
        *self.out.counters.received.entry(attr).or_default() += 1;
        let tid = m.transaction_id;
        match m.message {
            CmMessage::Req(r) => self.on_req(now, from, tid, r),
            CmMessage::Mra(r) => self.on_mra(now, from, r),
            CmMessage::Rej(r) => self.on_rej(now, from, r),
            CmMessage::Rep(r) => self.on_rep(now, from, r),
            CmMessage::Rtu(r) => self.on_rtu(from, r),
            CmMessage::Dreq(r) => self.on_dreq(from, tid, r),
            CmMessage::Drep(r) => self.on_drep(now, from, r),
            CmMessage::SidrReq(r) => self.on_sidr_req(from, tid, r),
            CmMessage::SidrRep(r) => self.on_sidr_rep(from, r),
            CmMessage::Lap(_) | CmMessage::Apr(_) => self.out.drop(CmDropReason::Unsupported),
        }
    }

    /// Resends what is unanswered, gives up what has run out of retries,
    /// ends timewaits: everything due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        // Held REQs whose service did not listen again: REJ 8 now.
        while let Some(i) = self.parked.iter().position(|p| p.until <= now) {
            let p = self.parked.remove(i).expect("found");
            let ids = (0, p.req.local_comm_id);
            self.issue_rej(p.from, p.tid, ids, RejReason::INVALID_SERVICE_ID, &[]);
        }
        self.closed.retain(|_, until| *until > now);
        let plt = self.cfg.packet_life_time;
        let due: Vec<u32> = self
            .conns
            .values()
            .filter(|c| c.deadline().is_some_and(|d| d <= now))
            .map(|c| c.id)
            .collect();
        for id in due {
            let Some(c) = self.conns.get_mut(&id) else {
                continue;
            };
            if c.timewait_until.is_some_and(|t| t <= now) {
                let conn = ConnId(id);
                self.out.event(c, CmEvent::TimewaitExit { conn });
                self.forget(id);
                continue;
            }
            let Some(r) = c.retry.as_mut().filter(|r| r.deadline <= now) else {
                continue;
            };
            if r.left > 0 {
                r.left -= 1;
                r.deadline = after(now, r.interval);
                let mad = r.mad;
                self.out.counters.retries += 1;
                self.out.send(c.remote_addr, mad);
                continue;
            }
            c.retry = None;
            self.out.counters.timeouts += 1;
            let conn = ConnId(id);
            match c.state {
                CmState::ReqSent | CmState::MraReqRcvd => {
                    let unanswered = AttributeId::REQ;
                    self.out.event(c, CmEvent::Unreachable { conn, unanswered });
                    self.forget(id);
                }
                CmState::RepSent | CmState::MraRepRcvd => {
                    let unanswered = AttributeId::REP;
                    self.out.event(c, CmEvent::Unreachable { conn, unanswered });
                    self.forget(id);
                }
                CmState::DreqSent => {
                    enter_timewait(c, now, plt);
                    disconnected(&mut self.out, c, Vec::new(), true);
                }
                _ => {}
            }
        }
        let due: Vec<u32> = self
            .sidr_out
            .iter()
            .filter(|(_, s)| s.retry.deadline <= now)
            .map(|(&id, _)| id)
            .collect();
        for id in due {
            let Some(s) = self.sidr_out.get_mut(&id) else {
                continue;
            };
            if s.retry.left > 0 {
                s.retry.left -= 1;
                s.retry.deadline = after(now, s.retry.interval);
                let (dst, mad) = (s.remote_addr, s.retry.mad);
                self.out.counters.retries += 1;
                self.out.send(dst, mad);
            } else {
                self.sidr_out.remove(&id);
                self.out.counters.timeouts += 1;
                let id = SidrId(id);
                self.out.events.push_back(CmEvent::SidrUnreachable { id });
            }
        }
    }

    // ----- message handlers -----

    /// Drops a connection and everything that points at it.
    fn forget(&mut self, id: u32) {
        let Some(mut c) = self.conns.remove(&id) else {
            return;
        };
        release_backlog(&mut self.listeners, &mut c);
        let key = (c.remote_addr, c.remote_id);
        if self.remote_ids.get(&key) == Some(&id) {
            self.remote_ids.remove(&key);
        }
        let key = (c.remote_addr, c.remote_qpn);
        if self.remote_qpns.get(&key) == Some(&id) {
            self.remote_qpns.remove(&key);
        }
    }

    /// A REJ we send without a connection of ours (Linux's `cm_issue_rej`).
    /// A REQ for a service nobody listens on: held if the service stopped
    /// listening less than [`CmConfig::relisten_grace`] ago (it may listen
    /// again), else rejected with REJ 8 as the kernel's CM does.
    fn park_or_reject(&mut self, now: Instant, from: IpAddr, tid: u64, req: Req) {
        let grace = self.closed.get(&req.service_id).copied();
        if grace.is_some_and(|until| until <= now) {
            self.closed.remove(&req.service_id);
        }
        let held = |p: &Parked| p.from == from && p.req.local_comm_id == req.local_comm_id;
        match grace.filter(|&until| until > now) {
            // The active side's retry of a REQ already held: it waits with it.
            Some(_) if self.parked.iter().any(held) => self.out.drop(CmDropReason::Duplicate),
            Some(until) if self.parked.len() < MAX_PARKED => self.parked.push_back(Parked {
                from,
                tid,
                req,
                until,
            }),
            _ => {
                let ids = (0, req.local_comm_id);
                self.issue_rej(from, tid, ids, RejReason::INVALID_SERVICE_ID, &[])
            }
        }
    }

    fn issue_rej(&mut self, to: IpAddr, tid: u64, ids: (u32, u32), reason: RejReason, ari: &[u8]) {
        let rej = Rej {
            local_comm_id: ids.0,
            remote_comm_id: ids.1,
            message_rejected: RejectedMessage::Req,
            reject_info_length: ari.len().min(72) as u8,
            reason,
            ari: FixedBytes::from_prefix(ari).unwrap_or_default(),
            private_data: FixedBytes::zeroed(),
        };
        self.out.send_msg(to, tid, rej);
    }

    fn on_req(&mut self, now: Instant, from: IpAddr, tid: u64, req: Req) {
        // A REQ we have seen: answer as the connection's state says.
        if let Some(&id) = self.remote_ids.get(&(from, req.local_comm_id)) {
            self.out.counters.duplicates += 1;
            let Some(c) = self.conns.get_mut(&id) else {
                return;
            };
            match c.state {
                CmState::ReqRcvd => match c.delayed_mra.take() {
                    Some(t) => {
                        send_mra(&mut self.out, c, MraedMessage::Req, t);
                        c.state = CmState::MraReqSent;
                    }
                    None => self.out.drop(CmDropReason::Duplicate),
                },
                CmState::MraReqSent => match c.mra {
                    Some(mad) => self.out.send(from, mad),
                    None => self.out.drop(CmDropReason::Duplicate),
                },
                CmState::RepSent | CmState::MraRepRcvd => match &c.retry {
                    Some(r) => {
                        let mad = r.mad;
                        self.out.send(from, mad);
                    }
                    None => self.out.drop(CmDropReason::Duplicate),
                },
                CmState::Timewait => {
                    let ids = (c.id, c.remote_id);
                    let tid = c.tid;
                    let rej = Rej {
                        local_comm_id: ids.0,
                        remote_comm_id: ids.1,
                        message_rejected: RejectedMessage::Req,
                        reject_info_length: 0,
                        reason: RejReason::STALE_CONN,
                        ari: FixedBytes::zeroed(),
                        private_data: FixedBytes::zeroed(),
                    };
                    self.out.send_msg(from, tid, rej);
                }
                _ => self.out.drop(CmDropReason::Duplicate),
            }
            return;
        }
        // A new REQ from a QP we are still connected to: stale.
        if self.remote_qpns.contains_key(&(from, req.local_qpn)) {
            let ids = (0, req.local_comm_id);
            return self.issue_rej(from, tid, ids, RejReason::STALE_CONN, &[]);
        }
        let Some(listener) = self.listeners.get(&req.service_id) else {
            return self.park_or_reject(now, from, tid, req);
        };
        if !matches!(
            req.transport_service_type,
            TransportServiceType::Rc | TransportServiceType::Uc
        ) {
            let ids = (0, req.local_comm_id);
            return self.issue_rej(from, tid, ids, RejReason::INVALID_TRANSPORT_TYPE, &[]);
        }
        if req.mtu().is_none() {
            let ids = (0, req.local_comm_id);
            return self.issue_rej(from, tid, ids, RejReason::INVALID_MTU, &[]);
        }
        let gid = req.primary_path.remote_gid;
        if !gid.is_unspecified() && gid != self.local_gid {
            let ids = (0, req.local_comm_id);
            let ari = self.local_gid.octets();
            return self.issue_rej(from, tid, ids, RejReason::INVALID_GID, &ari);
        }
        if req.local_qpn <= 1 {
            let ids = (0, req.local_comm_id);
            return self.issue_rej(from, tid, ids, RejReason::NO_QP, &[]);
        }
        if listener.pending >= self.cfg.listen_backlog {
            return self.out.drop(CmDropReason::BacklogFull);
        }
        let Ok(id) = self.alloc_id() else {
            return self.out.drop(CmDropReason::TooManyConnections);
        };
        if let Some(l) = self.listeners.get_mut(&req.service_id) {
            l.pending += 1;
        }
        // Linux: answers to the REQ are resent every local CM response
        // timeout of the REQ, as often as it may resend the REQ.
        let interval = msg::timeout(req.local_cm_response_timeout);
        let c = Conn {
            id,
            remote_id: req.local_comm_id,
            remote_addr: from,
            state: CmState::ReqRcvd,
            active: false,
            tid,
            local_qpn: 0,
            remote_qpn: req.local_qpn,
            req,
            rep: None,
            timeout: interval,
            max_retries: req.max_cm_retries,
            retry: None,
            delayed_mra: self.cfg.mra_service_timeout,
            mra: None,
            rtu: None,
            timewait_until: None,
            listener: Some(req.service_id),
            established: false,
            disconnected: false,
            silent: false,
        };
        self.remote_ids.insert((from, req.local_comm_id), id);
        self.remote_qpns.insert((from, req.local_qpn), id);
        self.conns.insert(id, c);
        let cma = CmaHeader::parse(&req.private_data[..]).ok();
        self.out.events.push_back(CmEvent::ConnectRequest {
            conn: ConnId(id),
            from,
            req: Box::new(req),
            cma,
        });
    }

    /// The connection a message naming our ID `local` and the peer's
    /// `remote` is for, checked against the sender's address.
    fn lookup(&mut self, from: IpAddr, local: u32, remote: u32) -> Option<u32> {
        match self.conns.get(&local) {
            Some(c) if c.remote_id == remote && c.remote_addr == from => Some(local),
            Some(c) if c.remote_id == remote => {
                self.out.drop(CmDropReason::WrongSource);
                None
            }
            _ => {
                self.out.drop(CmDropReason::UnknownCommId);
                None
            }
        }
    }

    fn on_rep(&mut self, now: Instant, from: IpAddr, rep: Rep) {
        let id = rep.remote_comm_id;
        let fresh = self.conns.get(&id).is_some_and(|c| {
            c.remote_id == 0 && matches!(c.state, CmState::ReqSent | CmState::MraReqRcvd)
        });
        if !fresh {
            // A REP again (our RTU lost?), or one for nothing of ours.
            let Some(id) = self.lookup(from, id, rep.local_comm_id) else {
                return;
            };
            self.out.counters.duplicates += 1;
            let c = &self.conns[&id];
            match (c.state, c.rtu, c.mra) {
                (CmState::Established, Some(rtu), _) => self.out.send(from, rtu),
                (CmState::MraRepSent, _, Some(mra)) => self.out.send(from, mra),
                _ => self.out.drop(CmDropReason::Duplicate),
            }
            return;
        }
        if self.conns[&id].remote_addr != from {
            return self.out.drop(CmDropReason::WrongSource);
        }
        if self.remote_ids.contains_key(&(from, rep.local_comm_id)) {
            // Linux: a REP whose ID another connection already has.
            return self.out.drop(CmDropReason::Stale);
        }
        if rep.local_qpn <= 1 || self.remote_qpns.contains_key(&(from, rep.local_qpn)) {
            // The peer's QP is still connected to us: refuse the REP
            // (Linux: REJ stale connection) and give up this connection.
            let plt = self.cfg.packet_life_time;
            let Some(c) = self.conns.get_mut(&id) else {
                return;
            };
            c.remote_id = rep.local_comm_id;
            let rej = Rej {
                local_comm_id: c.id,
                remote_comm_id: rep.local_comm_id,
                message_rejected: RejectedMessage::Rep,
                reject_info_length: 0,
                reason: RejReason::STALE_CONN,
                ari: FixedBytes::zeroed(),
                private_data: FixedBytes::zeroed(),
            };
            self.out.send_msg(from, c.tid, rej);
            enter_timewait(c, now, plt);
            let e = CmEvent::Rejected {
                conn: ConnId(id),
                message: RejectedMessage::Req,
                reason: RejReason::STALE_CONN,
                ari: Vec::new(),
                private_data: Vec::new(),
            };
            self.out.event(c, e);
            return;
        }
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        c.remote_id = rep.local_comm_id;
        c.remote_qpn = rep.local_qpn;
        c.rep = Some(rep);
        c.retry = None;
        c.state = CmState::RepRcvd;
        self.remote_ids.insert((from, rep.local_comm_id), id);
        self.remote_qpns.insert((from, rep.local_qpn), id);
        let qp = qp_params(c).expect("REQ and REP known");
        let e = CmEvent::ConnectResponse {
            conn: ConnId(id),
            rep: Box::new(rep),
            qp,
        };
        self.out.event(c, e);
    }

    fn on_rtu(&mut self, from: IpAddr, rtu: Rtu) {
        let Some(id) = self.lookup(from, rtu.remote_comm_id, rtu.local_comm_id) else {
            return;
        };
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        match c.state {
            CmState::RepSent | CmState::MraRepRcvd => {
                c.retry = None;
                c.state = CmState::Established;
                establish(&mut self.out, c, rtu.private_data.to_vec());
            }
            CmState::Established if !c.active => {
                self.out.counters.duplicates += 1;
                self.out.drop(CmDropReason::Duplicate);
            }
            _ => self.out.drop(CmDropReason::Stale),
        }
    }

    fn on_mra(&mut self, now: Instant, from: IpAddr, mra: Mra) {
        // An MRA of our REQ names us only: the peer's ID is new to us.
        let remote = match mra.message_mraed {
            MraedMessage::Req => 0,
            _ => mra.local_comm_id,
        };
        let Some(id) = self.lookup(from, mra.remote_comm_id, remote) else {
            return;
        };
        let plt = self.cfg.packet_life_time;
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        let next = match (c.state, mra.message_mraed) {
            (CmState::ReqSent, MraedMessage::Req) => CmState::MraReqRcvd,
            (CmState::RepSent, MraedMessage::Rep) => CmState::MraRepRcvd,
            (CmState::MraReqRcvd, MraedMessage::Req) | (CmState::MraRepRcvd, MraedMessage::Rep) => {
                self.out.counters.duplicates += 1;
                return self.out.drop(CmDropReason::Duplicate);
            }
            _ => return self.out.drop(CmDropReason::Stale),
        };
        // Linux: wait the service timeout plus the path's ACK timeout
        // (packet lifetime + 1), from now; the retries left stay.
        if let Some(r) = c.retry.as_mut() {
            r.interval =
                msg::timeout(mra.service_timeout) + msg::timeout(plt.saturating_add(1).min(31));
            r.deadline = after(now, r.interval);
        }
        c.state = next;
    }

    fn on_rej(&mut self, now: Instant, from: IpAddr, rej: Rej) {
        // A REJ of our REQ names us only (Linux's `cm_acquire_rejected_id`).
        let remote = match rej.message_rejected {
            RejectedMessage::Req => 0,
            _ => rej.local_comm_id,
        };
        let id = rej.remote_comm_id;
        let found = match self.conns.get(&id) {
            Some(c) if c.remote_addr != from => {
                return self.out.drop(CmDropReason::WrongSource);
            }
            Some(c) => {
                c.remote_id == remote
                    || (remote == 0 && c.active && c.remote_id == rej.local_comm_id)
            }
            None => false,
        };
        if !found {
            return self.out.drop(CmDropReason::UnknownCommId);
        }
        let plt = self.cfg.packet_life_time;
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        let stale = rej.reason == RejReason::STALE_CONN;
        let timewait = match c.state {
            CmState::ReqSent
            | CmState::MraReqRcvd
            | CmState::RepSent
            | CmState::MraRepRcvd
            | CmState::ReqRcvd
            | CmState::MraReqSent => stale,
            CmState::DreqSent | CmState::RepRcvd | CmState::MraRepSent | CmState::Established => {
                true
            }
            _ => return self.out.drop(CmDropReason::Stale),
        };
        let message = match c.state {
            CmState::ReqSent | CmState::MraReqRcvd => RejectedMessage::Req,
            CmState::RepSent | CmState::MraRepRcvd => RejectedMessage::Rep,
            _ => RejectedMessage::Other,
        };
        let e = CmEvent::Rejected {
            conn: ConnId(id),
            message,
            reason: rej.reason,
            ari: rej.ari().to_vec(),
            private_data: rej.private_data.to_vec(),
        };
        self.out.event(c, e);
        if timewait {
            release_backlog(&mut self.listeners, c);
            enter_timewait(c, now, plt);
        } else {
            self.forget(id);
        }
    }

    fn on_dreq(&mut self, from: IpAddr, tid: u64, dreq: Dreq) {
        let id = dreq.remote_comm_id;
        let known = self
            .conns
            .get(&id)
            .is_some_and(|c| c.remote_id == dreq.local_comm_id && c.remote_addr == from);
        if !known {
            // Linux's `cm_issue_drep`: a DREQ for a connection we no longer
            // know (its timewait is over, the DREP was lost) gets a DREP.
            self.out.drop(CmDropReason::UnknownCommId);
            let drep = Drep {
                local_comm_id: dreq.remote_comm_id,
                remote_comm_id: dreq.local_comm_id,
                private_data: FixedBytes::zeroed(),
            };
            self.out.send_msg(from, tid, drep);
            return;
        }
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        if dreq.remote_qpn_eecn != c.local_qpn {
            return self.out.drop(CmDropReason::WrongQpn);
        }
        match c.state {
            CmState::RepSent | CmState::MraRepRcvd | CmState::DreqSent | CmState::Established => {}
            CmState::Timewait => {
                self.out.counters.duplicates += 1;
                let drep = Drep {
                    local_comm_id: c.id,
                    remote_comm_id: c.remote_id,
                    private_data: FixedBytes::zeroed(),
                };
                self.out.send_msg(from, tid, drep);
                return;
            }
            CmState::DreqRcvd => {
                self.out.counters.duplicates += 1;
                return self.out.drop(CmDropReason::Duplicate);
            }
            _ => return self.out.drop(CmDropReason::Stale),
        }
        c.retry = None;
        c.state = CmState::DreqRcvd;
        c.tid = tid;
        disconnected(&mut self.out, c, dreq.private_data.to_vec(), false);
    }

    fn on_drep(&mut self, now: Instant, from: IpAddr, drep: Drep) {
        let Some(id) = self.lookup(from, drep.remote_comm_id, drep.local_comm_id) else {
            return;
        };
        let plt = self.cfg.packet_life_time;
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        match c.state {
            CmState::DreqSent | CmState::DreqRcvd => {
                enter_timewait(c, now, plt);
                disconnected(&mut self.out, c, drep.private_data.to_vec(), false);
            }
            CmState::Timewait => {
                self.out.counters.duplicates += 1;
                self.out.drop(CmDropReason::Duplicate);
            }
            _ => self.out.drop(CmDropReason::Stale),
        }
    }

    fn on_sidr_req(&mut self, from: IpAddr, tid: u64, req: SidrReq) {
        if self.sidr_in_by_remote.contains_key(&(from, req.request_id)) {
            self.out.counters.duplicates += 1;
            return self.out.drop(CmDropReason::Duplicate);
        }
        let Some(l) = self.listeners.get(&req.service_id) else {
            let rep = SidrRep {
                request_id: req.request_id,
                status: SidrStatus::UNSUPPORTED,
                additional_info_length: 0,
                vendor_id: 0,
                qpn: 0,
                service_id: req.service_id,
                qkey: 0,
                additional_info: FixedBytes::zeroed(),
                private_data: FixedBytes::zeroed(),
            };
            self.out.send_msg(from, tid, rep);
            return;
        };
        if l.pending >= self.cfg.listen_backlog {
            return self.out.drop(CmDropReason::BacklogFull);
        }
        let Ok(id) = self.alloc_id() else {
            return self.out.drop(CmDropReason::TooManyConnections);
        };
        if let Some(l) = self.listeners.get_mut(&req.service_id) {
            l.pending += 1;
        }
        self.sidr_in.insert(
            id,
            SidrIn {
                from,
                tid,
                request_id: req.request_id,
                service_id: req.service_id,
            },
        );
        self.sidr_in_by_remote.insert((from, req.request_id), id);
        let cma = CmaHeader::parse(&req.private_data[..]).ok();
        self.out.events.push_back(CmEvent::SidrRequest {
            id: SidrId(id),
            from,
            req: Box::new(req),
            cma,
        });
    }

    fn on_sidr_rep(&mut self, from: IpAddr, rep: SidrRep) {
        match self.sidr_out.get(&rep.request_id) {
            Some(s) if s.remote_addr == from => {}
            Some(_) => return self.out.drop(CmDropReason::WrongSource),
            None => return self.out.drop(CmDropReason::UnknownCommId),
        }
        self.sidr_out.remove(&rep.request_id);
        self.out.events.push_back(CmEvent::SidrReply {
            id: SidrId(rep.request_id),
            status: rep.status,
            qpn: rep.qpn,
            qkey: rep.qkey,
            private_data: rep.private_data.to_vec(),
        });
    }
}

fn release_backlog(listeners: &mut HashMap<u64, Listener>, c: &mut Conn) {
    if let Some(sid) = c.listener.take() {
        if let Some(l) = listeners.get_mut(&sid) {
            l.pending = l.pending.saturating_sub(1);
        }
    }
}

fn send_mra(out: &mut Out, c: &mut Conn, what: MraedMessage, service_timeout: u8) {
    let mra = Mra {
        local_comm_id: c.id,
        remote_comm_id: c.remote_id,
        message_mraed: what,
        service_timeout,
        private_data: FixedBytes::zeroed(),
    };
    c.mra = Some(out.send_msg(c.remote_addr, c.tid, mra));
}

fn enter_timewait(c: &mut Conn, now: Instant, packet_life_time: u8) {
    c.state = CmState::Timewait;
    c.retry = None;
    c.delayed_mra = None;
    c.timewait_until = Some(after(
        now,
        msg::timeout(packet_life_time.saturating_add(1).min(31)),
    ));
}

fn establish(out: &mut Out, c: &mut Conn, private_data: Vec<u8>) {
    if c.established {
        return;
    }
    c.established = true;
    if let Some(qp) = qp_params(c) {
        let conn = ConnId(c.id);
        out.event(
            c,
            CmEvent::Established {
                conn,
                qp,
                private_data,
            },
        );
    }
}

fn disconnected(out: &mut Out, c: &mut Conn, private_data: Vec<u8>, timed_out: bool) {
    if c.disconnected {
        return;
    }
    c.disconnected = true;
    let conn = ConnId(c.id);
    out.event(
        c,
        CmEvent::Disconnected {
            conn,
            private_data,
            timed_out,
        },
    );
}

/// The QP attributes, from both sides' messages (as Linux's
/// `cm_init_qp_rtr_attr` / `cm_init_qp_rts_attr` derive them).
fn qp_params(c: &Conn) -> Option<QpParams> {
    let req = &c.req;
    let rep = c.rep.as_ref()?;
    let path_mtu = req.mtu()?;
    let qp_type = match req.transport_service_type {
        TransportServiceType::Uc => CmQpType::Uc,
        _ => CmQpType::Rc,
    };
    let path = &req.primary_path;
    Some(if c.active {
        QpParams {
            qp_type,
            local_qpn: req.local_qpn,
            remote_qpn: rep.local_qpn,
            sq_psn: rep.starting_psn,
            rq_psn: req.starting_psn,
            path_mtu,
            max_rd_atomic: rep.responder_resources,
            max_dest_rd_atomic: rep.initiator_depth,
            retry_count: req.retry_count,
            rnr_retry: rep.rnr_retry_count,
            timeout: path.local_ack_timeout,
            remote_addr: c.remote_addr,
            remote_gid: path.remote_gid,
            flow_label: path.flow_label,
            hop_limit: path.hop_limit,
            traffic_class: path.traffic_class,
        }
    } else {
        QpParams {
            qp_type,
            local_qpn: rep.local_qpn,
            remote_qpn: req.local_qpn,
            sq_psn: req.starting_psn,
            rq_psn: rep.starting_psn,
            path_mtu,
            max_rd_atomic: rep.initiator_depth,
            max_dest_rd_atomic: rep.responder_resources,
            retry_count: req.retry_count,
            rnr_retry: rep.rnr_retry_count,
            timeout: path.local_ack_timeout,
            remote_addr: c.remote_addr,
            remote_gid: path.local_gid,
            flow_label: path.flow_label,
            hop_limit: path.hop_limit,
            traffic_class: path.traffic_class,
        }
    })
}

#[cfg(test)]
mod tests;
