//! Connection establishment: REQ, MRA, REJ, REP, RTU (IBTA 12.6.5–12.6.9,
//! tables 106–111).

use super::path::CmPath;
use super::{AttributeId, Body};
use crate::mad::{FixedBytes, Reader, Writer};
use core::fmt;

/// Transport Service Type of a REQ (2 bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TransportServiceType {
    /// 0: reliable connection.
    Rc,
    /// 1: unreliable connection.
    Uc,
    /// 2: reliable datagram.
    Rd,
    /// 3: see the Extended Transport Type field (1 is XRC).
    Extended,
}

impl TransportServiceType {
    /// From the 2-bit field.
    pub fn from_bits(v: u8) -> Self {
        match v & 3 {
            0 => Self::Rc,
            1 => Self::Uc,
            2 => Self::Rd,
            _ => Self::Extended,
        }
    }
    /// The 2-bit field.
    pub fn bits(self) -> u8 {
        match self {
            Self::Rc => 0,
            Self::Uc => 1,
            Self::Rd => 2,
            Self::Extended => 3,
        }
    }
}

impl fmt::Display for TransportServiceType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Rc => "RC",
            Self::Uc => "UC",
            Self::Rd => "RD",
            Self::Extended => "extended",
        })
    }
}

/// The ConnectRequest (REQ, attribute 0x0010, table 106): the active side
/// asks the passive side's CM for a connection to a service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Req {
    /// Local Communication ID: the sender's handle for this connection.
    pub local_comm_id: u32,
    /// VendorID (24 bits, bytes 5–7; ECE, otherwise zero).
    pub vendor_id: u32,
    /// ServiceID: which service (for rdma_cm, port space and port).
    pub service_id: u64,
    /// Local CA GUID.
    pub local_ca_guid: u64,
    /// Local Q_Key (RD only; zero for RC).
    pub local_qkey: u32,
    /// Local QPN (24 bits): the active side's QP.
    pub local_qpn: u32,
    /// Responder Resources: RDMA READ/atomic requests the sender accepts
    /// in flight.
    pub responder_resources: u8,
    /// Local EECN (24 bits, RD).
    pub local_eecn: u32,
    /// Initiator Depth: RDMA READ/atomic requests the sender will have in
    /// flight.
    pub initiator_depth: u8,
    /// Remote EECN (24 bits, RD).
    pub remote_eecn: u32,
    /// Remote CM Response Timeout (5 bits): how long the sender waits for
    /// the answer.
    pub remote_cm_response_timeout: u8,
    /// Transport Service Type (2 bits).
    pub transport_service_type: TransportServiceType,
    /// End-to-End Flow Control.
    pub end_to_end_flow_control: bool,
    /// Starting PSN (24 bits): the first PSN the *passive* side sends (and
    /// the active side expects). Linux's passive side takes its send queue
    /// PSN from here and the active side its receive PSN; the REP's
    /// starting PSN goes the other way.
    pub starting_psn: u32,
    /// Local CM Response Timeout (5 bits): how long the sender needs to
    /// answer a message.
    pub local_cm_response_timeout: u8,
    /// Retry Count (3 bits): transport retries on timeout.
    pub retry_count: u8,
    /// Partition Key.
    pub pkey: u16,
    /// Path Packet Payload MTU (4 bits: 1 = 256 ... 5 = 4096).
    pub path_mtu: u8,
    /// RDC Exists.
    pub rdc_exists: bool,
    /// RNR Retry Count (3 bits; 7 is infinite).
    pub rnr_retry_count: u8,
    /// Max CM Retries (4 bits): how often the CM resends this REQ.
    pub max_cm_retries: u8,
    /// SRQ: the sender's QP takes its receives from an SRQ.
    pub srq: bool,
    /// Extended Transport Type (3 bits; 1 = XRC).
    pub extended_transport_type: u8,
    /// The primary path (bytes 52–95).
    pub primary_path: CmPath,
    /// The alternate path (bytes 96–139), all zero if none.
    pub alternate_path: CmPath,
    /// SAP Supported (byte 139, bit 5).
    pub sap_supported: bool,
    /// Private Data (92 bytes; rdma_cm begins it with its header).
    pub private_data: FixedBytes<92>,
}

