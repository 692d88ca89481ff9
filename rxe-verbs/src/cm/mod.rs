//! Connection management (`rdma_cm`): connect RC QPs by IP address and
//! port instead of exchanging QP numbers by hand, over the Communication
//! Manager protocol that the kernel's rdma_cm and every RoCE NIC speak.
//!
//! The shape is librdmacm's, so a C program's logic carries over:
//!
//! ```text
//!   passive side                          active side
//!   CmId::new(&chan, TCP)                 CmId::new(&chan, TCP)
//!   id.bind(&ctx, 7471); id.listen()
//!                                         id.connect(&ctx, dst, &qp, &param)
//!        <---------------- REQ ----------------
//!   event ConnectRequest (a new CmId)
//!   new_id.accept(Some(&qp), &param)
//!        ----------------- REP --------------->
//!                                         (QP to RTR and RTS, RTU sent)
//!        <---------------- RTU ----------------
//!   event Established                     event Established
//!   ... traffic on the QPs ...
//!   id.disconnect()  --- DREQ -->          event Disconnected
//!                    <-- DREP ---          id.disconnect()
//!   event Disconnected
//! ```
//!
//! Each soft device runs one CM agent (`rxe_core::cm::CmAgent`), fed with
//! the MADs that arrive on its QP 1 and with time by the device's progress
//! thread; what the agent decides is carried out there too: the QP state
//! changes librdmacm makes (to RTR and RTS when the REP arrives, before the
//! RTU goes out) and the events for the application's [`EventChannel`].
//! Several processes on one address each run an agent; the transport
//! routes each MAD to the right one (`rxe_net::share`).
//!
//! What rdma_cm adds to the CM, as the kernel does it: the service ID is
//! the port space and the port (`PortSpace::service_id`), and the REQ's
//! private data starts with a 36-byte header holding both ends' IP
//! addresses and the active side's port, which is taken off before the
//! passive side sees the private data (so a REQ carries at most 56 bytes of
//! the application's).
//!
//! UD services (ids in [`PortSpace::UDP`]) are resolved with SIDR instead
//! of connected: [`CmId::connect`] with a UD QP sends a SIDR_REQ (the same
//! header, then up to 180 bytes of the application's), the listener's
//! [`CmId::accept`] answers with a SIDR_REP naming its UD QP and Q_Key, and
//! the active side's [`EventKind::Established`] carries them in
//! [`Event::ud`], with the address vector to send to:
//!
//! ```text
//!   CmId::new(&chan, UDP); bind; listen   CmId::new(&chan, UDP)
//!                                         id.connect(&ctx, dst, &ud_qp, &param)
//!        <-------------- SIDR_REQ -------------
//!   event ConnectRequest (a new CmId)
//!   new_id.accept(Some(&ud_qp), &param)
//!        --------------- SIDR_REP ------------>
//!                                         event Established, ud: {ah, qp_num, qkey}
//!   ... UD SENDs to (ah, qp_num, qkey) ...
//! ```

use crate::context::CtxImp;
use crate::error::{invalid, Error};
use crate::events::Events;
use crate::soft::{flow_label, to_err, to_init, ud_ready, CmPort, Gone, Inner, UdPath};
use crate::{Context, QueuePair};
use parking_lot::Mutex;
use rxe_core::cm::{CmQpType, ConnId, ConnectParams, SidrId, SidrParams};
use rxe_core::mad::cm::RejReason;
use rxe_core::mad::rdma_cm::CMA_HEADER_LEN;
use rxe_core::mad::CmaHeader;
use rxe_core::types::{AddressVector, QpType};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use rxe_core::mad::PortSpace;

/// The Q_Key of rdma_cm's UD services (`RDMA_UDP_QKEY`): a UD QP used
/// through a [`PortSpace::UDP`] id is given it, and the SIDR_REP names it.
pub const RDMA_UDP_QKEY: u32 = 0x0123_4567;

/// The most application private data a SIDR_REQ carries after rdma_cm's
/// 36-byte header (216 in all).
pub const SIDR_REQ_DATA_MAX: usize = 216 - CMA_HEADER_LEN;

/// The most private data a SIDR_REP carries.
pub const SIDR_REP_DATA_MAX: usize = 136;

