//! Alternate paths: LAP and APR (IBTA 12.6.12–12.6.13, tables 115 and
//! 116). Linux still parses them but RoCE has no path migration; they are
//! here so that every CM attribute decodes.

use super::path::CmPath;
use super::{AttributeId, Body};
use crate::mad::{FixedBytes, Reader, Writer};
use core::fmt;

/// The LoadAlternatePath (LAP, attribute 0x0019, table 115).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Lap {
    /// Local Communication ID.
    pub local_comm_id: u32,
    /// Remote Communication ID.
    pub remote_comm_id: u32,
    /// Remote QPN/EECN (24 bits, byte 12).
    pub remote_qpn_eecn: u32,
    /// Remote CM Response Timeout (5 bits, byte 15).
    pub remote_cm_response_timeout: u8,
    /// The alternate path to load (bytes 20–63).
    pub alternate_path: CmPath,
    /// Private Data (168 bytes).
    pub private_data: FixedBytes<168>,
}

impl Body for Lap {
    const ATTR: AttributeId = AttributeId::LAP;
    fn read(r: &Reader<'_>) -> Self {
        Lap {
            local_comm_id: r.u32(0),
            remote_comm_id: r.u32(4),
            remote_qpn_eecn: r.u24(12),
            remote_cm_response_timeout: r.bits(15, 0, 5),
            alternate_path: CmPath::read_lap(r),
            private_data: FixedBytes(r.bytes(64)),
        }
    }
    fn write(&self, w: &mut Writer<'_>) {
        w.u32(0, self.local_comm_id);
        w.u32(4, self.remote_comm_id);
        w.u24(12, self.remote_qpn_eecn);
        w.bits(15, 0, 5, self.remote_cm_response_timeout);
        self.alternate_path.write_lap(w);
        w.bytes(64, &self.private_data[..]);
    }
}

impl fmt::Display for Lap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "local_comm_id={:#010x} remote_comm_id={:#010x} remote_qpn_eecn={:#08x} \
             remote_cm_response_timeout={} alternate=[{}] private_data={}",
            self.local_comm_id,
            self.remote_comm_id,
            self.remote_qpn_eecn,
            self.remote_cm_response_timeout,
            self.alternate_path,
            self.private_data
        )
    }
}

/// AP Status of an APR (IBTA table 117; names as Linux's `ib_cm_apr_status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AprStatus(pub u8);

impl AprStatus {
    /// 0: the alternate path was loaded.
    pub const SUCCESS: AprStatus = AprStatus(0);
    /// 1: invalid communication ID.
    pub const INVALID_COMM_ID: AprStatus = AprStatus(1);
    /// 2: unsupported request.
    pub const UNSUPPORTED: AprStatus = AprStatus(2);
    /// 3: rejected.
    pub const REJECT: AprStatus = AprStatus(3);
    /// 4: redirect.
    pub const REDIRECT: AprStatus = AprStatus(4);
    /// 5: the path is the current one.
    pub const IS_CURRENT: AprStatus = AprStatus(5);
    /// 6: invalid QPN/EECN.
    pub const INVALID_QPN_EECN: AprStatus = AprStatus(6);
    /// 7: invalid LID.
    pub const INVALID_LID: AprStatus = AprStatus(7);
    /// 8: invalid GID.
    pub const INVALID_GID: AprStatus = AprStatus(8);
    /// 9: invalid flow label.
    pub const INVALID_FLOW_LABEL: AprStatus = AprStatus(9);
    /// 10: invalid traffic class.
    pub const INVALID_TCLASS: AprStatus = AprStatus(10);
    /// 11: invalid hop limit.
    pub const INVALID_HOP_LIMIT: AprStatus = AprStatus(11);
    /// 12: invalid packet rate.
    pub const INVALID_PACKET_RATE: AprStatus = AprStatus(12);
    /// 13: invalid SL.
    pub const INVALID_SL: AprStatus = AprStatus(13);

    /// The status in words, if it is a defined one.
    pub fn text(self) -> Option<&'static str> {
        Some(match self.0 {
            0 => "success",
            1 => "invalid comm ID",
            2 => "unsupported",
            3 => "reject",
            4 => "redirect",
            5 => "is current",
            6 => "invalid QPN/EECN",
            7 => "invalid LID",
            8 => "invalid GID",
            9 => "invalid flow label",
            10 => "invalid traffic class",
            11 => "invalid hop limit",
            12 => "invalid packet rate",
            13 => "invalid SL",
            _ => return None,
        })
    }
}

impl fmt::Display for AprStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.text() {
            Some(t) => write!(f, "{} ({t})", self.0),
            None => write!(f, "{}", self.0),
        }
    }
}

/// The AlternatePathResponse (APR, attribute 0x001A, table 116).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Apr {
    /// Local Communication ID.
    pub local_comm_id: u32,
    /// Remote Communication ID.
    pub remote_comm_id: u32,
    /// Additional Information Length: valid bytes of `additional_info`.
    pub additional_info_length: u8,
    /// AP Status.
    pub ap_status: AprStatus,
    /// Additional Information (72 bytes).
    pub additional_info: FixedBytes<72>,
    /// Private Data (148 bytes).
    pub private_data: FixedBytes<148>,
}

impl Body for Apr {
    const ATTR: AttributeId = AttributeId::APR;
    fn read(r: &Reader<'_>) -> Self {
        Apr {
            local_comm_id: r.u32(0),
            remote_comm_id: r.u32(4),
            additional_info_length: r.u8(8),
            ap_status: AprStatus(r.u8(9)),
            additional_info: FixedBytes(r.bytes(12)),
            private_data: FixedBytes(r.bytes(84)),
        }
    }
    fn write(&self, w: &mut Writer<'_>) {
        w.u32(0, self.local_comm_id);
        w.u32(4, self.remote_comm_id);
        w.u8(8, self.additional_info_length);
        w.u8(9, self.ap_status.0);
        w.bytes(12, &self.additional_info[..]);
        w.bytes(84, &self.private_data[..]);
    }
}

impl fmt::Display for Apr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "local_comm_id={:#010x} remote_comm_id={:#010x} ap_status={} \
             additional_info_length={} additional_info={} private_data={}",
            self.local_comm_id,
            self.remote_comm_id,
            self.ap_status,
            self.additional_info_length,
            self.additional_info,
            self.private_data
        )
    }
}
