//! Hostile peers. RDMA lets a remote peer read and write registered memory
//! directly; a soft RDMA stack must never let a packet reach outside what
//! was registered and granted, nor take the stack down.
//!
//! * [`third_party_cannot_disturb_a_transfer`]: two devices on loopback
//!   (127.0.3.1 and 127.0.3.2) run a legitimate RC transfer (64 WRITEs and
//!   64 SENDs of 64 KiB, checked byte for byte) while another process (this
//!   test binary again, running only [`hostile_attacker_process`]) on
//!   127.0.3.3 throws 27,000 crafted packets at them over UDP: wrong
//!   QPNs, stale and future PSNs, guessed rkeys, RETH lengths past the
//!   region, READs of 2 GiB, floods of NAKs, truncated headers, unknown
//!   opcodes, bad ICRCs, UD datagrams with wrong and right Q_Keys, and
//!   datagrams too short to be anything. The transfer completes byte-exact,
//!   regions not granted to anyone stay unchanged, the counters account for
//!   every hostile packet by reason, and the process's memory stays put.
//! * [`spoofed_peer_is_held_to_the_grants`]: at the engine level (the
//!   simulated network: no sockets), packets that claim to come from the
//!   connected peer's own address, which a network without source address
//!   filtering lets anyone send. Those that do not hit the expected PSN
//!   change nothing and the transfer completes; those that do are held to
//!   exactly what the peer was granted, and a refused one takes the QP to
//!   the error state (IBTA class C) without touching memory.
//! * [`keys_and_qp_numbers_are_not_guessable`]: rkeys, QP numbers and
//!   initial PSNs are random, never sequential or repeated; rkeys rotate on
//!   re-registration and on every memory window bind, and the old key stops
//!   working.
//! * [`refused_messages_keep_their_receives`],
//!   [`an_ack_inside_a_read_does_not_skip_its_responses`] and
//!   [`a_read_finished_under_the_cursor_moves_it_on`],
//!   [`a_nak_inside_a_read_does_not_skip_its_responses`]: regression tests
//!   for engine bugs the fuzz targets found (a refused message lost the
//!   receive it had taken; a bogus ACK inside a READ let the READ complete
//!   without some of its responses; a READ completed under the send cursor
//!   left it mid-way into the next work request), and
//!   [`stale_acks_and_naks_cost_nothing`] (responses for PSNs already
//!   acknowledged used up retries).
//!
//! Address plan: 127.0.3.1 to 127.0.3.5; the tests in this file run one at
//! a time (they measure the process's memory).

use rxe_core::engine::mem::{key_index, key_variant};
use rxe_core::engine::{
    Counters, DropReason, IcrcStatus, RecvMeta, RegionMemory, Transmit, VecMemory,
};
use rxe_core::psn::Psn;
use rxe_core::wire::{
    icrc, AethRepr, AethSyndrome, AtomicEthRepr, BthRepr, DethRepr, NakCode, Opcode, PacketRepr,
    RethRepr,
};
use rxe_net::udp::{RecvMode, UdpTransport};
use rxe_verbs::*;
use std::collections::{BTreeMap, HashSet};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(20);

fn ip(n: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 3, n))
}

/// One test at a time: they measure the process's resident memory.
fn serial() -> MutexGuard<'static, ()> {
    static M: Mutex<()> = Mutex::new(());
    M.lock().unwrap_or_else(|e| e.into_inner())
}

/// Deterministic bytes that differ from one `seed` to another.
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// The process's resident set size in KiB (`VmRSS`).
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn bth(opcode: Opcode, dest_qp: u32, psn: Psn) -> BthRepr {
    BthRepr {
        opcode,
        solicited: false,
        mig_req: false,
        pad_count: 0,
        pkey: 0xffff,
        fecn: false,
        becn: false,
        dest_qp,
        ack_req: true,
        psn,
    }
}

/// The UDP payload of `r` as sent from `src:src_port` to `dst`, with the
/// ICRC a receiver computes for it.
fn forge(r: &PacketRepr<'_>, src: IpAddr, dst: IpAddr, src_port: u16) -> Vec<u8> {
    let mut b = vec![0u8; r.buffer_len()];
    let n = r.emit(&mut b).expect("a well-formed repr");
    let crc = icrc::compute_udp(src, dst, src_port, &b[..n - 4]).expect("ICRC");
    b[n - 4..].copy_from_slice(&crc.to_le_bytes());
    b
}

/// Recomputes the ICRC over whatever `b` holds now (after cutting it).
fn refill_icrc(b: &mut [u8], src: IpAddr, dst: IpAddr, src_port: u16) {
    let n = b.len();
    let crc = icrc::compute_udp(src, dst, src_port, &b[..n - 4]).expect("ICRC");
    b[n - 4..].copy_from_slice(&crc.to_le_bytes());
}

fn write_only(dest_qp: u32, psn: Psn, reth: RethRepr, payload: &[u8]) -> PacketRepr<'_> {
    let mut r = PacketRepr::new(bth(Opcode::RC_RDMA_WRITE_ONLY, dest_qp, psn));
    r.reth = Some(reth);
    r.payload = payload;
    r
}

fn read_req(dest_qp: u32, psn: Psn, reth: RethRepr) -> PacketRepr<'static> {
    let mut r = PacketRepr::new(bth(Opcode::RC_RDMA_READ_REQUEST, dest_qp, psn));
    r.reth = Some(reth);
    r
}

fn nak(dest_qp: u32, psn: Psn, syndrome: AethSyndrome) -> PacketRepr<'static> {
    let mut r = PacketRepr::new(bth(Opcode::RC_ACKNOWLEDGE, dest_qp, psn));
    r.aeth = Some(AethRepr { syndrome, msn: 0 });
    r
}

/// The drop reasons a hostile packet can have.
const HOSTILE: [DropReason; 6] = [
    DropReason::IcrcError,
    DropReason::Malformed,
    DropReason::UnknownQp,
    DropReason::WrongSource,
    DropReason::QkeyMismatch,
    DropReason::NoReceiveBuffer,
];

fn delta(after: &Counters, before: &Counters, why: DropReason) -> u64 {
    after.dropped_for(why) - before.dropped_for(why)
}

/// What the attacker sends, and where the counters must show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Expect {
    /// Dropped by B's engine for this reason.
    B(DropReason),
    /// Dropped by A's engine for this reason.
    A(DropReason),
    /// A bad ICRC: B drops it as `IcrcError` if its transport checks every
    /// ICRC (raw receive mode), else (a plain UDP socket over IPv4 cannot
    /// tell a bad ICRC from a nonzero IP ID) it is counted as unverified
    /// and dropped for the second reason.
    BadIcrc(DropReason),
    /// Too short to hold a BTH and an ICRC: `IcrcError` at B, or never
    /// handed to the engine (raw receive mode drops it with the IP header).
    Tiny,
}

