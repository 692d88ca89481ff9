//! `rxe lesson NAME -w OUT.pcap`: a small RoCE v2 scenario, run between two
//! engines on rxe-net's simulated network, written to a pcap file.
//!
//! Each lesson is a few dozen packets that show one thing (a SEND, a READ,
//! a lost packet and go-back-N, an RNR NAK, ...), small enough to read on
//! one ladder diagram (`rxe dump --ladder`). The two engines are rxe-rs's
//! own, on a virtual clock ([`rxe_net::sim::SimNet`]), so a run takes
//! milliseconds and the same seed gives the same file, byte for byte: the
//! seed chooses the QP numbers, memory keys, first PSNs and, where a lesson
//! says so, which packets the network loses.
//!
//! The capture point is the link between the two hosts after the place
//! where the network drops packets: a packet the network lost is not in
//! the file (the receiver never saw it either), as in a capture taken at a
//! switch behind a lossy link. Requester 10.0.0.1 (A) talks to responder
//! 10.0.0.2 (B); frames are Ethernet, IPv4, UDP to port 4791.
//!
//! What the lesson did (completions on each side, the counters that tell
//! the story) is printed on stdout; `-q` leaves it out.

use clap::Parser;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rxe_core::engine::mem::MwType;
use rxe_core::engine::state::Connect;
use rxe_core::engine::{
    CqId, Engine, EngineConfig, MrKeys, PdId, QpInit, RegionMemory, Transmit, VecMemory,
};
use rxe_core::psn::Psn;
use rxe_core::types::{
    Access, AddressVector, Completion, Mtu, MwBind, QpCap, QpType, RecvWr, SendOpcode, SendWr, Sge,
    UdDest,
};
use rxe_core::wire::{EthRepr, FrameRepr, IpRepr, LinkType, UdpChecksum};
use rxe_net::capture::CaptureWriter;
use rxe_net::sim::{Faults, SimNet};
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// `rxe lesson` arguments.
#[derive(Debug, Parser)]
pub struct Args {
    /// The lesson to run (`--list` shows them all).
    pub name: Option<String>,
    /// Write the lesson's packets to this pcap file.
    #[arg(short = 'w', long = "write", value_name = "OUT.pcap")]
    pub out: Option<PathBuf>,
    /// Seed for QP numbers, keys, first PSNs and the network's faults
    /// (default: the lesson's own, the one the guide's figures use).
    #[arg(long)]
    pub seed: Option<u64>,
    /// List the lessons, one line each.
    #[arg(long)]
    pub list: bool,
    /// Print nothing on stdout.
    #[arg(short, long)]
    pub quiet: bool,
}

/// One lesson: a name, one line about it, its default seed and its script.
struct Lesson {
    name: &'static str,
    about: &'static str,
    seed: u64,
    run: fn(&mut Lab) -> Result<(), String>,
}

const LESSONS: &[Lesson] = &[
    Lesson {
        name: "send",
        about: "RC SEND/RECV: a small SEND, a SEND of three MTUs, a SEND with immediate; each acknowledged",
        seed: 1,
        run: send,
    },
    Lesson {
        name: "write",
        about: "RC RDMA WRITE of 4 KiB (four 1024-byte packets) and a WRITE with immediate",
        seed: 1,
        run: write,
    },
    Lesson {
        name: "read",
        about: "RC RDMA READ of 3000 bytes: one request, three READ responses",
        seed: 1,
        run: read,
    },
    Lesson {
        name: "atomic",
        about: "RC compare-and-swap and fetch-and-add on one 8-byte word, with the values they return",
        seed: 1,
        run: atomic,
    },
    Lesson {
        name: "loss",
        about: "eight RC SENDs, some lost on the way (the seed picks which): PSN sequence error NAK, go-back-N",
        seed: 7,
        run: loss,
    },
    Lesson {
        name: "rnr",
        about: "a SEND before the receiver posted a receive: RNR NAK, the RNR timer, the retry",
        seed: 1,
        run: rnr,
    },
    Lesson {
        name: "duplicate",
        about: "a WRITE, a READ and a fetch-and-add whose answers are all lost: timeout, resend, duplicates answered again",
        seed: 1,
        run: duplicate,
    },
    Lesson {
        name: "bad-rkey",
        about: "an RDMA WRITE with a wrong R_Key: NAK remote access error, both QPs in error",
        seed: 1,
        run: bad_rkey,
    },
    Lesson {
        name: "window",
        about: "a type 2 memory window: WRITE through it, SEND WITH INVALIDATE, the same WRITE refused",
        seed: 1,
        run: window,
    },
    Lesson {
        name: "uc",
        about: "UC: three SENDs, the second lost: no ACK, no NAK, no retransmission",
        seed: 1,
        run: uc,
    },
    Lesson {
        name: "ud",
        about: "UD: datagrams with a DETH (Q_Key, source QP), one with immediate data, one with a wrong Q_Key",
        seed: 1,
        run: ud,
    },
];

