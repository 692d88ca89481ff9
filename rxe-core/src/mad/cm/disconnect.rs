//! Connection release: DREQ and DREP (IBTA 12.6.10–12.6.11, tables 112
//! and 113).

use super::{AttributeId, Body};
use crate::mad::{FixedBytes, Reader, Writer};
use core::fmt;

/// The DisconnectRequest (DREQ, attribute 0x0015, table 112): either side
/// asks to tear the connection down.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Dreq {
    /// Local Communication ID.
    pub local_comm_id: u32,
    /// Remote Communication ID.
    pub remote_comm_id: u32,
    /// Remote QPN/EECN (24 bits): the receiver's QP, as a check.
    pub remote_qpn_eecn: u32,
    /// Private Data (220 bytes).
    pub private_data: FixedBytes<220>,
}

impl Body for Dreq {
    const ATTR: AttributeId = AttributeId::DREQ;
    fn read(r: &Reader<'_>) -> Self {
        Dreq {
            local_comm_id: r.u32(0),
            remote_comm_id: r.u32(4),
            remote_qpn_eecn: r.u24(8),
            private_data: FixedBytes(r.bytes(12)),
        }
    }
    fn write(&self, w: &mut Writer<'_>) {
        w.u32(0, self.local_comm_id);
        w.u32(4, self.remote_comm_id);
        w.u24(8, self.remote_qpn_eecn);
        w.bytes(12, &self.private_data[..]);
    }
}

impl fmt::Display for Dreq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "local_comm_id={:#010x} remote_comm_id={:#010x} remote_qpn_eecn={:#08x} private_data={}",
            self.local_comm_id, self.remote_comm_id, self.remote_qpn_eecn, self.private_data
        )
    }
}

/// The DisconnectReply (DREP, attribute 0x0016, table 113).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Drep {
    /// Local Communication ID.
    pub local_comm_id: u32,
    /// Remote Communication ID.
    pub remote_comm_id: u32,
    /// Private Data (224 bytes).
    pub private_data: FixedBytes<224>,
}

impl Body for Drep {
    const ATTR: AttributeId = AttributeId::DREP;
    fn read(r: &Reader<'_>) -> Self {
        Drep {
            local_comm_id: r.u32(0),
            remote_comm_id: r.u32(4),
            private_data: FixedBytes(r.bytes(8)),
        }
    }
    fn write(&self, w: &mut Writer<'_>) {
        w.u32(0, self.local_comm_id);
        w.u32(4, self.remote_comm_id);
        w.bytes(8, &self.private_data[..]);
    }
}

impl fmt::Display for Drep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "local_comm_id={:#010x} remote_comm_id={:#010x} private_data={}",
            self.local_comm_id, self.remote_comm_id, self.private_data
        )
    }
}
