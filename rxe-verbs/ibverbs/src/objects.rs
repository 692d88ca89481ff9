//! The Rust objects behind the program's pointers: each starts with the
//! C struct the program holds (`ibv_context` inside a `verbs_context`,
//! `ibv_pd`, `ibv_mr`, `ibv_cq_ex`, `ibv_qp_ex`, ...) and owns the rxe-verbs
//! object behind it, and each is a [`Handle`] of the registry of live
//! objects. The verbs that make, use and destroy them are in the modules
//! of their families (`context`, `mem`, `mw`, `cq`, `qp`); what they share
//! is here, below all of them.

use crate::event_count::EventCount;
use crate::event_queue::EventQueue;
use crate::events::EventPipe;
use crate::ffi::Fail;
use crate::handle::{Handle, Kind};
use crate::sys::*;
use parking_lot::Mutex;
use rxe_core::types::{Completion, QpType, SendWr};
use rxe_verbs::{
    AddressHandle, AsyncEventKind, CompletionChannel, CompletionQueue, ForeignRegion, MemoryWindow,
    ProtectionDomain, QueuePair, SharedReceiveQueue,
};
use std::cell::UnsafeCell;
use std::collections::{HashMap, VecDeque};
use std::ffi::c_uint;
use std::mem::offset_of;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize};
use std::sync::{Arc, Weak};

// ---- devices ---------------------------------------------------------------

/// A soft device: the `ibv_device` a program sees, first, then ours.
#[repr(C)]
pub struct Dev {
    pub dev: ibv_device,
    pub rx: rxe_verbs::Device,
    /// The node GUID, as the program reads it (big-endian).
    pub guid_be: u64,
    /// The one engine every context of this device in the process shares
    /// (a second bind of the address would fail).
    pub open: Mutex<Weak<DevOpen>>,
}

// SAFETY: the raw pointers in `dev` are never set (the obsolete ops
// table); everything else is Send + Sync.
unsafe impl Send for Dev {}
// SAFETY: as above; `dev` is never written after creation.
unsafe impl Sync for Dev {}

// ---- open devices and contexts ---------------------------------------------

/// An async event on its way to the program (`ibv_async_event` with its
/// pointer as an address, so it may cross threads).
#[derive(Debug, Clone)]
pub struct Pending {
    pub event_type: ibv_event_type,
    pub element: usize,
    /// The object's counts.
    pub count: Arc<EventCount>,
}

/// A context's async events: the queue and the descriptor that shows it.
#[derive(Debug)]
pub struct CtxEvents {
    pub q: EventQueue<Pending, EventPipe>,
}

impl CtxEvents {
    fn push(&self, p: Pending) {
        self.q.push(p);
    }

    /// Drops the events about the object at `element` that the program
    /// has not taken yet (it is being destroyed).
    pub fn forget(&self, element: usize) {
        self.q.withdraw(|p| p.element == element);
    }
}

/// Where the events about one object go.
#[derive(Debug)]
pub struct Route {
    pub to: Weak<CtxEvents>,
    /// For an SRQ: its armed limit, which the limit event disarms (0).
    pub disarm: Option<Arc<std::sync::atomic::AtomicU32>>,
    /// The object's address, as the program knows it.
    pub ptr: usize,
    pub count: Arc<EventCount>,
}

impl Route {
    /// Drops the events about the object not yet taken (it is destroyed).
    pub fn forget(self) {
        if let Some(to) = self.to.upgrade() {
            to.forget(self.ptr);
        }
    }
}

/// The routes of a device's events: QPs, CQs and SRQs by number.
#[derive(Debug, Default)]
pub struct Routes {
    pub qps: HashMap<u32, Route>,
    pub cqs: HashMap<u32, Route>,
    pub srqs: HashMap<u32, Route>,
}

impl Routes {
    fn deliver(&self, e: AsyncEventKind) {
        let (table, n, event_type) = match e {
            AsyncEventKind::QpFatal(q) => (&self.qps, q, IBV_EVENT_QP_FATAL),
            AsyncEventKind::CommEstablished(q) => (&self.qps, q, IBV_EVENT_COMM_EST),
            AsyncEventKind::SqDrained(q) => (&self.qps, q, IBV_EVENT_SQ_DRAINED),
            AsyncEventKind::CqError(c) => (&self.cqs, c, IBV_EVENT_CQ_ERR),
            AsyncEventKind::SrqLimitReached(s) => (&self.srqs, s, IBV_EVENT_SRQ_LIMIT_REACHED),
            // The kernel raises no PORT_ACTIVE when a device is opened; the
            // engine's opening event is not passed on.
            AsyncEventKind::PortActive => return,
        };
        let Some(r) = table.get(&n) else { return };
        if let Some(limit) = &r.disarm {
            limit.store(0, std::sync::atomic::Ordering::Release);
        }
        let Some(to) = r.to.upgrade() else { return };
        to.push(Pending {
            event_type,
            element: r.ptr,
            count: r.count.clone(),
        });
    }
}