/// Runs `rxe lesson`.
pub fn run(args: &Args) -> ExitCode {
    if args.list {
        let w = LESSONS.iter().map(|l| l.name.len()).max().unwrap_or(0);
        for l in LESSONS {
            println!("{:w$}  {}", l.name, l.about);
        }
        return ExitCode::SUCCESS;
    }
    let names = || {
        LESSONS
            .iter()
            .map(|l| l.name)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let Some(name) = &args.name else {
        eprintln!("rxe lesson: name a lesson ({}), or --list", names());
        return ExitCode::from(2);
    };
    let Some(lesson) = LESSONS.iter().find(|l| l.name == name) else {
        eprintln!(
            "rxe lesson: no lesson {name:?}; the lessons are: {} (rxe lesson --list)",
            names()
        );
        return ExitCode::from(2);
    };
    let Some(out) = &args.out else {
        eprintln!("rxe lesson: -w OUT.pcap is required (where to write the packets)");
        return ExitCode::from(2);
    };
    let seed = args.seed.unwrap_or(lesson.seed);
    let mut lab = Lab::new(seed);
    if let Err(e) = (lesson.run)(&mut lab) {
        eprint!("{}", lab.story);
        eprintln!("rxe lesson {name}: {e}");
        return ExitCode::from(1);
    }
    let (written, lost) = match lab.write_pcap(out) {
        Ok(n) => n,
        Err(e) => {
            eprintln!("rxe lesson: cannot write {}: {e}", out.display());
            return ExitCode::from(2);
        }
    };
    if !args.quiet {
        println!("lesson {name}, seed {seed}: {}", lesson.about);
        print!("{}", lab.story);
        println!(
            "{written} packets written to {}{}",
            out.display(),
            match lost {
                0 => String::new(),
                n => format!(" ({n} more sent but lost on the way, not in the file)"),
            }
        );
    }
    ExitCode::SUCCESS
}

/// Requester A and responder B.
const A: usize = 0;
const B: usize = 1;

/// The virtual address of each side's region.
const IOVA: u64 = 0x10_0000;
/// The region's size.
const REGION: usize = 1 << 16;

/// One engine's resources.
struct Side {
    addr: IpAddr,
    pd: PdId,
    cq: CqId,
    mem: Arc<VecMemory>,
    mr: MrKeys,
}

/// A packet the tap saw.
struct Captured {
    at: Duration,
    frame: Vec<u8>,
    lost: bool,
}

/// The two engines, their network and the capture.
struct Lab {
    net: SimNet,
    sides: [Side; 2],
    rng: SmallRng,
    captured: Arc<Mutex<Vec<Captured>>>,
    story: String,
}

/// A locally administered MAC address for an IPv4 address.
fn mac(addr: IpAddr) -> [u8; 6] {
    match addr {
        IpAddr::V4(a) => {
            let o = a.octets();
            [0x02, 0, o[0], o[1], o[2], o[3]]
        }
        IpAddr::V6(_) => [0x02, 0, 0, 0, 0, 0],
    }
}

/// The Ethernet frame around a datagram the engine sent, as a Linux UDP
/// socket would send it (IPv4 identification 0 and don't-fragment, which
/// the engine's ICRC assumes; UDP checksum 0, as rxe sends).
fn frame(t: &Transmit) -> Option<Vec<u8>> {
    let (IpAddr::V4(src), IpAddr::V4(dst)) = (t.src, t.dst) else {
        return None;
    };
    FrameRepr {
        eth: Some(EthRepr {
            dst: mac(t.dst),
            src: mac(t.src),
            vlans: [None, None],
        }),
        ip: IpRepr::V4 {
            src,
            dst,
            tos: t.traffic_class,
            id: 0,
            dont_fragment: true,
            ttl: t.hop_limit,
        },
        udp_src_port: t.src_port,
        udp_checksum: UdpChecksum::Zero,
    }
    .wrap_vec(&t.payload)
    .ok()
}

/// Connection settings: those of rdma-core's ibv_rc_pingpong.
const MTU: Mtu = Mtu::Mtu1024;
const TIMEOUT: u8 = 14;
const RETRY_CNT: u8 = 7;
const RNR_RETRY: u8 = 7;
const MIN_RNR_TIMER: u8 = 12;
const RD_ATOMIC: u8 = 4;
const QKEY: u32 = 0x1111_1111;

impl Lab {
    fn new(seed: u64) -> Lab {
        let mut net = SimNet::new(seed, Faults::none());
        let mut rng = SmallRng::seed_from_u64(seed ^ 0x5eed_1e55_0000_0000);
        let sides = [1u8, 2].map(|host| {
            let addr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, host));
            let mut e = Engine::new(EngineConfig::new(addr, rng.gen()));
            let pd = e.alloc_pd();
            let cq = e.create_cq(1024).expect("a CQ of 1024 entries");
            let mem = Arc::new(VecMemory::new(REGION));
            let access = Access::LOCAL_WRITE
                | Access::REMOTE_WRITE
                | Access::REMOTE_READ
                | Access::REMOTE_ATOMIC
                | Access::MW_BIND;
            let mr = e
                .reg_mr(pd, mem.clone(), IOVA, access)
                .expect("a 64 KiB region");
            net.add(e);
            Side {
                addr,
                pd,
                cq,
                mem,
                mr,
            }
        });
        let captured: Arc<Mutex<Vec<Captured>>> = Arc::default();
        let c = captured.clone();
        net.set_tap(move |at, t| {
            if let Some(frame) = frame(t) {
                if let Ok(mut c) = c.lock() {
                    c.push(Captured {
                        at,
                        frame,
                        lost: false,
                    });
                }
            }
        });
        Lab {
            net,
            sides,
            rng,
            captured,
            story: String::new(),
        }
    }

    fn say(&mut self, line: impl AsRef<str>) {
        self.story.push_str(line.as_ref());
        self.story.push('\n');
    }

    fn engine(&mut self, side: usize) -> &mut Engine {
        &mut self.net.engines[side]
    }

    fn captured_len(&self) -> usize {
        self.captured.lock().map_or(0, |c| c.len())
    }

    /// Creates a QP on each side and takes both to RTS, connected to each
    /// other (RC, UC) or ready for datagrams (UD). Returns (A's, B's).
    fn connect(&mut self, qp_type: QpType) -> Result<(u32, u32), String> {
        let mut qpn = [0u32; 2];
        for (side, n) in qpn.iter_mut().enumerate() {
            let (pd, cq) = (self.sides[side].pd, self.sides[side].cq);
            *n = self
                .engine(side)
                .create_qp(QpInit {
                    qp_type,
                    pd,
                    send_cq: cq,
                    recv_cq: cq,
                    srq: None,
                    cap: QpCap {
                        max_send_wr: 64,
                        max_recv_wr: 64,
                        ..QpCap::default()
                    },
                    sq_sig_all: true,
                })
                .map_err(|e| format!("create_qp: {e}"))?;
        }
        // Each direction starts at a random 24-bit PSN, as real programs
        // choose (ibv_rc_pingpong: lrand48() & 0xffffff).
        let psn = [
            Psn::new(self.rng.gen::<u32>() & 0xff_ffff),
            Psn::new(self.rng.gen::<u32>() & 0xff_ffff),
        ];
        for side in [A, B] {
            let peer = 1 - side;
            let remote = self.sides[peer].addr;
            self.bring_up(
                qp_type, side, qpn[side], remote, qpn[peer], psn[peer], psn[side],
            )?;
        }
        let name = format!("{qp_type:?}").to_uppercase();
        self.say(format!(
            "A {} QP {:#x} (first PSN {}) and B {name} QP {:#x} (first PSN {}) are ready",
            name,
            qpn[A],
            psn[A].value(),
            qpn[B],
            psn[B].value()
        ));
        Ok((qpn[A], qpn[B]))
    }

    /// RESET → INIT → RTR → RTS with the attributes each step needs.
    #[allow(clippy::too_many_arguments)]
    fn bring_up(
        &mut self,
        qp_type: QpType,
        side: usize,
        qpn: u32,
        remote: IpAddr,
        remote_qpn: u32,
        rq_psn: Psn,
        sq_psn: Psn,
    ) -> Result<(), String> {
        let c = Connect {
            qp_type,
            access: Access::LOCAL_WRITE
                | Access::REMOTE_WRITE
                | Access::REMOTE_READ
                | Access::REMOTE_ATOMIC,
            qkey: QKEY,
            remote,
            dest_qpn: remote_qpn,
            rq_psn,
            sq_psn,
            mtu: MTU,
            rd_atomic: RD_ATOMIC,
            min_rnr_timer: MIN_RNR_TIMER,
            timeout: TIMEOUT,
            retry_cnt: RETRY_CNT,
            rnr_retry: RNR_RETRY,
            port: 1,
            sgid_index: 0,
        };
        let e = self.engine(side);
        for (a, m) in c.steps() {
            e.modify_qp(qpn, &a, m)
                .map_err(|err| format!("modify_qp to {:?}: {err}", a.state))?;
        }
        Ok(())
    }

    /// An SGE over `len` bytes at `offset` of a side's region.
    fn sge(&self, side: usize, offset: u64, len: u32) -> Sge {
        Sge {
            addr: IOVA + offset,
            length: len,
            lkey: self.sides[side].mr.lkey,
        }
    }

    fn post_send(&mut self, side: usize, qpn: u32, wr: SendWr) -> Result<(), String> {
        self.engine(side)
            .post_send(qpn, wr)
            .map_err(|e| format!("post_send: {e}"))
    }

    fn post_recv(
        &mut self,
        side: usize,
        qpn: u32,
        wr_id: u64,
        offset: u64,
        len: u32,
    ) -> Result<(), String> {
        let sge = self.sge(side, offset, len);
        self.engine(side)
            .post_recv(
                qpn,
                RecvWr {
                    wr_id,
                    sg_list: vec![sge],
                },
            )
            .map_err(|e| format!("post_recv: {e}"))
    }

    /// A work request moving `len` bytes from `offset` of A's region.
    fn wr(&self, wr_id: u64, op: SendOpcode, offset: u64, len: u32) -> SendWr {
        let mut wr = SendWr::new(wr_id, op);
        wr.sg_list = vec![self.sge(A, offset, len)];
        wr
    }

    /// A WRITE or READ of `len` bytes between A's region at `offset` and B's
    /// at `remote`, with B's R_Key.
    fn rdma(&self, wr_id: u64, op: SendOpcode, offset: u64, len: u32, remote: u64) -> SendWr {
        let mut wr = self.wr(wr_id, op, offset, len);
        wr.remote_addr = IOVA + remote;
        wr.rkey = self.sides[B].mr.rkey;
        wr
    }

    /// Puts whatever the engines want to send on the network now.
    fn flush(&mut self) {
        self.net.flush();
    }

    /// Runs `f` with a network that loses every packet, then puts what the
    /// engines still want to send on the network (and loses it too).
    /// Returns how many packets were lost.
    fn losing(&mut self, f: impl FnOnce(&mut Lab) -> Result<(), String>) -> Result<u64, String> {
        let n0 = self.captured_len();
        let lost0 = self.net.stats.lost;
        self.net.faults.loss = 1.0;
        let r = f(self);
        self.net.flush();
        self.net.faults.loss = 0.0;
        r?;
        let lost = self.net.stats.lost - lost0;
        let mut c = self.captured.lock().map_err(|_| "capture poisoned")?;
        let n = c.len() - n0;
        if lost != n as u64 {
            return Err(format!("{n} packets sent while losing, but {lost} lost"));
        }
        for p in &mut c[n0..] {
            p.lost = true;
        }
        Ok(lost)
    }

    /// Puts what the engines want to send on the network, which loses it
    /// with probability `p` (drawn from the network's seeded generator).
    /// That must be one packet. Returns whether it was lost.
    fn flush_one_maybe_lost(&mut self, p: f64) -> Result<bool, String> {
        let n0 = self.captured_len();
        let lost0 = self.net.stats.lost;
        self.net.faults.loss = p;
        self.net.flush();
        self.net.faults.loss = 0.0;
        let mut c = self.captured.lock().map_err(|_| "capture poisoned")?;
        if c.len() != n0 + 1 {
            return Err(format!("expected one packet, {} were sent", c.len() - n0));
        }
        let lost = self.net.stats.lost > lost0;
        if let Some(last) = c.last_mut() {
            last.lost = lost;
        }
        Ok(lost)
    }

    /// Runs the network until nothing is left to do (at most 10 s of
    /// virtual time).
    fn run(&mut self) {
        self.net.run(Duration::from_secs(10));
    }

    /// Runs until `done` holds; an error if it never does.
    fn run_until(
        &mut self,
        what: &str,
        done: impl FnMut(&mut SimNet) -> bool,
    ) -> Result<(), String> {
        if self.net.run_until(Duration::from_secs(10), done) {
            Ok(())
        } else {
            Err(format!("the network stopped before {what}"))
        }
    }

    /// Takes a side's completions and tells them.
    fn completions(&mut self, side: usize) -> Result<Vec<Completion>, String> {
        let cq = self.sides[side].cq;
        let mut v = Vec::new();
        self.engine(side)
            .poll_cq(cq, usize::MAX, &mut v)
            .map_err(|e| format!("poll_cq: {e}"))?;
        let who = ["A", "B"][side];
        for c in &v {
            let mut line = format!(
                "{who} completion: wr_id {} {:?} {} {} bytes",
                c.wr_id, c.opcode, c.status, c.byte_len
            );
            if let Some(imm) = c.imm_data {
                let _ = write!(line, ", immediate {imm:#010x}");
            }
            if let Some(k) = c.invalidated_rkey {
                let _ = write!(line, ", invalidated R_Key {k:#x}");
            }
            self.say(line);
        }
        Ok(v)
    }

    /// Tells the counters that are not zero, for one side.
    fn counters(&mut self, side: usize) {
        let c = self.net.engines[side].counters().clone();
        let mut parts = Vec::new();
        for (name, v) in [
            ("retransmitted_pkts", c.retransmitted_pkts),
            ("duplicate_request", c.duplicate_request),
            ("out_of_seq_request", c.out_of_seq_request),
            ("send_seq_err", c.send_seq_err),
            ("rcvd_seq_err", c.rcvd_seq_err),
            ("send_rnr_err", c.send_rnr_err),
            ("rcvd_rnr_err", c.rcvd_rnr_err),
            ("tail_probes", c.tail_probes),
            ("retry_timeouts", c.retry_timeouts),
            ("send_err", c.send_err),
        ] {
            if v > 0 {
                parts.push(format!("{name} {v}"));
            }
        }
        for (why, n) in &c.drops {
            parts.push(format!("dropped ({why:?}) {n}"));
        }
        let who = ["A", "B"][side];
        if parts.is_empty() {
            self.say(format!(
                "{who} counters: nothing retransmitted, nothing dropped"
            ));
        } else {
            self.say(format!("{who} counters: {}", parts.join(", ")));
        }
    }

    /// The 8-byte word at `offset` of a side's region (host byte order).
    fn word(&self, side: usize, offset: usize) -> u64 {
        let snap = self.sides[side].mem.snapshot();
        let mut b = [0u8; 8];
        b.copy_from_slice(&snap[offset..offset + 8]);
        u64::from_ne_bytes(b)
    }

    fn fill(&self, side: usize, offset: usize, len: usize, seed: u8) {
        let bytes: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(7) ^ seed).collect();
        self.sides[side].mem.write(offset, &bytes);
    }

    /// Writes the packets that crossed the link (not the lost ones) to a
    /// pcap file. Returns (written, lost).
    fn write_pcap(&self, out: &std::path::Path) -> Result<(usize, usize), String> {
        let c = self.captured.lock().map_err(|_| "capture poisoned")?;
        let mut w = CaptureWriter::create(out, LinkType::Ethernet).map_err(|e| e.to_string())?;
        let mut n = 0;
        for p in c.iter().filter(|p| !p.lost) {
            w.write(p.at, &p.frame).map_err(|e| e.to_string())?;
            n += 1;
        }
        w.finish().map_err(|e| e.to_string())?;
        Ok((n, c.len() - n))
    }
}