/// Everything one attacker round sends: (what, to, bytes).
fn attack_round(round: u32, me: IpAddr, port: u16, v: &Victims) -> Vec<(Expect, IpAddr, Vec<u8>)> {
    let (a, b) = (ip(1), ip(2));
    let mut out = Vec::new();
    let mut put = |e: Expect, to: IpAddr, bytes: Vec<u8>| out.push((e, to, bytes));
    let data = [0xeeu8; 64];
    let near = |k: u32| v.b_epsn.add(k % 64);
    let dst_reth = RethRepr {
        va: v.dst.addr,
        rkey: v.dst.rkey,
        dma_len: 64,
    };
    // Wrong QPN (one that is neither of B's QPs).
    let wrong_qpn = (v.b_qpn ^ (0x5a5a5 + round)) & 0xff_ffff;
    if wrong_qpn != v.b_qpn && wrong_qpn != v.b_ud_qpn {
        let r = write_only(wrong_qpn, near(round), dst_reth, &data);
        put(Expect::B(DropReason::UnknownQp), b, forge(&r, me, b, port));
    }
    // The right QPN with stale and future PSNs, a valid rkey and address.
    let r = write_only(v.b_qpn, v.b_epsn.sub(1 + round % 100), dst_reth, &data);
    put(
        Expect::B(DropReason::WrongSource),
        b,
        forge(&r, me, b, port),
    );
    let r = write_only(v.b_qpn, v.b_epsn.add(1000 + round), dst_reth, &data);
    put(
        Expect::B(DropReason::WrongSource),
        b,
        forge(&r, me, b, port),
    );
    // Guessed rkeys at the secret region's address.
    let guess = RethRepr {
        va: v.secret.addr,
        rkey: (pattern(4, u64::from(round))
            .iter()
            .fold(0u32, |k, x| k << 8 | u32::from(*x))),
        dma_len: 64,
    };
    let r = write_only(v.b_qpn, near(round), guess, &data);
    put(
        Expect::B(DropReason::WrongSource),
        b,
        forge(&r, me, b, port),
    );
    // A RETH length past the end of the region.
    let past = RethRepr {
        va: v.dst.addr + v.dst.len - 64,
        rkey: v.dst.rkey,
        dma_len: 1 << 20,
    };
    let mut r = PacketRepr::new(bth(Opcode::RC_RDMA_WRITE_FIRST, v.b_qpn, near(round)));
    r.reth = Some(past);
    r.payload = &data;
    put(
        Expect::B(DropReason::WrongSource),
        b,
        forge(&r, me, b, port),
    );
    // READs of 2 GiB of the readable region, the same one again and again
    // (a flood of duplicates).
    let huge = RethRepr {
        va: v.readable.addr,
        rkey: v.readable.rkey,
        dma_len: 0x7fff_ffff,
    };
    let r = read_req(v.b_qpn, v.b_epsn.sub(1), huge);
    put(
        Expect::B(DropReason::WrongSource),
        b,
        forge(&r, me, b, port),
    );
    // An atomic on the secret region.
    let mut r = PacketRepr::new(bth(Opcode::RC_FETCH_ADD, v.b_qpn, near(round)));
    r.atomic_eth = Some(AtomicEthRepr {
        va: v.secret.addr,
        rkey: v.secret.rkey,
        swap_add: 1,
        compare: 0,
    });
    put(
        Expect::B(DropReason::WrongSource),
        b,
        forge(&r, me, b, port),
    );
    // NAK floods: to B's QP and to A's (which has requests outstanding).
    let codes = [
        AethSyndrome::Nak(NakCode::PsnSequenceError),
        AethSyndrome::Nak(NakCode::InvalidRequest),
        AethSyndrome::Nak(NakCode::RemoteAccessError),
        AethSyndrome::Nak(NakCode::RemoteOperationalError),
        AethSyndrome::RnrNak { timer: 31 },
    ];
    let syn = codes[round as usize % codes.len()];
    let r = nak(v.b_qpn, near(round), syn);
    put(
        Expect::B(DropReason::WrongSource),
        b,
        forge(&r, me, b, port),
    );
    let r = nak(v.a_qpn, v.a_sq_psn.add(round % 4096), syn);
    put(
        Expect::A(DropReason::WrongSource),
        a,
        forge(&r, me, a, port),
    );
    // Truncated headers, with an ICRC that is right for what is left: a
    // READ request cut inside its RETH, an ACK without its AETH.
    let mut t = forge(&read_req(v.b_qpn, near(round), dst_reth), me, b, port);
    t.truncate(24);
    refill_icrc(&mut t, me, b, port);
    put(Expect::B(DropReason::Malformed), b, t);
    let mut t = forge(&nak(v.b_qpn, near(round), syn), me, b, port);
    t.truncate(16);
    refill_icrc(&mut t, me, b, port);
    put(Expect::B(DropReason::Malformed), b, t);
    // An opcode nobody knows, and a BTH with a transport version of 1.
    let mut t = forge(
        &write_only(v.b_qpn, near(round), dst_reth, &data),
        me,
        b,
        port,
    );
    t[0] = 0x1f;
    refill_icrc(&mut t, me, b, port);
    put(Expect::B(DropReason::Malformed), b, t);
    let mut t = forge(
        &write_only(v.b_qpn, near(round), dst_reth, &data),
        me,
        b,
        port,
    );
    t[1] |= 0x01;
    refill_icrc(&mut t, me, b, port);
    put(Expect::B(DropReason::Malformed), b, t);
    // A bad ICRC on an otherwise good-looking WRITE and UD datagram.
    let mut t = forge(
        &write_only(v.b_qpn, near(round), dst_reth, &data),
        me,
        b,
        port,
    );
    let n = t.len();
    t[n - 1] ^= 0xff;
    put(Expect::BadIcrc(DropReason::WrongSource), b, t);
    let ud = |qkey: u32| {
        let mut r = PacketRepr::new(bth(Opcode::UD_SEND_ONLY, v.b_ud_qpn, Psn::new(round)));
        r.deth = Some(DethRepr {
            qkey,
            src_qp: 0x4242,
        });
        r.payload = &data;
        forge(&r, me, b, port)
    };
    let mut t = ud(0x1111_1111);
    let n = t.len();
    t[n - 1] ^= 0xff;
    put(Expect::BadIcrc(DropReason::NoReceiveBuffer), b, t);
    // UD takes datagrams from anyone: a wrong Q_Key is refused, a right one
    // finds no receive posted.
    put(Expect::B(DropReason::QkeyMismatch), b, ud(0xdead_beef));
    put(Expect::B(DropReason::NoReceiveBuffer), b, ud(0x1111_1111));
    // Datagrams too short to be anything.
    put(Expect::Tiny, b, vec![0x0a; 1 + round as usize % 15]);
    out
}

/// What the attacker knows about its victims: everything but their
/// address (the strongest third party: it has read the rkeys and QPNs).
#[derive(Debug, Clone, Copy)]
struct Victims {
    a_qpn: u32,
    a_sq_psn: Psn,
    b_qpn: u32,
    b_ud_qpn: u32,
    b_epsn: Psn,
    dst: RemoteRegion,
    secret: RemoteRegion,
    readable: RemoteRegion,
}

impl Victims {
    /// As one line of numbers, for the attacker process.
    fn encode(&self) -> String {
        let mut v = vec![
            self.a_qpn.to_string(),
            self.a_sq_psn.value().to_string(),
            self.b_qpn.to_string(),
            self.b_ud_qpn.to_string(),
            self.b_epsn.value().to_string(),
        ];
        for r in [self.dst, self.secret, self.readable] {
            v.extend([r.addr.to_string(), r.len.to_string(), r.rkey.to_string()]);
        }
        v.join(" ")
    }

    fn decode(s: &str) -> Victims {
        let n: Vec<u64> = s
            .split_whitespace()
            .map(|x| x.parse().expect("a number"))
            .collect();
        assert_eq!(n.len(), 14, "victims: {s}");
        let region = |i: usize| RemoteRegion {
            addr: n[i],
            len: n[i + 1],
            rkey: n[i + 2] as u32,
        };
        Victims {
            a_qpn: n[0] as u32,
            a_sq_psn: Psn::new(n[1] as u32),
            b_qpn: n[2] as u32,
            b_ud_qpn: n[3] as u32,
            b_epsn: Psn::new(n[4] as u32),
            dst: region(5),
            secret: region(8),
            readable: region(11),
        }
    }
}

/// Rounds of [`attack_round`] the attacker process sends.
const ATTACK_ROUNDS: u32 = 1500;
/// Where the attacker process finds its victims ([`Victims::encode`]).
const ATTACKER_ENV: &str = "RXE_HOSTILE_PEER_VICTIMS";

/// Not a test: the attacker process of
/// [`third_party_cannot_disturb_a_transfer`], which runs this test binary
/// again with only this function (`--ignored --exact`), its victims in
/// `RXE_HOSTILE_PEER_VICTIMS`. It sends [`ATTACK_ROUNDS`] rounds of
/// [`attack_round`] from its own UDP socket on 127.0.3.3, reports each
/// round on stdout (`HOSTILE round R PACKETS`) and waits for a line on
/// stdin before the next (the victim process paces it so that the kernel's
/// socket buffers never overflow and every packet can be accounted for).
/// Without the variable it does nothing.
#[test]
#[ignore = "the attacker process of third_party_cannot_disturb_a_transfer, run by it"]
fn hostile_attacker_process() {
    use std::io::{BufRead, Write};
    let Ok(victims) = std::env::var(ATTACKER_ENV) else {
        return;
    };
    let victims = Victims::decode(&victims);
    let me = ip(3);
    let mut link = UdpTransport::bind_with(me, RecvMode::Plain).expect("bind 127.0.3.3");
    let port = link.src_port();
    let mut out = std::io::stdout();
    let mut go = std::io::stdin().lock();
    writeln!(out, "\nHOSTILE port {port}").unwrap();
    let mut sent = 0u64;
    for round in 0..ATTACK_ROUNDS {
        for (_, to, payload) in attack_round(round, me, port, &victims) {
            let t = Transmit {
                src: me,
                dst: to,
                src_port: port,
                traffic_class: 0,
                hop_limit: 64,
                payload,
            };
            while link.send_batch(std::slice::from_ref(&t)).expect("send") == 0 {
                let _ = link.wait_writable(Some(Duration::from_millis(1)));
            }
            sent += 1;
        }
        writeln!(out, "\nHOSTILE round {round} {sent}").unwrap();
        out.flush().unwrap();
        let mut line = String::new();
        if go.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
    }
    writeln!(out, "\nHOSTILE done {sent}").unwrap();
}

