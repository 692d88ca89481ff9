//! The calls that need the connection manager's protocol (CM MADs on QP 1):
//! `rdma_listen`, `rdma_connect`, `rdma_accept`, `rdma_reject`,
//! `rdma_reject_ece`, `rdma_establish`, `rdma_disconnect`, `rdma_notify`,
//! and `rdma_get_request` (a synchronous listener's next request, with the
//! QP of `rdma_create_ep`'s attributes).
//!
//! Each is carried out by rxe-verbs' connection manager
//! (`rxe_verbs::cm`), with what librdmacm writes to the kernel's `rdma_ucm`
//! (see rdma-core's `cma.c`):
//!
//! * `rdma_listen(id, backlog)`: one `rxe_verbs::cm::CmId` per soft device
//!   the id is bound to (every one for the wildcard address), bound to the
//!   id's port and listening. The backlog is the device agent's (its
//!   `listen_backlog`, 128 unanswered requests per service), whatever the
//!   program asks for. Each request becomes a new `rdma_cm_id` (on the
//!   listener's channel; synchronous if the listener is) and a
//!   CONNECT_REQUEST with the request's `rdma_conn_param` and the listener
//!   as `listen_id`.
//! * `rdma_connect(id, param)`: an `rxe_verbs::cm::CmId` bound to the id's
//!   device and source port, with its TOS and ACK timeout, connects with
//!   the id's QP (moved to RTR and RTS when the REP comes, then the RTU:
//!   ESTABLISHED with the REP's parameters) or, without one, for
//!   `param->qp_num` (CONNECT_RESPONSE; `rdma_establish` sends the RTU).
//!   `responder_resources`/`initiator_depth` of `RDMA_MAX_RESP_RES`/
//!   `RDMA_MAX_INIT_DEPTH` (or no `param`) are the device's maxima;
//!   `retry_count`, `rnr_retry_count` (7 and 7 without `param`), the SRQ
//!   flag and the private data (after `rdma_create_ep`'s `ai_connect`).
//! * `rdma_accept(id, param)`: moves the QP to RTR and RTS and sends the
//!   REP (or names `param->qp_num`); ESTABLISHED on the RTU.
//! * `rdma_reject` / `rdma_reject_ece`: a REJ with the private data,
//!   reason 28 (consumer defined).
//! * `rdma_disconnect(id)`: the QP to ERR, a DREQ (or the DREP to the
//!   peer's); DISCONNECTED on each side, then TIMEWAIT_EXIT.
//! * `rdma_notify(id, IBV_EVENT_COMM_EST)`: the passive side's QP got a
//!   message before the RTU.
//!
//! UD ids (`RDMA_PS_UDP`) resolve a service through SIDR, as the kernel's
//! `cma_resolve_ib_udp` and `cma_send_sidr_rep` do: `rdma_connect` sends
//! a SIDR_REQ (rdma_cm's header and up to 180 bytes of private data);
//! ESTABLISHED answers with `param.ud` (`ah_attr` to the peer with its GID,
//! hop limit and flow label, its UD QP number and Q_Key), UNREACHABLE with
//! the SIDR status (1: nobody listens, 2: rejected) or `-ETIMEDOUT`.
//! A UD listener's CONNECT_REQUEST carries the 180 bytes after the header
//! in `param.ud`; `rdma_accept` sends the SIDR_REP with the id's QP (or
//! `param->qp_num`) and its Q_Key and returns at once (no event follows),
//! `rdma_reject` a SIDR_REP with status 2.
//!
//! In synchronous mode (an id without a channel) `rdma_connect`,
//! `rdma_accept` and `rdma_disconnect` wait for their event, as in
//! librdmacm.
//!
//! The events of every rxe-verbs id of the process go to one
//! `rxe_verbs::cm::EventChannel`, read by a thread of the library (the
//! bridge) that turns each into the `rdma_cm_event` of the id it belongs
//! to (the table of routes is `object.rs`'s). Locks: that table, then an
//! id's state; a call never takes the table while it holds an id's state.

use super::channel::{self, ConnParam as CParam, Param, Pending, UdParam};
use super::id::{create_on, set_passive};
use super::object::{complete, event_name, routes, unroute, CmId, Phase, SavedQpAttr};
use super::{canonical, cma_devices, dev_by_addr, minus_one, CmaDev};
use crate::ffi::{entry, note, Fail};
use crate::handle;
use crate::sys::*;
use rxe_verbs::cm::{self as rcm, EventKind, PortSpace};
use std::ffi::{c_int, c_void};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::OnceLock;
use std::time::Duration;