impl Req {
    /// The Path Packet Payload MTU as a [`crate::types::Mtu`], if valid.
    pub fn mtu(&self) -> Option<crate::types::Mtu> {
        mtu_from_code(self.path_mtu)
    }
}

/// An IBTA MTU code (1..=5) as an [`crate::types::Mtu`].
pub(crate) fn mtu_from_code(code: u8) -> Option<crate::types::Mtu> {
    use crate::types::Mtu;
    Some(match code {
        1 => Mtu::Mtu256,
        2 => Mtu::Mtu512,
        3 => Mtu::Mtu1024,
        4 => Mtu::Mtu2048,
        5 => Mtu::Mtu4096,
        _ => return None,
    })
}

impl Body for Req {
    const ATTR: AttributeId = AttributeId::REQ;
    fn read(r: &Reader<'_>) -> Self {
        Req {
            local_comm_id: r.u32(0),
            vendor_id: r.u24(5),
            service_id: r.u64(8),
            local_ca_guid: r.u64(16),
            local_qkey: r.u32(28),
            local_qpn: r.u24(32),
            responder_resources: r.u8(35),
            local_eecn: r.u24(36),
            initiator_depth: r.u8(39),
            remote_eecn: r.u24(40),
            remote_cm_response_timeout: r.bits(43, 0, 5),
            transport_service_type: TransportServiceType::from_bits(r.bits(43, 5, 2)),
            end_to_end_flow_control: r.flag(43, 7),
            starting_psn: r.u24(44),
            local_cm_response_timeout: r.bits(47, 0, 5),
            retry_count: r.bits(47, 5, 3),
            pkey: r.u16(48),
            path_mtu: r.bits(50, 0, 4),
            rdc_exists: r.flag(50, 4),
            rnr_retry_count: r.bits(50, 5, 3),
            max_cm_retries: r.bits(51, 0, 4),
            srq: r.flag(51, 4),
            extended_transport_type: r.bits(51, 5, 3),
            primary_path: CmPath::read_req(r, 52),
            alternate_path: CmPath::read_req(r, 96),
            sap_supported: r.flag(139, 5),
            private_data: FixedBytes(r.bytes(140)),
        }
    }
    fn write(&self, w: &mut Writer<'_>) {
        w.u32(0, self.local_comm_id);
        w.u24(5, self.vendor_id);
        w.u64(8, self.service_id);
        w.u64(16, self.local_ca_guid);
        w.u32(28, self.local_qkey);
        w.u24(32, self.local_qpn);
        w.u8(35, self.responder_resources);
        w.u24(36, self.local_eecn);
        w.u8(39, self.initiator_depth);
        w.u24(40, self.remote_eecn);
        w.bits(43, 0, 5, self.remote_cm_response_timeout);
        w.bits(43, 5, 2, self.transport_service_type.bits());
        w.flag(43, 7, self.end_to_end_flow_control);
        w.u24(44, self.starting_psn);
        w.bits(47, 0, 5, self.local_cm_response_timeout);
        w.bits(47, 5, 3, self.retry_count);
        w.u16(48, self.pkey);
        w.bits(50, 0, 4, self.path_mtu);
        w.flag(50, 4, self.rdc_exists);
        w.bits(50, 5, 3, self.rnr_retry_count);
        w.bits(51, 0, 4, self.max_cm_retries);
        w.flag(51, 4, self.srq);
        w.bits(51, 5, 3, self.extended_transport_type);
        self.primary_path.write_req(w, 52);
        self.alternate_path.write_req(w, 96);
        w.flag(139, 5, self.sap_supported);
        w.bytes(140, &self.private_data[..]);
    }
}

