//! Management datagrams (MADs) and the Communication Manager (CM) messages
//! they carry, sans-IO.
//!
//! RDMA connection management does not travel on the connection it sets up:
//! each end sends fixed-size 256-byte MADs to the other's General Services
//! Interface QP (the GSI QP, QP 1), an unreliable-datagram QP with the
//! well-known Q_Key 0x80010000. Over RoCE v2 a MAD is the payload of a UD
//! SEND ONLY packet (BTH + DETH + 256 bytes + ICRC) to QP 1; see [`gsi`].
//!
//! ```text
//!  0               1               2               3
//! +---------------+---------------+---------------+---------------+
//! | BaseVersion   | MgmtClass     | ClassVersion  |R|  Method     |  0
//! +---------------+---------------+---------------+---------------+
//! |            Status             |        ClassSpecific          |  4
//! +---------------+---------------+---------------+---------------+
//! |                        TransactionID (64)                     |  8
//! |                                                               |
//! +---------------+---------------+---------------+---------------+
//! |          AttributeID          |           Reserved            | 16
//! +---------------+---------------+---------------+---------------+
//! |                      AttributeModifier                        | 20
//! +---------------+---------------+---------------+---------------+
//! |                 class-specific data (232 bytes)               | 24
//! ```
//! The common MAD header of IBTA Vol. 1, 13.4.2 (base version 1); the CM
//! class is management class 0x07, class version 2, and puts one message per
//! MAD in the 232 data bytes, one attribute ID per message type
//! (chapter 12.6); see [`cm`]. [`rdma_cm`] adds what the kernel's rdma_cm
//! and librdmacm put on top: service IDs made of a port space and a port,
//! and the private-data header carrying the IP addresses.
//!
//! As in [`crate::wire`], there is a zero-copy view ([`Mad`]) that checks
//! the length once, and owned reprs with `parse` and `emit`. MADs are fixed
//! size, so a buffer that is not exactly 256 bytes is an error, not
//! something to pad or cut. Parsing never panics and returns a typed
//! [`Error`]; emitting writes reserved bits as zero (and parsing ignores
//! them, as IBTA tells receivers to).

pub mod cm;
pub mod error;
pub mod gsi;
pub mod rdma_cm;
pub mod route;

pub use cm::{AttributeId, CmMad, CmMessage};
pub use error::{Error, Result};
pub use gsi::{is_gsi_packet, GsiMad, GSI_QKEY, GSI_QPN};
pub use rdma_cm::{CmaHeader, PortSpace};
pub use route::{cm_route, CmRoute};

use crate::wire::field::*;
use core::fmt;

/// Length of every MAD.
pub const MAD_LEN: usize = 256;
/// Length of the common MAD header.
pub const MAD_HEADER_LEN: usize = 24;
/// Bytes after the common header (the class's data).
pub const MAD_DATA_LEN: usize = MAD_LEN - MAD_HEADER_LEN;
/// The only MAD base version IBTA defines.
pub const MAD_BASE_VERSION: u8 = 1;

mod f {
    pub const BASE_VERSION: usize = 0;
    pub const MGMT_CLASS: usize = 1;
    pub const CLASS_VERSION: usize = 2;
    pub const METHOD: usize = 3;
    pub const STATUS: usize = 4;
    pub const CLASS_SPECIFIC: usize = 6;
    pub const TID: usize = 8;
    pub const ATTR_ID: usize = 16;
    pub const RESV: usize = 18;
    pub const ATTR_MOD: usize = 20;
}

/// A management class (IBTA 13.4.4, table 145). The CM is [`Self::CM`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MgmtClass(pub u8);

impl MgmtClass {
    /// Subnet management, LID routed.
    pub const SUBN_LID_ROUTED: MgmtClass = MgmtClass(0x01);
    /// Subnet administration.
    pub const SUBN_ADM: MgmtClass = MgmtClass(0x03);
    /// Performance management.
    pub const PERF: MgmtClass = MgmtClass(0x04);
    /// Baseboard management.
    pub const BM: MgmtClass = MgmtClass(0x05);
    /// Device management.
    pub const DEVICE_MGMT: MgmtClass = MgmtClass(0x06);
    /// Communication management.
    pub const CM: MgmtClass = MgmtClass(0x07);
    /// SNMP tunnelling.
    pub const SNMP: MgmtClass = MgmtClass(0x08);
    /// Subnet management, directed route.
    pub const SUBN_DIRECTED_ROUTE: MgmtClass = MgmtClass(0x81);