#[test]
fn third_party_cannot_disturb_a_transfer() {
    let _g = serial();
    const MSG: usize = 64 * 1024;
    const N: usize = 64;
    const ROUNDS: u32 = ATTACK_ROUNDS;
    let opts = ConnectOptions {
        mtu: Mtu::Mtu4096,
        ..ConnectOptions::default()
    };

    let a = Device::soft(ip(1)).open().expect("open 127.0.3.1");
    let b = Device::soft(ip(2)).open().expect("open 127.0.3.2");
    let pd_a = a.alloc_pd().unwrap();
    let cq_a = a.create_cq(1024, None).unwrap();
    let src = pd_a
        .register(pattern(2 * N * MSG, 1), Access::LOCAL_WRITE)
        .unwrap();
    let qp_a = a
        .create_qp(&pd_a, &QpInitAttr::new(QpType::Rc, &cq_a, &cq_a))
        .unwrap();

    let pd_b = b.alloc_pd().unwrap();
    let cq_b = b.create_cq(1024, None).unwrap();
    let dst = pd_b
        .alloc_mr(N * MSG, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    let rbuf = pd_b.alloc_mr(N * MSG, Access::LOCAL_WRITE).unwrap();
    let secret_bytes = pattern(MSG, 2);
    let secret = pd_b
        .register(secret_bytes.clone(), Access::LOCAL_WRITE)
        .unwrap();
    let readable_bytes = pattern(MSG, 3);
    let readable = pd_b
        .register(readable_bytes.clone(), Access::REMOTE_READ)
        .unwrap();
    let qp_b = b
        .create_qp(&pd_b, &QpInitAttr::new(QpType::Rc, &cq_b, &cq_b))
        .unwrap();
    let ud_b = b
        .create_qp(&pd_b, &QpInitAttr::new(QpType::Ud, &cq_b, &cq_b))
        .unwrap();
    qp_a.connect(&qp_b.endpoint(), &opts).unwrap();
    qp_b.connect(&qp_a.endpoint(), &opts).unwrap();
    ud_b.connect(&ud_b.endpoint(), &opts).unwrap();
    for i in 0..N {
        qp_b.post_recv(&[RecvWr {
            wr_id: 1000 + i as u64,
            sg_list: vec![rbuf.sge(i * MSG..(i + 1) * MSG)],
        }])
        .unwrap();
    }
    let victims = Victims {
        a_qpn: qp_a.qp_num(),
        a_sq_psn: qp_a.query().unwrap().0.sq_psn,
        b_qpn: qp_b.qp_num(),
        b_ud_qpn: ud_b.qp_num(),
        b_epsn: qp_b.query().unwrap().0.rq_psn,
        dst: dst.remote(),
        secret: secret.remote(),
        readable: readable.remote(),
    };
    let raw = b.recv_mode() == RecvMode::Raw;
    let (a0, b0) = (a.counters(), b.counters());
    // Touch every page the transfer will write, so that the memory
    // measured from here on is what the stack itself holds.
    dst.with_bytes_mut(|m| m.fill(1));
    rbuf.with_bytes_mut(|m| m.fill(1));
    let rss0 = rss_kib();

    // The attacker: another process (this test binary again, running only
    // `hostile_attacker_process`) with a plain UDP socket of its own on
    // 127.0.3.3. It reports every round it sent; it may run no more than
    // 256 packets ahead of what the victims have counted, so that the
    // kernel's socket buffers never overflow and every packet can be
    // accounted for.
    let sent = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "hostile_attacker_process",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ATTACKER_ENV, victims.encode())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("the attacker process");
    let attacker = {
        use std::io::{BufRead, Write};
        let (sent, done) = (sent.clone(), done.clone());
        let (a, b) = (a.clone(), b.clone());
        let (a0, b0) = (a0.clone(), b0.clone());
        let mut go = child.stdin.take().unwrap();
        let reports = std::io::BufReader::new(child.stdout.take().unwrap());
        std::thread::spawn(move || {
            let deadline = Instant::now() + T;
            let seen = |a: &Context, b: &Context| {
                let (ca, cb) = (a.counters(), b.counters());
                HOSTILE.iter().map(|&r| delta(&cb, &b0, r)).sum::<u64>()
                    + delta(&ca, &a0, DropReason::WrongSource)
            };
            let me = ip(3);
            let (mut port, mut rounds, mut counted) = (None, 0u32, 0u64);
            for line in reports.lines() {
                let line = line.expect("the attacker's report");
                let Some(at) = line.find("HOSTILE ") else {
                    continue;
                };
                let words: Vec<&str> = line[at..].split_whitespace().collect();
                match words[1] {
                    "port" => port = Some(words[2].parse::<u16>().unwrap()),
                    "round" => {
                        assert_eq!(words[2].parse::<u32>().unwrap(), rounds);
                        // What that round sent (the same function, so the
                        // same packets), and which of them are counted.
                        let round = attack_round(rounds, me, port.unwrap(), &victims);
                        counted += round.iter().filter(|p| p.0 != Expect::Tiny).count() as u64;
                        sent.store(words[3].parse().unwrap(), Ordering::Relaxed);
                        rounds += 1;
                        while counted > seen(&a, &b) + 256 && Instant::now() < deadline {
                            std::thread::sleep(Duration::from_micros(200));
                        }
                        if go.write_all(b"go\n").is_err() {
                            break;
                        }
                    }
                    // (Read on to the end: the test harness in the
                    // attacker process still reports its result.)
                    "done" => done.store(true, Ordering::Release),
                    _ => panic!("the attacker said {line}"),
                }
            }
            // The tally of what the attacker sent, by expected reason.
            let mut tally: BTreeMap<Expect, u64> = BTreeMap::new();
            let mut total = 0;
            for round in 0..rounds {
                for (what, _, _) in attack_round(round, me, port.unwrap(), &victims) {
                    *tally.entry(what).or_default() += 1;
                    total += 1;
                }
            }
            assert_eq!(total, sent.load(Ordering::Relaxed), "packets sent");
            tally
        })
    };

    // The legitimate transfer, in 8 rounds of 8 WRITEs and 8 SENDs, while
    // the attack goes on.
    let start = Instant::now();
    while sent.load(Ordering::Relaxed) < 2000 {
        assert!(start.elapsed() < T, "the attacker process did not start");
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut got = Vec::new();
    for round in 0..8 {
        let mut wrs = Vec::new();
        for i in round * 8..(round + 1) * 8 {
            let remote = dst.remote().slice((i * MSG) as u64..((i + 1) * MSG) as u64);
            wrs.push(SendWr::write(
                i as u64,
                &[src.sge(i * MSG..(i + 1) * MSG)],
                remote,
            ));
            wrs.push(SendWr::send(
                100 + i as u64,
                &[src.sge((N + i) * MSG..(N + i + 1) * MSG)],
            ));
        }
        qp_a.post_send(&wrs).unwrap();
        let want = got.len() + 16;
        while got.len() < want {
            got.extend(cq_a.wait(want - got.len(), T).expect("A's completions"));
        }
    }
    let tally = attacker.join().expect("the attacker's reports");
    assert!(done.load(Ordering::Acquire), "the attacker did not finish");
    assert!(child.wait().expect("the attacker process").success());
    let mut recvs = Vec::new();
    while recvs.len() < N {
        recvs.extend(
            cq_b.wait(N - recvs.len(), T)
                .expect("B's receive completions"),
        );
    }
    // Memory, measured before this test makes copies of its own.
    let rss1 = rss_kib();
    let total: u64 = tally.values().sum();
    eprintln!(
        "hostile_peer: {total} hostile packets ({} rounds), receive mode {:?}",
        ROUNDS,
        b.recv_mode()
    );

    // The transfer: every work request succeeded, in order, byte-exact.
    let order: Vec<u64> = (0..N as u64).flat_map(|i| [i, 100 + i]).collect();
    assert_eq!(got.iter().map(|c| c.wr_id).collect::<Vec<_>>(), order);
    assert!(got.iter().all(|c| c.status == WcStatus::Success), "{got:?}");
    assert!(recvs
        .iter()
        .all(|c| c.status == WcStatus::Success && c.byte_len as usize == MSG));
    let src_bytes = src.to_vec();
    assert!(dst.to_vec() == src_bytes[..N * MSG], "WRITE data differs");
    assert!(rbuf.to_vec() == src_bytes[N * MSG..], "SEND data differs");
    // Regions granted to nobody, or only for READ, did not change.
    assert!(secret.to_vec() == secret_bytes, "the secret region changed");
    assert!(
        readable.to_vec() == readable_bytes,
        "the read-only region changed"
    );
    assert_eq!(qp_a.state().unwrap(), QpState::Rts);
    assert_eq!(qp_b.state().unwrap(), QpState::Rts);

    // Every hostile packet is accounted for, by reason.
    let mut want_b: BTreeMap<DropReason, u64> = BTreeMap::new();
    let mut want_a = 0;
    let mut tiny = 0;
    for (what, n) in &tally {
        match *what {
            Expect::B(r) => *want_b.entry(r).or_default() += n,
            Expect::A(_) => want_a += n,
            Expect::BadIcrc(_) if raw => *want_b.entry(DropReason::IcrcError).or_default() += n,
            Expect::BadIcrc(r) => *want_b.entry(r).or_default() += n,
            Expect::Tiny => tiny += n,
        }
    }
    // Let the victims' progress threads catch up with the last packets.
    let settle = Instant::now() + T;
    let (mut ca, mut cb);
    loop {
        (ca, cb) = (a.counters(), b.counters());
        let seen: u64 = HOSTILE.iter().map(|&r| delta(&cb, &b0, r)).sum();
        let expected: u64 = want_b.values().sum::<u64>() + if raw { 0 } else { tiny };
        if (seen >= expected && delta(&ca, &a0, DropReason::WrongSource) >= want_a)
            || Instant::now() > settle
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let tiny_seen = delta(&cb, &b0, DropReason::IcrcError)
        - want_b.get(&DropReason::IcrcError).copied().unwrap_or(0);
    if raw {
        assert!(tiny_seen <= tiny, "{tiny_seen} of {tiny} tiny datagrams");
    } else {
        assert_eq!(tiny_seen, tiny, "tiny datagrams are ICRC errors");
        *want_b.entry(DropReason::IcrcError).or_default() += tiny;
        let bad: u64 = tally
            .iter()
            .filter(|(w, _)| matches!(w, Expect::BadIcrc(_)))
            .map(|(_, n)| n)
            .sum();
        assert_eq!(cb.icrc_unverified - b0.icrc_unverified, bad);
    }
    for r in HOSTILE {
        let want = if raw && r == DropReason::IcrcError {
            want_b.get(&r).copied().unwrap_or(0) + tiny_seen
        } else {
            want_b.get(&r).copied().unwrap_or(0)
        };
        assert_eq!(delta(&cb, &b0, r), want, "B's drops for {r:?}");
    }
    assert_eq!(delta(&ca, &a0, DropReason::WrongSource), want_a);
    for r in [
        DropReason::QpState,
        DropReason::WrongTransport,
        DropReason::PkeyMismatch,
        DropReason::Backlog,
    ] {
        assert_eq!(delta(&cb, &b0, r), 0, "B's drops for {r:?}");
    }
    eprintln!("hostile_peer: B's drops {:?}", cb.drops);

    // Memory: the attack sent 27,000 packets (and asked for 2 GiB READs);
    // none of it may stay behind.
    let grown = rss1.saturating_sub(rss0);
    eprintln!("hostile_peer: VmRSS {rss0} KiB -> {rss1} KiB (+{grown} KiB)");
    assert!(grown < 16 * 1024, "resident memory grew by {grown} KiB");
}

/// Regions as bytes, to compare before and after.
fn snap(mems: &[&Arc<VecMemory>]) -> Vec<Vec<u8>> {
    mems.iter().map(|m| m.snapshot()).collect()
}

#[test]
fn spoofed_peer_is_held_to_the_grants() {
    use rxe_net::sim::{Faults, SimNet};
    use rxe_tests::sim::*;
    let _g = serial();
    const K: u32 = 16 * 1024;
    let (mut net, nodes) = network(0x5eed, Faults::none(), 2, 1 << 20);
    let (a, b) = (&nodes[0], &nodes[1]);
    // B's regions besides its 1 MiB region open to everything (`b.mem`):
    // one with local rights only, one remote-readable, and one with every
    // right but in another protection domain.
    let secret = Arc::new(VecMemory::from_vec(pattern(4096, 10)));
    let secret_key = net.engines[b.idx]
        .reg_mr(b.pd, secret.clone(), 0x5000_0000, Access::LOCAL_WRITE)
        .unwrap()
        .rkey;
    let ro = Arc::new(VecMemory::from_vec(pattern(4096, 11)));
    let ro_key = net.engines[b.idx]
        .reg_mr(b.pd, ro.clone(), 0x6000_0000, Access::REMOTE_READ)
        .unwrap()
        .rkey;
    let pd2 = net.engines[b.idx].alloc_pd();
    let other = Arc::new(VecMemory::from_vec(pattern(4096, 12)));
    let all =
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
    let other_key = net.engines[b.idx]
        .reg_mr(pd2, other.clone(), 0x7000_0000, all)
        .unwrap()
        .rkey;
    let fixed = [secret.snapshot(), ro.snapshot(), other.snapshot()];
    let b_mems = [&b.mem, &secret, &ro, &other];
    let p = ConnParams::default();
    let (qa, qb) = connect(&mut net, a, b, &p);

    // The legitimate work: 16 WRITEs and 16 SENDs of 16 KiB from A to B,
    // and 8 READs of 16 KiB of B's region back to A.
    a.mem.write(0, &pattern(512 * 1024, 20));
    b.mem.write(768 * 1024, &pattern(256 * 1024, 21));
    for i in 0..16u64 {
        net.engines[b.idx]
            .post_recv(
                qb,
                RecvWr {
                    wr_id: 500 + i,
                    sg_list: vec![sge(b, 512 * 1024 + i * u64::from(K), K)],
                },
            )
            .unwrap();
    }
    let tapped: Arc<Mutex<Option<Transmit>>> = Arc::default();
    let t2 = tapped.clone();
    net.set_tap(move |_, t| {
        if t.payload[0] == Opcode::RC_RDMA_READ_REQUEST.0 {
            *t2.lock().unwrap() = Some(t.clone());
        }
    });
    let mut posted = Vec::new();
    for i in 0..16u64 {
        let mut w = SendWr::new(i, SendOpcode::RdmaWrite);
        w.sg_list = vec![sge(a, i * u64::from(K), K)];
        w.remote_addr = IOVA + i * u64::from(K);
        w.rkey = b.mr.rkey;
        net.engines[a.idx].post_send(qa, w).unwrap();
        let mut s = SendWr::new(100 + i, SendOpcode::Send);
        s.sg_list = vec![sge(a, 256 * 1024 + i * u64::from(K), K)];
        net.engines[a.idx].post_send(qa, s).unwrap();
        posted.extend([i, 100 + i]);
    }
    for i in 0..8u64 {
        let mut r = SendWr::new(200 + i, SendOpcode::RdmaRead);
        r.sg_list = vec![sge(a, 512 * 1024 + i * u64::from(K), K)];
        r.remote_addr = IOVA + 768 * 1024 + i * u64::from(K);
        r.rkey = b.mr.rkey;
        net.engines[a.idx].post_send(qa, r).unwrap();
        posted.push(200 + i);
    }

    // Phase 1: bursts of 200 spoofed packets "from A" between short runs of
    // the transfer. No burst hits B's expected PSN with a request B would
    // execute, so none may change B's memory, the counters must account
    // for each packet, and the transfer must complete.
    let meta = |src: IpAddr, dst: IpAddr, icrc| RecvMeta {
        src,
        dst,
        src_port: 0xc000,
        icrc,
    };
    let to_b = |net: &mut SimNet, bytes: &[u8], icrc| {
        let now = net.now();
        net.engines[b.idx].handle_datagram(now, meta(a.addr, b.addr, icrc), bytes);
    };
    let reth = |va: u64, dma_len: u32, rkey: u32| RethRepr { va, rkey, dma_len };
    let data = [0xab_u8; 64];
    let wr = |dest: u32, psn: Psn, r: RethRepr, ack: bool| {
        let mut p = write_only(dest, psn, r, &data);
        p.bth.ack_req = ack;
        forge(&p, a.addr, b.addr, 0xc000)
    };
    let naks = [
        AethSyndrome::Nak(NakCode::PsnSequenceError),
        AethSyndrome::Nak(NakCode::InvalidRequest),
        AethSyndrome::Nak(NakCode::RemoteAccessError),
        AethSyndrome::RnrNak { timer: 0 },
        AethSyndrome::Ack { credits: 0x1f },
    ];
    let mut ca: Vec<Completion> = Vec::new();
    let mut cb: Vec<Completion> = Vec::new();
    let mut kinds_done = HashSet::new();
    let n = 200u32;
    for (burst, kind) in (0..12).cycle().enumerate() {
        net.run_until(Duration::from_micros(200), |_| false);
        ca.extend(completions(&mut net, a));
        cb.extend(completions(&mut net, b));
        if (ca.len() == 40 && cb.len() == 16 && kinds_done.len() == 12) || burst > 2000 {
            break;
        }
        let epsn = net.engines[b.idx].query_qp(qb).unwrap().0.rq_psn;
        let a_next = net.engines[a.idx].query_qp(qa).unwrap().0.sq_psn;
        let (b0, a0) = (
            net.engines[b.idx].counters().clone(),
            net.engines[a.idx].counters().clone(),
        );
        let mem0 = snap(&b_mems);
        let good = reth(IOVA, 64, b.mr.rkey);
        match kind {
            // A wrong QPN, everything else right (the expected PSN too).
            0 => (0..n)
                .for_each(|_| to_b(&mut net, &wr(qb ^ 0x40, epsn, good, true), IcrcStatus::Ok)),
            // Stale PSNs (duplicates), without and with AckReq.
            1 | 2 => (0..n).for_each(|k| {
                let psn = epsn.sub(1 + k % 64);
                to_b(&mut net, &wr(qb, psn, good, kind == 2), IcrcStatus::Ok)
            }),
            // Future PSNs.
            3 => (0..n).for_each(|k| {
                to_b(
                    &mut net,
                    &wr(qb, epsn.add(1 + k), good, true),
                    IcrcStatus::Ok,
                )
            }),
            // Truncated: a READ request cut inside its RETH.
            4 => (0..n).for_each(|_| {
                let mut t = forge(&read_req(qb, epsn, good), a.addr, b.addr, 0xc000);
                t.truncate(24);
                to_b(&mut net, &t, IcrcStatus::Ok)
            }),
            // A bad ICRC, on a WRITE at the expected PSN.
            5 => (0..n).for_each(|_| to_b(&mut net, &wr(qb, epsn, good, true), IcrcStatus::Bad)),
            // Stale READs of 2 GiB (no READ they duplicate).
            6 => (0..n).for_each(|k| {
                let r = read_req(qb, epsn.sub(1 + k % 64), reth(IOVA, 0x7fff_ffff, b.mr.rkey));
                to_b(&mut net, &forge(&r, a.addr, b.addr, 0xc000), IcrcStatus::Ok)
            }),
            // 2000 copies of a real READ request B has answered already.
            7 => {
                let t = tapped.lock().unwrap().clone();
                let Some(t) = t.filter(|t| {
                    rxe_core::wire::Packet::new_checked(&t.payload[..])
                        .is_ok_and(|p| p.bth().psn().is_before(epsn))
                }) else {
                    continue;
                };
                for _ in 0..2000 {
                    to_b(&mut net, &t.payload, IcrcStatus::Ok);
                }
                // What B queued in answer is bounded: at most 512 READs
                // of 16 packets. It goes to A, which ignores it.
                let now = net.now();
                let mut answers = 0;
                while let Some(t) = net.engines[b.idx].poll_transmit(now) {
                    assert_eq!(t.dst, a.addr, "B answered someone other than its peer");
                    answers += 1;
                    net.engines[a.idx].handle_datagram(
                        now,
                        meta(b.addr, a.addr, IcrcStatus::Ok),
                        &t.payload,
                    );
                }
                assert!(
                    answers <= 512 * 16 + 16,
                    "{answers} answers to a duplicate READ flood"
                );
                let c = net.engines[b.idx].counters();
                assert_eq!(c.duplicate_request - b0.duplicate_request, 2000);
                assert!(delta(c, &b0, DropReason::Backlog) >= 2000 - 512);
                kinds_done.insert(kind);
                assert_eq!(snap(&b_mems), mem0, "a READ flood changed B's memory");
                continue;
            }
            // Responses to B's idle requester, for PSNs it never sent.
            8 => (0..n).for_each(|k| {
                let r = nak(qb, p.psn_b.add(100 + k), naks[k as usize % naks.len()]);
                to_b(&mut net, &forge(&r, a.addr, b.addr, 0xc000), IcrcStatus::Ok)
            }),
            // Responses "from B" to A's requester, for PSNs A never sent.
            9 => (0..n).for_each(|k| {
                let r = nak(qa, a_next.add(100 + k), naks[k as usize % naks.len()]);
                let now = net.now();
                let bytes = forge(&r, b.addr, a.addr, 0xc000);
                net.engines[a.idx].handle_datagram(
                    now,
                    meta(b.addr, a.addr, IcrcStatus::Ok),
                    &bytes,
                );
            }),
            // ACKs, NAKs and RNR NAKs "from B" to A's requester for PSNs A
            // has had acknowledged (its first WRITE's 16): stale, dropped
            // without a go-back, a retry used or a request failed.
            11 => {
                if ca.is_empty() {
                    continue;
                }
                (0..n).for_each(|k| {
                    let r = nak(qa, p.psn_a.add(k % 16), naks[k as usize % naks.len()]);
                    let now = net.now();
                    let bytes = forge(&r, b.addr, a.addr, 0xc000);
                    net.engines[a.idx].handle_datagram(
                        now,
                        meta(b.addr, a.addr, IcrcStatus::Ok),
                        &bytes,
                    );
                })
            }
            // A UC opcode on the RC QP, and a foreign P_Key.
            10 => (0..n).for_each(|k| {
                let mut t = wr(qb, epsn, good, true);
                if k % 2 == 0 {
                    t[0] = Opcode::UC_RDMA_WRITE_ONLY.0;
                } else {
                    t[2..4].copy_from_slice(&0x1234u16.to_be_bytes());
                }
                to_b(&mut net, &t, IcrcStatus::Ok)
            }),
            _ => unreachable!(),
        }
        let (cb1, ca1) = (net.engines[b.idx].counters(), net.engines[a.idx].counters());
        let n = u64::from(n);
        let dup = cb1.duplicate_request - b0.duplicate_request;
        match kind {
            0 => assert_eq!(delta(cb1, &b0, DropReason::UnknownQp), n),
            1 | 6 => {
                assert_eq!(dup, n);
                assert_eq!(delta(cb1, &b0, DropReason::Sequence), n);
            }
            2 => {
                assert_eq!(dup, n);
                assert_eq!(cb1.dropped(), b0.dropped());
            }
            3 => {
                assert_eq!(cb1.out_of_seq_request - b0.out_of_seq_request, n);
                let naks = cb1.send_seq_err - b0.send_seq_err;
                assert!(naks <= 1);
                assert_eq!(delta(cb1, &b0, DropReason::Sequence) + naks, n);
            }
            4 => assert_eq!(delta(cb1, &b0, DropReason::Malformed), n),
            5 => assert_eq!(delta(cb1, &b0, DropReason::IcrcError), n),
            8 => assert_eq!(delta(cb1, &b0, DropReason::UnexpectedResponse), n),
            9 => assert_eq!(delta(ca1, &a0, DropReason::UnexpectedResponse), n),
            11 => {
                assert_eq!(delta(ca1, &a0, DropReason::Sequence), n);
                assert_eq!(ca1.dropped() - a0.dropped(), n);
                assert_eq!(
                    (ca1.rcvd_seq_err, ca1.rcvd_rnr_err),
                    (a0.rcvd_seq_err, a0.rcvd_rnr_err)
                );
            }
            _ => {
                assert_eq!(delta(cb1, &b0, DropReason::WrongTransport), n / 2);
                assert_eq!(delta(cb1, &b0, DropReason::PkeyMismatch), n / 2);
            }
        }
        assert_eq!(
            snap(&b_mems),
            mem0,
            "a spoofed burst of kind {kind} changed B's memory"
        );
        kinds_done.insert(kind);
    }
    assert_eq!(kinds_done.len(), 12, "every kind of burst ran");
    // The transfer completed, in order, byte-exact.
    assert_eq!(ca.iter().map(|c| c.wr_id).collect::<Vec<_>>(), posted);
    assert!(ca.iter().all(|c| c.status == WcStatus::Success), "{ca:?}");
    assert_eq!(cb.len(), 16);
    assert!(cb
        .iter()
        .all(|c| c.status == WcStatus::Success && c.byte_len == K));
    let (am, bm) = (a.mem.snapshot(), b.mem.snapshot());
    assert!(bm[..256 * 1024] == am[..256 * 1024], "WRITE data");
    assert!(
        bm[512 * 1024..768 * 1024] == am[256 * 1024..512 * 1024],
        "SEND data"
    );
    assert!(
        am[512 * 1024..640 * 1024] == bm[768 * 1024..896 * 1024],
        "READ data"
    );
    assert_eq!([secret.snapshot(), ro.snapshot(), other.snapshot()], fixed);

    // Phase 2: spoofed requests at B's expected PSN, each on a fresh
    // connection. The engine cannot tell them from the peer's own; they
    // get exactly what the peer's grants allow, a refusal takes the QP to
    // ERR without touching memory, and every answer goes to the peer's
    // address, never to the spoofer.
    let mut refused = |what: &str, make: &dyn Fn(u32, Psn) -> Vec<u8>, copies: u32| {
        let (_qa2, qb2) = connect(&mut net, a, b, &p);
        net.run(Duration::from_millis(1));
        let epsn = net.engines[b.idx].query_qp(qb2).unwrap().0.rq_psn;
        let b0 = net.engines[b.idx].counters().clone();
        let mem0 = snap(&b_mems);
        for _ in 0..copies {
            to_b(&mut net, &make(qb2, epsn), IcrcStatus::Ok);
        }
        let now = net.now();
        let mut answers = Vec::new();
        while let Some(t) = net.engines[b.idx].poll_transmit(now) {
            assert_eq!(
                t.dst, a.addr,
                "{what}: B answered someone other than its peer"
            );
            answers.push(t.payload[0]);
        }
        assert_eq!(
            answers,
            [Opcode::RC_ACKNOWLEDGE.0],
            "{what}: one NAK and nothing else"
        );
        let c = net.engines[b.idx].counters();
        assert_eq!(c.send_err - b0.send_err, 1, "{what}");
        assert_eq!(
            delta(c, &b0, DropReason::QpState),
            u64::from(copies - 1),
            "{what}"
        );
        assert_eq!(
            net.engines[b.idx].query_qp(qb2).unwrap().0.state,
            QpState::Err
        );
        assert_eq!(snap(&b_mems), mem0, "{what}: B's memory changed");
    };
    let guesses = pattern(4 * 1000, 99);
    let mut g = guesses
        .chunks(4)
        .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]));
    let guess = std::cell::RefCell::new(move || g.next().unwrap_or(1));
    let real = [b.mr.rkey, secret_key, ro_key, other_key];
    refused(
        "guessed rkeys",
        &|q, e| {
            let k = (guess.borrow_mut())();
            assert!(!real.contains(&k));
            let mut r = write_only(q, e, reth(IOVA, 64, k), &data);
            r.bth.ack_req = true;
            forge(&r, a.addr, b.addr, 0xc000)
        },
        1000,
    );
    refused(
        "a RETH past the region",
        &|q, e| wr(q, e, reth(IOVA + (1 << 20) - 64, 4096, b.mr.rkey), true),
        10,
    );
    refused(
        "a READ of 2 GiB",
        &|q, e| {
            forge(
                &read_req(q, e, reth(0x6000_0000, 0x7fff_ffff, ro_key)),
                a.addr,
                b.addr,
                0xc000,
            )
        },
        10,
    );
    refused(
        "a key of another PD",
        &|q, e| wr(q, e, reth(0x7000_0000, 64, other_key), true),
        10,
    );
    refused(
        "a WRITE to a local-only region",
        &|q, e| wr(q, e, reth(0x5000_0000, 64, secret_key), true),
        10,
    );
    refused(
        "a WRITE to a read-only region",
        &|q, e| wr(q, e, reth(0x6000_0000, 64, ro_key), true),
        10,
    );
    assert_eq!([secret.snapshot(), ro.snapshot(), other.snapshot()], fixed);

    // A spoofed READ the peer is entitled to is served, to the peer.
    let (_qa2, qb2) = connect(&mut net, a, b, &p);
    let epsn = net.engines[b.idx].query_qp(qb2).unwrap().0.rq_psn;
    let r = read_req(qb2, epsn, reth(0x6000_0000, 4096, ro_key));
    to_b(&mut net, &forge(&r, a.addr, b.addr, 0xc000), IcrcStatus::Ok);
    let now = net.now();
    let mut n_resp = 0;
    while let Some(t) = net.engines[b.idx].poll_transmit(now) {
        assert_eq!(
            (t.src, t.dst),
            (b.addr, a.addr),
            "a READ answered to the spoofer"
        );
        n_resp += 1;
    }
    assert_eq!(n_resp, 4, "4096 bytes in 1024-byte responses");

    // A spoofed WRITE with the right key at the right PSN writes exactly
    // where the peer may, and nowhere else.
    let (_qa2, qb2) = connect(&mut net, a, b, &p);
    let epsn = net.engines[b.idx].query_qp(qb2).unwrap().0.rq_psn;
    let mut want = snap(&b_mems);
    want[0][4096..4160].copy_from_slice(&data);
    to_b(
        &mut net,
        &wr(qb2, epsn, reth(IOVA + 4096, 64, b.mr.rkey), true),
        IcrcStatus::Ok,
    );
    assert_eq!(snap(&b_mems), want);

    // A spoofed NAK for a PSN A has outstanding fails that work request and
    // takes A's QP to ERR (flushing the rest), touching no memory: what a
    // spoofer who can guess QPN and PSN can do is end a connection.
    let (qa2, _qb2) = connect(&mut net, a, b, &p);
    let psn = net.engines[a.idx].query_qp(qa2).unwrap().0.sq_psn;
    let a_mem0 = a.mem.snapshot();
    for i in 0..2u64 {
        let mut w = SendWr::new(900 + i, SendOpcode::RdmaWrite);
        w.sg_list = vec![sge(a, 0, 4096)];
        w.remote_addr = IOVA + 8192;
        w.rkey = b.mr.rkey;
        net.engines[a.idx].post_send(qa2, w).unwrap();
    }
    net.flush();
    let r = nak(qa2, psn, AethSyndrome::Nak(NakCode::RemoteAccessError));
    let now = net.now();
    net.engines[a.idx].handle_datagram(
        now,
        meta(b.addr, a.addr, IcrcStatus::Ok),
        &forge(&r, b.addr, a.addr, 0xc000),
    );
    let c = completions(&mut net, a);
    assert_eq!(
        c.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
        [(900, WcStatus::RemAccessErr), (901, WcStatus::WrFlushErr)]
    );
    assert_eq!(
        net.engines[a.idx].query_qp(qa2).unwrap().0.state,
        QpState::Err
    );
    assert!(a.mem.snapshot() == a_mem0);
    net.run(Duration::from_millis(50));
}

