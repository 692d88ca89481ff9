//! The Communication Manager class (IBTA Vol. 1, chapter 12): management
//! class 0x07, class version 2, every message sent with method Send, one
//! message per MAD, the attribute ID saying which.
//!
//! | attribute | message | what it does |
//! |---|---|---|
//! | 0x0010 | [`Req`] | active side asks for a connection to a service ID |
//! | 0x0011 | [`Mra`] | "message received, answer will take longer" |
//! | 0x0012 | [`Rej`] | refuses a REQ or REP, with a reason |
//! | 0x0013 | [`Rep`] | passive side accepts: its QPN, PSN, resources |
//! | 0x0014 | [`Rtu`] | active side: ready to use, the connection is up |
//! | 0x0015 | [`Dreq`] | either side asks to disconnect |
//! | 0x0016 | [`Drep`] | disconnect reply |
//! | 0x0017 | [`SidrReq`] | UD: which QPN and Q_Key serve this service ID? |
//! | 0x0018 | [`SidrRep`] | UD: this QPN and Q_Key (or a status why not) |
//! | 0x0019 | [`Lap`] | load an alternate path (automatic path migration) |
//! | 0x001A | [`Apr`] | alternate path response |
//!
//! Field offsets in this module are bytes from the start of the MAD data
//! (byte 24 of the MAD), bits counted from the top of the byte, as in the
//! spec's tables 106–120. Every field is total: any bit pattern parses, so
//! a message's `parse` cannot fail once the MAD header says what it is.
//! Fields narrower than their Rust type are masked on emit.
//!
//! CM timeouts (remote and local CM response timeout, service timeout,
//! target ACK delay, local ACK timeout) are 5-bit exponents:
//! 4.096 µs × 2^value; see [`timeout`].

mod connect;
mod disconnect;
mod lap;
mod path;
mod sidr;

pub use connect::{
    Mra, MraedMessage, Rej, RejReason, RejectedMessage, Rep, Req, Rtu, TransportServiceType,
};
pub use disconnect::{Drep, Dreq};
pub use lap::{Apr, AprStatus, Lap};
pub use path::CmPath;
pub use sidr::{SidrRep, SidrReq, SidrStatus};

use super::{
    Error, Mad, MadHeader, Method, MgmtClass, Reader, Result, Writer, MAD_DATA_LEN, MAD_LEN,
};
use core::fmt;
use std::time::Duration;

/// The CM class version this module speaks.
pub const CM_CLASS_VERSION: u8 = 2;

/// A CM timeout field's value as a duration: 4.096 µs × 2^`exp` (`exp` is
/// a 5-bit field; larger values are taken as 31).
pub fn timeout(exp: u8) -> Duration {
    Duration::from_nanos(4096u64 << exp.min(31))
}

/// A CM attribute ID: which message a CM MAD carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AttributeId(pub u16);

impl AttributeId {
    /// ClassPortInfo (common to all classes; not a CM message).
    pub const CLASS_PORT_INFO: AttributeId = AttributeId(0x0001);
    /// ConnectRequest.
    pub const REQ: AttributeId = AttributeId(0x0010);
    /// MsgRcptAck.
    pub const MRA: AttributeId = AttributeId(0x0011);
    /// ConnectReject.
    pub const REJ: AttributeId = AttributeId(0x0012);
    /// ConnectReply.
    pub const REP: AttributeId = AttributeId(0x0013);
    /// ReadyToUse.
    pub const RTU: AttributeId = AttributeId(0x0014);
    /// DisconnectRequest.
    pub const DREQ: AttributeId = AttributeId(0x0015);
    /// DisconnectReply.
    pub const DREP: AttributeId = AttributeId(0x0016);
    /// ServiceIDResReq.
    pub const SIDR_REQ: AttributeId = AttributeId(0x0017);
    /// ServiceIDResReqResp.
    pub const SIDR_REP: AttributeId = AttributeId(0x0018);
    /// LoadAlternatePath.
    pub const LAP: AttributeId = AttributeId(0x0019);
    /// AlternatePathResponse.
    pub const APR: AttributeId = AttributeId(0x001a);