impl fmt::Display for Req {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "local_comm_id={:#010x} service_id={:#018x} local_ca_guid={:#018x} local_qkey={:#010x} \
             local_qpn={:#08x} responder_resources={} local_eecn={:#08x} initiator_depth={} \
             remote_eecn={:#08x} remote_cm_response_timeout={} transport={} e2e_flow_control={} \
             starting_psn={:#08x} local_cm_response_timeout={} retry_count={} pkey={:#06x} \
             path_mtu={} rdc_exists={} rnr_retry_count={} max_cm_retries={} srq={} \
             extended_transport={}",
            self.local_comm_id,
            self.service_id,
            self.local_ca_guid,
            self.local_qkey,
            self.local_qpn,
            self.responder_resources,
            self.local_eecn,
            self.initiator_depth,
            self.remote_eecn,
            self.remote_cm_response_timeout,
            self.transport_service_type,
            u8::from(self.end_to_end_flow_control),
            self.starting_psn,
            self.local_cm_response_timeout,
            self.retry_count,
            self.pkey,
            self.path_mtu,
            u8::from(self.rdc_exists),
            self.rnr_retry_count,
            self.max_cm_retries,
            u8::from(self.srq),
            self.extended_transport_type,
        )?;
        if self.vendor_id != 0 {
            write!(f, " vendor_id={:#08x}", self.vendor_id)?;
        }
        write!(f, " primary=[{}]", self.primary_path)?;
        if !self.alternate_path.is_empty() {
            write!(f, " alternate=[{}]", self.alternate_path)?;
        }
        if self.sap_supported {
            f.write_str(" sap_supported=1")?;
        }
        write!(f, " private_data={}", self.private_data)
    }
}

/// Which message an MRA acknowledges (2 bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MraedMessage {
    /// 0: a REQ.
    Req,
    /// 1: a REP.
    Rep,
    /// 2: a LAP.
    Lap,
    /// 3: reserved.
    Reserved,
}

impl MraedMessage {
    /// From the 2-bit field.
    pub fn from_bits(v: u8) -> Self {
        match v & 3 {
            0 => Self::Req,
            1 => Self::Rep,
            2 => Self::Lap,
            _ => Self::Reserved,
        }
    }
    /// The 2-bit field.
    pub fn bits(self) -> u8 {
        match self {
            Self::Req => 0,
            Self::Rep => 1,
            Self::Lap => 2,
            Self::Reserved => 3,
        }
    }
}

impl fmt::Display for MraedMessage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Req => "REQ",
            Self::Rep => "REP",
            Self::Lap => "LAP",
            Self::Reserved => "reserved",
        })
    }
}

/// The MsgRcptAck (MRA, attribute 0x0011, table 107): "I have your
/// message; my answer will take up to the service timeout longer".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Mra {
    /// Local Communication ID.
    pub local_comm_id: u32,
    /// Remote Communication ID: the local communication ID the
    /// acknowledged message carried.
    pub remote_comm_id: u32,
    /// Message MRAed (2 bits).
    pub message_mraed: MraedMessage,
    /// Service Timeout (5 bits): the extra time the sender needs.
    pub service_timeout: u8,
    /// Private Data (222 bytes).
    pub private_data: FixedBytes<222>,
}

impl Body for Mra {
    const ATTR: AttributeId = AttributeId::MRA;
    fn read(r: &Reader<'_>) -> Self {
        Mra {
            local_comm_id: r.u32(0),
            remote_comm_id: r.u32(4),
            message_mraed: MraedMessage::from_bits(r.bits(8, 0, 2)),
            service_timeout: r.bits(9, 0, 5),
            private_data: FixedBytes(r.bytes(10)),
        }
    }
    fn write(&self, w: &mut Writer<'_>) {
        w.u32(0, self.local_comm_id);
        w.u32(4, self.remote_comm_id);
        w.bits(8, 0, 2, self.message_mraed.bits());
        w.bits(9, 0, 5, self.service_timeout);
        w.bytes(10, &self.private_data[..]);
    }
}

impl fmt::Display for Mra {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "local_comm_id={:#010x} remote_comm_id={:#010x} message_mraed={} service_timeout={} \
             private_data={}",
            self.local_comm_id,
            self.remote_comm_id,
            self.message_mraed,
            self.service_timeout,
            self.private_data
        )
    }
}

