//! Service ID resolution for UD: SIDR_REQ and SIDR_REP (IBTA 12.11,
//! tables 119 and 120). No connection: the requester asks which QPN and
//! Q_Key serve a service ID and sends its datagrams there.

use super::{AttributeId, Body};
use crate::mad::{FixedBytes, Reader, Writer};
use core::fmt;

/// The ServiceIDResReq (SIDR_REQ, attribute 0x0017, table 119).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SidrReq {
    /// RequestID: the requester's handle, echoed in the SIDR_REP.
    pub request_id: u32,
    /// Partition Key.
    pub pkey: u16,
    /// ServiceID.
    pub service_id: u64,
    /// Private Data (216 bytes; rdma_cm begins it with its header).
    pub private_data: FixedBytes<216>,
}

impl Body for SidrReq {
    const ATTR: AttributeId = AttributeId::SIDR_REQ;
    fn read(r: &Reader<'_>) -> Self {
        SidrReq {
            request_id: r.u32(0),
            pkey: r.u16(4),
            service_id: r.u64(8),
            private_data: FixedBytes(r.bytes(16)),
        }
    }
    fn write(&self, w: &mut Writer<'_>) {
        w.u32(0, self.request_id);
        w.u16(4, self.pkey);
        w.u64(8, self.service_id);
        w.bytes(16, &self.private_data[..]);
    }
}

impl fmt::Display for SidrReq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "request_id={:#010x} pkey={:#06x} service_id={:#018x} private_data={}",
            self.request_id, self.pkey, self.service_id, self.private_data
        )
    }
}

/// Status of a SIDR_REP (IBTA table 121; names as Linux's
/// `ib_cm_sidr_status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SidrStatus(pub u8);

impl SidrStatus {
    /// 0: the QPN and Q_Key are valid.
    pub const SUCCESS: SidrStatus = SidrStatus(0);
    /// 1: the service ID is not supported.
    pub const UNSUPPORTED: SidrStatus = SidrStatus(1);
    /// 2: the service rejected the request.
    pub const REJECT: SidrStatus = SidrStatus(2);
    /// 3: no QP.
    pub const NO_QP: SidrStatus = SidrStatus(3);
    /// 4: redirect (the additional information says where).
    pub const REDIRECT: SidrStatus = SidrStatus(4);
    /// 5: unsupported class version.
    pub const UNSUPPORTED_VERSION: SidrStatus = SidrStatus(5);

    /// The status in words, if it is a defined one.
    pub fn text(self) -> Option<&'static str> {
        Some(match self.0 {
            0 => "success",
            1 => "unsupported service ID",
            2 => "reject",
            3 => "no QP",
            4 => "redirect",
            5 => "unsupported version",
            _ => return None,
        })
    }
}

impl fmt::Display for SidrStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.text() {
            Some(t) => write!(f, "{} ({t})", self.0),
            None => write!(f, "{}", self.0),
        }
    }
}

/// The ServiceIDResReqResp (SIDR_REP, attribute 0x0018, table 120).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SidrRep {
    /// RequestID: the SIDR_REQ's.
    pub request_id: u32,
    /// Status.
    pub status: SidrStatus,
    /// Additional Information Length: valid bytes of `additional_info`.
    pub additional_info_length: u8,
    /// VendorID (24 bits: 16 at byte 6, 8 at byte 11; ECE).
    pub vendor_id: u32,
    /// QPN (24 bits): the UD QP serving the service.
    pub qpn: u32,
    /// ServiceID.
    pub service_id: u64,
    /// Q_Key to send to that QP with.
    pub qkey: u32,
    /// Additional Information (72 bytes).
    pub additional_info: FixedBytes<72>,
    /// Private Data (136 bytes).
    pub private_data: FixedBytes<136>,
}

impl Body for SidrRep {
    const ATTR: AttributeId = AttributeId::SIDR_REP;
    fn read(r: &Reader<'_>) -> Self {
        SidrRep {
            request_id: r.u32(0),
            status: SidrStatus(r.u8(4)),
            additional_info_length: r.u8(5),
            vendor_id: (u32::from(r.u16(6)) << 8) | u32::from(r.u8(11)),
            qpn: r.u24(8),
            service_id: r.u64(12),
            qkey: r.u32(20),
            additional_info: FixedBytes(r.bytes(24)),
            private_data: FixedBytes(r.bytes(96)),
        }
    }
    fn write(&self, w: &mut Writer<'_>) {
        w.u32(0, self.request_id);
        w.u8(4, self.status.0);
        w.u8(5, self.additional_info_length);
        w.u16(6, (self.vendor_id >> 8) as u16);
        w.u24(8, self.qpn);
        w.u8(11, self.vendor_id as u8);
        w.u64(12, self.service_id);
        w.u32(20, self.qkey);
        w.bytes(24, &self.additional_info[..]);
        w.bytes(96, &self.private_data[..]);
    }
}

impl fmt::Display for SidrRep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "request_id={:#010x} status={} qpn={:#08x} service_id={:#018x} qkey={:#010x}",
            self.request_id, self.status, self.qpn, self.service_id, self.qkey
        )?;
        if self.vendor_id != 0 {
            write!(f, " vendor_id={:#08x}", self.vendor_id)?;
        }
        write!(
            f,
            " additional_info_length={} additional_info={} private_data={}",
            self.additional_info_length, self.additional_info, self.private_data
        )
    }
}
