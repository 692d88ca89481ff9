//! Queue pairs (classic and extended, with the `ibv_wr_*` posting of
//! `ibv_qp_ex`), shared receive queues and address handles.

use crate::event_count::EventCount;
use crate::ffi::{entry, int_result, note, ptr_result, set_errno, Fail};
use crate::handle::{self};
use crate::mem::access_of;
use crate::objects::{ibv_ctx, Ah, Batch, Cq, Ctx, CtxEvents, Pd, Qp, Route, SendLimits, Srq};
use crate::sys::*;
use crate::wr::{ah_attr_of, av_of, send_wr, sges};
use parking_lot::Mutex;
use rxe_core::psn::Psn;
use rxe_core::types::*;
use std::cell::UnsafeCell;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

/// # Safety
/// `p` must be a QP this library created and the program has not destroyed.
unsafe fn qp_fast<'a>(p: *mut ibv_qp) -> &'a Qp {
    // SAFETY: the caller's contract.
    unsafe { &*(p as *const Qp) }
}

fn qp_type_of(t: ibv_qp_type) -> Result<QpType, Fail> {
    match t {
        IBV_QPT_RC => Ok(QpType::Rc),
        IBV_QPT_UC => Ok(QpType::Uc),
        IBV_QPT_UD => Ok(QpType::Ud),
        IBV_QPT_RAW_PACKET | IBV_QPT_XRC_SEND | IBV_QPT_XRC_RECV | IBV_QPT_DRIVER => Err(
            Fail::unsupported(format!("qp_type {t} (RC, UC and UD are)")),
        ),
        _ => Err(Fail::inval("qp_type", format!("{t} is not a QP type"))),
    }
}

fn state_of(s: ibv_qp_state, arg: &str) -> Result<QpState, Fail> {
    QpState::from_ibv_value(s).ok_or_else(|| Fail::inval(arg, format!("{s} is not a QP state")))
}

fn mtu_of(m: ibv_mtu) -> Result<Mtu, Fail> {
    Ok(match m {
        IBV_MTU_256 => Mtu::Mtu256,
        IBV_MTU_512 => Mtu::Mtu512,
        IBV_MTU_1024 => Mtu::Mtu1024,
        IBV_MTU_2048 => Mtu::Mtu2048,
        IBV_MTU_4096 => Mtu::Mtu4096,
        _ => return Err(Fail::inval("attr->path_mtu", format!("{m} is not an MTU"))),
    })
}

/// What `ibv_create_qp` and `ibv_create_qp_ex` share.
struct QpArgs {
    qp_context: *mut c_void,
    send_cq: *mut ibv_cq,
    recv_cq: *mut ibv_cq,
    srq: *mut ibv_srq,
    cap: *mut ibv_qp_cap,
    qp_type: ibv_qp_type,
    sq_sig_all: c_int,
}

fn create_qp(pd: *mut ibv_pd, a: QpArgs) -> Result<*mut Qp, Fail> {
    let p = handle::get::<Pd>(pd, "pd")?;
    let qp_type = qp_type_of(a.qp_type)?;
    let scq = handle::get::<Cq>(a.send_cq, "send_cq")?;
    let rcq = handle::get::<Cq>(a.recv_cq, "recv_cq")?;
    let srq = if a.srq.is_null() {
        None
    } else {
        Some(handle::get::<Srq>(a.srq, "srq")?)
    };
    if srq.is_some() && qp_type == QpType::Uc {
        // The kernel's rxe allows it; so does the engine.
    }
    // SAFETY: the program's capacities (inside its init attributes).
    let cap = unsafe { a.cap.as_mut() }.ok_or_else(|| Fail::inval("init_attr", "NULL"))?;
    let want = QpCap {
        max_send_wr: cap.max_send_wr,
        max_recv_wr: if srq.is_some() { 0 } else { cap.max_recv_wr },
        max_send_sge: cap.max_send_sge,
        max_recv_sge: if srq.is_some() { 0 } else { cap.max_recv_sge },
        max_inline_data: cap.max_inline_data,
    };
    let init = rxe_verbs::QpInitAttr {
        qp_type,
        send_cq: scq.rx.id(),
        recv_cq: rcq.rx.id(),
        srq: srq.map(|s| s.rx.id()),
        cap: want,
        sq_sig_all: a.sq_sig_all != 0,
    };
    let rx = p.open.rx.create_qp(&p.rx, &init)?;
    let (_, got) = rx.query()?;
    // What the kernel's create_qp answers: the queue depths asked for
    // (ibv_query_qp shows the rounded ones the QP really has) and the send
    // WQE's size in SGEs and inline bytes.
    cap.max_send_sge = got.max_send_sge;
    cap.max_inline_data = got.max_inline_data;
    // SAFETY: ibv_qp_ex is plain data (pointers, integers, optional
    // function pointers, pthread objects whose initializers are zeroes).
    let mut ex: ibv_qp_ex = unsafe { std::mem::zeroed() };
    let b = &mut ex.qp_base;
    b.context = p.pd.context;
    b.qp_context = a.qp_context;
    b.pd = pd;
    b.send_cq = a.send_cq;
    b.recv_cq = a.recv_cq;
    b.srq = a.srq;
    b.handle = rx.qp_num();
    b.qp_num = rx.qp_num();
    b.state = IBV_QPS_RESET;
    b.qp_type = a.qp_type;
    set_wr_ops(&mut ex);
    let async_events = Arc::new(EventCount::default());
    let qpn = rx.qp_num();
    let q = Box::into_raw(Box::new(Qp {
        qp: UnsafeCell::new(ex),
        rx,
        open: p.open.clone(),
        limits: SendLimits {
            qp_type,
            max_sge: got.max_send_sge,
            max_inline: got.max_inline_data,
        },
        max_send_wr: got.max_send_wr,
        max_recv_wr: got.max_recv_wr,
        max_recv_sge: got.max_recv_sge,
        sq_sig_all: a.sq_sig_all != 0,
        pd: std::ptr::from_ref(p),
        send_cq: std::ptr::from_ref(scq),
        recv_cq: std::ptr::from_ref(rcq),
        srq: srq.map_or(std::ptr::null(), std::ptr::from_ref),
        async_events: async_events.clone(),
        batch: Mutex::new(Batch::default()),
        applied: AtomicU32::new(0),
        mcast: Mutex::new(Vec::new()),
    }));
    p.users.fetch_add(1, Ordering::AcqRel);
    scq.users.fetch_add(1, Ordering::AcqRel);
    rcq.users.fetch_add(1, Ordering::AcqRel);
    if let Some(s) = srq {
        s.users.fetch_add(1, Ordering::AcqRel);
    }
    let c = handle::get::<Ctx>(p.pd.context, "context")?;
    p.open.routes.lock().qps.insert(
        qpn,
        Route {
            to: Arc::downgrade(&c.events) as Weak<CtxEvents>,
            ptr: q as usize,
            count: async_events,
            disarm: None,
        },
    );
    handle::add(q);
    Ok(q)
}