/// Which message a REJ refuses (2 bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RejectedMessage {
    /// 0: a REQ.
    Req,
    /// 1: a REP.
    Rep,
    /// 2: no message, or another one (say a REJ for a stale connection).
    Other,
    /// 3: reserved.
    Reserved,
}

impl RejectedMessage {
    /// From the 2-bit field.
    pub fn from_bits(v: u8) -> Self {
        match v & 3 {
            0 => Self::Req,
            1 => Self::Rep,
            2 => Self::Other,
            _ => Self::Reserved,
        }
    }
    /// The 2-bit field.
    pub fn bits(self) -> u8 {
        match self {
            Self::Req => 0,
            Self::Rep => 1,
            Self::Other => 2,
            Self::Reserved => 3,
        }
    }
}

impl fmt::Display for RejectedMessage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Req => "REQ",
            Self::Rep => "REP",
            Self::Other => "other",
            Self::Reserved => "reserved",
        })
    }
}

/// A REJ reason (IBTA table 109; the names are the Linux kernel's
/// `ib_cm_rej_reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RejReason(pub u16);

macro_rules! rej_reasons {
    ($($name:ident = $v:expr, $text:expr;)*) => {
        impl RejReason {
            $(
                #[doc = concat!($v, ": ", $text, ".")]
                pub const $name: RejReason = RejReason($v);
            )*
            /// The reason in words, if it is a defined one.
            pub fn text(self) -> Option<&'static str> {
                match self.0 {
                    $($v => Some($text),)*
                    _ => None,
                }
            }
        }
    };
}

rej_reasons! {
    NO_QP = 1, "no QP";
    NO_EEC = 2, "no EEC";
    NO_RESOURCES = 3, "no resources";
    TIMEOUT = 4, "timeout";
    UNSUPPORTED = 5, "unsupported request";
    INVALID_COMM_ID = 6, "invalid comm ID";
    INVALID_COMM_INSTANCE = 7, "invalid comm instance";
    INVALID_SERVICE_ID = 8, "invalid service ID";
    INVALID_TRANSPORT_TYPE = 9, "invalid transport type";
    STALE_CONN = 10, "stale connection";
    RDC_NOT_EXIST = 11, "RDC does not exist";
    INVALID_GID = 12, "invalid GID";
    INVALID_LID = 13, "invalid LID";
    INVALID_SL = 14, "invalid SL";
    INVALID_TRAFFIC_CLASS = 15, "invalid traffic class";
    INVALID_HOP_LIMIT = 16, "invalid hop limit";
    INVALID_PACKET_RATE = 17, "invalid packet rate";
    INVALID_ALT_GID = 18, "invalid alternate GID";
    INVALID_ALT_LID = 19, "invalid alternate LID";
    INVALID_ALT_SL = 20, "invalid alternate SL";
    INVALID_ALT_TRAFFIC_CLASS = 21, "invalid alternate traffic class";
    INVALID_ALT_HOP_LIMIT = 22, "invalid alternate hop limit";
    INVALID_ALT_PACKET_RATE = 23, "invalid alternate packet rate";
    PORT_CM_REDIRECT = 24, "port CM redirect";
    PORT_REDIRECT = 25, "port redirect";
    INVALID_MTU = 26, "invalid MTU";
    INSUFFICIENT_RESP_RESOURCES = 27, "insufficient responder resources";
    CONSUMER_DEFINED = 28, "consumer defined";
    INVALID_RNR_RETRY = 29, "invalid RNR retry count";
    DUPLICATE_LOCAL_COMM_ID = 30, "duplicate local comm ID";
    INVALID_CLASS_VERSION = 31, "invalid class version";
    INVALID_FLOW_LABEL = 32, "invalid flow label";
    INVALID_ALT_FLOW_LABEL = 33, "invalid alternate flow label";
    VENDOR_OPTION_NOT_SUPPORTED = 35, "vendor option not supported";
}

impl fmt::Display for RejReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.text() {
            Some(t) => write!(f, "{} ({t})", self.0),
            None => write!(f, "{}", self.0),
        }
    }
}

