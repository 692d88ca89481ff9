//! A whole InfiniBand transport packet as RoCE v2 carries it in a UDP
//! datagram: BTH, the extension headers its opcode calls for, payload, pad,
//! and the 4-byte ICRC.
//!
//! ```text
//! +-----+----------------------+-------------------+-----+------+
//! | BTH | extension headers... | payload           | pad | ICRC |
//! +-----+----------------------+-------------------+-----+------+
//!   12    from the opcode table   (payload+pad) % 4 == 0    4
//! ```

use super::aeth::{Aeth, AethRepr};
use super::atomic::{AtomicAckEth, AtomicAckEthRepr, AtomicEth, AtomicEthRepr};
use super::bth::{Bth, BthRepr, BTH_LEN};
use super::deth::{Deth, DethRepr, Rdeth, RdethRepr};
use super::feth::{Feth, FethRepr};
use super::icrc::ICRC_LEN;
use super::imm::{Ieth, ImmDt};
use super::opcode::{ExtHeaders, OpcodeInfo};
use super::reth::{Reth, RethRepr};
use super::{Error, Header, Result};
use core::fmt;
use core::ops::Range;

/// A checked, zero-copy view of a transport packet (the UDP payload).
///
/// After [`Packet::new_checked`] succeeds, the opcode is known, every header
/// it calls for is present, pad and payload lengths are consistent, and no
/// accessor panics.
#[derive(Debug, Clone, Copy)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
    info: &'static OpcodeInfo,
    payload_len: usize,
}