entry! {
    pub unsafe extern "C" fn ibv_create_qp(
        pd: *mut ibv_pd,
        attr: *mut ibv_qp_init_attr,
    ) -> *mut ibv_qp {
        let r = (|| {
            // SAFETY: the program's attributes.
            let a = unsafe { attr.as_mut() }.ok_or_else(|| Fail::inval("qp_init_attr", "NULL"))?;
            create_qp(
                pd,
                QpArgs {
                    qp_context: a.qp_context,
                    send_cq: a.send_cq,
                    recv_cq: a.recv_cq,
                    srq: a.srq,
                    cap: &raw mut a.cap,
                    qp_type: a.qp_type,
                    sq_sig_all: a.sq_sig_all,
                },
            )
        })();
        ptr_result(VERB, r.map(|q| q.cast::<ibv_qp>()))
    }
}

entry! {
    unsafe extern "C" fn ibv_create_qp_ex(
        context: *mut ibv_context,
        attr: *mut ibv_qp_init_attr_ex,
    ) -> *mut ibv_qp {
        let r = (|| {
            let _ = handle::get::<Ctx>(context, "context")?;
            // SAFETY: the program's attributes.
            let a =
                unsafe { attr.as_mut() }.ok_or_else(|| Fail::inval("qp_init_attr_ex", "NULL"))?;
            let known = IBV_QP_INIT_ATTR_PD
                | IBV_QP_INIT_ATTR_CREATE_FLAGS
                | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
            if a.comp_mask & !known != 0 {
                return Err(Fail::unsupported(format!(
                    "qp_init_attr_ex->comp_mask {:#x} (XRC domains, TSO, RSS and indirection tables)",
                    a.comp_mask & !known
                )));
            }
            if a.comp_mask & IBV_QP_INIT_ATTR_PD == 0 {
                return Err(Fail::inval(
                    "qp_init_attr_ex->comp_mask",
                    "IBV_QP_INIT_ATTR_PD is required",
                ));
            }
            if a.comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS != 0 && a.create_flags != 0 {
                return Err(Fail::unsupported(format!(
                    "create_flags {:#x}",
                    a.create_flags
                )));
            }
            let ops = IBV_QP_EX_WITH_RDMA_WRITE
                | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
                | IBV_QP_EX_WITH_SEND
                | IBV_QP_EX_WITH_SEND_WITH_IMM
                | IBV_QP_EX_WITH_RDMA_READ
                | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP
                | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD
                | IBV_QP_EX_WITH_LOCAL_INV
                | IBV_QP_EX_WITH_BIND_MW
                | IBV_QP_EX_WITH_SEND_WITH_INV
                | IBV_QP_EX_WITH_ATOMIC_WRITE;
            if a.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0
                && a.send_ops_flags & !u64::from(ops) != 0
            {
                return Err(Fail::unsupported(format!(
                    "send_ops_flags {:#x} (TSO)",
                    a.send_ops_flags & !u64::from(ops)
                )));
            }
            let q = create_qp(
                a.pd,
                QpArgs {
                    qp_context: a.qp_context,
                    send_cq: a.send_cq,
                    recv_cq: a.recv_cq,
                    srq: a.srq,
                    cap: &raw mut a.cap,
                    qp_type: a.qp_type,
                    sq_sig_all: a.sq_sig_all,
                },
            )?;
            Ok(q)
        })();
        ptr_result(VERB, r.map(|q| q.cast::<ibv_qp>()))
    }
}

entry! {
    pub unsafe extern "C" fn ibv_qp_to_qp_ex(qp: *mut ibv_qp) -> *mut ibv_qp_ex {
        ptr_result(VERB, handle::get::<Qp>(qp, "qp").map(|_| qp.cast::<ibv_qp_ex>()))
    }
}

fn modify_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: c_int) -> Result<(), Fail> {
    let q = handle::get::<Qp>(qp, "qp")?;
    // SAFETY: the program's attributes.
    let a = unsafe { attr.as_ref() }.ok_or_else(|| Fail::inval("attr", "NULL"))?;
    let mask = mask as u32;
    if mask & IBV_QP_RATE_LIMIT != 0 {
        return Err(Fail::unsupported("IBV_QP_RATE_LIMIT"));
    }
    let known = (IBV_QP_DEST_QPN << 1) - 1;
    if mask & !known != 0 {
        return Err(Fail::inval(
            "attr_mask",
            format!("{mask:#x} has unknown bits"),
        ));
    }
    let m = QpAttrMask::from_bits_truncate(mask);
    let mut x = QpAttr::default();
    if m.contains(QpAttrMask::STATE) {
        x.state = state_of(a.qp_state, "attr->qp_state")?;
    }
    if m.contains(QpAttrMask::CUR_STATE) {
        x.cur_state = state_of(a.cur_qp_state, "attr->cur_qp_state")?;
    }
    if m.contains(QpAttrMask::ACCESS_FLAGS) {
        // Only the remote rights (and LOCAL_WRITE) mean anything for a QP;
        // the kernel's rxe takes any other bits and ignores them.
        let qp_bits = IBV_ACCESS_LOCAL_WRITE
            | IBV_ACCESS_REMOTE_WRITE
            | IBV_ACCESS_REMOTE_READ
            | IBV_ACCESS_REMOTE_ATOMIC;
        x.access = access_of(a.qp_access_flags & qp_bits, "attr->qp_access_flags")?;
    }
    if m.contains(QpAttrMask::AV) {
        x.av = Some(av_of(&a.ah_attr, "attr->ah_attr")?);
    }
    if m.contains(QpAttrMask::PATH_MTU) {
        x.path_mtu = mtu_of(a.path_mtu)?;
    }
    if m.contains(QpAttrMask::ALT_PATH) {
        // EINVAL, as the kernel's rxe answers: it has no alternate path
        return Err(Fail::inval(
            "attr_mask",
            "IBV_QP_ALT_PATH: the device has no alternate path",
        ));
    }
    x.pkey_index = a.pkey_index;
    x.port = a.port_num;
    x.qkey = a.qkey;
    // As the kernel's rxe takes them: the counts and the RNR timer are
    // fields of 3 and 5 bits on the wire, so larger values are cut to
    // them; PSNs are 24 bits; more responder resources than the device has
    // are the device's maximum.
    x.timeout = a.timeout;
    x.retry_cnt = a.retry_cnt.min(7);
    x.rnr_retry = a.rnr_retry.min(7);
    x.rq_psn = Psn::new(a.rq_psn & 0xff_ffff);
    x.sq_psn = Psn::new(a.sq_psn & 0xff_ffff);
    x.max_rd_atomic = a.max_rd_atomic;
    x.max_dest_rd_atomic = a
        .max_dest_rd_atomic
        .min(q.open.rx.query_device().caps.max_qp_rd_atom);
    x.min_rnr_timer = a.min_rnr_timer & 0x1f;
    x.dest_qpn = a.dest_qp_num;
    x.en_sqd_async_notify = a.en_sqd_async_notify != 0;
    for (bit, v, name, max) in [
        (
            QpAttrMask::DEST_QPN,
            a.dest_qp_num,
            "attr->dest_qp_num",
            0xff_ffff,
        ),
        (
            QpAttrMask::TIMEOUT,
            u32::from(a.timeout),
            "attr->timeout",
            31,
        ),
    ] {
        if m.contains(bit) && v > max {
            return Err(Fail::inval(name, format!("{v} is more than {max}")));
        }
    }
    q.rx.modify(&x, m)?;
    q.applied.fetch_or(mask, Ordering::AcqRel);
    if m.contains(QpAttrMask::STATE) {
        // SAFETY: the QP's own state field, which libibverbs also updates here.
        unsafe { (*q.qp.get()).qp_base.state = a.qp_state };
    }
    Ok(())
}

