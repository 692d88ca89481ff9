//! The CM protocol (`rxe_core::cm::CmAgent`) under arbitrary MAD sequences,
//! commands and timeouts.
//!
//! Two agents, A (10.0.0.1) and B (10.0.0.2, listening on rdma_cm's TCP
//! port 7174 and UDP port 7174), and a third address C that only injects.
//! What the agents send goes into a wire queue; the input is a list of
//! operations, each a selector byte and its arguments:
//!
//! * deliver, drop or duplicate a MAD of the wire queue (index from the
//!   input), or deliver it mutated (one byte changed), or from C;
//! * 256 raw bytes (cut or zero-filled) into either agent, from the peer
//!   or from C;
//! * advance the clock (by up to about an hour, on an exponential scale)
//!   and run both agents' timers;
//! * a command on either agent: connect, accept / reject / MRA the oldest
//!   request, RTU, notify_established, disconnect, destroy, SIDR request and
//!   reply, listen / unlisten; arguments (QPNs, PSNs, timeouts, private
//!   data lengths) from the input, valid or not.
//!
//! The applications react as rdma_cm's do unless told otherwise (accept a
//! request, RTU a response, DREP a DREQ), so the fuzzer reaches every state
//! quickly. Oracles: no panic; each connection reports `Established` and
//! `Disconnected` at most once and nothing after `TimewaitExit` (or its
//! removal); established pairs have crossed PSNs and each other's QPNs
//! (unless a forged MAD from a peer's address was believed); the transmit
//! queue and the connection table stay within their bounds.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rxe_core::cm::*;
use rxe_core::mad::cm::{RejReason, SidrStatus};
use rxe_core::mad::{PortSpace, MAD_LEN};
use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

const ADDRS: [IpAddr; 3] = [
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, 9)),
];
const SID: u64 = PortSpace::TCP.service_id(7174);
const USID: u64 = PortSpace::UDP.service_id(7174);
const MAX_CONNS: usize = 64;
const MAX_MADS: usize = 256;

struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn u8(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_be_bytes([
            self.u8()?,
            self.u8()?,
            self.u8()?,
            self.u8()?,
        ]))
    }
    fn bytes(&mut self, n: usize) -> [u8; MAD_LEN] {
        let mut m = [0u8; MAD_LEN];
        let k = n.min(self.0.len()).min(MAD_LEN);
        m[..k].copy_from_slice(&self.0[..k]);
        self.0 = &self.0[k..];
        m
    }
}

#[derive(Default)]
struct Seen {
    established: HashSet<ConnId>,
    disconnected: HashSet<ConnId>,
    gone: HashSet<ConnId>,
    requests: Vec<ConnId>,
    responses: Vec<ConnId>,
    sidr: Vec<SidrId>,
    qp: HashMap<ConnId, QpParams>,
    rtu: bool,
    drep: bool,
}

struct World {
    now: Instant,
    agents: [CmAgent; 2],
    wire: Vec<(usize, IpAddr, [u8; MAD_LEN])>,
    seen: [Seen; 2],
    /// A changed or made-up MAD was delivered as if from the real peer:
    /// the CM has no integrity check beyond the ICRC (which this target
    /// skips), so a forged REP with another starting PSN is believed, and
    /// the crossed-PSN oracle no longer applies. (Found by the smoke run:
    /// a mutated REP made the two ends disagree, as it would on the wire.)
    tampered: bool,
}

impl World {
    fn new() -> Self {
        let mk = |i: usize| {
            let mut c = CmConfig::new(ADDRS[i], 0x100 + i as u64, i as u64);
            c.comm_id_prefix = Some(i as u8 + 1);
            c.listen_backlog = 8;
            c.max_connections = MAX_CONNS;
            c.max_queued_mads = MAX_MADS;
            CmAgent::new(c)
        };
        let mut agents = [mk(0), mk(1)];
        agents[1].listen(SID).unwrap();
        agents[1].listen(USID).unwrap();
        let mut seen: [Seen; 2] = Default::default();
        for s in &mut seen {
            s.rtu = true;
            s.drep = true;
        }
        World {
            now: Instant::now(),
            agents,
            wire: vec![],
            seen,
            tampered: false,
        }
    }

