//! Open devices (`ibv_context`), what they answer (`ibv_query_device`,
//! `ibv_query_port`, `ibv_query_gid`, ...) and their asynchronous events.
//!
//! All contexts of one device in a process share one engine ([`DevOpen`]):
//! the device's address is bound once. Each context has its own
//! `async_fd`, and an event goes to the context that created the object it
//! is about.

use crate::device::{check_port, dev_of, device_attr, port_attr};
use crate::event_queue::EventQueue;
use crate::events::EventPipe;
use crate::ffi::{arg, arg_mut, entry, int_result, minus_one_result, ptr_result, Fail};
use crate::handle;
use crate::native;
use crate::objects::{ibv_ctx, Ctx, CtxEvents, DevOpen};
use crate::sys::*;
use std::ffi::{c_int, c_void};
use std::mem::size_of;
use std::sync::Arc;

entry! {
    pub unsafe extern "C" fn ibv_open_device(device: *mut ibv_device) -> *mut ibv_context {
        ptr_result(VERB, open_device(device))
    }
}

/// `IB_UVERBS_DEVICE_ATOMIC_WRITE` of `<rdma/ib_user_verbs.h>` (in
/// `device_cap_flags_ex`; verbs.h has no name for it).
const IB_UVERBS_DEVICE_ATOMIC_WRITE: u64 = 1 << 40;
fn open_device(device: *mut ibv_device) -> Result<*mut ibv_context, Fail> {
    let d = dev_of(device)?;
    let open = {
        let mut w = d.open.lock();
        match w.upgrade() {
            Some(o) => o,
            None => {
                let o = DevOpen::open(d)?;
                *w = Arc::downgrade(&o);
                o
            }
        }
    };
    let pipe = EventPipe::new()
        .map_err(|e| Fail::new(e.raw_os_error().unwrap_or(libc::EMFILE), e.to_string()))?;
    let events = Arc::new(CtxEvents {
        q: EventQueue::new(pipe),
    });
    // SAFETY: verbs_context is plain data (pointers, integers, optional
    // function pointers, a pthread mutex whose initializer is all zeroes).
    let mut v: verbs_context = unsafe { std::mem::zeroed() };
    v.sz = size_of::<verbs_context>();
    v.query_port = Some(query_port_ex);
    v.query_device_ex = Some(ibv_query_device_ex);
    crate::cq::fill_ops(&mut v);
    crate::qp::fill_ops(&mut v);
    crate::mw::fill_ops(&mut v);
    let c = &mut v.context;
    c.device = std::ptr::from_ref(&d.dev).cast_mut();
    let cmd = crate::import::CmdFd::open().map_err(|e| {
        Fail::new(
            e.raw_os_error().unwrap_or(libc::EMFILE),
            format!("cmd_fd: {e}"),
        )
    })?;
    c.cmd_fd = cmd.fd();
    c.async_fd = events.q.fd().fd();
    c.num_comp_vectors = 1;
    c.abi_compat = usize::MAX as *mut c_void; // __VERBS_ABI_IS_EXTENDED
    let ctx = Box::new(Ctx {
        v,
        dev: d,
        open,
        events,
        cmd,
    });
    let p = Box::into_raw(ctx);
    handle::add(p);
    // SAFETY: just allocated.
    Ok(ibv_ctx(unsafe { &*p }))
}

entry! {
    pub unsafe extern "C" fn ibv_close_device(context: *mut ibv_context) -> c_int {
        let r = handle::get::<Ctx>(context, "context").map(|c| {
            let addr = std::ptr::from_ref(c) as usize;
            handle::remove(addr as *const Ctx);
            // SAFETY: the context was a Box<Ctx> at addr, now no longer live.
            drop(unsafe { Box::from_raw(addr as *mut Ctx) });
        });
        minus_one_result(VERB, r)
    }
}