    /// The class's name, if it is one of the above.
    pub fn name(self) -> Option<&'static str> {
        Some(match self {
            Self::SUBN_LID_ROUTED => "SubnMgt",
            Self::SUBN_ADM => "SubnAdm",
            Self::PERF => "Perf",
            Self::BM => "BM",
            Self::DEVICE_MGMT => "DevMgt",
            Self::CM => "CM",
            Self::SNMP => "SNMP",
            Self::SUBN_DIRECTED_ROUTE => "SubnMgt(DR)",
            _ => return None,
        })
    }
}

impl fmt::Display for MgmtClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "class {:#04x}", self.0),
        }
    }
}

/// A MAD method (IBTA 13.4.5, table 146); the top bit, R, marks a response.
/// The CM sends all its messages with [`Self::SEND`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Method(pub u8);

impl Method {
    /// Get().
    pub const GET: Method = Method(0x01);
    /// Set().
    pub const SET: Method = Method(0x02);
    /// Send(): the CM's only method.
    pub const SEND: Method = Method(0x03);
    /// Trap().
    pub const TRAP: Method = Method(0x05);
    /// Report().
    pub const REPORT: Method = Method(0x06);
    /// TrapRepress().
    pub const TRAP_REPRESS: Method = Method(0x07);
    /// GetResp().
    pub const GET_RESP: Method = Method(0x81);
    /// ReportResp().
    pub const REPORT_RESP: Method = Method(0x86);

    /// True if the R bit is set.
    pub fn is_response(self) -> bool {
        self.0 & 0x80 != 0
    }

    /// The method's name, if it is one of the above.
    pub fn name(self) -> Option<&'static str> {
        Some(match self {
            Self::GET => "Get",
            Self::SET => "Set",
            Self::SEND => "Send",
            Self::TRAP => "Trap",
            Self::REPORT => "Report",
            Self::TRAP_REPRESS => "TrapRepress",
            Self::GET_RESP => "GetResp",
            Self::REPORT_RESP => "ReportResp",
            _ => return None,
        })
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "method {:#04x}", self.0),
        }
    }
}

/// A zero-copy view of one MAD: exactly [`MAD_LEN`] bytes.
///
/// After [`Mad::new_checked`] no accessor panics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mad<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Mad<T> {
    /// Wraps a buffer without checking its length. Accessors panic if it
    /// is shorter than [`MAD_LEN`]; prefer [`Self::new_checked`].
    pub const fn new_unchecked(buffer: T) -> Self {
        Mad { buffer }
    }

    /// Wraps a buffer after checking that it is exactly one MAD.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let m = Self::new_unchecked(buffer);
        m.check_len()?;
        Ok(m)
    }

    /// Checks the buffer is exactly [`MAD_LEN`] bytes.
    pub fn check_len(&self) -> Result<()> {
        match self.buffer.as_ref().len() {
            MAD_LEN => Ok(()),
            len => Err(Error::WrongLength(len)),
        }
    }

    /// Gives the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// The whole MAD.
    pub fn as_bytes(&self) -> &[u8] {
        &self.b()[..MAD_LEN]
    }
    /// BaseVersion (1).
    pub fn base_version(&self) -> u8 {
        self.b()[f::BASE_VERSION]
    }
    /// MgmtClass.
    pub fn mgmt_class(&self) -> MgmtClass {
        MgmtClass(self.b()[f::MGMT_CLASS])
    }
    /// ClassVersion.
    pub fn class_version(&self) -> u8 {
        self.b()[f::CLASS_VERSION]
    }
    /// Method, R bit included.
    pub fn method(&self) -> Method {
        Method(self.b()[f::METHOD])
    }
    /// Status.
    pub fn status(&self) -> u16 {
        u16_at(self.b(), f::STATUS)
    }
    /// ClassSpecific.
    pub fn class_specific(&self) -> u16 {
        u16_at(self.b(), f::CLASS_SPECIFIC)
    }
    /// TransactionID.
    pub fn transaction_id(&self) -> u64 {
        u64_at(self.b(), f::TID)
    }
    /// AttributeID.
    pub fn attribute_id(&self) -> u16 {
        u16_at(self.b(), f::ATTR_ID)
    }
    /// The reserved 16 bits after the attribute ID.
    pub fn reserved(&self) -> u16 {
        u16_at(self.b(), f::RESV)
    }
    /// AttributeModifier.
    pub fn attribute_modifier(&self) -> u32 {
        u32_at(self.b(), f::ATTR_MOD)
    }
    /// The class's data: the [`MAD_DATA_LEN`] bytes after the header.
    pub fn data(&self) -> &[u8; MAD_DATA_LEN] {
        self.b()[MAD_HEADER_LEN..MAD_LEN]
            .try_into()
            .expect("a checked MAD")
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Mad<T> {
    /// The class's data, writable.
    pub fn data_mut(&mut self) -> &mut [u8; MAD_DATA_LEN] {
        (&mut self.buffer.as_mut()[MAD_HEADER_LEN..MAD_LEN])
            .try_into()
            .expect("a checked MAD")
    }
    /// The header bytes, writable.
    fn header_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[..MAD_HEADER_LEN]
    }
}

