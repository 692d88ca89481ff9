//! Base Transport Header (IBTA 9.2): 12 bytes in front of every packet.
//!
//! ```text
//!  0               1               2               3
//! +---------------+-+-+---+-------+-------------------------------+
//! |    OpCode     |S|M|Pad| TVer  |            P_Key              |
//! +-+-+-----------+---------------+-------------------------------+
//! |F|B|  Resv6    |             Destination QP                    |
//! +-+-------------+-----------------------------------------------+
//! |A|   Resv7     |                    PSN                        |
//! +---------------+-----------------------------------------------+
//! ```
//! S: solicited event, M: migration request, Pad: pad count, TVer: transport
//! version (0), F/B: FECN/BECN (RoCE v2 congestion bits in what IBTA calls
//! reserved byte 4, which the ICRC masks), A: acknowledge request.

use super::field::*;
use super::{fixed_header_view, Error, Header, Opcode, Result};
use crate::psn::Psn;
use core::fmt;

/// Length of the BTH.
pub const BTH_LEN: usize = 12;

mod f {
    pub const OPCODE: usize = 0;
    pub const FLAGS: usize = 1;
    pub const PKEY: usize = 2;
    pub const FB: usize = 4;
    pub const DEST_QP: usize = 5;
    pub const ACK: usize = 8;
    pub const PSN: usize = 9;
}

fixed_header_view!(
    /// A zero-copy view of a BTH.
    Bth,
    BTH_LEN,
    Header::Bth
);

impl<T: AsRef<[u8]>> Bth<T> {
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// Opcode.
    pub fn opcode(&self) -> Opcode {
        Opcode(self.b()[f::OPCODE])
    }
    /// Solicited event bit.
    pub fn solicited(&self) -> bool {
        self.b()[f::FLAGS] & 0x80 != 0
    }
    /// Migration request bit.
    pub fn mig_req(&self) -> bool {
        self.b()[f::FLAGS] & 0x40 != 0
    }
    /// Pad count (0..=3).
    pub fn pad_count(&self) -> u8 {
        (self.b()[f::FLAGS] >> 4) & 0x3
    }
    /// Transport header version.
    pub fn tver(&self) -> u8 {
        self.b()[f::FLAGS] & 0x0f
    }
    /// Partition key.
    pub fn pkey(&self) -> u16 {
        u16_at(self.b(), f::PKEY)
    }
    /// Forward explicit congestion notification.
    pub fn fecn(&self) -> bool {
        self.b()[f::FB] & 0x80 != 0
    }
    /// Backward explicit congestion notification.
    pub fn becn(&self) -> bool {
        self.b()[f::FB] & 0x40 != 0
    }
    /// The six reserved bits of byte 4.
    pub fn resv6(&self) -> u8 {
        self.b()[f::FB] & 0x3f
    }
    /// Destination QP number (24 bits).
    pub fn dest_qp(&self) -> u32 {
        u24_at(self.b(), f::DEST_QP)
    }
    /// Acknowledge request bit.
    pub fn ack_req(&self) -> bool {
        self.b()[f::ACK] & 0x80 != 0
    }
    /// The seven reserved bits of byte 8.
    pub fn resv7(&self) -> u8 {
        self.b()[f::ACK] & 0x7f
    }
    /// Packet sequence number (24 bits).
    #[inline]
    pub fn psn(&self) -> Psn {
        Psn::new(u24_at(self.b(), f::PSN))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Bth<T> {
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    fn set_bit(&mut self, at: usize, mask: u8, on: bool) {
        let b = self.bm();
        b[at] = if on { b[at] | mask } else { b[at] & !mask };
    }
    /// Sets the opcode.
    pub fn set_opcode(&mut self, op: Opcode) {
        self.bm()[f::OPCODE] = op.0;
    }
    /// Sets the solicited event bit.
    pub fn set_solicited(&mut self, on: bool) {
        self.set_bit(f::FLAGS, 0x80, on);
    }
    /// Sets the migration request bit.
    pub fn set_mig_req(&mut self, on: bool) {
        self.set_bit(f::FLAGS, 0x40, on);
    }
    /// Sets the pad count (only the low two bits are used).
    pub fn set_pad_count(&mut self, pad: u8) {
        let b = self.bm();
        b[f::FLAGS] = (b[f::FLAGS] & !0x30) | ((pad & 0x3) << 4);
    }
    /// Sets the transport version (low four bits).
    pub fn set_tver(&mut self, v: u8) {
        let b = self.bm();
        b[f::FLAGS] = (b[f::FLAGS] & 0xf0) | (v & 0x0f);
    }
    /// Sets the partition key.
    pub fn set_pkey(&mut self, pkey: u16) {
        set_u16(self.bm(), f::PKEY, pkey);
    }
    /// Sets FECN.
    pub fn set_fecn(&mut self, on: bool) {
        self.set_bit(f::FB, 0x80, on);
    }
    /// Sets BECN.
    pub fn set_becn(&mut self, on: bool) {
        self.set_bit(f::FB, 0x40, on);
    }
    /// Sets the destination QP (low 24 bits); byte 4 is left as it is.
    pub fn set_dest_qp(&mut self, qpn: u32) {
        set_u24(self.bm(), f::DEST_QP, qpn & 0x00ff_ffff);
    }
    /// Sets the acknowledge request bit and clears the reserved bits of byte 8.
    pub fn set_ack_req(&mut self, on: bool) {
        self.bm()[f::ACK] = if on { 0x80 } else { 0 };
    }
    /// Sets the PSN.
    pub fn set_psn(&mut self, psn: Psn) {
        set_u24(self.bm(), f::PSN, psn.value());
    }
}

/// The fields of a BTH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BthRepr {
    /// Opcode.
    pub opcode: Opcode,
    /// Solicited event.
    pub solicited: bool,
    /// Migration request.
    pub mig_req: bool,
    /// Pad count (0..=3).
    pub pad_count: u8,
    /// Partition key (0xFFFF is the default full-membership key).
    pub pkey: u16,
    /// FECN.
    pub fecn: bool,
    /// BECN.
    pub becn: bool,
    /// Destination QP (24 bits).
    pub dest_qp: u32,
    /// Acknowledge request.
    pub ack_req: bool,
    /// Packet sequence number.
    pub psn: Psn,
}

impl BthRepr {
    /// Reads a BTH. Fails on a transport version other than 0. The opcode
    /// is not checked here: see [`super::Packet`] for that.
    pub fn parse<T: AsRef<[u8]>>(bth: &Bth<T>) -> Result<Self> {
        bth.check_len()?;
        if bth.tver() != 0 {
            return Err(Error::BadTransportVersion(bth.tver()));
        }
        Ok(BthRepr {
            opcode: bth.opcode(),
            solicited: bth.solicited(),
            mig_req: bth.mig_req(),
            pad_count: bth.pad_count(),
            pkey: bth.pkey(),
            fecn: bth.fecn(),
            becn: bth.becn(),
            dest_qp: bth.dest_qp(),
            ack_req: bth.ack_req(),
            psn: bth.psn(),
        })
    }