fn header_of(h: ExtHeaders) -> Header {
    match h {
        ExtHeaders::RDETH => Header::Rdeth,
        ExtHeaders::DETH => Header::Deth,
        ExtHeaders::FETH => Header::Feth,
        ExtHeaders::RETH => Header::Reth,
        ExtHeaders::ATOMIC_ETH => Header::AtomicEth,
        ExtHeaders::AETH => Header::Aeth,
        ExtHeaders::ATOMIC_ACK_ETH => Header::AtomicAckEth,
        ExtHeaders::IMMDT => Header::ImmDt,
        ExtHeaders::IETH => Header::Ieth,
        _ => Header::CnpPad,
    }
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Checks a buffer holding one transport packet (BTH through ICRC).
    pub fn new_checked(buffer: T) -> Result<Self> {
        let b = buffer.as_ref();
        let bth = Bth::new_checked(b)?;
        if bth.tver() != 0 {
            return Err(Error::BadTransportVersion(bth.tver()));
        }
        let opcode = bth.opcode();
        let info = opcode.info().ok_or(Error::UnknownOpcode(opcode.0))?;
        // Each extension header in turn, so the error names the one cut short.
        let mut off = BTH_LEN;
        for (h, n) in ExtHeaders::WIRE_ORDER {
            if info.headers.contains(h) {
                if b.len() < off + n {
                    return Err(Error::Truncated {
                        header: header_of(h),
                        need: n,
                        have: b.len() - off,
                    });
                }
                off += n;
            }
        }
        if b.len() < off + ICRC_LEN {
            return Err(Error::Truncated {
                header: Header::Icrc,
                need: ICRC_LEN,
                have: b.len() - off,
            });
        }
        let available = b.len() - off - ICRC_LEN;
        let pad = bth.pad_count();
        if usize::from(pad) > available {
            return Err(Error::PadTooLarge { pad, available });
        }
        let payload_len = available - usize::from(pad);
        if !info.payload && available != 0 {
            return Err(Error::UnexpectedPayload {
                opcode,
                len: available,
            });
        }
        if !available.is_multiple_of(4) {
            return Err(Error::Misaligned {
                payload: payload_len,
                pad,
            });
        }
        Ok(Packet {
            buffer,
            info,
            payload_len,
        })
    }

    /// The opcode table row.
    pub fn info(&self) -> &'static OpcodeInfo {
        self.info
    }

    /// The whole packet, ICRC included.
    pub fn as_bytes(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// The BTH.
    #[inline]
    pub fn bth(&self) -> Bth<&[u8]> {
        Bth::new_unchecked(&self.buffer.as_ref()[..BTH_LEN])
    }

    fn ext(&self, h: ExtHeaders) -> Option<&[u8]> {
        let off = BTH_LEN + self.info.headers.offset_of(h)?;
        let len = ExtHeaders::WIRE_ORDER
            .iter()
            .find(|(x, _)| *x == h)
            .map(|(_, n)| *n)?;
        Some(&self.buffer.as_ref()[off..off + len])
    }

    /// The RDETH, if the opcode has one.
    pub fn rdeth(&self) -> Option<Rdeth<&[u8]>> {
        self.ext(ExtHeaders::RDETH).map(Rdeth::new_unchecked)
    }
    /// The DETH, if the opcode has one.
    pub fn deth(&self) -> Option<Deth<&[u8]>> {
        self.ext(ExtHeaders::DETH).map(Deth::new_unchecked)
    }
    /// The FETH, if the opcode has one.
    pub fn feth(&self) -> Option<Feth<&[u8]>> {
        self.ext(ExtHeaders::FETH).map(Feth::new_unchecked)
    }
    /// The RETH, if the opcode has one.
    pub fn reth(&self) -> Option<Reth<&[u8]>> {
        self.ext(ExtHeaders::RETH).map(Reth::new_unchecked)
    }
    /// The AtomicETH, if the opcode has one.
    pub fn atomic_eth(&self) -> Option<AtomicEth<&[u8]>> {
        self.ext(ExtHeaders::ATOMIC_ETH)
            .map(AtomicEth::new_unchecked)
    }
    /// The AETH, if the opcode has one.
    pub fn aeth(&self) -> Option<Aeth<&[u8]>> {
        self.ext(ExtHeaders::AETH).map(Aeth::new_unchecked)
    }
    /// The AtomicAckETH, if the opcode has one.
    pub fn atomic_ack_eth(&self) -> Option<AtomicAckEth<&[u8]>> {
        self.ext(ExtHeaders::ATOMIC_ACK_ETH)
            .map(AtomicAckEth::new_unchecked)
    }
    /// Immediate data, if the opcode has it.
    pub fn immdt(&self) -> Option<u32> {
        self.ext(ExtHeaders::IMMDT)
            .map(|b| ImmDt::new_unchecked(b).value())
    }
    /// The R_Key to invalidate, if the opcode has an IETH.
    pub fn ieth(&self) -> Option<u32> {
        self.ext(ExtHeaders::IETH)
            .map(|b| Ieth::new_unchecked(b).rkey())
    }

    /// Offset of the payload from the start of the packet.
    pub fn payload_offset(&self) -> usize {
        self.info.header_len()
    }

    /// The payload, without pad.
    pub fn payload(&self) -> &[u8] {
        let off = self.payload_offset();
        &self.buffer.as_ref()[off..off + self.payload_len]
    }

    /// The pad bytes.
    pub fn pad(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        &b[self.payload_offset() + self.payload_len..b.len() - ICRC_LEN]
    }

    /// The ICRC as carried (little-endian on the wire).
    pub fn icrc(&self) -> u32 {
        let b = self.buffer.as_ref();
        let mut x = [0u8; 4];
        x.copy_from_slice(&b[b.len() - ICRC_LEN..]);
        u32::from_le_bytes(x)
    }
}

impl<'a> Packet<&'a [u8]> {
    /// The payload with the lifetime of the underlying buffer.
    pub fn payload_ref(&self) -> &'a [u8] {
        let off = self.payload_offset();
        &self.buffer[off..off + self.payload_len]
    }
}

