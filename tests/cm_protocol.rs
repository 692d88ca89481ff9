//! The CM protocol (`rxe_core::cm::CmAgent`) between agents wired by a
//! small simulated network of our own (MADs delivered after a delay, with
//! programmable loss, duplication and delay per MAD; time advanced by
//! hand), and against the kernel's MADs in the rdma_cm captures
//! (tests/data/pcaps: rping, ucmatose, udaddy).

use proptest::prelude::*;
use rxe_core::cm::*;
use rxe_core::mad::cm::{
    timeout, AttributeId, CmMessage, Rej, RejReason, RejectedMessage, SidrStatus,
};
use rxe_core::mad::{CmMad, CmaHeader, GsiMad, PortSpace, GSI_QPN, MAD_LEN};
use rxe_core::types::Mtu;
use rxe_core::wire::{PacketRepr, RoceFrame};
use rxe_net::capture::CaptureReader;
use rxe_tests::pcap_dir;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

const SID: u64 = 0x0000_0000_0106_1c06; // rdma_cm TCP port 7174
const DELAY: Duration = Duration::from_micros(50);

fn ip(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, last))
}

/// What happens to one MAD on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Deliver,
    Drop,
    /// Delivered twice.
    Duplicate,
    /// Delivered after this much more delay (reordering).
    Late(Duration),
}

/// One MAD on the wire, as the fault rule sees it.
#[derive(Debug, Clone)]
struct Wire {
    from: usize,
    #[allow(dead_code)]
    to: usize,
    attr: AttributeId,
    /// How many MADs of this kind from this sender went before.
    nth: usize,
}

type Rule = Box<dyn FnMut(&Wire) -> Fate>;

/// How the applications answer events.
#[derive(Debug, Clone, Copy)]
struct Policy {
    accept: bool,
    /// Accept only once this much time has passed since the request.
    accept_after: Duration,
    reject_with: Option<&'static [u8]>,
    rtu: bool,
    /// Answer a DREQ with the DREP at once.
    drep: bool,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            accept: true,
            accept_after: Duration::ZERO,
            reject_with: None,
            rtu: true,
            drep: true,
        }
    }
}

struct Net {
    t0: Instant,
    now: Instant,
    agents: Vec<CmAgent>,
    policy: Vec<Policy>,
    events: Vec<Vec<(Duration, CmEvent)>>,
    flight: Vec<(Instant, usize, IpAddr, [u8; MAD_LEN])>,
    rule: Rule,
    seen: Vec<(usize, AttributeId)>,
    /// Every MAD put on the wire: (time, from, to, message, fate).
    log: Vec<(Duration, usize, usize, String, Fate)>,
    /// Connection requests waiting for a slow application.
    slow: Vec<(Instant, usize, ConnId)>,
}

fn cfg(last: u8, seed: u64) -> CmConfig {
    let mut c = CmConfig::new(ip(last), 0x5054_00ff_fe00_0000 | u64::from(last), seed);
    c.comm_id_prefix = Some(last);
    c
}

impl Net {
    fn new(n: u8) -> Self {
        Self::with(n, |_| {})
    }

    fn with(n: u8, tweak: impl Fn(&mut CmConfig)) -> Self {
        let t0 = Instant::now();
        let agents = (1..=n)
            .map(|i| {
                let mut c = cfg(i, u64::from(i) * 7919);
                tweak(&mut c);
                CmAgent::new(c)
            })
            .collect();
        Net {
            t0,
            now: t0,
            agents,
            policy: vec![Policy::default(); n as usize],
            events: vec![vec![]; n as usize],
            flight: vec![],
            rule: Box::new(|_| Fate::Deliver),
            seen: vec![],
            log: vec![],
            slow: vec![],
        }
    }

    fn addr(&self, i: usize) -> IpAddr {
        self.agents[i].config().local_addr
    }

    fn index_of(&self, a: IpAddr) -> Option<usize> {
        (0..self.agents.len()).find(|&i| self.addr(i) == a)
    }

    /// Moves what the agents send onto the wire, and lets the
    /// applications answer their events.
    fn collect(&mut self) {
        loop {
            let mut any = false;
            for i in 0..self.agents.len() {
                while let Some(t) = self.agents[i].poll_transmit() {
                    any = true;
                    let Some(to) = self.index_of(t.dst) else {
                        continue;
                    };
                    let m = CmMad::parse(&t.mad).expect("our MADs parse");
                    let attr = m.message.attribute_id();
                    let nth = self.seen.iter().filter(|&&s| s == (i, attr)).count();
                    self.seen.push((i, attr));
                    let fate = (self.rule)(&Wire {
                        from: i,
                        to,
                        attr,
                        nth,
                    });
                    self.log
                        .push((self.now - self.t0, i, to, m.describe(), fate));
                    let src = self.addr(i);
                    let at = self.now + DELAY;
                    match fate {
                        Fate::Deliver => self.flight.push((at, to, src, t.mad)),
                        Fate::Drop => {}
                        Fate::Duplicate => {
                            self.flight.push((at, to, src, t.mad));
                            self.flight.push((at + DELAY, to, src, t.mad));
                        }
                        Fate::Late(d) => self.flight.push((at + d, to, src, t.mad)),
                    }
                }
                while let Some(e) = self.agents[i].poll_event() {
                    any = true;
                    self.react(i, &e);
                    self.events[i].push((self.now - self.t0, e));
                }
            }
            // Slow applications whose time has come.
            let now = self.now;
            let due: Vec<_> = self.slow.iter().filter(|s| s.0 <= now).copied().collect();
            self.slow.retain(|s| s.0 > now);
            for (_, i, conn) in due {
                any = true;
                self.accept(i, conn);
            }
            if !any {
                return;
            }
        }
    }

    fn accept(&mut self, i: usize, conn: ConnId) {
        let p = AcceptParams::new(0x100 + i as u32, 0x200000 + i as u32);
        let _ = self.agents[i].accept(self.now, conn, &p);
    }

    fn react(&mut self, i: usize, e: &CmEvent) {
        let p = self.policy[i];
        let now = self.now;
        let a = &mut self.agents[i];
        match e {
            CmEvent::ConnectRequest { conn, .. } => {
                if let Some(pd) = p.reject_with {
                    a.reject(now, *conn, RejReason::CONSUMER_DEFINED, &[], pd)
                        .unwrap();
                } else if p.accept {
                    if p.accept_after.is_zero() {
                        self.accept(i, *conn);
                    } else {
                        self.slow.push((now + p.accept_after, i, *conn));
                    }
                }
            }
            CmEvent::ConnectResponse { conn, .. } if p.rtu => {
                a.ready_to_use(now, *conn, &[]).unwrap();
            }
            CmEvent::Disconnected { conn, .. } if p.drep => {
                a.disconnect(now, *conn, &[]).unwrap();
            }
            _ => {}
        }
    }

    /// Runs until nothing is in flight and no timer is due before `limit`
    /// from now.
    fn run_for(&mut self, limit: Duration) {
        let end = self.now + limit;
        loop {
            self.collect();
            let next_flight = self.flight.iter().map(|f| f.0).min();
            let next_timer = self.agents.iter().filter_map(|a| a.poll_timeout()).min();
            let next_slow = self.slow.iter().map(|s| s.0).min();
            let Some(next) = [next_flight, next_timer, next_slow]
                .into_iter()
                .flatten()
                .min()
            else {
                return;
            };
            if next > end {
                self.now = end;
                return;
            }
            self.now = self.now.max(next);
            let now = self.now;
            let mut due: Vec<_> = self.flight.iter().filter(|f| f.0 <= now).copied().collect();
            self.flight.retain(|f| f.0 > now);
            due.sort_by_key(|f| f.0);
            for (_, to, src, mad) in due {
                self.agents[to].handle_mad(now, src, &mad);
            }
            for a in &mut self.agents {
                if a.poll_timeout().is_some_and(|t| t <= now) {
                    a.handle_timeout(now);
                }
            }
        }
    }

