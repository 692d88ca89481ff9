//! Work requests and completions between rdma-core's structs and the
//! engine's: `ibv_send_wr` and `ibv_recv_wr` lists in, `ibv_wc` out, and
//! the address vectors of `ibv_ah_attr`, and memory window binds.

use crate::ffi::Fail;
use crate::handle;
use crate::mem::access_of;
use crate::objects::{Ah, Mr, Mw, SendLimits};
use crate::sys::*;
use rxe_core::types::*;
use rxe_verbs::MwBind;
use std::ffi::c_uint;
use std::net::Ipv6Addr;

pub fn wc_status(s: WcStatus) -> ibv_wc_status {
    match s {
        WcStatus::Success => IBV_WC_SUCCESS,
        WcStatus::LocLenErr => IBV_WC_LOC_LEN_ERR,
        WcStatus::LocQpOpErr => IBV_WC_LOC_QP_OP_ERR,
        WcStatus::LocProtErr => IBV_WC_LOC_PROT_ERR,
        WcStatus::WrFlushErr => IBV_WC_WR_FLUSH_ERR,
        WcStatus::MwBindErr => IBV_WC_MW_BIND_ERR,
        WcStatus::RemInvReqErr => IBV_WC_REM_INV_REQ_ERR,
        WcStatus::RemAccessErr => IBV_WC_REM_ACCESS_ERR,
        WcStatus::RemOpErr => IBV_WC_REM_OP_ERR,
        WcStatus::RetryExcErr => IBV_WC_RETRY_EXC_ERR,
        WcStatus::RnrRetryExcErr => IBV_WC_RNR_RETRY_EXC_ERR,
        WcStatus::RemInvalidRdReqErr => IBV_WC_REM_INV_RD_REQ_ERR,
        WcStatus::GeneralErr => IBV_WC_GENERAL_ERR,
    }
}

/// `IBV_WC_FLUSH` of rdma-core 45 (44's header, which `sys` follows,
/// lacks it).
pub const IBV_WC_FLUSH: ibv_wc_opcode = 8;

pub fn wc_opcode(o: WcOpcode) -> ibv_wc_opcode {
    match o {
        WcOpcode::Send => IBV_WC_SEND,
        WcOpcode::RdmaWrite => IBV_WC_RDMA_WRITE,
        WcOpcode::RdmaRead => IBV_WC_RDMA_READ,
        WcOpcode::CompSwap => IBV_WC_COMP_SWAP,
        WcOpcode::FetchAdd => IBV_WC_FETCH_ADD,
        WcOpcode::BindMw => IBV_WC_BIND_MW,
        WcOpcode::LocalInv => IBV_WC_LOCAL_INV,
        WcOpcode::AtomicWrite => IBV_WC_ATOMIC_WRITE,
        WcOpcode::Flush => IBV_WC_FLUSH,
        WcOpcode::Recv => IBV_WC_RECV,
        WcOpcode::RecvRdmaWithImm => IBV_WC_RECV_RDMA_WITH_IMM,
    }
}

pub fn wc_flags(c: &Completion) -> c_uint {
    let mut f = 0;
    if c.grh {
        f |= IBV_WC_GRH;
    }
    if c.imm_data.is_some() {
        f |= IBV_WC_WITH_IMM;
    }
    if c.invalidated_rkey.is_some() {
        f |= IBV_WC_WITH_INV;
    }
    f
}

/// A completion's `sl`: for a UD receive (its buffer starts with a GRH
/// area) the RoCE v2 L3 type `ud_sl`, else 0.
pub fn sl_of(c: &Completion, ud_sl: u8) -> u8 {
    if c.grh {
        ud_sl
    } else {
        0
    }
}

pub fn fill_wc(c: &Completion, ud_sl: u8) -> ibv_wc {
    ibv_wc {
        wr_id: c.wr_id,
        status: wc_status(c.status),
        opcode: wc_opcode(c.opcode),
        vendor_err: 0,
        byte_len: c.byte_len,
        __bindgen_anon_1: match (c.imm_data, c.invalidated_rkey) {
            (Some(imm), _) => ibv_wc__bindgen_ty_1 {
                imm_data: imm.to_be(),
            },
            (None, Some(rkey)) => ibv_wc__bindgen_ty_1 {
                invalidated_rkey: rkey,
            },
            (None, None) => ibv_wc__bindgen_ty_1 { imm_data: 0 },
        },
        qp_num: c.qp_num,
        src_qp: c.src_qp,
        wc_flags: wc_flags(c),
        pkey_index: c.pkey_index,
        slid: 0,
        sl: sl_of(c, ud_sl),
        dlid_path_bits: 0,
    }
}

