//! sim_digest: one hash over everything two engines do in a seeded set of
//! mixed workloads, to tell a change that keeps the engine's behaviour
//! (a speed-up) from one that alters it.
//!
//!     cargo run --release -p rxe-core --example sim_digest [SCENARIOS] [SEED]
//!
//! Each scenario joins two engines in memory on a virtual clock (no
//! sockets, threads or clock reads beyond one `Instant` as the origin),
//! with one to three QP pairs of random transports (RC, UC, UD), path MTUs
//! 256..4096, windows and device budgets, and posts a random stream of work
//! from both sides: SEND (with immediate, inline, several SGEs), WRITE,
//! READ and atomics, 0 bytes to 64 KiB, now and then a bad key or too few
//! receives. The link between them loses, duplicates, delays (reorders)
//! and corrupts packets at rates drawn per scenario, and the driver polls
//! each engine for at most a drawn number of packets at a time.
//!
//! The digest (FNV-1a, 64 bits) covers, in order: every packet an engine
//! hands out (virtual time, addresses, port, bytes), every completion,
//! every command's result, every timer run, and at the end each engine's
//! counters and both memory regions. Same seed, same digest; a change that
//! moves a single byte, completion or retransmission changes it.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rxe_core::engine::state::Connect;
use rxe_core::engine::{CqId, Engine, EngineConfig, MrKeys, PdId, QpInit, Transmit, VecMemory};
use rxe_core::psn::Psn;
use rxe_core::types::*;
use std::collections::{BTreeMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Where the test regions start.
const IOVA: u64 = 0x1000_0000;
/// Each engine's region.
const REGION: usize = 256 * 1024;
const QKEY: u32 = 0x1111_1111;

/// FNV-1a over everything fed to it.
struct Digest(u64);

impl Digest {
    fn bytes(&mut self, b: &[u8]) {
        for &x in b {
            self.0 ^= u64::from(x);
            self.0 = self.0.wrapping_mul(0x100_0000_01b3);
        }
    }
    fn u64(&mut self, v: u64) {
        self.bytes(&v.to_le_bytes());
    }
    fn text(&mut self, s: &str) {
        self.u64(s.len() as u64);
        self.bytes(s.as_bytes());
    }
}

/// One engine's resources.
struct Node {
    e: Engine,
    addr: IpAddr,
    pd: PdId,
    cq: CqId,
    mem: Arc<VecMemory>,
    mr: MrKeys,
}

/// A QP pair: its transport and the QP number on each node.
#[derive(Clone, Copy)]
struct Pair {
    qp_type: QpType,
    mtu: u64,
    qpn: [u32; 2],
}

/// What the link does to packets, per packet.
#[derive(Clone, Copy)]
struct Faults {
    loss: f64,
    duplicate: f64,
    reorder: f64,
    corrupt: f64,
}

/// Two engines, the packets between them and the plan of work still to post.
struct Sim {
    nodes: [Node; 2],
    pairs: Vec<Pair>,
    start: Instant,
    now: Instant,
    rng: SmallRng,
    faults: Faults,
    /// Packets on the wire: (arrival, sequence) -> (to, from, packet).
    wire: BTreeMap<(Instant, u64), (usize, usize, Transmit)>,
    seq: u64,
    /// Packets taken from an engine per poll round.
    budget: usize,
    /// Work not posted yet: (node, pair, request).
    plan: VecDeque<Work>,
    d: Digest,
    /// What the scenario did, for the summary line.
    stats: Stats,
}

/// Totals over scenarios, to show what the digest covers.
#[derive(Default)]
struct Stats {
    packets: u64,
    completions: u64,
    errors: u64,
    retransmitted: u64,
    timers: u64,
}

enum Work {
    Send(usize, usize, SendWr),
    Recv(usize, usize, RecvWr),
}

fn addr(i: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, 10 + i as u8))
}