    /// Drains outputs, checks the oracles, lets the applications react.
    fn settle(&mut self) {
        for _ in 0..8 {
            let mut any = false;
            for i in 0..2 {
                let a = &mut self.agents[i];
                assert!(a.connection_count() <= MAX_CONNS);
                while let Some(t) = a.poll_transmit() {
                    any = true;
                    if let Some(to) = ADDRS[..2].iter().position(|&x| x == t.dst) {
                        if self.wire.len() < 1024 {
                            self.wire.push((to, ADDRS[i], t.mad));
                        }
                    }
                }
                while let Some(e) = a.poll_event() {
                    any = true;
                    let s = &mut self.seen[i];
                    match e {
                        CmEvent::ConnectRequest { conn, .. } => {
                            assert!(!s.gone.contains(&conn) || !s.established.contains(&conn));
                            s.requests.push(conn);
                        }
                        CmEvent::ConnectResponse { conn, .. } => {
                            if s.rtu {
                                let _ = a.ready_to_use(self.now, conn, &[]);
                            } else {
                                s.responses.push(conn);
                            }
                        }
                        CmEvent::Established { conn, qp, .. } => {
                            assert!(s.established.insert(conn), "established twice");
                            assert!(!s.gone.contains(&conn));
                            s.qp.insert(conn, qp);
                        }
                        CmEvent::Disconnected { conn, .. } => {
                            assert!(s.disconnected.insert(conn), "disconnected twice");
                            assert!(!s.gone.contains(&conn));
                            if s.drep {
                                let _ = a.disconnect(self.now, conn, &[]);
                            }
                        }
                        CmEvent::TimewaitExit { conn } => {
                            assert!(s.gone.insert(conn), "timewait exit twice");
                            assert_eq!(a.state(conn), None);
                        }
                        CmEvent::Rejected { conn, .. } | CmEvent::Unreachable { conn, .. } => {
                            assert!(!s.gone.contains(&conn));
                        }
                        CmEvent::SidrRequest { id, .. } => s.sidr.push(id),
                        CmEvent::SidrReply { .. } | CmEvent::SidrUnreachable { .. } => {}
                    }
                }
            }
            if !any {
                break;
            }
        }
        // Connections established on both sides have crossed PSNs, unless
        // a forged MAD from a peer's address was believed.
        if self.tampered {
            return;
        }
        for (c, qa) in &self.seen[0].qp {
            let Some(rid) = self.agents[0].remote_comm_id(*c) else {
                continue;
            };
            if let Some(qb) = self.seen[1].qp.get(&ConnId(rid)) {
                if self.agents[1].remote_comm_id(ConnId(rid)) == Some(c.0) {
                    assert_eq!(qa.sq_psn, qb.rq_psn);
                    assert_eq!(qa.rq_psn, qb.sq_psn);
                    assert_eq!(qa.remote_qpn, qb.local_qpn);
                }
            }
        }
    }

    fn deliver(&mut self, to: usize, from: IpAddr, mad: &[u8; MAD_LEN]) {
        self.agents[to].handle_mad(self.now, from, mad);
    }