/// What happened to a [`CmId`] (`enum rdma_cm_event_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// A REQ for a listening id: `event.id` is a new id for the connection
    /// (`RDMA_CM_EVENT_CONNECT_REQUEST`); accept or reject it.
    ConnectRequest,
    /// The REP, for an active id without a QP: call [`CmId::establish`]
    /// (`RDMA_CM_EVENT_CONNECT_RESPONSE`).
    ConnectResponse,
    /// The connection could not be set up locally (a QP change failed)
    /// (`RDMA_CM_EVENT_CONNECT_ERROR`).
    ConnectError,
    /// The peer never answered (`RDMA_CM_EVENT_UNREACHABLE`, status
    /// `-ETIMEDOUT`); for a UD id, also a SIDR_REP that refused, with its
    /// SIDR status as the status (1: nobody listens on that port; 2: the
    /// listener rejected), as the kernel's rdma_cm reports it.
    Unreachable,
    /// The peer refused; `status` is the REJ's reason
    /// (`RDMA_CM_EVENT_REJECTED`; 8: nobody listens on that port).
    Rejected,
    /// The connection is up (`RDMA_CM_EVENT_ESTABLISHED`); for a UD id,
    /// the service is resolved and [`Event::ud`] says where to send.
    Established,
    /// The connection is down (`RDMA_CM_EVENT_DISCONNECTED`): the peer
    /// disconnected (call [`CmId::disconnect`] to answer), or our
    /// disconnect was answered or timed out.
    Disconnected,
    /// The connection's timewait ended (`RDMA_CM_EVENT_TIMEWAIT_EXIT`).
    TimewaitExit,
}

/// What the peer asked for or answered (`struct rdma_conn_param`, as an
/// event carries it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConnParam {
    /// The application's private data.
    pub private_data: Vec<u8>,
    /// RDMA READs/atomics the sender serves at once.
    pub responder_resources: u8,
    /// RDMA READs/atomics the sender has outstanding at once.
    pub initiator_depth: u8,
    /// Transport retries (3 bits; ignored in an accept).
    pub retry_count: u8,
    /// RNR retries (3 bits, 7 = infinite).
    pub rnr_retry_count: u8,
    /// The sender's QP receives from an SRQ.
    pub srq: bool,
    /// The sender's QP number (in events); in [`CmId::connect_without_qp`]
    /// and [`CmId::accept`] without a QP, the number of the QP the
    /// application moves itself.
    pub qp_num: u32,
    /// End-to-end flow control (the REQ's or REP's flag; in events).
    pub flow_control: bool,
}

impl ConnParam {
    /// librdmacm's usual values: one READ each way, 7 retries, infinite
    /// RNR retries, no private data.
    pub fn new() -> Self {
        ConnParam {
            responder_resources: 1,
            initiator_depth: 1,
            retry_count: 7,
            rnr_retry_count: 7,
            ..ConnParam::default()
        }
    }
}

/// One event (`struct rdma_cm_event`).
#[derive(Debug, Clone)]
pub struct Event {
    /// What happened.
    pub kind: EventKind,
    /// The id it happened to (for `ConnectRequest`, the new id).
    pub id: CmId,
    /// For `ConnectRequest`: the listening id.
    pub listen_id: Option<CmId>,
    /// 0, the REJ's reason for `Rejected`, or a negative errno
    /// (`-ETIMEDOUT` for `Unreachable`).
    pub status: i32,
    /// The peer's parameters and private data.
    pub param: ConnParam,
    /// For [`EventKind::Established`] on a UD id ([`PortSpace::UDP`]):
    /// the resolved service's UD QP (`rdma_ud_param`).
    pub ud: Option<UdParam>,
}

/// Where a UD service is (`struct rdma_ud_param`, from a SIDR_REP): send
/// to `qp_num` with `qkey` through an address handle of `ah`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdParam {
    /// The path to the peer: its address (GID), hop limit, traffic class
    /// and flow label, as the route gives them.
    pub ah: AddressVector,
    /// The peer's UD QP.
    pub qp_num: u32,
    /// Its Q_Key.
    pub qkey: u32,
}

/// Takes an event channel's events instead of [`EventChannel::get_event`]
/// (see [`EventChannel::set_notify`]).
pub type EventNotify = Box<dyn Fn(Event) + Send + Sync>;

/// Where a [`CmId`]'s events arrive (`struct rdma_event_channel`).
#[derive(Clone)]
pub struct EventChannel {
    inner: Arc<ChannelInner>,
}

/// A channel's queue: filled by the device's CM (`CmPort::pump`, on
/// whichever thread runs the engine), emptied by the application. The
/// completion channel's queue ([`Events`]), which the model tests
/// check under loom.
pub(crate) type ChannelInner = Events<Event>;

impl std::fmt::Debug for EventChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventChannel")
            .field("queued", &self.inner.len())
            .finish()
    }
}

impl Default for EventChannel {
    fn default() -> Self {
        Self::new()
    }
}

impl EventChannel {
    /// A new channel (`rdma_create_event_channel`).
    pub fn new() -> Self {
        EventChannel {
            inner: Arc::new(Events::new()),
        }
    }