// ---------------------------------------------------------------------------
// The bridge: rxe-verbs' events to rdma_cm_events
// ---------------------------------------------------------------------------

/// The one event channel of the process's rxe-verbs ids, and the thread
/// that reads it (which `rdma_cm_id` each id belongs to is
/// [`routes`]).
struct Bridge {
    ch: rcm::EventChannel,
}

fn bridge() -> &'static Bridge {
    static B: OnceLock<Bridge> = OnceLock::new();
    static STARTED: std::sync::Once = std::sync::Once::new();
    let b = B.get_or_init(|| Bridge {
        ch: rcm::EventChannel::new(),
    });
    STARTED.call_once(|| {
        let r = std::thread::Builder::new()
            .name("rxe-rdmacm".into())
            .spawn(|| {
                let b = bridge();
                loop {
                    if let Some(ev) = b.ch.get_event(Duration::from_secs(3600)) {
                        // No panic may end the thread: every later event would be lost.
                        let r =
                            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| dispatch(ev)));
                        if r.is_err() {
                            note("rdma_cm", "an event could not be delivered (panic)");
                        }
                    }
                }
            });
        if let Err(e) = r {
            note("rdma_cm", format!("cannot start the event thread: {e}"));
        }
    });
    b
}

/// A new rxe-verbs id for the `rdma_cm_id` at `owner`, with its events
/// routed there. Call without holding the owner's state.
fn new_rx(owner: usize, ps: rdma_port_space) -> Result<rcm::CmId, Fail> {
    let b = bridge();
    let rps =
        match ps {
            RDMA_PS_TCP => PortSpace::TCP,
            RDMA_PS_UDP => PortSpace::UDP,
            RDMA_PS_IPOIB => return Err(Fail::new(
                libc::ENOSYS,
                "RDMA_PS_IPOIB ids take their Q_Key from an IPoIB multicast group, which RoCE soft devices do not have (RDMA_PS_UDP does UD through SIDR)",
            )),
            _ => {
                return Err(Fail::new(
                    libc::EOPNOTSUPP,
                    format!("port space {ps:#x}: connections use RDMA_PS_TCP over RoCE"),
                ))
            }
        };
    let rx = rcm::CmId::new(&b.ch, rps)?;
    // The library's own port table decides what may share a port.
    rx.set_reuse_addr(true);
    routes().lock().insert(rx.clone(), owner);
    Ok(rx)
}

/// The device context (rxe-verbs) of a soft device, opened for the process.
fn rx_ctx(d: &'static CmaDev) -> Result<rxe_verbs::Context, Fail> {
    let op = d.open()?;
    let ctx = crate::handle::get::<crate::objects::Ctx>(op.ctx, "context")?;
    Ok(ctx.open.rx.clone())
}

/// A UD event's parameters (`rdma_ud_param`).
fn ud_param(ev: &rcm::Event) -> UdParam {
    let mut u = UdParam {
        private_data: ev.param.private_data.clone(),
        ..UdParam::default()
    };
    if let Some(ud) = &ev.ud {
        u.ah_attr = crate::wr::ah_attr_of(&ud.ah);
        u.qp_num = ud.qp_num;
        u.qkey = ud.qkey;
    }
    u
}

fn conn_param(p: &rcm::ConnParam) -> CParam {
    CParam {
        private_data: p.private_data.clone(),
        responder_resources: p.responder_resources,
        initiator_depth: p.initiator_depth,
        flow_control: u8::from(p.flow_control),
        retry_count: p.retry_count,
        rnr_retry_count: p.rnr_retry_count,
        srq: u8::from(p.srq),
        qp_num: p.qp_num,
    }
}

/// The `rdma_cm_id` at `addr`, if it is still live. The bridge's table
/// lock, held by the caller, keeps it from being freed meanwhile.
fn live_id<'a>(addr: usize) -> Option<&'a CmId> {
    let obj = addr as *const CmId;
    if !handle::is_live(obj) {
        return None;
    }
    // SAFETY: a live id is a Box<CmId> at this address; it is not freed
    // before `forget` takes the table lock the caller holds.
    Some(unsafe { &*obj })
}

