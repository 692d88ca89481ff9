//! QPs and SRQs on an id: `rdma_create_qp`, `rdma_create_qp_ex`,
//! `rdma_destroy_qp`, `rdma_create_srq`, `rdma_create_srq_ex`,
//! `rdma_destroy_srq`, as librdmacm's `cma.c` makes them.
//!
//! The QP is created on the PD given, or the id's (the library's PD of the
//! device), with CQs and completion channels of its own for the sides the
//! program gave no CQ for (their `cq_context` is the id). Then it is moved
//! as librdmacm moves it: a UD QP through INIT (P_Key index 0, port 1,
//! Q_Key RDMA_UDP_QKEY), RTR and RTS (SQ PSN 0), ready to send; a
//! connected QP to INIT (no remote access), where it waits for
//! `rdma_connect`/`rdma_accept` to move it on. The id's `qp_type` (UD for
//! the UDP and IPoIB port spaces) decides which, as in librdmacm.

use super::id::qp_attr;
use super::minus_one;
use super::object::CmId;
use crate::ffi::{entry, Fail};
use crate::handle;
use crate::sys::*;
use std::ffi::c_int;
use std::mem::offset_of;

fn errno() -> c_int {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EINVAL)
}

/// librdmacm's `ucma_destroy_cqs`.
fn destroy_cqs(id: *mut rdma_cm_id) {
    // SAFETY: a live id; its CQ fields are this library's objects (or NULL).
    unsafe {
        let c = &mut *id;
        if !c.recv_cq.is_null() {
            crate::cq::ibv_destroy_cq(c.recv_cq);
            if !c.send_cq.is_null() && c.send_cq != c.recv_cq {
                crate::cq::ibv_destroy_cq(c.send_cq);
                c.send_cq = std::ptr::null_mut();
            }
            c.recv_cq = std::ptr::null_mut();
        }
        if !c.recv_cq_channel.is_null() {
            crate::cq::ibv_destroy_comp_channel(c.recv_cq_channel);
            if !c.send_cq_channel.is_null() && c.send_cq_channel != c.recv_cq_channel {
                crate::cq::ibv_destroy_comp_channel(c.send_cq_channel);
                c.send_cq_channel = std::ptr::null_mut();
            }
            c.recv_cq_channel = std::ptr::null_mut();
        }
    }
}

/// librdmacm's `ucma_create_cqs`: a channel and a CQ of `size` for each
/// side asked for.
fn create_cqs(id: *mut rdma_cm_id, send: u32, recv: u32) -> Result<(), Fail> {
    // SAFETY: a live id bound to a device.
    let c = unsafe { &mut *id };
    let one =
        |size: u32, ch: &mut *mut ibv_comp_channel, cq: &mut *mut ibv_cq| -> Result<(), Fail> {
            // SAFETY: the id's open context.
            *ch = unsafe { crate::cq::ibv_create_comp_channel(c.verbs) };
            if ch.is_null() {
                return Err(Fail::new(errno(), "creating a completion channel"));
            }
            // SAFETY: as above, with the channel just made.
            *cq = unsafe { crate::cq::ibv_create_cq(c.verbs, size as c_int, id.cast(), *ch, 0) };
            if cq.is_null() {
                return Err(Fail::new(errno(), format!("creating a CQ of {size}")));
            }
            Ok(())
        };
    let r = (|| {
        if recv != 0 {
            let (mut ch, mut cq) = (std::ptr::null_mut(), std::ptr::null_mut());
            let r = one(recv, &mut ch, &mut cq);
            c.recv_cq_channel = ch;
            c.recv_cq = cq;
            r?;
        }
        if send != 0 {
            let (mut ch, mut cq) = (std::ptr::null_mut(), std::ptr::null_mut());
            let r = one(send, &mut ch, &mut cq);
            c.send_cq_channel = ch;
            c.send_cq = cq;
            r?;
        }
        Ok(())
    })();
    if r.is_err() {
        destroy_cqs(id);
    }
    r
}

/// Moves a new QP as librdmacm's `ucma_init_ud_qp` / `ucma_init_conn_qp` do.
fn init_qp(cm: &CmId, qp: *mut ibv_qp) -> Result<(), Fail> {
    let modify = |a: &mut ibv_qp_attr, mask: c_int, what: &str| -> Result<(), Fail> {
        // SAFETY: a QP of this library and attributes on our stack.
        let r = unsafe { crate::qp::ibv_modify_qp(qp, a, mask) };
        if r != 0 {
            return Err(Fail::new(r, format!("moving the QP to {what}")));
        }
        Ok(())
    };
    let (mut a, mask) = qp_attr(cm, IBV_QPS_INIT)?;
    modify(&mut a, mask, "INIT")?;
    let (qp_type, _) = cm.kind();
    if qp_type == IBV_QPT_UD {
        a.qp_state = IBV_QPS_RTR;
        modify(&mut a, IBV_QP_STATE as c_int, "RTR")?;
        a.qp_state = IBV_QPS_RTS;
        a.sq_psn = 0;
        modify(&mut a, (IBV_QP_STATE | IBV_QP_SQ_PSN) as c_int, "RTS")?;
    }
    Ok(())
}

