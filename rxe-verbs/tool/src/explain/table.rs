//! Where each field of each header sits, for `rxe dump --explain`.
//!
//! rxe-core's header views read every field; where each transport header
//! field sits (byte offset, first bit counted from that byte's most
//! significant bit as the IBTA draws its figures, width in bits) is
//! `rxe_core::wire::layout`, and the MAD and CM rows say it here. Each row
//! also names the
//! rxe-core accessor that reads the field (`get`), so the value shown is
//! always rxe-core's, and the tests flip every bit a row claims and check
//! that exactly that accessor's value changes: the table cannot drift from
//! the parser. Rows whose `get` is `None` are bits rxe-core does not read
//! (reserved bytes); the tests check that flipping them changes nothing
//! rxe-core reads.

use rxe_core::mad::cm::{CmMad, CmMessage};
use rxe_core::mad::Mad;
use rxe_core::wire::layout;
use rxe_core::wire::{
    AethSyndrome, AtomicAckEth, AtomicEth, Bth, Deth, Feth, Ieth, ImmDt, NakCode, Opcode, Rdeth,
    Reth,
};

/// One field of a header.
pub struct Spec {
    /// The IBTA's name for it.
    pub name: &'static str,
    /// Byte offset from the start of the header.
    pub at: usize,
    /// First bit, counted from the most significant bit of byte `at`.
    pub bit: u8,
    /// Width in bits (at most 64).
    pub width: u8,
    /// rxe-core's reading of the field from the header's bytes (which are
    /// at least the header's length), or `None` for bits rxe-core ignores.
    pub get: Option<fn(&[u8]) -> u64>,
    /// What a value means.
    pub means: fn(u64) -> String,
}

impl Spec {
    /// The field's value: rxe-core's if it reads the field, else the raw
    /// bits. `None` if `b` does not reach that far.
    pub fn value(&self, b: &[u8]) -> Option<u64> {
        let raw = raw_bits(b, self.at, self.bit, self.width)?;
        Some(self.get.map_or(raw, |g| g(b)))
    }
}

/// The `width` bits starting `bit` bits into byte `at` (big-endian), or
/// `None` if `b` is too short. Used for bits rxe-core ignores and by the
/// tests that check the table.
pub fn raw_bits(b: &[u8], at: usize, bit: u8, width: u8) -> Option<u64> {
    let (bit, width) = (usize::from(bit), usize::from(width));
    let end = at + (bit + width).div_ceil(8);
    let bytes = b.get(at..end)?;
    let mut acc: u128 = 0;
    for x in bytes {
        acc = (acc << 8) | u128::from(*x);
    }
    let total = bytes.len() * 8;
    let shifted = acc >> (total - bit - width);
    Some((shifted & ((1u128 << width) - 1)) as u64)
}

fn none(_: u64) -> String {
    String::new()
}
fn flag(on: &'static str, off: &'static str) -> impl Fn(u64) -> String {
    move |v| if v != 0 { on } else { off }.to_owned()
}
fn reserved(v: u64) -> String {
    if v == 0 {
        "reserved, 0 as the sender must write it".into()
    } else {
        "reserved but NOT 0 (receivers ignore it)".into()
    }
}
fn qpn(v: u64) -> String {
    match v {
        0 => "QP0, the subnet management QP (not used by RoCE)".into(),
        1 => "QP1, the GSI QP: management datagrams such as CM MADs".into(),
        0xff_ffff => "0xFFFFFF: multicast".into(),
        _ => format!("QP {v}"),
    }
}

macro_rules! spec {
    ($name:expr, $at:expr, $bit:expr, $width:expr, $get:expr, $means:expr) => {
        Spec {
            name: $name,
            at: $at,
            bit: $bit,
            width: $width,
            get: $get,
            means: $means,
        }
    };
    // A transport header's field, where `rxe_core::wire::layout` puts it.
    ($field:expr, $get:expr, $means:expr) => {
        spec!(
            $field.name,
            $field.at,
            $field.bit,
            $field.width,
            $get,
            $means
        )
    };
}