fn expect(ok: bool, what: &str) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(format!(
            "the engines did not do what the lesson shows: {what}"
        ))
    }
}

fn send(lab: &mut Lab) -> Result<(), String> {
    let (qa, qb) = lab.connect(QpType::Rc)?;
    for (id, off) in [(1, 0), (2, 4096), (3, 8192)] {
        lab.post_recv(B, qb, id, off, 4096)?;
    }
    lab.say("B posts three receives of 4096 bytes; A posts three SENDs");
    lab.fill(A, 0, 3000, 0x41);
    let wr = lab.wr(11, SendOpcode::Send, 0, 64);
    lab.post_send(A, qa, wr)?;
    let wr = lab.wr(12, SendOpcode::Send, 0, 3000);
    lab.post_send(A, qa, wr)?;
    let mut wr = lab.wr(13, SendOpcode::SendWithImm, 0, 16);
    wr.imm_data = 0x1234_5678;
    lab.post_send(A, qa, wr)?;
    lab.run();
    let a = lab.completions(A)?;
    let b = lab.completions(B)?;
    expect(a.len() == 3 && b.len() == 3, "three SENDs, three receives")
}

fn write(lab: &mut Lab) -> Result<(), String> {
    let (qa, qb) = lab.connect(QpType::Rc)?;
    lab.fill(A, 0, 4096, 0x57);
    lab.say("A writes 4096 bytes into B's region, then 32 bytes with immediate data (B posted one receive for it)");
    lab.post_recv(B, qb, 1, 0x8000, 0)?;
    let wr = lab.rdma(21, SendOpcode::RdmaWrite, 0, 4096, 0);
    lab.post_send(A, qa, wr)?;
    let mut wr = lab.rdma(22, SendOpcode::RdmaWriteWithImm, 0, 32, 0x1000);
    wr.imm_data = 0xcafe_0001;
    lab.post_send(A, qa, wr)?;
    lab.run();
    let a = lab.completions(A)?;
    let b = lab.completions(B)?;
    let same = lab.sides[A].mem.snapshot()[..4096] == lab.sides[B].mem.snapshot()[..4096];
    lab.say(format!(
        "B's first 4096 bytes are A's: {}",
        if same { "yes" } else { "no" }
    ));
    expect(
        a.len() == 2 && b.len() == 1 && same,
        "two WRITEs, one receive",
    )
}