fn node(i: usize, seed: u64, rng: &mut SmallRng) -> Node {
    let addr = addr(i);
    let mut e = Engine::new(EngineConfig::new(addr, seed));
    let pd = e.alloc_pd();
    let cq = e.create_cq(DeviceCaps::default().max_cqe).unwrap();
    let bytes: Vec<u8> = (0..REGION).map(|_| rng.gen()).collect();
    let mem = Arc::new(VecMemory::from_vec(bytes));
    let access = Access::LOCAL_WRITE
        | Access::REMOTE_WRITE
        | Access::REMOTE_READ
        | Access::REMOTE_ATOMIC
        | Access::MW_BIND;
    let mr = e.reg_mr(pd, mem.clone(), IOVA, access).unwrap();
    Node {
        e,
        addr,
        pd,
        cq,
        mem,
        mr,
    }
}

fn pick<T: Copy>(rng: &mut SmallRng, xs: &[T]) -> T {
    xs[rng.gen_range(0..xs.len())]
}

/// A message length: mostly small, sometimes up to 64 KiB, now and then 0.
fn length(rng: &mut SmallRng, max: u64) -> u64 {
    let l = match rng.gen_range(0..10) {
        0 => 0,
        1..=5 => rng.gen_range(1..=64),
        6..=7 => rng.gen_range(65..=4096),
        _ => rng.gen_range(4097..=65536),
    };
    l.min(max)
}

impl Sim {
    fn new(seed: u64) -> Sim {
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut nodes = [node(0, seed, &mut rng), node(1, seed ^ 0xabcd, &mut rng)];
        for n in nodes.iter_mut() {
            n.e.set_max_unacked_psns(pick(&mut rng, &[4, 16, 128]));
            n.e.set_max_in_flight(pick(&mut rng, &[8, 64, 1024]));
        }
        let faults = if rng.gen_bool(0.3) {
            Faults {
                loss: 0.0,
                duplicate: 0.0,
                reorder: 0.0,
                corrupt: 0.0,
            }
        } else {
            Faults {
                loss: pick(&mut rng, &[0.0, 0.01, 0.05, 0.2]),
                duplicate: pick(&mut rng, &[0.0, 0.02, 0.1]),
                reorder: pick(&mut rng, &[0.0, 0.05, 0.3]),
                corrupt: pick(&mut rng, &[0.0, 0.01, 0.05]),
            }
        };
        let budget = pick(&mut rng, &[1, 2, 3, 16, usize::MAX]);
        let start = Instant::now();
        let mut sim = Sim {
            nodes,
            pairs: Vec::new(),
            start,
            now: start,
            rng,
            faults,
            wire: BTreeMap::new(),
            seq: 0,
            budget,
            plan: VecDeque::new(),
            d: Digest(0xcbf2_9ce4_8422_2325),
            stats: Stats::default(),
        };
        // The engines read the clock when posting before they were ever
        // driven: give them the virtual one first.
        for n in sim.nodes.iter_mut() {
            n.e.handle_timeout(start);
        }
        for _ in 0..sim.rng.gen_range(1..=3) {
            sim.add_pair();
        }
        sim.plan_work();
        sim
    }

    fn add_pair(&mut self) {
        let rng = &mut self.rng;
        let qp_type = pick(rng, &[QpType::Rc, QpType::Rc, QpType::Uc, QpType::Ud]);
        let mtu = pick(
            rng,
            &[
                Mtu::Mtu256,
                Mtu::Mtu512,
                Mtu::Mtu1024,
                Mtu::Mtu2048,
                Mtu::Mtu4096,
            ],
        );
        let (timeout, retry_cnt, rnr_retry, rd_atomic) = (
            pick(rng, &[8, 12]),
            pick(rng, &[1, 7]),
            pick(rng, &[0, 3, 7]),
            pick(rng, &[1, 4, 16]),
        );
        let psn = [Psn::new(rng.gen_range(0..1 << 24)), Psn::new(rng.gen())];
        let mut qpn = [0; 2];
        for (i, n) in self.nodes.iter_mut().enumerate() {
            qpn[i] =
                n.e.create_qp(QpInit {
                    qp_type,
                    pd: n.pd,
                    send_cq: n.cq,
                    recv_cq: n.cq,
                    srq: None,
                    cap: QpCap {
                        max_send_wr: 64,
                        max_recv_wr: 64,
                        ..QpCap::default()
                    },
                    sq_sig_all: false,
                })
                .unwrap();
        }
        for i in 0..2 {
            let c = Connect {
                qp_type,
                access: Access::LOCAL_WRITE
                    | Access::REMOTE_WRITE
                    | Access::REMOTE_READ
                    | Access::REMOTE_ATOMIC,
                qkey: QKEY,
                remote: addr(1 - i),
                dest_qpn: qpn[1 - i],
                rq_psn: psn[1 - i],
                sq_psn: psn[i],
                mtu,
                rd_atomic,
                min_rnr_timer: 1,
                timeout,
                retry_cnt,
                rnr_retry,
                port: 1,
                sgid_index: 0,
            };
            for (a, m) in c.steps() {
                self.nodes[i].e.modify_qp(qpn[i], &a, m).unwrap();
            }
        }
        self.pairs.push(Pair {
            qp_type,
            mtu: mtu.bytes() as u64,
            qpn,
        });
    }

