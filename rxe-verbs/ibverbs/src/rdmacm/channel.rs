//! Event channels and their events: `rdma_create_event_channel`,
//! `rdma_destroy_event_channel`, `rdma_get_cm_event`, `rdma_ack_cm_event`,
//! `rdma_event_str`.
//!
//! A channel's `fd` is an [`EventPipe`]: one byte per event queued and not
//! yet taken ([`EventQueue`]). `rdma_get_cm_event` reads a byte (so it
//! blocks, or fails with EAGAIN, as the program set the descriptor) and
//! takes the event behind it. An event taken is counted on its id until it
//! is acknowledged:
//! `rdma_destroy_id` and `rdma_migrate_id` wait for those, as librdmacm's
//! do.

use super::{init, minus_one};
use crate::event_count::EventCount;
use crate::event_queue::EventQueue;
use crate::events::EventPipe;
use crate::ffi::{entry, ptr_result, Fail};
use crate::handle::{self, Handle, Kind};
use crate::sys::*;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, CStr};
use std::sync::{Arc, OnceLock};

/// The connection parameters an event carries (`rdma_conn_param`), owned.
#[derive(Debug, Clone, Default)]
pub struct ConnParam {
    pub private_data: Vec<u8>,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: u8,
    pub qp_num: u32,
}

/// The UD parameters an event carries (`rdma_ud_param`), owned.
#[derive(Clone, Default)]
pub struct UdParam {
    pub private_data: Vec<u8>,
    pub ah_attr: ibv_ah_attr,
    pub qp_num: u32,
    pub qkey: u32,
    /// A multicast event's `private_data`: the context the program gave
    /// `rdma_join_multicast`, passed back as the pointer itself.
    pub context: Option<usize>,
}

impl std::fmt::Debug for UdParam {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdParam")
            .field("private_data", &self.private_data)
            .field("qp_num", &self.qp_num)
            .field("qkey", &self.qkey)
            .finish()
    }
}

/// What an event says besides its type and status. The address and route
/// events carry nothing; the connection events of the CM protocol
/// (`connect.rs`) carry `Conn` (RC), and will carry `Ud` (SIDR).
#[derive(Debug, Clone, Default)]
#[allow(dead_code)]
pub enum Param {
    #[default]
    None,
    Conn(ConnParam),
    Ud(UdParam),
}

/// An event queued on a channel, not yet taken.
#[derive(Debug)]
pub struct Pending {
    /// The `rdma_cm_id` it is about (its address).
    pub id: usize,
    /// For a connection request: the listening id.
    pub listen_id: usize,
    pub event: rdma_cm_event_type,
    /// 0, or a negative errno (as the kernel reports it).
    pub status: c_int,
    pub param: Param,
    /// The id's count of events taken and acknowledged.
    pub count: Arc<EventCount>,
}

/// An event channel: the program's `rdma_event_channel`, then ours.
#[repr(C)]
#[derive(Debug)]
pub struct Channel {
    pub ch: rdma_event_channel,
    q: EventQueue<Pending, EventPipe>,
}

impl Handle for Channel {
    const KIND: Kind = Kind::CmChannel;
    type C = rdma_event_channel;
    const NOT_LIVE: &'static str = "not an event channel of rdma_create_event_channel";
    const NULL: &'static str = "NULL";
}

/// The channels not destroyed, by address: the program's reference.
fn channels() -> &'static Mutex<HashMap<usize, Arc<Channel>>> {
    static C: OnceLock<Mutex<HashMap<usize, Arc<Channel>>>> = OnceLock::new();
    C.get_or_init(Default::default)
}

impl Channel {
    /// A new channel, registered (the program may use its pointer).
    pub fn create() -> Result<Arc<Channel>, Fail> {
        let pipe = EventPipe::new()
            .map_err(|e| Fail::new(e.raw_os_error().unwrap_or(libc::EMFILE), e.to_string()))?;
        let c = Arc::new(Channel {
            ch: rdma_event_channel { fd: pipe.fd() },
            q: EventQueue::new(pipe),
        });
        let addr = c.ptr() as usize;
        channels().lock().insert(addr, c.clone());
        handle::add(Arc::as_ptr(&c));
        Ok(c)
    }

    /// The pointer the program holds.
    pub fn ptr(&self) -> *mut rdma_event_channel {
        std::ptr::from_ref(&self.ch).cast_mut()
    }

