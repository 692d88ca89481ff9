//! The client side of `rxe stress`: chooses the QPs, drives every
//! operation and checks what comes back.

use super::layout::Layout;
use super::pattern::{self, Class};
use super::wire::{Channel, Done, Hello, Qp, Tally, Welcome};
use super::{footprint, mtu_of, wait_limit, Args, Side, Transport, QKEY};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rxe_verbs::{
    gid_of, AddressHandle, AddressVector, Completion, ConnectOptions, Endpoint, SendOpcode, SendWr,
    WcStatus,
};
use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// What a posted work request will be checked against.
#[derive(Debug, Clone, Copy)]
enum Check {
    /// Nothing to check here (SEND, WRITE: the server checks or a READ does).
    Nothing,
    /// The local slot holds `len` bytes of pattern `key` from offset `start`.
    Bytes {
        key: u64,
        start: usize,
        at: usize,
        len: usize,
    },
    /// The local slot holds this original value of the atomic counter.
    Atomic { at: usize, expect: u64 },
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    wr_id: u64,
    what: &'static str,
    check: Check,
}

struct QpState {
    transport: Transport,
    seq: u64,
    sends: u64,
    write_imms: u64,
    /// The atomic counter as it must be once every posted atomic has run.
    model: u64,
    pending: VecDeque<Pending>,
    /// Failed: no more posting; its pending work flushes.
    dead: bool,
    /// The last successful completion (or the start): the last sign that
    /// the peer was there.
    last_ok: Instant,
}

struct Client {
    side: Side,
    layout: Layout,
    mtu: usize,
    remote_addr: u64,
    rkey: u32,
    remote_qpns: Vec<u32>,
    ah: Option<AddressHandle>,
    qps: Vec<QpState>,
    rng: SmallRng,
    /// How long each failed RC QP went without a completion before its
    /// error, in milliseconds.
    silences: Vec<f64>,
    /// The status each failed QP failed with first, and how many work
    /// requests completed after that (flushed or otherwise).
    first_errors: std::collections::BTreeMap<String, u64>,
    flushed: u64,
    after_death: u64,
    ops: u64,
    bytes_checked: u64,
    data_errors: u64,
    errors: u64,
    told: u32,
}

