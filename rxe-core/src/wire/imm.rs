//! The two 4-byte trailers of the extension headers: immediate data (ImmDt,
//! IBTA 9.3.6) and the invalidate R_Key (IETH, IBTA 9.3.7). Their reprs are
//! plain `u32`s.

use super::field::*;
use super::{fixed_header_view, Header};

fixed_header_view!(
    /// A zero-copy view of immediate data. The 32 bits are opaque to the
    /// transport and handed to the receiver's completion as they are.
    ImmDt,
    4,
    Header::ImmDt
);

impl<T: AsRef<[u8]>> ImmDt<T> {
    /// The immediate value, in network byte order as a `u32`.
    pub fn value(&self) -> u32 {
        u32_at(self.buffer.as_ref(), 0)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ImmDt<T> {
    /// Sets the immediate value.
    pub fn set_value(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), 0, v);
    }
}

fixed_header_view!(
    /// A zero-copy view of an IETH: the R_Key a SEND WITH INVALIDATE invalidates.
    Ieth,
    4,
    Header::Ieth
);

impl<T: AsRef<[u8]>> Ieth<T> {
    /// The R_Key to invalidate.
    pub fn rkey(&self) -> u32 {
        u32_at(self.buffer.as_ref(), 0)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ieth<T> {
    /// Sets the R_Key to invalidate.
    pub fn set_rkey(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), 0, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn four_byte_headers() {
        let b = [0x12, 0x34, 0x56, 0x78];
        assert_eq!(ImmDt::new_checked(&b[..]).unwrap().value(), 0x1234_5678);
        assert_eq!(Ieth::new_checked(&b[..]).unwrap().rkey(), 0x1234_5678);
        assert!(ImmDt::new_checked(&b[..3]).is_err());
        let mut out = [0u8; 4];
        Ieth::new_unchecked(&mut out[..]).set_rkey(0x1234_5678);
        assert_eq!(out, b);
    }
}