entry! {
    pub unsafe extern "C" fn ibv_modify_qp(
        qp: *mut ibv_qp,
        attr: *mut ibv_qp_attr,
        attr_mask: c_int,
    ) -> c_int {
        int_result(VERB, modify_qp(qp, attr, attr_mask))
    }
}

entry! {
    pub unsafe extern "C" fn ibv_query_qp(
        qp: *mut ibv_qp,
        attr: *mut ibv_qp_attr,
        _attr_mask: c_int,
        init_attr: *mut ibv_qp_init_attr,
    ) -> c_int {
        let r = handle::get::<Qp>(qp, "qp").and_then(|q| {
            if attr.is_null() || init_attr.is_null() {
                return Err(Fail::inval(
                    if attr.is_null() { "attr" } else { "init_attr" },
                    "NULL",
                ));
            }
            let (x, cap) = q.rx.query()?;
            // An attribute no modify has set reads as the kernel's rxe shows
            // it: zero (the path MTU 256), whatever the engine runs with.
            let set = q.applied.load(Ordering::Acquire);
            let has = |bit: u32| set & bit != 0;
            let or0 = |bit: u32, v: u8| if has(bit) { v } else { 0 };
            // SAFETY: plain data.
            let mut o: ibv_qp_attr = unsafe { std::mem::zeroed() };
            o.qp_state = x.state.ibv_value();
            o.cur_qp_state = x.state.ibv_value();
            o.path_mtu = if has(IBV_QP_PATH_MTU) {
                x.path_mtu as ibv_mtu
            } else {
                IBV_MTU_256
            };
            o.path_mig_state = IBV_MIG_MIGRATED;
            o.qkey = if has(IBV_QP_QKEY) { x.qkey } else { 0 };
            o.rq_psn = if has(IBV_QP_RQ_PSN) {
                x.rq_psn.value()
            } else {
                0
            };
            o.sq_psn = if has(IBV_QP_SQ_PSN) {
                x.sq_psn.value()
            } else {
                0
            };
            o.dest_qp_num = x.dest_qpn;
            o.qp_access_flags = x.access.bits();
            let c = ibv_qp_cap {
                max_send_wr: cap.max_send_wr,
                max_recv_wr: cap.max_recv_wr,
                max_send_sge: cap.max_send_sge,
                max_recv_sge: cap.max_recv_sge,
                max_inline_data: cap.max_inline_data,
            };
            o.cap = c;
            if let Some(av) = &x.av {
                o.ah_attr = ah_attr_of(av);
            }
            // RoCE: every path has a GRH
            o.ah_attr.is_global = 1;
            o.pkey_index = x.pkey_index;
            o.en_sqd_async_notify = u8::from(x.en_sqd_async_notify);
            o.sq_draining = 0;
            o.max_rd_atomic = or0(IBV_QP_MAX_QP_RD_ATOMIC, x.max_rd_atomic);
            o.max_dest_rd_atomic = or0(IBV_QP_MAX_DEST_RD_ATOMIC, x.max_dest_rd_atomic);
            o.min_rnr_timer = or0(IBV_QP_MIN_RNR_TIMER, x.min_rnr_timer);
            o.port_num = or0(IBV_QP_PORT, x.port);
            o.timeout = or0(IBV_QP_TIMEOUT, x.timeout);
            o.retry_cnt = or0(IBV_QP_RETRY_CNT, x.retry_cnt);
            o.rnr_retry = or0(IBV_QP_RNR_RETRY, x.rnr_retry);
            // SAFETY: checked non-NULL; the program's outputs.
            unsafe {
                attr.write(o);
                let i = &mut *init_attr;
                let b = &(*q.qp.get()).qp_base;
                i.qp_context = b.qp_context;
                i.send_cq = b.send_cq;
                i.recv_cq = b.recv_cq;
                i.srq = b.srq;
                i.cap = c;
                i.qp_type = b.qp_type;
                i.sq_sig_all = c_int::from(q.sq_sig_all);
            }
            Ok(())
        });
        int_result(VERB, r)
    }
}

entry! {
    pub unsafe extern "C" fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int {
        let r = handle::get::<Qp>(qp, "qp").and_then(|q| {
            if !q.mcast.lock().is_empty() {
                // As the kernel's uverbs: detach first.
                return Err(Fail::new(
                    libc::EBUSY,
                    "qp: still attached to a multicast group (ibv_detach_mcast first)",
                ));
            }
            Ok(q)
        });
        let r = r.map(|q| {
            let route = q.open.routes.lock().qps.remove(&q.rx.qp_num());
            if let Some(r) = route {
                r.forget();
            }
            q.async_events.wait_all_acked();
            handle::remove(qp.cast::<Qp>());
            // SAFETY: the PD, CQs and SRQ outlive their QPs (destroying them
            // is EBUSY while QPs use them).
            unsafe {
                (*q.pd).users.fetch_sub(1, Ordering::AcqRel);
                (*q.send_cq).users.fetch_sub(1, Ordering::AcqRel);
                (*q.recv_cq).users.fetch_sub(1, Ordering::AcqRel);
                if let Some(s) = q.srq.as_ref() {
                    s.users.fetch_sub(1, Ordering::AcqRel);
                }
            }
            // SAFETY: was a live Box<Qp>.
            drop(unsafe { Box::from_raw(qp.cast::<Qp>()) });
        });
        int_result(VERB, r)
    }
}