/// Base Transport Header (IBTA 9.2, 12 bytes).
pub static BTH: &[Spec] = &[
    spec!(
        layout::bth::OPCODE,
        Some(|b| u64::from(Bth::new_unchecked(b).opcode().0)),
        |v| {
            match Opcode(v as u8).info() {
                Some(i) => format!(
                    "{} (transport {}, bits 7-5 = {:03b})",
                    i.name,
                    i.transport.prefix(),
                    v >> 5
                ),
                None => "unknown opcode".into(),
            }
        }
    ),
    spec!(
        layout::bth::SE,
        Some(|b| u64::from(Bth::new_unchecked(b).solicited())),
        |v| {
            flag(
                "Solicited Event: wake a receiver waiting for solicited completions",
                "no solicited event",
            )(v)
        }
    ),
    spec!(
        layout::bth::M,
        Some(|b| u64::from(Bth::new_unchecked(b).mig_req())),
        |v| {
            flag(
                "MigReq 1: path migration state Migrated (a QP without migration)",
                "MigReq 0: path migration ReArm or Armed (kernel rxe always sends 0)",
            )(v)
        }
    ),
    spec!(
        layout::bth::PADCNT,
        Some(|b| u64::from(Bth::new_unchecked(b).pad_count())),
        |v| { format!("{v} pad byte(s) after the payload, so payload+pad is a multiple of 4") }
    ),
    spec!(
        layout::bth::TVER,
        Some(|b| u64::from(Bth::new_unchecked(b).tver())),
        |v| {
            if v == 0 {
                "transport header version 0, the only one".into()
            } else {
                "unknown transport version: receivers drop the packet".into()
            }
        }
    ),
    spec!(
        layout::bth::P_KEY,
        Some(|b| u64::from(Bth::new_unchecked(b).pkey())),
        |v| {
            if v == 0xffff {
                "0xFFFF: the default partition, full member".into()
            } else {
                format!(
                    "partition {:#06x}, {} member",
                    v & 0x7fff,
                    if v & 0x8000 != 0 { "full" } else { "limited" }
                )
            }
        }
    ),
    spec!(
        layout::bth::FECN,
        Some(|b| u64::from(Bth::new_unchecked(b).fecn())),
        |v| {
            flag(
                "forward congestion seen on the way here",
                "no forward congestion notification",
            )(v)
        }
    ),
    spec!(
        layout::bth::BECN,
        Some(|b| u64::from(Bth::new_unchecked(b).becn())),
        |v| {
            flag(
                "backward congestion notification: slow down",
                "no backward congestion notification",
            )(v)
        }
    ),
    spec!(
        layout::bth::RESV6,
        Some(|b| u64::from(Bth::new_unchecked(b).resv6())),
        reserved
    ),
    spec!(
        layout::bth::DESTQP,
        Some(|b| u64::from(Bth::new_unchecked(b).dest_qp())),
        qpn
    ),
    spec!(
        layout::bth::ACKREQ,
        Some(|b| u64::from(Bth::new_unchecked(b).ack_req())),
        |v| {
            flag(
                "the responder must acknowledge this packet",
                "no ACK requested for this packet",
            )(v)
        }
    ),
    spec!(
        layout::bth::RESV7,
        Some(|b| u64::from(Bth::new_unchecked(b).resv7())),
        reserved
    ),
    spec!(
        layout::bth::PSN,
        Some(|b| u64::from(Bth::new_unchecked(b).psn().value())),
        |v| { format!("packet sequence number {v} (24 bits, wraps)") }
    ),
];

/// Reliable Datagram Extended Transport Header (4 bytes).
pub static RDETH: &[Spec] = &[
    spec!(layout::rdeth::RESERVED_0_0, None, reserved),
    spec!(
        layout::rdeth::EE_CONTEXT,
        Some(|b| u64::from(Rdeth::new_unchecked(b).ee_context())),
        |v| format!("end-to-end context {v}")
    ),
];

