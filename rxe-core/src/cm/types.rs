//! The vocabulary of the CM agent: configuration, command parameters,
//! events, errors and counters.

use crate::mad::cm::{
    AttributeId, CmPath, RejReason, RejectedMessage, Rep, Req, SidrReq, SidrStatus,
    TransportServiceType,
};
use crate::mad::CmaHeader;
use crate::types::Mtu;
use core::fmt;
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv6Addr};
use std::time::Duration;

/// A connection's handle: its local communication ID, which is what the
/// agent's MADs carry as "local" and the peer's as "remote". Unique among
/// the agent's live connections (timewait included) and SIDR exchanges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub u32);

impl fmt::Display for ConnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "conn {:#010x}", self.0)
    }
}

/// A SIDR exchange's handle: for one we sent, the SIDR_REQ's request ID;
/// for one we received, a local ID from the same space as [`ConnId`]s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SidrId(pub u32);

impl fmt::Display for SidrId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sidr {:#010x}", self.0)
    }
}

/// The connection states of IBTA Vol. 1 12.9.6 (the names of Linux's
/// `enum ib_cm_state`). A connection that returns to IDLE is forgotten.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmState {
    /// Active: REQ sent, waiting for REP/REJ/MRA.
    ReqSent,
    /// Passive: REQ received, the application has not answered.
    ReqRcvd,
    /// Passive: REQ received and MRA sent.
    MraReqSent,
    /// Active: our REQ was MRAed; waiting longer.
    MraReqRcvd,
    /// Passive: REP sent, waiting for RTU.
    RepSent,
    /// Active: REP received, the application has not sent the RTU.
    RepRcvd,
    /// Active: REP received and MRA sent.
    MraRepSent,
    /// Passive: our REP was MRAed; waiting longer.
    MraRepRcvd,
    /// Connected.
    Established,
    /// DREQ sent, waiting for DREP.
    DreqSent,
    /// DREQ received, the application has not sent the DREP.
    DreqRcvd,
    /// Released; the communication ID and the peer's QPN stay reserved
    /// until the timewait ends.
    Timewait,
}

/// The QP type a connection is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmQpType {
    /// Reliable connection.
    Rc,
    /// Unreliable connection.
    Uc,
}

impl CmQpType {
    pub(crate) fn transport(self) -> TransportServiceType {
        match self {
            CmQpType::Rc => TransportServiceType::Rc,
            CmQpType::Uc => TransportServiceType::Uc,
        }
    }
}

/// How a [`super::CmAgent`] is set up.
#[derive(Debug, Clone)]
pub struct CmConfig {
    /// The address of the soft device the agent serves (its GID is this
    /// address, IPv4-mapped for IPv4).
    pub local_addr: IpAddr,
    /// The device's CA GUID (REQ/REP "Local CA GUID").
    pub ca_guid: u64,
    /// Seed of the communication IDs: the same seed gives the same IDs.
    pub seed: u64,
    /// When several processes share the address, the top 8 bits of every
    /// communication ID this agent hands out (`mad::cm_route` sends a MAD
    /// to the agent named by the top byte of the ID it carries).
    pub comm_id_prefix: Option<u8>,
    /// The high 32 bits of the transaction IDs of the exchanges this agent
    /// starts (Linux: its MAD agent's `hi_tid`); the low 32 are the local
    /// communication ID as a little-endian host holds it (`cm_form_tid`).
    pub tid_high: u32,
    /// The path's packet lifetime (exponent of 4.096 µs; rdma_cm's RoCE
    /// value `CMA_IBOE_PACKET_LIFETIME` is 16). A REQ waits 2 × this plus
    /// the peer's CM response timeout; MRAs add this doubled, and the
    /// timewait lasts 4.096 µs × 2^(this + 1).
    pub packet_life_time: u8,
    /// rdma_cm's delayed MRA (`CMA_CM_MRA_SETTING`): a REQ handed to the
    /// application is not MRAed at once, but if the active side resends
    /// it before the application has answered, the agent answers the
    /// duplicate with an MRA of this service timeout (24: about 69 s).
    /// `None`: only [`super::CmAgent::mra`] sends MRAs.
    pub mra_service_timeout: Option<u8>,
    /// Pending REQs (and SIDR_REQs) per listener that the application has
    /// not answered; further ones are dropped (the active side retries),
    /// as the kernel drops a REQ when rdma_cm's listen backlog is full.
    pub listen_backlog: usize,
    /// Connections (any state, timewait included) and SIDR exchanges the
    /// agent keeps at most.
    pub max_connections: usize,
    /// MADs waiting in [`super::CmAgent::poll_transmit`] at most; more are
    /// dropped and counted (`CmCounters::tx_overflow`), to be resent by
    /// their retry timers.
    pub max_queued_mads: usize,
    /// How long after a service stopped listening a REQ for it is held
    /// instead of rejected at once (REJ 8), in case the application listens
    /// on it again meanwhile: perftest's `-R` latency tests end their first
    /// connection's listener and listen again for the second, and a client
    /// that connects in between would be rejected (the kernel has the same
    /// window, only narrower). A REQ still unclaimed at the end of it gets
    /// its REJ 8 then. `Duration::ZERO`: reject at once.
    pub relisten_grace: Duration,
}