/// Counts neighbours closer than `within` in a sequence (what counting up
/// from a known key or QP number would find).
fn close_neighbours(v: &[u32], within: u32) -> usize {
    v.windows(2)
        .filter(|w| w[0].abs_diff(w[1]) <= within)
        .count()
}

#[test]
fn keys_and_qp_numbers_are_not_guessable() {
    let _g = serial();
    let ctx = Device::soft(ip(4)).open().expect("open 127.0.3.4");
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16, None).unwrap();

    // 1000 regions at once: 1000 different keys, none next to the one
    // before (index or key part), indexes spread over the 24 bits and key
    // parts over the 8.
    let mrs: Vec<MemoryRegion> = (0..1000)
        .map(|_| {
            pd.alloc_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
                .unwrap()
        })
        .collect();
    let keys: Vec<u32> = mrs.iter().map(|m| m.rkey()).collect();
    assert_eq!(
        keys.iter().collect::<HashSet<_>>().len(),
        1000,
        "a key twice"
    );
    assert_eq!(
        close_neighbours(&keys, 256),
        0,
        "sequential keys: {:x?}",
        &keys[..8]
    );
    let indexes: HashSet<u32> = keys.iter().map(|&k| key_index(k)).collect();
    assert_eq!(indexes.len(), 1000);
    let high = keys
        .iter()
        .filter(|&&k| key_index(k) & 0x80_0000 != 0)
        .count();
    assert!(
        (400..=600).contains(&high),
        "{high} of 1000 indexes in the upper half"
    );
    let variants: HashSet<u8> = keys.iter().map(|&k| key_variant(k)).collect();
    assert!(
        variants.len() > 200,
        "{} distinct key parts",
        variants.len()
    );

    // 1000 QPs: 1000 different numbers, none next to the one before, and
    // initial PSNs just as random.
    let cap = QpCap {
        max_send_wr: 1,
        max_recv_wr: 1,
        ..QpCap::default()
    };
    let qps: Vec<QueuePair> = (0..1000)
        .map(|_| {
            ctx.create_qp(&pd, &QpInitAttr::new(QpType::Rc, &cq, &cq).with_cap(cap))
                .unwrap()
        })
        .collect();
    let qpns: Vec<u32> = qps.iter().map(|q| q.qp_num()).collect();
    assert_eq!(
        qpns.iter().collect::<HashSet<_>>().len(),
        1000,
        "a QPN twice"
    );
    // The low 16 bits are random (the top 8 are the process's prefix), so
    // two consecutive QPNs land next to each other with odds of 2 in
    // 65536: about 3% of runs see one such pair among 999 (a CI run did).
    // A counter would give 999; three or more happen once in 10^5 runs.
    assert!(
        close_neighbours(&qpns, 1) <= 2,
        "sequential QPNs: {:x?}",
        &qpns[..8]
    );
    assert!(qpns.iter().all(|&n| (0x10..0x00ff_fff0).contains(&n)));
    // The top 8 bits are the process's prefix on its address (random per
    // process: rxe_net::share), the low 16 random per QP.
    let prefixes: HashSet<u32> = qpns.iter().map(|&n| n >> 16).collect();
    assert_eq!(prefixes.len(), 1, "one prefix per process: {prefixes:x?}");
    let high = qpns.iter().filter(|&&n| n & 0x8000 != 0).count();
    assert!(
        (400..=600).contains(&high),
        "{high} of 1000 QPNs in the upper half of their prefix's range"
    );
    let psns: HashSet<u32> = qps.iter().map(|q| q.endpoint().psn).collect();
    assert!(psns.len() >= 990, "{} distinct initial PSNs", psns.len());
    drop(qps);
    drop(mrs);

    // Registering the same buffer again and again: a new key each time,
    // never one handed out before (the last 4096 retired keys are never
    // reissued).
    let mut buf = vec![7u8; 4096];
    let mut seen = HashSet::new();
    let mut last = 0;
    for _ in 0..1000 {
        let mr = pd
            .register(buf, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
            .unwrap();
        let k = mr.rkey();
        assert_ne!(k, last);
        assert!(seen.insert(k), "key {k:#x} reissued");
        last = k;
        buf = mr.deregister().map_err(|(_, e)| e).unwrap();
    }

    // Another device draws other numbers.
    let ctx2 = Device::soft(ip(5)).open().expect("open 127.0.3.5");
    let pd2 = ctx2.alloc_pd().unwrap();
    let cq2 = ctx2.create_cq(16, None).unwrap();
    let keys2: HashSet<u32> = (0..100)
        .map(|_| pd2.alloc_mr(64, Access::LOCAL_WRITE).unwrap().rkey())
        .collect();
    assert!(keys2.iter().filter(|k| seen.contains(k)).count() <= 1);

    // Memory windows: every bind of a type 1 window changes its key part
    // (the index stays), and the old rkey stops working; a type 2 window
    // gets a new key part at each bind after an invalidation.
    let mwmr = pd2
        .alloc_mr(8192, Access::LOCAL_WRITE | Access::MW_BIND)
        .unwrap();
    let qp_a = ctx
        .create_qp(&pd, &QpInitAttr::new(QpType::Rc, &cq, &cq))
        .unwrap();
    let qp_b = ctx2
        .create_qp(&pd2, &QpInitAttr::new(QpType::Rc, &cq2, &cq2))
        .unwrap();
    let opts = ConnectOptions::default();
    qp_a.connect(&qp_b.endpoint(), &opts).unwrap();
    qp_b.connect(&qp_a.endpoint(), &opts).unwrap();
    let mut mw = pd2.alloc_mw(MwType::Type1).unwrap();
    let rw = Access::REMOTE_READ | Access::REMOTE_WRITE;
    let first = qp_b.bind_mw(&mut mw, &mwmr, 0..4096, rw).unwrap();
    let (mut old, mut prev) = (first, first);
    let mut parts = HashSet::new();
    for _ in 0..255 {
        let k = qp_b.bind_mw(&mut mw, &mwmr, 0..4096, rw).unwrap();
        assert_ne!(k, prev, "a rebind kept the rkey");
        assert_eq!(key_index(k), key_index(first));
        parts.insert(key_variant(k));
        (old, prev) = (prev, k);
    }
    assert!(
        parts.len() > 100,
        "{} distinct key parts in 255 binds",
        parts.len()
    );
    let mut mw2 = pd2.alloc_mw(MwType::Type2).unwrap();
    let k1 = qp_b
        .post_bind_mw(1, &mut mw2, &mwmr, 4096..8192, rw)
        .unwrap();
    assert_eq!(cq2.wait(1, T).unwrap()[0].status, WcStatus::Success);
    let mut inv = SendWr::new(2, SendOpcode::LocalInv);
    inv.invalidate_rkey = k1;
    qp_b.post_send(&[inv]).unwrap();
    assert_eq!(cq2.wait(1, T).unwrap()[0].status, WcStatus::Success);
    let k2 = qp_b
        .post_bind_mw(3, &mut mw2, &mwmr, 4096..8192, rw)
        .unwrap();
    assert_eq!(cq2.wait(1, T).unwrap()[0].status, WcStatus::Success);
    assert_ne!(k1, k2);

    // The current type 1 rkey works from the peer; the one before it does
    // not (and that error ends the connection, so it comes last). With 8
    // bits of key part an older key may come round again after enough
    // binds: only the one just replaced is sure to be dead.
    let src = pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    src.write(0, &[0x5a; 64]).unwrap();
    let at = |rkey: u32| RemoteRegion {
        addr: mwmr.addr(),
        len: 64,
        rkey,
    };
    qp_a.post_send(&[SendWr::write(1, &[src.sge(0..64)], at(prev))])
        .unwrap();
    assert_eq!(cq.wait(1, T).unwrap()[0].status, WcStatus::Success);
    assert_eq!(mwmr.to_vec()[..64], [0x5a; 64]);
    src.write(0, &[0xa5; 64]).unwrap();
    qp_a.post_send(&[SendWr::write(2, &[src.sge(0..64)], at(old))])
        .unwrap();
    assert_eq!(cq.wait(1, T).unwrap()[0].status, WcStatus::RemAccessErr);
    assert_eq!(mwmr.to_vec()[..64], [0x5a; 64], "an old window key wrote");
}