entry! {
    pub unsafe extern "C" fn ibv_query_device(
        context: *mut ibv_context,
        device_attr_out: *mut ibv_device_attr,
    ) -> c_int {
        let r = handle::get::<Ctx>(context, "context").and_then(|c| {
            // SAFETY: the program's output struct.
            let out = unsafe { arg_mut(device_attr_out, "device_attr") }?;
            *out = device_attr(&c.open.rx.query_device());
            Ok(())
        });
        int_result(VERB, r)
    }
}

entry! {
    unsafe extern "C" fn ibv_query_device_ex(
        context: *mut ibv_context,
        input: *const ibv_query_device_ex_input,
        attr: *mut ibv_device_attr_ex,
        attr_size: usize,
    ) -> c_int {
        let r = handle::get::<Ctx>(context, "context").and_then(|c| {
            // SAFETY: the program's input, if any.
            if let Some(i) = unsafe { input.as_ref() } {
                if i.comp_mask != 0 {
                    return Err(Fail::inval(
                        "input->comp_mask",
                        format!("{:#x}: no such input", i.comp_mask),
                    ));
                }
            }
            if attr.is_null() {
                return Err(Fail::inval("attr", "NULL"));
            }
            if attr_size < size_of::<ibv_device_attr>() {
                return Err(Fail::inval(
                    "attr_size",
                    format!("{attr_size} is smaller than struct ibv_device_attr"),
                ));
            }
            // SAFETY: plain data.
            let mut ex: ibv_device_attr_ex = unsafe { std::mem::zeroed() };
            ex.orig_attr = device_attr(&c.open.rx.query_device());
            // The kernel's rxe reports its capability flags here too, with
            // IB_UVERBS_DEVICE_ATOMIC_WRITE from 6.2 on, as we perform it
            // (not its FLUSH bits: FLUSH is not executed here).
            ex.device_cap_flags_ex =
                u64::from(ex.orig_attr.device_cap_flags) | IB_UVERBS_DEVICE_ATOMIC_WRITE;
            ex.phys_port_cnt_ex = 1;
            let n = attr_size.min(size_of::<ibv_device_attr_ex>());
            // SAFETY: the program gave attr_size bytes at attr; we write n <= that.
            unsafe {
                std::ptr::copy_nonoverlapping((&raw const ex).cast::<u8>(), attr.cast::<u8>(), n)
            };
            Ok(())
        });
        int_result(VERB, r)
    }
}

/// `ibv_query_port` filling `port_attr_len` bytes of `port_attr_out`.
fn query_port(
    context: *mut ibv_context,
    port_num: u8,
    port_attr_out: *mut ibv_port_attr,
    port_attr_len: usize,
) -> c_int {
    let r = handle::get::<Ctx>(context, "context").and_then(|c| {
        check_port(port_num)?;
        if port_attr_out.is_null() {
            return Err(Fail::inval("port_attr", "NULL"));
        }
        let a = port_attr(&c.open.rx.query_port());
        let n = port_attr_len.min(size_of::<ibv_port_attr>());
        // SAFETY: the program gave port_attr_len bytes; we write n <= that.
        unsafe {
            std::ptr::copy_nonoverlapping(
                (&raw const a).cast::<u8>(),
                port_attr_out.cast::<u8>(),
                n,
            )
        };
        Ok(())
    });
    int_result("ibv_query_port", r)
}

entry! {
    verb = "ibv_query_port";
    /// `verbs_context.query_port`, which the header's `ibv_query_port` calls.
    unsafe extern "C" fn query_port_ex(
        context: *mut ibv_context,
        port_num: u8,
        port_attr_out: *mut ibv_port_attr,
        port_attr_len: usize,
    ) -> c_int {
        query_port(context, port_num, port_attr_out, port_attr_len)
    }
}

/// How much of `struct ibv_port_attr` the exported `ibv_query_port` fills:
/// `struct _compat_ibv_port_attr` (which the header only declares), the
/// 48 bytes through `flags`, as rdma-core's exported function fills them.
const COMPAT_PORT_ATTR_LEN: usize = 48;
const _: () = assert!(std::mem::offset_of!(ibv_port_attr, flags) + 1 == COMPAT_PORT_ATTR_LEN);