/// A transport packet's fields, with the payload borrowed.
///
/// The extension headers present must be exactly those the opcode calls for;
/// [`PacketRepr::emit`] checks this. The pad count is derived from the
/// payload length on emit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketRepr<'a> {
    /// The BTH (its `pad_count` is recomputed by `emit`).
    pub bth: BthRepr,
    /// RDETH (RD only).
    pub rdeth: Option<RdethRepr>,
    /// DETH (UD and RD requests).
    pub deth: Option<DethRepr>,
    /// FETH (FLUSH).
    pub feth: Option<FethRepr>,
    /// RETH (RDMA WRITE first/only, READ request, FLUSH, ATOMIC WRITE).
    pub reth: Option<RethRepr>,
    /// AtomicETH (compare-and-swap, fetch-and-add).
    pub atomic_eth: Option<AtomicEthRepr>,
    /// AETH (acknowledge, atomic acknowledge, READ response first/last/only).
    pub aeth: Option<AethRepr>,
    /// AtomicAckETH (atomic acknowledge).
    pub atomic_ack_eth: Option<AtomicAckEthRepr>,
    /// Immediate data.
    pub immdt: Option<u32>,
    /// R_Key to invalidate.
    pub ieth: Option<u32>,
    /// Payload bytes (without pad).
    pub payload: &'a [u8],
}

impl<'a> PacketRepr<'a> {
    /// A repr with only a BTH and no payload; fill in the rest.
    pub fn new(bth: BthRepr) -> Self {
        PacketRepr {
            bth,
            rdeth: None,
            deth: None,
            feth: None,
            reth: None,
            atomic_eth: None,
            aeth: None,
            atomic_ack_eth: None,
            immdt: None,
            ieth: None,
            payload: &[],
        }
    }

    /// Reads every header of a checked packet. The payload borrows from the
    /// packet's buffer, not from the view.
    pub fn parse(p: &Packet<&'a [u8]>) -> Result<Self> {
        let mut bth = BthRepr::parse(&p.bth())?;
        bth.pad_count = p.bth().pad_count();
        Ok(PacketRepr {
            bth,
            rdeth: p.rdeth().map(|v| RdethRepr::parse(&v)).transpose()?,
            deth: p.deth().map(|v| DethRepr::parse(&v)).transpose()?,
            feth: p.feth().map(|v| FethRepr::parse(&v)).transpose()?,
            reth: p.reth().map(|v| RethRepr::parse(&v)).transpose()?,
            atomic_eth: p
                .atomic_eth()
                .map(|v| AtomicEthRepr::parse(&v))
                .transpose()?,
            aeth: p.aeth().map(|v| AethRepr::parse(&v)).transpose()?,
            atomic_ack_eth: p
                .atomic_ack_eth()
                .map(|v| AtomicAckEthRepr::parse(&v))
                .transpose()?,
            immdt: p.immdt(),
            ieth: p.ieth(),
            payload: p.payload_ref(),
        })
    }

    /// The pad count that makes payload plus pad a multiple of 4.
    pub fn pad_count(&self) -> u8 {
        pad_for(self.payload.len())
    }

    /// The headers this repr carries.
    pub fn headers(&self) -> ExtHeaders {
        let mut h = ExtHeaders::empty();
        h.set(ExtHeaders::RDETH, self.rdeth.is_some());
        h.set(ExtHeaders::DETH, self.deth.is_some());
        h.set(ExtHeaders::FETH, self.feth.is_some());
        h.set(ExtHeaders::RETH, self.reth.is_some());
        h.set(ExtHeaders::ATOMIC_ETH, self.atomic_eth.is_some());
        h.set(ExtHeaders::AETH, self.aeth.is_some());
        h.set(ExtHeaders::ATOMIC_ACK_ETH, self.atomic_ack_eth.is_some());
        h.set(ExtHeaders::IMMDT, self.immdt.is_some());
        h.set(ExtHeaders::IETH, self.ieth.is_some());
        h
    }