fn read(lab: &mut Lab) -> Result<(), String> {
    let (qa, _qb) = lab.connect(QpType::Rc)?;
    lab.fill(B, 0, 3000, 0x52);
    lab.say("A reads 3000 bytes of B's region into its own");
    let wr = lab.rdma(31, SendOpcode::RdmaRead, 0, 3000, 0);
    lab.post_send(A, qa, wr)?;
    lab.run();
    let a = lab.completions(A)?;
    let same = lab.sides[A].mem.snapshot()[..3000] == lab.sides[B].mem.snapshot()[..3000];
    lab.say(format!(
        "A's first 3000 bytes are B's: {}",
        if same { "yes" } else { "no" }
    ));
    expect(a.len() == 1 && same, "one READ")
}

fn atomic(lab: &mut Lab) -> Result<(), String> {
    let (qa, _qb) = lab.connect(QpType::Rc)?;
    lab.sides[B].mem.write(0x100, &5u64.to_ne_bytes());
    lab.say("B's word at offset 0x100 holds 5");
    let mut wr = lab.rdma(41, SendOpcode::AtomicCmpSwap, 0, 8, 0x100);
    wr.compare_add = 5;
    wr.swap = 100;
    lab.post_send(A, qa, wr)?;
    let mut wr = lab.rdma(42, SendOpcode::AtomicFetchAdd, 8, 8, 0x100);
    wr.compare_add = 1;
    lab.post_send(A, qa, wr)?;
    lab.say("A: compare-and-swap (if 5, make it 100), then fetch-and-add 1");
    lab.run();
    let a = lab.completions(A)?;
    let (got1, got2, now) = (lab.word(A, 0), lab.word(A, 8), lab.word(B, 0x100));
    lab.say(format!(
        "the compare-and-swap returned {got1}, the fetch-and-add {got2}; B's word is now {now}"
    ));
    expect(
        a.len() == 2 && (got1, got2, now) == (5, 100, 101),
        "5 swapped for 100, then 1 added",
    )
}