/// Datagram Extended Transport Header (8 bytes).
pub static DETH: &[Spec] = &[
    spec!(
        layout::deth::Q_KEY,
        Some(|b| u64::from(Deth::new_unchecked(b).qkey())),
        |v| {
            if v == u64::from(rxe_core::mad::GSI_QKEY) {
                "0x80010000: the well-known GSI Q_Key".into()
            } else {
                "must match the destination QP's Q_Key".into()
            }
        }
    ),
    spec!(layout::deth::RESERVED_4_0, None, reserved),
    spec!(
        layout::deth::SRCQP,
        Some(|b| u64::from(Deth::new_unchecked(b).src_qp())),
        |v| format!("sent by {}", qpn(v))
    ),
];

/// Flush Extended Transport Header (4 bytes).
pub static FETH: &[Spec] = &[
    spec!(layout::feth::RESERVED_0_0, None, reserved),
    spec!(
        layout::feth::SEL,
        Some(|b| u64::from(Feth::new_unchecked(b).selectivity())),
        |v| match v {
            0 => "selectivity: the memory range of the RETH".into(),
            1 => "selectivity: the whole memory region".into(),
            _ => "selectivity: reserved".into(),
        }
    ),
    spec!(
        layout::feth::PLT,
        Some(|b| u64::from(Feth::new_unchecked(b).placement())),
        |v| {
            format!(
                "placement type: global visibility {}, persistence {}",
                v & 1,
                (v >> 1) & 1
            )
        }
    ),
];

/// RDMA Extended Transport Header (16 bytes).
pub static RETH: &[Spec] = &[
    spec!(
        layout::reth::VA,
        Some(|b| Reth::new_unchecked(b).va()),
        |_| "virtual address at the responder".into()
    ),
    spec!(
        layout::reth::R_KEY,
        Some(|b| u64::from(Reth::new_unchecked(b).rkey())),
        |_| "remote key of the memory region or window".into()
    ),
    spec!(
        layout::reth::DMALEN,
        Some(|b| u64::from(Reth::new_unchecked(b).dma_len())),
        |v| format!("{v} bytes in the whole message")
    ),
];

/// Atomic Extended Transport Header (28 bytes).
pub static ATOMIC_ETH: &[Spec] = &[
    spec!(
        layout::atomic_eth::VA,
        Some(|b| AtomicEth::new_unchecked(b).va()),
        |_| "address of the 8-byte target, 8-byte aligned".into()
    ),
    spec!(
        layout::atomic_eth::R_KEY,
        Some(|b| u64::from(AtomicEth::new_unchecked(b).rkey())),
        |_| "remote key".into()
    ),
    spec!(
        layout::atomic_eth::SWAPDT_ADDDT,
        Some(|b| AtomicEth::new_unchecked(b).swap_add()),
        |_| "value to swap in (CmpSwap) or to add (FetchAdd)".into()
    ),
    spec!(
        layout::atomic_eth::CMPDT,
        Some(|b| AtomicEth::new_unchecked(b).compare()),
        |_| "value to compare with (CmpSwap only)".into()
    ),
];

fn syndrome(b: &[u8]) -> AethSyndrome {
    AethSyndrome::from_u8(b[0])
}

/// ACK Extended Transport Header (4 bytes). The syndrome byte is shown
/// whole and then as its three parts.
pub static AETH: &[Spec] = &[
    spec!(
        layout::aeth::SYNDROME,
        Some(|b| u64::from(rxe_core::wire::Aeth::new_unchecked(b).syndrome_raw())),
        |v| { AethSyndrome::from_u8(v as u8).to_string() }
    ),
    spec!(
        layout::aeth::SYNDROME_RESERVED,
        Some(|b| u64::from(matches!(syndrome(b), AethSyndrome::Reserved(x) if x & 0x80 != 0))),
        reserved
    ),
    spec!(
        layout::aeth::SYNDROME_TYPE,
        Some(|b| match syndrome(b) {
            AethSyndrome::Ack { .. } => 0,
            AethSyndrome::RnrNak { .. } => 1,
            AethSyndrome::Nak(_) => 3,
            AethSyndrome::Reserved(x) => u64::from((x >> 5) & 3),
        }),
        |v| match v {
            0 => "00 ACK".into(),
            1 => "01 RNR NAK (receiver not ready)".into(),
            2 => "10 reserved".into(),
            _ => "11 NAK".into(),
        }
    ),
    spec!(
        layout::aeth::SYNDROME_VALUE,
        Some(|b| match syndrome(b) {
            AethSyndrome::Ack { credits } => u64::from(credits),
            AethSyndrome::RnrNak { timer } => u64::from(timer),
            AethSyndrome::Nak(c) => u64::from(c.code()),
            AethSyndrome::Reserved(x) => u64::from(x & 0x1f),
        }),
        |v| {
            let c = rxe_core::wire::aeth::credit_count(v as u8)
                .map_or("credits not used".into(), |n| format!("{n} credits"));
            let t = rxe_core::engine::timers::rnr_delay(v as u8);
            format!(
                "if ACK: {c}; if RNR NAK: wait {}; if NAK: {}",
                super::words::duration(t),
                NakCode::from_code(v as u8)
            )
        }
    ),
    spec!(
        layout::aeth::MSN,
        Some(|b| u64::from(rxe_core::wire::Aeth::new_unchecked(b).msn())),
        |v| { format!("message sequence number: {v} messages completed (mod 2^24)") }
    ),
];

