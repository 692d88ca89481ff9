//! Completion channels and completion queues, both the classic
//! `ibv_poll_cq` and the extended `ibv_cq_ex` polling
//! (`ibv_start_poll`/`ibv_next_poll`/`ibv_end_poll` with `ibv_wc_read_*`).

use crate::event_count::EventCount;
use crate::event_queue::EventQueue;
use crate::events::EventPipe;
use crate::ffi::{entry, int_result, minus_one_result, note, ptr_result, set_errno, Fail};
use crate::handle::{self};
use crate::objects::{ibv_ctx, Channel, Cq, Ctx, CtxEvents, Route};
use crate::sys::*;
use crate::wr::{fill_wc, sl_of, wc_flags, wc_opcode, wc_status};
use parking_lot::Mutex;
use rxe_core::types::Completion;
use std::cell::UnsafeCell;
use std::collections::{HashMap, VecDeque};
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

entry! {
    pub unsafe extern "C" fn ibv_create_comp_channel(
        context: *mut ibv_context,
    ) -> *mut ibv_comp_channel {
        let r = handle::get::<Ctx>(context, "context").and_then(|c| {
            let rx = c.open.rx.try_create_comp_channel()?;
            let pipe = EventPipe::new()
                .map_err(|e| Fail::new(e.raw_os_error().unwrap_or(libc::EMFILE), e.to_string()))?;
            let fd = pipe.fd();
            let q = Arc::new(EventQueue::new(pipe));
            let to = q.clone();
            rx.set_notify(Box::new(move |cq| to.push(cq)))?;
            let ch = Box::into_raw(Box::new(Channel {
                ch: ibv_comp_channel {
                    context: ibv_ctx(c),
                    fd,
                    refcnt: 0,
                },
                rx,
                q,
                cqs: Mutex::new(HashMap::new()),
                open: c.open.clone(),
            }));
            handle::add(ch);
            Ok(ch.cast::<ibv_comp_channel>())
        });
        ptr_result(VERB, r)
    }
}

entry! {
    pub unsafe extern "C" fn ibv_destroy_comp_channel(channel: *mut ibv_comp_channel) -> c_int {
        let r = handle::get::<Channel>(channel, "channel").and_then(|c| {
            if !c.cqs.lock().is_empty() {
                return Err(Fail::new(
                    libc::EBUSY,
                    "completion queues still use the channel",
                ));
            }
            handle::remove(channel.cast::<Channel>());
            // SAFETY: was a live Box<Channel>.
            drop(unsafe { Box::from_raw(channel.cast::<Channel>()) });
            Ok(())
        });
        int_result(VERB, r)
    }
}

/// Our CQ, unchecked: the hot path (the program's own inline calls).
///
/// # Safety
/// `p` must be a CQ this library created and the program has not destroyed.
unsafe fn cq_fast<'a>(p: *mut ibv_cq) -> &'a Cq {
    // SAFETY: the caller's contract.
    unsafe { &*(p as *const Cq) }
}

struct CqArgs {
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
}