    /// Bytes [`Self::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        BTH_LEN
    }

    /// Writes the header, reserved bits zero.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, bth: &mut Bth<T>) {
        bth.set_opcode(self.opcode);
        let flags = (u8::from(self.solicited) << 7)
            | (u8::from(self.mig_req) << 6)
            | ((self.pad_count & 3) << 4);
        bth.bm()[f::FLAGS] = flags;
        bth.set_pkey(self.pkey);
        bth.bm()[f::FB] = (u8::from(self.fecn) << 7) | (u8::from(self.becn) << 6);
        bth.set_dest_qp(self.dest_qp);
        bth.set_ack_req(self.ack_req);
        bth.set_psn(self.psn);
    }
}

impl fmt::Display for BthRepr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "BTH {} qp={:#08x} psn={}",
            self.opcode,
            self.dest_qp,
            self.psn.value()
        )?;
        if self.ack_req {
            f.write_str(" A")?;
        }
        if self.solicited {
            f.write_str(" SE")?;
        }
        if self.pad_count != 0 {
            write!(f, " pad={}", self.pad_count)?;
        }
        if self.pkey != 0xffff {
            write!(f, " pkey={:#06x}", self.pkey)?;
        }
        if self.fecn {
            f.write_str(" FECN")?;
        }
        if self.becn {
            f.write_str(" BECN")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // RC SEND ONLY, SE=0 M=0 pad=2 TVer=0, P_Key 0xFFFF, FECN, dest QP 0x000011,
    // AckReq, PSN 0xABCDEF. Laid out by hand from IBTA figure 9-1 (BTH).
    const BYTES: [u8; 12] = [
        0x04, 0x20, 0xff, 0xff, 0x80, 0x00, 0x00, 0x11, 0x80, 0xab, 0xcd, 0xef,
    ];

    fn repr() -> BthRepr {
        BthRepr {
            opcode: Opcode::RC_SEND_ONLY,
            solicited: false,
            mig_req: false,
            pad_count: 2,
            pkey: 0xffff,
            fecn: true,
            becn: false,
            dest_qp: 0x11,
            ack_req: true,
            psn: Psn::new(0xabcdef),
        }
    }

    #[test]
    fn parse() {
        let v = Bth::new_checked(&BYTES[..]).unwrap();
        assert_eq!(v.opcode(), Opcode::RC_SEND_ONLY);
        assert_eq!(v.pad_count(), 2);
        assert!(v.fecn() && !v.becn());
        assert_eq!(v.dest_qp(), 0x11);
        assert_eq!(v.psn().value(), 0xabcdef);
        assert_eq!(BthRepr::parse(&v).unwrap(), repr());
    }

    #[test]
    fn emit() {
        let mut buf = [0xffu8; 12];
        repr().emit(&mut Bth::new_unchecked(&mut buf[..]));
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn setters_touch_only_their_bits() {
        let mut buf = [0u8; 12];
        let mut v = Bth::new_unchecked(&mut buf[..]);
        v.set_solicited(true);
        v.set_mig_req(true);
        v.set_tver(0xf);
        v.set_pad_count(3);
        assert_eq!(buf[1], 0xff);
        let mut v = Bth::new_unchecked(&mut buf[..]);
        v.set_pad_count(1);
        assert_eq!(buf[1], 0xdf);
        let mut v = Bth::new_unchecked(&mut buf[..]);
        v.set_dest_qp(0xffff_ffff);
        assert_eq!(&buf[4..8], &[0, 0xff, 0xff, 0xff]);
    }

    #[test]
    fn truncated_and_bad_version() {
        assert_eq!(
            Bth::new_checked(&BYTES[..11]).unwrap_err(),
            Error::Truncated {
                header: Header::Bth,
                need: 12,
                have: 11
            }
        );
        let mut b = BYTES;
        b[1] |= 0x01;
        assert_eq!(
            BthRepr::parse(&Bth::new_unchecked(&b[..])).unwrap_err(),
            Error::BadTransportVersion(1)
        );
    }
}