/// Atomic Acknowledge Extended Transport Header (8 bytes).
pub static ATOMIC_ACK_ETH: &[Spec] = &[spec!(
    layout::atomic_ack_eth::ORIGREMDT,
    Some(|b| AtomicAckEth::new_unchecked(b).orig()),
    |_| "the target's value before the atomic operation".into()
)];

/// Immediate data (4 bytes).
pub static IMMDT: &[Spec] = &[spec!(
    layout::immdt::IMMDT,
    Some(|b| u64::from(ImmDt::new_unchecked(b).value())),
    |_| "delivered to the receiver in its work completion".into()
)];

/// Invalidate Extended Transport Header (4 bytes).
pub static IETH: &[Spec] = &[spec!(
    layout::ieth::R_KEY,
    Some(|b| u64::from(Ieth::new_unchecked(b).rkey())),
    |_| "remote key the responder invalidates on receipt".into()
)];

/// The common MAD header (IBTA 13.4.2, 24 bytes of the 256-byte MAD).
pub static MAD_HEADER: &[Spec] = &[
    spec!(
        "BaseVersion",
        0,
        0,
        8,
        Some(|b| u64::from(Mad::new_unchecked(b).base_version())),
        |v| {
            if v == 1 {
                "1, the only base version".into()
            } else {
                "unknown base version".into()
            }
        }
    ),
    spec!(
        "MgmtClass",
        1,
        0,
        8,
        Some(|b| u64::from(Mad::new_unchecked(b).mgmt_class().0)),
        |v| { rxe_core::mad::MgmtClass(v as u8).to_string() }
    ),
    spec!(
        "ClassVersion",
        2,
        0,
        8,
        Some(|b| u64::from(Mad::new_unchecked(b).class_version())),
        none
    ),
    spec!(
        "R",
        3,
        0,
        1,
        Some(|b| u64::from(Mad::new_unchecked(b).method().is_response())),
        |v| { flag("a response", "not a response")(v) }
    ),
    spec!(
        "Method",
        3,
        0,
        8,
        Some(|b| u64::from(Mad::new_unchecked(b).method().0)),
        |v| { rxe_core::mad::Method(v as u8).to_string() }
    ),
    spec!(
        "Status",
        4,
        0,
        16,
        Some(|b| u64::from(Mad::new_unchecked(b).status())),
        |v| {
            if v == 0 {
                "success".into()
            } else {
                "an error status".into()
            }
        }
    ),
    spec!(
        "ClassSpecific",
        6,
        0,
        16,
        Some(|b| u64::from(Mad::new_unchecked(b).class_specific())),
        none
    ),
    spec!(
        "TransactionID",
        8,
        0,
        64,
        Some(|b| Mad::new_unchecked(b).transaction_id()),
        |_| { "chosen by the sender, echoed by the answer".into() }
    ),
    spec!(
        "AttributeID",
        16,
        0,
        16,
        Some(|b| u64::from(Mad::new_unchecked(b).attribute_id())),
        |v| { rxe_core::mad::AttributeId(v as u16).to_string() }
    ),
    spec!(
        "Reserved",
        18,
        0,
        16,
        Some(|b| u64::from(Mad::new_unchecked(b).reserved())),
        reserved
    ),
    spec!(
        "AttributeModifier",
        20,
        0,
        32,
        Some(|b| u64::from(Mad::new_unchecked(b).attribute_modifier())),
        none
    ),
];