/// A peer's refused message never loses the receive it took: the
/// responder completes it (flushed, when the QP goes to ERR). Two ways it
/// used to vanish, found by the `responder` fuzz target's oracle: a SEND
/// FIRST in the middle of a SEND (any refusal without a receive status),
/// and a WRITE with immediate whose region was deregistered mid-message.
#[test]
fn refused_messages_keep_their_receives() {
    use rxe_net::sim::Faults;
    use rxe_tests::sim::*;
    let _g = serial();
    let mtu = 1024usize;
    let payload = vec![0x42u8; mtu];
    for case in ["send first twice", "write with immediate, region gone"] {
        let (mut net, nodes) = network(0xbad, Faults::none(), 2, 1 << 16);
        let (a, b) = (&nodes[0], &nodes[1]);
        let (_qa, qb) = connect(&mut net, a, b, &ConnParams::default());
        net.engines[b.idx]
            .post_recv(
                qb,
                RecvWr {
                    wr_id: 77,
                    sg_list: vec![sge(b, 0, 4096)],
                },
            )
            .unwrap();
        let extra = Arc::new(VecMemory::new(4096));
        let key = net.engines[b.idx]
            .reg_mr(
                b.pd,
                extra,
                0x9000_0000,
                Access::LOCAL_WRITE | Access::REMOTE_WRITE,
            )
            .unwrap()
            .rkey;
        let e = net.engines[b.idx].query_qp(qb).unwrap().0.rq_psn;
        let meta = RecvMeta {
            src: a.addr,
            dst: b.addr,
            src_port: 0xc000,
            icrc: IcrcStatus::Ok,
        };
        let now = net.now();
        let feed = |net: &mut rxe_net::sim::SimNet, r: &PacketRepr<'_>| {
            let bytes = forge(r, a.addr, b.addr, 0xc000);
            net.engines[b.idx].handle_datagram(now, meta, &bytes);
        };
        if case == "send first twice" {
            for psn in [e, e.next()] {
                let mut r = PacketRepr::new(bth(Opcode::RC_SEND_FIRST, qb, psn));
                r.payload = &payload;
                feed(&mut net, &r);
            }
        } else {
            let mut r = PacketRepr::new(bth(Opcode::RC_RDMA_WRITE_FIRST, qb, e));
            r.reth = Some(RethRepr {
                va: 0x9000_0000,
                rkey: key,
                dma_len: 2 * mtu as u32,
            });
            r.payload = &payload;
            feed(&mut net, &r);
            net.engines[b.idx].dereg_mr(key).unwrap();
            let mut r =
                PacketRepr::new(bth(Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE, qb, e.next()));
            r.immdt = Some(5);
            r.payload = &payload;
            feed(&mut net, &r);
        }
        assert_eq!(
            net.engines[b.idx].query_qp(qb).unwrap().0.state,
            QpState::Err,
            "{case}"
        );
        let c = completions(&mut net, b);
        assert_eq!(
            c.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
            [(77, WcStatus::WrFlushErr)],
            "{case}: the receive must complete, flushed"
        );
    }
}

