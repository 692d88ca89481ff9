//! `rxe fuzz`: a grammar-aware RoCE v2 packet fuzzer aimed at a live peer.
//!
//! It connects to the peer the way the peer's own tools expect (rdma-core's
//! `ibv_rc_pingpong` server, through the TCP exchange of `rxe pingpong`;
//! perftest's `ib_read_bw` server, through perftest's exchange as `rxe perf`
//! speaks it, or over rdma_cm as `ib_read_bw -R` does, [`perftest_cm`];
//! or librdmacm's `rping` server, through rdma_cm, the CM's MADs sent
//! from the fuzzer's own socket, [`cm`], [`rping`]), so the peer
//! has a live RC QP (with posted receives, or with a buffer it lets us
//! READ, or READing and WRITing buffers of ours); then
//! it plays the other end of that connection by hand, from a UDP socket
//! bound to `LOCAL:4791` (rxe-net's [`rxe_net::udp::UdpTransport`]): there
//! is no engine and no QP on our side, only what [`session`] keeps to stay
//! in step (the PSN the peer expects, ACKs for the peer's own SENDs).
//!
//! Every step sends one or a few packets built with rxe-core's wire
//! builders from the opcode table and mutated by one *arm* of [`mutate`]
//! (wrong opcodes and orders, PSN edges and wrap, RETH and atomic edges,
//! AETHs, pads, oversize payloads, truncated and over-long headers, P_Keys,
//! Q_Keys, QPNs, ICRCs, duplicates, reorderings), then classifies what the
//! peer answers within a short window ([`session::Kind`]). Arms whose
//! packets brought answers not seen before from them get more energy
//! ([`campaign`]). A seed makes a campaign reproducible against a peer that
//! answers the same way: the tool prints a hash of what it sent.
//!
//! Oracles: `liveness` (a fresh connection to the peer still works, and
//! the peer ACKs a valid SEND on it), `sanity` (every packet we meant to be
//! well formed re-parses, with the fields we put in), `peer-wire` (every
//! packet the peer sent parses); against a perftest server also `canary`
//! (the buffer it registered for remote READ only reads back unchanged)
//! and `data` (legitimate READs complete and return the buffer's bytes),
//! see [`canary`]; against an rping server `data` (what it READs from us
//! it WRITEs back unchanged, [`rping`]); and `rkey` (no request with a
//! key the peer did not grant is executed), see [`rkey`].
//!
//! The liveness, sanity and peer-wire oracles are the [`driver`]'s own:
//! they read the connections, the record and the socket it keeps. The
//! others each implement the [`oracle::Oracle`] trait: the driver holds
//! a list of them ([`campaign::oracles`] says which, for the peer) and
//! shows each one every connection made, every step sent and its
//! answers; the one that checks connections its own way (the canary and
//! data oracles, rping's data oracle) does so in place of the liveness
//! probe; and each gives its verdict at the end. [`oracle`] also holds
//! what they all speak of: a check's result and a finding.
//!
//! A finding is written as a pcap of the
//! packets since the last good liveness check plus a `.meta` sidecar, and
//! `rxe fuzz --replay FILE.pcap` resends them on a new connection
//! ([`replay`]). Once the campaign has returned its findings, [`run`]
//! minimises the replayable ones ([`minimise`]:
//! ddmin over connections, steps and packets, each candidate replayed
//! against the live peer) into `NAME.min.pcap`, within
//! `--minimise-budget`; `rxe fuzz --minimise FILE.pcap` does it on demand.
//!
//! Exit status: 0 no finding, 1 a finding, 2 usage or setup error.

mod bth;
mod campaign;
mod canary;
mod cm;
mod config;
mod driver;
mod local_mem;
mod minimise;
mod mutate;
mod oracle;
mod perftest_cm;
mod record;
mod replay;
mod rkey;
mod rping;
mod session;
mod socket;

