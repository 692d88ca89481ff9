//! Datagram headers (IBTA 9.3.1 and 9.3.2): the DETH of UD (and RD) packets
//! and the RDETH of RD packets.
//!
//! ```text
//! DETH (8 bytes)                         RDETH (4 bytes)
//! +-------------------------------+      +-------+-----------------------+
//! |          Q_Key (32)           |      | Resv8 |     EE-Context (24)   |
//! +-------+-----------------------+      +-------+-----------------------+
//! | Resv8 |  Source QP (24)       |
//! +-------+-----------------------+
//! ```

use super::field::*;
use super::{fixed_header_view, Header, Result};
use core::fmt;

fixed_header_view!(
    /// A zero-copy view of a DETH.
    Deth,
    8,
    Header::Deth
);

impl<T: AsRef<[u8]>> Deth<T> {
    /// Queue key.
    pub fn qkey(&self) -> u32 {
        u32_at(self.buffer.as_ref(), 0)
    }
    /// Source QP number (24 bits).
    pub fn src_qp(&self) -> u32 {
        u24_at(self.buffer.as_ref(), 5)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Deth<T> {
    /// Sets the queue key.
    pub fn set_qkey(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), 0, v);
    }
    /// Sets the source QP and clears the reserved byte.
    pub fn set_src_qp(&mut self, v: u32) {
        let b = self.buffer.as_mut();
        b[4] = 0;
        set_u24(b, 5, v & 0xff_ffff);
    }
}

/// The fields of a DETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct DethRepr {
    /// Queue key.
    pub qkey: u32,
    /// Source QP number.
    pub src_qp: u32,
}

impl DethRepr {
    /// Reads a DETH.
    pub fn parse<T: AsRef<[u8]>>(v: &Deth<T>) -> Result<Self> {
        v.check_len()?;
        Ok(DethRepr {
            qkey: v.qkey(),
            src_qp: v.src_qp(),
        })
    }
    /// Bytes [`Self::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        8
    }
    /// Writes a DETH.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut Deth<T>) {
        v.set_qkey(self.qkey);
        v.set_src_qp(self.src_qp);
    }
}

impl fmt::Display for DethRepr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "DETH qkey={:#010x} src_qp={:#08x}",
            self.qkey, self.src_qp
        )
    }
}

fixed_header_view!(
    /// A zero-copy view of an RDETH.
    Rdeth,
    4,
    Header::Rdeth
);

impl<T: AsRef<[u8]>> Rdeth<T> {
    /// End-to-end context (24 bits).
    pub fn ee_context(&self) -> u32 {
        u24_at(self.buffer.as_ref(), 1)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Rdeth<T> {
    /// Sets the EE context and clears the reserved byte.
    pub fn set_ee_context(&mut self, v: u32) {
        let b = self.buffer.as_mut();
        b[0] = 0;
        set_u24(b, 1, v & 0xff_ffff);
    }
}

/// The fields of an RDETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RdethRepr {
    /// End-to-end context.
    pub ee_context: u32,
}

impl RdethRepr {
    /// Reads an RDETH.
    pub fn parse<T: AsRef<[u8]>>(v: &Rdeth<T>) -> Result<Self> {
        v.check_len()?;
        Ok(RdethRepr {
            ee_context: v.ee_context(),
        })
    }
    /// Bytes [`Self::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        4
    }
    /// Writes an RDETH.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut Rdeth<T>) {
        v.set_ee_context(self.ee_context);
    }
}

impl fmt::Display for RdethRepr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RDETH eec={:#08x}", self.ee_context)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deth_layout() {
        // Q_Key 0x11111111 as ibv_ud_pingpong uses, source QP 0x000123.
        let bytes = [0x11, 0x11, 0x11, 0x11, 0x00, 0x00, 0x01, 0x23];
        let r = DethRepr::parse(&Deth::new_checked(&bytes[..]).unwrap()).unwrap();
        assert_eq!(
            r,
            DethRepr {
                qkey: 0x1111_1111,
                src_qp: 0x123
            }
        );
        let mut out = [0xffu8; 8];
        r.emit(&mut Deth::new_unchecked(&mut out[..]));
        assert_eq!(out, bytes);
    }

    #[test]
    fn rdeth_layout() {
        let bytes = [0x00, 0xab, 0xcd, 0xef];
        let r = RdethRepr::parse(&Rdeth::new_checked(&bytes[..]).unwrap()).unwrap();
        assert_eq!(r.ee_context, 0xabcdef);
        let mut out = [0xffu8; 4];
        r.emit(&mut Rdeth::new_unchecked(&mut out[..]));
        assert_eq!(out, bytes);
    }
}
