//! A soft device's side of rdma_cm: its CM agent, the MADs of its QP 1,
//! the ids it serves, and what the agent's events mean for QPs and
//! applications.
//!
//! Locks: the device's `engine`, then its `cm` ([`CmPort`]); the id states
//! are never locked here, so an application call may hold its id while it
//! goes through the engine. An id dropped anywhere (even while this runs)
//! only leaves a note in `Shared::cm_gone`, which the next pump reads.

use super::{Inner, Shared};
use crate::cm::{
    ChannelInner, CmId, ConnParam, Event, EventKind, IdInner, IdState, UdParam, RDMA_UDP_QKEY,
};
use crate::error::{invalid, Error};
use parking_lot::Mutex;
use rxe_core::cm::{
    AcceptParams, CmAgent, CmConfig, CmEvent, CmQpType, ConnId, ConnectParams, QpParams, SidrId,
    SidrParams, SidrReplyParams,
};
use rxe_core::engine::{Engine, Transmit};
use rxe_core::mad::cm::RejReason;
use rxe_core::mad::cm::{Req, SidrStatus};
use rxe_core::mad::rdma_cm::CMA_HEADER_LEN;
use rxe_core::mad::{CmaHeader, GsiMad, PortSpace, GSI_QPN};
use rxe_core::psn::Psn;
use rxe_core::types::{Access, AddressVector, QpAttr, QpAttrMask, QpState};
use rxe_core::wire::icrc;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Weak};
use std::time::Instant;

/// A connection the device's agent has, and whose it is.
struct Rec {
    id: Weak<IdInner>,
    /// The QP to move through the states, if the id has one.
    qpn: Option<u32>,
    /// What the peer sent in its REP (active side), for the Established
    /// event.
    rep_param: Option<ConnParam>,
    /// Our starting PSN: the REQ's (active side), or the REP's to come
    /// (passive side, chosen when the REQ arrives so that
    /// [`CmPort::init_qp_attr`] can give RTR attributes before `accept`).
    psn: u32,
    /// Passive side until `accept`: who sent the REQ, and the REQ.
    req: Option<(IpAddr, Box<Req>)>,
    /// The id's `set_ack_timeout`, in place of the REQ's ACK timeout.
    ack_timeout: Option<u8>,
}

/// What an id left behind when it went (`Shared::cm_gone`).
pub(crate) struct Gone {
    pub conn: Option<ConnId>,
    /// Its SIDR exchange (sent, or received and not answered).
    pub sidr: Option<SidrId>,
    pub listening: Option<u64>,
    pub port: Option<(PortSpace, u16)>,
}

/// The path to a UD service being resolved: what the address vector of
/// the answer's event holds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct UdPath {
    pub remote: IpAddr,
    pub flow_label: u32,
    pub traffic_class: u8,
}

/// One device's rdma_cm state (in `Shared::cm`).
pub(crate) struct CmPort {
    agent: CmAgent,
    /// When the agent next needs the time, as of its last input or command
    /// (`poll_timeout` walks every connection: it is asked again only
    /// after the agent did something).
    deadline: Option<Instant>,
    /// A command reached the agent since the last pump: its MADs and
    /// events are waiting, and `deadline` may be stale.
    kick: bool,
    /// SIDR_REQs we sent: whose, and the path to the service.
    sidr_out: HashMap<SidrId, (Weak<IdInner>, UdPath)>,
    /// SIDR_REQs received and not answered yet, by the id they made.
    sidr_in: HashMap<SidrId, Weak<IdInner>>,
    /// The device's address, and the UDP port its packets leave from.
    addr: IpAddr,
    src_port: u16,
    /// MADs that arrived on QP 1, for the next pump.
    inbox: Vec<(IpAddr, Vec<u8>)>,
    /// Ports bound in each port space: how many ids hold each, and
    /// whether they all allow sharing it.
    ports: HashMap<(u16, u16), (u32, bool)>,
    listeners: HashMap<u64, (Weak<IdInner>, rxe_net::share::ServiceClaim)>,
    conns: HashMap<ConnId, Rec>,
    /// The device, for the ids of incoming connections (set at open).
    dev: Weak<Inner>,
    /// The next PSN of the GSI QP's sends.
    gsi_psn: u32,
}