/// A device opened in this process: the engine and its event routes.
pub struct DevOpen {
    pub rx: rxe_verbs::Context,
    pub routes: Arc<Mutex<Routes>>,
}

impl std::fmt::Debug for DevOpen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DevOpen").field("rx", &self.rx).finish()
    }
}

impl DevOpen {
    /// Opens `d`'s engine (binds its address) with its event routes.
    pub fn open(d: &Dev) -> Result<Arc<DevOpen>, Fail> {
        let rx = d.rx.open().map_err(|e| {
            let f = Fail::from(e);
            if f.errno == libc::EADDRINUSE {
                eprintln!(
                    "rxe-ibverbs: cannot open {}: UDP {}:4791 is taken by a program that does \
                     not share it (rxe-rs processes share an address; this one is something \
                     else, or another user's); give this process another address, for \
                     example `rxe exec -d 127.0.0.3 -- ...`",
                    d.rx.name(),
                    d.rx.addr()
                );
            }
            f
        })?;
        let routes = Arc::new(Mutex::new(Routes::default()));
        let r = routes.clone();
        rx.set_async_notify(Box::new(move |e| r.lock().deliver(e)))?;
        Ok(Arc::new(DevOpen { rx, routes }))
    }
}

/// An open context: rdma-core's `verbs_context` (with the `ibv_context`
/// the program holds at its end), then ours.
#[repr(C)]
pub struct Ctx {
    pub v: verbs_context,
    pub dev: &'static Dev,
    pub open: Arc<DevOpen>,
    pub events: Arc<CtxEvents>,
    /// `cmd_fd` ([`crate::import`]), closed with the context.
    pub cmd: crate::import::CmdFd,
}

/// The program's `ibv_context` is the end of the `verbs_context`.
impl Handle for Ctx {
    const KIND: Kind = Kind::Context;
    type C = ibv_context;
    const NOT_LIVE: &'static str = "not an open context";
    const NULL: &'static str = "NULL";
    const OFFSET: usize = offset_of!(verbs_context, context);
}

/// The `ibv_context` pointer of a context.
pub fn ibv_ctx(c: &Ctx) -> *mut ibv_context {
    std::ptr::from_ref(&c.v.context).cast_mut()
}

// ---- protection domains and memory regions ---------------------------------

/// A protection domain: the program's `ibv_pd`, then ours.
#[repr(C)]
pub struct Pd {
    pub pd: ibv_pd,
    pub rx: ProtectionDomain,
    pub open: Arc<DevOpen>,
    /// Objects created in the PD and not yet destroyed: deallocating it
    /// before them is EBUSY, as the kernel answers.
    pub users: AtomicUsize,
}

impl Handle for Pd {
    const KIND: Kind = Kind::Pd;
    type C = ibv_pd;
    const NOT_LIVE: &'static str = "not an allocated protection domain";
    const NULL: &'static str = "NULL";
}

/// A memory region: the program's `ibv_mr`, then ours.
#[repr(C)]
pub struct Mr {
    pub mr: ibv_mr,
    pub reg: Option<ForeignRegion>,
    pub pd: *const Pd,
    /// The access flags as the program gave them.
    pub access: c_uint,
    /// The I/O virtual address the region was registered at.
    pub iova: u64,
}

impl Handle for Mr {
    const KIND: Kind = Kind::Mr;
    type C = ibv_mr;
    const NOT_LIVE: &'static str = "not a registered memory region";
}

// ---- memory windows --------------------------------------------------------

/// A memory window: the program's `ibv_mw`, then ours.
#[repr(C)]
pub struct Mw {
    pub mw: ibv_mw,
    /// The engine's window; dropping it frees the window under its current
    /// key.
    pub rx: Mutex<Option<MemoryWindow>>,
    pub pd: *const Pd,
}

impl Handle for Mw {
    const KIND: Kind = Kind::Mw;
    type C = ibv_mw;
    const NOT_LIVE: &'static str = "not an allocated memory window";
    const NULL: &'static str = "NULL";
}

// ---- completion channels and queues ----------------------------------------

/// A completion channel: the program's `ibv_comp_channel`, then ours.
#[repr(C)]
pub struct Channel {
    pub ch: ibv_comp_channel,
    pub rx: CompletionChannel,
    /// Its events (the numbers of the CQs that fired), which `rx` hands
    /// over as they come, and the descriptor that shows them.
    pub q: Arc<EventQueue<u32, EventPipe>>,
    /// The CQs on this channel, by number, at their addresses.
    pub cqs: Mutex<HashMap<u32, usize>>,
    pub open: Arc<DevOpen>,
}