    /// Checks the repr against the opcode table.
    pub fn check(&self) -> Result<&'static OpcodeInfo> {
        self.check_for(self.payload.len())
    }

    /// [`Self::check`] for a payload of `payload_len` bytes.
    fn check_for(&self, payload_len: usize) -> Result<&'static OpcodeInfo> {
        let op = self.bth.opcode;
        let info = op.info().ok_or(Error::UnknownOpcode(op.0))?;
        let want = info.headers.difference(ExtHeaders::CNP_PAD);
        let have = self.headers();
        if want != have {
            let wrong = want.symmetric_difference(have);
            let first = ExtHeaders::WIRE_ORDER
                .iter()
                .find(|(h, _)| wrong.contains(*h));
            return Err(Error::HeadersDisagree {
                opcode: op,
                header: header_of(first.map(|(h, _)| *h).unwrap_or(ExtHeaders::CNP_PAD)),
                present: first.is_some_and(|(h, _)| have.contains(*h)),
            });
        }
        if !info.payload && payload_len != 0 {
            return Err(Error::UnexpectedPayload {
                opcode: op,
                len: payload_len,
            });
        }
        Ok(info)
    }

    /// Bytes [`Self::emit`] writes, ICRC included. Meaningful only for a
    /// repr that passes [`Self::check`].
    pub fn buffer_len(&self) -> usize {
        self.buffer_len_for(self.payload.len())
    }

    /// Bytes the packet takes with a payload of `payload_len` bytes.
    pub fn buffer_len_for(&self, payload_len: usize) -> usize {
        let hdr = match self.bth.opcode.info() {
            Some(i) => i.header_len(),
            None => BTH_LEN + self.headers().byte_len(),
        };
        hdr + payload_len + usize::from(pad_for(payload_len)) + ICRC_LEN
    }

    /// Writes the packet into `buf` with zero pad bytes and a zero ICRC
    /// (the ICRC covers the IP and UDP headers too; see [`super::icrc`]).
    /// Returns the number of bytes written.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let (payload, len) = self.emit_around(buf, self.payload.len())?;
        buf[payload].copy_from_slice(self.payload);
        Ok(len)
    }

    /// Writes the packet for a payload of `payload_len` bytes that the
    /// caller puts in itself, say gathered straight from registered memory
    /// (`self.payload` is not used): the headers, zero pad bytes and a zero
    /// ICRC, but not the payload. Returns where the payload goes, and the
    /// number of bytes of the packet. The caller must write the whole
    /// payload range: `buf` keeps whatever it held there.
    pub fn emit_around(&self, buf: &mut [u8], payload_len: usize) -> Result<(Range<usize>, usize)> {
        let info = self.check_for(payload_len)?;
        let pad = pad_for(payload_len);
        let len = info.header_len() + payload_len + usize::from(pad) + ICRC_LEN;
        if buf.len() < len {
            return Err(Error::BufferTooSmall {
                header: Header::Bth,
                need: len,
                have: buf.len(),
            });
        }
        let buf = &mut buf[..len];
        // Pad and ICRC zeroed by stores of known length: a memset call for
        // at most 7 bytes cost more.
        let end = len - ICRC_LEN;
        buf[end..].copy_from_slice(&[0; ICRC_LEN]);
        match pad {
            1 => buf[end - 1] = 0,
            2 => buf[end - 2..end].copy_from_slice(&[0; 2]),
            3 => buf[end - 3..end].copy_from_slice(&[0; 3]),
            _ => {}
        }
        let mut bth = self.bth;
        bth.pad_count = pad;
        bth.emit(&mut Bth::new_unchecked(&mut buf[..BTH_LEN]));
        let start = emit_headers(self, info.headers, buf);
        Ok((start..start + payload_len, len))
    }
}