    /// Random SGEs over `len` bytes of node `n`'s region (a bad key now and then).
    fn sges(&mut self, n: usize, len: u64) -> Vec<Sge> {
        let lkey = if self.rng.gen_ratio(1, 100) {
            0xdead
        } else {
            self.nodes[n].mr.lkey
        };
        let parts = if len >= 3 && self.rng.gen_ratio(1, 5) {
            self.rng.gen_range(2..=3)
        } else {
            1
        };
        let mut left = len;
        (0..parts)
            .map(|k| {
                let l = if k + 1 == parts {
                    left
                } else {
                    self.rng.gen_range(1..=left / 2)
                };
                left -= l;
                let off = self.rng.gen_range(0..=REGION as u64 - l);
                Sge {
                    addr: IOVA + off,
                    length: l as u32,
                    lkey,
                }
            })
            .collect()
    }

    /// A random send request from node `n` on pair `p`.
    fn send_wr(&mut self, id: u64, n: usize, p: Pair) -> SendWr {
        use SendOpcode as S;
        let ops: &[S] = match p.qp_type {
            QpType::Rc => &[
                S::Send,
                S::Send,
                S::SendWithImm,
                S::RdmaWrite,
                S::RdmaWriteWithImm,
                S::RdmaRead,
                S::AtomicCmpSwap,
                S::AtomicFetchAdd,
            ],
            QpType::Uc => &[S::Send, S::SendWithImm, S::RdmaWrite, S::RdmaWriteWithImm],
            QpType::Ud => &[S::Send, S::SendWithImm],
        };
        let op = pick(&mut self.rng, ops);
        let atomic = matches!(op, S::AtomicCmpSwap | S::AtomicFetchAdd);
        let max = if p.qp_type == QpType::Ud {
            p.mtu
        } else {
            65536
        };
        let len = if atomic {
            8
        } else {
            length(&mut self.rng, max)
        };
        let mut wr = SendWr::new(id, op);
        if self.rng.gen_ratio(1, 4) {
            wr.flags = SendFlags::empty();
        }
        if self.rng.gen_ratio(1, 10) {
            wr.flags |= SendFlags::SOLICITED;
        }
        if self.rng.gen_ratio(1, 10) {
            wr.flags |= SendFlags::FENCE;
        }
        let inline = matches!(op, S::Send | S::SendWithImm | S::RdmaWrite)
            && len <= 256
            && self.rng.gen_ratio(1, 4);
        if inline {
            wr.flags |= SendFlags::INLINE;
            wr.inline_data = Some((0..len).map(|_| self.rng.gen()).collect());
        } else if atomic {
            let off = self.rng.gen_range(0..REGION as u64 / 8) * 8;
            wr.sg_list = vec![Sge {
                addr: IOVA + off,
                length: 8,
                lkey: self.nodes[n].mr.lkey,
            }];
        } else {
            wr.sg_list = self.sges(n, len);
        }
        wr.imm_data = self.rng.gen();
        let peer = &self.nodes[1 - n];
        wr.rkey = if self.rng.gen_ratio(1, 100) {
            0xbeef
        } else {
            peer.mr.rkey
        };
        wr.remote_addr = if atomic {
            IOVA + self.rng.gen_range(0..REGION as u64 / 8) * 8
        } else {
            IOVA + self.rng.gen_range(0..=REGION as u64 - len)
        };
        wr.compare_add = self.rng.gen_range(0..4);
        wr.swap = self.rng.gen();
        if p.qp_type == QpType::Ud {
            wr.ud = Some(UdDest {
                av: AddressVector::to(peer.addr),
                remote_qpn: p.qpn[1 - n],
                remote_qkey: QKEY,
            });
        }
        wr
    }

