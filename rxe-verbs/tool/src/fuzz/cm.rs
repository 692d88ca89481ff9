//! rdma_cm connections made from the fuzzer's own socket: the CM MADs
//! (REQ, REP, RTU, and DREQ/DREP at the end) as UD SENDs to and from QP 1,
//! with rxe-core's sans-IO [`CmAgent`] (the same agent, MAD builders and
//! parsers as rxe-verbs' rdma_cm, see docs/cm.md), pumped here by hand.
//!
//! There is no QP on our side: the REQ names a QP number of ours that only
//! [`super::session`] plays, and a starting PSN for the peer's requester.
//! The REP tells us the peer's QP number and the PSN its responder expects
//! from us: with rdma_cm the *peer* chooses our first PSN (the starting
//! PSNs cross, docs/cm-wire.md), which is why a replay over rdma_cm shifts
//! the PSNs it resends ([`super::session::Session::psn_shift`]).
//!
//! [`CmLink`] is our CM end; it sends and receives through the fuzzer's
//! [`Socket`], which [`super::session::Link`] holds with it.
//!
//! The agent's communication IDs carry our transport's QPN prefix on top,
//! so that rxe-net routes the peer's answers to this process when several
//! share the address (`rxe_core::mad::cm_route`).

use super::bth::bth_qpn;
use super::config::{Res, Target};
use super::socket::Socket;
use rxe_core::cm::{CmAgent, CmConfig, CmEvent, ConnId, ConnectParams};
use rxe_core::mad::rdma_cm::CMA_HEADER_LEN;
use rxe_core::mad::{CmaHeader, GsiMad, PortSpace, GSI_QPN};
use rxe_core::psn::Psn;
use rxe_core::types::Mtu;
use rxe_core::wire::{icrc, ROCE_V2_PORT};
use std::collections::VecDeque;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// Our end of the CM: the agent and the connection in use.
pub(crate) struct CmLink {
    agent: CmAgent,
    /// The next PSN of our GSI QP's sends.
    gsi_psn: u32,
    /// The connections in use (the session's; for perftest also its
    /// communication QP's), until they are ended.
    pub conns: Vec<ConnId>,
    /// The peer ended one of them (its DREQ came).
    pub peer_left: bool,
    /// Events for [`CmLink::connect`] and [`CmLink::close`].
    events: VecDeque<CmEvent>,
    /// MADs sent and received (for the summary).
    pub mads_sent: u64,
    pub mads_received: u64,
}

/// What the REP gave us.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CmConnected {
    pub peer: IpAddr,
    pub peer_qpn: u32,
    /// The PSN the peer's responder expects first (the REP's starting PSN).
    pub sq_psn: Psn,
    pub mtu: usize,
}

/// The packet lifetime we announce (4.096 µs × 2^14 ≈ 67 ms): our REQ is
/// resent every 2 × that plus the response timeout below, and our
/// timewait lasts 2 × that.
const PACKET_LIFE_TIME: u8 = 14;
/// How long we wait for the REP before resending the REQ (4.096 µs × 2^15
/// ≈ 134 ms): a server restarting in a loop has no socket for a moment,
/// and a REQ sent then is lost.
const RESPONSE_TIMEOUT: u8 = 15;
/// How long one REQ may wait for its REP before we give up on it and send
/// a new one (a new communication ID): a server busy with an earlier
/// connection may have MRAed our REQ (rdma_cm holds the client for about
/// 69 s), and the server run that comes next in the user's loop only
/// hears a new REQ.
const ATTEMPT: Duration = Duration::from_secs(2);

impl CmLink {
    pub(crate) fn new(local: IpAddr, prefix: u8, seed: u64) -> CmLink {
        // A CA GUID made from our address (an EUI-64 shape, as a MAC's).
        let a = match local {
            IpAddr::V4(v) => u64::from(u32::from(v)),
            IpAddr::V6(v) => u128::from(v) as u64,
        };
        let mut cfg = CmConfig::new(local, 0x0200_00ff_fe00_0000 ^ a, seed);
        cfg.comm_id_prefix = Some(prefix);
        cfg.packet_life_time = PACKET_LIFE_TIME;
        CmLink {
            agent: CmAgent::new(cfg),
            gsi_psn: 0,
            conns: Vec::new(),
            peer_left: false,
            events: VecDeque::new(),
            mads_sent: 0,
            mads_received: 0,
        }
    }
}

/// rdma_cm's flow label for RoCE: the two ports hashed (the kernel's
/// `cma_get_roce_udp_flow_label`).
fn flow_label(src_port: u16, dst_port: u16) -> u32 {
    (u32::from(src_port) * 31 + u32::from(dst_port)) & 0xf_ffff
}

