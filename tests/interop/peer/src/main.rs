//! rxe-interop-peer: the rxe-rs side of the interop suite against the
//! kernel's rdma_rxe (tests/interop/run.sh).
//!
//! It is the counterpart of `tests/interop/guest/rxe_peer.c` and speaks the
//! same protocol; see the comment at the top of that file for the plans, the
//! steps and the out-of-band exchange. One side is the requester (`-R`), the
//! other the responder (`-S`); each checks what it can see (completions,
//! statuses, immediate data, memory byte for byte, counters) and prints
//!
//! ```text
//! RESULT <step> PASS|FAIL <R|S> <detail> (peer: PASS|FAIL)
//! ```
//!
//! At the end it prints the engine's counters (`COUNTERS impl=rxe-rs ...`,
//! drops by reason included) and fails if any incoming packet had a bad
//! ICRC or was malformed, or if ICRCs went unverified (it must run with
//! CAP_NET_RAW so that the raw socket sees every IPv4 header).
//!
//! Usage: rxe-interop-peer -R|-S [-P ops|loss|ucud|ext] -d <local IPv4> [-m 1024]
//!        [--port-mtu 1024] [-p 18516] [-t seconds] [server_ipv4]

use rxe_verbs::*;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, Ipv6Addr, TcpListener, TcpStream};
use std::process::ExitCode;
use std::time::{Duration, Instant};

const MR_LEN: usize = 4 << 20;
const NQP: usize = 3;
const GUARD: u8 = 0xEE;

const OFF_SRC: usize = 0x000000;
const OFF_RECV: usize = 0x010000;
const OFF_SHORT: usize = 0x030000;
const OFF_WRITE: usize = 0x040000;
const OFF_READSRC: usize = 0x060000;
const OFF_READDST: usize = 0x080000;
const OFF_BADW: usize = 0x0a0000;
const OFF_ATOMIC: usize = 0x0f0000;
const OFF_ATRES: usize = 0x0f0100;
const OFF_LOSS_S: usize = 0x100000;
const OFF_LOSS_R: usize = 0x200000;
const LOSS_N: usize = 8;
const LOSS_LEN: usize = 65536;

const MIN_RNR_TIMER: u8 = 24;
/// Q_Key of the UD QP of the ucud plan.
const UD_QKEY: u32 = 0x1111_1111;
/// The GRH area in front of a UD receive.
const GRH_LEN: usize = 40;
const RNR_HOLD: Duration = Duration::from_millis(800);

/// The data pattern shared with rxe_peer.c (xorshift32 seeded per step).
fn pattern(n: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761);
    if x == 0 {
        x = 0x9e37_79b9;
    }
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

fn first_diff(a: &[u8], b: &[u8]) -> Option<usize> {
    a.iter().zip(b).position(|(x, y)| x != y)
}

#[derive(Debug, Clone)]
struct Peer {
    role: char,
    imp: String,
    plan: String,
    mtu: u32,
    gid: Ipv6Addr,
    addr: u64,
    rkey: u32,
    qpn: [u32; NQP],
    psn: [u32; NQP],
}

impl Peer {
    fn line(&self) -> String {
        let gid: String = self
            .gid
            .octets()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        format!(
            "RXEPEER1 role={} impl={} plan={} mtu={} gid={} addr={:x} rkey={:x} qpn={:x},{:x},{:x} psn={:x},{:x},{:x}",
            self.role, self.imp, self.plan, self.mtu, gid, self.addr, self.rkey,
            self.qpn[0], self.qpn[1], self.qpn[2], self.psn[0], self.psn[1], self.psn[2]
        )
    }