    /// The whole scenario's work, receives mixed in (sometimes late, for RNR).
    fn plan_work(&mut self) {
        let mut id = 1;
        for _ in 0..self.rng.gen_range(4..=40) {
            let p = self.rng.gen_range(0..self.pairs.len());
            let pair = self.pairs[p];
            let n = if self.rng.gen_ratio(3, 4) { 0 } else { 1 };
            if self.rng.gen_ratio(9, 10) {
                let len = if pair.qp_type == QpType::Ud {
                    pair.mtu + 40
                } else {
                    65536
                };
                let sg_list = self.sges(1 - n, len.min(REGION as u64));
                self.plan
                    .push_back(Work::Recv(1 - n, p, RecvWr { wr_id: id, sg_list }));
                id += 1;
            }
            let wr = self.send_wr(id, n, pair);
            id += 1;
            self.plan.push_back(Work::Send(n, p, wr));
        }
    }

    fn elapsed(&self) -> u64 {
        (self.now - self.start).as_nanos() as u64
    }

    /// Posts the next `k` planned requests.
    fn post(&mut self, k: usize) {
        for _ in 0..k {
            let Some(w) = self.plan.pop_front() else {
                return;
            };
            let r = match w {
                Work::Send(n, p, wr) => {
                    let qpn = self.pairs[p].qpn[n];
                    if self.rng.gen_bool(0.5) {
                        self.nodes[n].e.post_send_ref(qpn, &wr)
                    } else {
                        self.nodes[n].e.post_send(qpn, wr)
                    }
                }
                Work::Recv(n, p, wr) => {
                    let qpn = self.pairs[p].qpn[n];
                    self.nodes[n].e.post_recv(qpn, wr)
                }
            };
            self.d.text(&format!("post {r:?}"));
        }
    }

    /// Takes up to `budget` packets from each engine and puts them on the
    /// wire; true if an engine may have more.
    fn flush(&mut self) -> bool {
        let mut more = false;
        for from in 0..2 {
            let mut taken = 0;
            while taken < self.budget {
                let Some(mut t) = self.nodes[from].e.poll_transmit(self.now) else {
                    break;
                };
                taken += 1;
                self.stats.packets += 1;
                self.d.u64(0x5045_4b54 ^ from as u64);
                self.d.u64(self.elapsed());
                self.d.text(&format!(
                    "{} {} {} {} {}",
                    t.src, t.dst, t.src_port, t.traffic_class, t.hop_limit
                ));
                self.d.bytes(&t.payload);
                let to = 1 - from;
                let f = self.faults;
                if self.rng.gen_bool(f.loss) {
                    self.nodes[from].e.recycle(t);
                    continue;
                }
                if self.rng.gen_bool(f.corrupt) && !t.payload.is_empty() {
                    let bit = self.rng.gen_range(0..t.payload.len() * 8);
                    t.payload[bit / 8] ^= 1 << (bit % 8);
                }
                let mut delay = Duration::from_micros(10);
                if self.rng.gen_bool(f.reorder) {
                    delay += Duration::from_micros(self.rng.gen_range(0..100));
                }
                if self.rng.gen_bool(f.duplicate) {
                    self.schedule(to, from, t.clone(), Duration::from_micros(10));
                }
                self.schedule(to, from, t, delay);
            }
            more |= taken == self.budget;
        }
        more
    }