/// The ConnectReject (REJ, attribute 0x0012, table 108): refuses a REQ or
/// REP, or tells a peer its connection is unknown or stale.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rej {
    /// Local Communication ID (zero if the sender has none yet).
    pub local_comm_id: u32,
    /// Remote Communication ID: the ID of the message rejected.
    pub remote_comm_id: u32,
    /// Message Rejected (2 bits).
    pub message_rejected: RejectedMessage,
    /// Reject Info Length (7 bits): valid bytes of the ARI.
    pub reject_info_length: u8,
    /// Reason.
    pub reason: RejReason,
    /// Additional Rejection Information (72 bytes; what it holds depends
    /// on the reason, say the GID for INVALID_GID).
    pub ari: FixedBytes<72>,
    /// Private Data (148 bytes).
    pub private_data: FixedBytes<148>,
}

impl Rej {
    /// The valid part of the ARI (the first `reject_info_length` bytes,
    /// at most 72).
    pub fn ari(&self) -> &[u8] {
        &self.ari[..usize::from(self.reject_info_length).min(72)]
    }
}

impl Body for Rej {
    const ATTR: AttributeId = AttributeId::REJ;
    fn read(r: &Reader<'_>) -> Self {
        Rej {
            local_comm_id: r.u32(0),
            remote_comm_id: r.u32(4),
            message_rejected: RejectedMessage::from_bits(r.bits(8, 0, 2)),
            reject_info_length: r.bits(9, 0, 7),
            reason: RejReason(r.u16(10)),
            ari: FixedBytes(r.bytes(12)),
            private_data: FixedBytes(r.bytes(84)),
        }
    }
    fn write(&self, w: &mut Writer<'_>) {
        w.u32(0, self.local_comm_id);
        w.u32(4, self.remote_comm_id);
        w.bits(8, 0, 2, self.message_rejected.bits());
        w.bits(9, 0, 7, self.reject_info_length);
        w.u16(10, self.reason.0);
        w.bytes(12, &self.ari[..]);
        w.bytes(84, &self.private_data[..]);
    }
}

impl fmt::Display for Rej {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "local_comm_id={:#010x} remote_comm_id={:#010x} message_rejected={} reason={} \
             reject_info_length={} ari={} private_data={}",
            self.local_comm_id,
            self.remote_comm_id,
            self.message_rejected,
            self.reason,
            self.reject_info_length,
            self.ari,
            self.private_data
        )
    }
}

/// The ConnectReply (REP, attribute 0x0013, table 110): the passive side
/// accepts a REQ and says how to reach its QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rep {
    /// Local Communication ID: the passive side's handle.
    pub local_comm_id: u32,
    /// Remote Communication ID: the REQ's local communication ID.
    pub remote_comm_id: u32,
    /// Local Q_Key (RD only).
    pub local_qkey: u32,
    /// Local QPN (24 bits): the passive side's QP.
    pub local_qpn: u32,
    /// VendorID (24 bits, in the bytes after the QPN, EECN and PSN; ECE).
    pub vendor_id: u32,
    /// Local EE Context Number (24 bits, RD).
    pub local_eecn: u32,
    /// Starting PSN (24 bits): the first PSN the *active* side sends (and
    /// the passive side expects); the REQ's starting PSN goes the other
    /// way.
    pub starting_psn: u32,
    /// Responder Resources.
    pub responder_resources: u8,
    /// Initiator Depth.
    pub initiator_depth: u8,
    /// Target ACK Delay (5 bits).
    pub target_ack_delay: u8,
    /// Failover Accepted (2 bits).
    pub failover_accepted: u8,
    /// End-to-End Flow Control.
    pub end_to_end_flow_control: bool,
    /// RNR Retry Count (3 bits).
    pub rnr_retry_count: u8,
    /// SRQ.
    pub srq: bool,
    /// Local CA GUID.
    pub local_ca_guid: u64,
    /// Private Data (196 bytes).
    pub private_data: FixedBytes<196>,
}