impl CmPort {
    /// The port of a device at `addr` whose transport gives QP numbers (and
    /// so communication IDs) the prefix `prefix`.
    pub fn new(addr: IpAddr, src_port: u16, prefix: u8, guid: u64) -> CmPort {
        let mut cfg = CmConfig::new(addr, guid, rand::random());
        cfg.comm_id_prefix = Some(prefix);
        CmPort {
            agent: CmAgent::new(cfg),
            deadline: None,
            kick: false,
            sidr_out: HashMap::new(),
            sidr_in: HashMap::new(),
            addr,
            src_port,
            inbox: Vec::new(),
            ports: HashMap::new(),
            listeners: HashMap::new(),
            conns: HashMap::new(),
            dev: Weak::new(),
            gsi_psn: 0,
        }
    }

    /// Remembers the device (once, at open).
    pub fn set_device(&mut self, dev: Weak<Inner>) {
        self.dev = dev;
    }

    /// A MAD packet (BTH to ICRC) that arrived on QP 1.
    pub fn received(&mut self, from: IpAddr, packet: &[u8]) {
        // A flood of MADs nobody reads must not grow without bound: the
        // CM retries what is lost.
        if self.inbox.len() < 4096 {
            self.inbox.push((from, packet.to_vec()));
        }
    }

    /// When the agent next needs the time.
    pub fn next_timeout(&self) -> Option<Instant> {
        if self.kick {
            // A command ran and no pump followed yet: ask the agent.
            return self.agent.poll_timeout();
        }
        self.deadline
    }

    /// The agent, for a command or an input: the next pump runs it.
    fn agent(&mut self) -> &mut CmAgent {
        self.kick = true;
        &mut self.agent
    }

    /// The agent's counters (for tests and `rxe` tools).
    pub fn counters(&self) -> rxe_core::cm::CmCounters {
        self.agent.counters().clone()
    }

    /// Takes `port` in port space `ps` (0: a free one from the dynamic
    /// range, as the kernel's rdma_cm takes one). A port taken already is
    /// shared if both binds allow it (`reuse`).
    pub fn bind_port(&mut self, ps: PortSpace, port: u16, reuse: bool) -> Result<u16, Error> {
        if port != 0 {
            let e = self.ports.entry((ps.0, port)).or_insert((0, reuse));
            if e.0 > 0 && !(e.1 && reuse) {
                return Err(Error::Io {
                    what: format!("bind port {port}"),
                    source: std::io::Error::new(
                        std::io::ErrorKind::AddrInUse,
                        format!("port {port} is bound already on {}", self.addr),
                    ),
                });
            }
            e.0 += 1;
            e.1 &= reuse;
            return Ok(port);
        }
        for _ in 0..1000 {
            let p = 32768 + (rand::random::<u16>() % 28232);
            if let std::collections::hash_map::Entry::Vacant(v) = self.ports.entry((ps.0, p)) {
                v.insert((1, reuse));
                return Ok(p);
            }
        }
        Err(Error::Busy("no free port in 32768..61000"))
    }

    /// Gives `port` back.
    pub fn release_port(&mut self, ps: PortSpace, port: u16) {
        if let std::collections::hash_map::Entry::Occupied(mut o) = self.ports.entry((ps.0, port)) {
            o.get_mut().0 -= 1;
            if o.get().0 == 0 {
                o.remove();
            }
        }
    }

    /// Starts listening on `sid` for `id`: claims the service at the
    /// address (for processes sharing it) and tells the agent.
    pub fn listen(shared: &Shared, sid: u64, id: &Arc<IdInner>) -> Result<(), Error> {
        let claim = shared
            .link
            .lock()
            .claim_service(sid)
            .map_err(|source| Error::Io {
                what: format!("listen on service {sid:#018x}"),
                source,
            })?;
        let _e = shared.engine.lock();
        let mut cm = shared.cm.lock();
        cm.agent().listen(sid)?;
        cm.listeners.insert(sid, (Arc::downgrade(id), claim));
        Ok(())
    }

    /// Sends a REQ for `id`; `moves_qp`: the library moves the QP to RTR
    /// and RTS when the REP comes (else the application does, after
    /// [`EventKind::ConnectResponse`]).
    pub fn connect(
        &mut self,
        now: Instant,
        p: &ConnectParams,
        id: &Arc<IdInner>,
        moves_qp: bool,
        ack_timeout: Option<u8>,
    ) -> Result<ConnId, Error> {
        let conn = self.agent().connect(now, p)?;
        self.conns.insert(
            conn,
            Rec {
                id: Arc::downgrade(id),
                qpn: moves_qp.then_some(p.local_qpn),
                rep_param: None,
                psn: p.starting_psn,
                req: None,
                ack_timeout,
            },
        );
        Ok(conn)
    }