/// The fields of the common MAD header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MadHeader {
    /// BaseVersion: 1.
    pub base_version: u8,
    /// MgmtClass.
    pub mgmt_class: MgmtClass,
    /// ClassVersion (2 for the CM).
    pub class_version: u8,
    /// Method, R bit included.
    pub method: Method,
    /// Status (13.4.7): zero in requests and in every CM message.
    pub status: u16,
    /// ClassSpecific.
    pub class_specific: u16,
    /// TransactionID: chosen by the requester, echoed in the response.
    pub transaction_id: u64,
    /// AttributeID: what the data is (for the CM, which message).
    pub attribute_id: u16,
    /// AttributeModifier.
    pub attribute_modifier: u32,
}

impl MadHeader {
    /// Reads the header of a MAD. Fails on a wrong length or a base
    /// version other than 1; the class is not checked here.
    pub fn parse<T: AsRef<[u8]>>(mad: &Mad<T>) -> Result<Self> {
        mad.check_len()?;
        if mad.base_version() != MAD_BASE_VERSION {
            return Err(Error::BadBaseVersion(mad.base_version()));
        }
        Ok(MadHeader {
            base_version: mad.base_version(),
            mgmt_class: mad.mgmt_class(),
            class_version: mad.class_version(),
            method: mad.method(),
            status: mad.status(),
            class_specific: mad.class_specific(),
            transaction_id: mad.transaction_id(),
            attribute_id: mad.attribute_id(),
            attribute_modifier: mad.attribute_modifier(),
        })
    }

    /// Bytes [`Self::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        MAD_HEADER_LEN
    }

    /// Writes the header (the reserved field zero), leaving the data alone.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, mad: &mut Mad<T>) {
        let b = mad.header_mut();
        b[f::BASE_VERSION] = self.base_version;
        b[f::MGMT_CLASS] = self.mgmt_class.0;
        b[f::CLASS_VERSION] = self.class_version;
        b[f::METHOD] = self.method.0;
        set_u16(b, f::STATUS, self.status);
        set_u16(b, f::CLASS_SPECIFIC, self.class_specific);
        set_u64(b, f::TID, self.transaction_id);
        set_u16(b, f::ATTR_ID, self.attribute_id);
        set_u16(b, f::RESV, 0);
        set_u32(b, f::ATTR_MOD, self.attribute_modifier);
    }
}

impl fmt::Display for MadHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "MAD v{} {} v{} {} tid={:#018x} attr={:#06x}",
            self.base_version,
            self.mgmt_class,
            self.class_version,
            self.method,
            self.transaction_id,
            self.attribute_id
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
        Ok(())
    }
}

/// A fixed-size byte field of a MAD (private data, ARI, additional
/// information), with a `Debug` and `Display` that print hex and leave out
/// trailing zeros instead of listing every byte.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct FixedBytes<const N: usize>(pub [u8; N]);

impl<const N: usize> FixedBytes<N> {
    /// The field's size.
    pub const LEN: usize = N;

    /// All zeros.
    pub const fn zeroed() -> Self {
        FixedBytes([0; N])
    }

    /// `bytes` followed by zeros, or `None` if `bytes` is longer than `N`.
    pub fn from_prefix(bytes: &[u8]) -> Option<Self> {
        let mut a = [0u8; N];
        a.get_mut(..bytes.len())?.copy_from_slice(bytes);
        Some(FixedBytes(a))
    }