fn dispatch(ev: rcm::Event) {
    if std::env::var_os("RXE_TRACE_CM").is_some() {
        eprintln!(
            "rdma_cm trace: {:?} status {} for {:?}",
            ev.kind, ev.status, ev.id
        );
    }
    let ids = routes().lock();
    if ev.kind == EventKind::ConnectRequest {
        let Some(listener) = ev
            .listen_id
            .as_ref()
            .and_then(|l| ids.get(l).copied())
            .and_then(live_id)
        else {
            let _ = ev.id.reject(&[]);
            return;
        };
        // The listener is held, as an event taken and not acknowledged,
        // from before the table's lock is let go until its request is
        // queued: `rdma_destroy_id` takes the table after it marks the id
        // dead, then waits for such events, so it does not free the
        // listener under this thread (it did: a listener destroyed while a
        // request for it arrived was used after it was freed; see
        // "Concurrency" in docs/reliability.md).
        listener.events.reported(1);
        drop(ids);
        let r = connect_request(listener, &ev);
        listener.events.acked(1);
        if let Err(f) = r {
            note(
                "rdma_cm",
                format!("a connection request is refused: {}", f.why),
            );
            let _ = ev.id.reject(&[]);
        }
        return;
    }
    let Some(cm) = ids.get(&ev.id).copied().and_then(live_id) else {
        return;
    };
    let mut st = cm.lock();
    let event = match ev.kind {
        EventKind::ConnectRequest => unreachable!("handled above"),
        EventKind::ConnectResponse => RDMA_CM_EVENT_CONNECT_RESPONSE,
        EventKind::ConnectError => RDMA_CM_EVENT_CONNECT_ERROR,
        EventKind::Unreachable => RDMA_CM_EVENT_UNREACHABLE,
        EventKind::Rejected => RDMA_CM_EVENT_REJECTED,
        EventKind::Established => {
            if std::mem::take(&mut st.cm.quiet_established) {
                return;
            }
            RDMA_CM_EVENT_ESTABLISHED
        }
        EventKind::Disconnected => RDMA_CM_EVENT_DISCONNECTED,
        EventKind::TimewaitExit => RDMA_CM_EVENT_TIMEWAIT_EXIT,
    };
    let (qp_type, _) = cm.kind();
    let param = match ev.kind {
        EventKind::Established | EventKind::Unreachable if qp_type == IBV_QPT_UD => {
            Param::Ud(ud_param(&ev))
        }
        // The passive side's ESTABLISHED (the RTU) carries no private
        // data in the kernel's event.
        EventKind::Established if st.cm.passive => Param::Conn(CParam {
            private_data: Vec::new(),
            ..conn_param(&ev.param)
        }),
        EventKind::ConnectResponse
        | EventKind::Established
        | EventKind::Rejected
        | EventKind::Disconnected => Param::Conn(conn_param(&ev.param)),
        _ => Param::None,
    };
    // librdmacm moves the QP of a rejected connection to ERR before it
    // hands the program the event.
    if ev.kind == EventKind::Rejected {
        qp_to_err(cm);
    }
    cm.queue(&st, event, ev.status, param);
}