/// `rdma_create_qp_ex` of librdmacm.
fn create_qp_ex(id: *mut rdma_cm_id, attr: *mut ibv_qp_init_attr_ex) -> Result<(), Fail> {
    let cm = handle::get::<CmId>(id, "id")?;
    // SAFETY: the program's attributes.
    let a = unsafe { attr.as_mut() }.ok_or_else(|| Fail::inval("qp_init_attr", "NULL"))?;
    // SAFETY: a live id.
    let c = unsafe { &mut *id };
    if !c.qp.is_null() {
        return Err(Fail::inval("id", "has a QP already"));
    }
    if c.verbs.is_null() {
        return Err(Fail::inval(
            "id",
            "not bound to a device (rdma_bind_addr to a device's address, or rdma_resolve_addr)",
        ));
    }
    if a.comp_mask & IBV_QP_INIT_ATTR_PD == 0 || a.pd.is_null() {
        a.comp_mask |= IBV_QP_INIT_ATTR_PD;
        a.pd = c.pd;
    } else {
        crate::handle::get::<crate::objects::Pd>(a.pd, "pd")?;
        // SAFETY: a live PD of this library.
        if unsafe { (*a.pd).context } != c.verbs {
            return Err(Fail::inval("pd", "of another device than the id's"));
        }
    }
    if (!c.recv_cq.is_null() && !a.recv_cq.is_null() && c.recv_cq != a.recv_cq)
        || (!c.send_cq.is_null() && !a.send_cq.is_null() && c.send_cq != a.send_cq)
    {
        return Err(Fail::inval("qp_init_attr", "CQs other than the id's"));
    }
    let send = if !a.send_cq.is_null() || !c.send_cq.is_null() {
        0
    } else {
        a.cap.max_send_wr
    };
    let recv = if !a.recv_cq.is_null() || !c.recv_cq.is_null() {
        0
    } else {
        a.cap.max_recv_wr
    };
    create_cqs(id, send, recv)?;
    if a.send_cq.is_null() {
        a.send_cq = c.send_cq;
    }
    if a.recv_cq.is_null() {
        a.recv_cq = c.recv_cq;
    }
    if !c.srq.is_null() && a.srq.is_null() {
        a.srq = c.srq;
    }
    // The header's ibv_create_qp_ex: through the context's verbs_context.
    let v = (c.verbs as usize - offset_of!(verbs_context, context)) as *mut verbs_context;
    // SAFETY: a context of this library is the end of a verbs_context.
    let create = unsafe { (*v).create_qp_ex };
    let qp = match create {
        // SAFETY: the context and the program's attributes.
        Some(f) => unsafe { f(c.verbs, a) },
        None => std::ptr::null_mut(),
    };
    if qp.is_null() {
        let e = Fail::new(errno(), "ibv_create_qp_ex failed");
        destroy_cqs(id);
        return Err(e);
    }
    if let Err(e) = init_qp(cm, qp) {
        // SAFETY: the QP just made.
        unsafe { crate::qp::ibv_destroy_qp(qp) };
        destroy_cqs(id);
        return Err(e);
    }
    // SAFETY: the QP just made.
    c.pd = unsafe { (*qp).pd };
    c.qp = qp;
    Ok(())
}

entry! {
    on_panic = -1;
    pub unsafe extern "C" fn rdma_create_qp_ex(
        id: *mut rdma_cm_id,
        qp_init_attr: *mut ibv_qp_init_attr_ex,
    ) -> c_int {
        minus_one(VERB, || create_qp_ex(id, qp_init_attr))
    }
}

entry! {
    on_panic = -1;
    pub unsafe extern "C" fn rdma_create_qp(
        id: *mut rdma_cm_id,
        pd: *mut ibv_pd,
        qp_init_attr: *mut ibv_qp_init_attr,
    ) -> c_int {
        minus_one(VERB, || {
            let cm = handle::get::<CmId>(id, "id")?;
            // SAFETY: the program's attributes.
            let a =
                unsafe { qp_init_attr.as_mut() }
                    .ok_or_else(|| Fail::inval("qp_init_attr", "NULL"))?;
            // SAFETY: ibv_qp_init_attr_ex is plain data; all zeroes is valid.
            let mut ex: ibv_qp_init_attr_ex = unsafe { std::mem::zeroed() };
            ex.qp_context = a.qp_context;
            ex.send_cq = a.send_cq;
            ex.recv_cq = a.recv_cq;
            ex.srq = a.srq;
            ex.cap = a.cap;
            ex.qp_type = a.qp_type;
            ex.sq_sig_all = a.sq_sig_all;
            ex.comp_mask = IBV_QP_INIT_ATTR_PD;
            // SAFETY: a live id.
            ex.pd = if pd.is_null() {
                unsafe { (*cm.c()).pd }
            } else {
                pd
            };
            let r = create_qp_ex(id, &mut ex);
            a.send_cq = ex.send_cq;
            a.recv_cq = ex.recv_cq;
            a.srq = ex.srq;
            a.cap = ex.cap;
            r
        })
    }
}