/// A field of one CM message, read through rxe-core's CM parser.
macro_rules! cm {
    ($name:literal, $at:expr, $bit:expr, $width:expr, $variant:ident, $field:ident, $means:expr) => {
        spec!(
            $name,
            24 + $at,
            $bit,
            $width,
            Some(|b| match CmMad::parse(&b[..rxe_core::mad::MAD_LEN]) {
                Ok(CmMad {
                    message: CmMessage::$variant(m),
                    ..
                }) => cm_value(m.$field),
                _ => u64::MAX,
            }),
            $means
        )
    };
}

/// A CM field's value as a number.
trait CmValue {
    fn value(self) -> u64;
}
impl CmValue for u8 {
    fn value(self) -> u64 {
        self.into()
    }
}
impl CmValue for u16 {
    fn value(self) -> u64 {
        self.into()
    }
}
impl CmValue for u32 {
    fn value(self) -> u64 {
        self.into()
    }
}
impl CmValue for u64 {
    fn value(self) -> u64 {
        self
    }
}
impl CmValue for bool {
    fn value(self) -> u64 {
        self.into()
    }
}
impl CmValue for rxe_core::mad::cm::TransportServiceType {
    fn value(self) -> u64 {
        self.bits().into()
    }
}
impl CmValue for rxe_core::mad::cm::RejReason {
    fn value(self) -> u64 {
        self.0.into()
    }
}
impl CmValue for rxe_core::mad::cm::MraedMessage {
    fn value(self) -> u64 {
        self.bits().into()
    }
}
impl CmValue for rxe_core::mad::cm::RejectedMessage {
    fn value(self) -> u64 {
        self.bits().into()
    }
}
impl CmValue for rxe_core::mad::cm::SidrStatus {
    fn value(self) -> u64 {
        self.0.into()
    }
}
fn cm_value(v: impl CmValue) -> u64 {
    v.value()
}

fn comm_id(_: u64) -> String {
    "the sender's handle for this connection".into()
}
fn remote_comm_id(_: u64) -> String {
    "the peer's Local Communication ID, echoed".into()
}
fn service_id(v: u64) -> String {
    // rdma_cm: 0x0000000001 <port space> 00 <port> (IBTA A11 / librdmacm).
    if v >> 32 == 0x1 {
        format!(
            "rdma_cm service: port space {:#04x}{}, port {}",
            (v >> 16) & 0xff,
            match (v >> 16) & 0xff {
                0x06 => " (TCP-like, RC)",
                0x11 => " (UDP-like, UD)",
                0x3f => " (IB)",
                0x02 => " (IPoIB)",
                _ => "",
            },
            v & 0xffff
        )
    } else {
        "service the connection is for".into()
    }
}
fn psn24(v: u64) -> String {
    // The kernel's CM takes a REQ's or REP's Starting PSN as the sending
    // side's receive PSN and the receiving side's send PSN (cm-wire.md,
    // "The starting PSNs cross"): the capture shows it.
    format!("{v:#x}: the sender's QP expects it first; the receiving side's QP sends from it")
}
fn cm_timeout(v: u64) -> String {
    format!(
        "4.096 us x 2^{v} = {}",
        super::words::duration(rxe_core::mad::cm::timeout(v as u8))
    )
}