impl CmConfig {
    /// Defaults for one address: Linux's values, seed as given.
    pub fn new(local_addr: IpAddr, ca_guid: u64, seed: u64) -> Self {
        CmConfig {
            local_addr,
            ca_guid,
            seed,
            comm_id_prefix: None,
            tid_high: 1,
            packet_life_time: 16,
            mra_service_timeout: Some(24),
            listen_backlog: 128,
            max_connections: 4096,
            max_queued_mads: 4096,
            relisten_grace: Duration::from_millis(500),
        }
    }
}

/// What [`super::CmAgent::connect`] puts in the REQ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectParams {
    /// The service to connect to (rdma_cm: `PortSpace::service_id(port)`).
    pub service_id: u64,
    /// The passive side's address.
    pub remote_addr: IpAddr,
    /// Our QP (24 bits).
    pub local_qpn: u32,
    /// The first PSN the *passive* side sends: our QP's receive PSN
    /// (24 bits).
    pub starting_psn: u32,
    /// RC or UC.
    pub qp_type: CmQpType,
    /// RDMA READs/atomics we serve at once.
    pub responder_resources: u8,
    /// RDMA READs/atomics we have outstanding at once.
    pub initiator_depth: u8,
    /// Path MTU.
    pub path_mtu: Mtu,
    /// Transport retries (3 bits).
    pub retry_count: u8,
    /// RNR retries (3 bits, 7 = infinite).
    pub rnr_retry_count: u8,
    /// How long we wait for the answer (5-bit exponent).
    pub remote_cm_response_timeout: u8,
    /// How long we take to answer (5-bit exponent; the passive side waits
    /// this long for our RTU).
    pub local_cm_response_timeout: u8,
    /// How often the REQ (and every later message) is resent (4 bits).
    pub max_cm_retries: u8,
    /// The QP's local ACK timeout (5-bit exponent).
    pub local_ack_timeout: u8,
    /// Flow label (20 bits; rdma_cm hashes the two ports into it).
    pub flow_label: u32,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Our QP receives from an SRQ.
    pub srq: bool,
    /// Private data, at most 92 bytes (rdma_cm: its 36-byte header first).
    pub private_data: Vec<u8>,
}

impl ConnectParams {
    /// A REQ with the values of Linux's rdma_cm over rdma_rxe (as in
    /// `tests/data/pcaps/rping.pcap`): RC, one READ each way, MTU 1024,
    /// retries 7/7, CM timeouts 20, 15 CM retries, ACK timeout 19, hop
    /// limit 64, no private data.
    pub fn new(service_id: u64, remote_addr: IpAddr, local_qpn: u32, starting_psn: u32) -> Self {
        ConnectParams {
            service_id,
            remote_addr,
            local_qpn,
            starting_psn,
            qp_type: CmQpType::Rc,
            responder_resources: 1,
            initiator_depth: 1,
            path_mtu: Mtu::Mtu1024,
            retry_count: 7,
            rnr_retry_count: 7,
            remote_cm_response_timeout: 20,
            local_cm_response_timeout: 20,
            max_cm_retries: 15,
            local_ack_timeout: 19,
            flow_label: 0,
            hop_limit: 64,
            traffic_class: 0,
            srq: false,
            private_data: Vec::new(),
        }
    }
}

