//! RDMA Extended Transport Header (IBTA 9.3.3): where an RDMA WRITE, READ,
//! FLUSH or ATOMIC WRITE lands in the responder's memory.
//!
//! ```text
//! +---------------------------------------------------------------+
//! |                    Virtual Address (64)                       |
//! |                                                               |
//! +---------------------------------------------------------------+
//! |                         R_Key (32)                            |
//! +---------------------------------------------------------------+
//! |                       DMA Length (32)                         |
//! +---------------------------------------------------------------+
//! ```

use super::field::*;
use super::{fixed_header_view, Header, Result};
use core::fmt;

fixed_header_view!(
    /// A zero-copy view of a RETH.
    Reth,
    16,
    Header::Reth
);

impl<T: AsRef<[u8]>> Reth<T> {
    /// Virtual address.
    pub fn va(&self) -> u64 {
        u64_at(self.buffer.as_ref(), 0)
    }
    /// Remote key.
    pub fn rkey(&self) -> u32 {
        u32_at(self.buffer.as_ref(), 8)
    }
    /// DMA length of the whole operation.
    pub fn dma_len(&self) -> u32 {
        u32_at(self.buffer.as_ref(), 12)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Reth<T> {
    /// Sets the virtual address.
    pub fn set_va(&mut self, v: u64) {
        set_u64(self.buffer.as_mut(), 0, v);
    }
    /// Sets the remote key.
    pub fn set_rkey(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), 8, v);
    }
    /// Sets the DMA length.
    pub fn set_dma_len(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), 12, v);
    }
}

/// The fields of a RETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RethRepr {
    /// Virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// DMA length.
    pub dma_len: u32,
}

impl RethRepr {
    /// Reads a RETH.
    pub fn parse<T: AsRef<[u8]>>(v: &Reth<T>) -> Result<Self> {
        v.check_len()?;
        Ok(RethRepr {
            va: v.va(),
            rkey: v.rkey(),
            dma_len: v.dma_len(),
        })
    }
    /// Bytes [`Self::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        16
    }
    /// Writes a RETH.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut Reth<T>) {
        v.set_va(self.va);
        v.set_rkey(self.rkey);
        v.set_dma_len(self.dma_len);
    }
}

impl fmt::Display for RethRepr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "RETH va={:#x} rkey={:#010x} len={}",
            self.va, self.rkey, self.dma_len
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BYTES: [u8; 16] = [
        0x00, 0x00, 0x7f, 0x12, 0x34, 0x56, 0x78, 0x00, // VA
        0xde, 0xad, 0xbe, 0xef, // R_Key
        0x00, 0x01, 0x00, 0x00, // DMA length 65536
    ];
    const REPR: RethRepr = RethRepr {
        va: 0x7f12_3456_7800,
        rkey: 0xdead_beef,
        dma_len: 65536,
    };

    #[test]
    fn parse_and_emit() {
        assert_eq!(
            RethRepr::parse(&Reth::new_checked(&BYTES[..]).unwrap()).unwrap(),
            REPR
        );
        let mut buf = [0u8; 16];
        REPR.emit(&mut Reth::new_unchecked(&mut buf[..]));
        assert_eq!(buf, BYTES);
        assert!(Reth::new_checked(&BYTES[..15]).is_err());
    }
}