    /// Drops the program's reference (ids still on it keep it alive, but
    /// it is no longer a channel the program can name).
    pub fn unregister(&self) {
        let addr = self.ptr() as usize;
        handle::remove(std::ptr::from_ref(self));
        channels().lock().remove(&addr);
    }

    /// Queues an event and makes the descriptor readable.
    pub fn push(&self, p: Pending) {
        self.q.push(p);
    }

    /// Takes out the events about the id at `id` not yet taken, and the
    /// connection requests for it (a listener).
    pub fn withdraw(&self, id: usize) -> Vec<Pending> {
        self.q.withdraw(|p| p.id == id || p.listen_id == id)
    }

    /// The next event, blocking unless the program set O_NONBLOCK on the
    /// descriptor. It counts as reported on its id before the queue's lock
    /// is released, so that a concurrent `rdma_destroy_id` waits for it.
    fn take(&self) -> Result<Pending, Fail> {
        self.q
            .take(|p| {
                p.count.reported(1);
                Some(p)
            })
            .map_err(|e| {
                Fail::new(
                    e,
                    if e == libc::EAGAIN {
                        "no event (the channel's fd is non-blocking)".to_string()
                    } else {
                        format!("reading the channel's fd: errno {e}")
                    },
                )
            })
    }
}

/// The channel behind a program's pointer.
pub fn channel_of(p: *mut rdma_event_channel) -> Result<Arc<Channel>, Fail> {
    if p.is_null() {
        return Err(Fail::inval("channel", "NULL"));
    }
    channels()
        .lock()
        .get(&(p as usize))
        .cloned()
        .ok_or_else(|| {
            Fail::inval(
                "channel",
                "not an event channel of rdma_create_event_channel",
            )
        })
}

/// An event the program took: rdma-core's `rdma_cm_event`, then ours (the
/// private data its parameters point to).
#[repr(C)]
pub struct CmEvent {
    pub ev: rdma_cm_event,
    private_data: [u8; 256],
    count: Arc<EventCount>,
}

impl Handle for CmEvent {
    const KIND: Kind = Kind::CmEvent;
    type C = rdma_cm_event;
    const NOT_LIVE: &'static str = "not an event of rdma_get_cm_event, or acknowledged already";
    const NULL: &'static str = "NULL";
}

/// Takes the next event of `ch` and gives it to the program.
pub fn get_event(ch: &Channel) -> Result<*mut rdma_cm_event, Fail> {
    let p = ch.take()?;
    // SAFETY: rdma_cm_event is plain data; all zeroes is valid.
    let ev: rdma_cm_event = unsafe { std::mem::zeroed() };
    let mut e = Box::new(CmEvent {
        ev,
        private_data: [0; 256],
        count: p.count.clone(),
    });
    e.ev.id = p.id as *mut rdma_cm_id;
    e.ev.listen_id = p.listen_id as *mut rdma_cm_id;
    e.ev.event = p.event;
    e.ev.status = p.status;
    let data = e.private_data.as_ptr();
    match &p.param {
        Param::None => {}
        Param::Conn(c) => {
            let n = c.private_data.len().min(256);
            e.private_data[..n].copy_from_slice(&c.private_data[..n]);
            // SAFETY: the union is zeroed plain data; conn is the member written.
            let conn = unsafe { &mut e.ev.param.conn };
            conn.private_data = if n > 0 { data.cast() } else { std::ptr::null() };
            conn.private_data_len = n.min(255) as u8;
            conn.responder_resources = c.responder_resources;
            conn.initiator_depth = c.initiator_depth;
            conn.flow_control = c.flow_control;
            conn.retry_count = c.retry_count;
            conn.rnr_retry_count = c.rnr_retry_count;
            conn.srq = c.srq;
            conn.qp_num = c.qp_num;
        }
        Param::Ud(u) => {
            let n = u.private_data.len().min(256);
            e.private_data[..n].copy_from_slice(&u.private_data[..n]);
            // SAFETY: the union is zeroed plain data; ud is the member written.
            let ud = unsafe { &mut e.ev.param.ud };
            ud.private_data = match u.context {
                Some(c) => c as *const std::ffi::c_void,
                None if n > 0 => data.cast(),
                None => std::ptr::null(),
            };
            ud.private_data_len = if u.context.is_some() {
                0
            } else {
                n.min(255) as u8
            };
            ud.ah_attr = u.ah_attr;
            ud.qp_num = u.qp_num;
            ud.qkey = u.qkey;
        }
    }
    let raw = Box::into_raw(e);
    handle::add(raw);
    Ok(raw.cast())
}