/// What [`super::CmAgent::accept`] puts in the REP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcceptParams {
    /// Our QP (24 bits).
    pub local_qpn: u32,
    /// The first PSN the *active* side sends: our QP's receive PSN.
    pub starting_psn: u32,
    /// RDMA READs/atomics we serve at once.
    pub responder_resources: u8,
    /// RDMA READs/atomics we have outstanding at once.
    pub initiator_depth: u8,
    /// Target ACK delay (5 bits; Linux's rxe says 15).
    pub target_ack_delay: u8,
    /// RNR retries the active side's QP should use (3 bits).
    pub rnr_retry_count: u8,
    /// Our QP receives from an SRQ.
    pub srq: bool,
    /// Private data, at most 196 bytes.
    pub private_data: Vec<u8>,
}

impl AcceptParams {
    /// A REP as Linux's rdma_cm over rdma_rxe sends one (rping.pcap).
    pub fn new(local_qpn: u32, starting_psn: u32) -> Self {
        AcceptParams {
            local_qpn,
            starting_psn,
            responder_resources: 1,
            initiator_depth: 1,
            target_ack_delay: 15,
            rnr_retry_count: 7,
            srq: false,
            private_data: Vec::new(),
        }
    }
}

/// What [`super::CmAgent::sidr_request`] sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidrParams {
    /// The service to resolve.
    pub service_id: u64,
    /// Whom to ask.
    pub remote_addr: IpAddr,
    /// Partition key.
    pub pkey: u16,
    /// How long to wait for the answer (5-bit exponent; rdma_cm: 20).
    pub timeout: u8,
    /// How often to resend (4 bits; rdma_cm: 15).
    pub max_cm_retries: u8,
    /// Private data, at most 216 bytes (rdma_cm: its header first).
    pub private_data: Vec<u8>,
}

impl SidrParams {
    /// rdma_cm's values: P_Key 0xFFFF, timeout 20, 15 retries.
    pub fn new(service_id: u64, remote_addr: IpAddr) -> Self {
        SidrParams {
            service_id,
            remote_addr,
            pkey: 0xffff,
            timeout: 20,
            max_cm_retries: 15,
            private_data: Vec::new(),
        }
    }
}

/// What [`super::CmAgent::sidr_reply`] answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidrReplyParams {
    /// Status (success, reject, ...).
    pub status: SidrStatus,
    /// The UD QP serving the service (24 bits).
    pub qpn: u32,
    /// Its Q_Key (rdma_cm: `RDMA_UDP_QKEY` 0x01234567).
    pub qkey: u32,
    /// Private data, at most 136 bytes.
    pub private_data: Vec<u8>,
}

/// Everything a verbs layer needs to move its QP to RTR and RTS, known
/// once both the REQ and the REP are (active side: from the REP on;
/// passive side: from `accept` on). The starting PSNs cross: we send from
/// the PSN of the message we *received* and expect the one we sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpParams {
    /// RC or UC.
    pub qp_type: CmQpType,
    /// Our QP.
    pub local_qpn: u32,
    /// The peer's QP (RTR `dest_qp_num`).
    pub remote_qpn: u32,
    /// The first PSN we send (RTS `sq_psn`).
    pub sq_psn: u32,
    /// The first PSN we expect (RTR `rq_psn`).
    pub rq_psn: u32,
    /// Path MTU (RTR).
    pub path_mtu: Mtu,
    /// READs/atomics we may have outstanding (RTS `max_rd_atomic`).
    pub max_rd_atomic: u8,
    /// READs/atomics we serve (RTR `max_dest_rd_atomic`).
    pub max_dest_rd_atomic: u8,
    /// Transport retries (RTS `retry_cnt`).
    pub retry_count: u8,
    /// RNR retries (RTS `rnr_retry`).
    pub rnr_retry: u8,
    /// Local ACK timeout (RTS `timeout`), the REQ's primary path's.
    pub timeout: u8,
    /// The peer's address.
    pub remote_addr: IpAddr,
    /// The peer's GID.
    pub remote_gid: Ipv6Addr,
    /// Flow label (RTR `ah_attr.grh.flow_label`).
    pub flow_label: u32,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
}