entry! {
    /// The exported `ibv_query_port` (the header's inline version calls
    /// `verbs_context.query_port`; old binaries call this).
    pub unsafe extern "C" fn ibv_query_port(
        context: *mut ibv_context,
        port_num: u8,
        port_attr_out: *mut ibv_port_attr,
    ) -> c_int {
        // The compat layout is a prefix of today's.
        query_port(context, port_num, port_attr_out, COMPAT_PORT_ATTR_LEN)
    }
}

fn gid_table(c: &Ctx) -> Vec<std::net::Ipv6Addr> {
    c.open.rx.query_port().gids
}

entry! {
    on_panic = -1;
    pub unsafe extern "C" fn ibv_query_gid(
        context: *mut ibv_context,
        port_num: u8,
        index: c_int,
        gid: *mut ibv_gid,
    ) -> c_int {
        let r = handle::get::<Ctx>(context, "context").and_then(|c| {
            check_port(port_num)?;
            // SAFETY: the program's output.
            let out = unsafe { arg_mut(gid, "gid") }?;
            let t = gid_table(c);
            let g = usize::try_from(index)
                .ok()
                .and_then(|i| t.get(i))
                .ok_or_else(|| {
                    Fail::inval(
                        "index",
                        format!("{index}: the GID table has {} entries", t.len()),
                    )
                })?;
            out.raw = g.octets();
            Ok(())
        });
        minus_one_result(VERB, r)
    }
}

entry! {
    on_panic = -1;
    pub unsafe extern "C" fn ibv_query_pkey(
        context: *mut ibv_context,
        port_num: u8,
        index: c_int,
        pkey: *mut u16,
    ) -> c_int {
        let r = handle::get::<Ctx>(context, "context").and_then(|_| {
            check_port(port_num)?;
            // SAFETY: the program's output.
            let out = unsafe { arg_mut(pkey, "pkey") }?;
            if index != 0 {
                // (rdma-core reads pkeys/INDEX from sysfs: ENOENT past the table)
                return Err(Fail::new(
                    libc::ENOENT,
                    format!("index {index}: the P_Key table has 1 entry"),
                ));
            }
            *out = 0xffffu16.to_be();
            Ok(())
        });
        minus_one_result(VERB, r)
    }
}

/// The index of the interface that has `addr`, as the kernel's GID table
/// reports it (0 if none does).
fn ifindex_of(addr: std::net::IpAddr) -> u32 {
    rxe_verbs::interface_of(addr).map_or(0, |i| i.index)
}

fn gid_entry(c: &Ctx, index: u32, t: &[std::net::Ipv6Addr]) -> Option<ibv_gid_entry> {
    let g = t.get(index as usize)?;
    Some(ibv_gid_entry {
        gid: ibv_gid { raw: g.octets() },
        gid_index: index,
        port_num: 1,
        gid_type: IBV_GID_TYPE_ROCE_V2,
        ndev_ifindex: ifindex_of(c.dev.rx.addr()),
    })
}