/// Writes the extension headers `present` of `repr` after the BTH in
/// `buf`; returns where the payload starts.
fn emit_headers(repr: &PacketRepr<'_>, present: ExtHeaders, buf: &mut [u8]) -> usize {
    let mut off = BTH_LEN;
    if present.is_empty() {
        return off;
    }
    // The headers present, in wire order, one test each: a loop over
    // the table cost more than writing them.
    let mut slot = |h: ExtHeaders, n: usize| {
        present.contains(h).then(|| {
            off += n;
            off - n..off
        })
    };
    if let Some(r) = slot(ExtHeaders::RDETH, 4) {
        let v = repr.rdeth.unwrap_or_default();
        v.emit(&mut Rdeth::new_unchecked(&mut buf[r]));
    }
    if let Some(r) = slot(ExtHeaders::DETH, 8) {
        let v = repr.deth.unwrap_or_default();
        v.emit(&mut Deth::new_unchecked(&mut buf[r]));
    }
    if let Some(r) = slot(ExtHeaders::FETH, 4) {
        let v = repr.feth.unwrap_or_default();
        v.emit(&mut Feth::new_unchecked(&mut buf[r]));
    }
    if let Some(r) = slot(ExtHeaders::RETH, 16) {
        let v = repr.reth.unwrap_or_default();
        v.emit(&mut Reth::new_unchecked(&mut buf[r]));
    }
    if let Some(r) = slot(ExtHeaders::ATOMIC_ETH, 28) {
        let v = repr.atomic_eth.unwrap_or_default();
        v.emit(&mut AtomicEth::new_unchecked(&mut buf[r]));
    }
    if let Some(r) = slot(ExtHeaders::AETH, 4) {
        if let Some(v) = repr.aeth {
            v.emit(&mut Aeth::new_unchecked(&mut buf[r]));
        }
    }
    if let Some(r) = slot(ExtHeaders::ATOMIC_ACK_ETH, 8) {
        let v = repr.atomic_ack_eth.unwrap_or_default();
        v.emit(&mut AtomicAckEth::new_unchecked(&mut buf[r]));
    }
    if let Some(r) = slot(ExtHeaders::IMMDT, 4) {
        ImmDt::new_unchecked(&mut buf[r]).set_value(repr.immdt.unwrap_or_default());
    }
    if let Some(r) = slot(ExtHeaders::IETH, 4) {
        Ieth::new_unchecked(&mut buf[r]).set_rkey(repr.ieth.unwrap_or_default());
    }
    if let Some(r) = slot(ExtHeaders::CNP_PAD, 16) {
        buf[r].fill(0);
    }
    off
}

/// The pad count that makes a payload of `len` bytes plus pad a multiple of 4.
fn pad_for(len: usize) -> u8 {
    ((4 - len % 4) % 4) as u8
}