/// Runs the client; true if nothing went wrong.
pub fn run(args: &Args, server: IpAddr) -> Result<bool, String> {
    if args.qps == 0 || args.transports.is_empty() {
        return Err("--qps and --transports must name at least one QP".into());
    }
    if args.depth < 2 || args.depth > 256 {
        return Err(format!("--depth {}: want 2 to 256", args.depth));
    }
    let mtu = mtu_of(args.mtu)?;
    if args.max_size < 16 || args.max_size > 1 << 20 {
        return Err(format!("--max-size {}: want 16 to 1 MiB", args.max_size));
    }
    let seed = args.seed.unwrap_or_else(rand::random);
    let layout = Layout {
        slot: args.max_size.div_ceil(8) * 8,
        depth: args.depth,
        recvs: 2 * args.depth,
    };
    let transports: Vec<Transport> = (0..args.qps)
        .map(|i| args.transports[i % args.transports.len()])
        .collect();
    let side = Side::open(args.addr, args.faults, &transports, &layout)?;
    let mut ch = connect_tcp(SocketAddr::new(server, args.port), wait_limit(args))?;
    let mine: Vec<Qp> = side
        .qps
        .iter()
        .map(|q| {
            let e = q.endpoint();
            Qp {
                qpn: e.qpn,
                psn: e.psn,
            }
        })
        .collect();
    ch.send(&Hello {
        transports: transports.clone(),
        slot: layout.slot,
        depth: layout.depth,
        recvs: layout.recvs,
        mtu: args.mtu,
        gid: gid_of(args.addr).to_string(),
        qps: mine,
    })?;
    let w: Welcome = ch.recv("QPs")?;
    if w.qps.len() != transports.len() {
        return Err("the server made a different number of QPs".into());
    }
    let sgid: std::net::Ipv6Addr = w
        .gid
        .parse()
        .map_err(|_| format!("the server's GID {:?} does not parse", w.gid))?;
    let o = ConnectOptions {
        mtu,
        timeout: args.timeout,
        retry_cnt: args.retry,
        qkey: QKEY,
        ..ConnectOptions::default()
    };
    for (i, qp) in side.qps.iter().enumerate() {
        let remote = Endpoint {
            lid: 0,
            qpn: w.qps[i].qpn,
            psn: w.qps[i].psn,
            gid: sgid,
        };
        qp.connect(&remote, &o)
            .map_err(|e| format!("connect QP {i}: {e}"))?;
    }
    let ah = if transports.contains(&Transport::Ud) {
        Some(
            side.pd
                .create_ah(AddressVector::to(server))
                .map_err(|e| format!("create_ah: {e}"))?,
        )
    } else {
        None
    };
    let mut c = Client {
        layout,
        mtu: mtu.bytes(),
        remote_addr: w.addr,
        rkey: w.rkey,
        remote_qpns: w.qps.iter().map(|q| q.qpn).collect(),
        ah,
        qps: transports
            .iter()
            .map(|&t| QpState {
                transport: t,
                seq: 0,
                sends: 0,
                write_imms: 0,
                model: 0,
                pending: VecDeque::new(),
                dead: false,
                last_ok: Instant::now(),
            })
            .collect(),
        rng: SmallRng::seed_from_u64(seed),
        silences: Vec::new(),
        first_errors: Default::default(),
        flushed: 0,
        after_death: 0,
        ops: 0,
        bytes_checked: 0,
        data_errors: 0,
        errors: 0,
        told: 0,
        side,
    };
    let budget_time = match (args.time, args.ops) {
        (Some(t), _) => Some(Duration::from_secs_f64(t.max(0.0))),
        (None, Some(_)) => None,
        (None, None) => Some(Duration::from_secs(10)),
    };
    eprintln!(
        "rxe stress: {} QPs ({}) to {server}, seed {seed}, sizes up to {} bytes, MTU {}",
        transports.len(),
        args.transports
            .iter()
            .map(|t| format!("{t:?}").to_lowercase())
            .collect::<Vec<_>>()
            .join(","),
        layout.slot,
        args.mtu
    );
    let start = footprint();
    let t0 = Instant::now();
    let every = (args.report_every > 0.0).then(|| Duration::from_secs_f64(args.report_every));
    let mut next_report = every.map(|e| t0 + e);
    let mut posted = 0u64;
    let mut wcs = Vec::with_capacity(256);
    loop {
        if let (Some(at), Some(e)) = (next_report, every) {
            if Instant::now() >= at {
                let f = footprint();
                println!(
                    "stress: t={:.0}s ops={} bytes_checked={} data_errors={} errors={} \
                     retransmissions={} mem_kib={} fds={}",
                    t0.elapsed().as_secs_f64(),
                    c.ops,
                    c.bytes_checked,
                    c.data_errors,
                    c.errors,
                    c.side.ctx.counters().retransmitted_pkts,
                    f.0,
                    f.1
                );
                next_report = Some(at + e);
            }
        }
        let out_of_budget =
            budget_time.is_some_and(|b| t0.elapsed() >= b) || args.ops.is_some_and(|n| posted >= n);
        if !out_of_budget {
            for qi in 0..c.qps.len() {
                if args.ops.is_some_and(|n| posted >= n) {
                    break;
                }
                posted += c.post_one(qi)?;
            }
        }
        let in_flight: usize = c.qps.iter().map(|q| q.pending.len()).sum();
        if out_of_budget && in_flight == 0 {
            break;
        }
        let rc = || c.qps.iter().filter(|q| q.transport == Transport::Rc);
        if rc().count() > 0 && rc().all(|q| q.dead && q.pending.is_empty()) {
            eprintln!("rxe stress: every RC QP failed: stopping");
            break;
        }
        wcs.clear();
        if c.side.cq.poll_into(&mut wcs, 256) == 0 {
            match c.side.cq.wait(1, Duration::from_millis(5)) {
                Ok(v) => wcs.extend(v),
                Err(_) if out_of_budget && t0.elapsed() > budget_after(budget_time, args) => {
                    return Err(format!(
                        "{in_flight} operations still outstanding {:?} after the end",
                        wait_limit(args)
                    ));
                }
                Err(_) => {}
            }
        }
        for wc in std::mem::take(&mut wcs) {
            c.complete(&wc)?;
        }
    }
    let elapsed = t0.elapsed();
    let end = footprint();
    let done = Done {
        sends: c.qps.iter().map(|q| q.sends).collect(),
        write_imms: c.qps.iter().map(|q| q.write_imms).collect(),
    };
    // A server that died (the peer-death test kills it) cannot tally: its
    // share of the line is zeros and the run has failed.
    let (t, peer) = match ch.send(&done).and_then(|()| ch.recv::<Tally>("tally")) {
        Ok(t) => (t, "ok"),
        Err(e) => {
            eprintln!("rxe stress: no tally from the server: {e}");
            (Tally::default(), "gone")
        }
    };
    if !c.silences.is_empty() {
        let budget = rc_budget_ms(args.timeout, args.retry);
        let lo = c.silences.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = c.silences.iter().copied().fold(0.0, f64::max);
        let firsts: Vec<String> = c
            .first_errors
            .iter()
            .map(|(k, v)| format!("{k}:{v}"))
            .collect();
        println!(
            "stress: dead_rc_qps={} first_errors={} flushed={} other_after={} \
             silence_ms={lo:.0}..{hi:.0} retry_budget_ms={budget:.0} (timeout {} and retry {})",
            c.silences.len(),
            firsts.join(","),
            c.flushed,
            c.after_death,
            args.timeout,
            args.retry
        );
    }
    let retrans = c.side.ctx.counters().retransmitted_pkts;
    let data_errors = c.data_errors + t.data_errors;
    let errors = c.errors + t.errors;
    println!(
        "stress: ops={} bytes_checked={} data_errors={} errors={} rc_missing={} lost={} \
         overtaken={} retransmissions={} mem_kib={}->{} fds={}->{} peer_mem_kib={}->{} \
         peer_fds={}->{} peer={peer} elapsed={:.1}s seed={seed}",
        c.ops,
        c.bytes_checked + t.bytes_checked,
        data_errors,
        errors,
        t.rc_missing,
        t.lost,
        t.overtaken,
        retrans + t.retransmissions,
        start.0,
        end.0,
        start.1,
        end.1,
        t.mem_kib.0,
        t.mem_kib.1,
        t.fds.0,
        t.fds.1,
        elapsed.as_secs_f64()
    );
    if let Some(f) = c.side.ctx.fault_counters() {
        eprintln!(
            "rxe stress: faults injected here: {} of {} packets dropped, {} duplicated, {} reordered, {} corrupted",
            f.dropped, f.packets, f.duplicated, f.reordered, f.corrupted
        );
    }
    Ok(data_errors == 0 && errors == 0 && t.rc_missing == 0 && peer == "ok")
}