    /// The next event, waiting up to `timeout` (`rdma_get_cm_event`).
    pub fn get_event(&self, timeout: Duration) -> Option<Event> {
        self.inner.pop(Instant::now() + timeout)
    }

    /// Hands every event to `f` instead of queueing it for
    /// [`EventChannel::get_event`]: those queued already at once, each
    /// later one from whichever thread runs the device's CM (with the
    /// device's engine locked: `f` must be quick and must not call the
    /// device). Set once.
    pub fn set_notify(&self, f: EventNotify) -> Result<(), Error> {
        if self.inner.set_sink(f) {
            Ok(())
        } else {
            Err(invalid("notify", "the channel has a hook already"))
        }
    }
}

/// An rdma_cm identifier (`struct rdma_cm_id`): one end of a connection,
/// or a listener. Clones are the same id; it goes away (with a REJ or DREQ
/// to the peer if it was connecting or connected) when the last one is
/// dropped or [`CmId::destroy`] is called.
#[derive(Clone)]
pub struct CmId {
    pub(crate) inner: Arc<IdInner>,
}

pub(crate) struct IdInner {
    pub(crate) channel: Arc<ChannelInner>,
    pub(crate) ps: PortSpace,
    pub(crate) st: Mutex<IdState>,
}

/// What an id is bound to and doing.
#[derive(Default)]
pub(crate) struct IdState {
    /// The device.
    pub dev: Option<Arc<Inner>>,
    /// Local address and port.
    pub local: Option<SocketAddr>,
    /// The peer's address and port.
    pub remote: Option<SocketAddr>,
    /// The connection, once there is one.
    pub conn: Option<ConnId>,
    /// The QP number of the connection's QP, on `dev`.
    pub qpn: Option<u32>,
    /// Listening on this service ID.
    pub listening: Option<u64>,
    /// A UD id's SIDR_REQ, sent (active side).
    pub sidr: Option<SidrId>,
    /// The SIDR_REQ a UD request's id came with, until `accept` or
    /// `reject` answers it (passive side).
    pub sidr_req: Option<SidrId>,
    /// Destroyed: no more events.
    pub gone: bool,
    /// The id bound the port itself (an incoming connection's id shares
    /// its listener's).
    pub owns_port: bool,
    /// Traffic class of the connection's packets (`set_tos`).
    pub tos: u8,
    /// The QP's ACK timeout, in place of the CM's (`set_ack_timeout`).
    pub ack_timeout: Option<u8>,
    /// Another id may bind the same port (`set_reuse_addr`).
    pub reuse_addr: bool,
    /// How long to wait for each answer to the REQ or SIDR_REQ, and how
    /// often to send it again (`set_cm_timeout`); `None`: rdma_cm's.
    pub cm_timeout: Option<(u8, u8)>,
}

impl std::fmt::Debug for CmId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.inner.st.lock();
        f.debug_struct("CmId")
            .field("local", &st.local)
            .field("remote", &st.remote)
            .field("conn", &st.conn)
            .field("qpn", &st.qpn)
            .finish()
    }
}

impl PartialEq for CmId {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl Eq for CmId {}

impl std::hash::Hash for CmId {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        std::ptr::hash(Arc::as_ptr(&self.inner), state);
    }
}

impl CmId {
    /// A new id whose events go to `channel`, in port space `ps`
    /// (`rdma_create_id`): [`PortSpace::TCP`] for RC (and UC) connections,
    /// [`PortSpace::UDP`] for UD QPs resolved through SIDR.
    pub fn new(channel: &EventChannel, ps: PortSpace) -> Result<CmId, Error> {
        if ps != PortSpace::TCP && ps != PortSpace::UDP {
            return Err(crate::error::unsupported(format!(
                "port space {:#06x}: TCP (connections) and UDP (UD through SIDR) are supported",
                ps.0
            )));
        }
        Ok(CmId {
            inner: Arc::new(IdInner {
                channel: channel.inner.clone(),
                ps,
                st: Mutex::new(IdState::default()),
            }),
        })
    }

    pub(crate) fn from_inner(inner: Arc<IdInner>) -> CmId {
        CmId { inner }
    }

    /// The port space.
    pub fn port_space(&self) -> PortSpace {
        self.inner.ps
    }