    /// Accepts `conn`: moves the QP to RTR and RTS and sends the REP.
    pub fn accept(
        &mut self,
        e: &mut Engine,
        now: Instant,
        conn: ConnId,
        qp: Option<(u32, rxe_core::types::QpType)>,
        param: &ConnParam,
        ack_timeout: Option<u8>,
    ) -> Result<(), Error> {
        let (qpn, qp_type) = match qp {
            Some((qpn, t)) => {
                let state = e.query_qp(qpn)?.0.state;
                if !matches!(state, QpState::Reset | QpState::Init) {
                    return Err(invalid(
                        "qp",
                        format!("in state {state:?}: accept takes a new QP"),
                    ));
                }
                (qpn, Some(cm_qp_type(t)?))
            }
            None if param.qp_num != 0 && param.qp_num <= 0xff_ffff => (param.qp_num, None),
            None => {
                return Err(invalid(
                    "param.qp_num",
                    "no QP given: the number of the QP the application moves itself",
                ))
            }
        };
        let Some(rec) = self.conns.get_mut(&conn) else {
            return Err(invalid("id", "its connection is gone"));
        };
        if ack_timeout.is_some() {
            rec.ack_timeout = ack_timeout;
        }
        let ack_timeout = rec.ack_timeout;
        let mut ap = AcceptParams::new(qpn, rec.psn);
        ap.responder_resources = param.responder_resources;
        ap.initiator_depth = param.initiator_depth;
        ap.rnr_retry_count = param.rnr_retry_count.min(7);
        ap.srq = param.srq;
        ap.private_data = param.private_data.clone();
        let qp = self.agent().accept(now, conn, &ap)?;
        if let Some(r) = self.conns.get_mut(&conn) {
            r.qpn = qp_type.map(|_| qpn);
            r.req = None;
        }
        let Some(qp_type) = qp_type else {
            return Ok(());
        };
        if let Err(err) =
            to_init(e, qpn, qp_type).and_then(|()| to_rtr_rts(e, &with_timeout(qp, ack_timeout)))
        {
            let _ = self
                .agent()
                .reject(now, conn, RejReason::CONSUMER_DEFINED, &[], &[]);
            return Err(err);
        }
        Ok(())
    }

    /// Refuses `conn`.
    pub fn reject(
        &mut self,
        now: Instant,
        conn: ConnId,
        reason: RejReason,
        private_data: &[u8],
    ) -> Result<(), Error> {
        Ok(self.agent().reject(now, conn, reason, &[], private_data)?)
    }

    /// Sends the RTU (an active id without a QP, after ConnectResponse).
    pub fn establish(&mut self, now: Instant, conn: ConnId) -> Result<(), Error> {
        Ok(self.agent().ready_to_use(now, conn, &[])?)
    }

    /// The passive side's QP got a message before the RTU
    /// (`IBV_EVENT_COMM_EST`): the connection is established.
    pub fn notify_established(&mut self, now: Instant, conn: ConnId) -> Result<(), Error> {
        Ok(self.agent().notify_established(now, conn)?)
    }

    /// What `rdma_init_qp_attr` gives for `conn` and `state`: INIT with the
    /// connection's access rights, RTR and RTS from the REQ and REP (or,
    /// on the passive side before `accept`, from the REQ alone, with the
    /// PSN the REP will carry). `None` if not known yet (an active side
    /// before the REP).
    pub fn init_qp_attr(&self, conn: ConnId, state: QpState) -> Option<(QpAttr, QpAttrMask)> {
        let rec = self.conns.get(&conn)?;
        let params = match self.agent.qp_params(conn) {
            Some(p) => Some(p),
            None => rec
                .req
                .as_ref()
                .and_then(|(from, req)| params_from_req(*from, req, rec.psn)),
        };
        match state {
            QpState::Init => {
                let t = params.map_or(CmQpType::Rc, |p| p.qp_type);
                let a = QpAttr {
                    state: QpState::Init,
                    pkey_index: 0,
                    port: 1,
                    access: remote_access(t),
                    ..QpAttr::default()
                };
                Some((
                    a,
                    QpAttrMask::STATE
                        | QpAttrMask::PKEY_INDEX
                        | QpAttrMask::PORT
                        | QpAttrMask::ACCESS_FLAGS,
                ))
            }
            QpState::Rtr => Some(rtr_attr(&with_timeout(params?, rec.ack_timeout))),
            QpState::Rts => Some(rts_attr(&with_timeout(params?, rec.ack_timeout))),
            _ => None,
        }
    }

    /// Sends the DREQ, or the DREP to the peer's.
    pub fn disconnect(&mut self, now: Instant, conn: ConnId) -> Result<(), Error> {
        Ok(self.agent().disconnect(now, conn, &[])?)
    }