/// A CONNECT_REQUEST for `listener`: a new id for the connection.
fn connect_request(listener: &CmId, ev: &rcm::Event) -> Result<(), Fail> {
    let (ch, sync, context, like) = {
        let st = listener.lock();
        // SAFETY: the listener is live; its context field.
        let context = unsafe { (*listener.c()).context };
        (st.channel.clone(), st.sync, context, st.src)
    };
    let (qp_type, ps) = listener.kind();
    let local = ev
        .id
        .local_addr()
        .ok_or_else(|| Fail::inval("request", "no local address"))?;
    let peer = ev
        .id
        .peer_addr()
        .ok_or_else(|| Fail::inval("request", "no peer address"))?;
    let d = dev_by_addr(local.ip())
        .ok_or_else(|| Fail::inval("request", format!("no soft device on {}", local.ip())))?;
    let new_ch = if sync {
        super::channel::Channel::create()?
    } else {
        ch.clone()
    };
    let p = create_on(new_ch, sync, context, ps, qp_type)?;
    let new = handle::get::<CmId>(p, "id")?;
    routes().lock().insert(ev.id.clone(), new.addr());
    let mut st = new.lock();
    if let Err(f) = set_passive(new, &mut st, d, local, peer, like) {
        drop(st);
        unroute(&ev.id);
        let _ = super::id::destroy(p);
        return Err(f);
    }
    st.cm.rx = Some(ev.id.clone());
    st.cm.passive = true;
    st.cm.had_cm = true;
    st.cm.req_depths = (ev.param.initiator_depth, ev.param.responder_resources);
    drop(st);
    let param = if qp_type == IBV_QPT_UD {
        Param::Ud(ud_param(ev))
    } else {
        Param::Conn(conn_param(&ev.param))
    };
    // The event is the listener's (its count), as in librdmacm. Queued
    // under the listener's lock, and only while it is live: its destroy
    // marks it dead, then takes that lock before it withdraws the requests
    // queued for it, so none stays behind it.
    let lst = listener.lock();
    if !handle::is_live(std::ptr::from_ref(listener)) {
        drop(lst);
        let _ = super::id::destroy(p);
        return Err(Fail::inval("request", "its listener is being destroyed"));
    }
    lst.channel.push(Pending {
        id: new.addr(),
        listen_id: listener.addr(),
        event: RDMA_CM_EVENT_CONNECT_REQUEST,
        status: 0,
        param,
        count: listener.events.clone(),
    });
    Ok(())
}

// ---------------------------------------------------------------------------
// The calls
// ---------------------------------------------------------------------------

/// The program's `rdma_conn_param`, if it gave one.
fn read_param<'a>(p: *mut rdma_conn_param) -> Option<&'a rdma_conn_param> {
    // SAFETY: the program's parameters, or NULL.
    unsafe { p.as_ref() }
}

/// The program's private data of `len` bytes at `p`.
fn private_data(p: *const c_void, len: u8) -> Vec<u8> {
    if p.is_null() || len == 0 {
        return Vec::new();
    }
    // SAFETY: the program's `len` bytes.
    unsafe { std::slice::from_raw_parts(p.cast::<u8>(), usize::from(len)) }.to_vec()
}

/// The id's QP (the library's), if it has one.
fn qp_of_id<'a>(cm: &CmId) -> Result<Option<&'a crate::objects::Qp>, Fail> {
    // SAFETY: a live id; its qp field.
    let qp = unsafe { (*cm.c()).qp };
    if qp.is_null() {
        return Ok(None);
    }
    crate::handle::get::<crate::objects::Qp>(qp, "qp").map(Some)
}

/// Moves the id's QP, if it has one, to ERR (librdmacm's
/// `ucma_modify_qp_err`).
fn qp_to_err(cm: &CmId) {
    if let Ok(Some(q)) = qp_of_id(cm) {
        let a = rxe_core::types::QpAttr {
            state: rxe_core::types::QpState::Err,
            ..Default::default()
        };
        let _ = q.rx.modify(&a, rxe_core::types::QpAttrMask::STATE);
        // SAFETY: the QP's own state field, as ibv_modify_qp sets it.
        unsafe { (*q.qp.get()).qp_base.state = IBV_QPS_ERR };
    }
}

/// librdmacm's `ucma_valid_param`.
fn valid_param(
    cm: &CmId,
    d: &'static CmaDev,
    p: Option<&rdma_conn_param>,
    has_qp: bool,
) -> Result<(), Fail> {
    let (_, ps) = cm.kind();
    if ps != RDMA_PS_TCP {
        return Ok(());
    }
    let Some(p) = p else {
        if has_qp {
            return Ok(());
        }
        return Err(Fail::inval(
            "conn_param",
            "NULL, and the id has no QP (give conn_param->qp_num)",
        ));
    };
    let op = d.open()?;
    if p.responder_resources != RDMA_MAX_RESP_RES as u8
        && p.responder_resources > op.max_responder_resources
    {
        return Err(Fail::inval(
            "conn_param->responder_resources",
            format!(
                "{} is more than the device's {}",
                p.responder_resources, op.max_responder_resources
            ),
        ));
    }
    if p.initiator_depth != RDMA_MAX_INIT_DEPTH as u8 && p.initiator_depth > op.max_initiator_depth
    {
        return Err(Fail::inval(
            "conn_param->initiator_depth",
            format!(
                "{} is more than the device's {}",
                p.initiator_depth, op.max_initiator_depth
            ),
        ));
    }
    Ok(())
}