    /// The bytes up to the last non-zero one.
    pub fn trimmed(&self) -> &[u8] {
        let end = self.0.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
        &self.0[..end]
    }

    /// True if every byte is zero.
    pub fn is_zero(&self) -> bool {
        self.0.iter().all(|&b| b == 0)
    }
}

impl<const N: usize> Default for FixedBytes<N> {
    fn default() -> Self {
        Self::zeroed()
    }
}

impl<const N: usize> core::ops::Deref for FixedBytes<N> {
    type Target = [u8; N];
    fn deref(&self) -> &[u8; N] {
        &self.0
    }
}

impl<const N: usize> core::ops::DerefMut for FixedBytes<N> {
    fn deref_mut(&mut self) -> &mut [u8; N] {
        &mut self.0
    }
}

impl<const N: usize> fmt::Display for FixedBytes<N> {
    /// Hex up to the last non-zero byte, `(N zero bytes)` if all are zero.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = self.trimmed();
        if t.is_empty() {
            return write!(f, "({N} zero bytes)");
        }
        for b in t {
            write!(f, "{b:02x}")?;
        }
        if t.len() < N {
            write!(f, " (+{} zero bytes)", N - t.len())?;
        }
        Ok(())
    }
}

impl<const N: usize> fmt::Debug for FixedBytes<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FixedBytes<{N}>({self})")
    }
}

/// Reads fields at IBTA's offsets: bytes from the start of the MAD data,
/// bits counted from the most significant bit of the byte.
pub(crate) struct Reader<'a>(pub &'a [u8; MAD_DATA_LEN]);

impl Reader<'_> {
    pub fn u8(&self, at: usize) -> u8 {
        self.0[at]
    }
    pub fn u16(&self, at: usize) -> u16 {
        u16_at(self.0, at)
    }
    pub fn u24(&self, at: usize) -> u32 {
        u24_at(self.0, at)
    }
    pub fn u32(&self, at: usize) -> u32 {
        u32_at(self.0, at)
    }
    pub fn u64(&self, at: usize) -> u64 {
        u64_at(self.0, at)
    }
    /// `width` bits of byte `at`, starting `bit` bits from its top.
    pub fn bits(&self, at: usize, bit: u32, width: u32) -> u8 {
        (self.0[at] >> (8 - bit - width)) & (((1u16 << width) - 1) as u8)
    }
    pub fn flag(&self, at: usize, bit: u32) -> bool {
        self.bits(at, bit, 1) != 0
    }
    pub fn bytes<const N: usize>(&self, at: usize) -> [u8; N] {
        let mut a = [0u8; N];
        a.copy_from_slice(&self.0[at..at + N]);
        a
    }
    pub fn gid(&self, at: usize) -> std::net::Ipv6Addr {
        std::net::Ipv6Addr::from(self.bytes::<16>(at))
    }
}

/// Writes fields at IBTA's offsets into MAD data that starts out zeroed,
/// masking each value to its field's width.
pub(crate) struct Writer<'a>(pub &'a mut [u8; MAD_DATA_LEN]);

impl Writer<'_> {
    pub fn u8(&mut self, at: usize, v: u8) {
        self.0[at] = v;
    }
    pub fn u16(&mut self, at: usize, v: u16) {
        set_u16(self.0, at, v);
    }
    pub fn u24(&mut self, at: usize, v: u32) {
        set_u24(self.0, at, v & 0x00ff_ffff);
    }
    pub fn u32(&mut self, at: usize, v: u32) {
        set_u32(self.0, at, v);
    }
    pub fn u64(&mut self, at: usize, v: u64) {
        set_u64(self.0, at, v);
    }
    /// ORs `width` bits of `v` into byte `at`, `bit` bits from its top.
    pub fn bits(&mut self, at: usize, bit: u32, width: u32, v: u8) {
        let mask = ((1u16 << width) - 1) as u8;
        self.0[at] |= (v & mask) << (8 - bit - width);
    }
    pub fn flag(&mut self, at: usize, bit: u32, on: bool) {
        self.bits(at, bit, 1, u8::from(on));
    }
    pub fn bytes(&mut self, at: usize, v: &[u8]) {
        self.0[at..at + v.len()].copy_from_slice(v);
    }
    pub fn gid(&mut self, at: usize, v: std::net::Ipv6Addr) {
        self.bytes(at, &v.octets());
    }
}

#[cfg(test)]
mod tests;