use clap::Args as ClapArgs;
use config::{Config, Peer, Target};
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Arguments of `rxe fuzz`.
#[derive(Debug, ClapArgs)]
pub struct Args {
    /// Local address to send from (UDP port 4791 of it is bound).
    #[arg(short = 'd', long = "dev")]
    local: IpAddr,
    /// The peer: an rdma-core pingpong server (`ibv_rc_pingpong`, or
    /// `rxe pingpong`) listening on SERVER[:PORT] (default port 18515).
    /// Run it in a loop: every packet the peer refuses with a NAK ends its
    /// QP, and the fuzzer reconnects.
    #[arg(long = "pingpong", alias = "to", value_name = "SERVER[:PORT]")]
    pingpong: Option<String>,
    /// The peer: a perftest `ib_read_bw` server (or `rxe perf read_bw`)
    /// listening on SERVER[:PORT] (default port 18515). Its buffer, which
    /// it registers for remote READ and not WRITE, is the canary. Run it in
    /// a loop: it serves one client a run. With --replay or --minimise,
    /// --to is enough when the recording says it was made against one.
    #[arg(long, value_name = "SERVER[:PORT]", conflicts_with = "pingpong")]
    perftest: Option<String>,
    /// With --perftest: the server runs with -R (`ib_read_bw -R`): connect
    /// through rdma_cm, perftest's exchange as SENDs on a communication
    /// connection, the test QP on a second one.
    #[arg(long = "cm", requires = "perftest")]
    perftest_cm: bool,
    /// The peer: an rping server (librdmacm's `rping -s`, or `rxe rping
    /// -s`) listening with rdma_cm on SERVER[:PORT] (default port 7174).
    /// The fuzzer connects with the CM's MADs (REQ, REP, RTU; DREQ to end)
    /// and plays rping's client: the server READs and WRITEs our buffers.
    /// Run it in a loop (or with -P).
    #[arg(
        long = "rdma-cm",
        value_name = "SERVER[:PORT]",
        conflicts_with_all = ["pingpong", "perftest"]
    )]
    rdma_cm: Option<String>,
    /// The perftest server's message size (its -s, 65536 by default): how
    /// much of its buffer the canary covers. With --rdma-cm: rping's -S
    /// (64 by default), the size of the buffers the server READs and
    /// WRITEs.
    #[arg(long)]
    size: Option<u32>,
    /// Seed of the campaign.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Budget: this many packets sent (fuzz packets and probes).
    #[arg(long)]
    packets: Option<u64>,
    /// Budget: this many seconds.
    #[arg(long)]
    seconds: Option<u64>,
    /// Where findings (and with --save, every packet sent) go.
    #[arg(long, default_value = "rxe-fuzz-out")]
    out: PathBuf,
    /// Also write every packet sent as OUT/sent.pcap (+ .meta), replayable.
    #[arg(long)]
    save: bool,
    /// Resend the packets of a pcap written by `rxe fuzz` (a finding or
    /// sent.pcap) on new connections to the peer named by --to.
    #[arg(long, value_name = "FILE.pcap", conflicts_with = "minimise")]
    replay: Option<PathBuf>,
    /// Shrink a finding (delta debugging over its connections, steps and
    /// packets, each candidate replayed against the peer named by --to)
    /// into FILE.min.pcap (+ .meta).
    #[arg(long, value_name = "FILE.pcap")]
    minimise: Option<PathBuf>,
    /// Seconds the minimiser may spend, on a campaign's findings (0: do not
    /// minimise them) or with --minimise.
    #[arg(
        long = "minimise-budget",
        value_name = "SECONDS",
        default_value_t = 120
    )]
    minimise_budget: u64,
    /// Candidates the minimiser may replay at most.
    #[arg(long = "minimise-attempts", default_value_t = 200)]
    minimise_attempts: u32,
    /// The peer's path MTU (ibv_rc_pingpong's -m, 1024 by default).
    #[arg(long, default_value_t = 1024)]
    mtu: usize,
    /// The size of the peer's receive buffers (ibv_rc_pingpong's -s; 4096
    /// by default, 16 for an rping server: its `struct rping_rdma_info`).
    #[arg(long = "recv-size")]
    recv_size: Option<usize>,
    /// How long to wait for the answers to one step, in milliseconds.
    #[arg(long = "window-ms", default_value_t = 20)]
    window_ms: u64,
    /// Stop waiting this many milliseconds after the last answer.
    #[arg(long = "grace-ms", default_value_t = 3)]
    grace_ms: u64,
    /// Probe the connection (a valid SEND must be ACKed) every this many steps.
    #[arg(long = "check-every", default_value_t = 100)]
    check_every: u64,
    /// How long the peer may take to accept a new connection and ACK its
    /// first SEND before the liveness oracle fires, in seconds.
    #[arg(long = "liveness-timeout", default_value_t = 15)]
    liveness_timeout: u64,
    /// Print every session and step.
    #[arg(short = 'v', long)]
    verbose: bool,
}