entry! {
    on_panic = -1;
    pub unsafe extern "C" fn rdma_listen(id: *mut rdma_cm_id, _backlog: c_int) -> c_int {
        minus_one(VERB, || {
            let cm = handle::get::<CmId>(id, "id")?;
            let (_, ps) = cm.kind();
            let (devs, port, loopback) =
                {
                    let mut st = cm.lock();
                    if st.phase == Phase::Idle {
                        super::id::bind(
                            cm,
                            &mut st,
                            SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0),
                        )?;
                    }
                    match st.phase {
                        Phase::AddrBound => {}
                        Phase::Listen => return Err(Fail::inval("id", "listening already")),
                        _ => return Err(Fail::inval(
                            "id",
                            "not bound (or resolved, connecting or connected: listen on a bound id)",
                        )),
                    }
                    super::id::check_listen(ps, cm.addr())?;
                    // An id bound to a loopback address no soft device has
                    // listens as on the kernel, for connections to that
                    // address only: no soft device carries them (the kernel
                    // loops them back inside; see docs/drop-in.md), so it
                    // hears none, and never one from another host.
                    let loopback =
                        st.dev.is_none() && st.src.is_some_and(|a| canonical(a.ip()).is_loopback());
                    let devs: Vec<&'static CmaDev> = match st.dev {
                        Some(d) => vec![d],
                        None if loopback => Vec::new(),
                        None => cma_devices().iter().collect(),
                    };
                    (devs, st.src.map_or(0, |a| a.port()), loopback)
                };
            let mut rxs = Vec::new();
            let result = (|| {
                for d in devs {
                    let ctx = match rx_ctx(d) {
                        Ok(c) => c,
                        // A device another program holds is left out of a
                        // wildcard listen.
                        Err(f) if cm.lock().dev.is_none() => {
                            note(
                                VERB,
                                format!("{} is left out: {}", d.dev.rx.name(), f.why),
                            );
                            continue;
                        }
                        Err(f) => return Err(f),
                    };
                    let rx = new_rx(cm.addr(), ps)?;
                    rxs.push(rx.clone());
                    rx.bind(&ctx, port)?;
                    rx.listen()?;
                }
                if rxs.is_empty() && !loopback {
                    return Err(Fail::new(libc::ENODEV, "no soft device to listen on"));
                }
                Ok(())
            })();
            if let Err(f) = result {
                for rx in &rxs {
                    unroute(rx);
                    rx.destroy();
                }
                return Err(f);
            }
            let mut st = cm.lock();
            st.phase = Phase::Listen;
            st.cm.had_cm = true;
            st.cm.listeners = rxs;
            Ok(())
        })
    }
}