    /// The short name ("REQ", "SIDR_REP", ...), if it is one of the above.
    pub fn name(self) -> Option<&'static str> {
        Some(match self {
            Self::CLASS_PORT_INFO => "ClassPortInfo",
            Self::REQ => "REQ",
            Self::MRA => "MRA",
            Self::REJ => "REJ",
            Self::REP => "REP",
            Self::RTU => "RTU",
            Self::DREQ => "DREQ",
            Self::DREP => "DREP",
            Self::SIDR_REQ => "SIDR_REQ",
            Self::SIDR_REP => "SIDR_REP",
            Self::LAP => "LAP",
            Self::APR => "APR",
            _ => return None,
        })
    }
}

impl fmt::Display for AttributeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "attribute {:#06x}", self.0),
        }
    }
}

/// What every CM message does: read itself from MAD data and write itself
/// into zeroed MAD data.
pub(crate) trait Body: Sized {
    const ATTR: AttributeId;
    fn read(r: &Reader<'_>) -> Self;
    fn write(&self, w: &mut Writer<'_>);
}

/// One CM message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(clippy::large_enum_variant)]
pub enum CmMessage {
    /// ConnectRequest.
    Req(Req),
    /// MsgRcptAck.
    Mra(Mra),
    /// ConnectReject.
    Rej(Rej),
    /// ConnectReply.
    Rep(Rep),
    /// ReadyToUse.
    Rtu(Rtu),
    /// DisconnectRequest.
    Dreq(Dreq),
    /// DisconnectReply.
    Drep(Drep),
    /// ServiceIDResReq.
    SidrReq(SidrReq),
    /// ServiceIDResReqResp.
    SidrRep(SidrRep),
    /// LoadAlternatePath.
    Lap(Lap),
    /// AlternatePathResponse.
    Apr(Apr),
}

macro_rules! each_message {
    ($self:expr, $m:ident => $e:expr) => {
        match $self {
            CmMessage::Req($m) => $e,
            CmMessage::Mra($m) => $e,
            CmMessage::Rej($m) => $e,
            CmMessage::Rep($m) => $e,
            CmMessage::Rtu($m) => $e,
            CmMessage::Dreq($m) => $e,
            CmMessage::Drep($m) => $e,
            CmMessage::SidrReq($m) => $e,
            CmMessage::SidrRep($m) => $e,
            CmMessage::Lap($m) => $e,
            CmMessage::Apr($m) => $e,
        }
    };
}

macro_rules! from_message {
    ($($v:ident),*) => {$(
        impl From<$v> for CmMessage {
            fn from(m: $v) -> Self {
                CmMessage::$v(m)
            }
        }
    )*};
}
from_message!(Req, Mra, Rej, Rep, Rtu, Dreq, Drep, SidrReq, SidrRep, Lap, Apr);

fn attr_of<B: Body>(_: &B) -> AttributeId {
    B::ATTR
}

impl CmMessage {
    /// The attribute ID that carries this message.
    pub fn attribute_id(&self) -> AttributeId {
        each_message!(self, m => attr_of(m))
    }

    /// Reads the message an attribute ID names from the MAD data.
    pub fn parse(attr: AttributeId, data: &[u8; MAD_DATA_LEN]) -> Result<Self> {
        let r = Reader(data);
        Ok(match attr {
            AttributeId::REQ => CmMessage::Req(Req::read(&r)),
            AttributeId::MRA => CmMessage::Mra(Mra::read(&r)),
            AttributeId::REJ => CmMessage::Rej(Rej::read(&r)),
            AttributeId::REP => CmMessage::Rep(Rep::read(&r)),
            AttributeId::RTU => CmMessage::Rtu(Rtu::read(&r)),
            AttributeId::DREQ => CmMessage::Dreq(Dreq::read(&r)),
            AttributeId::DREP => CmMessage::Drep(Drep::read(&r)),
            AttributeId::SIDR_REQ => CmMessage::SidrReq(SidrReq::read(&r)),
            AttributeId::SIDR_REP => CmMessage::SidrRep(SidrRep::read(&r)),
            AttributeId::LAP => CmMessage::Lap(Lap::read(&r)),
            AttributeId::APR => CmMessage::Apr(Apr::read(&r)),
            other => return Err(Error::UnknownAttribute(other.0)),
        })
    }

    /// Writes the message into the MAD data, reserved bits zero.
    pub fn emit(&self, data: &mut [u8; MAD_DATA_LEN]) {
        data.fill(0);
        let mut w = Writer(data);
        each_message!(self, m => m.write(&mut w))
    }

    /// The communication ID the sender chose for this connection (for the
    /// SIDR messages, the request ID).
    pub fn local_comm_id(&self) -> u32 {
        match self {
            CmMessage::Req(m) => m.local_comm_id,
            CmMessage::Mra(m) => m.local_comm_id,
            CmMessage::Rej(m) => m.local_comm_id,
            CmMessage::Rep(m) => m.local_comm_id,
            CmMessage::Rtu(m) => m.local_comm_id,
            CmMessage::Dreq(m) => m.local_comm_id,
            CmMessage::Drep(m) => m.local_comm_id,
            CmMessage::SidrReq(m) => m.request_id,
            CmMessage::SidrRep(m) => m.request_id,
            CmMessage::Lap(m) => m.local_comm_id,
            CmMessage::Apr(m) => m.local_comm_id,
        }
    }

    /// The peer's communication ID, for the messages that carry it (all but
    /// REQ and the SIDR pair; zero in a REJ or MRA of a REQ).
    pub fn remote_comm_id(&self) -> Option<u32> {
        match self {
            CmMessage::Req(_) | CmMessage::SidrReq(_) | CmMessage::SidrRep(_) => None,
            CmMessage::Mra(m) => Some(m.remote_comm_id),
            CmMessage::Rej(m) => Some(m.remote_comm_id),
            CmMessage::Rep(m) => Some(m.remote_comm_id),
            CmMessage::Rtu(m) => Some(m.remote_comm_id),
            CmMessage::Dreq(m) => Some(m.remote_comm_id),
            CmMessage::Drep(m) => Some(m.remote_comm_id),
            CmMessage::Lap(m) => Some(m.remote_comm_id),
            CmMessage::Apr(m) => Some(m.remote_comm_id),
        }
    }

    /// The message's private data (the consumer's bytes, whole field).
    pub fn private_data(&self) -> &[u8] {
        each_message!(self, m => &m.private_data[..])
    }

    /// One line with the message's key fields, e.g.
    /// `CM REQ local_comm_id=0x71fbea41 service_id=0x0000000001061c06 qpn=0x000021 psn=0xe0b806`.
    pub fn describe(&self) -> String {
        let mut s = format!("CM {} ", self.attribute_id());
        match self {
            CmMessage::Req(m) => {
                s += &format!(
                    "local_comm_id={:#010x} service_id={:#018x} qpn={:#08x} psn={:#08x}",
                    m.local_comm_id, m.service_id, m.local_qpn, m.starting_psn
                )
            }
            CmMessage::Mra(m) => {
                s += &format!(
                    "local_comm_id={:#010x} remote_comm_id={:#010x} message={} service_timeout={}",
                    m.local_comm_id, m.remote_comm_id, m.message_mraed, m.service_timeout
                )
            }
            CmMessage::Rej(m) => {
                s += &format!(
                    "local_comm_id={:#010x} remote_comm_id={:#010x} message={} reason={}",
                    m.local_comm_id, m.remote_comm_id, m.message_rejected, m.reason
                )
            }
            CmMessage::Rep(m) => {
                s += &format!(
                    "local_comm_id={:#010x} remote_comm_id={:#010x} qpn={:#08x} psn={:#08x}",
                    m.local_comm_id, m.remote_comm_id, m.local_qpn, m.starting_psn
                )
            }
            CmMessage::Rtu(m) => {
                s += &format!(
                    "local_comm_id={:#010x} remote_comm_id={:#010x}",
                    m.local_comm_id, m.remote_comm_id
                )
            }
            CmMessage::Dreq(m) => {
                s += &format!(
                    "local_comm_id={:#010x} remote_comm_id={:#010x} remote_qpn={:#08x}",
                    m.local_comm_id, m.remote_comm_id, m.remote_qpn_eecn
                )
            }
            CmMessage::Drep(m) => {
                s += &format!(
                    "local_comm_id={:#010x} remote_comm_id={:#010x}",
                    m.local_comm_id, m.remote_comm_id
                )
            }
            CmMessage::SidrReq(m) => {
                s += &format!(
                    "request_id={:#010x} service_id={:#018x}",
                    m.request_id, m.service_id
                )
            }
            CmMessage::SidrRep(m) => {
                s += &format!(
                    "request_id={:#010x} status={} qpn={:#08x} qkey={:#010x}",
                    m.request_id, m.status, m.qpn, m.qkey
                )
            }
            CmMessage::Lap(m) => {
                s += &format!(
                    "local_comm_id={:#010x} remote_comm_id={:#010x} remote_qpn={:#08x}",
                    m.local_comm_id, m.remote_comm_id, m.remote_qpn_eecn
                )
            }
            CmMessage::Apr(m) => {
                s += &format!(
                    "local_comm_id={:#010x} remote_comm_id={:#010x} status={}",
                    m.local_comm_id, m.remote_comm_id, m.ap_status
                )
            }
        }
        s
    }
}

impl fmt::Display for CmMessage {
    /// Every field, named, on one line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        each_message!(self, m => fmt::Display::fmt(m, f))
    }
}

/// A whole CM MAD: the header fields that are not fixed by the class, and
/// the message.
///
/// The class (0x07), class version (2), method (Send) and attribute ID
/// (from the message) are implied; parsing checks them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmMad {
    /// TransactionID. The sender of a REQ, DREQ, LAP or SIDR_REQ picks it;
    /// the answers reuse it (Linux forms it from its MAD agent's high TID
    /// and the local communication ID).
    pub transaction_id: u64,
    /// AttributeModifier (zero, except where ECE puts a vendor value in it).
    pub attribute_modifier: u32,
    /// Status (zero in CM messages).
    pub status: u16,
    /// ClassSpecific (zero in CM messages).
    pub class_specific: u16,
    /// The message.
    pub message: CmMessage,
}

