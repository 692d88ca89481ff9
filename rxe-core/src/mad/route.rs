//! Which CM agent a MAD is for, when several share one address.
//!
//! Several processes can use one soft-device address (`rxe_net::share`):
//! each owns the QP numbers with its 8-bit prefix on top, and a packet goes
//! to the owner of its destination QP. QP 1 belongs to all of them, so a MAD
//! is routed on what it says instead:
//!
//! * a **REQ** or **SIDR_REQ** starts something new: it goes to whoever
//!   listens on its service ID;
//! * every other CM message answers or continues something a local agent
//!   started or accepted, and names that agent's own ID: the remote
//!   communication ID of a REP, RTU, MRA, REJ, DREQ, DREP, LAP or APR (which
//!   is the receiver's local ID), or the request ID a SIDR_REP echoes. Each
//!   agent hands out IDs with its prefix in the top 8 bits, so the top byte
//!   of that ID names the agent.
//!
//! This reads only the fixed offsets it needs, without checking the rest of
//! the packet; the agent that gets the MAD parses and checks it fully.

use super::cm::AttributeId;
use super::{MgmtClass, MAD_HEADER_LEN, MAD_LEN};

/// Where a MAD arriving on QP 1 belongs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmRoute {
    /// To the agent whose IDs carry this prefix in their top byte.
    Agent(u8),
    /// To the agent listening on this service ID.
    Service(u64),
    /// To any one agent (not a CM message, or one that names no ID): it
    /// answers or drops it.
    Any,
}

/// Offset of the MAD in a UD SEND ONLY to QP 1: after the BTH and the DETH.
const MAD_AT: usize = 12 + 8;

/// The route of a RoCE transport packet (BTH to ICRC) for QP 1, or `None`
/// if it is not one (not a UD SEND ONLY to QP 1, or too short for a MAD).
pub fn cm_route(packet: &[u8]) -> Option<CmRoute> {
    if packet.len() < MAD_AT + MAD_LEN || !super::is_gsi_packet(packet) {
        return None;
    }
    let mad = &packet[MAD_AT..MAD_AT + MAD_LEN];
    if mad[1] != MgmtClass::CM.0 {
        return Some(CmRoute::Any);
    }
    let attr = AttributeId(u16::from_be_bytes([mad[16], mad[17]]));
    let data = &mad[MAD_HEADER_LEN..];
    let be32 = |at: usize| u32::from_be_bytes([data[at], data[at + 1], data[at + 2], data[at + 3]]);
    let by_id = |id: u32| {
        if id == 0 {
            CmRoute::Any
        } else {
            CmRoute::Agent((id >> 24) as u8)
        }
    };
    Some(match attr {
        AttributeId::REQ | AttributeId::SIDR_REQ => {
            let mut sid = [0u8; 8];
            sid.copy_from_slice(&data[8..16]);
            CmRoute::Service(u64::from_be_bytes(sid))
        }
        AttributeId::SIDR_REP => by_id(be32(0)),
        AttributeId::REP
        | AttributeId::RTU
        | AttributeId::MRA
        | AttributeId::REJ
        | AttributeId::DREQ
        | AttributeId::DREP
        | AttributeId::LAP
        | AttributeId::APR => by_id(be32(4)),
        _ => CmRoute::Any,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mad::GsiMad;
    use crate::psn::Psn;

    /// A CM MAD of attribute `attr` with `words` (offset in the data, big-endian
    /// value) set, in its UD packet to QP 1.
    fn packet(class: u8, attr: AttributeId, words: &[(usize, u64, usize)]) -> Vec<u8> {
        let mut mad = [0u8; MAD_LEN];
        mad[0] = 1;
        mad[1] = class;
        mad[2] = 2;
        mad[16..18].copy_from_slice(&attr.0.to_be_bytes());
        for &(at, v, len) in words {
            let b = v.to_be_bytes();
            mad[MAD_HEADER_LEN + at..MAD_HEADER_LEN + at + len].copy_from_slice(&b[8 - len..]);
        }
        let g = GsiMad::new(&mad, Psn::new(7));
        let repr = g.to_packet(1);
        let mut out = vec![0u8; repr.buffer_len()];
        repr.emit(&mut out[..]).expect("emit");
        out
    }

    fn cm(attr: AttributeId, words: &[(usize, u64, usize)]) -> Vec<u8> {
        packet(MgmtClass::CM.0, attr, words)
    }

    #[test]
    fn requests_go_by_service_and_answers_by_the_receivers_id() {
        let req = cm(
            AttributeId::REQ,
            &[(0, 0x0a11_2233, 4), (8, 0x0106_1c06, 8)],
        );
        assert_eq!(cm_route(&req), Some(CmRoute::Service(0x0106_1c06)));
        let sidr = cm(
            AttributeId::SIDR_REQ,
            &[(0, 0x0b00_0001, 4), (8, 0x0111_0001, 8)],
        );
        assert_eq!(cm_route(&sidr), Some(CmRoute::Service(0x0111_0001)));
        for attr in [
            AttributeId::REP,
            AttributeId::RTU,
            AttributeId::MRA,
            AttributeId::REJ,
            AttributeId::DREQ,
            AttributeId::DREP,
            AttributeId::LAP,
            AttributeId::APR,
        ] {
            let m = cm(attr, &[(0, 0x0c00_0001, 4), (4, 0x5511_2233, 4)]);
            assert_eq!(cm_route(&m), Some(CmRoute::Agent(0x55)), "{attr:?}");
            let anonymous = cm(attr, &[(0, 0x0c00_0001, 4)]);
            assert_eq!(cm_route(&anonymous), Some(CmRoute::Any), "{attr:?}");
        }
        let sidr_rep = cm(AttributeId::SIDR_REP, &[(0, 0x0b00_0001, 4)]);
        assert_eq!(cm_route(&sidr_rep), Some(CmRoute::Agent(0x0b)));
        assert_eq!(
            cm_route(&cm(AttributeId::CLASS_PORT_INFO, &[])),
            Some(CmRoute::Any)
        );
    }

    #[test]
    fn other_packets_are_not_routed_and_nothing_panics() {
        let mut p = cm(AttributeId::REQ, &[]);
        p[7] = 2; // to QP 2
        assert_eq!(cm_route(&p), None);
        assert_eq!(cm_route(&p[..100]), None);
        assert_eq!(cm_route(&[]), None);
        // Subnet administration, not the CM.
        assert_eq!(
            cm_route(&packet(0x03, AttributeId::REQ, &[])),
            Some(CmRoute::Any)
        );
        for n in 0..300 {
            let _ = cm_route(&vec![0x64; n]);
        }
    }
}