/// `ibv_ack_async_event` for a QP event.
///
/// # Safety
/// `qp` is what `ibv_get_async_event` handed out.
pub unsafe fn ack_qp_async(qp: *mut ibv_qp) {
    if let Ok(q) = handle::get::<Qp>(qp, "qp") {
        q.async_events.acked(1);
    }
}

/// Sets `*bad` (when the program gave a place for it).
///
/// # Safety
/// `bad` is NULL or the program's output slot.
unsafe fn set_bad<T>(bad: *mut *mut T, p: *mut T) {
    if !bad.is_null() {
        // SAFETY: the caller's contract.
        unsafe { *bad = p };
    }
}

/// How a post went, as `ibv_post_send`/`ibv_post_recv` report it: the
/// engine's refusal of the `index`-th WR (or, failing that, the first
/// malformed one) goes to `*bad` with its errno; 0 when all were posted.
///
/// # Safety
/// `bad` is NULL or the program's output slot; `ptrs` are the WRs posted.
unsafe fn report_post<T>(
    verb: &str,
    posted: Result<(), rxe_verbs::Error>,
    ptrs: &[*mut T],
    first: *mut T,
    failed: Option<(*mut T, Fail)>,
    bad: *mut *mut T,
) -> c_int {
    let (at, f) = match (posted, failed) {
        (Ok(()), None) => return 0,
        (Err(e), _) => {
            let index = match &e {
                rxe_verbs::Error::BadWorkRequest { index, .. } => *index,
                _ => 0,
            };
            (ptrs.get(index).copied().unwrap_or(first), Fail::from(e))
        }
        (Ok(()), Some(x)) => x,
    };
    note(verb, &f.why);
    // SAFETY: the caller's contract.
    unsafe { set_bad(bad, at) };
    f.errno
}

entry! {
    data;
    unsafe extern "C" fn ibv_post_send(
        qp: *mut ibv_qp,
        wr: *mut ibv_send_wr,
        bad_wr: *mut *mut ibv_send_wr,
    ) -> c_int {
        if qp.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: the program's QP, from its own inline ibv_post_send.
        let q = unsafe { qp_fast(qp) };
        let mut list = Vec::new();
        let mut ptrs = Vec::new();
        let mut failed = None;
        let mut p = wr;
        // At most one more than the queue holds: the engine refuses that one.
        while !p.is_null() && list.len() <= q.max_send_wr as usize {
            // SAFETY: the program's work request list.
            let w = unsafe { &*p };
            // SAFETY: as above, with what it points to.
            match unsafe { send_wr(w, q.limits) } {
                Ok(x) => {
                    list.push(x);
                    ptrs.push(p);
                }
                Err(f) => {
                    failed = Some((p, f));
                    break;
                }
            }
            p = w.next;
        }
        let posted = q.rx.post_send(&list);
        // SAFETY: the program's list and output slot.
        unsafe { report_post(VERB, posted, &ptrs, wr, failed, bad_wr) }
    }
}

/// Receive WRs from a program's list: at most `max + 1` of them, stopping
/// at the first malformed one.
///
/// # Safety
/// `wr` is the program's list.
unsafe fn recv_list(
    wr: *mut ibv_recv_wr,
    max: u32,
    max_sge: u32,
) -> (
    Vec<RecvWr>,
    Vec<*mut ibv_recv_wr>,
    Option<(*mut ibv_recv_wr, Fail)>,
) {
    let mut list = Vec::new();
    let mut ptrs = Vec::new();
    let mut p = wr;
    while !p.is_null() && list.len() <= max as usize {
        // SAFETY: the caller's contract.
        let w = unsafe { &*p };
        // SAFETY: as above.
        match unsafe { sges(w.sg_list, w.num_sge, max_sge) } {
            Ok(sg_list) => {
                list.push(RecvWr {
                    wr_id: w.wr_id,
                    sg_list,
                });
                ptrs.push(p);
            }
            Err(f) => return (list, ptrs, Some((p, f))),
        }
        p = w.next;
    }
    (list, ptrs, None)
}

/// Posts a receive list through `post` and reports as `ibv_post_recv` does.
///
/// # Safety
/// `wr` and `bad_wr` are the program's.
unsafe fn post_recv_list(
    verb: &str,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
    max: u32,
    max_sge: u32,
    post: impl FnOnce(&[RecvWr]) -> Result<(), rxe_verbs::Error>,
) -> c_int {
    // SAFETY: the caller's contract.
    let (list, ptrs, failed) = unsafe { recv_list(wr, max, max_sge) };
    let posted = post(&list);
    // SAFETY: the caller's contract.
    unsafe { report_post(verb, posted, &ptrs, wr, failed, bad_wr) }
}

entry! {
    data;
    unsafe extern "C" fn ibv_post_recv(
        qp: *mut ibv_qp,
        wr: *mut ibv_recv_wr,
        bad_wr: *mut *mut ibv_recv_wr,
    ) -> c_int {
        if qp.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: the program's QP, from its own inline ibv_post_recv.
        let q = unsafe { qp_fast(qp) };
        if !q.srq.is_null() {
            note(
                VERB,
                "the QP uses a shared receive queue: post to it",
            );
            // SAFETY: the program's output slot.
            unsafe { set_bad(bad_wr, wr) };
            return libc::EINVAL;
        }
        // SAFETY: the program's list and slot.
        unsafe {
            post_recv_list(
                VERB,
                wr,
                bad_wr,
                q.max_recv_wr,
                q.max_recv_sge,
                |l| q.rx.post_recv(l),
            )
        }
    }
}

// ---- shared receive queues -------------------------------------------------