/// REQ (ConnectRequest) key fields.
pub static CM_REQ: &[Spec] = &[
    cm!("LocalCommID", 0, 0, 32, Req, local_comm_id, comm_id),
    cm!("ServiceID", 8, 0, 64, Req, service_id, service_id),
    cm!("LocalCAGUID", 16, 0, 64, Req, local_ca_guid, none),
    cm!("LocalQ_Key", 28, 0, 32, Req, local_qkey, none),
    cm!("LocalQPN", 32, 0, 24, Req, local_qpn, |v| format!(
        "the active side's QP {v:#x}"
    )),
    cm!(
        "ResponderResources",
        35,
        0,
        8,
        Req,
        responder_resources,
        |v| format!("{v} RDMA READs/atomics it will serve at once")
    ),
    cm!(
        "InitiatorDepth",
        39,
        0,
        8,
        Req,
        initiator_depth,
        |v| format!("{v} RDMA READs/atomics it will have outstanding")
    ),
    cm!(
        "RemoteCMResponseTimeout",
        43,
        0,
        5,
        Req,
        remote_cm_response_timeout,
        cm_timeout
    ),
    cm!(
        "TransportServiceType",
        43,
        5,
        2,
        Req,
        transport_service_type,
        |v| match v {
            0 => "RC".into(),
            1 => "UC".into(),
            2 => "RD".into(),
            _ => "reserved".into(),
        }
    ),
    cm!(
        "EndToEndFlowControl",
        43,
        7,
        1,
        Req,
        end_to_end_flow_control,
        none
    ),
    cm!("StartingPSN", 44, 0, 24, Req, starting_psn, psn24),
    cm!(
        "LocalCMResponseTimeout",
        47,
        0,
        5,
        Req,
        local_cm_response_timeout,
        cm_timeout
    ),
    cm!("RetryCount", 47, 5, 3, Req, retry_count, |v| format!(
        "{v} retransmissions before giving up"
    )),
    cm!("PartitionKey", 48, 0, 16, Req, pkey, none),
    cm!("PathMTU", 50, 0, 4, Req, path_mtu, |v| match v {
        1..=5 => format!("{} bytes", 128 << v),
        _ => "reserved".into(),
    }),
    cm!(
        "RNRRetryCount",
        50,
        5,
        3,
        Req,
        rnr_retry_count,
        |v| if v == 7 {
            "7: retry forever".into()
        } else {
            format!("{v} RNR retries")
        }
    ),
    cm!("MaxCMRetries", 51, 0, 4, Req, max_cm_retries, none),
    cm!("SRQ", 51, 4, 1, Req, srq, none),
];

/// MRA (MsgRcptAck) key fields.
pub static CM_MRA: &[Spec] = &[
    cm!("LocalCommID", 0, 0, 32, Mra, local_comm_id, comm_id),
    cm!(
        "RemoteCommID",
        4,
        0,
        32,
        Mra,
        remote_comm_id,
        remote_comm_id
    ),
    cm!("MessageMRAed", 8, 0, 2, Mra, message_mraed, |v| match v {
        0 => "REQ".into(),
        1 => "REP".into(),
        2 => "LAP".into(),
        _ => "reserved".into(),
    }),
    cm!("ServiceTimeout", 9, 0, 5, Mra, service_timeout, cm_timeout),
];

/// REJ (ConnectReject) key fields.
pub static CM_REJ: &[Spec] = &[
    cm!("LocalCommID", 0, 0, 32, Rej, local_comm_id, comm_id),
    cm!(
        "RemoteCommID",
        4,
        0,
        32,
        Rej,
        remote_comm_id,
        remote_comm_id
    ),
    cm!(
        "MessageRejected",
        8,
        0,
        2,
        Rej,
        message_rejected,
        |v| match v {
            0 => "REQ".into(),
            1 => "REP".into(),
            2 => "no message / other".into(),
            _ => "reserved".into(),
        }
    ),
    cm!("RejectInfoLength", 9, 0, 7, Rej, reject_info_length, none),
    cm!("Reason", 10, 0, 16, Rej, reason, |v| {
        rxe_core::mad::cm::RejReason(v as u16).to_string()
    }),
];

