//! ACK Extended Transport Header (IBTA 9.3.5): the responder's verdict.
//!
//! ```text
//! +---------------+-----------------------------------------------+
//! |  Syndrome (8) |                 MSN (24)                      |
//! +---------------+-----------------------------------------------+
//! Syndrome: bit 7 reserved (0); bits 6..5 type; bits 4..0 value
//!   00 ACK      value = credit count (0x1F: credits not tracked)
//!   01 RNR NAK  value = RNR timer code (table 45)
//!   10 reserved
//!   11 NAK      value = 0 PSN sequence error, 1 invalid request,
//!               2 remote access error, 3 remote operational error,
//!               4 invalid RD request, others reserved
//! ```

use super::field::*;
use super::{fixed_header_view, Header, Result};
use core::fmt;

fixed_header_view!(
    /// A zero-copy view of an AETH.
    Aeth,
    4,
    Header::Aeth
);

impl<T: AsRef<[u8]>> Aeth<T> {
    /// The raw syndrome byte.
    pub fn syndrome_raw(&self) -> u8 {
        self.buffer.as_ref()[0]
    }
    /// The decoded syndrome.
    pub fn syndrome(&self) -> AethSyndrome {
        AethSyndrome::from_u8(self.syndrome_raw())
    }
    /// Message sequence number (24 bits).
    pub fn msn(&self) -> u32 {
        u24_at(self.buffer.as_ref(), 1)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Aeth<T> {
    /// Sets the syndrome.
    pub fn set_syndrome(&mut self, s: AethSyndrome) {
        self.buffer.as_mut()[0] = s.to_u8();
    }
    /// Sets the MSN (low 24 bits).
    pub fn set_msn(&mut self, msn: u32) {
        set_u24(self.buffer.as_mut(), 1, msn & 0xff_ffff);
    }
}

/// The NAK codes of an AETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NakCode {
    /// 0: the request's PSN was ahead of the expected PSN.
    PsnSequenceError,
    /// 1: the request was malformed or not allowed (e.g. unsupported opcode, length error).
    InvalidRequest,
    /// 2: R_Key, address or access rights check failed.
    RemoteAccessError,
    /// 3: the responder could not complete the request (e.g. local error).
    RemoteOperationalError,
    /// 4: invalid RD request.
    InvalidRdRequest,
    /// 5..=31: reserved codes, kept as they came.
    Reserved(u8),
}

impl NakCode {
    /// The 5-bit code.
    pub const fn code(self) -> u8 {
        match self {
            NakCode::PsnSequenceError => 0,
            NakCode::InvalidRequest => 1,
            NakCode::RemoteAccessError => 2,
            NakCode::RemoteOperationalError => 3,
            NakCode::InvalidRdRequest => 4,
            NakCode::Reserved(c) => c & 0x1f,
        }
    }
    /// Decodes a 5-bit code.
    pub const fn from_code(c: u8) -> NakCode {
        match c & 0x1f {
            0 => NakCode::PsnSequenceError,
            1 => NakCode::InvalidRequest,
            2 => NakCode::RemoteAccessError,
            3 => NakCode::RemoteOperationalError,
            4 => NakCode::InvalidRdRequest,
            c => NakCode::Reserved(c),
        }
    }
}

impl fmt::Display for NakCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NakCode::PsnSequenceError => f.write_str("PSN sequence error"),
            NakCode::InvalidRequest => f.write_str("invalid request"),
            NakCode::RemoteAccessError => f.write_str("remote access error"),
            NakCode::RemoteOperationalError => f.write_str("remote operational error"),
            NakCode::InvalidRdRequest => f.write_str("invalid RD request"),
            NakCode::Reserved(c) => write!(f, "reserved NAK code {c}"),
        }
    }
}

/// The number of receive WQEs a 5-bit AETH credit code stands for (IBTA
/// table 44: 0, 1, 2, 3, 4, 6, 8, 12, ... 32768, each step a factor of
/// about 1.5), or `None` for [`CREDITS_INVALID`] (31, "credits
/// not used") and anything above it.
pub fn credit_count(code: u8) -> Option<u32> {
    const TABLE: [u32; 31] = [
        0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536,
        2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768,
    ];
    TABLE.get(usize::from(code)).copied()
}

/// Credit count meaning "end-to-end credits are not used" (IBTA 9.7.7.2).
pub const CREDITS_INVALID: u8 = 0x1f;

/// A decoded AETH syndrome. Every byte decodes to exactly one value and
/// encodes back to the same byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AethSyndrome {
    /// Positive acknowledgement with a 5-bit credit count.
    Ack {
        /// Credit count code.
        credits: u8,
    },
    /// Receiver not ready, retry after the given RNR timer code.
    RnrNak {
        /// RNR timer code (0..=31, see the RNR timer table).
        timer: u8,
    },
    /// Negative acknowledgement.
    Nak(NakCode),
    /// A syndrome with the reserved type `10` or bit 7 set, kept raw.
    Reserved(u8),
}