    /// Runs for up to an hour of virtual time: until everything is quiet.
    fn settle(&mut self) {
        self.run_for(Duration::from_secs(3600));
    }

    fn count(&self, i: usize, f: impl Fn(&CmEvent) -> bool) -> usize {
        self.events[i].iter().filter(|(_, e)| f(e)).count()
    }

    fn established(&self, i: usize) -> Vec<(ConnId, QpParams)> {
        self.events[i]
            .iter()
            .filter_map(|(_, e)| match e {
                CmEvent::Established { conn, qp, .. } => Some((*conn, *qp)),
                _ => None,
            })
            .collect()
    }

    fn connect(&mut self, from: usize, to: usize) -> ConnId {
        let p = ConnectParams::new(
            SID,
            self.addr(to),
            0x300 + from as u32,
            0x400000 + from as u32,
        );
        self.connect_with(from, &p)
    }

    fn connect_with(&mut self, from: usize, p: &ConnectParams) -> ConnId {
        self.agents[from].connect(self.now, p).unwrap()
    }

    fn sent_count(&self, from: usize, attr: AttributeId) -> usize {
        self.seen.iter().filter(|&&s| s == (from, attr)).count()
    }

    fn dump(&self) -> String {
        let mut s = String::new();
        for (t, f, to, m, fate) in &self.log {
            s += &format!("{t:?} {f}->{to} {m} {fate:?}\n");
        }
        for (i, ev) in self.events.iter().enumerate() {
            for (t, e) in ev {
                s += &format!("{t:?} agent {i}: {e:?}\n");
            }
        }
        s
    }
}

/// Both ends established once, with crossed PSNs and each other's QPNs.
fn assert_connected(n: &Net, a: usize, b: usize) -> (ConnId, ConnId) {
    let ea = n.established(a);
    let eb = n.established(b);
    assert_eq!(ea.len(), 1, "{}", n.dump());
    assert_eq!(eb.len(), 1, "{}", n.dump());
    let ((ca, qa), (cb, qb)) = (ea[0], eb[0]);
    assert_eq!(qa.sq_psn, qb.rq_psn, "A sends from what B expects");
    assert_eq!(qb.sq_psn, qa.rq_psn, "B sends from what A expects");
    assert_eq!(qa.remote_qpn, qb.local_qpn);
    assert_eq!(qb.remote_qpn, qa.local_qpn);
    assert_eq!(qa.remote_addr, n.addr(b));
    assert_eq!(qb.remote_addr, n.addr(a));
    (ca, cb)
}

#[test]
fn connect_accept_rtu_establishes_both_with_crossed_psns() {
    let mut n = Net::new(2);
    n.agents[1].listen(SID).unwrap();
    let mut p = ConnectParams::new(SID, n.addr(1), 0x31, 0xabcdef);
    p.path_mtu = Mtu::Mtu4096;
    p.responder_resources = 4;
    p.initiator_depth = 2;
    n.connect_with(0, &p);
    n.settle();
    let (ca, cb) = assert_connected(&n, 0, 1);
    let qa = n.agents[0].qp_params(ca).unwrap();
    let qb = n.agents[1].qp_params(cb).unwrap();
    // The passive side sends from the REQ's PSN, the active from the REP's.
    assert_eq!(qb.sq_psn, 0xabcdef);
    assert_eq!(qa.sq_psn, 0x200001);
    assert_eq!(qa.path_mtu, Mtu::Mtu4096);
    assert_eq!((qa.local_qpn, qa.remote_qpn), (0x31, 0x101));
    // The passive side accepted one READ each way (AcceptParams::new).
    assert_eq!((qb.max_dest_rd_atomic, qb.max_rd_atomic), (1, 1));
    assert_eq!(n.sent_count(0, AttributeId::REQ), 1);
    assert_eq!(n.sent_count(1, AttributeId::REP), 1);
    assert_eq!(n.sent_count(0, AttributeId::RTU), 1);
    assert_eq!(n.agents[0].counters().retries, 0);
    assert_eq!(n.agents[0].remote_comm_id(ca), Some(cb.0));
    assert_eq!(cb.0 >> 24, 2, "IDs carry the agent's prefix");
}