entry! {
    on_panic = -1;
    pub unsafe extern "C" fn rdma_connect(
        id: *mut rdma_cm_id,
        conn_param: *mut rdma_conn_param,
    ) -> c_int {
        minus_one(VERB, || {
            let cm = handle::get::<CmId>(id, "id")?;
            let (qp_type, ps) = cm.kind();
            let p = read_param(conn_param);
            let (d, src, dst, pre, tos, ack_timeout) = {
                let st = cm.lock();
                if st.phase != Phase::RouteResolved {
                    return Err(Fail::inval(
                        "id",
                        "its route is not resolved (rdma_resolve_addr, rdma_resolve_route first), or it is connecting already",
                    ));
                }
                match (st.dev, st.src, st.dst) {
                    (Some(d), Some(s), Some(t)) => {
                        (d, s, t, st.connect.clone(), st.tos, st.ack_timeout)
                    }
                    _ => return Err(Fail::inval("id", "no device or addresses")),
                }
            };
            let qp = qp_of_id(cm)?;
            valid_param(cm, d, p, qp.is_some())?;
            let op = d.open()?;
            let mut data = pre;
            if let Some(p) = p {
                data.extend(private_data(p.private_data, p.private_data_len));
            }
            let (max, msg) = if qp_type == IBV_QPT_UD {
                (rcm::SIDR_REQ_DATA_MAX, "SIDR_REQ")
            } else {
                (56, "REQ")
            };
            if data.len() > max {
                return Err(Fail::inval(
                    "conn_param->private_data_len",
                    format!(
                        "{} bytes: a {msg} carries at most {max} after rdma_cm's header",
                        data.len()
                    ),
                ));
            }
            let param = rcm::ConnParam {
                private_data: data,
                responder_resources: match p {
                    Some(p) if p.responder_resources != RDMA_MAX_RESP_RES as u8 => {
                        p.responder_resources
                    }
                    _ => op.max_responder_resources,
                },
                initiator_depth: match p {
                    Some(p) if p.initiator_depth != RDMA_MAX_INIT_DEPTH as u8 => p.initiator_depth,
                    _ => op.max_initiator_depth,
                },
                retry_count: p.map_or(7, |p| p.retry_count.min(7)),
                rnr_retry_count: p.map_or(7, |p| p.rnr_retry_count.min(7)),
                srq: match qp {
                    // SAFETY: a live QP of this library; its srq field.
                    Some(q) => unsafe { !(*q.qp.get()).qp_base.srq.is_null() },
                    None => p.is_some_and(|p| p.srq != 0),
                },
                qp_num: p.map_or(0, |p| p.qp_num),
                flow_control: p.is_some_and(|p| p.flow_control != 0),
            };
            let ctx = rx_ctx(d)?;
            let rx = new_rx(cm.addr(), ps)?;
            let r = (|| {
                rx.set_tos(tos.unwrap_or(0));
                if let Some(t) = ack_timeout {
                    rx.set_ack_timeout(t)?;
                }
                rx.bind(&ctx, src.port())?;
                // a loopback destination from a device not on loopback is the
                // device itself (see `to_self`)
                let dst_ip = if super::id::to_self(d, dst.ip()) {
                    canonical(d.addr())
                } else {
                    canonical(dst.ip())
                };
                let dst = SocketAddr::new(dst_ip, dst.port());
                match qp {
                    Some(q) => rx.connect(&ctx, dst, &q.rx, &param),
                    None => rx.connect_without_qp(&ctx, dst, &param),
                }
            })();
            if let Err(e) = r {
                unroute(&rx);
                rx.destroy();
                return Err(Fail::from(e));
            }
            {
                let mut st = cm.lock();
                st.cm.rx = Some(rx);
                st.cm.had_cm = true;
                st.phase = Phase::Connect;
            }
            complete(cm)
        })
    }
}

/// The rxe-verbs id of an id's connection.
fn conn_rx(cm: &CmId) -> Result<rcm::CmId, Fail> {
    cm.lock().cm.rx.clone().ok_or_else(|| {
        Fail::inval(
            "id",
            "has no connection (a connection request's id, or one rdma_connect was called on)",
        )
    })
}

entry! {
    on_panic = -1;
    pub unsafe extern "C" fn rdma_accept(
        id: *mut rdma_cm_id,
        conn_param: *mut rdma_conn_param,
    ) -> c_int {
        minus_one(VERB, || {
            let cm = handle::get::<CmId>(id, "id")?;
            let (qp_type, _) = cm.kind();
            if qp_type == IBV_QPT_UD {
                return accept_ud(cm, read_param(conn_param));
            }
            let rx = conn_rx(cm)?;
            let (d, (req_init, req_resp)) = {
                let st = cm.lock();
                (
                    st.dev.ok_or_else(|| Fail::inval("id", "no device"))?,
                    st.cm.req_depths,
                )
            };
            let p = read_param(conn_param);
            let qp = qp_of_id(cm)?;
            valid_param(cm, d, p, qp.is_some())?;
            let op = d.open()?;
            let data = p.map_or(Vec::new(), |p| {
                private_data(p.private_data, p.private_data_len)
            });
            if data.len() > 196 {
                return Err(Fail::inval(
                    "conn_param->private_data_len",
                    format!("{} bytes: a REP carries at most 196", data.len()),
                ));
            }
            let resp = match p {
                Some(p) if p.responder_resources != RDMA_MAX_RESP_RES as u8 => {
                    p.responder_resources
                }
                _ => req_init.min(op.max_responder_resources),
            };
            let init = match p {
                Some(p) if p.initiator_depth != RDMA_MAX_INIT_DEPTH as u8 => p.initiator_depth,
                _ => req_resp.min(op.max_initiator_depth),
            };
            let param = rcm::ConnParam {
                private_data: data,
                responder_resources: resp,
                initiator_depth: init,
                retry_count: p.map_or(7, |p| p.retry_count.min(7)),
                rnr_retry_count: p.map_or(7, |p| p.rnr_retry_count.min(7)),
                srq: match qp {
                    // SAFETY: a live QP of this library; its srq field.
                    Some(q) => unsafe { !(*q.qp.get()).qp_base.srq.is_null() },
                    None => p.is_some_and(|p| p.srq != 0),
                },
                qp_num: p.map_or(0, |p| p.qp_num),
                flow_control: p.is_some_and(|p| p.flow_control != 0),
            };
            {
                let st = cm.lock();
                if let Some(t) = st.ack_timeout {
                    rx.set_ack_timeout(t)?;
                }
            }
            rx.accept(qp.map(|q| &q.rx), &param)?;
            complete(cm)
        })
    }
}

