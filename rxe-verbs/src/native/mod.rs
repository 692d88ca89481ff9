//! The native backend: RDMA devices driven through libibverbs, loaded at
//! run time (see `loader.rs`; no link-time dependency).
//!
//! All of rxe-verbs' unsafe code is here. Each wrapper owns one verbs object
//! (a raw pointer libibverbs gave out) and keeps alive, through `Arc`s,
//! everything the object depends on, so objects are destroyed children
//! first whatever order the application drops its handles in: a QP holds its
//! PD, CQs and SRQ; a CQ its channel and context; everything its context.
//!
//! The fast paths libibverbs implements as inline functions in `verbs.h`
//! are reproduced exactly: `ibv_post_send(qp, wr, bad)` is
//! `qp->context->ops.post_send(qp, wr, bad)`, and likewise `ibv_post_recv`,
//! `ibv_post_srq_recv`, `ibv_poll_cq`, `ibv_req_notify_cq`; `ibv_query_port`
//! is the inline `___ibv_query_port` (the extended `verbs_context`'s
//! `query_port` when the provider has one, else the exported compat symbol).
//!
//! ## Registered memory
//! A native region owns a heap buffer registered with `ibv_reg_mr`. The
//! device reads and writes it by DMA at any time, so Rust never holds a
//! reference (`&[u8]`/`&mut [u8]`) to it: the application's accesses are
//! raw-pointer copies (`ptr::copy_nonoverlapping`) under the region's
//! reader-writer lock, which orders the application's own accesses; the
//! closures of `with_bytes`/`with_bytes_mut` work on a copy (written back
//! afterwards for `with_bytes_mut`). The buffer is freed only after
//! `ibv_dereg_mr` succeeded (never, if it fails: leaked rather than freed
//! under the device). As on the soft stack, bytes an operation in flight is
//! changing have unspecified contents; memory safety does not depend on it.

mod ffi;
mod loader;

use crate::attr::{addr_of, gid_of, AsyncEventKind, DeviceAttr, PortAttr, PortState};
use crate::attr::{GidType, NativeDeviceInfo, NativeGid};
use crate::device::Device;
use crate::error::{invalid, unsupported, Error};
use ffi::*;
use loader::Verbs;
use parking_lot::{Mutex, RwLock};
use rxe_core::engine::{CqId, EngineError, SrqId};
use rxe_core::psn::Psn;
use rxe_core::types::*;
use std::collections::{HashMap, VecDeque};
use std::ffi::{c_int, c_void, CStr};
use std::net::Ipv6Addr;
use std::ptr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

pub(crate) use loader::DEFAULT_LIBRARY;

static VERBS: OnceLock<Result<Verbs, String>> = OnceLock::new();

/// The library to load: `RXE_LIBIBVERBS` if set, else `libibverbs.so.1`.
pub(crate) fn library_name() -> String {
    crate::config::libibverbs().unwrap_or_else(|| DEFAULT_LIBRARY.to_string())
}