impl AethSyndrome {
    /// Decodes a syndrome byte.
    pub const fn from_u8(b: u8) -> AethSyndrome {
        if b & 0x80 != 0 {
            return AethSyndrome::Reserved(b);
        }
        let v = b & 0x1f;
        match (b >> 5) & 0x3 {
            0 => AethSyndrome::Ack { credits: v },
            1 => AethSyndrome::RnrNak { timer: v },
            3 => AethSyndrome::Nak(NakCode::from_code(v)),
            _ => AethSyndrome::Reserved(b),
        }
    }
    /// Encodes the syndrome byte.
    pub const fn to_u8(self) -> u8 {
        match self {
            AethSyndrome::Ack { credits } => credits & 0x1f,
            AethSyndrome::RnrNak { timer } => 0x20 | (timer & 0x1f),
            AethSyndrome::Nak(code) => 0x60 | code.code(),
            AethSyndrome::Reserved(b) => b,
        }
    }
    /// True for an ACK.
    pub const fn is_ack(self) -> bool {
        matches!(self, AethSyndrome::Ack { .. })
    }
}

impl fmt::Display for AethSyndrome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AethSyndrome::Ack { credits } => write!(f, "ACK credits={credits}"),
            AethSyndrome::RnrNak { timer } => write!(f, "RNR NAK timer={timer}"),
            AethSyndrome::Nak(c) => write!(f, "NAK {c}"),
            AethSyndrome::Reserved(b) => write!(f, "reserved syndrome {b:#04x}"),
        }
    }
}

/// The fields of an AETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AethRepr {
    /// Syndrome.
    pub syndrome: AethSyndrome,
    /// Message sequence number (24 bits).
    pub msn: u32,
}

impl AethRepr {
    /// Reads an AETH.
    pub fn parse<T: AsRef<[u8]>>(v: &Aeth<T>) -> Result<Self> {
        v.check_len()?;
        Ok(AethRepr {
            syndrome: v.syndrome(),
            msn: v.msn(),
        })
    }
    /// Bytes [`Self::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        4
    }
    /// Writes an AETH.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut Aeth<T>) {
        v.set_syndrome(self.syndrome);
        v.set_msn(self.msn);
    }
}

impl fmt::Display for AethRepr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AETH {} msn={}", self.syndrome, self.msn)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credit_codes_stand_for_their_counts() {
        assert_eq!(credit_count(0), Some(0));
        assert_eq!(credit_count(5), Some(6));
        assert_eq!(credit_count(30), Some(32768));
        assert_eq!(credit_count(CREDITS_INVALID), None);
        assert_eq!(credit_count(0xff), None);
        let counts: Vec<u32> = (0..31).filter_map(credit_count).collect();
        assert_eq!(counts.len(), 31);
        assert!(counts.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn syndromes_from_the_spec() {
        // Bytes as seen from Linux rxe: ACK with credits 31, RNR NAK with
        // timer 31 (491.52 ms), NAK remote operational error / access error.
        assert_eq!(
            AethSyndrome::from_u8(0x1f),
            AethSyndrome::Ack { credits: 31 }
        );
        assert_eq!(
            AethSyndrome::from_u8(0x3f),
            AethSyndrome::RnrNak { timer: 31 }
        );
        assert_eq!(
            AethSyndrome::from_u8(0x60),
            AethSyndrome::Nak(NakCode::PsnSequenceError)
        );
        assert_eq!(
            AethSyndrome::from_u8(0x61),
            AethSyndrome::Nak(NakCode::InvalidRequest)
        );
        assert_eq!(
            AethSyndrome::from_u8(0x62),
            AethSyndrome::Nak(NakCode::RemoteAccessError)
        );
        assert_eq!(
            AethSyndrome::from_u8(0x63),
            AethSyndrome::Nak(NakCode::RemoteOperationalError)
        );
        assert_eq!(
            AethSyndrome::from_u8(0x64),
            AethSyndrome::Nak(NakCode::InvalidRdRequest)
        );
        assert_eq!(
            AethSyndrome::from_u8(0x65),
            AethSyndrome::Nak(NakCode::Reserved(5))
        );
        assert_eq!(AethSyndrome::from_u8(0x41), AethSyndrome::Reserved(0x41));
        assert_eq!(AethSyndrome::from_u8(0x9f), AethSyndrome::Reserved(0x9f));
    }

    #[test]
    fn every_syndrome_byte_round_trips() {
        for b in 0..=255u8 {
            assert_eq!(AethSyndrome::from_u8(b).to_u8(), b);
        }
    }

    #[test]
    fn parse_and_emit() {
        let bytes = [0x3f, 0x00, 0x01, 0x02];
        let r = AethRepr::parse(&Aeth::new_checked(&bytes[..]).unwrap()).unwrap();
        assert_eq!(
            r,
            AethRepr {
                syndrome: AethSyndrome::RnrNak { timer: 31 },
                msn: 0x102
            }
        );
        let mut out = [0u8; 4];
        r.emit(&mut Aeth::new_unchecked(&mut out[..]));
        assert_eq!(out, bytes);
    }
}