/// `rdma_accept` on a UD id: the SIDR_REP, with the id's QP (or
/// `param->qp_num`); librdmacm returns at once, without an event.
fn accept_ud(cm: &CmId, p: Option<&rdma_conn_param>) -> Result<(), Fail> {
    let rx = conn_rx(cm)?;
    let qp = qp_of_id(cm)?;
    let data = p.map_or(Vec::new(), |p| {
        private_data(p.private_data, p.private_data_len)
    });
    if data.len() > rcm::SIDR_REP_DATA_MAX {
        return Err(Fail::inval(
            "conn_param->private_data_len",
            format!(
                "{} bytes: a SIDR_REP carries at most {}",
                data.len(),
                rcm::SIDR_REP_DATA_MAX
            ),
        ));
    }
    let param = rcm::ConnParam {
        private_data: data,
        qp_num: p.map_or(0, |p| p.qp_num),
        ..rcm::ConnParam::default()
    };
    rx.accept(qp.map(|q| &q.rx), &param)?;
    Ok(())
}

fn reject(cm: &CmId, data: *const c_void, len: u8) -> Result<(), Fail> {
    let rx = conn_rx(cm)?;
    let pd = private_data(data, len);
    let (max, msg) = if cm.kind().0 == IBV_QPT_UD {
        (rcm::SIDR_REP_DATA_MAX, "SIDR_REP")
    } else {
        (148, "REJ")
    };
    if pd.len() > max {
        return Err(Fail::inval(
            "private_data_len",
            format!("{} bytes: a {msg} carries at most {max}", pd.len()),
        ));
    }
    rx.reject(&pd)?;
    Ok(())
}

entry! {
    on_panic = -1;
    pub unsafe extern "C" fn rdma_reject(
        id: *mut rdma_cm_id,
        private_data: *const c_void,
        private_data_len: u8,
    ) -> c_int {
        minus_one(VERB, || {
            reject(handle::get::<CmId>(id, "id")?, private_data, private_data_len)
        })
    }
}

entry! {
    on_panic = -1;
    /// As `rdma_reject` (the REJ's reason is 28, consumer defined, not ECE's 35).
    pub unsafe extern "C" fn rdma_reject_ece(
        id: *mut rdma_cm_id,
        private_data: *const c_void,
        private_data_len: u8,
    ) -> c_int {
        minus_one(VERB, || {
            reject(handle::get::<CmId>(id, "id")?, private_data, private_data_len)
        })
    }
}

entry! {
    on_panic = -1;
    pub unsafe extern "C" fn rdma_establish(id: *mut rdma_cm_id) -> c_int {
        minus_one(VERB, || {
            let cm = handle::get::<CmId>(id, "id")?;
            // SAFETY: a live id.
            if unsafe { !(*id).qp.is_null() } {
                return Err(Fail::inval(
                    "id",
                    "has a QP (rdma_establish is for ids that connect without one)",
                ));
            }
            let rx = conn_rx(cm)?;
            cm.lock().cm.quiet_established = true;
            if let Err(e) = rx.establish() {
                cm.lock().cm.quiet_established = false;
                return Err(e.into());
            }
            Ok(())
        })
    }
}