    /// Local address and port, once bound.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.inner.st.lock().local
    }

    /// The peer's address and port, once connecting or connected.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.inner.st.lock().remote
    }

    /// The QP number of the connection's QP, once it has one.
    pub fn qp_num(&self) -> Option<u32> {
        self.inner.st.lock().qpn
    }

    /// The device the id is bound to.
    pub fn context(&self) -> Option<Context> {
        self.inner.st.lock().dev.clone().map(|d| Context {
            imp: CtxImp::Soft(d),
        })
    }

    /// The traffic class (IP TOS byte) of the connection's packets, for a
    /// later [`CmId::connect`] (`rdma_set_option(RDMA_OPTION_ID_TOS)`).
    pub fn set_tos(&self, tos: u8) {
        self.inner.st.lock().tos = tos;
    }

    /// The QP's local ACK timeout (5-bit exponent: 4.096 µs × 2^t) in
    /// place of the one the CM negotiates, for the QP attributes this id
    /// gives from now on (`rdma_set_option(RDMA_OPTION_ID_ACK_TIMEOUT)`).
    pub fn set_ack_timeout(&self, timeout: u8) -> Result<(), Error> {
        if timeout > 31 {
            return Err(invalid("timeout", format!("{timeout} is more than 31")));
        }
        self.inner.st.lock().ack_timeout = Some(timeout);
        Ok(())
    }

    /// How long a later [`CmId::connect`] waits for each answer
    /// (`response_timeout`, a 5-bit exponent: 4.096 µs × 2^t, plus the
    /// path's round trip) and how often it sends its REQ (or SIDR_REQ) again
    /// (`max_retries`, 0 to 15), before it gives up with
    /// [`EventKind::Unreachable`]. rdma_cm's are 20 (about 4.3 s) and 15: a
    /// peer that vanished is given up after about 77 s.
    pub fn set_cm_timeout(&self, response_timeout: u8, max_retries: u8) -> Result<(), Error> {
        if response_timeout > 31 {
            return Err(invalid(
                "response_timeout",
                format!("{response_timeout} is more than 31"),
            ));
        }
        if max_retries > 15 {
            return Err(invalid(
                "max_retries",
                format!("{max_retries} is more than 15"),
            ));
        }
        self.inner.st.lock().cm_timeout = Some((response_timeout, max_retries));
        Ok(())
    }

    /// Lets other ids of this process that also allow it bind the same
    /// port (`RDMA_OPTION_ID_REUSEADDR`); set before [`CmId::bind`].
    pub fn set_reuse_addr(&self, on: bool) {
        self.inner.st.lock().reuse_addr = on;
    }

    /// Binds the id to `ctx`'s address and `port` (0: a free one) in its
    /// port space (`rdma_bind_addr`); returns the port. `AddrInUse` if
    /// another id of this process has that port on the device (unless
    /// both set [`CmId::set_reuse_addr`]).
    pub fn bind(&self, ctx: &Context, port: u16) -> Result<u16, Error> {
        let dev = soft(ctx)?;
        let mut st = self.inner.st.lock();
        if st.dev.is_some() {
            return Err(invalid("id", "bound already"));
        }
        let port = dev
            .shared
            .cm
            .lock()
            .bind_port(self.inner.ps, port, st.reuse_addr)?;
        st.local = Some(SocketAddr::new(dev.shared.device.addr(), port));
        st.dev = Some(dev);
        st.owns_port = true;
        Ok(port)
    }

    /// Takes connection requests for the bound port (`rdma_listen`): each
    /// arrives as a [`EventKind::ConnectRequest`] with a new id.
    /// `AddrInUse` if another process listens on it at this address.
    pub fn listen(&self) -> Result<(), Error> {
        let (dev, port) = {
            let st = self.inner.st.lock();
            match (&st.dev, st.local) {
                (Some(d), Some(l)) if st.conn.is_none() => (d.clone(), l.port()),
                _ => return Err(invalid("id", "bind it first (and not connected)")),
            }
        };
        let sid = self.inner.ps.service_id(port);
        CmPort::listen(&dev.shared, sid, &self.inner)?;
        self.inner.st.lock().listening = Some(sid);
        Ok(())
    }

    /// Connects to `dst` with `qp` (`rdma_resolve_addr`, `rdma_resolve_route`
    /// and `rdma_connect` in one): binds the id to `ctx` if it is not bound
    /// yet, moves the QP to INIT, and sends the REQ. The QP is moved to RTR
    /// and RTS when the REP arrives, and [`EventKind::Established`] follows;
    /// or [`EventKind::Rejected`] or [`EventKind::Unreachable`].
    ///
    /// On a [`PortSpace::UDP`] id, `qp` is a UD QP and this resolves the
    /// UD service at `dst` instead: the QP is made ready (RESET → INIT with
    /// Q_Key [`RDMA_UDP_QKEY`] → RTR → RTS, as librdmacm's
    /// `rdma_create_qp` does; a QP past RESET keeps its Q_Key) and a
    /// SIDR_REQ goes out with `param.private_data` (at most
    /// [`SIDR_REQ_DATA_MAX`] bytes; the other fields are not sent).
    /// [`EventKind::Established`] with [`Event::ud`] answers, or
    /// [`EventKind::Unreachable`] (status 1: nobody listens; 2: rejected;
    /// `-ETIMEDOUT`: no answer).
    pub fn connect(
        &self,
        ctx: &Context,
        dst: SocketAddr,
        qp: &QueuePair,
        param: &ConnParam,
    ) -> Result<(), Error> {
        let (qp_dev, qpn) = qp
            .soft_parts()
            .ok_or_else(|| crate::error::unsupported("rdma_cm on a native device's QP"))?;
        if self.inner.ps == PortSpace::UDP {
            if qp.qp_type() != QpType::Ud {
                return Err(invalid(
                    "qp",
                    "a UDP id resolves a UD service: give it a UD QP",
                ));
            }
            return self.connect_ud(ctx, dst, Some((qp_dev, qpn)), param);
        }
        let qp_type = match qp.qp_type() {
            QpType::Rc => CmQpType::Rc,
            QpType::Uc => CmQpType::Uc,
            QpType::Ud => {
                return Err(invalid(
                    "qp",
                    "a UD QP goes with a PortSpace::UDP id (SIDR), not a TCP one",
                ))
            }
        };
        self.connect_inner(ctx, dst, Some(qp_dev), qpn, qp_type, param)
    }

    /// Binds the id if it is not bound yet, and checks it may start an
    /// exchange: its device and local address.
    fn ready_to_start(&self, ctx: &Context) -> Result<(Arc<Inner>, SocketAddr, u8), Error> {
        if self.local_addr().is_none() {
            self.bind(ctx, 0)?;
        }
        let st = self.inner.st.lock();
        if st.conn.is_some()
            || st.sidr.is_some()
            || st.sidr_req.is_some()
            || st.listening.is_some()
            || st.gone
        {
            return Err(invalid("id", "connected, listening or destroyed already"));
        }
        match (&st.dev, st.local) {
            (Some(d), Some(l)) => Ok((d.clone(), l, st.tos)),
            _ => Err(invalid("id", "not bound")),
        }
    }

    /// rdma_cm's header for a message from `local` to `dst`, then `data`.
    fn with_header(local: SocketAddr, dst: SocketAddr, data: &[u8]) -> Result<Vec<u8>, Error> {
        let mut pd = vec![0u8; CMA_HEADER_LEN];
        CmaHeader {
            src_port: local.port(),
            src: local.ip(),
            dst: dst.ip(),
        }
        .emit(&mut pd)
        .map_err(|e| invalid("dst", e.to_string()))?;
        pd.extend_from_slice(data);
        Ok(pd)
    }

    /// SIDR: asks `dst` for its UD service on `dst`'s port.
    fn connect_ud(
        &self,
        ctx: &Context,
        dst: SocketAddr,
        qp: Option<(Arc<Inner>, u32)>,
        param: &ConnParam,
    ) -> Result<(), Error> {
        if param.private_data.len() > SIDR_REQ_DATA_MAX {
            return Err(invalid(
                "param.private_data",
                format!(
                    "{} bytes: a SIDR_REQ carries at most {SIDR_REQ_DATA_MAX} after rdma_cm's header",
                    param.private_data.len()
                ),
            ));
        }
        let (dev, local, tos) = self.ready_to_start(ctx)?;
        if qp.as_ref().is_some_and(|(q, _)| !Arc::ptr_eq(&dev, q)) {
            return Err(invalid("qp", "the QP is on another device than the id"));
        }
        let mut p = SidrParams::new(self.inner.ps.service_id(dst.port()), dst.ip());
        p.private_data = Self::with_header(local, dst, &param.private_data)?;
        let qpn = qp.map(|q| q.1);
        let path = UdPath {
            remote: dst.ip(),
            flow_label: flow_label(local.port(), dst.port()),
            traffic_class: tos,
        };
        let sidr = cm_call(&dev, |e| {
            if let Some(qpn) = qpn {
                ud_ready(e, qpn)?;
            }
            dev.shared
                .cm
                .lock()
                .sidr_request(Instant::now(), &p, &self.inner, path)
        })?;
        let mut st = self.inner.st.lock();
        st.sidr = Some(sidr);
        st.qpn = qpn;
        st.remote = Some(dst);
        Ok(())
    }

    /// Connects to `dst` for a QP the application moves itself (an RC QP
    /// numbered `param.qp_num` on `ctx`'s device; `rdma_connect` on an id
    /// without a QP): sends the REQ; when the REP arrives,
    /// [`EventKind::ConnectResponse`] says to move the QP to RTR and RTS
    /// with [`CmId::init_qp_attr`], then call [`CmId::establish`].
    ///
    /// On a [`PortSpace::UDP`] id, resolves the UD service at `dst` as
    /// [`CmId::connect`] does, without a QP to make ready (`param.qp_num`
    /// is not used: a SIDR_REQ names no QP).
    pub fn connect_without_qp(
        &self,
        ctx: &Context,
        dst: SocketAddr,
        param: &ConnParam,
    ) -> Result<(), Error> {
        if self.inner.ps == PortSpace::UDP {
            return self.connect_ud(ctx, dst, None, param);
        }
        if param.qp_num == 0 || param.qp_num > 0xff_ffff {
            return Err(invalid(
                "param.qp_num",
                format!("{:#x}: the QP's number (24 bits, not 0)", param.qp_num),
            ));
        }
        self.connect_inner(ctx, dst, None, param.qp_num, CmQpType::Rc, param)
    }

    fn connect_inner(
        &self,
        ctx: &Context,
        dst: SocketAddr,
        qp_dev: Option<Arc<Inner>>,
        qpn: u32,
        qp_type: CmQpType,
        param: &ConnParam,
    ) -> Result<(), Error> {
        if param.private_data.len() > 92 - CMA_HEADER_LEN {
            return Err(invalid(
                "param.private_data",
                format!(
                    "{} bytes: a REQ carries at most {} after rdma_cm's header",
                    param.private_data.len(),
                    92 - CMA_HEADER_LEN
                ),
            ));
        }
        let (dev, local, tos) = self.ready_to_start(ctx)?;
        let (ack_timeout, cm_timeout) = {
            let st = self.inner.st.lock();
            (st.ack_timeout, st.cm_timeout)
        };
        if qp_dev.as_ref().is_some_and(|q| !Arc::ptr_eq(&dev, q)) {
            return Err(invalid("qp", "the QP is on another device than the id"));
        }
        let pd = Self::with_header(local, dst, &param.private_data)?;
        let sid = self.inner.ps.service_id(dst.port());
        let moves_qp = qp_dev.is_some();
        let conn = cm_call(&dev, |e| {
            if moves_qp {
                to_init(e, qpn, qp_type)?;
            }
            let mut p = ConnectParams::new(sid, dst.ip(), qpn, rand::random::<u32>() & 0xff_ffff);
            p.qp_type = qp_type;
            p.responder_resources = param.responder_resources;
            p.initiator_depth = param.initiator_depth;
            p.retry_count = param.retry_count.min(7);
            p.rnr_retry_count = param.rnr_retry_count.min(7);
            p.srq = param.srq;
            p.traffic_class = tos;
            if let Some(t) = ack_timeout {
                p.local_ack_timeout = t;
            }
            if let Some((t, n)) = cm_timeout {
                p.remote_cm_response_timeout = t;
                p.max_cm_retries = n;
            }
            // The route's MTU, as the kernel's rdma_cm takes it from the net
            // device: a 1500-byte link gives 1024.
            p.path_mtu =
                rxe_net::route::path_mtu(local.ip(), dst.ip(), dev.shared.device.active_mtu());
            p.flow_label = flow_label(local.port(), dst.port());
            p.private_data = pd;
            dev.shared
                .cm
                .lock()
                .connect(Instant::now(), &p, &self.inner, moves_qp, ack_timeout)
        })?;
        let mut st = self.inner.st.lock();
        st.conn = Some(conn);
        st.qpn = moves_qp.then_some(qpn);
        st.remote = Some(dst);
        Ok(())
    }

    /// Accepts the connection request this id came with (`rdma_accept`):
    /// moves `qp` to RTR and RTS and sends the REP;
    /// [`EventKind::Established`] follows when the RTU arrives. Without a
    /// QP, the REP names `param.qp_num`, a QP the application moved to RTR
    /// and RTS itself with [`CmId::init_qp_attr`].
    ///
    /// On the id of a UD service request ([`PortSpace::UDP`]): sends the
    /// SIDR_REP naming `qp` (a UD QP, made ready as [`CmId::connect`] makes
    /// it) or, without one, `param.qp_num`, with the QP's Q_Key
    /// ([`RDMA_UDP_QKEY`] for one without), and `param.private_data` (at
    /// most [`SIDR_REP_DATA_MAX`] bytes). No event follows on this side.
    pub fn accept(&self, qp: Option<&QueuePair>, param: &ConnParam) -> Result<(), Error> {
        if self.inner.ps == PortSpace::UDP {
            return self.accept_ud(qp, param);
        }
        if param.private_data.len() > 196 {
            return Err(invalid(
                "param.private_data",
                format!(
                    "{} bytes: a REP carries at most 196",
                    param.private_data.len()
                ),
            ));
        }
        let (dev, conn) = self.dev_conn()?;
        let qpn = match qp {
            Some(qp) => {
                let (qp_dev, qpn) = qp
                    .soft_parts()
                    .ok_or_else(|| crate::error::unsupported("rdma_cm on a native device's QP"))?;
                if !Arc::ptr_eq(&dev, &qp_dev) {
                    return Err(invalid("qp", "the QP is on another device than the id"));
                }
                Some((qpn, qp.qp_type()))
            }
            None => None,
        };
        let ack_timeout = self.inner.st.lock().ack_timeout;
        cm_call(&dev, |e| {
            dev.shared
                .cm
                .lock()
                .accept(e, Instant::now(), conn, qpn, param, ack_timeout)
        })?;
        self.inner.st.lock().qpn = qpn.map(|q| q.0);
        Ok(())
    }

    fn accept_ud(&self, qp: Option<&QueuePair>, param: &ConnParam) -> Result<(), Error> {
        if param.private_data.len() > SIDR_REP_DATA_MAX {
            return Err(invalid(
                "param.private_data",
                format!(
                    "{} bytes: a SIDR_REP carries at most {SIDR_REP_DATA_MAX}",
                    param.private_data.len()
                ),
            ));
        }
        let (dev, sidr) = self.dev_sidr()?;
        let qp = match qp {
            Some(qp) => {
                let (qp_dev, qpn) = qp
                    .soft_parts()
                    .ok_or_else(|| crate::error::unsupported("rdma_cm on a native device's QP"))?;
                if !Arc::ptr_eq(&dev, &qp_dev) {
                    return Err(invalid("qp", "the QP is on another device than the id"));
                }
                if qp.qp_type() != QpType::Ud {
                    return Err(invalid("qp", "a UDP id's request is answered with a UD QP"));
                }
                Some(qpn)
            }
            None if param.qp_num != 0 && param.qp_num <= 0xff_ffff => None,
            None => {
                return Err(invalid(
                    "param.qp_num",
                    "no QP given: the number of the UD QP that serves the request",
                ))
            }
        };
        cm_call(&dev, |e| {
            dev.shared.cm.lock().accept_ud(
                e,
                Instant::now(),
                sidr,
                qp,
                param.qp_num,
                &param.private_data,
            )
        })?;
        let mut st = self.inner.st.lock();
        st.sidr_req = None;
        st.qpn = Some(qp.unwrap_or(param.qp_num));
        Ok(())
    }

    /// Refuses the connection request this id came with (`rdma_reject`),
    /// with up to 148 bytes of private data; the peer gets
    /// [`EventKind::Rejected`] with status 28 (consumer defined). On the id
    /// of a UD service request, a SIDR_REP with status 2 (rejected) and up
    /// to 136 bytes of private data: the peer gets
    /// [`EventKind::Unreachable`] with status 2.
    pub fn reject(&self, private_data: &[u8]) -> Result<(), Error> {
        if self.inner.ps == PortSpace::UDP {
            if private_data.len() > SIDR_REP_DATA_MAX {
                return Err(invalid(
                    "private_data",
                    format!(
                        "{} bytes: a SIDR_REP carries at most {SIDR_REP_DATA_MAX}",
                        private_data.len()
                    ),
                ));
            }
            let (dev, sidr) = self.dev_sidr()?;
            cm_call(&dev, |_| {
                dev.shared
                    .cm
                    .lock()
                    .reject_ud(Instant::now(), sidr, private_data)
            })?;
            self.inner.st.lock().sidr_req = None;
            return Ok(());
        }
        let (dev, conn) = self.dev_conn()?;
        cm_call(&dev, |_| {
            dev.shared.cm.lock().reject(
                Instant::now(),
                conn,
                RejReason::CONSUMER_DEFINED,
                private_data,
            )
        })
    }

    /// Sends the RTU after a [`EventKind::ConnectResponse`] (an active id
    /// without a QP; `rdma_establish`).
    pub fn establish(&self) -> Result<(), Error> {
        let (dev, conn) = self.dev_conn()?;
        cm_call(&dev, |_| {
            dev.shared.cm.lock().establish(Instant::now(), conn)
        })
    }

    /// The QP attributes that move this id's QP to `state` (INIT, RTR or
    /// RTS) for its connection (`rdma_init_qp_attr`), for an application
    /// that moves its QP itself: the passive side after
    /// [`EventKind::ConnectRequest`], the active side after
    /// [`EventKind::ConnectResponse`]. Apply them with
    /// [`QueuePair::modify`].
    pub fn init_qp_attr(
        &self,
        state: rxe_core::types::QpState,
    ) -> Result<(rxe_core::types::QpAttr, rxe_core::types::QpAttrMask), Error> {
        let (dev, conn) = self.dev_conn()?;
        let r = dev.shared.cm.lock().init_qp_attr(conn, state);
        r.ok_or_else(|| {
            invalid(
                "state",
                format!("{state:?}: not known for this connection yet (INIT, RTR, RTS once the REQ and REP are)"),
            )
        })
    }

    /// The passive side's QP received a message before the RTU came
    /// (`rdma_notify(IBV_EVENT_COMM_EST)`): the connection is established
    /// ([`EventKind::Established`]) and the REP no longer resent.
    pub fn notify_established(&self) -> Result<(), Error> {
        let (dev, conn) = self.dev_conn()?;
        cm_call(&dev, |_| {
            dev.shared
                .cm
                .lock()
                .notify_established(Instant::now(), conn)
        })
    }

    /// Disconnects (`rdma_disconnect`): moves the QP to ERR (what was
    /// posted completes with flush errors) and sends the DREQ, or the DREP
    /// if the peer disconnected first.
    pub fn disconnect(&self) -> Result<(), Error> {
        let (dev, conn) = self.dev_conn()?;
        let qpn = self.inner.st.lock().qpn;
        cm_call(&dev, |e| {
            if let Some(qpn) = qpn {
                to_err(e, qpn);
            }
            dev.shared.cm.lock().disconnect(Instant::now(), conn)
        })
    }

    /// Ends the id now (`rdma_destroy_id`): a connection being set up is
    /// rejected, an established one disconnected, a listener stops.
    pub fn destroy(&self) {
        if let Some(dev) = self.inner.leave(&mut self.inner.st.lock()) {
            // Carry it out now (the progress thread would, soon).
            cm_call(&dev, |_| ());
        }
    }

    /// The device and the SIDR request of a UD request's id.
    fn dev_sidr(&self) -> Result<(Arc<Inner>, SidrId), Error> {
        let st = self.inner.st.lock();
        match (&st.dev, st.sidr_req) {
            (Some(d), Some(s)) if !st.gone => Ok((d.clone(), s)),
            _ => Err(invalid(
                "id",
                "not the id of a UD service request waiting for an answer",
            )),
        }
    }

    fn dev_conn(&self) -> Result<(Arc<Inner>, ConnId), Error> {
        let st = self.inner.st.lock();
        match (&st.dev, st.conn) {
            (Some(d), Some(c)) if !st.gone => Ok((d.clone(), c)),
            _ => Err(invalid("id", "not connecting or connected")),
        }
    }
}