    /// Sends a SIDR_REQ for `id` (a UDP id), to the service on `path`.
    pub fn sidr_request(
        &mut self,
        now: Instant,
        p: &SidrParams,
        id: &Arc<IdInner>,
        path: UdPath,
    ) -> Result<SidrId, Error> {
        let sidr = self.agent().sidr_request(now, p)?;
        self.sidr_out.insert(sidr, (Arc::downgrade(id), path));
        Ok(sidr)
    }

    /// Answers the SIDR_REQ `sidr` with our UD QP: `qp` (made ready
    /// first, its Q_Key named) or, without one, `qp_num` with
    /// [`RDMA_UDP_QKEY`].
    pub fn accept_ud(
        &mut self,
        e: &mut Engine,
        now: Instant,
        sidr: SidrId,
        qp: Option<u32>,
        qp_num: u32,
        private_data: &[u8],
    ) -> Result<(), Error> {
        if !self.sidr_in.contains_key(&sidr) {
            return Err(invalid(
                "id",
                "its request is gone (answered, or the peer's id destroyed)",
            ));
        }
        let (qpn, qkey) = match qp {
            Some(qpn) => {
                ud_ready(e, qpn)?;
                (qpn, e.query_qp(qpn)?.0.qkey)
            }
            None => (qp_num, RDMA_UDP_QKEY),
        };
        let rp = SidrReplyParams {
            status: SidrStatus::SUCCESS,
            qpn,
            qkey,
            private_data: private_data.to_vec(),
        };
        self.agent().sidr_reply(now, sidr, &rp)?;
        self.sidr_in.remove(&sidr);
        Ok(())
    }

    /// Refuses the SIDR_REQ `sidr` (SIDR_REP status 2, rejected).
    pub fn reject_ud(
        &mut self,
        now: Instant,
        sidr: SidrId,
        private_data: &[u8],
    ) -> Result<(), Error> {
        self.sidr_in.remove(&sidr);
        let rp = SidrReplyParams {
            status: SidrStatus::REJECT,
            qpn: 0,
            qkey: 0,
            private_data: private_data.to_vec(),
        };
        Ok(self.agent().sidr_reply(now, sidr, &rp)?)
    }

    /// An id went: end its connection, its SIDR exchange (a request not
    /// answered is rejected, as the kernel's `cm_destroy_id` does) and its
    /// listening.
    pub fn forget(&mut self, now: Instant, g: &Gone) {
        let (conn, listening) = (g.conn, g.listening);
        if let Some(s) = g.sidr {
            // An answer to a request we sent is dropped when it comes (the
            // agent resends the request until then).
            self.sidr_out.remove(&s);
            if self.sidr_in.remove(&s).is_some() {
                let _ = self.reject_ud(now, s, &[]);
            }
        }
        if let Some(c) = conn {
            if self.agent.state(c).is_some() {
                let _ = self.agent().destroy(now, c);
            }
            if let Some(r) = self.conns.get_mut(&c) {
                r.id = Weak::new();
            }
        }
        if let Some(sid) = listening {
            let _ = self.agent().unlisten(now, sid);
            self.listeners.remove(&sid);
        }
    }

    /// Runs the agent: takes in the MADs that arrived, runs its timers,
    /// carries out what it decided (QP changes, events for the ids' channels)
    /// and puts the MADs it sends on the device's send queue. Called with
    /// the engine locked, from every collect.
    ///
    /// It runs on every engine call, so with nothing to do (no MAD in, no
    /// id gone, no command since the last pump, no timer due) it returns at
    /// once, without asking the agent for its next deadline (which walks
    /// every connection): that is asked only after the agent did something.
    pub fn pump(shared: &Shared, e: &mut Engine, now: Instant) {
        let mut cm = shared.cm.lock();
        let due = cm.deadline.is_some_and(|t| t <= now);
        if !cm.kick && !due && cm.inbox.is_empty() && shared.cm_gone.lock().is_empty() {
            return;
        }
        let gone = std::mem::take(&mut *shared.cm_gone.lock());
        for g in gone {
            cm.forget(now, &g);
            if let Some((ps, port)) = g.port {
                cm.release_port(ps, port);
            }
        }
        for (from, packet) in std::mem::take(&mut cm.inbox) {
            cm.agent.handle_gsi_packet(now, from, &packet);
        }
        if cm.agent.poll_timeout().is_some_and(|t| t <= now) {
            cm.agent.handle_timeout(now);
        }
        let mut deliver: Vec<(Arc<ChannelInner>, Event)> = Vec::new();
        while let Some(ev) = cm.agent.poll_event() {
            cm.on_event(e, now, ev, &mut deliver);
        }
        let mut sent = Vec::new();
        while let Some(t) = cm.agent.poll_transmit() {
            if let Some(t) = cm.packet(&t) {
                sent.push(t);
            }
        }
        cm.kick = false;
        cm.deadline = cm.agent.poll_timeout();
        drop(cm);
        if !sent.is_empty() {
            shared.outq.lock().extend(sent);
        }
        for (ch, ev) in deliver {
            ch.push(ev);
        }
    }

