//! Typed errors for malformed or unexpected MADs.

use crate::wire::Opcode;

/// Everything that can be wrong with a MAD, or with the packet carrying it.
/// Small and `Copy`, so a MAD layer can count drops by reason without
/// allocating.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A MAD is exactly 256 bytes; this one is not.
    #[error("a MAD is 256 bytes, not {0}")]
    WrongLength(usize),
    /// Base version other than 1.
    #[error("MAD base version {0} (only 1 is defined)")]
    BadBaseVersion(u8),
    /// A management class other than the one expected.
    #[error("management class {0:#04x} is not the CM class (0x07)")]
    NotCm(u8),
    /// CM class version other than 2.
    #[error("CM class version {0} (only 2 is defined)")]
    BadClassVersion(u8),
    /// A CM MAD with a method other than Send.
    #[error("CM MAD with method {0:#04x} (the CM sends only with Send, 0x03)")]
    UnexpectedMethod(u8),
    /// A CM attribute ID that is not one of the CM messages.
    #[error("CM attribute {0:#06x} is not a CM message")]
    UnknownAttribute(u16),
    /// The rdma_cm private-data header has a version other than 0.
    #[error("rdma_cm header version {0} (only 0 is defined)")]
    BadCmaVersion(u8),
    /// The rdma_cm private-data header names an IP version other than 4 or 6.
    #[error("rdma_cm header IP version {0} (4 or 6)")]
    BadCmaIpVersion(u8),
    /// Private data too short for the rdma_cm header.
    #[error("rdma_cm header needs {need} bytes of private data, have {have}")]
    CmaTruncated {
        /// Bytes the header needs.
        need: usize,
        /// Bytes there are.
        have: usize,
    },
    /// The packet is malformed (see [`crate::wire::Error`]).
    #[error("packet: {0}")]
    Wire(#[from] crate::wire::Error),
    /// A packet that is not a UD SEND ONLY cannot carry a MAD.
    #[error("{0} does not carry MADs (UD SEND ONLY does)")]
    NotUdSend(Opcode),
    /// A packet to a QP other than the GSI QP (1).
    #[error("packet to QP {0:#x}, not the GSI QP 1")]
    NotGsi(u32),
    /// A packet to the GSI QP with a Q_Key other than 0x80010000.
    #[error("GSI packet with Q_Key {0:#010x}, not 0x80010000")]
    WrongQkey(u32),
}

/// Result with the MAD [`Error`].
pub type Result<T> = core::result::Result<T, Error>;