/// REP (ConnectReply) key fields.
pub static CM_REP: &[Spec] = &[
    cm!("LocalCommID", 0, 0, 32, Rep, local_comm_id, comm_id),
    cm!(
        "RemoteCommID",
        4,
        0,
        32,
        Rep,
        remote_comm_id,
        remote_comm_id
    ),
    cm!("LocalQ_Key", 8, 0, 32, Rep, local_qkey, none),
    cm!("LocalQPN", 12, 0, 24, Rep, local_qpn, |v| format!(
        "the passive side's QP {v:#x}"
    )),
    cm!("StartingPSN", 20, 0, 24, Rep, starting_psn, psn24),
    cm!(
        "ResponderResources",
        24,
        0,
        8,
        Rep,
        responder_resources,
        none
    ),
    cm!("InitiatorDepth", 25, 0, 8, Rep, initiator_depth, none),
    cm!(
        "TargetACKDelay",
        26,
        0,
        5,
        Rep,
        target_ack_delay,
        cm_timeout
    ),
    cm!("FailoverAccepted", 26, 5, 2, Rep, failover_accepted, none),
    cm!(
        "EndToEndFlowControl",
        26,
        7,
        1,
        Rep,
        end_to_end_flow_control,
        none
    ),
    cm!("RNRRetryCount", 27, 0, 3, Rep, rnr_retry_count, none),
    cm!("SRQ", 27, 3, 1, Rep, srq, none),
    cm!("LocalCAGUID", 28, 0, 64, Rep, local_ca_guid, none),
];

/// RTU (ReadyToUse) key fields.
pub static CM_RTU: &[Spec] = &[
    cm!("LocalCommID", 0, 0, 32, Rtu, local_comm_id, comm_id),
    cm!(
        "RemoteCommID",
        4,
        0,
        32,
        Rtu,
        remote_comm_id,
        remote_comm_id
    ),
];

/// DREQ (DisconnectRequest) key fields.
pub static CM_DREQ: &[Spec] = &[
    cm!("LocalCommID", 0, 0, 32, Dreq, local_comm_id, comm_id),
    cm!(
        "RemoteCommID",
        4,
        0,
        32,
        Dreq,
        remote_comm_id,
        remote_comm_id
    ),
    cm!(
        "RemoteQPN/EECN",
        8,
        0,
        24,
        Dreq,
        remote_qpn_eecn,
        |v| format!("the receiver's QP {v:#x}")
    ),
];

/// DREP (DisconnectReply) key fields.
pub static CM_DREP: &[Spec] = &[
    cm!("LocalCommID", 0, 0, 32, Drep, local_comm_id, comm_id),
    cm!(
        "RemoteCommID",
        4,
        0,
        32,
        Drep,
        remote_comm_id,
        remote_comm_id
    ),
];

/// SIDR_REQ key fields.
pub static CM_SIDR_REQ: &[Spec] = &[
    cm!("RequestID", 0, 0, 32, SidrReq, request_id, comm_id),
    cm!("PartitionKey", 4, 0, 16, SidrReq, pkey, none),
    cm!("ServiceID", 8, 0, 64, SidrReq, service_id, service_id),
];

/// SIDR_REP key fields.
pub static CM_SIDR_REP: &[Spec] = &[
    cm!("RequestID", 0, 0, 32, SidrRep, request_id, |_| {
        "the SIDR_REQ's RequestID, echoed".into()
    }),
    cm!("Status", 4, 0, 8, SidrRep, status, |v| {
        rxe_core::mad::cm::SidrStatus(v as u8).to_string()
    }),
    cm!("QPN", 8, 0, 24, SidrRep, qpn, |v| format!(
        "send datagrams for this service to QP {v:#x}"
    )),
    cm!("ServiceID", 12, 0, 64, SidrRep, service_id, service_id),
    cm!("Q_Key", 20, 0, 32, SidrRep, qkey, |_| "with this Q_Key"
        .into()),
];

/// The key-field table of a CM message, by attribute ID.
pub fn cm_table(attr: u16) -> Option<(&'static str, &'static [Spec])> {
    Some(match attr {
        0x10 => ("CM REQ (ConnectRequest)", CM_REQ),
        0x11 => ("CM MRA (MsgRcptAck)", CM_MRA),
        0x12 => ("CM REJ (ConnectReject)", CM_REJ),
        0x13 => ("CM REP (ConnectReply)", CM_REP),
        0x14 => ("CM RTU (ReadyToUse)", CM_RTU),
        0x15 => ("CM DREQ (DisconnectRequest)", CM_DREQ),
        0x16 => ("CM DREP (DisconnectReply)", CM_DREP),
        0x17 => ("CM SIDR_REQ (ServiceIDResReq)", CM_SIDR_REQ),
        0x18 => ("CM SIDR_REP (ServiceIDResReqResp)", CM_SIDR_REP),
        _ => return None,
    })
}