/// Two engines on the simulated network (seeded with `seed`) with an RC
/// QP pair, and a READ (work request 1) of `len` bytes from the start of
/// B's region into A's posted on A's QP; returns the network, the nodes and
/// A's QP number.
fn rc_pair_with_read(
    seed: u64,
    len: u32,
    flags: Option<SendFlags>,
) -> (rxe_net::sim::SimNet, Vec<rxe_tests::sim::Node>, u32) {
    use rxe_net::sim::Faults;
    use rxe_tests::sim::*;
    let (mut net, nodes) = network(seed, Faults::none(), 2, 1 << 16);
    let (a, b) = (&nodes[0], &nodes[1]);
    let (qa, _qb) = connect(&mut net, a, b, &ConnParams::default());
    let mut r = SendWr::new(1, SendOpcode::RdmaRead);
    r.sg_list = vec![sge(a, 0, len)];
    r.remote_addr = IOVA;
    r.rkey = b.mr.rkey;
    if let Some(f) = flags {
        r.flags = f;
    }
    net.engines[a.idx].post_send(qa, r).unwrap();
    (net, nodes, qa)
}

/// A 16-packet READ (`rc_pair_with_read`, seeded with `seed`) whose first
/// response has come in, then an ACK or NAK with `syndrome` from B for the
/// READ's eleventh PSN. Returns the READ's first PSN and the PSN, VA and
/// length of the READ request A sends again once the timers have run
/// `after` later.
fn retry_after_answer_inside_read(
    seed: u64,
    syndrome: AethSyndrome,
    after: Duration,
) -> (rxe_core::psn::Psn, (rxe_core::psn::Psn, u64, u32)) {
    use rxe_core::wire::Packet;
    let (mut net, nodes, qa) = rc_pair_with_read(seed, 16 * 1024, None);
    let (a, b) = (&nodes[0], &nodes[1]);
    let now = net.now();
    let req = net.engines[a.idx]
        .poll_transmit(now)
        .expect("the READ request");
    let first = Packet::new_checked(&req.payload[..]).unwrap().bth().psn();
    let meta = RecvMeta {
        src: b.addr,
        dst: a.addr,
        src_port: 0xc000,
        icrc: IcrcStatus::Ok,
    };
    // The first of 16 responses, then the answer for PSN first + 10.
    let data = [7u8; 1024];
    let mut resp = PacketRepr::new(bth(Opcode::RC_RDMA_READ_RESPONSE_FIRST, qa, first));
    resp.aeth = Some(AethRepr {
        syndrome: AethSyndrome::Ack { credits: 0x1f },
        msn: 0,
    });
    resp.payload = &data;
    for p in [resp, nak(qa, first.add(10), syndrome)] {
        let bytes = forge(&p, b.addr, a.addr, 0xc000);
        net.engines[a.idx].handle_datagram(now, meta, &bytes);
    }
    let later = now + after;
    net.engines[a.idx].handle_timeout(later);
    let retry = net.engines[a.idx]
        .poll_transmit(later)
        .unwrap_or_else(|| panic!("{syndrome:?}: a retry"));
    let p = Packet::new_checked(&retry.payload[..]).unwrap();
    let reth = p.reth().expect("a READ request");
    (first, (p.bth().psn(), reth.va(), reth.dma_len()))
}