entry! {
    on_panic = -1;
    pub unsafe extern "C" fn rdma_disconnect(id: *mut rdma_cm_id) -> c_int {
        minus_one(VERB, || {
            let cm = handle::get::<CmId>(id, "id")?;
            let (rx, had_cm, has_dev) = {
                let st = cm.lock();
                (st.cm.rx.clone(), st.cm.had_cm, st.dev.is_some())
            };
            if !has_dev {
                return Err(Fail::inval(
                    "id",
                    "has no device (librdmacm's ucma_shutdown)",
                ));
            }
            // librdmacm moves the id's QP to ERR first (the rxe-verbs id does
            // too, for a QP it moved; this covers one the program moved).
            qp_to_err(cm);
            match rx {
                // UD ids have no connection to end: the kernel's answer is 0.
                Some(rx) if cm.kind().0 != IBV_QPT_UD => rx.disconnect()?,
                // A listener, an id whose connection ended or a UD id: the
                // kernel sends a DREQ (or DREP) its CM refuses and answers 0;
                // an id that never had a CM connection gets EINVAL.
                _ if had_cm => {}
                _ => {
                    return Err(Fail::inval(
                        "id",
                        "has no connection (a connection request's id, or one rdma_connect or rdma_listen was called on)",
                    ))
                }
            }
            complete(cm)
        })
    }
}

entry! {
    on_panic = -1;
    pub unsafe extern "C" fn rdma_notify(id: *mut rdma_cm_id, event: ibv_event_type) -> c_int {
        minus_one(VERB, || {
            let cm = handle::get::<CmId>(id, "id")?;
            let rx = conn_rx(cm)?;
            match event {
                IBV_EVENT_COMM_EST => Ok(rx.notify_established()?),
                e => Err(Fail::inval(
                    "event",
                    format!("{e} (IBV_EVENT_COMM_EST is the event rdma_notify takes)"),
                )),
            }
        })
    }
}

entry! {
    on_panic = -1;
    /// librdmacm's `rdma_get_request`: the next connection request on a
    /// synchronous listening id, with the QP of `rdma_create_ep`'s attributes
    /// made on it. Requests come with the CM protocol; until then the call
    /// waits on the id's channel (or fails with EAGAIN if it is non-blocking).
    pub unsafe extern "C" fn rdma_get_request(
        listen: *mut rdma_cm_id,
        id: *mut *mut rdma_cm_id,
    ) -> c_int {
        minus_one(VERB, || {
            let cm = handle::get::<CmId>(listen, "id")?;
            if id.is_null() {
                return Err(Fail::inval("id", "NULL"));
            }
            let (sync, ch, saved) = {
                let st = cm.lock();
                (st.sync, st.channel.clone(), st.qp_init_attr)
            };
            if !sync {
                return Err(Fail::inval(
                    "listen",
                    "not a synchronous id (created without a channel, or by rdma_create_ep)",
                ));
            }
            let c = cm.c();
            // SAFETY: the id is live; `event` is the library's field.
            let prev = unsafe { std::mem::replace(&mut (*c).event, std::ptr::null_mut()) };
            if !prev.is_null() {
                let _ = channel::ack_event(prev);
            }
            let e = channel::get_event(&ch)?;
            // SAFETY: an event just made.
            let (event, status, new) = unsafe { ((*e).event, (*e).status, (*e).id) };
            let fail = |f: Fail| {
                // SAFETY: the listening id is live.
                unsafe { (*c).event = e };
                Err(f)
            };
            if event == RDMA_CM_EVENT_REJECTED {
                return fail(Fail::new(libc::ECONNREFUSED, "rejected"));
            }
            if status != 0 {
                return fail(Fail::new(status.abs(), format!("event status {status}")));
            }
            if event != RDMA_CM_EVENT_CONNECT_REQUEST {
                return fail(Fail::inval("listen", format!("got {}", event_name(event))));
            }
            if let Some(SavedQpAttr(mut attr)) = saved {
                // SAFETY: the listening id is live; its pd field.
                let pd = unsafe { (*c).pd };
                // SAFETY: the new id of a connection request and a copy of the attributes.
                if unsafe { super::qp::rdma_create_qp(new, pd, &mut attr) } != 0 {
                    let errno = std::io::Error::last_os_error()
                        .raw_os_error()
                        .unwrap_or(libc::EINVAL);
                    return fail(Fail::new(errno, "creating the request's QP"));
                }
            }
            // SAFETY: the new id is live (the event holds it); the program's output.
            unsafe {
                (*new).event = e;
                id.write(new);
            }
            Ok(())
        })
    }
}