/// The address `target` names, of the family of `local`.
pub(crate) fn resolve(target: &Target, local: IpAddr) -> Res<IpAddr> {
    use std::net::ToSocketAddrs;
    let addrs: Vec<IpAddr> = (target.host.as_str(), target.port)
        .to_socket_addrs()
        .map_err(|e| format!("{e} for {target}"))?
        .map(|a| a.ip().to_canonical())
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4() == local.is_ipv4())
        .copied()
        .ok_or_else(|| {
            format!(
                "{target} has no {} address (-d {local} is one)",
                if local.is_ipv4() { "IPv4" } else { "IPv6" }
            )
        })
}

impl CmLink {
    /// Feeds a datagram to our QP 1 (a MAD from `from`) to the agent.
    pub(crate) fn received(&mut self, sock: &mut Socket, from: IpAddr, data: &[u8]) {
        let now = Instant::now();
        self.mads_received += 1;
        self.agent.handle_gsi_packet(now, from, data);
        self.pump(sock);
    }

    /// Runs the agent's timers, sends what it has to send, answers a DREQ
    /// of the peer's with the DREP (what rdma_cm does when the program
    /// calls `rdma_disconnect` on its DISCONNECTED event), and keeps the
    /// other events for whoever waits on them.
    pub(crate) fn pump(&mut self, sock: &mut Socket) {
        let now = Instant::now();
        let c = self;
        if c.agent.poll_timeout().is_some_and(|t| t <= now) {
            c.agent.handle_timeout(now);
        }
        while let Some(e) = c.agent.poll_event() {
            if let CmEvent::Disconnected { conn, .. } = &e {
                if c.conns.contains(conn) {
                    c.peer_left = true;
                }
                // A DREQ came: the DREP. (After our own DREQ: nothing.)
                let _ = c.agent.disconnect(now, *conn, &[]);
            }
            c.events.push_back(e);
        }
        let mut out = Vec::new();
        while let Some(t) = c.agent.poll_transmit() {
            let g = GsiMad::new(&t.mad, Psn::new(c.gsi_psn));
            c.gsi_psn = (c.gsi_psn + 1) & 0xff_ffff;
            let repr = g.to_packet(GSI_QPN);
            let mut b = vec![0u8; repr.buffer_len()];
            let Ok(n) = repr.emit(&mut b) else { continue };
            b.truncate(n);
            let at = n - icrc::ICRC_LEN;
            if let Ok(crc) = icrc::compute_udp(sock.local, t.dst, ROCE_V2_PORT, &b[..at]) {
                b[at..].copy_from_slice(&crc.to_le_bytes());
            }
            out.push((t.dst, b));
        }
        // Only the events of the last few connections matter.
        while c.events.len() > 64 {
            c.events.pop_front();
        }
        for (dst, b) in out {
            // A MAD, to `dst`'s port 4791.
            if sock.send_to(dst, b, 64).is_ok() {
                c.mads_sent += 1;
            }
        }
    }