entry! {
    pub unsafe extern "C" fn ibv_create_srq(
        pd: *mut ibv_pd,
        init: *mut ibv_srq_init_attr,
    ) -> *mut ibv_srq {
        let r = (|| {
            let p = handle::get::<Pd>(pd, "pd")?;
            // SAFETY: the program's attributes.
            let a = unsafe { init.as_mut() }.ok_or_else(|| Fail::inval("srq_init_attr", "NULL"))?;
            let caps = p.open.rx.query_device().caps;
            if a.attr.max_wr == 0 || a.attr.max_wr > caps.max_qp_wr {
                return Err(Fail::inval(
                    "srq_init_attr->attr.max_wr",
                    format!("{}: must be 1 to {}", a.attr.max_wr, caps.max_qp_wr),
                ));
            }
            if a.attr.max_sge > caps.max_srq_sge {
                return Err(Fail::inval(
                    "srq_init_attr->attr.max_sge",
                    format!("{}: at most {}", a.attr.max_sge, caps.max_srq_sge),
                ));
            }
            let rx = p.open.rx.create_srq_with_limit(
                &p.rx,
                a.attr.max_wr,
                a.attr.max_sge,
                a.attr.srq_limit,
            )?;
            // What it holds (the ring rounded, at least one SGE); the
            // program sees the SGE count (not the rounded size), as the
            // kernel's create_srq answers.
            let (max_wr, max_sge) = rx.size().unwrap_or((a.attr.max_wr, a.attr.max_sge));
            a.attr.max_sge = max_sge;
            let c = handle::get::<Ctx>(p.pd.context, "context")?;
            let async_events = Arc::new(EventCount::default());
            let limit = Arc::new(AtomicU32::new(a.attr.srq_limit));
            let id = rx.id();
            let s = Box::into_raw(Box::new(Srq {
                srq: ibv_srq {
                    context: ibv_ctx(c),
                    srq_context: a.srq_context,
                    pd,
                    handle: id,
                    // SAFETY: pthread objects whose initializers are zeroes.
                    mutex: unsafe { std::mem::zeroed() },
                    // SAFETY: as above.
                    cond: unsafe { std::mem::zeroed() },
                    events_completed: 0,
                },
                rx,
                open: p.open.clone(),
                pd: std::ptr::from_ref(p),
                attr: Mutex::new(ibv_srq_attr {
                    max_wr,
                    max_sge,
                    srq_limit: 0,
                }),
                async_events: async_events.clone(),
                limit: limit.clone(),
                users: AtomicUsize::new(0),
            }));
            p.users.fetch_add(1, Ordering::AcqRel);
            p.open.routes.lock().srqs.insert(
                id,
                Route {
                    to: Arc::downgrade(&c.events) as Weak<CtxEvents>,
                    ptr: s as usize,
                    count: async_events,
                    disarm: Some(limit.clone()),
                },
            );
            handle::add(s);
            Ok(s.cast::<ibv_srq>())
        })();
        ptr_result(VERB, r)
    }
}

entry! {
    pub unsafe extern "C" fn ibv_modify_srq(
        srq: *mut ibv_srq,
        attr: *mut ibv_srq_attr,
        mask: c_int,
    ) -> c_int {
        let r = handle::get::<Srq>(srq, "srq").and_then(|s| {
            // SAFETY: the program's attributes.
            let a = unsafe { attr.as_ref() }.ok_or_else(|| Fail::inval("srq_attr", "NULL"))?;
            // Other mask bits are ignored, as the kernel's rxe_modify_srq does.
            let mask = mask as u32;
            // Both checked before either applies, as rxe_srq_chk_attr does:
            // the limit against the queue as it is, even when the same call
            // grows it (found by random seed 984939643).
            let max = s.attr.lock().max_wr;
            if mask & IBV_SRQ_LIMIT != 0 && a.srq_limit > max {
                return Err(Fail::inval(
                    "srq_attr->srq_limit",
                    format!("{} is more than max_wr {max}", a.srq_limit),
                ));
            }
            let both = IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT;
            if mask & both == both {
                // (and the limit stays armed above a queue that shrank,
                // as on the kernel: seeds 537743389, 538028340)
                let n = s.rx.resize_and_set_limit(a.max_wr, a.srq_limit)?;
                s.attr.lock().max_wr = n;
                s.limit.store(a.srq_limit, Ordering::Release);
                return Ok(());
            }
            if mask & IBV_SRQ_MAX_WR != 0 {
                let n = s.rx.resize(a.max_wr)?;
                s.attr.lock().max_wr = n;
            }
            if mask & IBV_SRQ_LIMIT != 0 {
                s.rx.set_limit(a.srq_limit)?;
                s.limit.store(a.srq_limit, Ordering::Release);
            }
            Ok(())
        });
        int_result(VERB, r)
    }
}

entry! {
    pub unsafe extern "C" fn ibv_query_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int {
        let r = handle::get::<Srq>(srq, "srq").and_then(|s| {
            if attr.is_null() {
                return Err(Fail::inval("srq_attr", "NULL"));
            }
            // SAFETY: checked non-NULL; the program's output.
            unsafe {
                attr.write(ibv_srq_attr {
                    srq_limit: s.limit.load(Ordering::Acquire),
                    ..*s.attr.lock()
                })
            };
            Ok(())
        });
        int_result(VERB, r)
    }
}

entry! {
    pub unsafe extern "C" fn ibv_destroy_srq(srq: *mut ibv_srq) -> c_int {
        let r = handle::get::<Srq>(srq, "srq").and_then(|s| {
            let n = s.users.load(Ordering::Acquire);
            if n > 0 {
                return Err(Fail::new(
                    libc::EBUSY,
                    format!("{n} queue pairs still use the shared receive queue"),
                ));
            }
            let route = s.open.routes.lock().srqs.remove(&s.rx.id());
            if let Some(r) = route {
                r.forget();
            }
            s.async_events.wait_all_acked();
            handle::remove(srq.cast::<Srq>());
            // SAFETY: the PD outlives its SRQs.
            unsafe { (*s.pd).users.fetch_sub(1, Ordering::AcqRel) };
            // SAFETY: was a live Box<Srq>.
            drop(unsafe { Box::from_raw(srq.cast::<Srq>()) });
            Ok(())
        });
        int_result(VERB, r)
    }
}

/// # Safety
/// `srq` is what `ibv_get_async_event` handed out.
pub unsafe fn ack_srq_async(srq: *mut ibv_srq) {
    if let Ok(s) = handle::get::<Srq>(srq, "srq") {
        s.async_events.acked(1);
    }
}