impl fmt::Display for PacketRepr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.bth)?;
        if let Some(h) = &self.rdeth {
            write!(f, " {h}")?;
        }
        if let Some(h) = &self.deth {
            write!(f, " {h}")?;
        }
        if let Some(h) = &self.feth {
            write!(f, " {h}")?;
        }
        if let Some(h) = &self.reth {
            write!(f, " {h}")?;
        }
        if let Some(h) = &self.atomic_eth {
            write!(f, " {h}")?;
        }
        if let Some(h) = &self.aeth {
            write!(f, " {h}")?;
        }
        if let Some(h) = &self.atomic_ack_eth {
            write!(f, " {h}")?;
        }
        if let Some(i) = self.immdt {
            write!(f, " ImmDt={i:#010x}")?;
        }
        if let Some(k) = self.ieth {
            write!(f, " IETH rkey={k:#010x}")?;
        }
        write!(f, " len={}", self.payload.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::psn::Psn;
    use crate::wire::aeth::AethSyndrome;
    use crate::wire::Opcode;

    fn bth(op: Opcode) -> BthRepr {
        BthRepr {
            opcode: op,
            solicited: false,
            mig_req: false,
            pad_count: 0,
            pkey: 0xffff,
            fecn: false,
            becn: false,
            dest_qp: 0x12,
            ack_req: true,
            psn: Psn::new(7),
        }
    }

    #[test]
    fn emit_around_leaves_the_payload_to_the_caller() {
        // A WRITE FIRST (RETH) with 7 payload bytes: emit_around writes
        // headers, pad and ICRC around bytes it does not touch; with those
        // written, the packet is byte for byte what emit makes.
        let mut r = PacketRepr::new(bth(Opcode::RC_RDMA_WRITE_FIRST));
        r.reth = Some(RethRepr {
            va: 0x1000,
            rkey: 0x55,
            dma_len: 4096,
        });
        let data = b"payload";
        let mut around = [0xeeu8; 64];
        let (range, n) = r.emit_around(&mut around, data.len()).unwrap();
        assert_eq!((range.clone(), n), (28..35, 28 + 7 + 1 + 4));
        assert!(around[range.clone()].iter().all(|&b| b == 0xee));
        around[range].copy_from_slice(data);
        r.payload = data;
        let mut whole = [0u8; 64];
        assert_eq!(r.emit(&mut whole).unwrap(), n);
        assert_eq!(around[..n], whole[..n]);
        // A payload the opcode does not carry is refused, as by emit.
        let mut ack = PacketRepr::new(bth(Opcode::RC_ACKNOWLEDGE));
        ack.aeth = Some(AethRepr {
            syndrome: AethSyndrome::Ack { credits: 0 },
            msn: 1,
        });
        assert!(ack.emit_around(&mut around, 0).is_ok());
        assert!(matches!(
            ack.emit_around(&mut around, 1),
            Err(Error::UnexpectedPayload { len: 1, .. })
        ));
    }

    #[test]
    fn every_opcode_parses_back_as_emitted() {
        // Each header with values that differ from its neighbours', in a
        // buffer full of garbage: what comes back is exactly what went in.
        use crate::wire::feth::FethRepr;
        for info in crate::wire::opcode::ALL {
            let mut r = PacketRepr::new(bth(Opcode(info.code)));
            let h = info.headers;
            let has = |x| h.contains(x);
            r.rdeth = has(ExtHeaders::RDETH).then_some(RdethRepr {
                ee_context: 0x11_2233,
            });
            r.deth = has(ExtHeaders::DETH).then_some(DethRepr {
                qkey: 0x4455_6677,
                src_qp: 0x88_99aa,
            });
            r.feth = has(ExtHeaders::FETH).then_some(FethRepr {
                selectivity: 1,
                placement: 2,
            });
            r.reth = has(ExtHeaders::RETH).then_some(RethRepr {
                va: 0x0102_0304_0506_0708,
                rkey: 0x0a0b_0c0d,
                dma_len: 0x1e1f_2021,
            });
            r.atomic_eth = has(ExtHeaders::ATOMIC_ETH).then_some(AtomicEthRepr {
                va: 0x3132_3334_3536_3738,
                rkey: 0x3a3b_3c3d,
                swap_add: 0x4142_4344_4546_4748,
                compare: 0x5152_5354_5556_5758,
            });
            r.aeth = has(ExtHeaders::AETH).then_some(AethRepr {
                syndrome: AethSyndrome::Ack { credits: 5 },
                msn: 0x61_6263,
            });
            r.atomic_ack_eth = has(ExtHeaders::ATOMIC_ACK_ETH).then_some(AtomicAckEthRepr {
                orig: 0x7172_7374_7576_7778,
            });
            r.immdt = has(ExtHeaders::IMMDT).then_some(0x8182_8384);
            r.ieth = has(ExtHeaders::IETH).then_some(0x9192_9394);
            if info.payload {
                r.payload = b"abcde";
            }
            let mut buf = [0xeeu8; 128];
            let n = r.emit(&mut buf).unwrap();
            assert_eq!(n, r.buffer_len(), "{}", info.name);
            let p = Packet::new_checked(&buf[..n]).unwrap();
            let mut want = r;
            want.bth.pad_count = r.pad_count();
            assert_eq!(PacketRepr::parse(&p).unwrap(), want, "{}", info.name);
            assert!(p.pad().iter().all(|&b| b == 0), "{}", info.name);
            assert_eq!(p.icrc(), 0, "{}", info.name);
            if has(ExtHeaders::CNP_PAD) {
                assert_eq!(&buf[12..28], &[0; 16], "{}", info.name);
            }
        }
    }

    #[test]
    fn send_only_with_pad() {
        let mut r = PacketRepr::new(bth(Opcode::RC_SEND_ONLY));
        r.payload = b"hello";
        let mut buf = [0xaau8; 64];
        let n = r.emit(&mut buf).unwrap();
        assert_eq!(n, 12 + 5 + 3 + 4);
        assert_eq!(buf[1] >> 4 & 3, 3, "pad count in the BTH");
        let p = Packet::new_checked(&buf[..n]).unwrap();
        assert_eq!(p.payload(), b"hello");
        assert_eq!(p.pad(), &[0, 0, 0]);
        let back = PacketRepr::parse(&p).unwrap();
        assert_eq!(back.bth.pad_count, 3);
        assert_eq!(back.payload, b"hello");
    }

    #[test]
    fn read_response_first_carries_aeth() {
        let mut r = PacketRepr::new(bth(Opcode::RC_RDMA_READ_RESPONSE_FIRST));
        r.aeth = Some(AethRepr {
            syndrome: AethSyndrome::Ack { credits: 31 },
            msn: 3,
        });
        r.payload = &[1, 2, 3, 4];
        let mut buf = [0u8; 64];
        let n = r.emit(&mut buf).unwrap();
        assert_eq!(&buf[12..16], &[0x1f, 0, 0, 3]);
        let p = Packet::new_checked(&buf[..n]).unwrap();
        assert_eq!(
            PacketRepr::parse(&p).unwrap(),
            PacketRepr {
                bth: bth(r.bth.opcode),
                ..r
            }
        );
    }

    #[test]
    fn repr_must_match_the_opcode() {
        let r = PacketRepr::new(bth(Opcode::RC_RDMA_WRITE_ONLY));
        assert_eq!(
            r.check().unwrap_err(),
            Error::HeadersDisagree {
                opcode: Opcode::RC_RDMA_WRITE_ONLY,
                header: Header::Reth,
                present: false
            }
        );
        let mut r = PacketRepr::new(bth(Opcode::RC_ACKNOWLEDGE));
        r.aeth = Some(AethRepr {
            syndrome: AethSyndrome::Ack { credits: 0 },
            msn: 0,
        });
        r.payload = b"x";
        assert!(matches!(r.check(), Err(Error::UnexpectedPayload { .. })));
    }

    #[test]
    fn malformed_packets_get_typed_errors() {
        let mut r = PacketRepr::new(bth(Opcode::RC_SEND_ONLY));
        r.payload = b"abcdefgh";
        let mut buf = [0u8; 64];
        let n = r.emit(&mut buf).unwrap();
        // Pad count 3 with 8 bytes after the headers: a 5-byte payload, fine.
        let mut b = buf;
        b[1] |= 0x30;
        assert_eq!(Packet::new_checked(&b[..n]).unwrap().payload(), b"abcde");
        // Seven bytes after the headers with pad 1: payload+pad is not a multiple of 4.
        let mut m = [0u8; 12 + 7 + 4];
        m[..12].copy_from_slice(&buf[..12]);
        m[1] = 0x10;
        assert_eq!(
            Packet::new_checked(&m[..]).unwrap_err(),
            Error::Misaligned { payload: 6, pad: 1 }
        );
        // Pad count larger than what is there.
        let mut r0 = PacketRepr::new(bth(Opcode::RC_SEND_ONLY));
        r0.payload = &[];
        let n0 = r0.emit(&mut b).unwrap();
        b[1] |= 0x20;
        assert_eq!(
            Packet::new_checked(&b[..n0]).unwrap_err(),
            Error::PadTooLarge {
                pad: 2,
                available: 0
            }
        );
        // Unknown opcode, truncated RETH, missing ICRC.
        b[0] = 0x15;
        assert_eq!(
            Packet::new_checked(&b[..n0]).unwrap_err(),
            Error::UnknownOpcode(0x15)
        );
        b[0] = Opcode::RC_RDMA_WRITE_ONLY.0;
        assert_eq!(
            Packet::new_checked(&b[..20]).unwrap_err(),
            Error::Truncated {
                header: Header::Reth,
                need: 16,
                have: 8
            }
        );
        assert_eq!(
            Packet::new_checked(&buf[..14]).unwrap_err(),
            Error::Truncated {
                header: Header::Icrc,
                need: 4,
                have: 2
            }
        );
        // Payload on an ACK.
        let mut a = [0u8; 24];
        a[0] = Opcode::RC_ACKNOWLEDGE.0;
        assert_eq!(
            Packet::new_checked(&a[..]).unwrap_err(),
            Error::UnexpectedPayload {
                opcode: Opcode::RC_ACKNOWLEDGE,
                len: 4
            }
        );
    }
}