entry! {
    verb = "ibv_query_gid_ex";
    pub unsafe extern "C" fn _ibv_query_gid_ex(
        context: *mut ibv_context,
        port_num: u32,
        gid_index: u32,
        entry: *mut ibv_gid_entry,
        flags: u32,
        entry_size: usize,
    ) -> c_int {
        let r = handle::get::<Ctx>(context, "context").and_then(|c| {
            check_port(u8::try_from(port_num).unwrap_or(0))?;
            if flags != 0 {
                return Err(Fail::inval(
                    "flags",
                    format!("{flags:#x}: no flags are defined"),
                ));
            }
            if entry.is_null() {
                return Err(Fail::inval("entry", "NULL"));
            }
            if entry_size < size_of::<ibv_gid_entry>() {
                return Err(Fail::inval(
                    "entry_size",
                    format!("{entry_size} is smaller than struct ibv_gid_entry"),
                ));
            }
            let t = gid_table(c);
            // Past the table EINVAL, as rdma-core's ibv_query_gid_ex
            // answers for an index at or beyond gid_tbl_len.
            let e = gid_entry(c, gid_index, &t).ok_or_else(|| {
                Fail::new(
                    libc::EINVAL,
                    format!(
                        "gid_index {gid_index}: the GID table has {} entries",
                        t.len()
                    ),
                )
            })?;
            // SAFETY: entry_size >= size_of::<ibv_gid_entry>() bytes at entry.
            unsafe { entry.write_unaligned(e) };
            Ok(())
        });
        int_result(VERB, r)
    }
}

entry! {
    verb = "ibv_query_gid_table";
    on_panic = -(libc::EIO as isize);
    pub unsafe extern "C" fn _ibv_query_gid_table(
        context: *mut ibv_context,
        entries: *mut ibv_gid_entry,
        max_entries: usize,
        flags: u32,
        entry_size: usize,
    ) -> isize {
        let r = handle::get::<Ctx>(context, "context").and_then(|c| {
            if flags != 0 {
                return Err(Fail::inval(
                    "flags",
                    format!("{flags:#x}: no flags are defined"),
                ));
            }
            if entries.is_null() && max_entries > 0 {
                return Err(Fail::inval("entries", "NULL"));
            }
            if entry_size < size_of::<ibv_gid_entry>() {
                return Err(Fail::inval(
                    "entry_size",
                    format!("{entry_size} is smaller than struct ibv_gid_entry"),
                ));
            }
            let t = gid_table(c);
            if max_entries < t.len() {
                return Err(Fail::inval(
                    "max_entries",
                    format!("{max_entries}: the table has {} entries", t.len()),
                ));
            }
            for i in 0..t.len() {
                let e = gid_entry(c, i as u32, &t).expect("in range");
                // SAFETY: i < max_entries entries of entry_size bytes.
                unsafe {
                    entries
                        .cast::<u8>()
                        .add(i * entry_size)
                        .cast::<ibv_gid_entry>()
                        .write_unaligned(e)
                };
            }
            Ok(t.len() as isize)
        });
        match r {
            Ok(n) => n,
            Err(f) => -(int_result(VERB, Err(f)) as isize),
        }
    }
}

entry! {
    on_panic = -1;
    /// Private in rdma-core (`enum ibv_gid_type_sysfs`): every entry is RoCE v2.
    pub unsafe extern "C" fn ibv_query_gid_type(
        context: *mut ibv_context,
        port_num: u8,
        index: u32,
        gid_type: *mut c_int,
    ) -> c_int {
        let r = handle::get::<Ctx>(context, "context").and_then(|c| {
            check_port(port_num)?;
            // SAFETY: the program's output.
            let out = unsafe { arg_mut(gid_type, "type") }?;
            if index as usize >= gid_table(c).len() {
                return Err(Fail::inval("index", "outside the GID table"));
            }
            *out = 1; // IBV_GID_TYPE_SYSFS_ROCE_V2
            Ok(())
        });
        minus_one_result(VERB, r)
    }
}