/// What happened; drain with [`super::CmAgent::poll_event`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmEvent {
    /// Passive side: a REQ for a service we listen on. Answer with
    /// `accept`, `reject` or `mra` (rdma_cm: `RDMA_CM_EVENT_CONNECT_REQUEST`).
    ConnectRequest {
        /// The new connection.
        conn: ConnId,
        /// Who sent it.
        from: IpAddr,
        /// The REQ, every field (remote QPN, starting PSN, private data...).
        req: Box<Req>,
        /// rdma_cm's header at the start of the private data, if there is
        /// a valid one.
        cma: Option<CmaHeader>,
    },
    /// Active side: the REP. Move the QP to RTR and RTS with `qp`, then
    /// call `ready_to_use` (rdma_cm: `RDMA_CM_EVENT_CONNECT_RESPONSE`).
    ConnectResponse {
        /// The connection.
        conn: ConnId,
        /// The REP, every field.
        rep: Box<Rep>,
        /// The QP's attributes.
        qp: QpParams,
    },
    /// The connection is up: passive side on the RTU (or on
    /// `notify_established`), active side on `ready_to_use`. Once per
    /// connection.
    Established {
        /// The connection.
        conn: ConnId,
        /// The QP's attributes.
        qp: QpParams,
        /// The RTU's private data (passive side), empty otherwise.
        private_data: Vec<u8>,
    },
    /// The peer refused (a REJ), or we refused a REP naming a QP that is
    /// still connected (reason 10, stale connection). The connection is
    /// gone (or in timewait).
    Rejected {
        /// The connection.
        conn: ConnId,
        /// Which of our messages was rejected.
        message: RejectedMessage,
        /// Why.
        reason: RejReason,
        /// The valid part of the additional rejection information.
        ari: Vec<u8>,
        /// The REJ's private data (148 bytes).
        private_data: Vec<u8>,
    },
    /// Our REQ (active) or REP (passive) was never answered, after every
    /// retry; the connection is gone (rdma_cm: `RDMA_CM_EVENT_UNREACHABLE`,
    /// `-ETIMEDOUT`).
    Unreachable {
        /// The connection.
        conn: ConnId,
        /// The message that went unanswered (REQ or REP).
        unanswered: AttributeId,
    },
    /// The connection is released: a DREQ came (answer with
    /// `disconnect`, which sends the DREP), the DREP to ours came, or our
    /// DREQ went unanswered (`timed_out`). Once per connection.
    Disconnected {
        /// The connection.
        conn: ConnId,
        /// The DREQ's or DREP's private data, empty on a timeout.
        private_data: Vec<u8>,
        /// Our DREQ was never answered.
        timed_out: bool,
    },
    /// The timewait ended: the connection and its ID are gone.
    TimewaitExit {
        /// The connection.
        conn: ConnId,
    },
    /// A SIDR_REQ for a service we listen on: answer with `sidr_reply`.
    SidrRequest {
        /// The exchange.
        id: SidrId,
        /// Who asked.
        from: IpAddr,
        /// The request, every field.
        req: Box<SidrReq>,
        /// rdma_cm's header in its private data, if valid.
        cma: Option<CmaHeader>,
    },
    /// The answer to our SIDR_REQ.
    SidrReply {
        /// The exchange.
        id: SidrId,
        /// Status (0: `qpn` and `qkey` are valid; 1: nobody serves the
        /// service ID).
        status: SidrStatus,
        /// The UD QP serving the service.
        qpn: u32,
        /// Its Q_Key.
        qkey: u32,
        /// The SIDR_REP's private data (136 bytes).
        private_data: Vec<u8>,
    },
    /// Our SIDR_REQ was never answered, after every retry.
    SidrUnreachable {
        /// The exchange.
        id: SidrId,
    },
}

/// Why an incoming MAD was dropped without effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CmDropReason {
    /// Not a well-formed CM MAD (length, versions, method, attribute).
    Malformed,
    /// A MAD of another management class.
    NotCm,
    /// It names a communication or request ID we do not have.
    UnknownCommId,
    /// It came from an address other than the connection's peer.
    WrongSource,
    /// A DREQ naming a QP other than the connection's.
    WrongQpn,
    /// A message the connection's state does not take (a late answer).
    Stale,
    /// A repeat of a message already handled, with nothing to answer.
    Duplicate,
    /// A REQ or SIDR_REQ beyond the listener's backlog.
    BacklogFull,
    /// A REQ or SIDR_REQ beyond `max_connections`.
    TooManyConnections,
    /// LAP, APR and ClassPortInfo: RoCE has no alternate paths.
    Unsupported,
}