fn loss(lab: &mut Lab) -> Result<(), String> {
    let (qa, qb) = lab.connect(QpType::Rc)?;
    for i in 0..8 {
        lab.post_recv(B, qb, i + 1, 256 * i, 256)?;
    }
    lab.say("B posts eight receives; A sends eight 256-byte SENDs at once, each one packet; the network loses each first copy with probability 1/4 (retransmissions get through)");
    let mut lost = Vec::new();
    for i in 0..8u64 {
        let wr = lab.wr(51 + i, SendOpcode::Send, 256 * i, 256);
        lab.post_send(A, qa, wr)?;
        if lab.flush_one_maybe_lost(0.25)? {
            lost.push((i + 1).to_string());
        }
    }
    lab.say(if lost.is_empty() {
        "no SEND was lost with this seed".to_string()
    } else {
        format!("lost on the way: SEND {}", lost.join(", "))
    });
    lab.run();
    let a = lab.completions(A)?;
    let b = lab.completions(B)?;
    lab.counters(A);
    lab.counters(B);
    expect(a.len() == 8 && b.len() == 8, "eight SENDs arrive in order")
}

fn rnr(lab: &mut Lab) -> Result<(), String> {
    let (qa, qb) = lab.connect(QpType::Rc)?;
    lab.say(format!(
        "A sends 64 bytes; B has posted no receive yet (its RNR timer code is {MIN_RNR_TIMER}: 0.64 ms)"
    ));
    let wr = lab.wr(61, SendOpcode::Send, 0, 64);
    lab.post_send(A, qa, wr)?;
    lab.run_until("A saw two RNR NAKs", |n| {
        n.engines[A].counters().rcvd_rnr_err >= 2
    })?;
    lab.say("after the second RNR NAK, B posts a receive");
    lab.post_recv(B, qb, 1, 0, 256)?;
    lab.run();
    let a = lab.completions(A)?;
    let b = lab.completions(B)?;
    lab.counters(A);
    lab.counters(B);
    expect(a.len() == 1 && b.len() == 1, "the SEND arrives at last")
}

