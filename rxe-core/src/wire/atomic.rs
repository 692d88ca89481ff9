//! Atomic headers (IBTA 9.3.4 and 9.5.3): the AtomicETH of a compare-and-swap
//! or fetch-and-add request and the AtomicAckETH that returns the original
//! value.
//!
//! ```text
//! AtomicETH (28 bytes)               AtomicAckETH (8 bytes)
//! +-------------------------------+  +-------------------------------+
//! | Virtual Address (64)          |  | Original Remote Data (64)     |
//! | R_Key (32)                    |  +-------------------------------+
//! | Swap (CmpSwap) / Add data (64)|
//! | Compare data (64)             |
//! +-------------------------------+
//! ```

use super::field::*;
use super::{fixed_header_view, Header, Result};
use core::fmt;

fixed_header_view!(
    /// A zero-copy view of an AtomicETH.
    AtomicEth,
    28,
    Header::AtomicEth
);

impl<T: AsRef<[u8]>> AtomicEth<T> {
    /// Virtual address (must be 8-byte aligned for the operation to be valid).
    pub fn va(&self) -> u64 {
        u64_at(self.buffer.as_ref(), 0)
    }
    /// Remote key.
    pub fn rkey(&self) -> u32 {
        u32_at(self.buffer.as_ref(), 8)
    }
    /// Swap value (compare-and-swap) or addend (fetch-and-add).
    pub fn swap_add(&self) -> u64 {
        u64_at(self.buffer.as_ref(), 12)
    }
    /// Compare value (compare-and-swap only).
    pub fn compare(&self) -> u64 {
        u64_at(self.buffer.as_ref(), 20)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AtomicEth<T> {
    /// Sets the virtual address.
    pub fn set_va(&mut self, v: u64) {
        set_u64(self.buffer.as_mut(), 0, v);
    }
    /// Sets the remote key.
    pub fn set_rkey(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), 8, v);
    }
    /// Sets the swap/add value.
    pub fn set_swap_add(&mut self, v: u64) {
        set_u64(self.buffer.as_mut(), 12, v);
    }
    /// Sets the compare value.
    pub fn set_compare(&mut self, v: u64) {
        set_u64(self.buffer.as_mut(), 20, v);
    }
}

/// The fields of an AtomicETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AtomicEthRepr {
    /// Virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// Swap or add value.
    pub swap_add: u64,
    /// Compare value.
    pub compare: u64,
}

impl AtomicEthRepr {
    /// Reads an AtomicETH.
    pub fn parse<T: AsRef<[u8]>>(v: &AtomicEth<T>) -> Result<Self> {
        v.check_len()?;
        Ok(AtomicEthRepr {
            va: v.va(),
            rkey: v.rkey(),
            swap_add: v.swap_add(),
            compare: v.compare(),
        })
    }
    /// Bytes [`Self::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        28
    }
    /// Writes an AtomicETH.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut AtomicEth<T>) {
        v.set_va(self.va);
        v.set_rkey(self.rkey);
        v.set_swap_add(self.swap_add);
        v.set_compare(self.compare);
    }
}

impl fmt::Display for AtomicEthRepr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "AtomicETH va={:#x} rkey={:#010x} swap_add={:#x} compare={:#x}",
            self.va, self.rkey, self.swap_add, self.compare
        )
    }
}

fixed_header_view!(
    /// A zero-copy view of an AtomicAckETH.
    AtomicAckEth,
    8,
    Header::AtomicAckEth
);

impl<T: AsRef<[u8]>> AtomicAckEth<T> {
    /// The value the target held before the atomic operation.
    pub fn orig(&self) -> u64 {
        u64_at(self.buffer.as_ref(), 0)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AtomicAckEth<T> {
    /// Sets the original value.
    pub fn set_orig(&mut self, v: u64) {
        set_u64(self.buffer.as_mut(), 0, v);
    }
}

/// The fields of an AtomicAckETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AtomicAckEthRepr {
    /// Original remote data.
    pub orig: u64,
}

impl AtomicAckEthRepr {
    /// Reads an AtomicAckETH.
    pub fn parse<T: AsRef<[u8]>>(v: &AtomicAckEth<T>) -> Result<Self> {
        v.check_len()?;
        Ok(AtomicAckEthRepr { orig: v.orig() })
    }
    /// Bytes [`Self::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        8
    }
    /// Writes an AtomicAckETH.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut AtomicAckEth<T>) {
        v.set_orig(self.orig);
    }
}

impl fmt::Display for AtomicAckEthRepr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AtomicAckETH orig={:#x}", self.orig)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_eth_layout() {
        let mut bytes = [0u8; 28];
        bytes[0..8].copy_from_slice(&0x1122_3344_5566_7788u64.to_be_bytes());
        bytes[8..12].copy_from_slice(&0xaabb_ccddu32.to_be_bytes());
        bytes[12..20].copy_from_slice(&7u64.to_be_bytes());
        bytes[20..28].copy_from_slice(&9u64.to_be_bytes());
        let r = AtomicEthRepr::parse(&AtomicEth::new_checked(&bytes[..]).unwrap()).unwrap();
        assert_eq!(
            r,
            AtomicEthRepr {
                va: 0x1122_3344_5566_7788,
                rkey: 0xaabb_ccdd,
                swap_add: 7,
                compare: 9
            }
        );
        let mut out = [0u8; 28];
        r.emit(&mut AtomicEth::new_unchecked(&mut out[..]));
        assert_eq!(out, bytes);
        assert!(AtomicEth::new_checked(&bytes[..27]).is_err());
    }

    #[test]
    fn atomic_ack_layout() {
        let bytes = 0xfeed_face_0000_0001u64.to_be_bytes();
        let r = AtomicAckEthRepr::parse(&AtomicAckEth::new_checked(&bytes[..]).unwrap()).unwrap();
        assert_eq!(r.orig, 0xfeed_face_0000_0001);
        let mut out = [0u8; 8];
        r.emit(&mut AtomicAckEth::new_unchecked(&mut out[..]));
        assert_eq!(out, bytes);
    }
}