/// An ACK for a PSN inside a READ that still misses responses does not
/// acknowledge them: a retry asks again from the first missing one. (Found
/// by the `requester` fuzz target: the retry resumed after the bogus ACK,
/// and the READ completed successfully with part of its buffer never
/// written.)
#[test]
fn an_ack_inside_a_read_does_not_skip_its_responses() {
    let _g = serial();
    // The transport timer fires: the READ is asked again from its second
    // response on, not from after the bogus ACK.
    let (first, retry) = retry_after_answer_inside_read(
        0xacc,
        AethSyndrome::Ack { credits: 0x1f },
        Duration::from_secs(1),
    );
    assert_eq!(
        retry,
        (first.add(1), rxe_tests::sim::IOVA + 1024, 15 * 1024)
    );
}

/// A NAK (RNR or sequence) for a PSN inside a READ that still misses
/// responses does not skip them either: the READ is asked again from its
/// first missing response. (Found by the `requester` fuzz target: an RNR
/// NAK inside a READ went back to the NAK's PSN, so the READ waited for its
/// last response only, and completed successfully with the rest of its
/// buffer never written.)
#[test]
fn a_nak_inside_a_read_does_not_skip_its_responses() {
    let _g = serial();
    for syndrome in [
        // Timer code 1: 0.01 ms (code 0 is the longest, 655 ms).
        AethSyndrome::RnrNak { timer: 1 },
        AethSyndrome::Nak(NakCode::PsnSequenceError),
    ] {
        // Once any RNR wait is over, the READ is asked again from its
        // second response on.
        let (first, retry) =
            retry_after_answer_inside_read(0x4ac, syndrome, Duration::from_millis(100));
        assert_eq!(
            retry,
            (first.add(1), rxe_tests::sim::IOVA + 1024, 15 * 1024),
            "{syndrome:?}"
        );
    }
}