/// What IBTA's timer gives a requester before it reports a retry-exceeded
/// error: the first try and `retry` retries, each waiting 4.096 µs ×
/// 2^`timeout`.
pub fn rc_budget_ms(timeout: u8, retry: u8) -> f64 {
    4.096e-3 * f64::from(1u32 << timeout.min(31)) * f64::from(u32::from(retry) + 1)
}

/// How long after the start the client waits for the last completions.
fn budget_after(budget: Option<Duration>, args: &Args) -> Duration {
    budget.unwrap_or(Duration::from_secs(3600)) + wait_limit(args)
}

fn connect_tcp(to: SocketAddr, limit: Duration) -> Result<Channel, String> {
    let until = Instant::now() + limit;
    loop {
        match TcpStream::connect_timeout(&to, Duration::from_millis(500)) {
            Ok(s) => return Channel::new(s, limit).map_err(|e| e.to_string()),
            Err(e) if Instant::now() > until => {
                return Err(format!("connect to the server at {to}: {e}"))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// A message length: often at the edges of the MTU `m`, otherwise
/// anywhere from `min` to `max`.
fn size(rng: &mut SmallRng, m: usize, min: usize, max: usize) -> usize {
    let edges = [0, 1, 15, 16, 17, m - 1, m, m + 1, 2 * m, 3 * m - 1, max];
    let len = if rng.gen_bool(0.3) {
        edges[rng.gen_range(0..edges.len())]
    } else {
        rng.gen_range(min..=max)
    };
    len.clamp(min, max)
}

/// The operations of a transport, with their weights.
const RC_MIX: &[(Op, u32)] = &[
    (Op::Send, 20),
    (Op::SendImm, 5),
    (Op::WriteBack, 20),
    (Op::Read, 15),
    (Op::WriteImm, 15),
    (Op::FetchAdd, 12),
    (Op::CmpSwap, 13),
];
const UC_MIX: &[(Op, u32)] = &[(Op::Send, 60), (Op::WriteImm, 40)];
const UD_MIX: &[(Op, u32)] = &[(Op::Send, 100)];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Send,
    SendImm,
    WriteBack,
    Read,
    WriteImm,
    FetchAdd,
    CmpSwap,
}

impl Client {
    fn wr_id(qi: usize, seq: u64) -> u64 {
        ((qi as u64) << 40) | (seq & 0xff_ffff_ffff)
    }

    /// Posts the next operation on QP `qi` if it has room; how many work
    /// requests it posted.
    fn post_one(&mut self, qi: usize) -> Result<u64, String> {
        let q = &self.qps[qi];
        if q.dead || q.pending.len() + 2 > self.layout.depth {
            return Ok(0);
        }
        let mix = match q.transport {
            Transport::Rc => RC_MIX,
            Transport::Uc => UC_MIX,
            Transport::Ud => UD_MIX,
        };
        let total: u32 = mix.iter().map(|m| m.1).sum();
        let mut pick = self.rng.gen_range(0..total);
        let op = mix
            .iter()
            .find(|m| {
                if pick < m.1 {
                    true
                } else {
                    pick -= m.1;
                    false
                }
            })
            .map_or(Op::Send, |m| m.0);
        let l = self.layout;
        let seq = self.qps[qi].seq;
        let at = l.local(qi, seq);
        let mr = &self.side.mr;
        let base = self.remote_addr;
        let remote = |off: usize| base + off as u64;
        let mut wrs: Vec<(SendWr, &'static str, Check)> = Vec::new();
        match op {
            Op::Send | Op::SendImm => {
                let t = self.qps[qi].transport;
                let (min, max) = match t {
                    Transport::Rc => (0, l.slot),
                    Transport::Uc => (16, l.slot),
                    Transport::Ud => (16, l.slot.min(self.mtu)),
                };
                let len = size(&mut self.rng, self.mtu, min, max);
                let no = self.qps[qi].sends;
                self.qps[qi].sends += 1;
                let mut buf = vec![0u8; len];
                if len >= 16 {
                    buf[0..8].copy_from_slice(&no.to_le_bytes());
                    buf[8..16].copy_from_slice(&(len as u64).to_le_bytes());
                    pattern::fill(pattern::key(qi, Class::Send, no), 16, &mut buf[16..]);
                } else {
                    pattern::fill(pattern::key(qi, Class::Send, no), 0, &mut buf);
                }
                mr.write(at, &buf).map_err(|e| e.to_string())?;
                let sge = mr.sge(at..at + len);
                let mut wr = match (&self.ah, t) {
                    (Some(ah), Transport::Ud) => {
                        ah.send(Self::wr_id(qi, seq), &[sge], self.remote_qpns[qi], QKEY)
                    }
                    _ => {
                        let mut wr = SendWr::new(Self::wr_id(qi, seq), SendOpcode::Send);
                        wr.sg_list = vec![sge];
                        wr
                    }
                };
                if op == Op::SendImm {
                    wr.opcode = SendOpcode::SendWithImm;
                    wr.imm_data = no as u32;
                }
                wrs.push((wr, "SEND", Check::Nothing));
            }
            Op::WriteBack => {
                let len = size(&mut self.rng, self.mtu, 0, l.slot);
                let key = pattern::key(qi, Class::WriteBack, seq);
                let mut buf = vec![0u8; len];
                pattern::fill(key, 0, &mut buf);
                mr.write(at, &buf).map_err(|e| e.to_string())?;
                let target = remote(l.back(qi, seq));
                let mut w = SendWr::new(Self::wr_id(qi, seq), SendOpcode::RdmaWrite);
                w.sg_list = vec![mr.sge(at..at + len)];
                w.remote_addr = target;
                w.rkey = self.rkey;
                let at2 = l.local(qi, seq + 1);
                let mut r = SendWr::new(Self::wr_id(qi, seq + 1), SendOpcode::RdmaRead);
                r.sg_list = vec![mr.sge(at2..at2 + len)];
                r.remote_addr = target;
                r.rkey = self.rkey;
                // Stale bytes in the destination must not pass for the READ's.
                mr.write(at2, &vec![0xa5; len]).map_err(|e| e.to_string())?;
                wrs.push((w, "WRITE", Check::Nothing));
                wrs.push((
                    r,
                    "READ-back",
                    Check::Bytes {
                        key,
                        start: 0,
                        at: at2,
                        len,
                    },
                ));
            }
            Op::Read => {
                let len = size(&mut self.rng, self.mtu, 0, l.slot);
                let off = self.rng.gen_range(0..=l.slot - len);
                mr.write(at, &vec![0x5a; len]).map_err(|e| e.to_string())?;
                let mut r = SendWr::new(Self::wr_id(qi, seq), SendOpcode::RdmaRead);
                r.sg_list = vec![mr.sge(at..at + len)];
                r.remote_addr = remote(l.fixed(qi) + off);
                r.rkey = self.rkey;
                let key = pattern::key(qi, Class::Static, 0);
                wrs.push((
                    r,
                    "READ",
                    Check::Bytes {
                        key,
                        start: off,
                        at,
                        len,
                    },
                ));
            }
            Op::WriteImm => {
                let len = size(&mut self.rng, self.mtu, 16, l.slot);
                let no = self.qps[qi].write_imms;
                self.qps[qi].write_imms += 1;
                let mut buf = vec![0u8; len];
                buf[0..8].copy_from_slice(&no.to_le_bytes());
                buf[8..16].copy_from_slice(&(len as u64).to_le_bytes());
                pattern::fill(pattern::key(qi, Class::WriteImm, no), 16, &mut buf[16..]);
                mr.write(at, &buf).map_err(|e| e.to_string())?;
                let mut w = SendWr::new(Self::wr_id(qi, seq), SendOpcode::RdmaWriteWithImm);
                w.sg_list = vec![mr.sge(at..at + len)];
                w.remote_addr = remote(l.imm(qi, no));
                w.rkey = self.rkey;
                w.imm_data = no as u32;
                wrs.push((w, "WRITE with immediate", Check::Nothing));
            }
            Op::FetchAdd | Op::CmpSwap => {
                let expect = self.qps[qi].model;
                let mut a = SendWr::new(Self::wr_id(qi, seq), SendOpcode::AtomicFetchAdd);
                if op == Op::FetchAdd {
                    let add = self.rng.gen_range(1..1u64 << 40);
                    a.compare_add = add;
                    self.qps[qi].model = expect.wrapping_add(add);
                } else {
                    let hit = self.rng.gen_bool(0.5);
                    let swap: u64 = self.rng.gen();
                    a.opcode = SendOpcode::AtomicCmpSwap;
                    a.compare_add = if hit { expect } else { expect ^ 1 };
                    a.swap = swap;
                    if hit {
                        self.qps[qi].model = swap;
                    }
                }
                mr.write(at, &[0xee; 8]).map_err(|e| e.to_string())?;
                a.sg_list = vec![mr.sge(at..at + 8)];
                a.remote_addr = remote(l.atomic(qi));
                a.rkey = self.rkey;
                let what = if op == Op::FetchAdd {
                    "FETCH_ADD"
                } else {
                    "CMP_SWAP"
                };
                wrs.push((a, what, Check::Atomic { at, expect }));
            }
        }
        let n = wrs.len() as u64;
        let q = &mut self.qps[qi];
        q.seq += n;
        let (list, meta): (Vec<SendWr>, Vec<_>) =
            wrs.into_iter().map(|(w, what, c)| (w, (what, c))).unzip();
        for (w, (what, check)) in list.iter().zip(meta) {
            q.pending.push_back(Pending {
                wr_id: w.wr_id,
                what,
                check,
            });
        }
        self.side.qps[qi]
            .post_send(&list)
            .map_err(|e| format!("post_send on QP {qi}: {e}"))?;
        Ok(n)
    }

    fn data_error(&mut self, what: String) {
        self.data_errors += 1;
        if self.told < 10 {
            self.told += 1;
            eprintln!("rxe stress: data error: {what}");
        }
    }

    fn complete(&mut self, wc: &Completion) -> Result<(), String> {
        let qi = (wc.wr_id >> 40) as usize;
        let Some(q) = self.qps.get_mut(qi) else {
            return Err(format!(
                "a completion with an unknown wr_id {:#x}",
                wc.wr_id
            ));
        };
        let t = q.transport;
        let Some(p) = q.pending.pop_front() else {
            return Err(format!("QP {qi}: a completion with nothing outstanding"));
        };
        if p.wr_id != wc.wr_id {
            return Err(format!(
                "QP {qi} ({t:?}): completion of wr_id {:#x} where {:#x} ({}) was next: out of order",
                wc.wr_id, p.wr_id, p.what
            ));
        }
        if q.dead {
            match wc.status {
                WcStatus::WrFlushErr => self.flushed += 1,
                _ => self.after_death += 1,
            }
            return Ok(());
        }
        if wc.status != WcStatus::Success {
            {
                q.dead = true;
                self.errors += 1;
                *self
                    .first_errors
                    .entry(format!("{:?}", wc.status))
                    .or_default() += 1;
                let silence = q.last_ok.elapsed().as_secs_f64() * 1e3;
                if t == Transport::Rc {
                    self.silences.push(silence);
                }
                eprintln!(
                    "rxe stress: QP {qi} ({t:?}) {} failed: {:?} after {silence:.0} ms without \
                     a completion; the QP is done",
                    p.what, wc.status
                );
            }
            return Ok(());
        }
        q.last_ok = Instant::now();
        self.ops += 1;
        match p.check {
            Check::Nothing => {}
            Check::Bytes {
                key,
                start,
                at,
                len,
            } => {
                let mut buf = vec![0u8; len];
                self.side.mr.read(at, &mut buf).map_err(|e| e.to_string())?;
                match pattern::first_wrong(key, start, &buf) {
                    None => self.bytes_checked += len as u64,
                    Some(i) => self.data_error(format!(
                        "QP {qi} ({t:?}) {} of {len} bytes: byte {i} is wrong",
                        p.what
                    )),
                }
            }
            Check::Atomic { at, expect } => {
                let mut b = [0u8; 8];
                self.side.mr.read(at, &mut b).map_err(|e| e.to_string())?;
                let got = u64::from_ne_bytes(b);
                if got == expect {
                    self.bytes_checked += 8;
                } else {
                    self.data_error(format!(
                        "QP {qi} {}: original value {got:#x}, the model says {expect:#x}",
                        p.what
                    ));
                }
            }
        }
        Ok(())
    }
}
