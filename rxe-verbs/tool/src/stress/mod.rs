//! `rxe stress`: many QPs of every transport between two processes, a
//! random mix of operations, every byte checked end to end.
//!
//! The server (`rxe stress -d ADDR`) hosts memory and receives; the client
//! (`rxe stress -d ADDR SERVER`) chooses the QPs and drives every
//! operation. They meet over TCP (`--port`, default 18530), exchange QPs
//! and regions as JSON lines, run, and at the end trade their tallies. Both
//! print one line that starts with `stress:`; the exit status is 1 on any
//! data error, failed operation or lost reliable message.
//!
//! What is checked (see [`pattern`] for the bytes):
//!
//! * SEND (every transport): the server checks each received message
//!   against the pattern of its number; on RC the numbers must come in
//!   order and none may be missing; on UC and UD a missing one is counted
//!   as lost, which those transports allow.
//! * RDMA WRITE with immediate (RC, UC): the server checks the target slot
//!   named by the immediate, and skips (counts as overtaken) a slot that a
//!   later message overwrote before it looked.
//! * RDMA WRITE then READ of the same bytes (RC): the client checks that
//!   what it reads back is what it wrote.
//! * RDMA READ (RC): the client checks the server's read-only pattern.
//! * Atomics (RC): fetch-and-add and compare-and-swap on a per-QP counter
//!   only that QP touches; the client keeps a model of it and checks every
//!   original value returned.

mod client;
mod layout;
mod pattern;
mod server;
mod wire;

use clap::Parser;
use layout::Layout;
use rxe_net::faults::FaultSpec;
use rxe_verbs::{
    Access, CompletionQueue, Context, Device, Mtu, ProtectionDomain, QpCap, QpInitAttr, QpType,
    QueuePair,
};
use std::net::IpAddr;
use std::process::ExitCode;
use std::time::Duration;

/// `rxe stress` arguments.
#[derive(Debug, Parser)]
pub struct Args {
    /// Local address of the soft device.
    #[arg(short = 'd', long = "addr", value_name = "ADDR")]
    pub addr: IpAddr,
    /// The server's address (client only; without it this is the server).
    pub server: Option<IpAddr>,
    /// TCP port of the out-of-band exchange.
    #[arg(short, long, default_value_t = 18530)]
    pub port: u16,
    /// QPs in all (client), spread over --transports in turn.
    #[arg(short, long, default_value_t = 12)]
    pub qps: usize,
    /// Transports to use, comma separated (client).
    #[arg(long, default_value = "rc,uc,ud", value_delimiter = ',')]
    pub transports: Vec<Transport>,
    /// Run this long, in seconds (client; the default if --ops is not given).
    #[arg(short, long)]
    pub time: Option<f64>,
    /// Stop after this many operations (client).
    #[arg(short = 'n', long)]
    pub ops: Option<u64>,
    /// Largest message in bytes (client).
    #[arg(short = 's', long, default_value_t = 12288)]
    pub max_size: usize,
    /// Path MTU (client): 256, 512, 1024, 2048 or 4096.
    #[arg(short, long, default_value_t = 1024)]
    pub mtu: u32,
    /// Outstanding operations per QP (client).
    #[arg(long, default_value_t = 4)]
    pub depth: usize,
    /// Seed of the operation mix (client; default: random, printed).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Inject faults into what this side sends, e.g.
    /// 'loss=5%,dup=1%,reorder=1%' (the same as RXE_FAULTS).
    #[arg(long, value_name = "SPEC")]
    pub faults: Option<FaultSpec>,
    /// RC local ACK timeout code (4.096 µs × 2^N; the client's QPs). The
    /// default, rdma-core's pingpong's, gives up after about 0.5 s of
    /// silence (8 tries); 12 (134 ms) lost RC QPs on a busy 2-CPU machine
    /// whose builds starved the stress processes for 200-500 ms.
    #[arg(long, default_value_t = 14)]
    pub timeout: u8,
    /// RC retry count (the client's QPs).
    #[arg(long, default_value_t = 7)]
    pub retry: u8,
    /// Give up waiting for the peer after this many seconds.
    #[arg(long, default_value_t = 30.0)]
    pub wait: f64,
    /// Client: print a progress line (operations, retransmissions, memory,
    /// descriptors) every this many seconds (0: none).
    #[arg(long, default_value_t = 0.0, value_name = "SECS")]
    pub report_every: f64,
    /// Server, for testing the checks themselves: spoil the read-only
    /// pattern of the first QP (as a stack that corrupted memory would), so
    /// the client's READs must report data errors.
    #[arg(long, hide = true)]
    pub sabotage: bool,
}