/// ACKs and NAKs for PSNs already acknowledged are stale (old copies, or a
/// spoofer's): the requester drops them, counted as `Sequence`, without a
/// go-back, without using up a retry and without failing anything. Before,
/// each sequence NAK for an old PSN started a go-back and used a retry, so
/// eight of them in decreasing order took a QP with `retry_cnt` 7 to ERR
/// with `RETRY_EXC_ERR`, and a fatal NAK for an old PSN failed whatever was
/// outstanding. A NAK for the oldest unacknowledged PSN still starts a
/// go-back.
#[test]
fn stale_acks_and_naks_cost_nothing() {
    use rxe_core::wire::Packet;
    use rxe_net::sim::Faults;
    use rxe_tests::sim::*;
    let _g = serial();
    let (mut net, nodes) = network(0x57a1e, Faults::none(), 2, 1 << 16);
    let (a, b) = (&nodes[0], &nodes[1]);
    let p = ConnParams::default();
    assert_eq!(p.retry_cnt, 7);
    let (qa, _qb) = connect(&mut net, a, b, &p);
    let write = |net: &mut rxe_net::sim::SimNet, i: u64| {
        let mut w = SendWr::new(i, SendOpcode::RdmaWrite);
        w.sg_list = vec![sge(a, i * 64, 64)];
        w.remote_addr = IOVA + i * 64;
        w.rkey = b.mr.rkey;
        w.flags = SendFlags::SIGNALED;
        net.engines[a.idx].post_send(qa, w).unwrap();
    };
    a.mem.write(0, &pattern(1024, 5));
    // Sixteen one-packet WRITEs, acknowledged: PSNs psn_a .. psn_a + 15.
    for i in 0..16 {
        write(&mut net, i);
    }
    net.run(Duration::from_millis(10));
    let c = completions(&mut net, a);
    assert_eq!(c.len(), 16);
    assert!(c.iter().all(|c| c.status == WcStatus::Success));
    // A seventeenth, sent but not delivered: outstanding at psn_a + 16.
    write(&mut net, 16);
    let now = net.now();
    let req = net.engines[a.idx].poll_transmit(now).expect("the WRITE");
    let outstanding = Packet::new_checked(&req.payload[..]).unwrap().bth().psn();
    assert_eq!(outstanding, p.psn_a.add(16));
    // Stale answers "from B": sequence NAKs for old PSNs in decreasing order
    // (more than retry_cnt), ACKs for old PSNs, an RNR NAK and fatal NAKs.
    let mut stale = Vec::new();
    for k in 1..=12u32 {
        stale.push((
            outstanding.sub(k),
            AethSyndrome::Nak(NakCode::PsnSequenceError),
        ));
    }
    stale.push((outstanding.sub(1), AethSyndrome::Ack { credits: 0x1f }));
    stale.push((outstanding.sub(9), AethSyndrome::Ack { credits: 0x1f }));
    stale.push((outstanding.sub(3), AethSyndrome::RnrNak { timer: 0 }));
    stale.push((
        outstanding.sub(2),
        AethSyndrome::Nak(NakCode::RemoteAccessError),
    ));
    stale.push((
        outstanding.sub(5),
        AethSyndrome::Nak(NakCode::InvalidRequest),
    ));
    let meta = RecvMeta {
        src: b.addr,
        dst: a.addr,
        src_port: 0xc000,
        icrc: IcrcStatus::Ok,
    };
    let c0 = net.engines[a.idx].counters().clone();
    for &(psn, syndrome) in &stale {
        let bytes = forge(&nak(qa, psn, syndrome), b.addr, a.addr, 0xc000);
        net.engines[a.idx].handle_datagram(now, meta, &bytes);
        assert!(
            net.engines[a.idx].poll_transmit(now).is_none(),
            "a stale {syndrome:?} for {psn:?} made A send"
        );
    }
    let c1 = net.engines[a.idx].counters().clone();
    assert_eq!(
        completions(&mut net, a)
            .iter()
            .map(|c| (c.wr_id, c.status))
            .collect::<Vec<_>>(),
        [],
        "stale answers completed something"
    );
    assert_eq!(
        net.engines[a.idx].query_qp(qa).unwrap().0.state,
        QpState::Rts
    );
    assert_eq!(
        delta(&c1, &c0, DropReason::Sequence),
        stale.len() as u64,
        "every stale answer dropped as Sequence"
    );
    assert_eq!(c1.dropped() - c0.dropped(), stale.len() as u64);
    assert_eq!(
        (
            c1.rcvd_seq_err,
            c1.rcvd_rnr_err,
            c1.retransmitted_pkts,
            c1.retry_exceeded_err
        ),
        (
            c0.rcvd_seq_err,
            c0.rcvd_rnr_err,
            c0.retransmitted_pkts,
            c0.retry_exceeded_err
        )
    );
    // The oldest unacknowledged PSN is not stale: a sequence NAK for it
    // sends the WRITE again (one retry).
    let bytes = forge(
        &nak(
            qa,
            outstanding,
            AethSyndrome::Nak(NakCode::PsnSequenceError),
        ),
        b.addr,
        a.addr,
        0xc000,
    );
    net.engines[a.idx].handle_datagram(now, meta, &bytes);
    let c2 = net.engines[a.idx].counters().clone();
    assert_eq!(c2.rcvd_seq_err, c1.rcvd_seq_err + 1);
    assert_eq!(c2.dropped(), c1.dropped());
    // The retransmission reaches B, B's ACK reaches A: the WRITE completes.
    net.run(Duration::from_millis(10));
    assert_eq!(
        net.engines[a.idx].counters().retransmitted_pkts,
        c1.retransmitted_pkts + 1
    );
    let c = completions(&mut net, a);
    assert_eq!(
        c.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
        [(16, WcStatus::Success)]
    );
    let (am, bm) = (a.mem.snapshot(), b.mem.snapshot());
    assert!(am[..17 * 64] == bm[..17 * 64]);
    assert_eq!(
        net.engines[a.idx].query_qp(qa).unwrap().0.state,
        QpState::Rts
    );
}

/// A go-back into a READ whose missing responses then come in before the
/// READ is asked again: the READ completes, and the send cursor, which
/// was inside it, moves to the start of the next work request. (Found by
/// the `requester` fuzz target: the cursor kept its packet index, and the
/// next work request was sent from its middle; for a short SEND with
/// inline data, from past its end, which panicked.)
#[test]
fn a_read_finished_under_the_cursor_moves_it_on() {
    use rxe_core::wire::Packet;
    use rxe_tests::sim::*;
    let _g = serial();
    let (mut net, nodes, qa) = rc_pair_with_read(0xc0c0, 3 * 1024, Some(SendFlags::SIGNALED));
    let (a, b) = (&nodes[0], &nodes[1]);
    let inline = pattern(100, 9);
    let mut s = SendWr::new(2, SendOpcode::Send);
    s.inline_data = Some(inline.clone());
    s.flags = SendFlags::SIGNALED | SendFlags::INLINE;
    net.engines[a.idx].post_send(qa, s).unwrap();
    let now = net.now();
    // The READ request and the SEND leave (and are lost).
    let mut sent = Vec::new();
    while let Some(t) = net.engines[a.idx].poll_transmit(now) {
        sent.push(Packet::new_checked(&t.payload[..]).unwrap().bth().psn());
    }
    let first = sent[0];
    assert_eq!(sent, [first, first.add(3)]);
    let meta = RecvMeta {
        src: b.addr,
        dst: a.addr,
        src_port: 0xc000,
        icrc: IcrcStatus::Ok,
    };
    let data = pattern(3 * 1024, 4);
    let response = |op: Opcode, k: usize| {
        let mut r = PacketRepr::new(bth(op, qa, first.add(k as u32)));
        if op != Opcode::RC_RDMA_READ_RESPONSE_MIDDLE {
            r.aeth = Some(AethRepr {
                syndrome: AethSyndrome::Ack { credits: 0x1f },
                msn: 0,
            });
        }
        r.payload = &data[k * 1024..(k + 1) * 1024];
        forge(&r, b.addr, a.addr, 0xc000)
    };
    // The first response; the transport timer goes back to the second.
    let bytes = response(Opcode::RC_RDMA_READ_RESPONSE_FIRST, 0);
    net.engines[a.idx].handle_datagram(now, meta, &bytes);
    let later = now + Duration::from_secs(1);
    net.engines[a.idx].handle_timeout(later);
    // Before A asks again, the other two arrive: the READ completes.
    for (op, k) in [
        (Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, 1),
        (Opcode::RC_RDMA_READ_RESPONSE_LAST, 2),
    ] {
        let bytes = response(op, k);
        net.engines[a.idx].handle_datagram(later, meta, &bytes);
    }
    let c = completions(&mut net, a);
    assert_eq!(
        c.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
        [(1, WcStatus::Success)]
    );
    assert!(a.mem.snapshot()[..3 * 1024] == data[..]);
    // What A sends next is the whole SEND again, from its start.
    let t = net.engines[a.idx]
        .poll_transmit(later)
        .expect("the SEND again");
    let p = Packet::new_checked(&t.payload[..]).unwrap();
    assert_eq!(p.bth().psn(), first.add(3));
    assert_eq!(p.payload(), &inline[..]);
    assert!(net.engines[a.idx].poll_transmit(later).is_none());
}