/// The agent's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CmCounters {
    /// MADs handed out by `poll_transmit` (retries included), by message.
    pub sent: BTreeMap<AttributeId, u64>,
    /// MADs given to `handle_mad`, by message (CM MADs that parsed).
    pub received: BTreeMap<AttributeId, u64>,
    /// Every MAD given to `handle_mad`.
    pub mads_received: u64,
    /// Messages resent because their answer did not come in time.
    pub retries: u64,
    /// Duplicates seen (whether answered again or dropped).
    pub duplicates: u64,
    /// Exchanges given up after every retry.
    pub timeouts: u64,
    /// MADs dropped without effect, by reason.
    pub drops: BTreeMap<CmDropReason, u64>,
    /// MADs not queued because the transmit queue was full.
    pub tx_overflow: u64,
}

impl CmCounters {
    /// Drops for one reason.
    pub fn dropped(&self, reason: CmDropReason) -> u64 {
        self.drops.get(&reason).copied().unwrap_or(0)
    }
    /// MADs of one kind sent.
    pub fn sent_of(&self, attr: AttributeId) -> u64 {
        self.sent.get(&attr).copied().unwrap_or(0)
    }
    /// MADs of one kind received.
    pub fn received_of(&self, attr: AttributeId) -> u64 {
        self.received.get(&attr).copied().unwrap_or(0)
    }
}

/// A MAD to send: the 256 bytes, to the peer's GSI QP (QP 1) at `dst`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    /// The peer's address.
    pub dst: IpAddr,
    /// The PSN for the UD packet carrying it: our GSI QP numbers its sends
    /// 0, 1, 2... (`GsiMad::new(&mad, Psn::new(psn))`).
    pub psn: u32,
    /// The MAD.
    pub mad: [u8; crate::mad::MAD_LEN],
}

/// A command the agent refused; the connection (if any) is unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CmError {
    /// Private data longer than the message has room for.
    #[error("{arg}: {len} bytes of private data, the message has room for {max}")]
    PrivateDataTooLong {
        /// The argument.
        arg: &'static str,
        /// Its length.
        len: usize,
        /// The room.
        max: usize,
    },
    /// An argument out of its field's range.
    #[error("{arg} = {value:#x}: {why}")]
    OutOfRange {
        /// The argument.
        arg: &'static str,
        /// Its value.
        value: u64,
        /// The range.
        why: &'static str,
    },
    /// No such connection (or it has gone).
    #[error("no connection {0}")]
    UnknownConnection(ConnId),
    /// No such SIDR exchange pending.
    #[error("no pending {0}")]
    UnknownSidr(SidrId),
    /// The connection's state does not allow the command.
    #[error("{op} on {conn} in state {state:?}")]
    InvalidState {
        /// The connection.
        conn: ConnId,
        /// Its state.
        state: CmState,
        /// The command.
        op: &'static str,
    },
    /// Someone listens on the service ID already.
    #[error("service ID {0:#018x} has a listener already")]
    ServiceInUse(u64),
    /// Nobody listens on the service ID.
    #[error("nobody listens on service ID {0:#018x}")]
    NotListening(u64),
    /// `max_connections` reached (or no free communication ID).
    #[error("{0} connections: no room for another")]
    TooManyConnections(usize),
}

/// The GID of an address: IPv4-mapped for IPv4.
pub fn gid_of(addr: IpAddr) -> Ipv6Addr {
    match addr {
        IpAddr::V4(a) => a.to_ipv6_mapped(),
        IpAddr::V6(a) => a,
    }
}

/// A REQ path with Linux's RoCE values (permissive LIDs, SL 0).
pub(crate) fn roce_path(local: IpAddr, p: &ConnectParams) -> CmPath {
    CmPath {
        local_lid: 0xffff,
        remote_lid: 0xffff,
        local_gid: gid_of(local),
        remote_gid: gid_of(p.remote_addr),
        flow_label: p.flow_label,
        packet_rate: 0,
        traffic_class: p.traffic_class,
        hop_limit: p.hop_limit,
        sl: 0,
        subnet_local: false,
        local_ack_timeout: p.local_ack_timeout,
    }
}