entry! {
    pub unsafe extern "C" fn rdma_destroy_qp(id: *mut rdma_cm_id) {
        if let Err(f) = handle::get::<CmId>(id, "id") {
            crate::ffi::note(VERB, &f.why);
            return;
        }
        // SAFETY: a live id; its QP is this library's (or NULL: EINVAL).
        unsafe {
            crate::qp::ibv_destroy_qp((*id).qp);
            (*id).qp = std::ptr::null_mut();
        }
        destroy_cqs(id);
    }
}

/// `rdma_create_srq_ex` of librdmacm, for the SRQs the stack has (basic).
fn create_srq_ex(id: *mut rdma_cm_id, attr: *mut ibv_srq_init_attr_ex) -> Result<(), Fail> {
    handle::get::<CmId>(id, "id")?;
    // SAFETY: the program's attributes.
    let a = unsafe { attr.as_mut() }.ok_or_else(|| Fail::inval("srq_init_attr", "NULL"))?;
    // SAFETY: a live id.
    let c = unsafe { &mut *id };
    if a.comp_mask & IBV_SRQ_INIT_ATTR_TYPE == 0 {
        return Err(Fail::inval(
            "srq_init_attr->comp_mask",
            "IBV_SRQ_INIT_ATTR_TYPE is required",
        ));
    }
    if c.verbs.is_null() {
        return Err(Fail::inval("id", "not bound to a device"));
    }
    if a.comp_mask & IBV_SRQ_INIT_ATTR_PD == 0 || a.pd.is_null() {
        a.pd = c.pd;
        a.comp_mask |= IBV_SRQ_INIT_ATTR_PD;
    }
    if a.srq_type != IBV_SRQT_BASIC {
        return Err(Fail::unsupported(format!(
            "srq_type {} (XRC and tag matching; basic SRQs are supported)",
            a.srq_type
        )));
    }
    let mut basic = ibv_srq_init_attr {
        srq_context: a.srq_context,
        attr: a.attr,
    };
    // SAFETY: a PD of this library (or one the call refuses) and our copy.
    let srq = unsafe { crate::qp::ibv_create_srq(a.pd, &mut basic) };
    if srq.is_null() {
        return Err(Fail::new(errno(), "ibv_create_srq failed"));
    }
    a.attr = basic.attr;
    if c.pd.is_null() {
        c.pd = a.pd;
    }
    c.srq = srq;
    Ok(())
}

entry! {
    on_panic = -1;
    pub unsafe extern "C" fn rdma_create_srq_ex(
        id: *mut rdma_cm_id,
        attr: *mut ibv_srq_init_attr_ex,
    ) -> c_int {
        minus_one(VERB, || create_srq_ex(id, attr))
    }
}

entry! {
    on_panic = -1;
    pub unsafe extern "C" fn rdma_create_srq(
        id: *mut rdma_cm_id,
        pd: *mut ibv_pd,
        attr: *mut ibv_srq_init_attr,
    ) -> c_int {
        minus_one(VERB, || {
            let cm = handle::get::<CmId>(id, "id")?;
            // SAFETY: the program's attributes.
            let a = unsafe { attr.as_mut() }.ok_or_else(|| Fail::inval("srq_init_attr", "NULL"))?;
            // SAFETY: ibv_srq_init_attr_ex is plain data; all zeroes is valid.
            let mut ex: ibv_srq_init_attr_ex = unsafe { std::mem::zeroed() };
            ex.srq_context = a.srq_context;
            ex.attr = a.attr;
            ex.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
            let (qp_type, _) = cm.kind();
            ex.srq_type = if qp_type == IBV_QPT_XRC_RECV {
                IBV_SRQT_XRC
            } else {
                IBV_SRQT_BASIC
            };
            ex.pd = pd;
            let r = create_srq_ex(id, &mut ex);
            a.attr = ex.attr;
            r
        })
    }
}

entry! {
    pub unsafe extern "C" fn rdma_destroy_srq(id: *mut rdma_cm_id) {
        if let Err(f) = handle::get::<CmId>(id, "id") {
            crate::ffi::note(VERB, &f.why);
            return;
        }
        // SAFETY: a live id; its SRQ is this library's (or NULL: EINVAL).
        unsafe {
            crate::qp::ibv_destroy_srq((*id).srq);
            (*id).srq = std::ptr::null_mut();
        }
        destroy_cqs(id);
    }
}