    /// The UDP packet carrying one of the agent's MADs.
    fn packet(&mut self, t: &rxe_core::cm::Transmit) -> Option<Transmit> {
        let g = GsiMad::new(&t.mad, Psn::new(self.gsi_psn));
        self.gsi_psn = (self.gsi_psn + 1) & 0xff_ffff;
        let repr = g.to_packet(GSI_QPN);
        let mut payload = vec![0u8; repr.buffer_len()];
        let n = repr.emit(&mut payload).ok()?;
        let icrc_at = n - icrc::ICRC_LEN;
        let crc = icrc::compute_udp(self.addr, t.dst, self.src_port, &payload[..icrc_at]).ok()?;
        payload[icrc_at..n].copy_from_slice(&crc.to_le_bytes());
        payload.truncate(n);
        Some(Transmit {
            src: self.addr,
            dst: t.dst,
            src_port: self.src_port,
            traffic_class: 0,
            hop_limit: 64,
            payload,
        })
    }

    /// One event of the agent: what it means for the QP and the id.
    fn on_event(
        &mut self,
        e: &mut Engine,
        now: Instant,
        ev: CmEvent,
        out: &mut Vec<(Arc<ChannelInner>, Event)>,
    ) {
        match ev {
            CmEvent::ConnectRequest {
                conn,
                from,
                req,
                cma,
            } => {
                let listener = self
                    .listeners
                    .get(&req.service_id)
                    .and_then(|(w, _)| w.upgrade());
                let (Some(listener), Some(dev)) = (listener, self.dev.upgrade()) else {
                    let _ = self
                        .agent
                        .reject(now, conn, RejReason::INVALID_SERVICE_ID, &[], &[]);
                    return;
                };
                let port = PortSpace::from_service_id(req.service_id).map_or(0, |(_, p)| p);
                let child = Arc::new(IdInner {
                    channel: listener.channel.clone(),
                    ps: listener.ps,
                    st: Mutex::new(IdState {
                        dev: Some(dev),
                        local: Some(SocketAddr::new(self.addr, port)),
                        remote: Some(peer_of(cma.as_ref(), from)),
                        conn: Some(conn),
                        ..IdState::default()
                    }),
                });
                self.conns.insert(
                    conn,
                    Rec {
                        id: Arc::downgrade(&child),
                        qpn: None,
                        rep_param: None,
                        psn: rand::random::<u32>() & 0xff_ffff,
                        req: Some((from, req.clone())),
                        ack_timeout: None,
                    },
                );
                let data = req.private_data.as_slice();
                let skip = if cma.is_some() { CMA_HEADER_LEN } else { 0 };
                let param = ConnParam {
                    private_data: data[skip.min(data.len())..].to_vec(),
                    responder_resources: req.responder_resources,
                    initiator_depth: req.initiator_depth,
                    retry_count: req.retry_count,
                    rnr_retry_count: req.rnr_retry_count,
                    srq: req.srq,
                    qp_num: req.local_qpn,
                    flow_control: req.end_to_end_flow_control,
                };
                out.push((
                    listener.channel.clone(),
                    Event {
                        kind: EventKind::ConnectRequest,
                        id: CmId::from_inner(child),
                        listen_id: Some(CmId::from_inner(listener)),
                        status: 0,
                        param,
                        ud: None,
                    },
                ));
            }
            CmEvent::ConnectResponse { conn, rep, qp } => {
                let param = ConnParam {
                    private_data: rep.private_data.as_slice().to_vec(),
                    responder_resources: rep.responder_resources,
                    initiator_depth: rep.initiator_depth,
                    retry_count: 0,
                    rnr_retry_count: rep.rnr_retry_count,
                    srq: rep.srq,
                    qp_num: rep.local_qpn,
                    flow_control: rep.end_to_end_flow_control,
                };
                let Some(rec) = self.conns.get_mut(&conn) else {
                    return;
                };
                rec.rep_param = Some(param.clone());
                let qp = with_timeout(qp, rec.ack_timeout);
                match rec.qpn {
                    Some(_) => match to_rtr_rts(e, &qp) {
                        Ok(()) => {
                            let _ = self.agent.ready_to_use(now, conn, &[]);
                        }
                        Err(err) => {
                            let _ =
                                self.agent
                                    .reject(now, conn, RejReason::CONSUMER_DEFINED, &[], &[]);
                            self.event(conn, EventKind::ConnectError, -libc::EINVAL, param, out);
                            let _ = err;
                        }
                    },
                    None => self.event(conn, EventKind::ConnectResponse, 0, param, out),
                }
            }
            CmEvent::Established {
                conn, private_data, ..
            } => {
                let param = match self.conns.get(&conn).and_then(|r| r.rep_param.clone()) {
                    Some(p) => p,
                    None => ConnParam {
                        private_data,
                        ..ConnParam::default()
                    },
                };
                self.event(conn, EventKind::Established, 0, param, out);
            }
            CmEvent::Rejected {
                conn,
                reason,
                private_data,
                ..
            } => {
                let param = ConnParam {
                    private_data,
                    ..ConnParam::default()
                };
                self.event(conn, EventKind::Rejected, i32::from(reason.0), param, out);
                self.tidy(conn);
            }
            CmEvent::Unreachable { conn, .. } => {
                self.event(
                    conn,
                    EventKind::Unreachable,
                    -libc::ETIMEDOUT,
                    ConnParam::default(),
                    out,
                );
                self.tidy(conn);
            }
            CmEvent::Disconnected {
                conn, private_data, ..
            } => {
                let param = ConnParam {
                    private_data,
                    ..ConnParam::default()
                };
                self.event(conn, EventKind::Disconnected, 0, param, out);
            }
            CmEvent::TimewaitExit { conn } => {
                self.event(conn, EventKind::TimewaitExit, 0, ConnParam::default(), out);
                self.conns.remove(&conn);
            }
            CmEvent::SidrRequest { id, from, req, cma } => {
                let listener = self
                    .listeners
                    .get(&req.service_id)
                    .and_then(|(w, _)| w.upgrade());
                let (Some(listener), Some(dev)) = (listener, self.dev.upgrade()) else {
                    // The listener went meanwhile: as if nobody listened.
                    let rp = SidrReplyParams {
                        status: SidrStatus::UNSUPPORTED,
                        qpn: 0,
                        qkey: 0,
                        private_data: Vec::new(),
                    };
                    let _ = self.agent.sidr_reply(now, id, &rp);
                    return;
                };
                let port = PortSpace::from_service_id(req.service_id).map_or(0, |(_, p)| p);
                let child = Arc::new(IdInner {
                    channel: listener.channel.clone(),
                    ps: listener.ps,
                    st: Mutex::new(IdState {
                        dev: Some(dev),
                        local: Some(SocketAddr::new(self.addr, port)),
                        remote: Some(peer_of(cma.as_ref(), from)),
                        sidr_req: Some(id),
                        ..IdState::default()
                    }),
                });
                self.sidr_in.insert(id, Arc::downgrade(&child));
                // The kernel hands over everything after rdma_cm's header
                // (180 bytes).
                let data = &req.private_data[..];
                let skip = if cma.is_some() { CMA_HEADER_LEN } else { 0 };
                let param = ConnParam {
                    private_data: data[skip.min(data.len())..].to_vec(),
                    ..ConnParam::default()
                };
                out.push((
                    listener.channel.clone(),
                    Event {
                        kind: EventKind::ConnectRequest,
                        id: CmId::from_inner(child),
                        listen_id: Some(CmId::from_inner(listener)),
                        status: 0,
                        param,
                        ud: None,
                    },
                ));
            }
            CmEvent::SidrReply {
                id,
                status,
                qpn,
                qkey,
                private_data,
            } => {
                let Some((owner, path)) = self.sidr_out.remove(&id) else {
                    return;
                };
                let Some(owner) = owner.upgrade() else {
                    return;
                };
                let param = ConnParam {
                    private_data,
                    ..ConnParam::default()
                };
                if status != SidrStatus::SUCCESS {
                    // The kernel's cma_sidr_rep_handler: UNREACHABLE with
                    // the SIDR status.
                    let st = i32::from(status.0);
                    Self::event_to(owner, EventKind::Unreachable, st, param, None, out);
                    return;
                }
                let mut ah = AddressVector::to(path.remote);
                ah.flow_label = path.flow_label;
                ah.traffic_class = path.traffic_class;
                ah.hop_limit = 64;
                let ud = UdParam {
                    ah,
                    qp_num: qpn,
                    qkey,
                };
                Self::event_to(owner, EventKind::Established, 0, param, Some(ud), out);
            }
            CmEvent::SidrUnreachable { id } => {
                let Some(owner) = self.sidr_out.remove(&id).and_then(|(w, _)| w.upgrade()) else {
                    return;
                };
                let (kind, st) = (EventKind::Unreachable, -libc::ETIMEDOUT);
                Self::event_to(owner, kind, st, ConnParam::default(), None, out);
            }
        }
    }