entry! {
    on_panic = -1;
    pub unsafe extern "C" fn ibv_get_async_event(
        context: *mut ibv_context,
        event: *mut ibv_async_event,
    ) -> c_int {
        let r = handle::get::<Ctx>(context, "context").and_then(|c| {
            if event.is_null() {
                return Err(Fail::inval("event", "NULL"));
            }
            // Counted under the queue's lock: a destroy that withdraws the
            // object's events then waits for this one.
            let p = c
                .events
                .q
                .take(|p| {
                    p.count.reported(1);
                    Some(p)
                })
                .map_err(|e| Fail::new(e, "reading async_fd"))?;
            let element = match p.event_type {
                IBV_EVENT_CQ_ERR => ibv_async_event__bindgen_ty_1 {
                    cq: p.element as *mut ibv_cq,
                },
                IBV_EVENT_SRQ_LIMIT_REACHED | IBV_EVENT_SRQ_ERR => ibv_async_event__bindgen_ty_1 {
                    srq: p.element as *mut ibv_srq,
                },
                IBV_EVENT_PORT_ACTIVE | IBV_EVENT_PORT_ERR => {
                    ibv_async_event__bindgen_ty_1 { port_num: 1 }
                }
                _ => ibv_async_event__bindgen_ty_1 {
                    qp: p.element as *mut ibv_qp,
                },
            };
            // SAFETY: checked non-NULL; the program's output.
            unsafe {
                event.write(ibv_async_event {
                    element,
                    event_type: p.event_type,
                })
            };
            Ok(())
        });
        minus_one_result(VERB, r)
    }
}

entry! {
    /// `ibv_ack_async_event`: the object the event names (by its type) says
    /// whose event it is, the system library's (`native.rs`) or ours. Port
    /// and device events name no object; neither library does anything for
    /// them.
    pub unsafe extern "C" fn ibv_ack_async_event(event: *mut ibv_async_event) {
        if let (Some(l), false) = (native::loaded(), event.is_null()) {
            // SAFETY: the program's event as ibv_get_async_event filled it;
            // the union member the type says is set.
            let obj: *const c_void = unsafe {
                let e = &*event;
                match e.event_type {
                    IBV_EVENT_CQ_ERR => e.element.cq.cast(),
                    IBV_EVENT_SRQ_LIMIT_REACHED | IBV_EVENT_SRQ_ERR => e.element.srq.cast(),
                    IBV_EVENT_WQ_FATAL => e.element.wq.cast(),
                    IBV_EVENT_PORT_ACTIVE
                    | IBV_EVENT_PORT_ERR
                    | IBV_EVENT_LID_CHANGE
                    | IBV_EVENT_PKEY_CHANGE
                    | IBV_EVENT_SM_CHANGE
                    | IBV_EVENT_CLIENT_REREGISTER
                    | IBV_EVENT_GID_CHANGE
                    | IBV_EVENT_DEVICE_FATAL => std::ptr::null(),
                    _ => e.element.qp.cast(),
                }
            };
            if let (Some(f), true) = (l.ack_async_event, native::is_native_object(obj)) {
                // SAFETY: the system library's ibv_ack_async_event on its event.
                native::bridged(|| unsafe { f(event) });
                return;
            }
        }
        // SAFETY: the program's event, about one of our objects.
        unsafe { ack_async_event(event) }
    }
}

/// `ibv_ack_async_event` of an event about one of our objects.
///
/// # Safety
/// `event` is NULL or the program's event as `ibv_get_async_event` filled it.
unsafe fn ack_async_event(event: *mut ibv_async_event) {
    // SAFETY: the program's event, as ibv_get_async_event filled it.
    let Ok(e) = (unsafe { arg(event, "event") }) else {
        return;
    };
    // SAFETY: the union member the event type says is set.
    unsafe {
        match e.event_type {
            IBV_EVENT_CQ_ERR => crate::cq::ack_async(e.element.cq),
            IBV_EVENT_SRQ_LIMIT_REACHED | IBV_EVENT_SRQ_ERR => {
                crate::qp::ack_srq_async(e.element.srq)
            }
            IBV_EVENT_PORT_ACTIVE
            | IBV_EVENT_PORT_ERR
            | IBV_EVENT_LID_CHANGE
            | IBV_EVENT_PKEY_CHANGE
            | IBV_EVENT_SM_CHANGE
            | IBV_EVENT_CLIENT_REREGISTER
            | IBV_EVENT_GID_CHANGE
            | IBV_EVENT_DEVICE_FATAL => {}
            _ => crate::qp::ack_qp_async(e.element.qp),
        }
    }
}