entry! {
    data;
    unsafe extern "C" fn ibv_post_srq_recv(
        srq: *mut ibv_srq,
        wr: *mut ibv_recv_wr,
        bad_wr: *mut *mut ibv_recv_wr,
    ) -> c_int {
        let s = match handle::get::<Srq>(srq, "srq") {
            Ok(s) => s,
            Err(_) => return libc::EINVAL,
        };
        let a = *s.attr.lock();
        // SAFETY: the program's list and slot.
        unsafe {
            post_recv_list(VERB, wr, bad_wr, a.max_wr, a.max_sge, |l| {
                s.rx.post_recv(l)
            })
        }
    }
}

// ---- address handles ---------------------------------------------------------

fn create_ah(pd: *mut ibv_pd, attr: *const ibv_ah_attr) -> Result<*mut ibv_ah, Fail> {
    let p = handle::get::<Pd>(pd, "pd")?;
    // SAFETY: the program's attributes.
    let a = unsafe { attr.as_ref() }.ok_or_else(|| Fail::inval("attr", "NULL"))?;
    if a.port_num == 0 {
        // the kernel's rdma_ah_attr checks refuse port 0
        return Err(Fail::inval("attr", "port_num 0: the device's port is 1"));
    }
    let av = av_of(a, "attr")?;
    let rx = p.rx.create_ah(av)?;
    let ah = Box::into_raw(Box::new(Ah {
        ah: ibv_ah {
            context: p.pd.context,
            pd,
            handle: 0,
        },
        rx,
        pd: std::ptr::from_ref(p),
    }));
    p.users.fetch_add(1, Ordering::AcqRel);
    handle::add(ah);
    Ok(ah.cast())
}

entry! {
    pub unsafe extern "C" fn ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
        ptr_result(VERB, create_ah(pd, attr))
    }
}

entry! {
    pub unsafe extern "C" fn ibv_destroy_ah(ah: *mut ibv_ah) -> c_int {
        let r = handle::get::<Ah>(ah, "ah").map(|a| {
            handle::remove(ah.cast::<Ah>());
            // SAFETY: the PD outlives its AHs.
            unsafe { (*a.pd).users.fetch_sub(1, Ordering::AcqRel) };
            // SAFETY: was a live Box<Ah>.
            drop(unsafe { Box::from_raw(ah.cast::<Ah>()) });
        });
        int_result(VERB, r)
    }
}

/// The sender's GID from the 40 bytes a UD receive starts with: an IPv6
/// header, or 20 bytes of anything and an IPv4 header (RoCE v2 over IPv4).
fn grh_source(g: &[u8; 40]) -> Option<(std::net::Ipv6Addr, u8, u8, u32)> {
    if g[20] >> 4 == 4 {
        let h = &g[20..];
        let src = std::net::Ipv4Addr::new(h[12], h[13], h[14], h[15]);
        return Some((src.to_ipv6_mapped(), h[8], h[1], 0));
    }
    if g[0] >> 4 == 6 {
        let mut s = [0u8; 16];
        s.copy_from_slice(&g[8..24]);
        let w = u32::from_be_bytes([g[0], g[1], g[2], g[3]]);
        return Some((
            std::net::Ipv6Addr::from(s),
            g[7],
            ((w >> 20) & 0xff) as u8,
            w & 0xf_ffff,
        ));
    }
    None
}

entry! {
    on_panic = -1;
    pub unsafe extern "C" fn ibv_init_ah_from_wc(
        context: *mut ibv_context,
        port_num: u8,
        wc: *mut ibv_wc,
        grh: *mut ibv_grh,
        ah_attr: *mut ibv_ah_attr,
    ) -> c_int {
        let r = (|| {
            let _ = handle::get::<Ctx>(context, "context")?;
            crate::device::check_port(port_num)?;
            // SAFETY: the program's completion.
            let w = unsafe { wc.as_ref() }.ok_or_else(|| Fail::inval("wc", "NULL"))?;
            if w.wc_flags & IBV_WC_GRH == 0 {
                return Err(Fail::inval(
                    "wc",
                    "has no GRH (IBV_WC_GRH): RoCE needs it to answer",
                ));
            }
            if grh.is_null() || ah_attr.is_null() {
                return Err(Fail::inval(
                    if grh.is_null() { "grh" } else { "ah_attr" },
                    "NULL",
                ));
            }
            // SAFETY: the 40 bytes of the GRH the program points at.
            let g: [u8; 40] = unsafe { grh.cast::<[u8; 40]>().read_unaligned() };
            let (sgid, hop, tclass, flow) = grh_source(&g)
                .ok_or_else(|| Fail::inval("grh", "holds neither an IPv4 nor an IPv6 header"))?;
            // SAFETY: plain data.
            let mut a: ibv_ah_attr = unsafe { std::mem::zeroed() };
            a.is_global = 1;
            a.port_num = port_num;
            a.grh.dgid.raw = sgid.octets();
            a.grh.hop_limit = hop.max(1);
            a.grh.traffic_class = tclass;
            a.grh.flow_label = flow;
            a.grh.sgid_index = 0;
            // SAFETY: checked non-NULL; the program's output.
            unsafe { ah_attr.write(a) };
            Ok(())
        })();
        crate::ffi::minus_one_result(VERB, r)
    }
}

entry! {
    pub unsafe extern "C" fn ibv_create_ah_from_wc(
        pd: *mut ibv_pd,
        wc: *mut ibv_wc,
        grh: *mut ibv_grh,
        port_num: u8,
    ) -> *mut ibv_ah {
        let r = handle::get::<Pd>(pd, "pd").and_then(|p| {
            // SAFETY: plain data.
            let mut a: ibv_ah_attr = unsafe { std::mem::zeroed() };
            // SAFETY: forwards the program's pointers.
            if unsafe { ibv_init_ah_from_wc(p.pd.context, port_num, wc, grh, &mut a) } != 0 {
                return Err(Fail::new(
                    std::io::Error::last_os_error()
                        .raw_os_error()
                        .unwrap_or(libc::EINVAL),
                    "ibv_init_ah_from_wc failed",
                ));
            }
            create_ah(pd, &a)
        });
        ptr_result(VERB, r)
    }
}

// ---- extended posting: ibv_wr_* ------------------------------------------------

/// The QP of an `ibv_qp_ex` pointer and its open batch (for the
/// `ibv_wr_*` verbs, inside their own guard).
///
/// # Safety
/// `qp` is the program's extended QP.
unsafe fn with_batch(qp: *mut ibv_qp_ex, f: impl FnOnce(&Qp, &mut Batch)) {
    // SAFETY: the caller's contract.
    let q = unsafe { qp_fast(qp.cast()) };
    let mut b = q.batch.lock();
    f(q, &mut b);
}

