//! How RoCE carries a MAD: the payload of a UD SEND ONLY to the GSI QP.
//!
//! ```text
//! +-----+------------------------------+-------------------+------+
//! | BTH | DETH                         | MAD (256 bytes)   | ICRC |
//! +-----+------------------------------+-------------------+------+
//!   12    Q_Key 0x80010000, src QP 1      no pad                4
//! ```
//! The BTH goes to QP 1 (the GSI QP) with P_Key 0xFFFF; the DETH carries
//! the GSI's well-known Q_Key and the sender's QP, which is 1 when the
//! sender's GSI QP sent it (as Linux's CM always does: answers go back to
//! QP 1 too). Each GSI QP numbers its sends with its own PSN sequence, and
//! Linux's rxe sets the AckReq bit, which UD ignores. A RoCE v2 MAD packet
//! is thus 280 bytes of UDP payload.

use super::{CmMad, Error, Result, MAD_LEN};
use crate::psn::Psn;
use crate::wire::{BthRepr, DethRepr, Opcode, Packet, PacketRepr};
use core::fmt;

/// The GSI QP's number.
pub const GSI_QPN: u32 = 1;
/// The GSI QP's well-known Q_Key.
pub const GSI_QKEY: u32 = 0x8001_0000;

/// Whether a RoCE transport packet (from its BTH on) is for the GSI: a UD
/// SEND ONLY to QP 1 with more than its BTH. Reads two fixed offsets and
/// checks nothing else (the agent that takes the MAD parses it fully); the
/// one test the transport, the device and the CM router share.
#[inline]
pub fn is_gsi_packet(packet: &[u8]) -> bool {
    const UD_SEND_ONLY: u8 = 0x64;
    packet.len() > 8 && packet[0] == UD_SEND_ONLY && packet[5..8] == GSI_QPN.to_be_bytes()[1..]
}

/// A MAD in a UD SEND to the GSI QP, with what the packet says about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GsiMad<'a> {
    /// The packet's PSN.
    pub psn: Psn,
    /// The packet's partition key.
    pub pkey: u16,
    /// The BTH's AckReq bit.
    pub ack_req: bool,
    /// The sending QP (DETH source QP).
    pub src_qp: u32,
    /// The MAD.
    pub mad: &'a [u8; MAD_LEN],
}

impl<'a> GsiMad<'a> {
    /// A MAD as Linux's GSI QP sends one: from QP 1, P_Key 0xFFFF, AckReq set.
    pub fn new(mad: &'a [u8; MAD_LEN], psn: Psn) -> Self {
        GsiMad {
            psn,
            pkey: 0xffff,
            ack_req: true,
            src_qp: GSI_QPN,
            mad,
        }
    }

    /// The MAD in a parsed packet. Fails unless it is a UD SEND ONLY to
    /// QP 1 with the GSI Q_Key and exactly 256 bytes of payload.
    pub fn from_packet(p: &PacketRepr<'a>) -> Result<Self> {
        if p.bth.opcode != Opcode::UD_SEND_ONLY {
            return Err(Error::NotUdSend(p.bth.opcode));
        }
        if p.bth.dest_qp != GSI_QPN {
            return Err(Error::NotGsi(p.bth.dest_qp));
        }
        let deth = p.deth.ok_or(Error::NotUdSend(p.bth.opcode))?;
        if deth.qkey != GSI_QKEY {
            return Err(Error::WrongQkey(deth.qkey));
        }
        let mad = p
            .payload
            .try_into()
            .map_err(|_| Error::WrongLength(p.payload.len()))?;
        Ok(GsiMad {
            psn: p.bth.psn,
            pkey: p.bth.pkey,
            ack_req: p.bth.ack_req,
            src_qp: deth.src_qp,
            mad,
        })
    }

    /// The MAD in a transport packet (BTH to ICRC, the UDP payload).
    pub fn parse(transport_packet: &'a [u8]) -> Result<Self> {
        let p = Packet::new_checked(transport_packet)?;
        Self::from_packet(&PacketRepr::parse(&p)?)
    }

    /// The MAD as a CM message.
    pub fn cm(&self) -> Result<CmMad> {
        CmMad::parse(self.mad)
    }

    /// The packet that carries this MAD to `dest_qp` (normally
    /// [`GSI_QPN`]); emit it with [`PacketRepr::emit`], or inside a frame
    /// with [`crate::wire::FrameRepr::emit`], which also sets the ICRC.
    pub fn to_packet(&self, dest_qp: u32) -> PacketRepr<'a> {
        let mut p = PacketRepr::new(BthRepr {
            opcode: Opcode::UD_SEND_ONLY,
            solicited: false,
            mig_req: false,
            pad_count: 0,
            pkey: self.pkey,
            fecn: false,
            becn: false,
            dest_qp,
            ack_req: self.ack_req,
            psn: self.psn,
        });
        p.deth = Some(DethRepr {
            qkey: GSI_QKEY,
            src_qp: self.src_qp,
        });
        p.payload = &self.mad[..];
        p
    }
}

impl fmt::Display for GsiMad<'_> {
    /// The CM message's one-line description, or the MAD header if it is
    /// not a CM message.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.cm() {
            Ok(m) => f.write_str(&m.describe()),
            Err(e) => {
                let v = super::Mad::new_unchecked(&self.mad[..]);
                match super::MadHeader::parse(&v) {
                    Ok(h) => write!(f, "{h} ({e})"),
                    Err(_) => write!(f, "MAD ({e})"),
                }
            }
        }
    }
}