/// The engine's address vector for an `ibv_ah_attr`: RoCE needs the GRH
/// (`is_global`), whose destination GID is the peer's IP address.
pub fn av_of(a: &ibv_ah_attr, arg: &str) -> Result<AddressVector, Fail> {
    if a.is_global == 0 {
        return Err(Fail::inval(
            arg,
            "is_global is 0, but RoCE addresses peers by GID: set is_global and grh.dgid \
             (for ibv_*_pingpong, pass -g 0)",
        ));
    }
    if a.port_num > 1 {
        return Err(Fail::inval(
            arg,
            format!("port_num {}: the device has port 1 only", a.port_num),
        ));
    }
    // SAFETY: the GID's raw bytes; every bit pattern is valid.
    let g = Ipv6Addr::from(unsafe { a.grh.dgid.raw });
    if g.is_unspecified() {
        return Err(Fail::inval(arg, "grh.dgid is ::"));
    }
    Ok(AddressVector {
        dest: rxe_verbs::addr_of(g),
        sgid_index: a.grh.sgid_index,
        hop_limit: a.grh.hop_limit,
        traffic_class: a.grh.traffic_class,
        flow_label: a.grh.flow_label,
    })
}

/// The `ibv_ah_attr` of an address vector (`ibv_query_qp`).
pub fn ah_attr_of(av: &AddressVector) -> ibv_ah_attr {
    // SAFETY: plain data.
    let mut a: ibv_ah_attr = unsafe { std::mem::zeroed() };
    a.is_global = 1;
    a.port_num = 1;
    a.grh.dgid.raw = rxe_verbs::gid_of(av.dest).octets();
    a.grh.sgid_index = av.sgid_index;
    a.grh.hop_limit = av.hop_limit;
    a.grh.traffic_class = av.traffic_class;
    a.grh.flow_label = av.flow_label;
    a
}

/// The gather list of a WR.
///
/// # Safety
/// `sg` must point to `n` SGEs when `n > 0`.
pub unsafe fn sges(sg: *const ibv_sge, n: i32, max: u32) -> Result<Vec<Sge>, Fail> {
    if n < 0 {
        return Err(Fail::inval("num_sge", format!("{n} is negative")));
    }
    if n as u32 > max {
        return Err(Fail::inval(
            "num_sge",
            format!("{n} is more than the queue's max_sge {max}"),
        ));
    }
    if n == 0 {
        return Ok(Vec::new());
    }
    if sg.is_null() {
        return Err(Fail::inval("sg_list", "NULL with num_sge > 0"));
    }
    // SAFETY: the caller's contract.
    let s = unsafe { std::slice::from_raw_parts(sg, n as usize) };
    Ok(s.iter()
        .map(|e| Sge {
            addr: e.addr,
            length: e.length,
            lkey: e.lkey,
        })
        .collect())
}

/// The bytes of an inline send: the gather list read from the program's
/// memory by address (as a NIC copies inline data), at most `max` of them.
///
/// # Safety
/// Each SGE must name `length` readable bytes at `addr`.
pub unsafe fn inline_bytes(s: &[Sge], max: u32) -> Result<Vec<u8>, Fail> {
    let total: u64 = s.iter().map(|e| u64::from(e.length)).sum();
    if total > u64::from(max) {
        return Err(Fail::inval(
            "send_flags",
            format!("IBV_SEND_INLINE with {total} bytes, more than max_inline_data {max}"),
        ));
    }
    let mut out = Vec::with_capacity(total as usize);
    for e in s {
        if e.length == 0 {
            continue;
        }
        if e.addr == 0 {
            return Err(Fail::inval("sg_list", "an inline SGE's addr is NULL"));
        }
        // SAFETY: the caller's contract.
        out.extend_from_slice(unsafe {
            std::slice::from_raw_parts(e.addr as *const u8, e.length as usize)
        });
    }
    Ok(out)
}

/// The engine's bind of window `mw` to what `info` says, taking the key
/// part of `new_rkey`.
///
/// # Safety
/// `info` points to the program's bind information.
pub unsafe fn bind_of(
    mw: *mut ibv_mw,
    new_rkey: u32,
    info: *const ibv_mw_bind_info,
) -> Result<MwBind, Fail> {
    let m = handle::get::<Mw>(mw, "mw")?;
    if info.is_null() {
        return Err(Fail::inval("bind_info", "NULL"));
    }
    // SAFETY: the caller's contract.
    let info = unsafe { &*info };
    let access = access_of(info.mw_access_flags, "bind_info.mw_access_flags")?;
    let mr_lkey = if info.mr.is_null() {
        if info.addr != 0 || info.length != 0 {
            return Err(Fail::inval(
                "bind_info.mr",
                "NULL with a nonzero addr or length",
            ));
        }
        0
    } else {
        let r = handle::get::<Mr>(info.mr, "bind_info.mr")?;
        if r.mr.pd != m.mw.pd {
            return Err(Fail::new(
                libc::EPERM,
                "bind_info.mr: the region and the window are in different protection domains",
            ));
        }
        r.mr.lkey
    };
    Ok(MwBind {
        mw_rkey: m.mw.rkey,
        new_rkey,
        mr_lkey,
        addr: info.addr,
        length: info.length,
        access,
    })
}