impl Handle for Channel {
    const KIND: Kind = Kind::Channel;
    type C = ibv_comp_channel;
    const NOT_LIVE: &'static str = "not a completion channel";
}

/// A completion queue: the program's `ibv_cq_ex` (whose start is the
/// `ibv_cq`), then ours.
#[repr(C)]
pub struct Cq {
    /// What the program sees (and `ibv_start_poll` writes: `status`, `wr_id`).
    pub cq: UnsafeCell<ibv_cq_ex>,
    pub rx: CompletionQueue,
    pub open: Arc<DevOpen>,
    pub channel: *const Channel,
    /// Completion events handed out by `ibv_get_cq_event` and acknowledged.
    pub comp_events: EventCount,
    pub async_events: Arc<EventCount>,
    /// Completions taken from the engine and not yet given to the program
    /// (the extended polling takes several at a time).
    pub taken: Mutex<VecDeque<Completion>>,
    /// Whether `taken` may hold anything: lets `ibv_poll_cq` skip its lock
    /// (only the extended polling fills it).
    pub taken_any: AtomicBool,
    /// The completion `ibv_wc_read_*` reads (extended polling).
    pub current: Mutex<Option<Completion>>,
    /// QPs that use the CQ: destroying it before them is EBUSY.
    pub users: AtomicUsize,
    /// What a UD receive completion carries in `sl`: the RoCE v2 L3 type
    /// of its GRH area (2 IPv4, 1 IPv6), as mlx5 reports it and UCX reads
    /// it (docs/divergences.md: the kernel's rxe leaves 0).
    pub ud_sl: u8,
}

impl Handle for Cq {
    const KIND: Kind = Kind::Cq;
    type C = ibv_cq;
    const NOT_LIVE: &'static str = "not a completion queue";
}

// ---- queue pairs, shared receive queues, address handles -------------------

/// A queue pair: the program's `ibv_qp_ex` (whose start is the `ibv_qp`),
/// then ours.
#[repr(C)]
pub struct Qp {
    /// What the program sees, and writes (`wr_id`, `wr_flags`, `qp_context`).
    pub qp: UnsafeCell<ibv_qp_ex>,
    pub rx: QueuePair,
    pub open: Arc<DevOpen>,
    pub limits: SendLimits,
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_recv_sge: u32,
    pub sq_sig_all: bool,
    pub pd: *const Pd,
    pub send_cq: *const Cq,
    pub recv_cq: *const Cq,
    pub srq: *const Srq,
    pub async_events: Arc<EventCount>,
    /// The work requests of an `ibv_wr_start` ... `ibv_wr_complete` batch.
    pub batch: Mutex<Batch>,
    /// The `ibv_qp_attr_mask` bits some `ibv_modify_qp` has set:
    /// `ibv_query_qp` shows the others as the kernel's rxe does, as zeroes.
    pub applied: AtomicU32,
    /// The multicast groups attached, as (GID, LID) ([`crate::mcast`]).
    pub mcast: Mutex<Vec<([u8; 16], u16)>>,
}

/// An extended-posting batch: the WRs so far, or the first error.
#[derive(Debug, Default)]
pub struct Batch {
    pub wrs: Vec<SendWr>,
    pub error: Option<(i32, String)>,
    pub open: bool,
}

impl Handle for Qp {
    const KIND: Kind = Kind::Qp;
    type C = ibv_qp;
    const NOT_LIVE: &'static str = "not a queue pair";
}

/// A shared receive queue: the program's `ibv_srq`, then ours.
#[repr(C)]
pub struct Srq {
    pub srq: ibv_srq,
    pub rx: SharedReceiveQueue,
    pub open: Arc<DevOpen>,
    pub pd: *const Pd,
    /// `max_wr` and `max_sge` as created (`srq_limit` is in `limit`).
    pub attr: Mutex<ibv_srq_attr>,
    /// The armed limit: set by `ibv_modify_srq`, 0 again once the limit
    /// event fired (the engine disarms it then, as the kernel does).
    pub limit: Arc<AtomicU32>,
    pub async_events: Arc<EventCount>,
    pub users: AtomicUsize,
}

impl Handle for Srq {
    const KIND: Kind = Kind::Srq;
    type C = ibv_srq;
    const NOT_LIVE: &'static str = "not a shared receive queue";
}

/// An address handle: the program's `ibv_ah`, then ours.
#[repr(C)]
pub struct Ah {
    pub ah: ibv_ah,
    pub rx: AddressHandle,
    pub pd: *const Pd,
}

impl Handle for Ah {
    const KIND: Kind = Kind::Ah;
    type C = ibv_ah;
    const NOT_LIVE: &'static str = "not an address handle";
}

/// What the engine needs to know of the QP a WR goes to.
#[derive(Debug, Clone, Copy)]
pub struct SendLimits {
    pub qp_type: QpType,
    pub max_sge: u32,
    pub max_inline: u32,
}