/// Starts a new WR of the batch with the QP's `wr_id` and `wr_flags`.
fn new_wr(q: &Qp, b: &mut Batch, opcode: SendOpcode) -> Option<usize> {
    if !b.open {
        b.error.get_or_insert((
            libc::EINVAL,
            "ibv_wr_* outside ibv_wr_start/ibv_wr_complete".into(),
        ));
        return None;
    }
    let known = IBV_SEND_FENCE | IBV_SEND_SIGNALED | IBV_SEND_SOLICITED | IBV_SEND_INLINE;
    // SAFETY: the fields the program set before this call, on this thread.
    let (wr_id, wr_flags) = unsafe { ((*q.qp.get()).wr_id, (*q.qp.get()).wr_flags) };
    let mut w = SendWr::new(wr_id, opcode);
    if wr_flags & !known != 0 {
        b.error.get_or_insert((
            libc::EINVAL,
            format!("wr_flags {wr_flags:#x} has unsupported bits"),
        ));
        return None;
    }
    w.flags = SendFlags::from_bits_truncate(wr_flags);
    b.wrs.push(w);
    Some(b.wrs.len() - 1)
}

macro_rules! wr_op {
    ($name:ident ( $($a:ident : $t:ty),* ) => $op:expr, |$w:ident| $body:block) => {
        entry! {
            data;
            unsafe extern "C" fn $name(qp: *mut ibv_qp_ex $(, $a: $t)*) {
                // SAFETY: the program's extended QP.
                unsafe {
                    with_batch(qp, |q, b| {
                        if let Some(i) = new_wr(q, b, $op) {
                            let $w = &mut b.wrs[i];
                            $body
                        }
                    })
                }
            }
        }
    };
}

wr_op!(ibv_wr_send() => SendOpcode::Send, |_w| {});
wr_op!(ibv_wr_send_imm(imm: __be32) => SendOpcode::SendWithImm, |w| { w.imm_data = u32::from_be(imm); });
wr_op!(ibv_wr_send_inv(rkey: u32) => SendOpcode::SendWithInv, |w| { w.invalidate_rkey = rkey; });
wr_op!(ibv_wr_local_inv(rkey: u32) => SendOpcode::LocalInv, |w| { w.invalidate_rkey = rkey; });
wr_op!(ibv_wr_rdma_write(rkey: u32, remote_addr: u64) => SendOpcode::RdmaWrite, |w| {
    w.rkey = rkey;
    w.remote_addr = remote_addr;
});
wr_op!(ibv_wr_rdma_write_imm(rkey: u32, remote_addr: u64, imm: __be32) => SendOpcode::RdmaWriteWithImm, |w| {
    w.rkey = rkey;
    w.remote_addr = remote_addr;
    w.imm_data = u32::from_be(imm);
});
wr_op!(ibv_wr_rdma_read(rkey: u32, remote_addr: u64) => SendOpcode::RdmaRead, |w| {
    w.rkey = rkey;
    w.remote_addr = remote_addr;
});
wr_op!(ibv_wr_atomic_cmp_swp(rkey: u32, remote_addr: u64, compare: u64, swap: u64) => SendOpcode::AtomicCmpSwap, |w| {
    w.rkey = rkey;
    w.remote_addr = remote_addr;
    w.compare_add = compare;
    w.swap = swap;
});
wr_op!(ibv_wr_atomic_fetch_add(rkey: u32, remote_addr: u64, add: u64) => SendOpcode::AtomicFetchAdd, |w| {
    w.rkey = rkey;
    w.remote_addr = remote_addr;
    w.compare_add = add;
});
entry! {
    data;
    /// `ibv_wr_atomic_write`: the 8 bytes at `atomic_wr` are read now (as
    /// rdma-core's rxe provider copies them into the WQE) and go as the
    /// request's inline payload.
    unsafe extern "C" fn ibv_wr_atomic_write(
        qp: *mut ibv_qp_ex,
        rkey: u32,
        remote_addr: u64,
        atomic_wr: *const c_void,
    ) {
        // SAFETY: the program's extended QP, and its 8 bytes at `atomic_wr`
        // (checked for NULL).
        unsafe {
            with_batch(qp, |q, b| {
                if atomic_wr.is_null() {
                    b.error.get_or_insert((
                        libc::EINVAL,
                        "ibv_wr_atomic_write: atomic_wr is NULL".into(),
                    ));
                    return;
                }
                let mut v = [0u8; 8];
                std::ptr::copy_nonoverlapping(atomic_wr.cast::<u8>(), v.as_mut_ptr(), 8);
                if let Some(i) = new_wr(q, b, SendOpcode::AtomicWrite) {
                    let w = &mut b.wrs[i];
                    w.rkey = rkey;
                    w.remote_addr = remote_addr;
                    w.inline_data = Some(v.to_vec());
                }
            })
        }
    }
}

/// Applies `f` to the batch's last WR (the one the setters complete).
fn last_wr(
    q: &Qp,
    b: &mut Batch,
    what: &str,
    f: impl FnOnce(&Qp, &mut SendWr) -> Result<(), Fail>,
) {
    let Some(w) = b.wrs.last_mut() else {
        b.error
            .get_or_insert((libc::EINVAL, format!("{what} before any ibv_wr_<opcode>")));
        return;
    };
    if let Err(e) = f(q, w) {
        b.error.get_or_insert((e.errno, e.why));
    }
}

entry! {
    data;
    unsafe extern "C" fn ibv_wr_set_sge(qp: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
        // SAFETY: the program's extended QP.
        unsafe {
            with_batch(qp, |q, b| {
                last_wr(q, b, "ibv_wr_set_sge", |_, w| {
                    w.sg_list = vec![Sge { addr, length, lkey }];
                    Ok(())
                })
            })
        }
    }
}

entry! {
    data;
    unsafe extern "C" fn ibv_wr_set_sge_list(
        qp: *mut ibv_qp_ex,
        num_sge: usize,
        sg: *const ibv_sge,
    ) {
        // SAFETY: the program's extended QP.
        unsafe {
            with_batch(qp, |q, b| {
                last_wr(q, b, "ibv_wr_set_sge_list", |q, w| {
                    let n = i32::try_from(num_sge)
                        .map_err(|_| Fail::inval("num_sge", "too large"))?;
                    // SAFETY: the program's list of num_sge entries.
                    w.sg_list = sges(sg, n, q.limits.max_sge)?;
                    Ok(())
                })
            })
        }
    }
}