/// One `ibv_send_wr` as the engine's [`SendWr`].
///
/// # Safety
/// `w` and everything it points to are the program's valid work request.
pub unsafe fn send_wr(w: &ibv_send_wr, q: SendLimits) -> Result<SendWr, Fail> {
    let opcode = match w.opcode {
        IBV_WR_RDMA_WRITE => SendOpcode::RdmaWrite,
        IBV_WR_RDMA_WRITE_WITH_IMM => SendOpcode::RdmaWriteWithImm,
        IBV_WR_SEND => SendOpcode::Send,
        IBV_WR_SEND_WITH_IMM => SendOpcode::SendWithImm,
        IBV_WR_RDMA_READ => SendOpcode::RdmaRead,
        IBV_WR_ATOMIC_CMP_AND_SWP => SendOpcode::AtomicCmpSwap,
        IBV_WR_ATOMIC_FETCH_AND_ADD => SendOpcode::AtomicFetchAdd,
        IBV_WR_LOCAL_INV => SendOpcode::LocalInv,
        IBV_WR_SEND_WITH_INV => SendOpcode::SendWithInv,
        IBV_WR_BIND_MW => SendOpcode::BindMw,
        IBV_WR_ATOMIC_WRITE => SendOpcode::AtomicWrite,
        o => {
            return Err(Fail::inval(
                "opcode",
                format!("{o} is not an opcode this device performs"),
            ))
        }
    };
    let known = IBV_SEND_FENCE | IBV_SEND_SIGNALED | IBV_SEND_SOLICITED | IBV_SEND_INLINE;
    if w.send_flags & !known != 0 {
        return Err(Fail::inval(
            "send_flags",
            format!(
                "{:#x}: IP checksum offload and unknown bits are not supported",
                w.send_flags
            ),
        ));
    }
    let mut wr = SendWr::new(w.wr_id, opcode);
    wr.flags = SendFlags::from_bits_truncate(w.send_flags);
    if opcode == SendOpcode::BindMw {
        // SAFETY: the union member of a bind; its pointers are checked.
        let b = unsafe { &w.__bindgen_anon_2.bind_mw };
        // SAFETY: the program's bind information, inside its WR.
        wr.bind = Some(unsafe { bind_of(b.mw, b.rkey, &b.bind_info) }?);
        return Ok(wr);
    }
    // SAFETY: the caller's contract.
    let sg = unsafe { sges(w.sg_list, w.num_sge, q.max_sge) }?;
    if w.send_flags & IBV_SEND_INLINE != 0
        && matches!(
            opcode,
            SendOpcode::Send
                | SendOpcode::SendWithImm
                | SendOpcode::SendWithInv
                | SendOpcode::RdmaWrite
                | SendOpcode::RdmaWriteWithImm
                | SendOpcode::AtomicWrite
        )
    {
        // SAFETY: the caller's contract.
        wr.inline_data = Some(unsafe { inline_bytes(&sg, q.max_inline) }?);
    } else {
        wr.sg_list = sg;
    }
    // SAFETY: the union members the opcode uses.
    unsafe {
        match opcode {
            SendOpcode::SendWithImm | SendOpcode::RdmaWriteWithImm => {
                wr.imm_data = u32::from_be(w.__bindgen_anon_1.imm_data)
            }
            SendOpcode::SendWithInv | SendOpcode::LocalInv => {
                wr.invalidate_rkey = w.__bindgen_anon_1.invalidate_rkey
            }
            _ => {}
        }
        match opcode {
            SendOpcode::RdmaWrite
            | SendOpcode::RdmaWriteWithImm
            | SendOpcode::RdmaRead
            | SendOpcode::AtomicWrite => {
                wr.remote_addr = w.wr.rdma.remote_addr;
                wr.rkey = w.wr.rdma.rkey;
            }
            SendOpcode::AtomicCmpSwap | SendOpcode::AtomicFetchAdd => {
                wr.remote_addr = w.wr.atomic.remote_addr;
                wr.rkey = w.wr.atomic.rkey;
                wr.compare_add = w.wr.atomic.compare_add;
                wr.swap = w.wr.atomic.swap;
                // rdma-core's rxe provider refuses these at the post
                // (validate_send_wr): an atomic moves 8 aligned bytes.
                let len: u64 = wr.sg_list.iter().map(|s| u64::from(s.length)).sum();
                if len < 8 || wr.remote_addr & 7 != 0 {
                    return Err(Fail::inval(
                        "wr.wr.atomic",
                        format!(
                            "remote_addr {:#x} and {len} bytes: an atomic needs an 8-byte \
                             aligned address and 8 bytes",
                            wr.remote_addr
                        ),
                    ));
                }
            }
            _ => {}
        }
        if q.qp_type == QpType::Ud {
            let ud = w.wr.ud;
            let ah = handle::get::<Ah>(ud.ah, "wr.ud.ah")?;
            wr.ud = Some(UdDest {
                av: ah.rx.av(),
                remote_qpn: ud.remote_qpn,
                remote_qkey: ud.remote_qkey,
            });
        }
    }
    Ok(wr)
}