fn duplicate(lab: &mut Lab) -> Result<(), String> {
    let (qa, _qb) = lab.connect(QpType::Rc)?;
    lab.fill(B, 0x2000, 2048, 0x44);
    lab.sides[B].mem.write(0x100, &40u64.to_ne_bytes());
    lab.say("A posts a 512-byte WRITE, a 2048-byte READ and a fetch-and-add 2 on B's word (40)");
    let wr = lab.rdma(71, SendOpcode::RdmaWrite, 0, 512, 0x800);
    lab.post_send(A, qa, wr)?;
    let wr = lab.rdma(72, SendOpcode::RdmaRead, 0x1000, 2048, 0x2000);
    lab.post_send(A, qa, wr)?;
    let mut wr = lab.rdma(73, SendOpcode::AtomicFetchAdd, 0x3000, 8, 0x100);
    wr.compare_add = 2;
    lab.post_send(A, qa, wr)?;
    lab.flush();
    let lost = lab.losing(|lab| {
        lab.run_until("B received the three requests", |n| {
            n.engines[B].counters().rcvd_pkts >= 3
        })
    })?;
    lab.say(format!(
        "the requests arrive; every one of B's {lost} answers is lost; A's transport timer (code {TIMEOUT}: 67 ms) fires and A sends the oldest, the WRITE, alone; B's answer to it sends the READ and the fetch-and-add again"
    ));
    lab.run();
    let a = lab.completions(A)?;
    let (got, now) = (lab.word(A, 0x3000), lab.word(B, 0x100));
    let read_ok =
        lab.sides[A].mem.snapshot()[0x1000..0x1800] == lab.sides[B].mem.snapshot()[0x2000..0x2800];
    lab.say(format!(
        "the fetch-and-add returned {got}; B's word is {now} (added once); the READ's data is right: {}",
        if read_ok { "yes" } else { "no" }
    ));
    lab.counters(A);
    lab.counters(B);
    expect(
        a.len() == 3 && (got, now) == (40, 42) && read_ok,
        "three completions, the add done once",
    )
}