    /// Queues an event for the id of `conn`, if it is still there.
    fn event(
        &self,
        conn: ConnId,
        kind: EventKind,
        status: i32,
        param: ConnParam,
        out: &mut Vec<(Arc<ChannelInner>, Event)>,
    ) {
        let Some(id) = self.conns.get(&conn).and_then(|r| r.id.upgrade()) else {
            return;
        };
        Self::event_to(id, kind, status, param, None, out);
    }

    /// Queues an event for `id`.
    fn event_to(
        id: Arc<IdInner>,
        kind: EventKind,
        status: i32,
        param: ConnParam,
        ud: Option<UdParam>,
        out: &mut Vec<(Arc<ChannelInner>, Event)>,
    ) {
        out.push((
            id.channel.clone(),
            Event {
                kind,
                id: CmId::from_inner(id),
                listen_id: None,
                status,
                param,
                ud,
            },
        ));
    }

    /// Forgets `conn` once the agent has.
    fn tidy(&mut self, conn: ConnId) {
        if self.agent.state(conn).is_none() {
            self.conns.remove(&conn);
        }
    }
}

/// Makes a UD QP ready to send and receive, as librdmacm's
/// `ucma_init_ud_qp` does: RESET → INIT (P_Key index 0, port 1, Q_Key
/// [`RDMA_UDP_QKEY`]) → RTR → RTS (SQ PSN 0). A QP in INIT or RTR goes on
/// to RTS with the Q_Key it has; one in RTS is left as it is.
pub(crate) fn ud_ready(e: &mut Engine, qpn: u32) -> Result<(), Error> {
    let state = e.query_qp(qpn)?.0.state;
    let step = |e: &mut Engine, state: QpState, m: QpAttrMask, a: QpAttr| {
        let a = QpAttr { state, ..a };
        e.modify_qp(qpn, &a, QpAttrMask::STATE | m)
    };
    let base = QpAttr::default();
    match state {
        QpState::Reset => {
            let a = QpAttr {
                pkey_index: 0,
                port: 1,
                qkey: RDMA_UDP_QKEY,
                ..base
            };
            let m = QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::QKEY;
            step(e, QpState::Init, m, a)?;
            step(e, QpState::Rtr, QpAttrMask::empty(), base)?;
            step(e, QpState::Rts, QpAttrMask::SQ_PSN, base)?;
        }
        QpState::Init => {
            step(e, QpState::Rtr, QpAttrMask::empty(), base)?;
            step(e, QpState::Rts, QpAttrMask::SQ_PSN, base)?;
        }
        QpState::Rtr => step(e, QpState::Rts, QpAttrMask::SQ_PSN, base)?,
        QpState::Rts => {}
        s => {
            return Err(invalid(
                "qp",
                format!("in state {s:?}: a UD QP for rdma_cm is new or ready (RTS)"),
            ))
        }
    }
    Ok(())
}