/// Runs `rxe fuzz`.
pub fn run(a: &Args) -> ExitCode {
    let Some(t) = a
        .pingpong
        .as_ref()
        .or(a.perftest.as_ref())
        .or(a.rdma_cm.as_ref())
    else {
        eprintln!(
            "rxe fuzz: name the peer with --pingpong, --perftest or --rdma-cm SERVER[:PORT] (or --to with --replay, --minimise)"
        );
        return ExitCode::from(2);
    };
    // A recording says what it was made against.
    let recorded = a
        .replay
        .as_ref()
        .or(a.minimise.as_ref())
        .map(|f| record::load(f).map(|l| l.peer));
    let recorded = match recorded {
        None => None,
        Some(Ok(p)) => p,
        Some(Err(e)) => {
            eprintln!("rxe fuzz: {e}");
            return ExitCode::from(2);
        }
    };
    let peer = match (&a.perftest, recorded.as_deref().map(Peer::from_meta)) {
        (_, Some(None)) if a.rdma_cm.is_none() => {
            eprintln!(
                "rxe fuzz: the recording names a peer this version does not know: {:?}",
                recorded.unwrap_or_default()
            );
            return ExitCode::from(2);
        }
        _ if a.rdma_cm.is_some()
            || matches!(
                recorded.as_deref().and_then(Peer::from_meta),
                Some(Peer::Rping { .. })
            ) =>
        {
            let from_rec = match recorded.as_deref().and_then(Peer::from_meta) {
                Some(Peer::Rping { size }) => Some(size),
                _ => None,
            };
            let size = a.size.or(from_rec).unwrap_or(64);
            if !(16..=1 << 24).contains(&size) {
                eprintln!("rxe fuzz: --size with --rdma-cm is rping's -S: 16 to 2^24 bytes");
                return ExitCode::from(2);
            }
            Peer::Rping { size }
        }
        (Some(_), _) | (None, Some(Some(Peer::PerftestRead { .. }))) => {
            let from_rec = match recorded.as_deref().and_then(Peer::from_meta) {
                Some(Peer::PerftestRead { size }) => Some(size),
                _ => None,
            };
            let size = a.size.or(from_rec).unwrap_or(65536);
            if size == 0 || size > 1 << 30 {
                eprintln!("rxe fuzz: --size must be 1 to 2^30 bytes");
                return ExitCode::from(2);
            }
            Peer::PerftestRead { size }
        }
        _ => Peer::Pingpong,
    };
    if a.size.is_some() && peer == Peer::Pingpong {
        eprintln!("rxe fuzz: --size is the perftest server's -s: it goes with --perftest");
        return ExitCode::from(2);
    }
    let recorded_cm = recorded
        .as_deref()
        .and_then(Peer::from_meta_cm)
        .is_some_and(|(p, cm)| cm && matches!(p, Peer::PerftestRead { .. }));
    let target = match Target::parse_or(t, peer.default_port()) {
        Ok(mut t) => {
            t.cm = matches!(peer, Peer::PerftestRead { .. }) && (a.perftest_cm || recorded_cm);
            t
        }
        Err(e) => {
            eprintln!("rxe fuzz: {e}");
            return ExitCode::from(2);
        }
    };
    if a.local.is_unspecified() || a.local.is_multicast() {
        eprintln!("rxe fuzz: -d needs a specific local unicast address");
        return ExitCode::from(2);
    }
    if rxe_core::types::Mtu::from_bytes(a.mtu).is_none() {
        eprintln!("rxe fuzz: --mtu must be 256, 512, 1024, 2048 or 4096");
        return ExitCode::from(2);
    }
    let cfg = Config {
        local: a.local,
        target,
        peer,
        mtu: a.mtu,
        recv_size: a.recv_size.unwrap_or(match peer {
            Peer::Rping { .. } => rping::INFO_LEN,
            _ => 4096,
        }),
        window: Duration::from_millis(a.window_ms.max(1)),
        grace: Duration::from_millis(a.grace_ms.max(1)),
        check_every: a.check_every.max(1),
        liveness_timeout: Duration::from_secs(a.liveness_timeout.max(1)),
        out: a.out.clone(),
        verbose: a.verbose,
        minimise_budget: Duration::from_secs(a.minimise_budget),
        minimise_attempts: a.minimise_attempts.max(1),
    };
    let r = match (&a.replay, &a.minimise) {
        (Some(file), _) => replay::run(&cfg, file),
        (None, Some(file)) => {
            if a.minimise_budget == 0 {
                eprintln!("rxe fuzz: --minimise needs a --minimise-budget above 0");
                return ExitCode::from(2);
            }
            // Exit 1 when the finding reproduced (and was minimised), 0
            // when it did not.
            minimise::run(&cfg, file, None, cfg.minimise_budget).map(|p| p.is_some())
        }
        (None, None) => {
            if a.packets.is_none() && a.seconds.is_none() {
                eprintln!("rxe fuzz: give a budget: --packets N or --seconds S");
                return ExitCode::from(2);
            }
            // Minimised after the campaign, whose socket is closed by
            // then: the minimiser's replays make connections of their own.
            campaign::run(
                &cfg,
                a.seed,
                a.packets,
                a.seconds.map(Duration::from_secs),
                a.save,
            )
            .map(|found| {
                minimise::after_campaign(&cfg, &found);
                !found.is_empty()
            })
        }
    };
    match r {
        Ok(false) => ExitCode::SUCCESS,
        Ok(true) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("rxe fuzz: {e}");
            ExitCode::from(2)
        }
    }
}