/// Acknowledges (frees) an event the program took.
pub fn ack_event(event: *mut rdma_cm_event) -> Result<(), Fail> {
    let e = handle::check::<CmEvent>(event, "event")?;
    if !handle::remove(e) {
        return Err(Fail::inval("event", CmEvent::NOT_LIVE));
    }
    // SAFETY: a live event is a Box<CmEvent> at this address, now ours.
    let e = unsafe { Box::from_raw(e) };
    e.count.acked(1);
    Ok(())
}

entry! {
    pub unsafe extern "C" fn rdma_create_event_channel() -> *mut rdma_event_channel {
        let r = init().and_then(|()| Channel::create()).map(|c| c.ptr());
        ptr_result(VERB, r)
    }
}

entry! {
    /// Closes the descriptor's owner and frees the channel. Its ids should be
    /// gone (librdmacm says so); any that remain keep working on it, but the
    /// program can no longer name it.
    pub unsafe extern "C" fn rdma_destroy_event_channel(channel: *mut rdma_event_channel) {
        match channel_of(channel) {
            Ok(c) => c.unregister(),
            Err(f) => crate::ffi::note(VERB, &f.why),
        }
    }
}

entry! {
    on_panic = -1;
    pub unsafe extern "C" fn rdma_get_cm_event(
        channel: *mut rdma_event_channel,
        event: *mut *mut rdma_cm_event,
    ) -> c_int {
        minus_one(VERB, || {
            init()?;
            let c = channel_of(channel)?;
            if event.is_null() {
                return Err(Fail::inval("event", "NULL"));
            }
            let e = get_event(&c)?;
            // SAFETY: checked non-NULL; the program's output.
            unsafe { event.write(e) };
            Ok(())
        })
    }
}

entry! {
    on_panic = -1;
    pub unsafe extern "C" fn rdma_ack_cm_event(event: *mut rdma_cm_event) -> c_int {
        minus_one(VERB, || ack_event(event))
    }
}

entry! {
    data;
    pub unsafe extern "C" fn rdma_event_str(event: rdma_cm_event_type) -> *const c_char {
        let s: &CStr = match event {
            RDMA_CM_EVENT_ADDR_RESOLVED => c"RDMA_CM_EVENT_ADDR_RESOLVED",
            RDMA_CM_EVENT_ADDR_ERROR => c"RDMA_CM_EVENT_ADDR_ERROR",
            RDMA_CM_EVENT_ROUTE_RESOLVED => c"RDMA_CM_EVENT_ROUTE_RESOLVED",
            RDMA_CM_EVENT_ROUTE_ERROR => c"RDMA_CM_EVENT_ROUTE_ERROR",
            RDMA_CM_EVENT_CONNECT_REQUEST => c"RDMA_CM_EVENT_CONNECT_REQUEST",
            RDMA_CM_EVENT_CONNECT_RESPONSE => c"RDMA_CM_EVENT_CONNECT_RESPONSE",
            RDMA_CM_EVENT_CONNECT_ERROR => c"RDMA_CM_EVENT_CONNECT_ERROR",
            RDMA_CM_EVENT_UNREACHABLE => c"RDMA_CM_EVENT_UNREACHABLE",
            RDMA_CM_EVENT_REJECTED => c"RDMA_CM_EVENT_REJECTED",
            RDMA_CM_EVENT_ESTABLISHED => c"RDMA_CM_EVENT_ESTABLISHED",
            RDMA_CM_EVENT_DISCONNECTED => c"RDMA_CM_EVENT_DISCONNECTED",
            RDMA_CM_EVENT_DEVICE_REMOVAL => c"RDMA_CM_EVENT_DEVICE_REMOVAL",
            RDMA_CM_EVENT_MULTICAST_JOIN => c"RDMA_CM_EVENT_MULTICAST_JOIN",
            RDMA_CM_EVENT_MULTICAST_ERROR => c"RDMA_CM_EVENT_MULTICAST_ERROR",
            RDMA_CM_EVENT_ADDR_CHANGE => c"RDMA_CM_EVENT_ADDR_CHANGE",
            RDMA_CM_EVENT_TIMEWAIT_EXIT => c"RDMA_CM_EVENT_TIMEWAIT_EXIT",
            _ => c"UNKNOWN EVENT",
        };
        s.as_ptr()
    }
}