/// A transport of the stress mix.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// Reliable connected: every operation, nothing may be lost.
    Rc,
    /// Unreliable connected: SEND and WRITE with immediate.
    Uc,
    /// Unreliable datagram: SEND up to one MTU.
    Ud,
}

impl Transport {
    fn qp_type(self) -> QpType {
        match self {
            Transport::Rc => QpType::Rc,
            Transport::Uc => QpType::Uc,
            Transport::Ud => QpType::Ud,
        }
    }
}

/// The Q_Key of the UD QPs.
const QKEY: u32 = 0x5752_4553;

/// One side's verbs objects. Fields drop in declaration order: QPs first.
struct Side {
    qps: Vec<QueuePair>,
    cq: CompletionQueue,
    mr: rxe_verbs::MemoryRegion,
    pd: ProtectionDomain,
    ctx: Context,
}

impl Side {
    fn open(
        addr: IpAddr,
        faults: Option<FaultSpec>,
        transports: &[Transport],
        l: &Layout,
    ) -> Result<Side, String> {
        let mut dev = Device::soft(addr);
        if let Some(f) = faults {
            dev = dev.with_faults(f);
        }
        let ctx = dev.open().map_err(|e| format!("open {addr}: {e}"))?;
        let pd = ctx.alloc_pd().map_err(|e| format!("alloc_pd: {e}"))?;
        let cqe = (transports.len() * (2 * l.depth + l.recvs) + 64) as u32;
        let cq = ctx
            .create_cq(cqe, None)
            .map_err(|e| format!("create_cq({cqe}): {e}"))?;
        let len = transports.len() * l.per_qp();
        let access = Access::LOCAL_WRITE
            | Access::REMOTE_WRITE
            | Access::REMOTE_READ
            | Access::REMOTE_ATOMIC;
        let mr = pd
            .alloc_mr(len, access)
            .map_err(|e| format!("register {len} bytes: {e}"))?;
        let mut qps = Vec::with_capacity(transports.len());
        for (i, t) in transports.iter().enumerate() {
            let cap = QpCap {
                max_send_wr: (2 * l.depth) as u32,
                max_recv_wr: l.recvs as u32,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            };
            let qp = ctx
                .create_qp(&pd, &QpInitAttr::new(t.qp_type(), &cq, &cq).with_cap(cap))
                .map_err(|e| format!("create QP {i} ({t:?}): {e}"))?;
            qps.push(qp);
        }
        Ok(Side {
            qps,
            cq,
            mr,
            pd,
            ctx,
        })
    }
}

fn mtu_of(v: u32) -> Result<Mtu, String> {
    Ok(match v {
        256 => Mtu::Mtu256,
        512 => Mtu::Mtu512,
        1024 => Mtu::Mtu1024,
        2048 => Mtu::Mtu2048,
        4096 => Mtu::Mtu4096,
        _ => return Err(format!("--mtu {v}: want 256, 512, 1024, 2048 or 4096")),
    })
}

/// Resident memory in KiB and open file descriptors of this process.
fn footprint() -> (u64, usize) {
    let pages = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .unwrap_or(0);
    let fds = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count().saturating_sub(1));
    (pages * 4, fds)
}

/// Runs `rxe stress`.
pub fn run(args: &Args) -> ExitCode {
    let r = match args.server {
        Some(server) => client::run(args, server),
        None => server::run(args),
    };
    match r {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("rxe stress: {e}");
            ExitCode::from(2)
        }
    }
}

/// How long to wait for the peer.
fn wait_limit(args: &Args) -> Duration {
    Duration::from_secs_f64(args.wait.max(0.1))
}