/// The CM's name for a QP type.
fn cm_qp_type(t: rxe_core::types::QpType) -> Result<CmQpType, Error> {
    match t {
        rxe_core::types::QpType::Rc => Ok(CmQpType::Rc),
        rxe_core::types::QpType::Uc => Ok(CmQpType::Uc),
        rxe_core::types::QpType::Ud => Err(invalid(
            "qp",
            "a UD QP goes with a PortSpace::UDP id (SIDR), not a TCP one",
        )),
    }
}

/// rdma_cm's flow label for RoCE: the two ports hashed (the kernel's
/// `cma_get_roce_udp_flow_label`).
pub(crate) fn flow_label(src_port: u16, dst_port: u16) -> u32 {
    (u32::from(src_port) * 31 + u32::from(dst_port)) & 0xf_ffff
}

/// The access rights of a connected QP (the kernel's
/// `cm_init_qp_init_attr`: remote writes, and reads and atomics on RC).
fn remote_access(qp_type: CmQpType) -> Access {
    match qp_type {
        CmQpType::Rc => {
            Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC
        }
        CmQpType::Uc => Access::LOCAL_WRITE | Access::REMOTE_WRITE,
    }
}

/// RESET → INIT, or INIT → INIT (librdmacm leaves a new QP in INIT with
/// no remote access), with the connection's access rights.
pub(crate) fn to_init(e: &mut Engine, qpn: u32, qp_type: CmQpType) -> Result<(), Error> {
    let a = QpAttr {
        state: QpState::Init,
        pkey_index: 0,
        port: 1,
        access: remote_access(qp_type),
        ..QpAttr::default()
    };
    let m =
        QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS;
    Ok(e.modify_qp(qpn, &a, m)?)
}