fn bad_rkey(lab: &mut Lab) -> Result<(), String> {
    let (qa, _qb) = lab.connect(QpType::Rc)?;
    let good = lab.sides[B].mr.rkey;
    let bad = good ^ 0x100;
    lab.say(format!(
        "A posts three 64-byte WRITEs: R_Key {good:#x} (B's), {bad:#x} (wrong), {good:#x}"
    ));
    let wr = lab.rdma(81, SendOpcode::RdmaWrite, 0, 64, 0);
    lab.post_send(A, qa, wr)?;
    let mut wr = lab.rdma(82, SendOpcode::RdmaWrite, 0, 64, 0x100);
    wr.rkey = bad;
    lab.post_send(A, qa, wr)?;
    let wr = lab.rdma(83, SendOpcode::RdmaWrite, 0, 64, 0x200);
    lab.post_send(A, qa, wr)?;
    lab.run();
    let a = lab.completions(A)?;
    lab.counters(A);
    lab.counters(B);
    let states: Vec<String> = [(A, qa), (B, _qb)]
        .iter()
        .map(|&(s, q)| {
            lab.net.engines[s]
                .query_qp(q)
                .map_or("gone".into(), |(attr, _)| format!("{:?}", attr.state))
        })
        .collect();
    lab.say(format!("QP states: A {}, B {}", states[0], states[1]));
    expect(
        a.len() == 3,
        "one success, one remote access error, one flushed",
    )
}

