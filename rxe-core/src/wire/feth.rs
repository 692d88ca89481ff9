//! Flush Extended Transport Header (IBTA 1.5, FLUSH): what a FLUSH makes
//! persistent or visible.
//!
//! ```text
//! +-----------------------------------------------+-----+-------+
//! |               Reserved (26)                   | SEL |  PLT  |
//! +-----------------------------------------------+-----+-------+
//! SEL (bits 5..4): selectivity level, 0 = memory region range, 1 = whole region
//! PLT (bits 3..0): placement type, bit 0 global visibility, bit 1 persistence
//! ```

use super::field::*;
use super::{fixed_header_view, Header, Result};
use core::fmt;

fixed_header_view!(
    /// A zero-copy view of a FETH.
    Feth,
    4,
    Header::Feth
);

impl<T: AsRef<[u8]>> Feth<T> {
    /// Selectivity level (2 bits).
    pub fn selectivity(&self) -> u8 {
        ((u32_at(self.buffer.as_ref(), 0) >> 4) & 0x3) as u8
    }
    /// Placement type (4 bits).
    pub fn placement(&self) -> u8 {
        (u32_at(self.buffer.as_ref(), 0) & 0xf) as u8
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Feth<T> {
    /// Sets selectivity and placement, reserved bits zero.
    pub fn set(&mut self, selectivity: u8, placement: u8) {
        let v = (u32::from(selectivity & 0x3) << 4) | u32::from(placement & 0xf);
        set_u32(self.buffer.as_mut(), 0, v);
    }
}

/// The fields of a FETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FethRepr {
    /// Selectivity level.
    pub selectivity: u8,
    /// Placement type.
    pub placement: u8,
}

impl FethRepr {
    /// Reads a FETH.
    pub fn parse<T: AsRef<[u8]>>(v: &Feth<T>) -> Result<Self> {
        v.check_len()?;
        Ok(FethRepr {
            selectivity: v.selectivity(),
            placement: v.placement(),
        })
    }
    /// Bytes [`Self::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        4
    }
    /// Writes a FETH.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut Feth<T>) {
        v.set(self.selectivity, self.placement);
    }
}

impl fmt::Display for FethRepr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FETH sel={} plt={}", self.selectivity, self.placement)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn feth_layout() {
        let bytes = [0, 0, 0, 0x13];
        let r = FethRepr::parse(&Feth::new_checked(&bytes[..]).unwrap()).unwrap();
        assert_eq!(
            r,
            FethRepr {
                selectivity: 1,
                placement: 3
            }
        );
        let mut out = [0xffu8; 4];
        r.emit(&mut Feth::new_unchecked(&mut out[..]));
        assert_eq!(out, bytes);
    }
}