    fn command(&mut self, i: usize, inp: &mut Input<'_>) -> Option<()> {
        let op = inp.u8()?;
        let now = self.now;
        let peer = ADDRS[1 - i];
        let pick = |v: &Vec<ConnId>, b: u8| v.get(usize::from(b) % v.len().max(1)).copied();
        let a = &mut self.agents[i];
        match op % 14 {
            0 | 1 => {
                let qpn = inp.u32()? & 0x1ff_ffff;
                let mut p = ConnectParams::new(SID, peer, qpn, inp.u32()? & 0x1ff_ffff);
                let t = inp.u8()?;
                p.max_cm_retries = t & 0x1f;
                p.remote_cm_response_timeout = (t >> 3) & 0x1f;
                p.local_cm_response_timeout = inp.u8()? & 0x3f;
                p.private_data = vec![7; usize::from(inp.u8()?) % 100];
                if op & 1 == 1 {
                    p.service_id = u64::from(inp.u8()?);
                }
                let _ = a.connect(now, &p);
            }
            2 => {
                let c = pick(&self.seen[i].requests, inp.u8()?)?;
                let mut p = AcceptParams::new(inp.u32()? & 0x1ff_ffff, inp.u32()? & 0xff_ffff);
                p.private_data = vec![9; usize::from(inp.u8()?)];
                let _ = a.accept(now, c, &p);
            }
            3 => {
                let c = pick(&self.seen[i].requests, inp.u8()?)?;
                let pd = vec![1; usize::from(inp.u8()?)];
                let ari = vec![2; usize::from(inp.u8()? % 80)];
                let _ = a.reject(now, c, RejReason::CONSUMER_DEFINED, &ari, &pd);
            }
            4 => {
                let c = pick(&self.seen[i].requests, inp.u8()?)
                    .or_else(|| pick(&self.seen[i].responses, 0))?;
                let _ = a.mra(now, c, inp.u8()? & 0x3f);
            }
            5 => {
                let c = pick(&self.seen[i].responses, inp.u8()?)?;
                let _ = a.ready_to_use(now, c, &vec![3; usize::from(inp.u8()?)]);
            }
            6 => {
                let c = pick(&self.seen[i].requests, inp.u8()?)?;
                let _ = a.notify_established(now, c);
            }
            7 | 8 => {
                let all: Vec<ConnId> = self.seen[i]
                    .qp
                    .keys()
                    .chain(&self.seen[i].requests)
                    .copied()
                    .collect();
                let c = pick(&all, inp.u8()?)?;
                if op % 14 == 7 {
                    let _ = a.disconnect(now, c, &vec![4; usize::from(inp.u8()?)]);
                } else {
                    let _ = a.destroy(now, c);
                }
            }
            9 => {
                let mut p = SidrParams::new(if inp.u8()? & 1 == 0 { USID } else { 5 }, peer);
                p.max_cm_retries = inp.u8()? & 0x1f;
                p.timeout = inp.u8()? & 0x3f;
                p.private_data = vec![5; usize::from(inp.u8()?)];
                let _ = a.sidr_request(now, &p);
            }
            10 => {
                let id = *self.seen[i]
                    .sidr
                    .get(usize::from(inp.u8()?) % self.seen[i].sidr.len().max(1))?;
                let r = SidrReplyParams {
                    status: SidrStatus(inp.u8()?),
                    qpn: inp.u32()? & 0x1ff_ffff,
                    qkey: 0x0123_4567,
                    private_data: vec![6; usize::from(inp.u8()?)],
                };
                let _ = a.sidr_reply(now, id, &r);
            }
            11 => {
                let _ = a.listen(if inp.u8()? & 1 == 0 { SID } else { USID });
            }
            12 => {
                let _ = a.unlisten(now, if inp.u8()? & 1 == 0 { SID } else { USID });
            }
            _ => {
                // The application's habits.
                let b = inp.u8()?;
                self.seen[i].rtu = b & 1 != 0;
                self.seen[i].drep = b & 2 != 0;
            }
        }
        Some(())
    }

    fn step(&mut self, inp: &mut Input<'_>) -> Option<()> {
        let op = inp.u8()?;
        match op % 8 {
            0..=2 if !self.wire.is_empty() => {
                let k = usize::from(inp.u8()?) % self.wire.len();
                let (to, from, mad) = self.wire.remove(k);
                match op % 8 {
                    0 => self.deliver(to, from, &mad),
                    1 => {} // lost
                    _ => {
                        self.deliver(to, from, &mad);
                        self.wire.push((to, from, mad));
                    }
                }
            }
            3 if !self.wire.is_empty() => {
                let k = usize::from(inp.u8()?) % self.wire.len();
                let (to, from, mut mad) = self.wire[k];
                let at = usize::from(inp.u8()?);
                mad[at] = inp.u8()?;
                let from = if op & 0x80 != 0 { ADDRS[2] } else { from };
                self.tampered |= from != ADDRS[2];
                self.deliver(to, from, &mad);
            }
            4 => {
                let to = usize::from(op >> 7);
                let from = ADDRS[usize::from(inp.u8()?) % 3];
                let n = usize::from(inp.u8()?) + 1;
                let mad = inp.bytes(n);
                self.tampered |= from != ADDRS[2];
                self.deliver(to, from, &mad);
            }
            5 => {
                let mant = u64::from(inp.u8()?);
                let exp = u32::from(inp.u8()? % 34);
                self.now += Duration::from_nanos(mant << exp);
                for a in &mut self.agents {
                    if a.poll_timeout().is_some_and(|t| t <= self.now) {
                        a.handle_timeout(self.now);
                    }
                }
            }
            6 | 7 => {
                let i = usize::from(op >> 7);
                self.command(i, inp)?;
            }
            _ => {}
        }
        Some(())
    }
}

fuzz_target!(|data: &[u8]| {
    let mut w = World::new();
    let mut inp = Input(data);
    while !inp.0.is_empty() {
        if w.step(&mut inp).is_none() {
            break;
        }
        w.settle();
    }
    // Let every timer run out: everything ends.
    for _ in 0..64 {
        let next = w.agents.iter().filter_map(|a| a.poll_timeout()).min();
        let Some(t) = next else { break };
        w.now = w.now.max(t);
        for a in &mut w.agents {
            a.handle_timeout(w.now);
        }
        w.wire.clear();
        w.settle();
    }
});