fn create_cq(context: *mut ibv_context, a: CqArgs) -> Result<*mut Cq, Fail> {
    let c = handle::get::<Ctx>(context, "context")?;
    let max = c.open.rx.query_device().caps.max_cqe;
    if a.cqe < 1 || a.cqe as u32 > max {
        return Err(Fail::inval("cqe", format!("{}: must be 1 to {max}", a.cqe)));
    }
    if a.comp_vector != 0 {
        return Err(Fail::inval(
            "comp_vector",
            format!("{}: the device has 1 completion vector", a.comp_vector),
        ));
    }
    let ch = if a.channel.is_null() {
        None
    } else {
        Some(handle::get::<Channel>(a.channel, "channel")?)
    };
    let rx = c.open.rx.create_cq(a.cqe as u32, ch.map(|c| &c.rx))?;
    let async_events = Arc::new(EventCount::default());
    // SAFETY: ibv_cq_ex is plain data; all zeroes is valid.
    let mut ex: ibv_cq_ex = unsafe { std::mem::zeroed() };
    ex.context = ibv_ctx(c);
    ex.channel = a.channel;
    ex.cq_context = a.cq_context;
    ex.cqe = rx.capacity() as c_int;
    ex.handle = rx.id();
    set_ex_ops(&mut ex);
    let id = rx.id();
    let cq = Box::into_raw(Box::new(Cq {
        cq: UnsafeCell::new(ex),
        rx,
        open: c.open.clone(),
        channel: ch.map_or(std::ptr::null(), std::ptr::from_ref),
        comp_events: EventCount::default(),
        async_events: async_events.clone(),
        taken: Mutex::new(VecDeque::new()),
        taken_any: AtomicBool::new(false),
        current: Mutex::new(None),
        users: AtomicUsize::new(0),
        ud_sl: if c.open.rx.device().addr().is_ipv4() {
            2
        } else {
            1
        },
    }));
    if let Some(ch) = ch {
        ch.cqs.lock().insert(id, cq as usize);
    }
    c.open.routes.lock().cqs.insert(
        id,
        Route {
            to: Arc::downgrade(&c.events) as Weak<CtxEvents>,
            ptr: cq as usize,
            count: async_events,
            disarm: None,
        },
    );
    handle::add(cq);
    Ok(cq)
}

entry! {
    pub unsafe extern "C" fn ibv_create_cq(
        context: *mut ibv_context,
        cqe: c_int,
        cq_context: *mut c_void,
        channel: *mut ibv_comp_channel,
        comp_vector: c_int,
    ) -> *mut ibv_cq {
        let r = create_cq(
            context,
            CqArgs {
                cqe,
                cq_context,
                channel,
                comp_vector,
            },
        );
        ptr_result(VERB, r.map(|p| p.cast::<ibv_cq>()))
    }
}

entry! {
    unsafe extern "C" fn ibv_create_cq_ex(
        context: *mut ibv_context,
        attr: *mut ibv_cq_init_attr_ex,
    ) -> *mut ibv_cq_ex {
        let r = (|| {
            // SAFETY: the program's attributes.
            let a = unsafe { attr.as_ref() }.ok_or_else(|| Fail::inval("cq_attr", "NULL"))?;
            let known = IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD;
            if a.comp_mask & !known != 0 {
                // EOPNOTSUPP, as rdma-core's ibv_cmd_create_cq_ex answers
                return Err(Fail::new(
                    libc::EOPNOTSUPP,
                    format!("cq_attr->comp_mask: {:#x} has unknown bits", a.comp_mask),
                ));
            }
            if a.comp_mask & IBV_CQ_INIT_ATTR_MASK_PD != 0 && !a.parent_domain.is_null() {
                return Err(Fail::unsupported("parent domains"));
            }
            let supported = u64::from(IBV_WC_STANDARD_FLAGS);
            if a.wc_flags & !supported != 0 {
                return Err(Fail::unsupported(format!(
                    "cq_attr->wc_flags {:#x} (timestamps, CVLAN, flow tags and tag matching)",
                    a.wc_flags & !supported
                )));
            }
            if a.comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS != 0
                && a.flags
                    & !(IBV_CREATE_CQ_ATTR_SINGLE_THREADED | IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN)
                    != 0
            {
                return Err(Fail::inval(
                    "cq_attr->flags",
                    format!("{:#x} has unknown bits", a.flags),
                ));
            }
            let cqe =
                c_int::try_from(a.cqe).map_err(|_| Fail::inval("cq_attr->cqe", "too large"))?;
            let comp_vector = c_int::try_from(a.comp_vector).unwrap_or(c_int::MAX);
            create_cq(
                context,
                CqArgs {
                    cqe,
                    cq_context: a.cq_context,
                    channel: a.channel,
                    comp_vector,
                },
            )
        })();
        ptr_result(VERB, r.map(|p| p.cast::<ibv_cq_ex>()))
    }
}