/// Loses the first `k` MADs of one kind; the connection is made once.
fn lose_first(attr: AttributeId, k: usize) -> Net {
    let mut n = Net::new(2);
    n.agents[1].listen(SID).unwrap();
    n.rule = Box::new(move |w| {
        if w.attr == attr && w.nth < k {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    n.connect(0, 1);
    n.settle();
    assert_connected(&n, 0, 1);
    n
}

#[test]
fn a_lost_req_is_resent_after_its_timeout() {
    let n = lose_first(AttributeId::REQ, 2);
    assert_eq!(n.sent_count(0, AttributeId::REQ), 3);
    assert_eq!(n.sent_count(1, AttributeId::REP), 1);
    // 2 × packet lifetime (16) + remote CM response timeout (20), twice.
    let every = timeout(16) * 2 + timeout(20);
    let first_rep = n.log.iter().find(|l| l.3.starts_with("CM REP")).unwrap().0;
    assert!(first_rep >= every * 2 && first_rep < every * 2 + DELAY * 3);
    assert_eq!(n.agents[0].counters().retries, 2);
}

#[test]
fn a_lost_rep_is_resent_and_the_active_side_answers_once() {
    let n = lose_first(AttributeId::REP, 1);
    assert_eq!(n.sent_count(1, AttributeId::REP), 2);
    assert_eq!(
        n.count(0, |e| matches!(e, CmEvent::ConnectResponse { .. })),
        1
    );
    // The REQ was resent too (its timeout is shorter than ... no: the
    // REP is resent after the REQ's local CM response timeout, 2^20 ×
    // 4.096 µs, before the active side's REQ timer of 2 × 2^16 + 2^20).
    assert_eq!(n.sent_count(0, AttributeId::REQ), 1, "{}", n.dump());
}

#[test]
fn a_lost_rtu_is_recovered_by_the_rep_retry() {
    let n = lose_first(AttributeId::RTU, 1);
    // The passive side resent its REP, the active side answered it with
    // the RTU again; each side established once.
    assert_eq!(n.sent_count(1, AttributeId::REP), 2);
    assert_eq!(n.sent_count(0, AttributeId::RTU), 2);
    assert_eq!(n.agents[0].counters().duplicates, 1);
}

#[test]
fn all_reqs_lost_times_out_after_every_retry() {
    let mut n = Net::new(2);
    n.agents[1].listen(SID).unwrap();
    n.rule = Box::new(|w| {
        if w.from == 0 {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    let mut p = ConnectParams::new(SID, n.addr(1), 0x31, 0);
    p.max_cm_retries = 4;
    p.remote_cm_response_timeout = 14;
    let c = n.connect_with(0, &p);
    n.settle();
    let every = timeout(16) * 2 + timeout(14);
    let ev = &n.events[0];
    assert_eq!(ev.len(), 1, "{}", n.dump());
    assert_eq!(ev[0].0, every * 5, "(max_cm_retries + 1) × timeout");
    assert_eq!(
        ev[0].1,
        CmEvent::Unreachable {
            conn: c,
            unanswered: AttributeId::REQ
        }
    );
    assert_eq!(n.sent_count(0, AttributeId::REQ), 5);
    assert!(n.events[1].is_empty());
}

#[test]
fn all_reps_lost_the_passive_side_gives_up() {
    let mut n = Net::new(2);
    n.agents[1].listen(SID).unwrap();
    n.rule = Box::new(|w| {
        if w.attr == AttributeId::REP {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    let mut p = ConnectParams::new(SID, n.addr(1), 0x31, 0);
    p.max_cm_retries = 2;
    n.connect_with(0, &p);
    n.settle();
    assert_eq!(
        n.count(1, |e| matches!(e, CmEvent::Unreachable { unanswered, .. } if *unanswered == AttributeId::REP)),
        1
    );
    assert_eq!(
        n.count(0, |e| matches!(e, CmEvent::Unreachable { unanswered, .. } if *unanswered == AttributeId::REQ)),
        1,
        "{}",
        n.dump()
    );
    assert_eq!(n.agents[0].connection_count(), 0);
    assert_eq!(n.agents[1].connection_count(), 0);
}

#[test]
fn req_to_an_unlistened_service_is_rejected_with_reason_8() {
    let mut n = Net::new(2);
    let c = n.connect(0, 1);
    n.settle();
    let rej: Vec<_> = n.log.iter().filter(|l| l.3.starts_with("CM REJ")).collect();
    assert_eq!(rej.len(), 1);
    assert!(
        rej[0].3.contains("reason=8 (invalid service ID)"),
        "{}",
        rej[0].3
    );
    let [(
        _,
        CmEvent::Rejected {
            conn,
            reason,
            message,
            ..
        },
    )] = &n.events[0][..]
    else {
        panic!("{}", n.dump())
    };
    assert_eq!(
        (*conn, *reason, *message),
        (c, RejReason::INVALID_SERVICE_ID, RejectedMessage::Req)
    );
    assert!(n.events[1].is_empty());
    assert_eq!(n.agents[0].connection_count(), 0);
    assert_eq!(n.agents[0].poll_timeout(), None);
}

/// perftest's `-R` latency tests end their listener after the first
/// connection and listen again for the second; a REQ that comes in between
/// is held (CmConfig::relisten_grace) and goes to the new listener, instead
/// of a REJ 8 that ends the client.
#[test]
fn a_req_between_two_listeners_goes_to_the_second() {
    let mut n = Net::new(2);
    n.agents[1].listen(SID).unwrap();
    let t = n.now;
    n.agents[1].unlisten(t, SID).unwrap();
    n.connect(0, 1);
    n.run_for(Duration::from_millis(100));
    assert_eq!(
        n.count(1, |e| matches!(e, CmEvent::ConnectRequest { .. })),
        0
    );
    assert!(
        !n.log.iter().any(|l| l.3.starts_with("CM REJ")),
        "held, not rejected: {}",
        n.dump()
    );
    n.agents[1].listen(SID).unwrap();
    n.settle();
    assert_connected(&n, 0, 1);
    assert!(
        !n.log.iter().any(|l| l.3.starts_with("CM REJ")),
        "{}",
        n.dump()
    );
}

/// A REQ held for a service that does not listen again gets its REJ 8 at
/// the end of the grace, not before; after the grace, at once.
#[test]
fn a_req_for_a_service_that_stays_closed_is_rejected_after_the_grace() {
    let mut n = Net::new(2);
    let grace = n.agents[1].config().relisten_grace;
    assert!(grace > Duration::ZERO);
    n.agents[1].listen(SID).unwrap();
    let t0 = n.now;
    n.agents[1].unlisten(t0, SID).unwrap();
    n.connect(0, 1);
    n.settle();
    let rej: Vec<_> = n.log.iter().filter(|l| l.3.starts_with("CM REJ")).collect();
    assert_eq!(rej.len(), 1, "{}", n.dump());
    assert!(
        rej[0].3.contains("reason=8 (invalid service ID)"),
        "{}",
        rej[0].3
    );
    let at = rej[0].0 - (t0 - n.t0);
    assert!(
        at >= grace,
        "rejected {at:?} after unlisten, grace {grace:?}"
    );
    assert!(at < grace + Duration::from_millis(50), "{at:?}");
    assert_eq!(
        n.count(0, |e| matches!(e, CmEvent::Rejected { reason, .. } if *reason == RejReason::INVALID_SERVICE_ID)),
        1
    );
    // Long after: rejected at once, as a service that never listened.
    let sent = n.now;
    n.connect(0, 1);
    n.settle();
    let rej: Vec<_> = n.log.iter().filter(|l| l.3.starts_with("CM REJ")).collect();
    assert_eq!(rej.len(), 2);
    assert!(rej[1].0 - (sent - n.t0) < Duration::from_millis(50));
}

/// With the grace off, a REQ for a closed service is rejected at once.
#[test]
fn no_grace_rejects_at_once() {
    let mut n = Net::with(2, |c| c.relisten_grace = Duration::ZERO);
    n.agents[1].listen(SID).unwrap();
    let t0 = n.now;
    n.agents[1].unlisten(t0, SID).unwrap();
    n.connect(0, 1);
    n.settle();
    let rej: Vec<_> = n.log.iter().filter(|l| l.3.starts_with("CM REJ")).collect();
    assert_eq!(rej.len(), 1);
    assert!(rej[0].0 - (t0 - n.t0) < Duration::from_millis(50));
}

#[test]
fn reject_carries_private_data() {
    let mut n = Net::new(2);
    n.agents[1].listen(SID).unwrap();
    n.policy[1].reject_with = Some(b"go away");
    n.connect(0, 1);
    n.settle();
    let [(
        _,
        CmEvent::Rejected {
            reason,
            private_data,
            ..
        },
    )] = &n.events[0][..]
    else {
        panic!("{}", n.dump())
    };
    assert_eq!(*reason, RejReason::CONSUMER_DEFINED);
    assert_eq!(private_data.len(), 148);
    assert_eq!(&private_data[..7], b"go away");
    assert_eq!(n.agents[1].connection_count(), 0);
    // Too much private data is refused, naming the argument.
    let mut m = Net::new(2);
    m.agents[1].listen(SID).unwrap();
    m.policy[1].accept = false;
    m.connect(0, 1);
    m.settle();
    let [(_, CmEvent::ConnectRequest { conn, .. })] = m.events[1][..] else {
        panic!()
    };
    assert_eq!(
        m.agents[1].reject(m.now, conn, RejReason::CONSUMER_DEFINED, &[], &[0; 149]),
        Err(CmError::PrivateDataTooLong {
            arg: "private_data",
            len: 149,
            max: 148
        })
    );
}

fn connected_pair() -> (Net, ConnId, ConnId) {
    let mut n = Net::new(2);
    n.agents[1].listen(SID).unwrap();
    n.connect(0, 1);
    n.settle();
    let (a, b) = assert_connected(&n, 0, 1);
    (n, a, b)
}

fn disconnects(n: &Net, i: usize) -> Vec<(bool, Vec<u8>)> {
    n.events[i]
        .iter()
        .filter_map(|(_, e)| match e {
            CmEvent::Disconnected {
                timed_out,
                private_data,
                ..
            } => Some((*timed_out, private_data.clone())),
            _ => None,
        })
        .collect()
}

fn timewait_exits(n: &Net, i: usize) -> usize {
    n.count(i, |e| matches!(e, CmEvent::TimewaitExit { .. }))
}

#[test]
fn disconnect_from_either_side_then_timewait() {
    for who in [0usize, 1] {
        let (mut n, a, b) = connected_pair();
        let conn = if who == 0 { a } else { b };
        n.agents[who].disconnect(n.now, conn, b"bye").unwrap();
        let start = n.now;
        n.run_for(Duration::from_millis(1));
        // Both in timewait now: the IDs are not free yet.
        assert_eq!(n.agents[0].state(a), Some(CmState::Timewait));
        assert_eq!(n.agents[1].state(b), Some(CmState::Timewait));
        n.settle();
        let other = 1 - who;
        let d_other = disconnects(&n, other);
        assert_eq!(d_other.len(), 1);
        assert!(!d_other[0].0);
        assert_eq!(&d_other[0].1[..3], b"bye", "the DREQ's private data");
        assert_eq!(disconnects(&n, who), vec![(false, vec![0; 224])]);
        assert_eq!(timewait_exits(&n, 0), 1);
        assert_eq!(timewait_exits(&n, 1), 1);
        // The timewait: 4.096 µs × 2^(packet lifetime 16 + 1).
        let exit = n.events[who]
            .iter()
            .find(|(_, e)| matches!(e, CmEvent::TimewaitExit { .. }))
            .unwrap()
            .0;
        assert!(exit >= (start - n.t0) + timeout(17));
        assert_eq!(n.agents[0].connection_count(), 0);
        assert_eq!(n.agents[1].connection_count(), 0);
        assert_eq!(n.sent_count(who, AttributeId::DREQ), 1);
        assert_eq!(n.sent_count(other, AttributeId::DREP), 1);
    }
}

#[test]
fn simultaneous_dreqs() {
    let (mut n, a, b) = connected_pair();
    n.agents[0].disconnect(n.now, a, &[]).unwrap();
    n.agents[1].disconnect(n.now, b, &[]).unwrap();
    n.settle();
    for i in 0..2 {
        assert_eq!(disconnects(&n, i).len(), 1, "{}", n.dump());
        assert_eq!(timewait_exits(&n, i), 1);
        assert_eq!(n.sent_count(i, AttributeId::DREQ), 1);
        assert_eq!(n.sent_count(i, AttributeId::DREP), 1);
        assert_eq!(n.agents[i].connection_count(), 0);
    }
}

#[test]
fn unanswered_dreq_times_out_into_timewait() {
    let (mut n, a, _) = connected_pair();
    n.rule = Box::new(|w| {
        if w.attr == AttributeId::DREP {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    n.agents[0].disconnect(n.now, a, &[]).unwrap();
    n.settle();
    assert_eq!(disconnects(&n, 0), vec![(true, vec![])]);
    // Every DREQ resent was answered again from timewait, then (once the
    // timewait ended) as an unknown connection: always with a DREP.
    assert_eq!(n.sent_count(0, AttributeId::DREQ), 16);
    assert_eq!(n.sent_count(1, AttributeId::DREP), 16);
    assert_eq!(timewait_exits(&n, 0), 1);
}

#[test]
fn every_mad_duplicated_connects_and_disconnects_once() {
    let mut n = Net::new(2);
    n.agents[1].listen(SID).unwrap();
    n.rule = Box::new(|_| Fate::Duplicate);
    n.connect(0, 1);
    n.settle();
    let (a, _) = assert_connected(&n, 0, 1);
    n.agents[0].disconnect(n.now, a, &[]).unwrap();
    n.settle();
    for i in 0..2 {
        assert_eq!(disconnects(&n, i).len(), 1);
        assert_eq!(timewait_exits(&n, i), 1);
        assert!(n.agents[i].counters().duplicates > 0);
    }
    assert_eq!(
        n.count(1, |e| matches!(e, CmEvent::ConnectRequest { .. })),
        1
    );
    assert_eq!(
        n.count(0, |e| matches!(e, CmEvent::ConnectResponse { .. })),
        1
    );
}

/// Hands one agent a MAD directly, returns what it sends back.
fn poke(a: &mut CmAgent, now: Instant, from: IpAddr, mad: &[u8; MAD_LEN]) -> Vec<CmMad> {
    a.handle_mad(now, from, mad);
    std::iter::from_fn(|| a.poll_transmit())
        .map(|t| CmMad::parse(&t.mad).unwrap())
        .collect()
}

#[test]
fn duplicates_are_answered_as_the_state_says() {
    let now = Instant::now();
    let (ia, ib) = (ip(1), ip(2));
    let mut a = CmAgent::new(cfg(1, 1));
    let mut b = CmAgent::new(cfg(2, 2));
    b.listen(SID).unwrap();
    let ca = a
        .connect(now, &ConnectParams::new(SID, ib, 0x31, 0))
        .unwrap();
    let req = out(&mut a)[0].mad;
    assert!(poke(&mut b, now, ia, &req).is_empty());
    let Some(CmEvent::ConnectRequest { conn: cb, .. }) = b.poll_event() else {
        panic!()
    };
    // The application has not answered: a duplicate REQ gets rdma_cm's
    // delayed MRA (service timeout 24), a third one the same MRA again.
    let mra = poke(&mut b, now, ia, &req);
    let [CmMad {
        message: CmMessage::Mra(m),
        ..
    }] = &mra[..]
    else {
        panic!("{mra:?}")
    };
    assert_eq!(m.service_timeout, 24);
    assert_eq!(m.message_mraed, rxe_core::mad::cm::MraedMessage::Req);
    assert_eq!(poke(&mut b, now, ia, &req), mra);
    assert!(b.poll_event().is_none(), "one ConnectRequest");
    assert_eq!(b.state(cb), Some(CmState::MraReqSent));
    a.handle_mad(now, ib, &mra[0].to_bytes());
    assert_eq!(a.state(ca), Some(CmState::MraReqRcvd));
    // REP sent: a duplicate REQ gets the REP again.
    b.accept(now, cb, &AcceptParams::new(0x41, 0)).unwrap();
    let rep = out(&mut b)[0].mad;
    assert_eq!(poke(&mut b, now, ia, &req)[0].to_bytes(), rep);
    // Established: a duplicate REP gets the RTU again.
    a.handle_mad(now, ib, &rep);
    assert!(matches!(
        a.poll_event(),
        Some(CmEvent::ConnectResponse { .. })
    ));
    a.ready_to_use(now, ca, &[]).unwrap();
    assert!(matches!(a.poll_event(), Some(CmEvent::Established { .. })));
    let rtu = out(&mut a)[0].mad;
    assert_eq!(poke(&mut a, now, ib, &rep)[0].to_bytes(), rtu);
    assert!(a.poll_event().is_none(), "established once");
    // A duplicate RTU is dropped.
    assert!(poke(&mut b, now, ia, &rtu).is_empty());
    assert!(matches!(b.poll_event(), Some(CmEvent::Established { .. })));
    assert!(poke(&mut b, now, ia, &rtu).is_empty());
    assert!(b.poll_event().is_none());
    assert_eq!(b.counters().dropped(CmDropReason::Duplicate), 1);
    // B disconnects. A duplicate DREQ before A's DREP is dropped; in
    // timewait it gets the DREP again.
    b.disconnect(now, cb, &[]).unwrap();
    let dreq = out(&mut b)[0].mad;
    assert!(poke(&mut a, now, ib, &dreq).is_empty());
    assert!(matches!(a.poll_event(), Some(CmEvent::Disconnected { .. })));
    assert!(poke(&mut a, now, ib, &dreq).is_empty());
    a.disconnect(now, ca, &[]).unwrap();
    let drep = out(&mut a)[0].mad;
    assert_eq!(poke(&mut a, now, ib, &dreq)[0].to_bytes(), drep);
    assert!(a.poll_event().is_none(), "disconnected once");
    // B in timewait: the old REQ once more is a stale connection.
    assert!(poke(&mut b, now, ia, &drep).is_empty());
    let rej = poke(&mut b, now, ia, &req);
    let [CmMad {
        message: CmMessage::Rej(r),
        ..
    }] = &rej[..]
    else {
        panic!("{rej:?}")
    };
    assert_eq!(r.reason, RejReason::STALE_CONN);
    assert_eq!((r.local_comm_id, r.remote_comm_id), (cb.0, ca.0));
    // A late RTU or REP for a connection in timewait changes nothing.
    assert!(poke(&mut b, now, ia, &rtu).is_empty());
    assert_eq!(b.state(cb), Some(CmState::Timewait));
    assert_eq!(a.counters().duplicates, 3);
}

#[test]
fn mra_extends_the_req_timeout() {
    // The passive application takes 10 s to accept. The active side's REQ
    // times out after (2 × 2^16 + 2^18) × 4.096 µs ≈ 1.6 s × 4 tries; the
    // passive side answers the first resent REQ with an MRA of 2^22 ×
    // 4.096 µs ≈ 17 s, which holds the active side until the REP.
    let mut n = Net::with(2, |c| c.mra_service_timeout = Some(22));
    n.agents[1].listen(SID).unwrap();
    n.policy[1].accept_after = Duration::from_secs(10);
    let mut p = ConnectParams::new(SID, n.addr(1), 0x31, 0);
    p.max_cm_retries = 3;
    p.remote_cm_response_timeout = 18;
    n.connect_with(0, &p);
    n.settle();
    assert_connected(&n, 0, 1);
    assert_eq!(n.sent_count(1, AttributeId::MRA), 1, "{}", n.dump());
    assert_eq!(n.sent_count(0, AttributeId::REQ), 2);

    // Without the MRA the same connection fails.
    let mut n = Net::with(2, |c| c.mra_service_timeout = None);
    n.agents[1].listen(SID).unwrap();
    n.policy[1].accept_after = Duration::from_secs(10);
    n.connect_with(0, &p);
    n.settle();
    assert_eq!(
        n.count(0, |e| matches!(e, CmEvent::Unreachable { .. })),
        1,
        "{}",
        n.dump()
    );
    assert_eq!(n.sent_count(0, AttributeId::REQ), 4);
}

#[test]
fn explicit_mra_on_the_active_side_holds_the_rep() {
    let mut n = Net::new(2);
    n.agents[1].listen(SID).unwrap();
    n.policy[0].rtu = false;
    let c = n.connect(0, 1);
    n.run_for(Duration::from_millis(1));
    n.agents[0].mra(n.now, c, 24).unwrap();
    // Long after the REP would have been resent 15 times (2^20 × 4.096 µs
    // ≈ 4.3 s each), the passive side still waits.
    n.run_for(Duration::from_secs(60));
    assert_eq!(n.sent_count(1, AttributeId::REP), 1, "{}", n.dump());
    assert!(n.events[1]
        .iter()
        .all(|(_, e)| !matches!(e, CmEvent::Unreachable { .. })));
    n.agents[0].ready_to_use(n.now, c, &[]).unwrap();
    n.settle();
    assert_connected(&n, 0, 1);
}

#[test]
fn sidr_request_and_reply() {
    let mut n = Net::new(2);
    let usid = PortSpace::UDP.service_id(7174);
    n.agents[1].listen(usid).unwrap();
    let mut p = SidrParams::new(usid, n.addr(1));
    p.private_data = b"who?".to_vec();
    let id = n.agents[0].sidr_request(n.now, &p).unwrap();
    n.run_for(Duration::from_millis(1));
    let [(
        _,
        CmEvent::SidrRequest {
            id: rid, from, req, ..
        },
    )] = &n.events[1][..]
    else {
        panic!("{}", n.dump())
    };
    assert_eq!(*from, n.addr(0));
    assert_eq!(&req.private_data[..4], b"who?");
    let r = SidrReplyParams {
        status: SidrStatus::SUCCESS,
        qpn: 0x23,
        qkey: 0x0123_4567,
        private_data: vec![],
    };
    let rid = *rid;
    n.agents[1].sidr_reply(n.now, rid, &r).unwrap();
    assert_eq!(
        n.agents[1].sidr_reply(n.now, rid, &r),
        Err(CmError::UnknownSidr(rid))
    );
    n.settle();
    let [(
        _,
        CmEvent::SidrReply {
            id: got,
            status,
            qpn,
            qkey,
            ..
        },
    )] = &n.events[0][..]
    else {
        panic!("{}", n.dump())
    };
    assert_eq!(
        (*got, *status, *qpn, *qkey),
        (id, SidrStatus::SUCCESS, 0x23, 0x0123_4567)
    );
}

#[test]
fn sidr_to_an_unknown_service_and_to_nobody() {
    let mut n = Net::new(2);
    let p = SidrParams::new(0x0111_0001, n.addr(1));
    let id = n.agents[0].sidr_request(n.now, &p).unwrap();
    n.settle();
    let [(
        _,
        CmEvent::SidrReply {
            id: got, status, ..
        },
    )] = &n.events[0][..]
    else {
        panic!("{}", n.dump())
    };
    assert_eq!((*got, *status), (id, SidrStatus::UNSUPPORTED));
    // Nobody answers: retried, then unreachable.
    n.rule = Box::new(|_| Fate::Drop);
    let mut p = SidrParams::new(0x0111_0001, n.addr(1));
    p.max_cm_retries = 2;
    p.timeout = 10;
    let id = n.agents[0].sidr_request(n.now, &p).unwrap();
    n.settle();
    assert_eq!(
        n.events[0].last().unwrap().1,
        CmEvent::SidrUnreachable { id }
    );
    assert_eq!(n.sent_count(0, AttributeId::SIDR_REQ), 4);
}

#[test]
fn a_req_from_a_qp_still_connected_is_stale() {
    let (mut n, _, _) = connected_pair();
    // The same QP (0x300) asks again: REJ stale connection.
    let c = n.connect(0, 1);
    n.settle();
    let rejected: Vec<_> = n.events[0]
        .iter()
        .filter(|(_, e)| matches!(e, CmEvent::Rejected { .. }))
        .collect();
    assert_eq!(
        rejected[0].1,
        CmEvent::Rejected {
            conn: c,
            message: RejectedMessage::Req,
            reason: RejReason::STALE_CONN,
            ari: vec![],
            private_data: vec![0; 148],
        }
    );
    // Linux enters timewait on a stale-connection REJ.
    assert_eq!(
        n.events[0].last().unwrap().1,
        CmEvent::TimewaitExit { conn: c }
    );
    assert_eq!(
        n.count(1, |e| matches!(e, CmEvent::ConnectRequest { .. })),
        1
    );
}

#[test]
fn three_agents_two_clients_one_server() {
    let mut n = Net::new(3);
    n.agents[1].listen(SID).unwrap();
    n.rule = Box::new(|w| {
        if w.nth == 0 && w.attr != AttributeId::RTU {
            Fate::Late(Duration::from_millis(3))
        } else {
            Fate::Deliver
        }
    });
    n.connect(0, 1);
    n.connect(2, 1);
    n.settle();
    assert_eq!(n.established(1).len(), 2);
    assert_eq!(n.established(0).len(), 1);
    assert_eq!(n.established(2).len(), 1);
    let server: Vec<u32> = n.established(1).iter().map(|e| e.1.remote_qpn).collect();
    assert!(server.contains(&0x300) && server.contains(&0x302));
}

#[test]
fn a_flood_of_reqs_is_bounded_by_the_backlog() {
    let mut n = Net::with(2, |c| c.listen_backlog = 8);
    n.agents[1].listen(SID).unwrap();
    n.policy[1].accept = false;
    for q in 0..100u32 {
        let p = ConnectParams::new(SID, n.addr(1), 0x1000 + q, 0);
        n.connect_with(0, &p);
    }
    n.run_for(Duration::from_millis(1));
    assert_eq!(n.agents[1].connection_count(), 8);
    assert_eq!(n.events[1].len(), 8);
    assert_eq!(
        n.agents[1].counters().dropped(CmDropReason::BacklogFull),
        92
    );
}

#[test]
fn mads_from_a_third_party_change_nothing() {
    let (mut n, a, b) = connected_pair();
    // C (10.0.0.9) sends a DREQ naming B's connection with A's IDs.
    let dreq = rxe_core::mad::cm::Dreq {
        local_comm_id: n.agents[0].remote_comm_id(a).map(|_| a.0).unwrap(),
        remote_comm_id: b.0,
        remote_qpn_eecn: 0x101,
        private_data: Default::default(),
    };
    let mad = CmMad::new(1, dreq).to_bytes();
    let now = n.now;
    let out = poke(&mut n.agents[1], now, ip(9), &mad);
    // Unknown to B as coming from C: answered with a DREP as Linux does,
    // but the connection stays.
    assert_eq!(out.len(), 1);
    assert_eq!(n.agents[1].state(b), Some(CmState::Established));
    assert!(n.agents[1].poll_event().is_none());
    // From A, but naming the wrong QP: dropped.
    let mut wrong = dreq;
    wrong.remote_qpn_eecn = 0x999;
    let a_addr = n.addr(0);
    let out = poke(
        &mut n.agents[1],
        now,
        a_addr,
        &CmMad::new(1, wrong).to_bytes(),
    );
    assert!(out.is_empty());
    assert_eq!(n.agents[1].counters().dropped(CmDropReason::WrongQpn), 1);
    assert_eq!(n.agents[1].state(b), Some(CmState::Established));
}

// ----- against the kernel's MADs -----

const KA: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 11);
const KB: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 12);

/// The CM MADs of a capture: (source, destination, MAD).
fn capture(file: &str) -> Vec<(IpAddr, IpAddr, [u8; MAD_LEN])> {
    let mut out = vec![];
    for rec in CaptureReader::open(pcap_dir().join(file)).unwrap() {
        let rec = rec.unwrap();
        let Ok(f) = RoceFrame::parse(rec.link_type, &rec.data) else {
            continue;
        };
        let p = f.packet().unwrap();
        let repr = PacketRepr::parse(&p).unwrap();
        if repr.bth.dest_qp == GSI_QPN {
            let g = GsiMad::from_packet(&repr).unwrap();
            out.push((f.ip.src(), f.ip.dst(), *g.mad));
        }
    }
    out
}

fn kernel_agent(addr: Ipv4Addr, guid: u64) -> CmAgent {
    let mut c = CmConfig::new(IpAddr::V4(addr), guid, 1);
    c.tid_high = 2;
    CmAgent::new(c)
}

/// `mad` with its message's communication IDs replaced.
fn with_ids(mad: &[u8; MAD_LEN], local: Option<u32>, remote: Option<u32>) -> [u8; MAD_LEN] {
    let mut m = CmMad::parse(mad).unwrap();
    match &mut m.message {
        CmMessage::Rep(r) => {
            r.local_comm_id = local.unwrap_or(r.local_comm_id);
            r.remote_comm_id = remote.unwrap_or(r.remote_comm_id);
        }
        CmMessage::Rtu(r) => {
            r.local_comm_id = local.unwrap_or(r.local_comm_id);
            r.remote_comm_id = remote.unwrap_or(r.remote_comm_id);
        }
        CmMessage::Dreq(r) => {
            r.local_comm_id = local.unwrap_or(r.local_comm_id);
            r.remote_comm_id = remote.unwrap_or(r.remote_comm_id);
        }
        CmMessage::Drep(r) => {
            r.local_comm_id = local.unwrap_or(r.local_comm_id);
            r.remote_comm_id = remote.unwrap_or(r.remote_comm_id);
        }
        CmMessage::Req(r) => r.local_comm_id = local.unwrap_or(r.local_comm_id),
        _ => {}
    }
    m.to_bytes()
}

fn out(a: &mut CmAgent) -> Vec<Transmit> {
    std::iter::from_fn(|| a.poll_transmit()).collect()
}

#[test]
fn rping_server_side_from_the_kernels_req() {
    let m = capture("rping.pcap");
    assert_eq!(m.len(), 5);
    let now = Instant::now();
    let (a_ip, b_ip) = (IpAddr::V4(KA), IpAddr::V4(KB));
    let mut a = kernel_agent(KA, 0x5054_00ff_fe99_0011);
    a.listen(PortSpace::TCP.service_id(7174)).unwrap();
    // The client's REQ: a ConnectRequest with the capture's fields.
    a.handle_mad(now, b_ip, &m[0].2);
    let Some(CmEvent::ConnectRequest {
        conn,
        from,
        req,
        cma,
    }) = a.poll_event()
    else {
        panic!()
    };
    let CmMessage::Req(want) = CmMad::parse(&m[0].2).unwrap().message else {
        panic!()
    };
    assert_eq!(from, b_ip);
    assert_eq!(*req, want);
    assert_eq!((req.local_qpn, req.starting_psn), (0x21, 0xe0b806));
    assert_eq!(
        cma,
        Some(CmaHeader {
            src_port: 0x8e7d,
            src: b_ip,
            dst: a_ip
        })
    );
    // Our REP, with the server's values, is the capture's REP but for our
    // communication ID; same transaction ID.
    let qp = a
        .accept(now, conn, &AcceptParams::new(0x21, 0x82a096))
        .unwrap();
    assert_eq!(
        (qp.sq_psn, qp.rq_psn, qp.remote_qpn),
        (0xe0b806, 0x82a096, 0x21)
    );
    assert_eq!(qp.path_mtu, Mtu::Mtu1024);
    assert_eq!((qp.retry_count, qp.rnr_retry, qp.timeout), (7, 7, 19));
    assert_eq!(qp.remote_gid, KB.to_ipv6_mapped());
    assert_eq!(qp.flow_label, 0x15d29);
    let t = out(&mut a);
    assert_eq!(t.len(), 1);
    assert_eq!(t[0].dst, b_ip);
    assert_eq!(t[0].mad, with_ids(&m[1].2, Some(conn.0), None), "REP");
    // The client's RTU (naming our ID): established.
    a.handle_mad(now, b_ip, &with_ids(&m[2].2, None, Some(conn.0)));
    assert!(matches!(a.poll_event(), Some(CmEvent::Established { .. })));
    // The client's DREQ: disconnected; our DREP is the capture's.
    a.handle_mad(now, b_ip, &with_ids(&m[3].2, None, Some(conn.0)));
    assert!(matches!(
        a.poll_event(),
        Some(CmEvent::Disconnected {
            timed_out: false,
            ..
        })
    ));
    a.disconnect(now, conn, &[]).unwrap();
    let t = out(&mut a);
    assert_eq!(t[0].mad, with_ids(&m[4].2, Some(conn.0), None), "DREP");
    assert_eq!(a.state(conn), Some(CmState::Timewait));
    assert_eq!(a.counters().drops.values().sum::<u64>(), 0);
}

#[test]
fn rping_client_side_from_the_kernels_rep() {
    let m = capture("rping.pcap");
    let now = Instant::now();
    let (a_ip, b_ip) = (IpAddr::V4(KA), IpAddr::V4(KB));
    let _ = b_ip;
    let mut b = kernel_agent(KB, 0x5054_00ff_fe99_0012);
    // rping's REQ, as rdma_cm builds it: our REQ is the capture's but for
    // the communication ID (and so the transaction ID).
    let CmMessage::Req(kreq) = CmMad::parse(&m[0].2).unwrap().message else {
        panic!()
    };
    let mut p = ConnectParams::new(kreq.service_id, a_ip, 0x21, 0xe0b806);
    p.flow_label = kreq.primary_path.flow_label;
    p.private_data = kreq.private_data.trimmed().to_vec();
    let conn = b.connect(now, &p).unwrap();
    let t = out(&mut b);
    assert_eq!(t[0].dst, a_ip);
    let mut want = CmMad::parse(&with_ids(&m[0].2, Some(conn.0), None)).unwrap();
    want.transaction_id = b.tid_for(conn.0);
    assert_eq!(CmMad::parse(&t[0].mad).unwrap(), want);
    assert_eq!(t[0].mad, want.to_bytes(), "REQ byte for byte");
    // The server's REP (naming our ID): the response, PSNs crossed.
    b.handle_mad(now, a_ip, &with_ids(&m[1].2, None, Some(conn.0)));
    let Some(CmEvent::ConnectResponse { qp, rep, .. }) = b.poll_event() else {
        panic!()
    };
    assert_eq!(rep.local_comm_id, 0x06f5_9e2f);
    assert_eq!((qp.sq_psn, qp.rq_psn), (0x82a096, 0xe0b806));
    assert_eq!((qp.local_qpn, qp.remote_qpn), (0x21, 0x21));
    b.ready_to_use(now, conn, &[]).unwrap();
    assert!(matches!(b.poll_event(), Some(CmEvent::Established { .. })));
    let t = out(&mut b);
    let mut rtu = CmMad::parse(&with_ids(&m[2].2, Some(conn.0), None)).unwrap();
    rtu.transaction_id = b.tid_for(conn.0);
    assert_eq!(t[0].mad, rtu.to_bytes(), "RTU");
    // The REP again (our RTU lost): the RTU again.
    b.handle_mad(now, a_ip, &with_ids(&m[1].2, None, Some(conn.0)));
    assert_eq!(out(&mut b)[0].mad, rtu.to_bytes());
    // rping's client disconnects: the capture's DREQ but for our IDs.
    b.disconnect(now, conn, &[]).unwrap();
    let t = out(&mut b);
    let mut dreq = CmMad::parse(&with_ids(&m[3].2, Some(conn.0), None)).unwrap();
    dreq.transaction_id = b.tid_for(conn.0);
    assert_eq!(t[0].mad, dreq.to_bytes(), "DREQ");
    b.handle_mad(now, a_ip, &with_ids(&m[4].2, None, Some(conn.0)));
    assert!(matches!(
        b.poll_event(),
        Some(CmEvent::Disconnected {
            timed_out: false,
            ..
        })
    ));
    assert_eq!(b.state(conn), Some(CmState::Timewait));
}

#[test]
fn ucmatose_server_disconnects_with_a_transaction_of_its_own() {
    let m = capture("ucmatose.pcap");
    assert_eq!(m.len(), 5);
    let now = Instant::now();
    let b_ip = IpAddr::V4(KB);
    let mut a = kernel_agent(KA, 0x5054_00ff_fe99_0011);
    a.listen(PortSpace::TCP.service_id(7471)).unwrap();
    a.handle_mad(now, b_ip, &m[0].2);
    let Some(CmEvent::ConnectRequest { conn, req, .. }) = a.poll_event() else {
        panic!()
    };
    let CmMessage::Rep(krep) = CmMad::parse(&m[1].2).unwrap().message else {
        panic!()
    };
    let mut p = AcceptParams::new(krep.local_qpn, krep.starting_psn);
    p.responder_resources = krep.responder_resources;
    p.initiator_depth = krep.initiator_depth;
    a.accept(now, conn, &p).unwrap();
    assert_eq!(out(&mut a)[0].mad, with_ids(&m[1].2, Some(conn.0), None));
    a.handle_mad(now, b_ip, &with_ids(&m[2].2, None, Some(conn.0)));
    assert!(matches!(a.poll_event(), Some(CmEvent::Established { .. })));
    a.disconnect(now, conn, &[]).unwrap();
    let mut dreq = CmMad::parse(&with_ids(&m[3].2, Some(conn.0), None)).unwrap();
    dreq.transaction_id = a.tid_for(conn.0);
    assert_eq!(out(&mut a)[0].mad, dreq.to_bytes(), "DREQ");
    let CmMessage::Dreq(d) = dreq.message else {
        panic!()
    };
    assert_eq!(d.remote_qpn_eecn, req.local_qpn);
    a.handle_mad(now, b_ip, &with_ids(&m[4].2, None, Some(conn.0)));
    assert!(matches!(
        a.poll_event(),
        Some(CmEvent::Disconnected {
            timed_out: false,
            ..
        })
    ));
}

#[test]
fn udaddy_sidr_reply_is_the_kernels_byte_for_byte() {
    let m = capture("udaddy.pcap");
    assert_eq!(m.len(), 2);
    let now = Instant::now();
    let b_ip = IpAddr::V4(KB);
    let mut a = kernel_agent(KA, 0x5054_00ff_fe99_0011);
    a.listen(PortSpace::UDP.service_id(7174)).unwrap();
    a.handle_mad(now, b_ip, &m[0].2);
    let Some(CmEvent::SidrRequest { id, from, req, cma }) = a.poll_event() else {
        panic!()
    };
    assert_eq!(from, b_ip);
    assert_eq!(req.request_id, 0x73fb_ea41);
    assert_eq!(cma.unwrap().dst, IpAddr::V4(KA));
    // A duplicate while the application thinks: dropped.
    a.handle_mad(now, b_ip, &m[0].2);
    assert!(a.poll_event().is_none());
    let r = SidrReplyParams {
        status: SidrStatus::SUCCESS,
        qpn: 0x23,
        qkey: 0x0123_4567,
        private_data: vec![],
    };
    a.sidr_reply(now, id, &r).unwrap();
    let t = out(&mut a);
    assert_eq!(t.len(), 1);
    assert_eq!(t[0].mad, m[1].2, "SIDR_REP byte for byte");
    // And the client side: the capture's SIDR_REP answers our SIDR_REQ
    // once its request ID is ours.
    let mut b = kernel_agent(KB, 0x5054_00ff_fe99_0012);
    let mut p = SidrParams::new(req.service_id, IpAddr::V4(KA));
    p.private_data = req.private_data.trimmed().to_vec();
    let sid = b.sidr_request(now, &p).unwrap();
    let mut rep = CmMad::parse(&m[1].2).unwrap();
    if let CmMessage::SidrRep(r) = &mut rep.message {
        r.request_id = sid.0;
    }
    b.handle_mad(now, IpAddr::V4(KA), &rep.to_bytes());
    let Some(CmEvent::SidrReply {
        id,
        status,
        qpn,
        qkey,
        ..
    }) = b.poll_event()
    else {
        panic!()
    };
    assert_eq!(
        (id, status, qpn, qkey),
        (sid, SidrStatus::SUCCESS, 0x23, 0x0123_4567)
    );
}

#[test]
fn a_kernel_rej_for_a_stale_connection_puts_us_in_timewait() {
    let now = Instant::now();
    let a_ip = IpAddr::V4(KA);
    let mut b = kernel_agent(KB, 2);
    let conn = b
        .connect(now, &ConnectParams::new(SID, a_ip, 0x21, 0))
        .unwrap();
    out(&mut b);
    let rej = Rej {
        local_comm_id: 0,
        remote_comm_id: conn.0,
        message_rejected: RejectedMessage::Req,
        reject_info_length: 0,
        reason: RejReason::STALE_CONN,
        ari: Default::default(),
        private_data: Default::default(),
    };
    b.handle_mad(now, a_ip, &CmMad::new(7, rej).to_bytes());
    assert!(matches!(
        b.poll_event(),
        Some(CmEvent::Rejected {
            reason: RejReason::STALE_CONN,
            ..
        })
    ));
    assert_eq!(b.state(conn), Some(CmState::Timewait));
}

// ----- random faults -----

fn fate_strategy() -> impl Strategy<Value = Fate> {
    prop_oneof![
        6 => Just(Fate::Deliver),
        2 => Just(Fate::Drop),
        1 => Just(Fate::Duplicate),
        1 => (1u64..3_000_000).prop_map(|us| Fate::Late(Duration::from_micros(us))),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Random loss, duplication and reordering of the first MADs, with
    /// fewer drops than retries: exactly one connection each side, the
    /// PSNs crossed, then a clean disconnect; never a panic.
    #[test]
    fn faults_never_make_two_connections(fates in prop::collection::vec(fate_strategy(), 0..40),
                                         slow in 0u64..3, who in 0usize..2) {
        let drops = fates.iter().filter(|f| **f == Fate::Drop).count();
        let mut n = Net::new(2);
        n.agents[1].listen(SID).unwrap();
        n.policy[1].accept_after = Duration::from_secs(slow * 3);
        let mut it = fates.clone().into_iter();
        n.rule = Box::new(move |_| it.next().unwrap_or(Fate::Deliver));
        let mut p = ConnectParams::new(SID, n.addr(1), 0x31, 0x10);
        p.remote_cm_response_timeout = 18;
        p.local_cm_response_timeout = 18;
        n.connect_with(0, &p);
        n.settle();
        let ea = n.established(0).len();
        let eb = n.established(1).len();
        prop_assert!(ea <= 1 && eb <= 1, "{}", n.dump());
        let failed = n.count(0, |e| matches!(e, CmEvent::Unreachable { .. } | CmEvent::Rejected { .. }));
        prop_assert!(ea == 1 || failed == 1, "active side neither connected nor failed\n{}", n.dump());
        if drops < 15 {
            // Every message could be resent often enough.
            prop_assert_eq!((ea, eb), (1, 1), "{}", n.dump());
            let (a, b) = assert_connected(&n, 0, 1);
            let (i, c) = if who == 0 { (0, a) } else { (1, b) };
            n.agents[i].disconnect(n.now, c, &[]).unwrap();
            n.settle();
            for k in 0..2 {
                prop_assert_eq!(disconnects(&n, k).len(), 1, "{}", n.dump());
                prop_assert_eq!(n.agents[k].connection_count(), 0);
            }
        }
    }

    /// Heavy loss (most MADs dropped, with 2 CM retries): a connection may
    /// fail, but never twice over, and every end says how it ended: the
    /// active side is established or reports the failure, and a passive
    /// side that accepted is established or reports its REP unanswered.
    #[test]
    fn heavy_loss_ends_cleanly(fates in prop::collection::vec(
                                   prop_oneof![1 => Just(Fate::Deliver), 3 => Just(Fate::Drop),
                                               1 => Just(Fate::Duplicate)], 0..30)) {
        let mut n = Net::new(2);
        n.agents[1].listen(SID).unwrap();
        let mut it = fates.into_iter();
        n.rule = Box::new(move |_| it.next().unwrap_or(Fate::Drop));
        let mut p = ConnectParams::new(SID, n.addr(1), 0x31, 0x10);
        p.max_cm_retries = 2;
        n.connect_with(0, &p);
        n.settle();
        let ea = n.established(0).len();
        let eb = n.established(1).len();
        prop_assert!(ea <= 1 && eb <= 1, "{}", n.dump());
        let a_failed = n.count(0, |e| matches!(e, CmEvent::Unreachable { .. } | CmEvent::Rejected { .. }));
        prop_assert_eq!(ea + a_failed, 1, "{}", n.dump());
        let accepted = n.count(1, |e| matches!(e, CmEvent::ConnectRequest { .. }));
        let b_failed = n.count(1, |e| matches!(e, CmEvent::Unreachable { .. }));
        prop_assert!(accepted <= 1);
        prop_assert_eq!(eb + b_failed, accepted, "{}", n.dump());
        // Only established connections remain (a half-open one, established
        // on the active side while the passive side gave up its REP, is
        // possible, as with Linux: the first data packet will fail).
        prop_assert_eq!(n.agents[0].connection_count(), ea);
        prop_assert_eq!(n.agents[1].connection_count(), eb);
    }

    /// Arbitrary MADs (mutated real ones and noise) into an agent with a
    /// connection in every state: no panic, nothing established twice.
    #[test]
    fn arbitrary_mads_never_panic(muts in prop::collection::vec((0usize..5, 0usize..256, any::<u8>()), 0..64),
                                  steps in prop::collection::vec(0u64..10_000_000, 0..8)) {
        let m = capture("rping.pcap");
        let now = Instant::now();
        let mut a = kernel_agent(KA, 0x5054_00ff_fe99_0011);
        a.listen(PortSpace::TCP.service_id(7174)).unwrap();
        let b_ip = IpAddr::V4(KB);
        let mut t = now;
        let mut established = 0;
        for (k, at, byte) in muts {
            let mut mad = m[k].2;
            mad[at] = byte;
            a.handle_mad(t, b_ip, &mad);
            while let Some(e) = a.poll_event() {
                if let CmEvent::ConnectRequest { conn, .. } = e {
                    let _ = a.accept(t, conn, &AcceptParams::new(0x21, 0x82a096));
                }
                if matches!(e, CmEvent::Established { .. }) {
                    established += 1;
                }
            }
            while a.poll_transmit().is_some() {}
        }
        for s in steps {
            t += Duration::from_micros(s);
            a.handle_timeout(t);
            while a.poll_transmit().is_some() {}
            while a.poll_event().is_some() {}
        }
        prop_assert!(established <= a.counters().received_of(AttributeId::RTU) as usize);
    }
}
