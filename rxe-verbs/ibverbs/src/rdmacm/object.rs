//! What an `rdma_cm_id` is ([`CmId`]: the program's struct, then the
//! library's state behind its lock) and what the other files keep in it:
//! the connection manager's side ([`CmSide`], `connect.rs`), the groups
//! joined ([`Joined`], `mcast.rs`), the routes of the connection
//! manager's events to ids ([`routes`]). Below `id.rs`, `connect.rs`,
//! `mcast.rs` and `qp.rs`, which all use it.

use super::channel::{self, Channel, Param, Pending};
use super::{gid, write_sockaddr, CmaDev};
use crate::event_count::EventCount;
use crate::ffi::Fail;
use crate::handle::{Handle, Kind};
use crate::sys::*;
use parking_lot::{Mutex, MutexGuard};
use rxe_verbs::cm as rcm;
use std::cell::UnsafeCell;
use std::collections::HashMap;
use std::ffi::c_int;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, OnceLock};

/// Where an id is, as the kernel's `rdma_cm_state` counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Idle,
    AddrBound,
    AddrResolved,
    RouteResolved,
    /// Listening (`rdma_listen`).
    Listen,
    /// Connecting or connected: an active id after `rdma_connect`, or the
    /// id of a connection request (`connect.rs`).
    Connect,
}

/// A copy of `rdma_create_ep`'s QP attributes for the ids a passive
/// endpoint's `rdma_get_request` returns.
#[derive(Clone, Copy)]
pub struct SavedQpAttr(pub ibv_qp_init_attr);

// SAFETY: the pointers in it (CQs, SRQ, context) are the program's objects
// of this library, only passed back to it.
unsafe impl Send for SavedQpAttr {}

/// What the library keeps about an id, behind its lock.
pub struct IdState {
    pub channel: Arc<Channel>,
    /// Created without a channel: the channel is the id's own, and calls
    /// complete before they return (librdmacm's synchronous mode).
    pub sync: bool,
    pub phase: Phase,
    pub dev: Option<&'static CmaDev>,
    pub src: Option<SocketAddr>,
    pub dst: Option<SocketAddr>,
    pub reuseaddr: bool,
    pub afonly: bool,
    pub tos: Option<u8>,
    pub ack_timeout: Option<u8>,
    pub path: Option<Box<ibv_sa_path_rec>>,
    pub qp_init_attr: Option<SavedQpAttr>,
    /// `ai_connect` of `rdma_create_ep`: private data put before the
    /// program's on `rdma_connect`.
    pub connect: Vec<u8>,
    /// ECE (`rdma_set_local_ece`, `rdma_get_remote_ece`): vendor ID and options.
    pub local_ece: (u32, u32),
    pub remote_ece: (u32, u32),
    /// The connection manager's side of the id (`connect.rs`): its
    /// rxe-verbs id once connecting or a connection request's, and a
    /// listener's ids (one per soft device it listens on).
    pub cm: CmSide,
    /// The multicast groups joined (`mcast.rs`).
    pub mcast: Vec<Joined>,
}

impl std::fmt::Debug for IdState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdState")
            .field("sync", &self.sync)
            .field("phase", &self.phase)
            .field("src", &self.src)
            .field("dst", &self.dst)
            .finish_non_exhaustive()
    }
}

/// An id: the program's `rdma_cm_id`, then ours.
#[repr(C)]
pub struct CmId {
    pub id: UnsafeCell<rdma_cm_id>,
    pub st: Mutex<IdState>,
    /// Events about this id taken and acknowledged.
    pub events: Arc<EventCount>,
    /// The id's `qp_type` and `ps`, as at creation (the program's copy is
    /// in the C struct).
    pub qp_type: ibv_qp_type,
    pub ps: rdma_port_space,
}

// SAFETY: the C struct is written only under `st`'s lock (and read by the
// program as librdmacm's is); the rest is Send + Sync.
unsafe impl Send for CmId {}
// SAFETY: as above.
unsafe impl Sync for CmId {}

impl CmId {
    /// The program's pointer.
    pub fn c(&self) -> *mut rdma_cm_id {
        self.id.get()
    }
    pub fn addr(&self) -> usize {
        self.c() as usize
    }
    pub fn lock(&self) -> MutexGuard<'_, IdState> {
        self.st.lock()
    }
    /// The id's `qp_type` and `ps` (written once, at creation).
    pub fn kind(&self) -> (ibv_qp_type, rdma_port_space) {
        (self.qp_type, self.ps)
    }

    /// Queues an event about this id on its channel.
    pub fn queue(&self, st: &IdState, event: rdma_cm_event_type, status: c_int, param: Param) {
        st.channel.push(Pending {
            id: self.addr(),
            listen_id: 0,
            event,
            status,
            param,
            count: self.events.clone(),
        });
    }

    /// Writes the route's addresses and GIDs as librdmacm's
    /// `ucma_query_route` copies them from the kernel.
    pub fn write_route(&self, st: &IdState) {
        let c = self.c();
        // SAFETY: the id is ours and locked (st); the fields are plain data.
        unsafe {
            write_sockaddr(
                (&raw mut (*c).route.addr.__bindgen_anon_1.src_storage).cast(),
                st.src,
            );
            // A bound id's destination is its family's wildcard, as the
            // kernel reports it.
            write_sockaddr(
                (&raw mut (*c).route.addr.__bindgen_anon_2.dst_storage).cast(),
                st.dst.or(st.src.map(|a| any_of(&a))),
            );
            let ib = &mut (*c).route.addr.addr.ibaddr;
            if st.dev.is_some() {
                ib.sgid = st.src.map_or(ibv_gid { raw: [0; 16] }, |a| gid(a.ip()));
                ib.dgid = st.dst.map_or(ibv_gid { raw: [0; 16] }, |a| gid(a.ip()));
                ib.pkey = 0xffff;
            } else {
                ib.sgid = ibv_gid { raw: [0; 16] };
                ib.dgid = ibv_gid { raw: [0; 16] };
                ib.pkey = 0;
            }
        }
    }

    /// Gives the id its device: context, the library's PD, port 1.
    pub fn attach(&self, st: &mut IdState, d: &'static CmaDev) -> Result<(), Fail> {
        let op = d.open()?;
        st.dev = Some(d);
        let c = self.c();
        // SAFETY: the id is ours and locked.
        unsafe {
            (*c).verbs = op.ctx;
            (*c).pd = op.pd;
            (*c).port_num = 1;
        }
        Ok(())
    }
}