entry! {
    pub unsafe extern "C" fn ibv_resize_cq(cq: *mut ibv_cq, cqe: c_int) -> c_int {
        let r = handle::get::<Cq>(cq, "cq").and_then(|c| {
            if cqe < 1 {
                return Err(Fail::inval("cqe", format!("{cqe}: must be at least 1")));
            }
            let n = c.rx.resize(cqe as u32)?;
            // SAFETY: the CQ's own field; the program reads it only between
            // its own calls (rdma-core's providers write it here too).
            unsafe { (*c.cq.get()).cqe = n as c_int };
            Ok(())
        });
        int_result(VERB, r)
    }
}

entry! {
    pub unsafe extern "C" fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int {
        let r = handle::get::<Cq>(cq, "cq").and_then(|c| {
            let n = c.users.load(Ordering::Acquire);
            if n > 0 {
                return Err(Fail::new(
                    libc::EBUSY,
                    format!("{n} queue pairs still use the completion queue"),
                ));
            }
            let id = c.rx.id();
            let route = c.open.routes.lock().cqs.remove(&id);
            if let Some(r) = route {
                r.forget();
            }
            // SAFETY: the channel outlives its CQs (destroying it is EBUSY while they exist).
            if let Some(ch) = unsafe { c.channel.as_ref() } {
                ch.cqs.lock().remove(&id);
            }
            // As libibverbs: wait until every event handed out is acknowledged.
            c.comp_events.wait_all_acked();
            c.async_events.wait_all_acked();
            handle::remove(cq.cast::<Cq>());
            let channel = c.channel;
            // SAFETY: was a live Box<Cq>. Dropping it destroys the engine's
            // CQ, after which no event of it is queued any more.
            drop(unsafe { Box::from_raw(cq.cast::<Cq>()) });
            // Events of the CQ the program never took are dropped with it,
            // as the kernel drops them, and the channel's fd shows them no
            // more.
            // SAFETY: the channel outlives its CQs.
            if let Some(ch) = unsafe { channel.as_ref() } {
                ch.q.withdraw(|c| *c == id);
            }
            Ok(())
        });
        int_result(VERB, r)
    }
}

entry! {
    on_panic = -1;
    pub unsafe extern "C" fn ibv_get_cq_event(
        channel: *mut ibv_comp_channel,
        cq: *mut *mut ibv_cq,
        cq_context: *mut *mut c_void,
    ) -> c_int {
        let r = handle::get::<Channel>(channel, "channel").and_then(|ch| {
            if cq.is_null() || cq_context.is_null() {
                return Err(Fail::inval(
                    if cq.is_null() { "cq" } else { "cq_context" },
                    "NULL",
                ));
            }
            loop {
                let id =
                    ch.q.take(Some)
                        .map_err(|e| Fail::new(e, "reading the channel's fd"))?;
                // An event of a CQ destroyed meanwhile is dropped, as the
                // kernel drops it. The event is counted before the
                // channel's lock is let go: `ibv_destroy_cq` takes the CQ
                // off the channel under that lock and then waits for the
                // events counted, so it either finds this one counted or
                // took the CQ off first (counting it after the lock let
                // `ibv_destroy_cq` free the CQ in between: a use after
                // free; see "Concurrency" in docs/reliability.md).
                let cqs = ch.cqs.lock();
                let Some(&addr) = cqs.get(&id) else {
                    continue;
                };
                // SAFETY: a CQ on the channel is live.
                let c = unsafe { &*(addr as *const Cq) };
                c.comp_events.reported(1);
                drop(cqs);
                // SAFETY: checked non-NULL; the program's outputs.
                unsafe {
                    *cq = addr as *mut ibv_cq;
                    *cq_context = (*c.cq.get()).cq_context;
                }
                return Ok(());
            }
        });
        minus_one_result(VERB, r)
    }
}