    fn schedule(&mut self, to: usize, from: usize, t: Transmit, delay: Duration) {
        self.seq += 1;
        self.wire
            .insert((self.now + delay, self.seq), (to, from, t));
    }

    fn deliver(&mut self, to: usize, from: usize, t: Transmit) {
        let meta = t.received();
        self.nodes[to].e.handle_datagram(self.now, meta, &t.payload);
        self.nodes[from].e.recycle(t);
    }

    /// Drains both CQs and the event queues into the digest.
    fn collect(&mut self) {
        let mut out = Vec::new();
        for i in 0..2 {
            out.clear();
            let n = &mut self.nodes[i];
            n.e.poll_cq(n.cq, usize::MAX, &mut out).unwrap();
            for c in &out {
                self.stats.completions += 1;
                self.stats.errors += u64::from(c.status != WcStatus::Success);
                self.d.text(&format!("{i} {c:?}"));
            }
            while let Some(ev) = n.e.poll_event() {
                self.d.text(&format!("{i} {ev:?}"));
            }
        }
    }

    /// Runs the scenario to its end (nothing left to do, or 10 s of virtual
    /// time) and returns its digest.
    fn run(mut self, totals: &mut Stats) -> u64 {
        let first = self.rng.gen_range(0..=self.plan.len());
        self.post(first);
        let limit = self.start + Duration::from_secs(10);
        while self.now < limit {
            if self.rng.gen_ratio(1, 8) {
                let k = self.rng.gen_range(1..=4);
                self.post(k);
            }
            let more = self.flush();
            self.collect();
            let next_packet = self.wire.keys().next().map(|k| k.0);
            let next_timer = self.nodes.iter().filter_map(|n| n.e.next_timeout()).min();
            match (next_packet, next_timer) {
                (Some(p), t) if t.is_none_or(|t| p <= t) => {
                    self.now = self.now.max(p);
                    let (_, (to, from, t)) = self.wire.pop_first().expect("peeked");
                    self.deliver(to, from, t);
                }
                (_, Some(t)) => {
                    // (A packet due first took the arm above.)
                    self.now = self.now.max(t);
                    self.d.u64(0x5449_4d45);
                    self.stats.timers += 1;
                    self.d.u64(self.elapsed());
                    for n in self.nodes.iter_mut() {
                        if n.e.next_timeout().is_some_and(|x| x <= self.now) {
                            n.e.handle_timeout(self.now);
                        }
                    }
                }
                (Some(_), None) => unreachable!("the first arm takes it"),
                (None, None) if more => {}
                (None, None) if !self.plan.is_empty() => self.post(usize::MAX),
                (None, None) => break,
            }
        }
        self.collect();
        for (i, n) in self.nodes.iter().enumerate() {
            self.d.text(&format!("{i} {:?}", n.e.counters()));
            self.stats.retransmitted += n.e.counters().retransmitted_pkts;
            self.d.bytes(&n.mem.snapshot());
        }
        totals.packets += self.stats.packets;
        totals.completions += self.stats.completions;
        totals.errors += self.stats.errors;
        totals.retransmitted += self.stats.retransmitted;
        totals.timers += self.stats.timers;
        self.d.0
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let scenarios: u64 = args.next().map_or(300, |a| a.parse().expect("SCENARIOS"));
    let seed: u64 = args.next().map_or(1, |a| a.parse().expect("SEED"));
    let mut all = Digest(0xcbf2_9ce4_8422_2325);
    let mut totals = Stats::default();
    for s in 0..scenarios {
        let d = Sim::new(seed.wrapping_mul(1_000_003).wrapping_add(s)).run(&mut totals);
        if std::env::var_os("SIM_DIGEST_EACH").is_some() {
            println!("scenario {s}: {d:016x}");
        }
        all.u64(d);
    }
    println!("digest {:016x} ({scenarios} scenarios, seed {seed})", all.0);
    println!(
        "{} packets, {} retransmitted, {} completions ({} in error), {} timer runs",
        totals.packets, totals.retransmitted, totals.completions, totals.errors, totals.timers
    );
}