    fn parse(line: &str) -> Result<Peer, String> {
        let bad = || format!("bad peer line {line:?}");
        let mut words = line.split_whitespace();
        if words.next() != Some("RXEPEER1") {
            return Err(bad());
        }
        let kv: BTreeMap<&str, &str> = words.filter_map(|w| w.split_once('=')).collect();
        let get = |k: &str| kv.get(k).copied().ok_or_else(bad);
        let hex = |s: &str| u64::from_str_radix(s, 16).map_err(|_| bad());
        let three = |s: &str| -> Result<[u32; NQP], String> {
            let v: Vec<u32> = s
                .split(',')
                .map(|x| u32::from_str_radix(x, 16).map_err(|_| bad()))
                .collect::<Result<_, _>>()?;
            v.try_into().map_err(|_| bad())
        };
        let g = get("gid")?;
        if g.len() != 32 {
            return Err(bad());
        }
        let mut raw = [0u8; 16];
        for (i, b) in raw.iter_mut().enumerate() {
            *b = u8::from_str_radix(&g[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
        }
        Ok(Peer {
            role: get("role")?.chars().next().ok_or_else(bad)?,
            imp: get("impl")?.to_string(),
            plan: get("plan")?.to_string(),
            mtu: get("mtu")?.parse().map_err(|_| bad())?,
            gid: Ipv6Addr::from(raw),
            addr: hex(get("addr")?)?,
            rkey: hex(get("rkey")?)? as u32,
            qpn: three(get("qpn")?)?,
            psn: three(get("psn")?)?,
        })
    }
}

/// The out-of-band channel: text lines over TCP.
struct Oob {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

impl Oob {
    fn send(&mut self, s: &str) {
        if let Err(e) = self.w.write_all(format!("{s}\n").as_bytes()) {
            die(&format!("out-of-band write: {e}"));
        }
    }
    fn recv(&mut self) -> String {
        let mut l = String::new();
        match self.r.read_line(&mut l) {
            Ok(0) | Err(_) => die("out-of-band read: peer closed the connection"),
            Ok(_) => l.trim_end_matches('\n').to_string(),
        }
    }
    fn sync(&mut self, step: &str) {
        self.send(&format!("S {step}"));
        let l = self.recv();
        if l != format!("S {step}") {
            die(&format!("out of step: expected \"S {step}\", got {l:?}"));
        }
    }
}

fn die(msg: &str) -> ! {
    eprintln!("rxe-interop-peer: {msg}");
    std::process::exit(2);
}

/// Counters as (name, value), the engine's names.
fn counter_list(c: &rxe_core::engine::Counters) -> Vec<(String, u64)> {
    let mut v = vec![
        ("sent_pkts".to_string(), c.sent_pkts),
        ("rcvd_pkts".into(), c.rcvd_pkts),
        ("retransmitted_pkts".into(), c.retransmitted_pkts),
        ("duplicate_request".into(), c.duplicate_request),
        ("out_of_seq_request".into(), c.out_of_seq_request),
        ("send_seq_err".into(), c.send_seq_err),
        ("rcvd_seq_err".into(), c.rcvd_seq_err),
        ("rcvd_rnr_err".into(), c.rcvd_rnr_err),
        ("send_rnr_err".into(), c.send_rnr_err),
        ("retry_timeouts".into(), c.retry_timeouts),
        ("tail_probes".into(), c.tail_probes),
        ("retry_exceeded_err".into(), c.retry_exceeded_err),
        ("retry_rnr_exceeded_err".into(), c.retry_rnr_exceeded_err),
        ("ack_deferred".into(), c.ack_deferred),
        ("send_err".into(), c.send_err),
        ("icrc_unverified".into(), c.icrc_unverified),
        ("rdma_sends".into(), c.rdma_sends),
        ("rdma_recvs".into(), c.rdma_recvs),
    ];
    for (why, n) in &c.drops {
        v.push((format!("drop_{why:?}"), *n));
    }
    for (what, n) in &c.malformed {
        v.push((format!("malformed_{what}"), *n));
    }
    v
}

fn delta(a: &[(String, u64)], b: &[(String, u64)]) -> String {
    let before: BTreeMap<&str, u64> = a.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    b.iter()
        .filter_map(|(k, v)| {
            let d = v - before.get(k.as_str()).copied().unwrap_or(0);
            (d != 0).then(|| format!(" {k}+{d}"))
        })
        .collect()
}

fn get(c: &[(String, u64)], name: &str) -> u64 {
    c.iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| *v)
        .unwrap_or(0)
}

struct Run {
    role: char,
    them: Peer,
    ctx: Context,
    mr: MemoryRegion,
    cq: CompletionQueue,
    qps: Vec<QueuePair>,
    /// ucud plan: to the peer's UD QP.
    ah: Option<AddressHandle>,
    /// The QP step_send / step_write use (0, but in the ucud plan).
    step_q: usize,
    oob: Oob,
    timeout: Duration,
    failures: u32,
    // the current step
    ok: bool,
    detail: Vec<String>,
}

impl Run {
    fn counters(&self) -> Vec<(String, u64)> {
        counter_list(&self.ctx.counters())
    }

    fn begin(&mut self, step: &str) {
        self.ok = true;
        self.detail.clear();
        let what = if self.role == 'R' {
            "requester"
        } else {
            "responder"
        };
        println!("--- {step} ({what})");
    }
    fn fail(&mut self, s: String) {
        self.ok = false;
        self.detail.push(s);
    }
    fn note(&mut self, s: String) {
        self.detail.push(s);
    }
    fn verdict(&self) -> &'static str {
        if self.ok {
            "PASS"
        } else {
            "FAIL"
        }
    }

    /// Ends a step: verdicts are exchanged, the requester's first, so that
    /// the responder's `after` (memory checks) runs once the requester's
    /// operations have completed.
    fn finish(&mut self, step: &str, after: impl FnOnce(&mut Run)) {
        let line = if self.role == 'R' {
            self.oob.send(&format!("R {step} {}", self.verdict()));
            self.oob.recv()
        } else {
            let l = self.oob.recv();
            after(self);
            self.oob.send(&format!("R {step} {}", self.verdict()));
            l
        };
        let peer_v = line.split_whitespace().nth(2).unwrap_or("?").to_string();
        let d = self.detail.join("; ");
        println!(
            "RESULT {step} {} {} {d}{}(peer: {peer_v})",
            self.verdict(),
            self.role,
            if d.is_empty() { "" } else { " " }
        );
        if !self.ok {
            self.failures += 1;
        }
    }

    fn write(&self, off: usize, data: &[u8]) {
        self.mr.write(off, data).expect("write the MR");
    }
    fn fill(&self, off: usize, len: usize, b: u8) {
        self.write(off, &vec![b; len]);
    }
    fn read(&self, off: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        self.mr.read(off, &mut v).expect("read the MR");
        v
    }
    fn check_region(&mut self, what: &str, off: usize, len: usize, seed: u32, guard: usize) {
        let got = self.read(off, len + guard);
        if let Some(i) = first_diff(&got[..len], &pattern(len, seed)) {
            self.fail(format!("{what}: data differs at byte {i} of {len}"));
        }
        if let Some(i) = got[len..].iter().position(|&b| b != GUARD) {
            self.fail(format!("{what}: byte {i} past the end was written"));
        }
    }
    fn get_u64(&self, off: usize) -> u64 {
        u64::from_ne_bytes(self.read(off, 8).try_into().unwrap())
    }

    /// Collects `n` completions, or fewer at the deadline.
    fn wait_wc(&self, n: usize, t: Duration) -> Vec<Completion> {
        let end = Instant::now() + t;
        let mut out = Vec::new();
        while out.len() < n {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            if let Ok(v) = self.cq.wait(n - out.len(), left) {
                out.extend(v);
            }
        }
        out
    }

    fn print_wc(who: &str, w: &Completion) {
        let mut s = format!(
            "  {who} wc: qp {:#08x} wr_id {} status {} opcode {:?} byte_len {}",
            w.qp_num,
            w.wr_id,
            w.status.ibv_name(),
            w.opcode,
            w.byte_len
        );
        if let Some(i) = w.imm_data {
            s += &format!(" imm {i:#010x}");
        }
        println!("{s}");
    }

    fn post_recv(&self, q: usize, off: usize, len: usize, id: u64) {
        let wr = RecvWr {
            wr_id: id,
            sg_list: vec![self.mr.sge(off..off + len)],
        };
        self.qps[q].post_recv(&[wr]).expect("post_recv");
    }

    #[allow(clippy::too_many_arguments)]
    fn post_send(
        &self,
        q: usize,
        id: u64,
        op: SendOpcode,
        off: usize,
        len: usize,
        imm: u32,
        raddr: u64,
        rkey: u32,
        cmp_add: u64,
        swap: u64,
    ) {
        let sge = [self.mr.sge(off..off + len)];
        let mut wr = match &self.ah {
            Some(ah) if self.qps[q].qp_type() == QpType::Ud => {
                let mut w = ah.send(id, &sge, self.them.qpn[q], UD_QKEY);
                w.opcode = op;
                w
            }
            _ => {
                let mut w = SendWr::new(id, op);
                w.sg_list = sge.to_vec();
                w
            }
        };
        wr.imm_data = imm;
        wr.remote_addr = raddr;
        wr.rkey = rkey;
        wr.compare_add = cmp_add;
        wr.swap = swap;
        self.qps[q].post_send(&[wr]).expect("post_send");
    }

    fn req_expect(&mut self, what: &str, st: WcStatus, op: WcOpcode) {
        let v = self.wait_wc(1, self.timeout);
        let Some(wc) = v.first() else {
            return self.fail(format!("{what}: no completion within {:?}", self.timeout));
        };
        Self::print_wc("requester", wc);
        if wc.status != st {
            self.fail(format!(
                "{what}: status {}, expected {}",
                wc.status.ibv_name(),
                st.ibv_name()
            ));
        } else if st == WcStatus::Success && wc.opcode != op {
            self.fail(format!("{what}: opcode {:?}, expected {op:?}", wc.opcode));
        }
    }

    fn resp_expect_recv(&mut self, what: &str, op: WcOpcode, len: u32, imm: Option<u32>) {
        let v = self.wait_wc(1, self.timeout);
        let Some(wc) = v.first() else {
            return self.fail(format!(
                "{what}: no receive completion within {:?}",
                self.timeout
            ));
        };
        Self::print_wc("responder", wc);
        if wc.status != WcStatus::Success {
            return self.fail(format!("{what}: status {}", wc.status.ibv_name()));
        }
        if wc.opcode != op {
            self.fail(format!("{what}: opcode {:?}, expected {op:?}", wc.opcode));
        }
        if wc.byte_len != len {
            self.fail(format!("{what}: byte_len {}, expected {len}", wc.byte_len));
        }
        match (wc.imm_data, imm) {
            (Some(g), Some(w)) if g != w => {
                self.fail(format!("{what}: imm {g:#010x}, expected {w:#010x}"))
            }
            (Some(_), None) => self.fail(format!("{what}: unexpected immediate data")),
            (None, Some(_)) => self.fail(format!("{what}: no immediate data")),
            _ => {}
        }
    }

    fn note_qp_state(&mut self, q: usize) {
        if let Ok(s) = self.qps[q].state() {
            self.note(format!("QP{q} {s:?}"));
        }
    }

    // ---- steps ------------------------------------------------------------

    fn step_send(&mut self, step: &str, len: usize, imm: Option<u32>, seed: u32) {
        self.begin(step);
        if self.role == 'S' {
            // UD: the first 40 bytes take the GRH
            let grh = if self.qps[self.step_q].qp_type() == QpType::Ud {
                GRH_LEN
            } else {
                0
            };
            self.fill(OFF_RECV, 0x20000, GUARD);
            self.post_recv(self.step_q, OFF_RECV, 0x20000 - 256, 1);
            self.oob.sync(step);
            self.resp_expect_recv(step, WcOpcode::Recv, (len + grh) as u32, imm);
            self.check_region("received data", OFF_RECV + grh, len, seed, 256);
        } else {
            self.write(OFF_SRC, &pattern(len, seed));
            self.oob.sync(step);
            let op = if imm.is_some() {
                SendOpcode::SendWithImm
            } else {
                SendOpcode::Send
            };
            self.post_send(
                self.step_q,
                2,
                op,
                OFF_SRC,
                len,
                imm.unwrap_or(0),
                0,
                0,
                0,
                0,
            );
            self.req_expect(step, WcStatus::Success, WcOpcode::Send);
        }
        self.finish(step, |_| {});
    }

    fn step_write(&mut self, step: &str, len: usize, imm: Option<u32>, seed: u32) {
        self.begin(step);
        if self.role == 'S' {
            self.fill(OFF_WRITE, 0x10000 + 256, GUARD);
            if imm.is_some() {
                self.post_recv(self.step_q, OFF_RECV, 64, 3);
            }
            self.oob.sync(step);
            if imm.is_some() {
                self.resp_expect_recv(step, WcOpcode::RecvRdmaWithImm, len as u32, imm);
            }
            self.finish(step, |r| {
                r.check_region("memory", OFF_WRITE, len, seed, 256)
            });
            return;
        }
        self.write(OFF_SRC, &pattern(len, seed));
        self.oob.sync(step);
        let op = if imm.is_some() {
            SendOpcode::RdmaWriteWithImm
        } else {
            SendOpcode::RdmaWrite
        };
        let (addr, rkey) = (self.them.addr + OFF_WRITE as u64, self.them.rkey);
        self.post_send(
            self.step_q,
            4,
            op,
            OFF_SRC,
            len,
            imm.unwrap_or(0),
            addr,
            rkey,
            0,
            0,
        );
        self.req_expect(step, WcStatus::Success, WcOpcode::RdmaWrite);
        self.finish(step, |_| {});
    }

    fn step_read(&mut self, step: &str, len: usize, seed: u32) {
        self.begin(step);
        if self.role == 'S' {
            self.write(OFF_READSRC, &pattern(len, seed));
            self.oob.sync(step);
        } else {
            self.fill(OFF_READDST, len + 256, GUARD);
            self.oob.sync(step);
            let (addr, rkey) = (self.them.addr + OFF_READSRC as u64, self.them.rkey);
            self.post_send(
                0,
                5,
                SendOpcode::RdmaRead,
                OFF_READDST,
                len,
                0,
                addr,
                rkey,
                0,
                0,
            );
            self.req_expect(step, WcStatus::Success, WcOpcode::RdmaRead);
            self.check_region("read data", OFF_READDST, len, seed, 256);
        }
        self.finish(step, |_| {});
    }

    #[allow(clippy::too_many_arguments)]
    fn step_atomic(
        &mut self,
        step: &str,
        fetch_add: bool,
        initial: Option<u64>,
        cmp_add: u64,
        swap: u64,
        want_old: u64,
        want_mem: u64,
    ) {
        self.begin(step);
        if self.role == 'S' {
            if let Some(v) = initial {
                self.write(OFF_ATOMIC, &v.to_ne_bytes());
            }
            self.oob.sync(step);
            self.finish(step, |r| {
                let v = r.get_u64(OFF_ATOMIC);
                if v != want_mem {
                    r.fail(format!("memory {v:#018x}, expected {want_mem:#018x}"));
                } else {
                    r.note(format!("memory {v:#018x}"));
                }
            });
            return;
        }
        self.write(OFF_ATRES, &0x5555_5555_5555_5555u64.to_ne_bytes());
        self.oob.sync(step);
        let (op, wop) = if fetch_add {
            (SendOpcode::AtomicFetchAdd, WcOpcode::FetchAdd)
        } else {
            (SendOpcode::AtomicCmpSwap, WcOpcode::CompSwap)
        };
        let (addr, rkey) = (self.them.addr + OFF_ATOMIC as u64, self.them.rkey);
        self.post_send(0, 6, op, OFF_ATRES, 8, 0, addr, rkey, cmp_add, swap);
        self.req_expect(step, WcStatus::Success, wop);
        let old = self.get_u64(OFF_ATRES);
        if old != want_old {
            self.fail(format!("returned {old:#018x}, expected {want_old:#018x}"));
        } else {
            self.note(format!("returned {old:#018x}"));
        }
        self.finish(step, |_| {});
    }

    fn step_rnr(&mut self, step: &str) {
        self.begin(step);
        let c0 = self.counters();
        if self.role == 'S' {
            self.fill(OFF_RECV, 1024, GUARD);
            self.oob.sync(step);
            std::thread::sleep(RNR_HOLD);
            self.post_recv(0, OFF_RECV, 512, 7);
            self.resp_expect_recv(step, WcOpcode::Recv, 64, None);
            self.check_region("received data", OFF_RECV, 64, 77, 256);
            let c1 = self.counters();
            println!("  responder counters:{}", delta(&c0, &c1));
            let n = get(&c1, "send_rnr_err") - get(&c0, "send_rnr_err");
            if n == 0 {
                self.fail("send_rnr_err did not grow".into());
            } else {
                self.note(format!("{n} RNR NAKs sent"));
            }
        } else {
            self.write(OFF_SRC, &pattern(64, 77));
            self.oob.sync(step);
            let t0 = Instant::now();
            self.post_send(0, 8, SendOpcode::Send, OFF_SRC, 64, 0, 0, 0, 0, 0);
            self.req_expect(step, WcStatus::Success, WcOpcode::Send);
            let dt = t0.elapsed();
            let c1 = self.counters();
            println!("  requester counters:{}", delta(&c0, &c1));
            let n = get(&c1, "rcvd_rnr_err") - get(&c0, "rcvd_rnr_err");
            if n == 0 {
                self.fail("rcvd_rnr_err did not grow".into());
            } else {
                self.note(format!(
                    "{n} RNR NAKs received, completed after {} ms",
                    dt.as_millis()
                ));
            }
        }
        self.finish(step, |_| {});
    }

    fn step_bad_rkey(&mut self, step: &str) {
        self.begin(step);
        if self.role == 'S' {
            self.fill(OFF_BADW, 4096, GUARD);
            self.oob.sync(step);
            self.finish(step, |r| {
                let got = r.read(OFF_BADW, 4096);
                if let Some(i) = got.iter().position(|&b| b != GUARD) {
                    r.fail(format!("byte {i} of the target was written"));
                }
                r.note_qp_state(1);
            });
            return;
        }
        self.write(OFF_SRC, &pattern(64, 88));
        self.oob.sync(step);
        let (addr, rkey) = (self.them.addr + OFF_BADW as u64, self.them.rkey ^ 0x5a5a00);
        self.post_send(
            1,
            9,
            SendOpcode::RdmaWrite,
            OFF_SRC,
            64,
            0,
            addr,
            rkey,
            0,
            0,
        );
        self.req_expect(step, WcStatus::RemAccessErr, WcOpcode::RdmaWrite);
        self.note_qp_state(1);
        self.finish(step, |_| {});
    }

    /// ATOMIC WRITE (plan ext): the requester stores `value` in the
    /// responder's atomic word, which held `initial`.
    fn step_atomic_write(&mut self, step: &str, initial: u64, value: u64) {
        self.begin(step);
        if self.role == 'S' {
            self.write(OFF_ATOMIC, &initial.to_ne_bytes());
            self.oob.sync(step);
            self.finish(step, |r| {
                let v = r.get_u64(OFF_ATOMIC);
                if v != value {
                    r.fail(format!("memory {v:#018x}, expected {value:#018x}"));
                } else {
                    r.note(format!("memory {v:#018x}"));
                }
            });
            return;
        }
        self.write(OFF_SRC, &value.to_ne_bytes());
        self.oob.sync(step);
        let (addr, rkey) = (self.them.addr + OFF_ATOMIC as u64, self.them.rkey);
        let op = SendOpcode::AtomicWrite;
        self.post_send(0, 10, op, OFF_SRC, 8, 0, addr, rkey, 0, 0);
        self.req_expect(step, WcStatus::Success, WcOpcode::AtomicWrite);
        self.finish(step, |_| {});
    }

    /// FLUSH (plan ext) on QP `q` of `len` bytes at the responder's WRITE
    /// target (or its whole region), with `placement` and the rkey xored
    /// with `key_xor`; the requester expects `want`, and a successful one
    /// to complete with the length asked for. The responder checks that
    /// no byte of its guard changed and says its QP's state.
    #[allow(clippy::too_many_arguments)]
    fn step_flush(
        &mut self,
        step: &str,
        q: usize,
        len: u32,
        placement: u8,
        whole_region: bool,
        key_xor: u32,
        want: WcStatus,
    ) {
        self.begin(step);
        if self.role == 'S' {
            self.fill(OFF_BADW, 4096, GUARD);
            self.oob.sync(step);
            self.finish(step, |r| {
                let got = r.read(OFF_BADW, 4096);
                if let Some(i) = got.iter().position(|&b| b != GUARD) {
                    r.fail(format!("byte {i} of the guard was written"));
                }
                r.note_qp_state(q);
            });
            return;
        }
        self.oob.sync(step);
        let mut wr = SendWr::new(11, SendOpcode::Flush);
        wr.remote_addr = self.them.addr + OFF_WRITE as u64;
        wr.rkey = self.them.rkey ^ key_xor;
        wr.flush = FlushParams {
            len,
            placement,
            whole_region,
        };
        self.qps[q].post_send(&[wr]).expect("post_send");
        let v = self.wait_wc(1, self.timeout);
        match v.first() {
            None => self.fail(format!("no completion within {:?}", self.timeout)),
            Some(wc) => {
                Self::print_wc("requester", wc);
                if wc.status != want {
                    self.fail(format!(
                        "status {}, expected {}",
                        wc.status.ibv_name(),
                        want.ibv_name()
                    ));
                } else if want == WcStatus::Success {
                    if wc.opcode != WcOpcode::Flush || wc.byte_len != len {
                        self.fail(format!(
                            "{:?} of {} bytes, expected Flush of {len}",
                            wc.opcode, wc.byte_len
                        ));
                    } else {
                        self.note(format!("flushed {len} bytes"));
                    }
                }
            }
        }
        self.note_qp_state(q);
        self.finish(step, |_| {});
    }

    /// The kernel's rxe NAKs a SEND longer than the receive with "remote
    /// operational error"; rxe-rs, like the spec, with "invalid request".
    fn step_too_long(&mut self, step: &str) {
        self.begin(step);
        if self.role == 'S' {
            self.fill(OFF_SHORT, 4096, GUARD);
            self.post_recv(2, OFF_SHORT, 256, 10);
            self.oob.sync(step);
            let v = self.wait_wc(1, self.timeout);
            match v.first() {
                None => self.fail("no completion for the receive".into()),
                Some(wc) => {
                    Self::print_wc("responder", wc);
                    self.note(format!("receive completed with {}", wc.status.ibv_name()));
                    if wc.status != WcStatus::LocLenErr {
                        self.fail(format!(
                            "receive status {}, expected IBV_WC_LOC_LEN_ERR",
                            wc.status.ibv_name()
                        ));
                    }
                }
            }
            let got = self.read(OFF_SHORT + 256, 4096 - 256);
            if let Some(i) = got.iter().position(|&b| b != GUARD) {
                self.fail(format!(
                    "byte {} past the 256-byte receive was written",
                    i + 256
                ));
            }
            self.note_qp_state(2);
            self.finish(step, |_| {});
            return;
        }
        self.write(OFF_SRC, &pattern(1000, 99));
        self.oob.sync(step);
        self.post_send(2, 11, SendOpcode::Send, OFF_SRC, 1000, 0, 0, 0, 0, 0);
        let want = if self.them.imp == "kernel" {
            WcStatus::RemOpErr
        } else {
            WcStatus::RemInvReqErr
        };
        self.req_expect(step, want, WcOpcode::Send);
        self.note_qp_state(2);
        self.finish(step, |_| {});
    }

    fn loss_check(&mut self, what: &str, base: usize, seed0: u32) {
        for i in 0..LOSS_N {
            let got = self.read(base + i * LOSS_LEN, LOSS_LEN);
            if let Some(b) = first_diff(&got, &pattern(LOSS_LEN, seed0 + i as u32)) {
                self.fail(format!("{what} {i}: data differs at byte {b}"));
            }
        }
    }

    fn loss_step(&mut self, step: &str, op: SendOpcode, seed0: u32) {
        self.begin(step);
        let c0 = self.counters();
        let t = self.timeout * 2;
        if self.role == 'S' {
            self.fill(OFF_LOSS_S, LOSS_N * LOSS_LEN, GUARD);
            for i in 0..LOSS_N {
                let off = OFF_LOSS_S + i * LOSS_LEN;
                match op {
                    SendOpcode::Send => self.post_recv(0, off, LOSS_LEN, 100 + i as u64),
                    SendOpcode::RdmaRead => self.write(off, &pattern(LOSS_LEN, seed0 + i as u32)),
                    _ => {}
                }
            }
            self.oob.sync(step);
            if op == SendOpcode::Send {
                let v = self.wait_wc(LOSS_N, t);
                if v.len() != LOSS_N {
                    self.fail(format!("{} of {LOSS_N} receives completed", v.len()));
                }
                for (i, wc) in v.iter().enumerate() {
                    if wc.status != WcStatus::Success
                        || wc.byte_len as usize != LOSS_LEN
                        || wc.wr_id != 100 + i as u64
                    {
                        Self::print_wc("responder", wc);
                        self.fail(format!(
                            "receive {i}: {}, {} bytes, wr_id {}",
                            wc.status.ibv_name(),
                            wc.byte_len,
                            wc.wr_id
                        ));
                    }
                }
                self.loss_check("receive", OFF_LOSS_S, seed0);
            }
            let _ = self.oob.recv(); // the requester is done: memory is final
            if op == SendOpcode::RdmaWrite {
                self.loss_check("write", OFF_LOSS_S, seed0);
            }
            let c1 = self.counters();
            println!("  responder counters:{}", delta(&c0, &c1));
            self.oob.send(&format!("R {step} {}", self.verdict()));
        } else {
            if op == SendOpcode::RdmaRead {
                self.fill(OFF_LOSS_R, LOSS_N * LOSS_LEN, GUARD);
            } else {
                for i in 0..LOSS_N {
                    self.write(
                        OFF_LOSS_R + i * LOSS_LEN,
                        &pattern(LOSS_LEN, seed0 + i as u32),
                    );
                }
            }
            self.oob.sync(step);
            let t0 = Instant::now();
            for i in 0..LOSS_N {
                let raddr = self.them.addr + (OFF_LOSS_S + i * LOSS_LEN) as u64;
                self.post_send(
                    0,
                    200 + i as u64,
                    op,
                    OFF_LOSS_R + i * LOSS_LEN,
                    LOSS_LEN,
                    0,
                    raddr,
                    self.them.rkey,
                    0,
                    0,
                );
            }
            let v = self.wait_wc(LOSS_N, t);
            if v.len() != LOSS_N {
                self.fail(format!("{} of {LOSS_N} work requests completed", v.len()));
            }
            for (i, wc) in v.iter().enumerate() {
                if wc.status != WcStatus::Success {
                    Self::print_wc("requester", wc);
                    self.fail(format!("wr {i}: {}", wc.status.ibv_name()));
                }
            }
            if op == SendOpcode::RdmaRead {
                self.loss_check("read", OFF_LOSS_R, seed0);
            }
            self.note(format!(
                "{LOSS_N} x {LOSS_LEN} bytes in {} ms",
                t0.elapsed().as_millis()
            ));
            let c1 = self.counters();
            println!("  requester counters:{}", delta(&c0, &c1));
            self.oob.send(&format!("R {step} {}", self.verdict()));
            let _ = self.oob.recv();
        }
        println!(
            "RESULT {step} {} {} {}",
            self.verdict(),
            self.role,
            self.detail.join("; ")
        );
        if !self.ok {
            self.failures += 1;
        }
    }
}

struct Args {
    role: char,
    plan: String,
    dev: Option<IpAddr>,
    mtu: u32,
    port_mtu: Option<u32>,
    port: u16,
    timeout: u64,
    server: Option<String>,
}

fn parse_args() -> Args {
    let mut a = Args {
        role: ' ',
        plan: "ops".into(),
        dev: None,
        mtu: 1024,
        port_mtu: None,
        port: 18516,
        timeout: 30,
        server: None,
    };
    let mut it = std::env::args().skip(1);
    let usage = "usage: rxe-interop-peer -R|-S [-P ops|loss] -d <local IP> [-m path_mtu] [--port-mtu bytes] [-p port] [-t s] [server]";
    while let Some(x) = it.next() {
        let mut val = |name: &str| {
            it.next()
                .unwrap_or_else(|| die(&format!("{name} needs a value\n{usage}")))
        };
        match x.as_str() {
            "-R" => a.role = 'R',
            "-S" => a.role = 'S',
            "-P" => a.plan = val("-P"),
            "-d" => {
                a.dev = Some(
                    val("-d")
                        .parse()
                        .unwrap_or_else(|_| die("-d wants an IP address")),
                )
            }
            "-m" => a.mtu = val("-m").parse().unwrap_or_else(|_| die(usage)),
            "--port-mtu" => {
                a.port_mtu = Some(val("--port-mtu").parse().unwrap_or_else(|_| die(usage)))
            }
            "-p" => a.port = val("-p").parse().unwrap_or_else(|_| die(usage)),
            "-t" => a.timeout = val("-t").parse().unwrap_or_else(|_| die(usage)),
            "-h" | "--help" => {
                println!("{usage}");
                std::process::exit(0);
            }
            s if !s.starts_with('-') && a.server.is_none() => a.server = Some(s.to_string()),
            _ => die(usage),
        }
    }
    if a.role == ' ' {
        die("say -R (requester) or -S (responder)");
    }
    if !["ops", "loss", "ucud", "ext"].contains(&a.plan.as_str()) {
        die(&format!("unknown plan {}", a.plan));
    }
    a
}

fn open_oob(a: &Args) -> TcpStream {
    match &a.server {
        None => {
            let l = TcpListener::bind(("0.0.0.0", a.port))
                .unwrap_or_else(|e| die(&format!("listen on {}: {e}", a.port)));
            println!("listening on TCP {}", a.port);
            l.accept()
                .unwrap_or_else(|e| die(&format!("accept: {e}")))
                .0
        }
        Some(s) => {
            let end = Instant::now() + Duration::from_secs(10);
            loop {
                match TcpStream::connect((s.as_str(), a.port)) {
                    Ok(t) => break t,
                    Err(e) if Instant::now() > end => die(&format!("connect {s}:{}: {e}", a.port)),
                    Err(_) => std::thread::sleep(Duration::from_millis(100)),
                }
            }
        }
    }
}

fn main() -> ExitCode {
    let a = parse_args();
    let addr = a.dev.unwrap_or_else(|| die("give -d <local IP address>"));
    let mtu = Mtu::from_bytes(a.mtu as usize).unwrap_or_else(|| die("bad -m"));
    let port_mtu = Mtu::from_bytes(a.port_mtu.unwrap_or(a.mtu) as usize)
        .unwrap_or_else(|| die("bad --port-mtu"));
    let ctx = Device::soft(addr)
        .with_mtu(port_mtu)
        .open()
        .unwrap_or_else(|e| die(&format!("open the device on {addr}: {e}")));
    println!(
        "device {} active_mtu {} path MTU {} receive mode {:?}",
        ctx.device().name(),
        ctx.query_port().active_mtu.bytes(),
        a.mtu,
        ctx.recv_mode()
    );
    let pd = ctx.alloc_pd().expect("alloc_pd");
    // The ext plan's FLUSHes need the global visibility right on the
    // region and the responder's QPs.
    let flush = if a.plan == "ext" {
        Access::FLUSH_GLOBAL
    } else {
        Access::empty()
    };
    let all = Access::LOCAL_WRITE
        | Access::REMOTE_WRITE
        | Access::REMOTE_READ
        | Access::REMOTE_ATOMIC
        | flush;
    let mr = pd.register(vec![GUARD; MR_LEN], all).expect("register MR");
    let cq = ctx.create_cq(256, None).expect("create_cq");
    let cap = QpCap {
        max_send_wr: 32,
        max_recv_wr: 32,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    // ucud plan: QP 0 is UC, QP 1 UD, QP 2 RC
    let ucud = a.plan == "ucud";
    let qps: Vec<QueuePair> = (0..NQP)
        .map(|q| {
            let t = match q {
                0 if ucud => QpType::Uc,
                1 if ucud => QpType::Ud,
                _ => QpType::Rc,
            };
            ctx.create_qp(&pd, &QpInitAttr::new(t, &cq, &cq).with_cap(cap))
                .expect("create_qp")
        })
        .collect();
    let eps: Vec<Endpoint> = qps.iter().map(|q| q.endpoint()).collect();
    let me = Peer {
        role: a.role,
        imp: "rxe-rs".into(),
        plan: a.plan.clone(),
        mtu: a.mtu,
        gid: eps[0].gid,
        addr: mr.addr(),
        rkey: mr.rkey(),
        qpn: [eps[0].qpn, eps[1].qpn, eps[2].qpn],
        psn: [eps[0].psn, eps[1].psn, eps[2].psn],
    };
    let sock = open_oob(&a);
    let mut oob = Oob {
        r: BufReader::new(sock.try_clone().expect("clone the socket")),
        w: sock,
    };
    oob.send(&me.line());
    let them = Peer::parse(&oob.recv()).unwrap_or_else(|e| die(&e));
    if them.role == me.role {
        die(&format!("both sides are {}", me.role));
    }
    if them.plan != me.plan {
        die(&format!(
            "plans differ: {} here, {} there",
            me.plan, them.plan
        ));
    }
    if them.mtu != me.mtu {
        die(&format!(
            "path MTUs differ: {} here, {} there",
            me.mtu, them.mtu
        ));
    }
    println!("local  {}", me.line());
    println!("remote {}", them.line());
    let opts = ConnectOptions {
        mtu,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        min_rnr_timer: MIN_RNR_TIMER,
        max_rd_atomic: LOSS_N as u8,
        qkey: UD_QKEY,
        access: ConnectOptions::default().access | flush,
        ..ConnectOptions::default()
    };
    for (i, qp) in qps.iter().enumerate() {
        let remote = Endpoint {
            lid: 0,
            qpn: them.qpn[i],
            psn: them.psn[i],
            gid: them.gid,
        };
        qp.connect(&remote, &opts)
            .unwrap_or_else(|e| die(&format!("connect QP{i}: {e}")));
    }
    let ah = ucud.then(|| {
        pd.create_ah(AddressVector::to(addr_of(them.gid)))
            .unwrap_or_else(|e| die(&format!("create the AH: {e}")))
    });
    let mut r = Run {
        role: a.role,
        them,
        ctx,
        mr,
        cq,
        qps,
        ah,
        step_q: 0,
        oob,
        timeout: Duration::from_secs(a.timeout),
        failures: 0,
        ok: true,
        detail: Vec::new(),
    };
    r.oob.sync("connected");
    if a.plan == "ops" {
        r.step_send("send_imm_1pkt", 256, Some(0x1234_5678), 1);
        r.step_send("send_imm_multi", 5000, Some(0x9abc_def0), 2);
        r.step_send("send_64k", 65536, None, 3);
        r.step_write("write_imm_1pkt", 256, Some(0x0bad_cafe), 4);
        r.step_write("write_imm_multi", 5000, Some(0xfeed_f00d), 5);
        r.step_write("write_64k", 65536, None, 6);
        r.step_read("read_64k", 65536, 7);
        r.step_atomic(
            "fetch_add",
            true,
            Some(0x1111_1111_1111_1111),
            0x0101_0101_0101_0101,
            0,
            0x1111_1111_1111_1111,
            0x1212_1212_1212_1212,
        );
        r.step_atomic(
            "cmp_swap_hit",
            false,
            None,
            0x1212_1212_1212_1212,
            0x0123_4567_89ab_cdef,
            0x1212_1212_1212_1212,
            0x0123_4567_89ab_cdef,
        );
        r.step_atomic(
            "cmp_swap_miss",
            false,
            None,
            1,
            2,
            0x0123_4567_89ab_cdef,
            0x0123_4567_89ab_cdef,
        );
        r.step_rnr("rnr_retry");
        r.step_bad_rkey("bad_rkey");
        r.step_too_long("too_long_send");
    } else if a.plan == "ext" {
        r.step_atomic_write("atomic_write", 0x1111_1111_1111_1111, 0x0123_4567_89ab_cdef);
        r.step_flush("flush_range", 0, 65536, 1, false, 0, WcStatus::Success);
        r.step_flush("flush_region", 0, 1 << 30, 1, true, 0, WcStatus::Success);
        r.step_flush("flush_zero_len", 0, 0, 1, false, 0, WcStatus::Success);
        let refused = WcStatus::RemInvReqErr;
        r.step_flush("flush_persistent_refused", 1, 64, 2, false, 0, refused);
        let bad_key = WcStatus::RemAccessErr;
        r.step_flush("flush_bad_rkey", 2, 64, 1, false, 0x5a_5a00, bad_key);
    } else if ucud {
        r.step_q = 0;
        r.step_send("uc_send_imm_1pkt", 256, Some(0x0c0f_fee1), 11);
        r.step_send("uc_send_imm_multi", 5000, Some(0x0c0f_fee2), 12);
        r.step_write("uc_write_imm_1pkt", 256, Some(0x0c0f_fee3), 13);
        r.step_write("uc_write_imm_multi", 5000, Some(0x0c0f_fee4), 14);
        r.step_q = 1;
        r.step_send("ud_send_imm", 256, Some(0x0dd0_beef), 15);
        r.step_send("ud_send", 1000, None, 16);
        r.step_q = 2; // an RC SEND after them: the responder answers (ACK)
        r.step_send("rc_send_after", 64, Some(0x0a0b_0c0d), 17);
    } else {
        r.loss_step("loss_send", SendOpcode::Send, 100);
        r.loss_step("loss_write", SendOpcode::RdmaWrite, 200);
        r.loss_step("loss_read", SendOpcode::RdmaRead, 300);
    }
    r.oob.sync("end");
    // let the last ACKs go out before the QPs are destroyed
    std::thread::sleep(Duration::from_millis(50));
    let c = r.counters();
    let line: String = c.iter().map(|(k, v)| format!(" {k}={v}")).collect();
    println!("COUNTERS impl=rxe-rs{line}");
    let icrc_bad = get(&c, "drop_IcrcError");
    let malformed: u64 = c
        .iter()
        .filter(|(k, _)| k.starts_with("malformed_"))
        .map(|(_, v)| v)
        .sum();
    let unverified = get(&c, "icrc_unverified");
    if icrc_bad + malformed + unverified > 0 {
        println!(
            "RESULT icrc_rx FAIL {} {icrc_bad} bad ICRCs, {malformed} malformed, {unverified} unverified of {} received",
            r.role,
            get(&c, "rcvd_pkts")
        );
        r.failures += 1;
    } else {
        println!(
            "RESULT icrc_rx PASS {} every ICRC of {} received packets verified",
            r.role,
            get(&c, "rcvd_pkts")
        );
    }
    println!(
        "DONE {} failures={}",
        if r.failures > 0 { "FAIL" } else { "PASS" },
        r.failures
    );
    if r.failures > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