entry! {
    pub unsafe extern "C" fn ibv_ack_cq_events(cq: *mut ibv_cq, nevents: std::ffi::c_uint) {
        match handle::get::<Cq>(cq, "cq") {
            Ok(c) => c.comp_events.acked(u64::from(nevents)),
            Err(f) => note(VERB, f.why),
        }
    }
}

/// `ibv_ack_async_event` for a CQ error event.
///
/// # Safety
/// `cq` is what `ibv_get_async_event` handed out.
pub unsafe fn ack_async(cq: *mut ibv_cq) {
    if let Ok(c) = handle::get::<Cq>(cq, "cq") {
        c.async_events.acked(1);
    }
}

/// Moves up to `max` completions into `out`: those taken earlier first.
fn take(c: &Cq, max: usize, out: &mut Vec<Completion>) {
    if c.taken_any.load(Ordering::Acquire) {
        let mut t = c.taken.lock();
        while out.len() < max {
            match t.pop_front() {
                Some(x) => out.push(x),
                None => break,
            }
        }
        c.taken_any.store(!t.is_empty(), Ordering::Release);
    }
    if out.len() < max {
        let want = max - out.len();
        c.rx.poll_progress(out, want);
    }
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Vec<Completion>> = const { std::cell::RefCell::new(Vec::new()) };
}

entry! {
    data;
    on_panic = -1;
    unsafe extern "C" fn ibv_poll_cq(
        cq: *mut ibv_cq,
        num_entries: c_int,
        wc: *mut ibv_wc,
    ) -> c_int {
        if cq.is_null() || (wc.is_null() && num_entries > 0) {
            set_errno(libc::EINVAL);
            return -1;
        }
        let n = usize::try_from(num_entries).unwrap_or(0);
        if n == 0 {
            return 0;
        }
        // SAFETY: the program's CQ, from its own inline ibv_poll_cq.
        let c = unsafe { cq_fast(cq) };
        SCRATCH.with_borrow_mut(|v| {
            v.clear();
            take(c, n, v);
            for (i, x) in v.iter().enumerate() {
                // SAFETY: i < n entries the program gave.
                unsafe { wc.add(i).write(fill_wc(x, c.ud_sl)) };
            }
            v.len() as c_int
        })
    }
}

entry! {
    data;
    unsafe extern "C" fn ibv_req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
        let r = handle::get::<Cq>(cq, "cq").and_then(|c| {
            // Without a channel the arming has nowhere to report, and is
            // accepted all the same, as the kernel accepts it.
            Ok(c.rx.req_notify(solicited_only != 0)?)
        });
        int_result(VERB, r)
    }
}

/// The hot verbs of a context's `ops` table that are about CQs.
pub fn fill_ops(v: &mut verbs_context) {
    v.context.ops.poll_cq = Some(ibv_poll_cq);
    v.context.ops.req_notify_cq = Some(ibv_req_notify_cq);
    v.create_cq_ex = Some(ibv_create_cq_ex);
}

// ---- extended polling -----------------------------------------------------

/// Makes the next completion current; ENOENT when there is none.
fn advance(c: &Cq) -> c_int {
    let next = {
        let mut t = c.taken.lock();
        if t.is_empty() {
            let mut v = Vec::new();
            c.rx.poll_progress(&mut v, 32);
            t.extend(v);
        }
        let next = t.pop_front();
        c.taken_any.store(!t.is_empty(), Ordering::Release);
        next
    };
    let mut cur = c.current.lock();
    *cur = next;
    match next {
        Some(x) => {
            // SAFETY: the CQ's own fields, which the program reads after
            // this call on the same thread (the API is not thread-safe per CQ).
            unsafe {
                (*c.cq.get()).status = wc_status(x.status);
                (*c.cq.get()).wr_id = x.wr_id;
            }
            0
        }
        None => libc::ENOENT,
    }
}