impl CmMad {
    /// A CM MAD with the given transaction ID, status and modifier zero.
    pub fn new(transaction_id: u64, message: impl Into<CmMessage>) -> Self {
        CmMad {
            transaction_id,
            attribute_modifier: 0,
            status: 0,
            class_specific: 0,
            message: message.into(),
        }
    }

    /// Parses 256 bytes as a CM MAD.
    pub fn parse(bytes: &[u8]) -> Result<Self> {
        Self::parse_mad(&Mad::new_checked(bytes)?)
    }

    /// Parses a MAD view as a CM MAD: base version 1, class 0x07, class
    /// version 2, method Send, and an attribute ID of a CM message.
    pub fn parse_mad<T: AsRef<[u8]>>(mad: &Mad<T>) -> Result<Self> {
        let h = MadHeader::parse(mad)?;
        if h.mgmt_class != MgmtClass::CM {
            return Err(Error::NotCm(h.mgmt_class.0));
        }
        if h.class_version != CM_CLASS_VERSION {
            return Err(Error::BadClassVersion(h.class_version));
        }
        if h.method != Method::SEND {
            return Err(Error::UnexpectedMethod(h.method.0));
        }
        let message = CmMessage::parse(AttributeId(h.attribute_id), mad.data())?;
        Ok(CmMad {
            transaction_id: h.transaction_id,
            attribute_modifier: h.attribute_modifier,
            status: h.status,
            class_specific: h.class_specific,
            message,
        })
    }