impl Handle for CmId {
    const KIND: Kind = Kind::CmId;
    type C = rdma_cm_id;
    const NOT_LIVE: &'static str = "not an rdma_cm_id of rdma_create_id, or destroyed";
    const NULL: &'static str = "NULL";
}

/// librdmacm's `ucma_complete`: in synchronous mode, take the event the
/// call queued (acknowledging the one before it) and turn its status into
/// the call's result. An asynchronous id returns at once.
pub fn complete(cm: &CmId) -> Result<(), Fail> {
    let (sync, ch) = {
        let st = cm.lock();
        (st.sync, st.channel.clone())
    };
    if !sync {
        return Ok(());
    }
    let c = cm.c();
    // SAFETY: the id is live; `event` is the library's field.
    let prev = unsafe { std::mem::replace(&mut (*c).event, std::ptr::null_mut()) };
    if !prev.is_null() {
        let _ = channel::ack_event(prev);
    }
    let e = channel::get_event(&ch)?;
    // SAFETY: as above.
    unsafe { (*c).event = e };
    // SAFETY: an event just made.
    let (event, status) = unsafe { ((*e).event, (*e).status) };
    if status != 0 {
        let errno = if event == RDMA_CM_EVENT_REJECTED {
            libc::ECONNREFUSED
        } else {
            status.abs()
        };
        return Err(Fail::new(
            errno,
            format!("{} (status {status})", event_name(event)),
        ));
    }
    Ok(())
}

pub fn event_name(e: rdma_cm_event_type) -> String {
    // SAFETY: rdma_event_str returns a static NUL-terminated string.
    unsafe { std::ffi::CStr::from_ptr(channel::rdma_event_str(e)) }
        .to_string_lossy()
        .into_owned()
}

/// The wildcard address of `a`'s family.
pub fn any_of(a: &SocketAddr) -> SocketAddr {
    match a {
        SocketAddr::V4(_) => SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0),
        SocketAddr::V6(_) => SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 0),
    }
}

/// What an id has of the connection manager.
#[derive(Debug, Default)]
pub struct CmSide {
    /// The connection's rxe-verbs id.
    pub rx: Option<rcm::CmId>,
    /// A listener's rxe-verbs ids, one per device.
    pub listeners: Vec<rcm::CmId>,
    /// The request's depths (initiator depth, responder resources), for
    /// `rdma_accept` without parameters or with the maxima.
    pub req_depths: (u8, u8),
    /// `rdma_establish` was called: the ESTABLISHED that follows is not
    /// reported (the kernel reports none for an RTU it sends).
    pub quiet_established: bool,
    /// The id was made for a connection request (the passive side).
    pub passive: bool,
    /// The id had a connection of the CM's (it listened, connected or
    /// was made for a request): rdma_disconnect then succeeds, as the
    /// kernel's does for any id with an IB CM id.
    pub had_cm: bool,
}

/// A group an id joined.
#[derive(Debug, Clone)]
pub struct Joined {
    /// The address the program joined, as it gave it.
    pub addr: SocketAddr,
    pub gid: [u8; 16],
    /// The QP attached to the group (`rdma_cm_id.qp` at the join), if any.
    pub qp: usize,
}

// ---------------------------------------------------------------------------
// The routes of the connection manager's events
// ---------------------------------------------------------------------------

/// Which `rdma_cm_id` (address) each rxe-verbs id belongs to: the bridge
/// (`connect.rs`) delivers each event to the id found here. Locks: this
/// table, then an id's state; a call never takes the table while it holds
/// an id's state.
pub fn routes() -> &'static Mutex<HashMap<rcm::CmId, usize>> {
    static R: OnceLock<Mutex<HashMap<rcm::CmId, usize>>> = OnceLock::new();
    R.get_or_init(Default::default)
}

/// Stops routing `rx`'s events (and drops the table's reference).
pub fn unroute(rx: &rcm::CmId) {
    routes().lock().remove(rx);
}

/// An id is being destroyed: its rxe-verbs ids go (a connection being set
/// up is rejected, an established one disconnected, a listener stops).
pub fn forget(cm: &CmId) {
    let side = std::mem::take(&mut cm.lock().cm);
    if side.rx.is_none() && side.listeners.is_empty() {
        return;
    }
    let mut ids = routes().lock();
    for rx in side.rx.iter().chain(&side.listeners) {
        ids.remove(rx);
    }
    drop(ids);
    if let Some(rx) = &side.rx {
        rx.destroy();
    }
    for l in &side.listeners {
        l.destroy();
    }
}