/// libibverbs, loaded on first use (once per process).
fn verbs() -> Result<&'static Verbs, String> {
    VERBS
        .get_or_init(|| {
            let name = library_name();
            loader::load(&name).map_err(|e| format!("cannot load {name}: {e}"))
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// Whether libibverbs could be loaded (loading it if not yet done).
pub(crate) fn available() -> Result<String, String> {
    verbs().map(|v| v.path.clone())
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// The errno of a verbs call that returned `ret` (providers return a
/// positive errno; some return -1 and set `errno`).
fn rc_errno(ret: c_int) -> i32 {
    if ret > 0 {
        ret
    } else {
        match errno() {
            0 => -ret,
            e => e,
        }
    }
}

/// An `Error` for a verbs call that failed with `errno`.
fn os_error(call: &'static str, dev: &str, errno: i32) -> Error {
    let source = std::io::Error::from_raw_os_error(errno);
    match errno {
        libc::EINVAL => Error::InvalidArgument {
            name: call,
            reason: format!("{dev} refused the arguments ({source})"),
        },
        libc::EOPNOTSUPP | libc::ENOSYS | libc::EPROTONOSUPPORT => {
            unsupported(format!("{call} on native device {dev} ({source})"))
        }
        libc::EBUSY => Error::Busy(call),
        _ => Error::Io {
            what: format!("{call} on {dev}"),
            source,
        },
    }
}

fn cstr(p: *const std::ffi::c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: libibverbs returns NUL-terminated strings that live as long
    // as the object they belong to, which outlives this call.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

fn cbuf(b: &[std::ffi::c_char]) -> String {
    let bytes: Vec<u8> = b
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// `ibv_get_device_list`'s array, freed on drop.
struct DevList {
    v: &'static Verbs,
    list: *mut *mut ibv_device,
    n: usize,
}

impl DevList {
    fn get(v: &'static Verbs) -> Result<DevList, String> {
        let mut n: c_int = 0;
        // SAFETY: `n` is a valid out-parameter; the result is null or an
        // array of `n` device pointers followed by null.
        let list = unsafe { (v.get_device_list)(&mut n) };
        if list.is_null() {
            let e = std::io::Error::last_os_error();
            return Err(format!("ibv_get_device_list: {e}"));
        }
        Ok(DevList {
            v,
            list,
            n: n.max(0) as usize,
        })
    }

    fn devices(&self) -> Vec<*mut ibv_device> {
        // SAFETY: the array has `n` valid entries while the list lives.
        (0..self.n).map(|i| unsafe { *self.list.add(i) }).collect()
    }

    fn name(&self, d: *mut ibv_device) -> String {
        // SAFETY: `d` is an entry of the live list.
        cstr(unsafe { (self.v.get_device_name)(d) })
    }
}

impl Drop for DevList {
    fn drop(&mut self) {
        // SAFETY: the list came from ibv_get_device_list and is freed once.
        // Contexts opened from it keep their devices referenced.
        unsafe { (self.v.free_device_list)(self.list) }
    }
}

/// The context's ops table (the inline fast paths call through it).
///
/// # Safety
/// `ctx` must be a live context from `ibv_open_device`.
unsafe fn ops<'a>(ctx: *mut ibv_context) -> &'a ibv_context_ops {
    // SAFETY: the caller guarantees `ctx` is live; `ops` is part of it.
    unsafe { &(*ctx).ops }
}

/// `verbs_get_ctx(ctx)`: the extended context around `ctx`, if it is one.
///
/// # Safety
/// `ctx` must be a live context.
unsafe fn verbs_get_ctx(ctx: *mut ibv_context) -> Option<*mut verbs_context> {
    // SAFETY: reading a field of a live context.
    if unsafe { (*ctx).abi_compat } as usize != VERBS_ABI_IS_EXTENDED {
        return None;
    }
    // SAFETY: an extended context is the last member of a `verbs_context`
    // (that is what abi_compat says), so stepping back to its start stays
    // inside the provider's allocation.
    Some(
        unsafe { (ctx as *mut u8).sub(std::mem::offset_of!(verbs_context, context)) }
            as *mut verbs_context,
    )
}

/// `ibv_query_port`, as the inline `___ibv_query_port` of verbs.h does it.
///
/// # Safety
/// `ctx` must be a live context.
unsafe fn query_port(v: &Verbs, ctx: *mut ibv_context, port: u8) -> Result<ibv_port_attr, i32> {
    // SAFETY: all-zero is a valid ibv_port_attr (plain integers).
    let mut attr: ibv_port_attr = unsafe { std::mem::zeroed() };
    // SAFETY: ctx is live (caller); see verbs_get_ctx.
    if let Some(vctx) = unsafe { verbs_get_ctx(ctx) } {
        // verbs_get_ctx_op(ctx, query_port): the provider filled in at least
        // sizeof(*vctx) - offsetof(struct verbs_context, query_port) bytes
        // and set the pointer.
        let need =
            std::mem::size_of::<verbs_context>() - std::mem::offset_of!(verbs_context, query_port);
        // SAFETY: vctx points at the provider's verbs_context; `sz` and
        // `query_port` are at fixed distances before `context`.
        let (sz, f) = unsafe { ((*vctx).sz, (*vctx).query_port) };
        if sz >= need {
            if let Some(f) = f {
                // SAFETY: the provider's query_port with the full struct size.
                let rc = unsafe { f(ctx, port, &mut attr, std::mem::size_of::<ibv_port_attr>()) };
                return if rc == 0 { Ok(attr) } else { Err(rc_errno(rc)) };
            }
        }
    }
    // SAFETY: the compat symbol fills the `_compat_ibv_port_attr` prefix of
    // the zeroed struct.
    let rc = unsafe { (v.query_port_compat)(ctx, port, &mut attr) };
    if rc == 0 {
        Ok(attr)
    } else {
        Err(rc_errno(rc))
    }
}

fn gid_type(t: u32) -> GidType {
    match t {
        IBV_GID_TYPE_IB => GidType::Ib,
        IBV_GID_TYPE_ROCE_V1 => GidType::RoceV1,
        IBV_GID_TYPE_ROCE_V2 => GidType::RoceV2,
        _ => GidType::Unknown,
    }
}

/// The GID type from sysfs, for a libibverbs without `_ibv_query_gid_ex`.
fn sysfs_gid_type(dev: &str, port: u8, index: u32) -> GidType {
    let p = format!("/sys/class/infiniband/{dev}/ports/{port}/gid_attrs/types/{index}");
    match std::fs::read_to_string(p) {
        Ok(s) if s.trim().eq_ignore_ascii_case("RoCE v2") => GidType::RoceV2,
        Ok(s) if s.contains("v1") => GidType::RoceV1,
        _ => GidType::Unknown,
    }
}

/// Every non-zero GID table entry of every port.
///
/// # Safety
/// `ctx` must be a live context.
unsafe fn gid_table(v: &Verbs, ctx: *mut ibv_context, dev: &str) -> Vec<NativeGid> {
    // SAFETY: zeroed plain-integer struct as an out-parameter.
    let mut da: ibv_device_attr = unsafe { std::mem::zeroed() };
    // SAFETY: live context, valid out-parameter.
    if unsafe { (v.query_device)(ctx, &mut da) } != 0 {
        return Vec::new();
    }
    let mut lens = Vec::new();
    for port in 1..=da.phys_port_cnt {
        // SAFETY: live context.
        if let Ok(pa) = unsafe { query_port(v, ctx, port) } {
            lens.push((port, pa.gid_tbl_len.max(0) as u32));
        }
    }
    let total: usize = lens.iter().map(|(_, n)| *n as usize).sum();
    let mut out = Vec::new();
    if let Some(table) = v.query_gid_table {
        let mut entries = vec![ibv_gid_entry::default(); total];
        // SAFETY: `entries` has room for `total` entries of the size given.
        let n = unsafe {
            table(
                ctx,
                entries.as_mut_ptr(),
                total,
                0,
                std::mem::size_of::<ibv_gid_entry>(),
            )
        };
        if n >= 0 {
            for e in &entries[..(n as usize).min(total)] {
                // SAFETY: either member of `union ibv_gid` is plain bytes.
                let gid = Ipv6Addr::from(unsafe { e.gid.raw });
                if !gid.is_unspecified() {
                    out.push(NativeGid {
                        port: e.port_num as u8,
                        index: e.gid_index,
                        gid,
                        gid_type: gid_type(e.gid_type),
                    });
                }
            }
            return out;
        }
    }
    for (port, len) in lens {
        for index in 0..len {
            let mut g = ibv_gid::default();
            // SAFETY: live context, valid out-parameter.
            if unsafe { (v.query_gid)(ctx, port, index as c_int, &mut g) } != 0 {
                continue;
            }
            // SAFETY: either member of `union ibv_gid` is plain bytes.
            let gid = Ipv6Addr::from(unsafe { g.raw });
            if gid.is_unspecified() {
                continue;
            }
            let t = match v.query_gid_ex {
                Some(f) => {
                    let mut e = ibv_gid_entry::default();
                    // SAFETY: live context, out-parameter of the size given.
                    let rc = unsafe {
                        f(
                            ctx,
                            u32::from(port),
                            index,
                            &mut e,
                            0,
                            std::mem::size_of::<ibv_gid_entry>(),
                        )
                    };
                    if rc == 0 {
                        gid_type(e.gid_type)
                    } else {
                        sysfs_gid_type(dev, port, index)
                    }
                }
                None => sysfs_gid_type(dev, port, index),
            };
            out.push(NativeGid {
                port,
                index,
                gid,
                gid_type: t,
            });
        }
    }
    out
}

/// The native devices libibverbs lists, with their GID tables. An error
/// names why there are none to be had (no library, no kernel support).
pub(crate) fn discover() -> Result<Vec<NativeDeviceInfo>, String> {
    let v = verbs()?;
    let list = DevList::get(v)?;
    let mut out = Vec::new();
    for d in list.devices() {
        let name = list.name(d);
        // SAFETY: `d` is an entry of the live list; the GUID is big-endian.
        let node_guid = u64::from_be(unsafe { (v.get_device_guid)(d) });
        // SAFETY: as above.
        let ctx = unsafe { (v.open_device)(d) };
        let gids = if ctx.is_null() {
            Vec::new()
        } else {
            // SAFETY: ctx was just opened; closed right after.
            let g = unsafe { gid_table(v, ctx, &name) };
            // SAFETY: opened above, closed once, nothing else refers to it.
            unsafe { (v.close_device)(ctx) };
            g
        };
        out.push(NativeDeviceInfo {
            name,
            node_guid,
            gids,
        });
    }
    Ok(out)
}

fn set_nonblocking(fd: c_int) {
    // SAFETY: fcntl on a descriptor libibverbs opened; errors are ignored
    // (a blocking descriptor still works: reads happen after poll says so).
    unsafe {
        let fl = libc::fcntl(fd, libc::F_GETFL);
        if fl >= 0 {
            libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK);
        }
    }
}

/// Waits until `fd` is readable or `deadline` passes.
fn wait_readable(fd: c_int, deadline: Instant) -> bool {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let ms = left.as_millis().min(i32::MAX as u128) as c_int;
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut p, 1, ms) };
        if n > 0 {
            return true;
        }
        if n == 0 || errno() != libc::EINTR {
            return false;
        }
    }
}

// ---------------------------------------------------------------- context --

/// An open native device.
pub(crate) struct NContext {
    v: &'static Verbs,
    ctx: *mut ibv_context,
    pub device: Device,
    pub port: u8,
    /// The GID table index of the context's own GID (what source GID index 0
    /// stands for in the API).
    pub gid_index: u8,
    pub gid: Ipv6Addr,
    pub attr: DeviceAttr,
    cqs: Mutex<HashMap<u32, Weak<NCq>>>,
    srqs: Mutex<HashMap<u32, Weak<NSrq>>>,
    events: Mutex<VecDeque<AsyncEventKind>>,
    async_lock: Mutex<()>,
}

// SAFETY: libibverbs objects may be used from any thread; providers lock
// what needs locking (verbs' documented thread-safety). The raw pointer is
// only dereferenced through libibverbs calls and read-only field reads.
unsafe impl Send for NContext {}
// SAFETY: as above.
unsafe impl Sync for NContext {}

impl Drop for NContext {
    fn drop(&mut self) {
        // SAFETY: every child object holds an Arc of this context, so none
        // is left; the context is closed once.
        unsafe { (self.v.close_device)(self.ctx) };
    }
}

impl NContext {
    pub fn open(device: Device) -> Result<Arc<NContext>, Error> {
        let sel = device
            .native_sel()
            .ok_or_else(|| invalid("device", "not a native device"))?;
        let name = sel.info.name.clone();
        let gid = sel.gid.ok_or_else(|| {
            unsupported(format!(
                "native device {name} has no RoCE v2 GID: the soft stack and rxe-verbs speak RoCE v2 only"
            ))
        })?;
        let v = verbs().map_err(|e| unsupported(format!("native verbs: {e}")))?;
        let list = DevList::get(v).map_err(|e| unsupported(format!("native verbs: {e}")))?;
        let d = list
            .devices()
            .into_iter()
            .find(|&d| list.name(d) == name)
            .ok_or_else(|| invalid("device", format!("native device {name} is gone")))?;
        // SAFETY: `d` is an entry of the live list.
        let ctx = unsafe { (v.open_device)(d) };
        if ctx.is_null() {
            return Err(os_error("ibv_open_device", &name, errno()));
        }
        drop(list);
        let close = |e: Error| {
            // SAFETY: opened above, not shared yet.
            unsafe { (v.close_device)(ctx) };
            e
        };
        // SAFETY: zeroed out-parameter, live context.
        let mut da: ibv_device_attr = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let rc = unsafe { (v.query_device)(ctx, &mut da) };
        if rc != 0 {
            return Err(close(os_error("ibv_query_device", &name, rc_errno(rc))));
        }
        // SAFETY: live context.
        let pa = unsafe { query_port(v, ctx, gid.port) }
            .map_err(|e| close(os_error("ibv_query_port", &name, e)))?;
        if gid.index > 255 {
            return Err(close(unsupported(format!(
                "GID index {} of {name}: the API's GID indices are 8 bits",
                gid.index
            ))));
        }
        let caps = DeviceCaps {
            max_mr_size: da.max_mr_size,
            max_qp: da.max_qp.max(0) as u32,
            max_qp_wr: da.max_qp_wr.max(0) as u32,
            max_sge: da.max_sge.max(0) as u32,
            max_cqe: da.max_cqe.max(0) as u32,
            max_qp_rd_atom: da.max_qp_rd_atom.clamp(0, 255) as u8,
            max_qp_init_rd_atom: da.max_qp_init_rd_atom.clamp(0, 255) as u8,
            max_inline_data: 0,
            max_pkeys: da.max_pkeys,
            max_msg_size: pa.max_msg_sz,
            max_srq: da.max_srq.max(0) as u32,
            max_srq_sge: da.max_srq_sge.max(0) as u32,
            max_mw: da.max_mw.max(0) as u32,
        };
        let attr = DeviceAttr {
            fw_ver: cbuf(&da.fw_ver),
            node_guid: u64::from_be(da.node_guid),
            sys_image_guid: u64::from_be(da.sys_image_guid),
            vendor_id: da.vendor_id,
            vendor_part_id: da.vendor_part_id,
            hw_ver: da.hw_ver,
            phys_port_cnt: da.phys_port_cnt,
            caps,
        };
        // SAFETY: async_fd belongs to the live context.
        set_nonblocking(unsafe { (*ctx).async_fd });
        let mut events = VecDeque::new();
        if pa.state == IBV_PORT_ACTIVE {
            // The soft stack raises PortActive when a device opens; so do we.
            events.push_back(AsyncEventKind::PortActive);
        }
        Ok(Arc::new(NContext {
            v,
            ctx,
            port: gid.port,
            gid_index: gid.index as u8,
            gid: gid.gid,
            attr,
            device,
            cqs: Mutex::new(HashMap::new()),
            srqs: Mutex::new(HashMap::new()),
            events: Mutex::new(events),
            async_lock: Mutex::new(()),
        }))
    }

    fn name(&self) -> &str {
        self.device.name()
    }

    /// The GID index an API index stands for: 0 is the context's own GID.
    pub fn sgid(&self, index: u8) -> u8 {
        if index == 0 {
            self.gid_index
        } else {
            index
        }
    }

    pub fn query_port(&self) -> Result<PortAttr, Error> {
        // SAFETY: live context.
        let pa = unsafe { query_port(self.v, self.ctx, self.port) }
            .map_err(|e| os_error("ibv_query_port", self.name(), e))?;
        let mtu = |m: u32| match m {
            1 => Mtu::Mtu256,
            2 => Mtu::Mtu512,
            3 => Mtu::Mtu1024,
            4 => Mtu::Mtu2048,
            _ => Mtu::Mtu4096,
        };
        Ok(PortAttr {
            state: match pa.state {
                0 => PortState::Nop,
                1 => PortState::Down,
                2 => PortState::Init,
                3 => PortState::Armed,
                5 => PortState::ActiveDefer,
                _ => PortState::Active,
            },
            max_mtu: mtu(pa.max_mtu),
            active_mtu: mtu(pa.active_mtu),
            gid_tbl_len: pa.gid_tbl_len.max(0) as u32,
            max_msg_sz: pa.max_msg_sz,
            pkey_tbl_len: pa.pkey_tbl_len,
            link_layer: match u32::from(pa.link_layer) {
                IBV_LINK_LAYER_INFINIBAND => "InfiniBand",
                IBV_LINK_LAYER_ETHERNET => "Ethernet",
                _ => "Unspecified",
            },
            gids: self.device.gids(),
        })
    }

    /// The next asynchronous event, waiting up to `timeout`. Events this
    /// API has no name for are acknowledged and skipped.
    pub fn get_async_event(&self, timeout: Duration) -> Option<AsyncEventKind> {
        if let Some(e) = self.events.lock().pop_front() {
            return Some(e);
        }
        let deadline = Instant::now() + timeout;
        let _g = self.async_lock.lock();
        // SAFETY: live context.
        let fd = unsafe { (*self.ctx).async_fd };
        loop {
            if !wait_readable(fd, deadline) {
                return None;
            }
            let mut ev = ibv_async_event::default();
            // SAFETY: live context, valid out-parameter; the descriptor is
            // non-blocking, so this returns at once if another reader won.
            if unsafe { (self.v.get_async_event)(self.ctx, &mut ev) } != 0 {
                if Instant::now() >= deadline {
                    return None;
                }
                continue;
            }
            // SAFETY: until the event is acknowledged its object is alive
            // (destroying it waits for the acknowledgement); the union
            // member read is the one the event type says.
            let kind = unsafe {
                match ev.event_type {
                    IBV_EVENT_QP_FATAL | IBV_EVENT_QP_REQ_ERR | IBV_EVENT_QP_ACCESS_ERR => {
                        Some(AsyncEventKind::QpFatal((*ev.element.qp).qp_num))
                    }
                    IBV_EVENT_COMM_EST => {
                        Some(AsyncEventKind::CommEstablished((*ev.element.qp).qp_num))
                    }
                    IBV_EVENT_SQ_DRAINED => {
                        Some(AsyncEventKind::SqDrained((*ev.element.qp).qp_num))
                    }
                    IBV_EVENT_CQ_ERR => Some(AsyncEventKind::CqError((*ev.element.cq).handle)),
                    IBV_EVENT_SRQ_LIMIT_REACHED => {
                        Some(AsyncEventKind::SrqLimitReached((*ev.element.srq).handle))
                    }
                    IBV_EVENT_PORT_ACTIVE => Some(AsyncEventKind::PortActive),
                    _ => None,
                }
            };
            // SAFETY: acknowledging the event just read, once.
            unsafe { (self.v.ack_async_event)(&mut ev) };
            if kind.is_some() {
                return kind;
            }
        }
    }

    fn cq_by_id(&self, id: u32) -> Result<Arc<NCq>, Error> {
        self.cqs
            .lock()
            .get(&id)
            .and_then(Weak::upgrade)
            .ok_or(Error::Engine(EngineError::UnknownCq(CqId(id))))
    }

    fn srq_by_id(&self, id: u32) -> Result<Arc<NSrq>, Error> {
        self.srqs
            .lock()
            .get(&id)
            .and_then(Weak::upgrade)
            .ok_or(Error::Engine(EngineError::UnknownSrq(SrqId(id))))
    }
}

// --------------------------------------------------------------------- PD --

/// A native protection domain, with the address handles created on it.
pub(crate) struct NPd {
    pub ctx: Arc<NContext>,
    pd: *mut ibv_pd,
    ahs: Mutex<HashMap<AddressVector, Arc<NAh>>>,
}

// SAFETY: see NContext.
unsafe impl Send for NPd {}
// SAFETY: see NContext.
unsafe impl Sync for NPd {}

impl Drop for NPd {
    fn drop(&mut self) {
        // Address handles first: a PD with AHs cannot be deallocated.
        self.ahs.get_mut().clear();
        // SAFETY: every region, QP and SRQ on this PD holds an Arc of it, so
        // none is left; deallocated once.
        unsafe { (self.ctx.v.dealloc_pd)(self.pd) };
    }
}

impl NPd {
    pub fn alloc(ctx: &Arc<NContext>) -> Result<Arc<NPd>, Error> {
        // SAFETY: live context.
        let pd = unsafe { (ctx.v.alloc_pd)(ctx.ctx) };
        if pd.is_null() {
            return Err(os_error("ibv_alloc_pd", ctx.name(), errno()));
        }
        Ok(Arc::new(NPd {
            ctx: ctx.clone(),
            pd,
            ahs: Mutex::new(HashMap::new()),
        }))
    }

    pub fn handle(&self) -> u32 {
        // SAFETY: live PD.
        unsafe { (*self.pd).handle }
    }

    fn ah_attr(&self, av: &AddressVector) -> ibv_ah_attr {
        ibv_ah_attr {
            grh: ibv_global_route {
                dgid: ibv_gid {
                    raw: gid_of(av.dest).octets(),
                },
                flow_label: av.flow_label,
                sgid_index: self.ctx.sgid(av.sgid_index),
                hop_limit: av.hop_limit,
                traffic_class: av.traffic_class,
            },
            dlid: 0,
            sl: 0,
            src_path_bits: 0,
            static_rate: 0,
            is_global: 1,
            port_num: self.ctx.port,
        }
    }

    /// The address handle for `av`, created on first use and kept with the PD.
    pub fn ah(&self, av: &AddressVector) -> Result<Arc<NAh>, Error> {
        let mut m = self.ahs.lock();
        if let Some(a) = m.get(av) {
            return Ok(a.clone());
        }
        let mut attr = self.ah_attr(av);
        // SAFETY: live PD, valid attributes.
        let ah = unsafe { (self.ctx.v.create_ah)(self.pd, &mut attr) };
        if ah.is_null() {
            return Err(os_error("ibv_create_ah", self.ctx.name(), errno()));
        }
        let a = Arc::new(NAh { v: self.ctx.v, ah });
        m.insert(*av, a.clone());
        Ok(a)
    }
}

/// A native address handle (owned by its PD's cache).
pub(crate) struct NAh {
    v: &'static Verbs,
    ah: *mut ibv_ah,
}

// SAFETY: see NContext.
unsafe impl Send for NAh {}
// SAFETY: see NContext.
unsafe impl Sync for NAh {}

impl Drop for NAh {
    fn drop(&mut self) {
        // SAFETY: created by ibv_create_ah, destroyed once; the PD outlives it.
        unsafe { (self.v.destroy_ah)(self.ah) };
    }
}

// --------------------------------------------------------------------- MR --

/// A native memory region owning its buffer (see the module docs).
pub(crate) struct NMr {
    pd: Arc<NPd>,
    mr: *mut ibv_mr,
    buf: *mut u8,
    len: usize,
    lock: RwLock<()>,
    pub lkey: u32,
    pub rkey: u32,
    pub iova: u64,
}

// SAFETY: the buffer is only accessed through raw-pointer copies under
// `lock` (and by the device); the verbs object is thread-safe.
unsafe impl Send for NMr {}
// SAFETY: as above.
unsafe impl Sync for NMr {}

impl NMr {
    pub fn register(pd: &Arc<NPd>, bytes: Vec<u8>, access: Access) -> Result<NMr, Error> {
        let len = bytes.len();
        let buf = Box::into_raw(bytes.into_boxed_slice()) as *mut u8;
        let v = pd.ctx.v;
        let flags = (access - Access::ZERO_BASED).bits();
        let mr = if access.contains(Access::ZERO_BASED) {
            match v.reg_mr_iova2 {
                // SAFETY: `buf` is valid for `len` bytes until freed after
                // deregistration; iova 0 makes the region zero-based.
                Some(f) => unsafe { f(pd.pd, buf.cast(), len, 0, flags) },
                None => {
                    // SAFETY: reclaiming the box just leaked, never registered.
                    drop(unsafe { Box::from_raw(ptr::slice_from_raw_parts_mut(buf, len)) });
                    return Err(unsupported(
                        "zero-based memory regions need ibv_reg_mr_iova2 (rdma-core 29+)",
                    ));
                }
            }
        } else {
            // SAFETY: as above; the exported ibv_reg_mr is what the verbs.h
            // macro calls for flags outside IBV_ACCESS_OPTIONAL_RANGE.
            unsafe { (v.reg_mr)(pd.pd, buf.cast(), len, flags as c_int) }
        };
        if mr.is_null() {
            let e = errno();
            // SAFETY: registration failed, the device never saw the buffer.
            drop(unsafe { Box::from_raw(ptr::slice_from_raw_parts_mut(buf, len)) });
            return Err(os_error("ibv_reg_mr", pd.ctx.name(), e));
        }
        // SAFETY: a registered region's fields are set by ibv_reg_mr.
        let (lkey, rkey, addr) = unsafe { ((*mr).lkey, (*mr).rkey, (*mr).addr as u64) };
        Ok(NMr {
            pd: pd.clone(),
            mr,
            buf,
            len,
            lock: RwLock::new(()),
            lkey,
            rkey,
            iova: if access.contains(Access::ZERO_BASED) {
                0
            } else {
                addr
            },
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    fn check(&self, off: usize, n: usize) -> bool {
        off.checked_add(n).is_some_and(|e| e <= self.len)
    }

    pub fn read(&self, off: usize, dst: &mut [u8]) -> bool {
        if !self.check(off, dst.len()) {
            return false;
        }
        let _g = self.lock.read();
        // SAFETY: in bounds (checked); `buf` is live while `self` is; `dst`
        // is a distinct Rust buffer. No reference to the DMA buffer is made.
        unsafe { ptr::copy_nonoverlapping(self.buf.add(off), dst.as_mut_ptr(), dst.len()) };
        true
    }

    pub fn write(&self, off: usize, src: &[u8]) -> bool {
        if !self.check(off, src.len()) {
            return false;
        }
        let _g = self.lock.write();
        // SAFETY: as in `read`, the other way.
        unsafe { ptr::copy_nonoverlapping(src.as_ptr(), self.buf.add(off), src.len()) };
        true
    }

    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.len];
        self.read(0, &mut v);
        v
    }

    /// Runs `f` on a copy of the bytes taken and written back under the
    /// write lock.
    pub fn with_copy_mut<R>(&self, f: impl FnOnce(&mut [u8]) -> R) -> R {
        let _g = self.lock.write();
        let mut v = vec![0u8; self.len];
        // SAFETY: whole buffer, live; see `read`.
        unsafe { ptr::copy_nonoverlapping(self.buf, v.as_mut_ptr(), self.len) };
        let r = f(&mut v);
        // SAFETY: as above, back.
        unsafe { ptr::copy_nonoverlapping(v.as_ptr(), self.buf, self.len) };
        r
    }

    /// Deregisters; on success the bytes come back.
    pub fn deregister(mut self) -> Result<Vec<u8>, (NMr, Error)> {
        // SAFETY: registered region, deregistered once.
        let rc = unsafe { (self.pd.ctx.v.dereg_mr)(self.mr) };
        if rc != 0 {
            let e = os_error("ibv_dereg_mr", self.pd.ctx.name(), rc_errno(rc));
            return Err((self, e));
        }
        self.mr = ptr::null_mut();
        // SAFETY: deregistered: the device no longer touches the buffer,
        // which was leaked from a Box<[u8]> of `len` bytes.
        let b = unsafe { Box::from_raw(ptr::slice_from_raw_parts_mut(self.buf, self.len)) };
        self.buf = ptr::null_mut();
        Ok(b.into_vec())
    }
}

impl Drop for NMr {
    fn drop(&mut self) {
        if self.mr.is_null() {
            return;
        }
        // SAFETY: registered region, deregistered once.
        let rc = unsafe { (self.pd.ctx.v.dereg_mr)(self.mr) };
        if rc == 0 && !self.buf.is_null() {
            // SAFETY: deregistered; the buffer was a leaked Box<[u8]>.
            drop(unsafe { Box::from_raw(ptr::slice_from_raw_parts_mut(self.buf, self.len)) });
        }
        // If deregistration failed the device may still write the buffer:
        // it is leaked rather than freed under it.
    }
}

// ------------------------------------------------------------- channel/CQ --

/// A native completion channel.
pub(crate) struct NChannel {
    ctx: Arc<NContext>,
    ch: *mut ibv_comp_channel,
    lock: Mutex<()>,
}

// SAFETY: see NContext; readers are serialized by `lock`.
unsafe impl Send for NChannel {}
// SAFETY: as above.
unsafe impl Sync for NChannel {}

impl Drop for NChannel {
    fn drop(&mut self) {
        // SAFETY: every CQ using the channel holds an Arc of it; destroyed once.
        unsafe { (self.ctx.v.destroy_comp_channel)(self.ch) };
    }
}

impl NChannel {
    pub fn create(ctx: &Arc<NContext>) -> Result<Arc<NChannel>, Error> {
        // SAFETY: live context.
        let ch = unsafe { (ctx.v.create_comp_channel)(ctx.ctx) };
        if ch.is_null() {
            return Err(os_error("ibv_create_comp_channel", ctx.name(), errno()));
        }
        // SAFETY: the channel's descriptor, just created.
        set_nonblocking(unsafe { (*ch).fd });
        Ok(Arc::new(NChannel {
            ctx: ctx.clone(),
            ch,
            lock: Mutex::new(()),
        }))
    }

    pub fn same_context(&self, ctx: &Arc<NContext>) -> bool {
        Arc::ptr_eq(&self.ctx, ctx)
    }

    /// The next CQ event (acknowledged at once), as the CQ's number.
    pub fn get_event(&self, timeout: Duration) -> Option<u32> {
        let deadline = Instant::now() + timeout;
        let _g = self.lock.lock();
        // SAFETY: live channel.
        let fd = unsafe { (*self.ch).fd };
        loop {
            if !wait_readable(fd, deadline) {
                return None;
            }
            let mut cq: *mut ibv_cq = ptr::null_mut();
            let mut cq_ctx: *mut c_void = ptr::null_mut();
            // SAFETY: live channel, valid out-parameters; non-blocking fd.
            if unsafe { (self.ctx.v.get_cq_event)(self.ch, &mut cq, &mut cq_ctx) } == 0 {
                // SAFETY: the CQ cannot be destroyed before this event is
                // acknowledged (ibv_destroy_cq waits for it).
                let id = unsafe { (*cq).handle };
                // SAFETY: acknowledging the one event just read.
                unsafe { (self.ctx.v.ack_cq_events)(cq, 1) };
                return Some(id);
            }
            if Instant::now() >= deadline {
                return None;
            }
        }
    }
}

/// Converts a work completion.
fn completion(w: &ibv_wc) -> Completion {
    let status = match w.status {
        IBV_WC_SUCCESS => WcStatus::Success,
        IBV_WC_LOC_LEN_ERR => WcStatus::LocLenErr,
        IBV_WC_LOC_QP_OP_ERR => WcStatus::LocQpOpErr,
        IBV_WC_LOC_PROT_ERR | IBV_WC_LOC_ACCESS_ERR => WcStatus::LocProtErr,
        IBV_WC_WR_FLUSH_ERR => WcStatus::WrFlushErr,
        IBV_WC_MW_BIND_ERR => WcStatus::MwBindErr,
        IBV_WC_REM_INV_REQ_ERR => WcStatus::RemInvReqErr,
        IBV_WC_REM_ACCESS_ERR => WcStatus::RemAccessErr,
        IBV_WC_REM_OP_ERR | IBV_WC_REM_ABORT_ERR => WcStatus::RemOpErr,
        IBV_WC_RETRY_EXC_ERR => WcStatus::RetryExcErr,
        IBV_WC_RNR_RETRY_EXC_ERR => WcStatus::RnrRetryExcErr,
        IBV_WC_REM_INV_RD_REQ_ERR => WcStatus::RemInvalidRdReqErr,
        // LOC_EEC_OP_ERR, BAD_RESP_ERR, LOC_RDD_VIOL_ERR, INV_EECN_ERR,
        // INV_EEC_STATE_ERR, FATAL_ERR, RESP_TIMEOUT_ERR, GENERAL_ERR, TM_*.
        _ => WcStatus::GeneralErr,
    };
    let opcode = match w.opcode {
        IBV_WC_SEND => WcOpcode::Send,
        IBV_WC_RDMA_WRITE => WcOpcode::RdmaWrite,
        IBV_WC_RDMA_READ => WcOpcode::RdmaRead,
        IBV_WC_COMP_SWAP => WcOpcode::CompSwap,
        IBV_WC_FETCH_ADD => WcOpcode::FetchAdd,
        IBV_WC_BIND_MW => WcOpcode::BindMw,
        IBV_WC_LOCAL_INV => WcOpcode::LocalInv,
        IBV_WC_ATOMIC_WRITE => WcOpcode::AtomicWrite,
        IBV_WC_RECV_RDMA_WITH_IMM => WcOpcode::RecvRdmaWithImm,
        // "consumers can test if a completion is a receive by testing
        // (opcode & IBV_WC_RECV)" (verbs.h).
        x if x & IBV_WC_RECV != 0 => WcOpcode::Recv,
        _ => WcOpcode::Send,
    };
    // SAFETY: both members of the union are a u32; `wc_flags` says which
    // one the provider wrote.
    let imm_or_inv = unsafe { w.__bindgen_anon_1.imm_data };
    Completion {
        wr_id: w.wr_id,
        status,
        opcode,
        qp_num: w.qp_num,
        byte_len: w.byte_len,
        // The wire's immediate, as the soft stack gives it (ntohl).
        imm_data: (w.wc_flags & IBV_WC_WITH_IMM != 0).then(|| u32::from_be(imm_or_inv)),
        invalidated_rkey: (w.wc_flags & IBV_WC_WITH_INV != 0).then_some(imm_or_inv),
        src_qp: w.src_qp,
        grh: w.wc_flags & IBV_WC_GRH != 0,
        pkey_index: w.pkey_index,
    }
}

/// A native completion queue.
pub(crate) struct NCq {
    ctx: Arc<NContext>,
    cq: *mut ibv_cq,
    pub id: u32,
    capacity: AtomicU32,
    _channel: Option<Arc<NChannel>>,
}

// SAFETY: see NContext (providers lock their CQs).
unsafe impl Send for NCq {}
// SAFETY: as above.
unsafe impl Sync for NCq {}

impl Drop for NCq {
    fn drop(&mut self) {
        self.ctx.cqs.lock().remove(&self.id);
        // SAFETY: every QP using the CQ holds an Arc of it; destroyed once;
        // channel events are acknowledged as they are read.
        unsafe { (self.ctx.v.destroy_cq)(self.cq) };
    }
}

impl NCq {
    pub fn create(
        ctx: &Arc<NContext>,
        cqe: u32,
        channel: Option<&Arc<NChannel>>,
    ) -> Result<Arc<NCq>, Error> {
        let cqe_c = c_int::try_from(cqe).map_err(|_| invalid("cqe", "too large"))?;
        let ch = channel.map_or(ptr::null_mut(), |c| c.ch);
        // SAFETY: live context; the channel (if any) belongs to it.
        let cq = unsafe { (ctx.v.create_cq)(ctx.ctx, cqe_c, ptr::null_mut(), ch, 0) };
        if cq.is_null() {
            return Err(os_error("ibv_create_cq", ctx.name(), errno()));
        }
        // SAFETY: fields of the CQ just created.
        let (id, real) = unsafe { ((*cq).handle, (*cq).cqe) };
        let c = Arc::new(NCq {
            ctx: ctx.clone(),
            cq,
            id,
            capacity: AtomicU32::new((real.max(0) as u32).max(cqe)),
            _channel: channel.cloned(),
        });
        ctx.cqs.lock().insert(id, Arc::downgrade(&c));
        Ok(c)
    }

    pub fn capacity(&self) -> u32 {
        self.capacity.load(Ordering::Acquire)
    }

    /// `ibv_resize_cq`; the new capacity is what the provider reports.
    pub fn resize(&self, cqe: u32) -> Result<u32, Error> {
        let cqe_c = c_int::try_from(cqe).map_err(|_| invalid("cqe", "too large"))?;
        let resize = self
            .ctx
            .v
            .resize_cq
            .ok_or_else(|| unsupported("ibv_resize_cq (the system's libibverbs lacks it)"))?;
        // SAFETY: live CQ of a live context.
        let rc = unsafe { resize(self.cq, cqe_c) };
        if rc != 0 {
            return Err(os_error("ibv_resize_cq", self.ctx.name(), rc));
        }
        // SAFETY: the CQ's own field, which the provider updated.
        let n = (unsafe { (*self.cq).cqe }.max(0) as u32).max(cqe);
        self.capacity.store(n, Ordering::Release);
        Ok(n)
    }

    /// `ibv_poll_cq`: `cq->context->ops.poll_cq(cq, n, wc)`.
    pub fn poll_into(&self, out: &mut Vec<Completion>, max: usize) -> usize {
        let mut wcs = [ibv_wc::default(); 16];
        let mut got = 0;
        while got < max {
            let want = (max - got).min(wcs.len());
            // SAFETY: live CQ of a live context; the ops table is the
            // provider's; `wcs` has room for `want` entries.
            let n = unsafe {
                match ops((*self.cq).context).poll_cq {
                    Some(f) => f(self.cq, want as c_int, wcs.as_mut_ptr()),
                    None => -1,
                }
            };
            if n <= 0 {
                break;
            }
            let n = n as usize;
            out.extend(wcs[..n].iter().map(completion));
            got += n;
            if n < want {
                break;
            }
        }
        got
    }

    /// `ibv_req_notify_cq`: `cq->context->ops.req_notify_cq(cq, solicited_only)`.
    pub fn req_notify(&self, solicited_only: bool) -> Result<(), Error> {
        // SAFETY: as in poll_into.
        let rc = unsafe {
            match ops((*self.cq).context).req_notify_cq {
                Some(f) => f(self.cq, c_int::from(solicited_only)),
                None => libc::EOPNOTSUPP,
            }
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(os_error("ibv_req_notify_cq", self.ctx.name(), rc_errno(rc)))
        }
    }
}

// -------------------------------------------------------------------- SRQ --

/// A native shared receive queue.
pub(crate) struct NSrq {
    ctx: Arc<NContext>,
    _pd: Arc<NPd>,
    srq: *mut ibv_srq,
    pub id: u32,
}

// SAFETY: see NContext.
unsafe impl Send for NSrq {}
// SAFETY: see NContext.
unsafe impl Sync for NSrq {}

impl Drop for NSrq {
    fn drop(&mut self) {
        self.ctx.srqs.lock().remove(&self.id);
        // SAFETY: every QP using the SRQ holds an Arc of it; destroyed once.
        unsafe { (self.ctx.v.destroy_srq)(self.srq) };
    }
}

impl NSrq {
    pub fn create(pd: &Arc<NPd>, max_wr: u32, max_sge: u32) -> Result<Arc<NSrq>, Error> {
        let ctx = &pd.ctx;
        let mut init = ibv_srq_init_attr {
            srq_context: ptr::null_mut(),
            attr: ibv_srq_attr {
                max_wr,
                max_sge,
                srq_limit: 0,
            },
        };
        // SAFETY: live PD, valid attributes.
        let srq = unsafe { (ctx.v.create_srq)(pd.pd, &mut init) };
        if srq.is_null() {
            return Err(os_error("ibv_create_srq", ctx.name(), errno()));
        }
        // SAFETY: field of the SRQ just created.
        let id = unsafe { (*srq).handle };
        let s = Arc::new(NSrq {
            ctx: ctx.clone(),
            _pd: pd.clone(),
            srq,
            id,
        });
        ctx.srqs.lock().insert(id, Arc::downgrade(&s));
        Ok(s)
    }

    /// `ibv_post_srq_recv`: `srq->context->ops.post_srq_recv(srq, wr, bad)`.
    pub fn post_recv(&self, wrs: &[RecvWr]) -> Result<(), Error> {
        if wrs.is_empty() {
            return Ok(());
        }
        let mut chain = RecvChain::new(wrs);
        let mut bad: *mut ibv_recv_wr = ptr::null_mut();
        // SAFETY: live SRQ; the chain's pointers stay valid for the call.
        let rc = unsafe {
            match ops((*self.srq).context).post_srq_recv {
                Some(f) => f(self.srq, chain.head(), &mut bad),
                None => libc::EOPNOTSUPP,
            }
        };
        chain.result(rc, bad, wrs, "shared receive queue", 0)
    }

    pub fn set_limit(&self, limit: u32) -> Result<(), Error> {
        let mut a = ibv_srq_attr {
            max_wr: 0,
            max_sge: 0,
            srq_limit: limit,
        };
        self.modify(&mut a, IBV_SRQ_LIMIT as c_int)
    }

    /// `ibv_modify_srq` with `IBV_SRQ_MAX_WR`; the new capacity is what the
    /// provider then reports.
    pub fn resize(&self, max_wr: u32) -> Result<u32, Error> {
        let mut a = ibv_srq_attr {
            max_wr,
            max_sge: 0,
            srq_limit: 0,
        };
        self.modify(&mut a, IBV_SRQ_MAX_WR as c_int)?;
        let Some(query) = self.ctx.v.query_srq else {
            return Ok(max_wr);
        };
        // SAFETY: live SRQ; `a` is written by the provider.
        let rc = unsafe { query(self.srq, &mut a) };
        if rc != 0 {
            return Err(os_error("ibv_query_srq", self.ctx.name(), rc_errno(rc)));
        }
        Ok(a.max_wr.max(max_wr))
    }

    fn modify(&self, a: &mut ibv_srq_attr, mask: c_int) -> Result<(), Error> {
        // SAFETY: live SRQ, valid attributes.
        let rc = unsafe { (self.ctx.v.modify_srq)(self.srq, a, mask) };
        if rc == 0 {
            Ok(())
        } else {
            Err(os_error("ibv_modify_srq", self.ctx.name(), rc_errno(rc)))
        }
    }
}

// ---------------------------------------------------------- work requests --

fn sges(list: &[Sge]) -> impl Iterator<Item = ibv_sge> + '_ {
    list.iter().map(|s| ibv_sge {
        addr: s.addr,
        length: s.length,
        lkey: s.lkey,
    })
}

/// The error for work request `index` refused with `errno`.
fn wr_error(index: usize, wr_id: u64, errno: i32, queue: &'static str, cap: u32) -> Error {
    let source = match errno {
        libc::ENOMEM => EngineError::QueueFull {
            queue,
            capacity: cap as usize,
        },
        e => EngineError::InvalidArgument {
            name: "wr",
            reason: format!(
                "refused by the device ({})",
                std::io::Error::from_raw_os_error(e)
            ),
        },
    };
    Error::BadWorkRequest {
        index,
        wr_id,
        source,
    }
}

/// A linked list of `ibv_recv_wr` built from the API's work requests; the
/// storage does not move while the chain is posted.
struct RecvChain {
    _sges: Vec<ibv_sge>,
    wrs: Vec<ibv_recv_wr>,
}

impl RecvChain {
    fn new(list: &[RecvWr]) -> RecvChain {
        // Moving the Vecs into the struct later does not move their heap
        // storage, which is what the pointers point into.
        let mut sges: Vec<ibv_sge> = list.iter().flat_map(|w| sges(&w.sg_list)).collect();
        let base = sges.as_mut_ptr();
        let mut wrs: Vec<ibv_recv_wr> = Vec::with_capacity(list.len());
        let mut at = 0;
        for w in list {
            let sg_list = if w.sg_list.is_empty() {
                ptr::null_mut()
            } else {
                // SAFETY: `at` is within `sges`, which is not resized after.
                unsafe { base.add(at) }
            };
            wrs.push(ibv_recv_wr {
                wr_id: w.wr_id,
                next: ptr::null_mut(),
                sg_list,
                num_sge: w.sg_list.len() as c_int,
            });
            at += w.sg_list.len();
        }
        let p = wrs.as_mut_ptr();
        for i in 1..wrs.len() {
            // SAFETY: both indices are in bounds; the Vec is not resized
            // after, and the write goes through the same raw pointer.
            unsafe { (*p.add(i - 1)).next = p.add(i) };
        }
        RecvChain { _sges: sges, wrs }
    }

    fn head(&mut self) -> *mut ibv_recv_wr {
        if self.wrs.is_empty() {
            ptr::null_mut()
        } else {
            self.wrs.as_mut_ptr()
        }
    }

    fn result(
        &self,
        rc: c_int,
        bad: *mut ibv_recv_wr,
        list: &[RecvWr],
        queue: &'static str,
        cap: u32,
    ) -> Result<(), Error> {
        if rc == 0 {
            return Ok(());
        }
        let index = index_of(self.wrs.as_ptr(), bad, self.wrs.len());
        let wr_id = list.get(index).map_or(0, |w| w.wr_id);
        Err(wr_error(index, wr_id, rc_errno(rc), queue, cap))
    }
}

/// Which element of `base[..n]` `bad` points at (0 if none).
fn index_of<T>(base: *const T, bad: *const T, n: usize) -> usize {
    let off = (bad as usize).wrapping_sub(base as usize) / std::mem::size_of::<T>().max(1);
    if bad.is_null() || off >= n {
        0
    } else {
        off
    }
}

fn wr_opcode(op: SendOpcode) -> u32 {
    match op {
        SendOpcode::Send => IBV_WR_SEND,
        SendOpcode::SendWithImm => IBV_WR_SEND_WITH_IMM,
        SendOpcode::SendWithInv => IBV_WR_SEND_WITH_INV,
        SendOpcode::RdmaWrite => IBV_WR_RDMA_WRITE,
        SendOpcode::RdmaWriteWithImm => IBV_WR_RDMA_WRITE_WITH_IMM,
        SendOpcode::RdmaRead => IBV_WR_RDMA_READ,
        SendOpcode::AtomicCmpSwap => IBV_WR_ATOMIC_CMP_AND_SWP,
        SendOpcode::AtomicFetchAdd => IBV_WR_ATOMIC_FETCH_AND_ADD,
        SendOpcode::AtomicWrite => IBV_WR_ATOMIC_WRITE,
        SendOpcode::LocalInv => IBV_WR_LOCAL_INV,
        SendOpcode::BindMw => IBV_WR_BIND_MW,
    }
}

// --------------------------------------------------------------------- QP --

fn from_mtu(m: u32) -> Mtu {
    match m {
        1 => Mtu::Mtu256,
        2 => Mtu::Mtu512,
        3 => Mtu::Mtu1024,
        4 => Mtu::Mtu2048,
        _ => Mtu::Mtu4096,
    }
}

/// A native queue pair.
pub(crate) struct NQp {
    ctx: Arc<NContext>,
    pd: Arc<NPd>,
    _send_cq: Arc<NCq>,
    _recv_cq: Arc<NCq>,
    _srq: Option<Arc<NSrq>>,
    qp: *mut ibv_qp,
    pub qpn: u32,
    pub cap: QpCap,
    /// The first send PSN, chosen at creation (as ibv_rc_pingpong does).
    pub initial_psn: u32,
}

// SAFETY: see NContext (providers lock their queues).
unsafe impl Send for NQp {}
// SAFETY: as above.
unsafe impl Sync for NQp {}

impl Drop for NQp {
    fn drop(&mut self) {
        // As on the soft stack: to ERR first, so posted work is flushed.
        let mut a = ibv_qp_attr {
            qp_state: IBV_QPS_ERR,
            ..Default::default()
        };
        // SAFETY: live QP, valid attributes; then destroyed once (nothing
        // else refers to it: async events are acknowledged when read).
        unsafe {
            (self.ctx.v.modify_qp)(self.qp, &mut a, QpAttrMask::STATE.bits() as c_int);
            (self.ctx.v.destroy_qp)(self.qp);
        }
    }
}

impl NQp {
    pub fn create(
        ctx: &Arc<NContext>,
        pd: &Arc<NPd>,
        attr: &crate::attr::QpInitAttr,
    ) -> Result<NQp, Error> {
        let (qp_type, cap, sq_sig_all) = (attr.qp_type, attr.cap, attr.sq_sig_all);
        let scq = ctx.cq_by_id(attr.send_cq)?;
        let rcq = ctx.cq_by_id(attr.recv_cq)?;
        let srq = attr.srq.map(|id| ctx.srq_by_id(id)).transpose()?;
        let mut init = ibv_qp_init_attr {
            qp_context: ptr::null_mut(),
            send_cq: scq.cq,
            recv_cq: rcq.cq,
            srq: srq.as_ref().map_or(ptr::null_mut(), |s| s.srq),
            cap: ibv_qp_cap {
                max_send_wr: cap.max_send_wr,
                max_recv_wr: if srq.is_some() { 0 } else { cap.max_recv_wr },
                max_send_sge: cap.max_send_sge,
                max_recv_sge: if srq.is_some() { 0 } else { cap.max_recv_sge },
                max_inline_data: cap.max_inline_data,
            },
            qp_type: match qp_type {
                QpType::Rc => IBV_QPT_RC,
                QpType::Uc => IBV_QPT_UC,
                QpType::Ud => IBV_QPT_UD,
            },
            sq_sig_all: c_int::from(sq_sig_all),
        };
        // SAFETY: live PD; the CQs and SRQ belong to the same context and
        // are kept alive by the QP.
        let qp = unsafe { (ctx.v.create_qp)(pd.pd, &mut init) };
        if qp.is_null() {
            return Err(os_error("ibv_create_qp", ctx.name(), errno()));
        }
        // SAFETY: field of the QP just created.
        let qpn = unsafe { (*qp).qp_num };
        let c = init.cap;
        Ok(NQp {
            ctx: ctx.clone(),
            pd: pd.clone(),
            _send_cq: scq,
            _recv_cq: rcq,
            _srq: srq,
            qp,
            qpn,
            cap: QpCap {
                max_send_wr: c.max_send_wr,
                max_recv_wr: c.max_recv_wr,
                max_send_sge: c.max_send_sge,
                max_recv_sge: c.max_recv_sge,
                max_inline_data: c.max_inline_data,
            },
            initial_psn: rand::random::<u32>() & 0x00ff_ffff,
        })
    }

    pub fn gid(&self) -> Ipv6Addr {
        self.ctx.gid
    }

    pub fn port(&self) -> u8 {
        self.ctx.port
    }

    pub fn modify(&self, attr: &QpAttr, mask: QpAttrMask) -> Result<(), Error> {
        let mut a = ibv_qp_attr {
            qp_state: attr.state.ibv_value(),
            cur_qp_state: attr.cur_state.ibv_value(),
            path_mtu: attr.path_mtu as u32,
            qkey: attr.qkey,
            rq_psn: attr.rq_psn.value(),
            sq_psn: attr.sq_psn.value(),
            dest_qp_num: attr.dest_qpn,
            qp_access_flags: attr.access.bits(),
            pkey_index: attr.pkey_index,
            en_sqd_async_notify: u8::from(attr.en_sqd_async_notify),
            max_rd_atomic: attr.max_rd_atomic,
            max_dest_rd_atomic: attr.max_dest_rd_atomic,
            min_rnr_timer: attr.min_rnr_timer,
            port_num: if mask.contains(QpAttrMask::PORT) && attr.port != 0 {
                attr.port
            } else {
                self.ctx.port
            },
            timeout: attr.timeout,
            retry_cnt: attr.retry_cnt,
            rnr_retry: attr.rnr_retry,
            ..Default::default()
        };
        if let Some(av) = &attr.av {
            a.ah_attr = self.pd.ah_attr(av);
        } else if mask.contains(QpAttrMask::AV) {
            return Err(invalid("av", "QpAttrMask::AV without an address vector"));
        }
        // The API's mask bits are ibv_qp_attr_mask's, bit for bit.
        let m = mask.bits() as c_int;
        // SAFETY: live QP, valid attributes.
        let rc = unsafe { (self.ctx.v.modify_qp)(self.qp, &mut a, m) };
        if rc == 0 {
            Ok(())
        } else {
            Err(os_error("ibv_modify_qp", self.ctx.name(), rc_errno(rc)))
        }
    }

    /// `ibv_attach_mcast` (`attach` true) or `ibv_detach_mcast`.
    pub fn mcast(&self, gid: [u8; 16], lid: u16, attach: bool) -> Result<(), Error> {
        let (f, name) = match attach {
            true => (self.ctx.v.attach_mcast, "ibv_attach_mcast"),
            false => (self.ctx.v.detach_mcast, "ibv_detach_mcast"),
        };
        let f =
            f.ok_or_else(|| unsupported(format!("{name} (the system's libibverbs lacks it)")))?;
        let g = ibv_gid { raw: gid };
        // SAFETY: live QP; the GID outlives the call.
        let rc = unsafe { f(self.qp, &g, lid) };
        if rc == 0 {
            Ok(())
        } else {
            Err(os_error(name, self.ctx.name(), rc_errno(rc)))
        }
    }

    pub fn query(&self) -> Result<(QpAttr, QpCap), Error> {
        let mut a = ibv_qp_attr::default();
        // SAFETY: zeroed plain struct with null pointers as out-parameter.
        let mut init: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        let mask = (1 << 21) - 1;
        // SAFETY: live QP, valid out-parameters.
        let rc = unsafe { (self.ctx.v.query_qp)(self.qp, &mut a, mask, &mut init) };
        if rc != 0 {
            return Err(os_error("ibv_query_qp", self.ctx.name(), rc_errno(rc)));
        }
        let g = &a.ah_attr.grh;
        let av = (a.ah_attr.is_global != 0).then(|| AddressVector {
            // SAFETY: either member of `union ibv_gid` is plain bytes.
            dest: addr_of(Ipv6Addr::from(unsafe { g.dgid.raw })),
            sgid_index: g.sgid_index,
            hop_limit: g.hop_limit,
            traffic_class: g.traffic_class,
            flow_label: g.flow_label,
        });
        let attr = QpAttr {
            state: QpState::from_ibv_value(a.qp_state).unwrap_or(QpState::Err),
            cur_state: QpState::from_ibv_value(a.cur_qp_state).unwrap_or(QpState::Err),
            access: Access::from_bits_truncate(a.qp_access_flags),
            pkey_index: a.pkey_index,
            port: a.port_num,
            qkey: a.qkey,
            av,
            path_mtu: from_mtu(a.path_mtu),
            timeout: a.timeout,
            retry_cnt: a.retry_cnt,
            rnr_retry: a.rnr_retry,
            rq_psn: Psn::new(a.rq_psn),
            sq_psn: Psn::new(a.sq_psn),
            max_rd_atomic: a.max_rd_atomic,
            max_dest_rd_atomic: a.max_dest_rd_atomic,
            min_rnr_timer: a.min_rnr_timer,
            dest_qpn: a.dest_qp_num,
            en_sqd_async_notify: a.en_sqd_async_notify != 0,
        };
        let c = a.cap;
        Ok((
            attr,
            QpCap {
                max_send_wr: c.max_send_wr,
                max_recv_wr: c.max_recv_wr,
                max_send_sge: c.max_send_sge,
                max_recv_sge: c.max_recv_sge,
                max_inline_data: c.max_inline_data,
            },
        ))
    }

    /// `ibv_post_send`: `qp->context->ops.post_send(qp, wr, bad_wr)`.
    pub fn post_send(&self, list: &[SendWr]) -> Result<(), Error> {
        // What this backend cannot express is refused before anything is posted.
        for (index, w) in list.iter().enumerate() {
            if w.opcode == SendOpcode::BindMw || w.bind.is_some() {
                return Err(unsupported(format!(
                    "work request {index} (wr_id {}): memory windows on a native device",
                    w.wr_id
                )));
            }
        }
        // Address handles for UD sends (kept alive for the call).
        let mut ahs = Vec::new();
        for w in list {
            if let Some(ud) = &w.ud {
                ahs.push(Some(self.pd.ah(&ud.av)?));
            } else {
                ahs.push(None);
            }
        }
        let count: usize = list
            .iter()
            .map(|w| {
                if w.inline_data.is_some() {
                    1
                } else {
                    w.sg_list.len()
                }
            })
            .sum();
        let mut sge_buf: Vec<ibv_sge> = Vec::with_capacity(count);
        for w in list {
            match &w.inline_data {
                // IBV_SEND_INLINE: the provider copies the bytes at post time.
                Some(d) => sge_buf.push(ibv_sge {
                    addr: d.as_ptr() as u64,
                    length: d.len() as u32,
                    lkey: 0,
                }),
                None => sge_buf.extend(sges(&w.sg_list)),
            }
        }
        let base = sge_buf.as_mut_ptr();
        let mut wrs: Vec<ibv_send_wr> = Vec::with_capacity(list.len());
        let mut at = 0;
        for (w, ah) in list.iter().zip(&ahs) {
            let n = if w.inline_data.is_some() {
                1
            } else {
                w.sg_list.len()
            };
            let mut flags = 0;
            if w.flags.contains(SendFlags::FENCE) {
                flags |= IBV_SEND_FENCE;
            }
            if w.flags.contains(SendFlags::SIGNALED) {
                flags |= IBV_SEND_SIGNALED;
            }
            if w.flags.contains(SendFlags::SOLICITED) {
                flags |= IBV_SEND_SOLICITED;
            }
            if w.flags.contains(SendFlags::INLINE) || w.inline_data.is_some() {
                flags |= IBV_SEND_INLINE;
            }
            let wr = match (&w.ud, ah) {
                (Some(ud), Some(ah)) => wr_union {
                    ud: wr_ud {
                        ah: ah.ah,
                        remote_qpn: ud.remote_qpn,
                        remote_qkey: ud.remote_qkey,
                    },
                },
                _ => match w.opcode {
                    SendOpcode::AtomicCmpSwap | SendOpcode::AtomicFetchAdd => wr_union {
                        atomic: wr_atomic {
                            remote_addr: w.remote_addr,
                            compare_add: w.compare_add,
                            swap: w.swap,
                            rkey: w.rkey,
                        },
                    },
                    _ => wr_union {
                        rdma: wr_rdma {
                            remote_addr: w.remote_addr,
                            rkey: w.rkey,
                        },
                    },
                },
            };
            let imm = match w.opcode {
                // __be32 in memory: the soft stack's value goes on the wire
                // big-endian, so store its big-endian bytes.
                SendOpcode::SendWithImm | SendOpcode::RdmaWriteWithImm => w.imm_data.to_be(),
                SendOpcode::SendWithInv | SendOpcode::LocalInv => w.invalidate_rkey,
                _ => 0,
            };
            let sg_list = if n == 0 {
                ptr::null_mut()
            } else {
                // SAFETY: `at` is within `sge_buf`, which is not resized after.
                unsafe { base.add(at) }
            };
            // The rest is zero (bindgen's Default): `next` is linked below,
            // and the XRC and bind_mw/tso unions are unused here.
            let x = ibv_send_wr {
                wr_id: w.wr_id,
                sg_list,
                num_sge: n as c_int,
                opcode: wr_opcode(w.opcode),
                send_flags: flags,
                __bindgen_anon_1: send_wr_imm { imm_data: imm },
                wr,
                ..Default::default()
            };
            wrs.push(x);
            at += n;
        }
        let p = wrs.as_mut_ptr();
        for i in 1..wrs.len() {
            // SAFETY: in bounds; `wrs` is not resized after, and the write
            // goes through the same raw pointer.
            unsafe { (*p.add(i - 1)).next = p.add(i) };
        }
        if wrs.is_empty() {
            return Ok(());
        }
        let mut bad: *mut ibv_send_wr = ptr::null_mut();
        // SAFETY: live QP; the chain, its SGEs, the inline bytes (borrowed
        // from `list`) and the address handles stay alive for the call.
        let rc = unsafe {
            match ops((*self.qp).context).post_send {
                Some(f) => f(self.qp, p, &mut bad),
                None => libc::EOPNOTSUPP,
            }
        };
        drop(ahs);
        if rc == 0 {
            return Ok(());
        }
        let index = index_of(wrs.as_ptr(), bad, wrs.len());
        let wr_id = list.get(index).map_or(0, |w| w.wr_id);
        Err(wr_error(
            index,
            wr_id,
            rc_errno(rc),
            "send queue",
            self.cap.max_send_wr,
        ))
    }

    /// `ibv_post_recv`: `qp->context->ops.post_recv(qp, wr, bad_wr)`.
    pub fn post_recv(&self, list: &[RecvWr]) -> Result<(), Error> {
        if list.is_empty() {
            return Ok(());
        }
        let mut chain = RecvChain::new(list);
        let mut bad: *mut ibv_recv_wr = ptr::null_mut();
        // SAFETY: live QP; the chain stays valid for the call.
        let rc = unsafe {
            match ops((*self.qp).context).post_recv {
                Some(f) => f(self.qp, chain.head(), &mut bad),
                None => libc::EOPNOTSUPP,
            }
        };
        chain.result(rc, bad, list, "receive queue", self.cap.max_recv_wr)
    }
}

#[cfg(test)]
mod tests;