    /// Connects to the rdma_cm listener at `target` (TCP port space) as
    /// `rdma_connect` does: a REQ for our QP `our_qpn`, whose starting PSN
    /// `peer_psn` is the first the peer will send; on the REP, the RTU.
    /// A refusal (nobody listens yet: REJ 8) or silence is tried again
    /// until `deadline`. Our CM end (`cm`) is made on the first call;
    /// datagrams that are no MAD of the peer's count in `stray`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn connect(
        cm: &mut Option<CmLink>,
        sock: &mut Socket,
        stray: &mut u64,
        target: &Target,
        our_qpn: u32,
        peer_psn: Psn,
        mtu: usize,
        deadline: Instant,
    ) -> Res<CmConnected> {
        let remote = resolve(target, sock.local)?;
        if remote.is_multicast() || remote.is_unspecified() {
            return Err(format!("{remote} is not a unicast address"));
        }
        let c = cm.get_or_insert_with(|| {
            let seed = u64::from(our_qpn) << 24 ^ u64::from(peer_psn.value());
            CmLink::new(sock.local, sock.qpn_prefix(), seed)
        });
        let path_mtu = Mtu::from_bytes(mtu).unwrap_or(Mtu::Mtu1024);
        // The REQ's source port, in rdma_cm's header and the flow label.
        let sport = 32768 | (our_qpn as u16 & 0x7fff);
        let mut pd = vec![0u8; CMA_HEADER_LEN];
        CmaHeader {
            src_port: sport,
            src: sock.local,
            dst: remote,
        }
        .emit(&mut pd)
        .map_err(|e| e.to_string())?;
        let mut p = ConnectParams::new(
            PortSpace::TCP.service_id(target.port),
            remote,
            our_qpn & 0xff_ffff,
            peer_psn.value(),
        );
        p.path_mtu = path_mtu;
        p.remote_cm_response_timeout = RESPONSE_TIMEOUT;
        p.flow_label = flow_label(sport, target.port);
        p.private_data = pd;
        let mut why = String::from("no REP to the REQ");
        loop {
            let now = Instant::now();
            c.events.clear();
            let conn = c.agent.connect(now, &p).map_err(|e| e.to_string())?;
            c.pump(sock);
            let attempt_end = now + ATTEMPT;
            let mut retry = false;
            while !retry {
                let now = Instant::now();
                if now >= attempt_end && now < deadline {
                    let _ = c.agent.destroy(now, conn);
                    why = "no REP to the REQ".into();
                    break;
                }
                if now >= deadline {
                    let _ = c.agent.destroy(now, conn);
                    c.pump(sock);
                    return Err(format!("no rdma_cm connection to {target}: {why}"));
                }
                let wait = (deadline - now).min(Duration::from_millis(10));
                c.recv_mads(sock, stray, remote, wait);
                while let Some(e) = c.events.pop_front() {
                    match e {
                        CmEvent::ConnectResponse { conn: k, qp, .. } if k == conn => {
                            c.agent
                                .ready_to_use(Instant::now(), conn, &[])
                                .map_err(|e| e.to_string())?;
                            if c.conns.is_empty() {
                                c.peer_left = false;
                            }
                            c.conns.push(conn);
                            c.pump(sock);
                            return Ok(CmConnected {
                                peer: qp.remote_addr,
                                peer_qpn: qp.remote_qpn & 0xff_ffff,
                                sq_psn: Psn::new(qp.sq_psn),
                                mtu: qp.path_mtu.bytes(),
                            });
                        }
                        CmEvent::Rejected {
                            conn: k, reason, ..
                        } if k == conn => {
                            why = format!("REJ, reason {reason}");
                            retry = true;
                        }
                        CmEvent::Unreachable { conn: k, .. } if k == conn => {
                            why = "the REQ went unanswered after every retry".into();
                            retry = true;
                        }
                        _ => {}
                    }
                }
            }
            std::thread::sleep(
                deadline
                    .saturating_duration_since(Instant::now())
                    .min(Duration::from_millis(20)),
            );
        }
    }

    /// Receives for up to `wait`, giving the MADs from `from` to the agent
    /// (anything else is an earlier connection's: dropped, counted in
    /// `stray`).
    fn recv_mads(&mut self, sock: &mut Socket, stray: &mut u64, from: IpAddr, wait: Duration) {
        let mut got = Vec::new();
        let _ = sock.recv_into(Some(wait), &mut got);
        for d in got {
            if d.meta.src == from && d.data.len() >= 8 && bth_qpn(&d.data) == GSI_QPN {
                self.received(sock, from, &d.data);
            } else {
                *stray += 1;
            }
        }
        self.pump(sock);
    }

    /// Ends the current rdma_cm connections as `rdma_disconnect` does: a
    /// DREQ each, and up to `wait` for the DREPs from `peer` (a peer that
    /// is gone or slow is no error: the agent resends a DREQ while we pump
    /// it and gives up after its retries). A connection the peer ended
    /// first was answered already (the DREQ in DREQ_RCVD or timewait is a
    /// no-op). Datagrams that are no MAD of the peer's count in `stray`.
    pub(crate) fn close(
        &mut self,
        sock: &mut Socket,
        stray: &mut u64,
        peer: Option<IpAddr>,
        wait: Duration,
    ) {
        let conns = std::mem::take(&mut self.conns);
        if conns.is_empty() {
            return;
        }
        let now = Instant::now();
        for &conn in &conns {
            let _ = self.agent.disconnect(now, conn, &[]);
        }
        self.pump(sock);
        let Some(peer) = peer else { return };
        let end = now + wait;
        let mut left = conns;
        loop {
            for e in &self.events {
                if let CmEvent::Disconnected { conn, .. } = e {
                    left.retain(|k| k != conn);
                }
            }
            let gone = left.is_empty();
            let now = Instant::now();
            if gone || now >= end {
                return;
            }
            self.recv_mads(
                sock,
                stray,
                peer,
                (end - now).min(Duration::from_millis(10)),
            );
        }
    }
}