/// `p` with the id's ACK timeout, if it set one.
fn with_timeout(mut p: QpParams, ack_timeout: Option<u8>) -> QpParams {
    if let Some(t) = ack_timeout {
        p.timeout = t;
    }
    p
}

/// The QP attributes of the passive side before `accept`: the REQ's, with
/// our starting PSN and the depths it asked for.
fn params_from_req(from: IpAddr, req: &Req, psn: u32) -> Option<QpParams> {
    let path = &req.primary_path;
    Some(QpParams {
        qp_type: match req.transport_service_type {
            rxe_core::mad::cm::TransportServiceType::Uc => CmQpType::Uc,
            _ => CmQpType::Rc,
        },
        local_qpn: 0,
        remote_qpn: req.local_qpn,
        sq_psn: req.starting_psn,
        rq_psn: psn,
        path_mtu: req.mtu()?,
        max_rd_atomic: req.responder_resources,
        max_dest_rd_atomic: req.initiator_depth,
        retry_count: req.retry_count,
        rnr_retry: req.rnr_retry_count,
        timeout: path.local_ack_timeout,
        remote_addr: from,
        remote_gid: path.local_gid,
        flow_label: path.flow_label,
        hop_limit: path.hop_limit,
        traffic_class: path.traffic_class,
    })
}

/// INIT → RTR with what the REQ and REP say.
fn rtr_attr(p: &QpParams) -> (QpAttr, QpAttrMask) {
    let mut av = AddressVector::to(p.remote_addr);
    av.flow_label = p.flow_label;
    av.hop_limit = p.hop_limit;
    av.traffic_class = p.traffic_class;
    let mut a = QpAttr {
        state: QpState::Rtr,
        av: Some(av),
        path_mtu: p.path_mtu,
        dest_qpn: p.remote_qpn,
        rq_psn: Psn::new(p.rq_psn),
        ..QpAttr::default()
    };
    let mut m = QpAttrMask::STATE
        | QpAttrMask::AV
        | QpAttrMask::PATH_MTU
        | QpAttrMask::DEST_QPN
        | QpAttrMask::RQ_PSN;
    if p.qp_type == CmQpType::Rc {
        a.max_dest_rd_atomic = p.max_dest_rd_atomic;
        a.min_rnr_timer = 12;
        m |= QpAttrMask::MAX_DEST_RD_ATOMIC | QpAttrMask::MIN_RNR_TIMER;
    }
    (a, m)
}

/// RTR → RTS with what the REQ and REP say.
fn rts_attr(p: &QpParams) -> (QpAttr, QpAttrMask) {
    let mut a = QpAttr {
        state: QpState::Rts,
        sq_psn: Psn::new(p.sq_psn),
        ..QpAttr::default()
    };
    let mut m = QpAttrMask::STATE | QpAttrMask::SQ_PSN;
    if p.qp_type == CmQpType::Rc {
        a.timeout = p.timeout;
        a.retry_cnt = p.retry_count;
        a.rnr_retry = p.rnr_retry;
        a.max_rd_atomic = p.max_rd_atomic;
        m |= QpAttrMask::TIMEOUT
            | QpAttrMask::RETRY_CNT
            | QpAttrMask::RNR_RETRY
            | QpAttrMask::MAX_QP_RD_ATOMIC;
    }
    (a, m)
}

/// INIT → RTR → RTS with what the REQ and REP say.
fn to_rtr_rts(e: &mut Engine, p: &QpParams) -> Result<(), Error> {
    let (a, m) = rtr_attr(p);
    e.modify_qp(p.local_qpn, &a, m)?;
    let (a, m) = rts_attr(p);
    Ok(e.modify_qp(p.local_qpn, &a, m)?)
}

/// Moves the QP to ERR (rdma_disconnect's first step), ignoring a QP that
/// is gone.
pub(crate) fn to_err(e: &mut Engine, qpn: u32) {
    let a = QpAttr {
        state: QpState::Err,
        ..QpAttr::default()
    };
    let _ = e.modify_qp(qpn, &a, QpAttrMask::STATE);
}

/// An address and port as rdma_cm's header carries them.
fn peer_of(cma: Option<&CmaHeader>, from: IpAddr) -> SocketAddr {
    match cma {
        Some(h) => SocketAddr::new(h.src, h.src_port),
        None => SocketAddr::new(from, 0),
    }
}