fn window(lab: &mut Lab) -> Result<(), String> {
    let (qa, qb) = lab.connect(QpType::Rc)?;
    let pd = lab.sides[B].pd;
    let mw = lab
        .engine(B)
        .alloc_mw(pd, MwType::Type2)
        .map_err(|e| format!("alloc_mw: {e}"))?;
    let rkey = (mw & !0xff) | u32::from((mw as u8).wrapping_add(1));
    let mut wr = SendWr::new(1, SendOpcode::BindMw);
    wr.bind = Some(MwBind {
        mw_rkey: mw,
        new_rkey: rkey,
        mr_lkey: lab.sides[B].mr.lkey,
        addr: IOVA + 0x4000,
        length: 256,
        access: Access::REMOTE_WRITE,
    });
    lab.post_send(B, qb, wr)?;
    lab.run();
    lab.completions(B)?;
    lab.say(format!(
        "B bound a type 2 window over 256 bytes at {:#x} (R_Key {rkey:#x}, remote write only) and told A",
        IOVA + 0x4000
    ));
    lab.post_recv(B, qb, 2, 0, 64)?;
    let wr = SendWr {
        remote_addr: IOVA + 0x4000,
        rkey,
        ..lab.wr(91, SendOpcode::RdmaWrite, 0, 64)
    };
    lab.post_send(A, qa, wr)?;
    let wr = SendWr {
        invalidate_rkey: rkey,
        ..lab.wr(92, SendOpcode::SendWithInv, 0, 16)
    };
    lab.post_send(A, qa, wr)?;
    lab.say("A writes 64 bytes through the window, then SENDs WITH INVALIDATE of its R_Key");
    lab.run();
    lab.completions(A)?;
    lab.completions(B)?;
    let wr = SendWr {
        remote_addr: IOVA + 0x4000,
        rkey,
        ..lab.wr(93, SendOpcode::RdmaWrite, 0, 64)
    };
    lab.post_send(A, qa, wr)?;
    lab.say("A writes through the window again");
    lab.run();
    let a = lab.completions(A)?;
    expect(
        a.len() == 1 && a[0].status != rxe_core::types::WcStatus::Success,
        "the WRITE after the invalidation fails",
    )
}

fn uc(lab: &mut Lab) -> Result<(), String> {
    let (qa, qb) = lab.connect(QpType::Uc)?;
    for i in 0..3 {
        lab.post_recv(B, qb, i + 1, 1024 * i, 1024)?;
    }
    lab.say("B posts three receives; A sends three 100-byte SENDs; the network loses the second");
    for i in 0..3u64 {
        let wr = lab.wr(101 + i, SendOpcode::Send, 0, 100);
        lab.post_send(A, qa, wr)?;
        if i == 1 {
            lab.losing(|_| Ok(()))?;
        } else {
            lab.flush();
        }
    }
    lab.run();
    let a = lab.completions(A)?;
    let b = lab.completions(B)?;
    lab.counters(B);
    expect(
        a.len() == 3 && b.len() == 2,
        "A completes three, B receives two",
    )
}

fn ud(lab: &mut Lab) -> Result<(), String> {
    let (qa, qb) = lab.connect(QpType::Ud)?;
    for i in 0..3 {
        lab.post_recv(B, qb, i + 1, 2048 * i, 2048)?;
    }
    lab.say(format!(
        "B posts three receives (each with 40 bytes for the GRH); A sends to QP {qb:#x} at 10.0.0.2: 100 bytes, 64 bytes with immediate, then 100 bytes with a wrong Q_Key"
    ));
    let dest = |qkey| UdDest {
        av: AddressVector::to(lab.sides[B].addr),
        remote_qpn: qb,
        remote_qkey: qkey,
    };
    let (d1, d2) = (dest(QKEY), dest(0x2222_2222));
    let wr = SendWr {
        ud: Some(d1),
        ..lab.wr(111, SendOpcode::Send, 0, 100)
    };
    lab.post_send(A, qa, wr)?;
    let wr = SendWr {
        ud: Some(d1),
        imm_data: 0x0000_0abc,
        ..lab.wr(112, SendOpcode::SendWithImm, 0, 64)
    };
    lab.post_send(A, qa, wr)?;
    let wr = SendWr {
        ud: Some(d2),
        ..lab.wr(113, SendOpcode::Send, 0, 100)
    };
    lab.post_send(A, qa, wr)?;
    lab.run();
    let a = lab.completions(A)?;
    let b = lab.completions(B)?;
    lab.counters(B);
    expect(a.len() == 3 && b.len() == 2, "three sent, two received")
}