    /// The common MAD header this message goes out with.
    pub fn header(&self) -> MadHeader {
        MadHeader {
            base_version: super::MAD_BASE_VERSION,
            mgmt_class: MgmtClass::CM,
            class_version: CM_CLASS_VERSION,
            method: Method::SEND,
            status: self.status,
            class_specific: self.class_specific,
            transaction_id: self.transaction_id,
            attribute_id: self.message.attribute_id().0,
            attribute_modifier: self.attribute_modifier,
        }
    }

    /// Bytes [`Self::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        MAD_LEN
    }

    /// Writes all 256 bytes of the MAD.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, mad: &mut Mad<T>) {
        self.header().emit(mad);
        self.message.emit(mad.data_mut());
    }

    /// The MAD as bytes.
    pub fn to_bytes(&self) -> [u8; MAD_LEN] {
        let mut b = [0u8; MAD_LEN];
        self.emit(&mut Mad::new_unchecked(&mut b[..]));
        b
    }

    /// One line: the message's key fields (see [`CmMessage::describe`]).
    pub fn describe(&self) -> String {
        self.message.describe()
    }
}

impl fmt::Display for CmMad {
    /// `CM <message> tid=...` and every field of the message.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "CM {} tid={:#018x}",
            self.message.attribute_id(),
            self.transaction_id
        )?;
        if self.attribute_modifier != 0 {
            write!(f, " attr_mod={:#010x}", self.attribute_modifier)?;
        }
        if self.status != 0 {
            write!(f, " status={:#06x}", self.status)?;
        }
        if self.class_specific != 0 {
            write!(f, " class_specific={:#06x}", self.class_specific)?;
        }
        write!(f, " {}", self.message)
    }
}