entry! {
    data;
    unsafe extern "C" fn ibv_start_poll(cq: *mut ibv_cq_ex, attr: *mut ibv_poll_cq_attr) -> c_int {
        // SAFETY: the program's attributes, if any.
        if unsafe { attr.as_ref() }.is_some_and(|a| a.comp_mask != 0) {
            return libc::EINVAL;
        }
        // SAFETY: the program's CQ.
        advance(unsafe { cq_fast(cq.cast()) })
    }
}

entry! {
    data;
    unsafe extern "C" fn ibv_next_poll(cq: *mut ibv_cq_ex) -> c_int {
        // SAFETY: the program's CQ.
        advance(unsafe { cq_fast(cq.cast()) })
    }
}

entry! {
    data;
    unsafe extern "C" fn ibv_end_poll(cq: *mut ibv_cq_ex) {
        // SAFETY: the program's CQ.
        *unsafe { cq_fast(cq.cast()) }.current.lock() = None;
    }
}

/// Reads a field of the current completion (the `ibv_wc_read_*` verbs
/// run it inside their own guard).
fn current<R: Default>(cq: *mut ibv_cq_ex, f: impl FnOnce(&Completion) -> R) -> R {
    // SAFETY: the program's CQ.
    let c = unsafe { cq_fast(cq.cast()) };
    c.current.lock().as_ref().map(f).unwrap_or_default()
}

/// `ibv_wc_read_NAME(cq) -> T`: the field of the current completion
/// that `read` takes, on the data path.
macro_rules! wc_read {
    ($($name:ident -> $t:ty = |$cq:ident| $read:expr;)*) => {
        $(entry! {
            data;
            unsafe extern "C" fn $name($cq: *mut ibv_cq_ex) -> $t {
                $read
            }
        })*
    };
}

wc_read! {
    ibv_wc_read_opcode -> ibv_wc_opcode = |cq| current(cq, |x| wc_opcode(x.opcode));
    ibv_wc_read_vendor_err -> u32 = |_cq| 0;
    ibv_wc_read_byte_len -> u32 = |cq| current(cq, |x| x.byte_len);
    ibv_wc_read_imm_data -> __be32 = |cq| current(cq, |x| {
        x.imm_data
            .or(x.invalidated_rkey.map(u32::from_be))
            .unwrap_or(0)
            .to_be()
    });
    ibv_wc_read_qp_num -> u32 = |cq| current(cq, |x| x.qp_num);
    ibv_wc_read_src_qp -> u32 = |cq| current(cq, |x| x.src_qp);
    ibv_wc_read_wc_flags -> std::ffi::c_uint = |cq| current(cq, wc_flags);
    ibv_wc_read_slid -> u32 = |_cq| 0;
    ibv_wc_read_sl -> u8 = |cq| {
        // SAFETY: the program's CQ.
        let ud_sl = unsafe { cq_fast(cq.cast()) }.ud_sl;
        current(cq, |x| sl_of(x, ud_sl))
    };
    ibv_wc_read_dlid_path_bits -> u8 = |_cq| 0;
}

fn set_ex_ops(ex: &mut ibv_cq_ex) {
    ex.start_poll = Some(ibv_start_poll);
    ex.next_poll = Some(ibv_next_poll);
    ex.end_poll = Some(ibv_end_poll);
    ex.read_opcode = Some(ibv_wc_read_opcode);
    ex.read_vendor_err = Some(ibv_wc_read_vendor_err);
    ex.read_byte_len = Some(ibv_wc_read_byte_len);
    ex.read_imm_data = Some(ibv_wc_read_imm_data);
    ex.read_qp_num = Some(ibv_wc_read_qp_num);
    ex.read_src_qp = Some(ibv_wc_read_src_qp);
    ex.read_wc_flags = Some(ibv_wc_read_wc_flags);
    ex.read_slid = Some(ibv_wc_read_slid);
    ex.read_sl = Some(ibv_wc_read_sl);
    ex.read_dlid_path_bits = Some(ibv_wc_read_dlid_path_bits);
}
