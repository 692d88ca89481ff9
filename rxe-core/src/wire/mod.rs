//! RoCE v2 wire formats.
//!
//! Each header comes in two forms, as in smoltcp's `wire` module:
//!
//! * a zero-copy **view** (`Bth<T>`, `Reth<T>`, ...) over any `AsRef<[u8]>`.
//!   `new_checked` checks the length once; after that no accessor panics.
//!   Getters work on `AsRef<[u8]>`, setters on `AsMut<[u8]>`.
//! * an owned **repr** (`BthRepr`, `RethRepr`, ...) with `parse`, `buffer_len`
//!   and `emit`, holding the header's fields as plain values.
//!
//! [`packet`] puts them together into a whole InfiniBand transport packet
//! (BTH, extension headers, payload, pad, ICRC) driven by the [`opcode`]
//! table; [`frame`] finds that packet inside an Ethernet/IP/UDP frame, and
//! [`icrc`] computes the invariant CRC over it.
//!
//! Layouts follow the InfiniBand Architecture Specification, Vol. 1,
//! chapter 9.2–9.5 and the RoCE v2 annex (A17). All fields are big-endian.

pub mod aeth;
pub mod atomic;
pub mod bth;
pub mod deth;
pub mod error;
pub mod feth;
pub mod frame;
pub mod icrc;
pub mod imm;
pub mod layout;
pub mod opcode;
pub mod packet;
pub mod reth;

pub use aeth::{Aeth, AethRepr, AethSyndrome, NakCode};
pub use atomic::{AtomicAckEth, AtomicAckEthRepr, AtomicEth, AtomicEthRepr};
pub use bth::{Bth, BthRepr, BTH_LEN};
pub use deth::{Deth, DethRepr, Rdeth, RdethRepr};
pub use error::{Error, Header, LengthField, NotRoce, Result};
pub use feth::{Feth, FethRepr};
pub use frame::{
    EthRepr, FrameRepr, IpRepr, LinkType, RoceFrame, UdpChecksum, VlanTag, ROCE_V2_PORT,
};
pub use icrc::ICRC_LEN;
pub use imm::{Ieth, ImmDt};
pub use opcode::{ExtHeaders, Opcode, OpcodeInfo, Operation, Position, QpTypes, Transport};
pub use packet::{Packet, PacketRepr};
pub use reth::{Reth, RethRepr};

/// Big-endian field access shared by the header views.
pub(crate) mod field {
    pub fn u16_at(b: &[u8], at: usize) -> u16 {
        u16::from_be_bytes([b[at], b[at + 1]])
    }
    pub fn u24_at(b: &[u8], at: usize) -> u32 {
        u32::from_be_bytes([0, b[at], b[at + 1], b[at + 2]])
    }
    pub fn u32_at(b: &[u8], at: usize) -> u32 {
        u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
    }
    pub fn u64_at(b: &[u8], at: usize) -> u64 {
        let mut x = [0u8; 8];
        x.copy_from_slice(&b[at..at + 8]);
        u64::from_be_bytes(x)
    }
    pub fn set_u16(b: &mut [u8], at: usize, v: u16) {
        b[at..at + 2].copy_from_slice(&v.to_be_bytes());
    }
    pub fn set_u24(b: &mut [u8], at: usize, v: u32) {
        b[at..at + 3].copy_from_slice(&v.to_be_bytes()[1..]);
    }
    pub fn set_u32(b: &mut [u8], at: usize, v: u32) {
        b[at..at + 4].copy_from_slice(&v.to_be_bytes());
    }
    pub fn set_u64(b: &mut [u8], at: usize, v: u64) {
        b[at..at + 8].copy_from_slice(&v.to_be_bytes());
    }
}

/// Generates the constructors every fixed-length header view shares.
macro_rules! fixed_header_view {
    ($(#[$doc:meta])* $name:ident, $len:expr, $hdr:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $name<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $name<T> {
            /// Length of this header in bytes.
            pub const LEN: usize = $len;

            /// Wraps a buffer without checking its length. Accessors panic
            /// if the buffer is shorter than [`Self::LEN`]; prefer
            /// [`Self::new_checked`].
            pub const fn new_unchecked(buffer: T) -> Self {
                Self { buffer }
            }

            /// Wraps a buffer after checking it holds the whole header.
            pub fn new_checked(buffer: T) -> $crate::wire::Result<Self> {
                let v = Self::new_unchecked(buffer);
                v.check_len()?;
                Ok(v)
            }

            /// Checks the buffer is long enough for every accessor.
            pub fn check_len(&self) -> $crate::wire::Result<()> {
                let have = self.buffer.as_ref().len();
                if have < Self::LEN {
                    Err($crate::wire::Error::Truncated { header: $hdr, need: Self::LEN, have })
                } else {
                    Ok(())
                }
            }

            /// Gives the buffer back.
            pub fn into_inner(self) -> T {
                self.buffer
            }
        }
    };
}
pub(crate) use fixed_header_view;