entry! {
    data;
    unsafe extern "C" fn ibv_wr_set_inline_data(
        qp: *mut ibv_qp_ex,
        addr: *mut c_void,
        length: usize,
    ) {
        let buf = ibv_data_buf { addr, length };
        // SAFETY: forwards to the list form with one buffer.
        unsafe { ibv_wr_set_inline_data_list(qp, 1, &buf) }
    }
}

entry! {
    data;
    unsafe extern "C" fn ibv_wr_set_inline_data_list(
        qp: *mut ibv_qp_ex,
        num_buf: usize,
        bufs: *const ibv_data_buf,
    ) {
        // SAFETY: the program's extended QP.
        unsafe {
            with_batch(qp, |q, b| {
                last_wr(q, b, "ibv_wr_set_inline_data", |q, w| {
                    if num_buf > 0 && bufs.is_null() {
                        return Err(Fail::inval("buf_list", "NULL"));
                    }
                    let list = if num_buf == 0 {
                        &[][..]
                    } else {
                        // SAFETY: the program's num_buf buffers.
                        std::slice::from_raw_parts(bufs, num_buf)
                    };
                    let total: usize = list.iter().map(|d| d.length).sum();
                    if total > q.limits.max_inline as usize {
                        return Err(Fail::inval(
                            "inline data",
                            format!(
                                "{total} bytes, more than max_inline_data {}",
                                q.limits.max_inline
                            ),
                        ));
                    }
                    let mut out = Vec::with_capacity(total);
                    for d in list.iter().filter(|d| d.length > 0) {
                        if d.addr.is_null() {
                            return Err(Fail::inval("inline data", "addr is NULL"));
                        }
                        // SAFETY: the program's buffer of d.length bytes.
                        out.extend_from_slice(std::slice::from_raw_parts(
                            d.addr as *const u8,
                            d.length,
                        ));
                    }
                    w.inline_data = Some(out);
                    w.flags |= SendFlags::INLINE;
                    Ok(())
                })
            })
        }
    }
}

entry! {
    data;
    unsafe extern "C" fn ibv_wr_set_ud_addr(
        qp: *mut ibv_qp_ex,
        ah: *mut ibv_ah,
        remote_qpn: u32,
        remote_qkey: u32,
    ) {
        // SAFETY: the program's extended QP.
        unsafe {
            with_batch(qp, |q, b| {
                last_wr(q, b, "ibv_wr_set_ud_addr", |_, w| {
                    let a = handle::get::<Ah>(ah, "ah")?;
                    w.ud = Some(UdDest {
                        av: a.rx.av(),
                        remote_qpn,
                        remote_qkey,
                    });
                    Ok(())
                })
            })
        }
    }
}

entry! {
    data;
    unsafe extern "C" fn ibv_wr_bind_mw(
        qp: *mut ibv_qp_ex,
        mw: *mut ibv_mw,
        rkey: u32,
        info: *const ibv_mw_bind_info,
    ) {
        // SAFETY: the program's extended QP.
        unsafe {
            with_batch(qp, |q, b| {
                let Some(i) = new_wr(q, b, SendOpcode::BindMw) else {
                    return;
                };
                // SAFETY: the program's bind information.
                match crate::wr::bind_of(mw, rkey, info) {
                    Ok(bind) => b.wrs[i].bind = Some(bind),
                    Err(e) => {
                        b.error.get_or_insert((e.errno, e.why));
                    }
                }
            })
        }
    }
}

entry! {
    data;
    unsafe extern "C" fn ibv_wr_start(qp: *mut ibv_qp_ex) {
        // SAFETY: the program's extended QP.
        unsafe {
            with_batch(qp, |_, b| {
                *b = Batch {
                    open: true,
                    ..Batch::default()
                };
            })
        }
    }
}

entry! {
    data;
    unsafe extern "C" fn ibv_wr_abort(qp: *mut ibv_qp_ex) {
        // SAFETY: the program's extended QP.
        unsafe { with_batch(qp, |_, b| *b = Batch::default()) }
    }
}

entry! {
    data;
    unsafe extern "C" fn ibv_wr_complete(qp: *mut ibv_qp_ex) -> c_int {
        // SAFETY: the program's extended QP.
        let q = unsafe { qp_fast(qp.cast()) };
        let b = std::mem::take(&mut *q.batch.lock());
        if let Some((errno, why)) = b.error {
            note(VERB, &why);
            set_errno(errno);
            return errno;
        }
        if !b.open {
            note(VERB, "no ibv_wr_start");
            return libc::EINVAL;
        }
        match q.rx.post_send(&b.wrs) {
            Ok(()) => 0,
            Err(e) => int_result(VERB, Err(Fail::from(e))),
        }
    }
}

fn set_wr_ops(ex: &mut ibv_qp_ex) {
    ex.wr_send = Some(ibv_wr_send);
    ex.wr_send_imm = Some(ibv_wr_send_imm);
    ex.wr_send_inv = Some(ibv_wr_send_inv);
    ex.wr_local_inv = Some(ibv_wr_local_inv);
    ex.wr_rdma_write = Some(ibv_wr_rdma_write);
    ex.wr_rdma_write_imm = Some(ibv_wr_rdma_write_imm);
    ex.wr_rdma_read = Some(ibv_wr_rdma_read);
    ex.wr_atomic_cmp_swp = Some(ibv_wr_atomic_cmp_swp);
    ex.wr_atomic_fetch_add = Some(ibv_wr_atomic_fetch_add);
    ex.wr_atomic_write = Some(ibv_wr_atomic_write);
    ex.wr_bind_mw = Some(ibv_wr_bind_mw);
    ex.wr_set_sge = Some(ibv_wr_set_sge);
    ex.wr_set_sge_list = Some(ibv_wr_set_sge_list);
    ex.wr_set_inline_data = Some(ibv_wr_set_inline_data);
    ex.wr_set_inline_data_list = Some(ibv_wr_set_inline_data_list);
    ex.wr_set_ud_addr = Some(ibv_wr_set_ud_addr);
    ex.wr_start = Some(ibv_wr_start);
    ex.wr_complete = Some(ibv_wr_complete);
    ex.wr_abort = Some(ibv_wr_abort);
}

/// The hot verbs of a context's `ops` table that are about QPs and SRQs.
pub fn fill_ops(v: &mut verbs_context) {
    v.context.ops.post_send = Some(ibv_post_send);
    v.context.ops.post_recv = Some(ibv_post_recv);
    v.context.ops.post_srq_recv = Some(ibv_post_srq_recv);
    v.create_qp_ex = Some(ibv_create_qp_ex);
}