impl IdInner {
    /// Marks the id gone and leaves a note for the device's next pump
    /// (which ends its connection, listening and port); the device, if the
    /// id had one. Takes no engine or CM lock, so an id may go anywhere,
    /// even while the device's CM runs.
    fn leave(&self, st: &mut IdState) -> Option<Arc<Inner>> {
        if st.gone {
            return None;
        }
        st.gone = true;
        let dev = st.dev.clone()?;
        dev.shared.cm_gone.lock().push(Gone {
            conn: st.conn.take(),
            sidr: st.sidr.take().or(st.sidr_req.take()),
            listening: st.listening.take(),
            port: st
                .local
                .filter(|_| st.owns_port)
                .map(|l| (self.ps, l.port())),
        });
        dev.shared.waiter.wake();
        Some(dev)
    }
}

impl Drop for IdInner {
    fn drop(&mut self) {
        // Through the lock, not `get_mut`: the last reference may go on
        // another thread than the one that wrote the state (`destroy`, under
        // this lock). `Arc` orders the two with an Acquire fence, which
        // ThreadSanitizer does not see in a prebuilt std; the lock's
        // release/acquire it sees (tests/tsan.sh reported the read as a
        // race under load, 1 rping run in 40). Never contended here.
        let mut st = std::mem::take(&mut *self.st.lock());
        self.leave(&mut st);
    }
}

impl Context {
    /// What the device's connection manager received, sent and dropped
    /// (`None` on a native device, whose CM is the kernel's).
    pub fn cm_counters(&self) -> Option<rxe_core::cm::CmCounters> {
        match &self.imp {
            CtxImp::Soft(i) => Some(i.shared.cm.lock().counters()),
            CtxImp::Native(_) => None,
        }
    }
}

/// Runs a CM command on the device's locked engine, then sends what it
/// queued at once (the MADs too, which the device's collect leaves for the
/// next flush otherwise): a program that disconnects and exits right away
/// still has its DREQ sent.
fn cm_call<R>(dev: &Inner, f: impl FnOnce(&mut rxe_core::engine::Engine) -> R) -> R {
    let r = dev.shared.with_engine(f);
    dev.shared.flush();
    r
}

/// The soft device behind a context.
fn soft(ctx: &Context) -> Result<Arc<Inner>, Error> {
    match &ctx.imp {
        CtxImp::Soft(i) => Ok(i.clone()),
        CtxImp::Native(_) => Err(crate::error::unsupported(
            "rdma_cm on a native device (use the system's librdmacm)",
        )),
    }
}