impl Body for Rep {
    const ATTR: AttributeId = AttributeId::REP;
    fn read(r: &Reader<'_>) -> Self {
        Rep {
            local_comm_id: r.u32(0),
            remote_comm_id: r.u32(4),
            local_qkey: r.u32(8),
            local_qpn: r.u24(12),
            vendor_id: (u32::from(r.u8(15)) << 16)
                | (u32::from(r.u8(19)) << 8)
                | u32::from(r.u8(23)),
            local_eecn: r.u24(16),
            starting_psn: r.u24(20),
            responder_resources: r.u8(24),
            initiator_depth: r.u8(25),
            target_ack_delay: r.bits(26, 0, 5),
            failover_accepted: r.bits(26, 5, 2),
            end_to_end_flow_control: r.flag(26, 7),
            rnr_retry_count: r.bits(27, 0, 3),
            srq: r.flag(27, 3),
            local_ca_guid: r.u64(28),
            private_data: FixedBytes(r.bytes(36)),
        }
    }
    fn write(&self, w: &mut Writer<'_>) {
        w.u32(0, self.local_comm_id);
        w.u32(4, self.remote_comm_id);
        w.u32(8, self.local_qkey);
        w.u24(12, self.local_qpn);
        w.u8(15, (self.vendor_id >> 16) as u8);
        w.u24(16, self.local_eecn);
        w.u8(19, (self.vendor_id >> 8) as u8);
        w.u24(20, self.starting_psn);
        w.u8(23, self.vendor_id as u8);
        w.u8(24, self.responder_resources);
        w.u8(25, self.initiator_depth);
        w.bits(26, 0, 5, self.target_ack_delay);
        w.bits(26, 5, 2, self.failover_accepted);
        w.flag(26, 7, self.end_to_end_flow_control);
        w.bits(27, 0, 3, self.rnr_retry_count);
        w.flag(27, 3, self.srq);
        w.u64(28, self.local_ca_guid);
        w.bytes(36, &self.private_data[..]);
    }
}

impl fmt::Display for Rep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "local_comm_id={:#010x} remote_comm_id={:#010x} local_qkey={:#010x} local_qpn={:#08x} \
             local_eecn={:#08x} starting_psn={:#08x} responder_resources={} initiator_depth={} \
             target_ack_delay={} failover_accepted={} e2e_flow_control={} rnr_retry_count={} \
             srq={} local_ca_guid={:#018x}",
            self.local_comm_id,
            self.remote_comm_id,
            self.local_qkey,
            self.local_qpn,
            self.local_eecn,
            self.starting_psn,
            self.responder_resources,
            self.initiator_depth,
            self.target_ack_delay,
            self.failover_accepted,
            u8::from(self.end_to_end_flow_control),
            self.rnr_retry_count,
            u8::from(self.srq),
            self.local_ca_guid,
        )?;
        if self.vendor_id != 0 {
            write!(f, " vendor_id={:#08x}", self.vendor_id)?;
        }
        write!(f, " private_data={}", self.private_data)
    }
}

/// The ReadyToUse (RTU, attribute 0x0014, table 111): the active side has
/// its QP ready to send; the passive side may now send too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rtu {
    /// Local Communication ID.
    pub local_comm_id: u32,
    /// Remote Communication ID.
    pub remote_comm_id: u32,
    /// Private Data (224 bytes).
    pub private_data: FixedBytes<224>,
}

impl Body for Rtu {
    const ATTR: AttributeId = AttributeId::RTU;
    fn read(r: &Reader<'_>) -> Self {
        Rtu {
            local_comm_id: r.u32(0),
            remote_comm_id: r.u32(4),
            private_data: FixedBytes(r.bytes(8)),
        }
    }
    fn write(&self, w: &mut Writer<'_>) {
        w.u32(0, self.local_comm_id);
        w.u32(4, self.remote_comm_id);
        w.bytes(8, &self.private_data[..]);
    }
}

impl fmt::Display for Rtu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "local_comm_id={:#010x} remote_comm_id={:#010x} private_data={}",
            self.local_comm_id, self.remote_comm_id, self.private_data
        )
    }
}
