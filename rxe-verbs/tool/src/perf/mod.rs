//! `rxe perf`: perftest's `ib_write_bw`, `ib_read_bw`, `ib_send_bw`,
//! `ib_atomic_bw`, `ib_write_lat`, `ib_read_lat`, `ib_send_lat` and
//! `ib_atomic_lat` in one
//! command, with their flags, their output and their out-of-band exchange
//! ([`oob`]), so that either side can face the real programs; plus a UDP
//! baseline ([`baseline`]) that measures what the kernel's UDP path does
//! between the same two addresses with the same datagram sizes, so that
//! every figure can be read as a ratio.
//!
//! `rxe perf write_bw -d 127.0.0.3` serves; `rxe perf write_bw -d 127.0.0.2
//! 127.0.0.3` connects and measures. `rxe perf udp_bw` / `udp_lat` run the
//! baseline alone; `--baseline` (on both sides) runs it right after a RoCE
//! test and prints the ratio.
//!
//! Differences from perftest: soft devices are named by address (`-d`);
//! waits block on the device's progress instead of spinning (the progress
//! thread needs a core; `write_lat` still polls memory, yielding between
//! polls); times come from the monotonic clock, not the TSC, so `-F` is
//! accepted and ignored; `--timeout` bounds every wait.

mod args;
mod baseline;
mod bw;
mod lat;
pub(crate) mod oob;
mod report;
mod stats;

pub use args::Args;
use args::{Config, Conn, Kind, Test};
use oob::{Dest, Oob};
use rxe_verbs::*;
use std::process::ExitCode;
use std::time::{Duration, Instant};

pub(crate) type Res<T> = Result<T, String>;

/// The UD GRH in front of every UD receive buffer.
pub(crate) const GRH: usize = 40;
/// perftest's default cycle buffer (the page size) and cache line.
const CYCLE_BUFFER: i32 = 4096;
const CACHE_LINE: i32 = 64;

/// Device, buffers and queues of one side (`struct pingpong_context`).
///
/// Fields drop in declaration order, QPs before the MR their messages land
/// in, as perftest's `destroy_ctx` does.
pub(crate) struct Resources {
    pub qps: Vec<QueuePair>,
    pub ah: Option<AddressHandle>,
    pub send_cq: CompletionQueue,
    pub recv_cq: CompletionQueue,
    pub channel: Option<CompletionChannel>,
    pub mr: MemoryRegion,
    pub pd: ProtectionDomain,
    pub ctx: Context,
    /// Bytes per half buffer per QP (`BUFF_SIZE`): QP `i` sends from
    /// [`Resources::send_off`] and is the target at
    /// [`Resources::target_off`].
    pub half: usize,
    /// Parts of the buffer: one per QP (perftest), or 1 (`--one-buffer`).
    pub slots: usize,
}

impl Resources {
    fn new(cfg: &Config, cycle: usize) -> Res<Resources> {
        let dev = cfg.device.clone().with_mtu(Mtu::Mtu4096);
        let ctx = dev
            .open()
            .map_err(|e| format!("Couldn't get context for {}: {e}", dev.name()))?;
        if let Some(spin) = cfg.spin {
            ctx.set_poll_spin(spin);
        }
        let pd = ctx
            .alloc_pd()
            .map_err(|e| format!("Couldn't allocate PD: {e}"))?;
        let nq = cfg.qps as usize;
        let extra = if cfg.conn == Conn::Ud { GRH } else { 0 };
        let half = (cfg.max_size() as usize + extra).max(cycle).div_ceil(64) * 64;
        let slots = if cfg.one_buffer { 1 } else { nq };
        let access = Access::LOCAL_WRITE | remote_access(cfg.test);
        let mr = pd
            .alloc_mr(2 * slots * half, access)
            .map_err(|e| format!("Couldn't allocate MR: {e}"))?;
        let channel = cfg.events.then(|| ctx.create_comp_channel());
        let max_cqe = ctx.query_device().caps.max_cqe;
        let cqe = (cfg.tx_depth * cfg.qps + 16).min(max_cqe);
        let rcqe = (cfg.rx_depth * cfg.qps + 16).min(max_cqe);
        let send_cq = ctx
            .create_cq(cqe, channel.as_ref())
            .map_err(|e| format!("Couldn't create CQ: {e}"))?;
        let recv_cq = ctx
            .create_cq(rcqe, channel.as_ref())
            .map_err(|e| format!("Couldn't create a receiver CQ: {e}"))?;
        let qp_type = match cfg.conn {
            Conn::Rc => QpType::Rc,
            Conn::Uc => QpType::Uc,
            Conn::Ud => QpType::Ud,
        };
        let cap = QpCap {
            max_send_wr: cfg.tx_depth,
            max_recv_wr: cfg.rx_depth.max(1),
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let mut qps = Vec::with_capacity(nq);
        for _ in 0..nq {
            let attr = QpInitAttr::new(qp_type, &send_cq, &recv_cq).with_cap(cap);
            qps.push(
                ctx.create_qp(&pd, &attr)
                    .map_err(|e| format!("Couldn't create QP: {e}"))?,
            );
        }
        Ok(Resources {
            ctx,
            pd,
            mr,
            send_cq,
            recv_cq,
            channel,
            qps,
            half,
            slots,
            ah: None,
        })
    }

    /// Where QP `i`'s messages come from in the buffer.
    pub fn send_off(&self, i: usize) -> usize {
        (i % self.slots) * self.half
    }

    /// Where QP `i`'s peer sends, reads and writes in the buffer.
    pub fn target_off(&self, i: usize) -> usize {
        (self.slots + i % self.slots) * self.half
    }

    /// Fills the whole buffer with pseudo-random bytes (perftest fills its
    /// buffers with `rand()`), so that the data checks compare something.
    /// write_lat polls the last byte of each message in the target half for
    /// the peer's counter: those bytes start at 0, as perftest's do.
    fn fill_random(&self, cfg: &Config) -> Res<()> {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
            ^ (u64::from(std::process::id()) << 32);
        let mut bytes = random_bytes(seed, self.mr.len());
        if cfg.test == Test::WriteLat {
            for s in cfg.sizes() {
                if let Some(b) = bytes.get_mut(self.half + s as usize - 1) {
                    *b = 0;
                }
            }
        }
        self.mr
            .write(0, &bytes)
            .map_err(|e| format!("fill the buffer: {e}"))
    }

    /// Writes the whole buffer to `path`.
    fn dump(&self, path: &std::path::Path) -> Res<()> {
        let mut bytes = vec![0u8; self.mr.len()];
        self.mr
            .read(0, &mut bytes)
            .map_err(|e| format!("read the buffer: {e}"))?;
        std::fs::write(path, &bytes).map_err(|e| format!("write {}: {e}", path.display()))
    }

    /// The `RXE_PERF_BUFFER` line: where QP 0's regions are, in our buffer
    /// and in the peer's (addresses as the wire carries them).
    fn buffer_line(&self, path: &std::path::Path, theirs: &oob::Dest) -> String {
        let base = self.mr.addr();
        format!(
            "RXE_PERF_BUFFER file={} va={:#x} len={} local={:#x} target={:#x} remote={:#x} qpn={:#x} peer_qpn={:#x}",
            path.display(),
            base,
            self.mr.len(),
            base,
            base + self.target_off(0) as u64,
            theirs.vaddr,
            self.qps[0].qp_num(),
            theirs.qpn
        )
    }

    /// What we tell the peer about each QP (`set_up_connection`).
    fn dests(&self, cfg: &Config) -> Res<Vec<Dest>> {
        // Source GID index 0 is the device's own GID in this API (on a
        // native device the RoCE v2 entry of its address, not table entry
        // 0, which is the link-local GID on the kernel's rxe); others are
        // literal table indices.
        let gid = if cfg.gid_index == 0 {
            self.ctx.gid()
        } else {
            *self
                .ctx
                .query_port()
                .gids
                .get(usize::from(cfg.gid_index))
                .ok_or(format!("can't read sgid of index {}", cfg.gid_index))?
        };
        Ok(self
            .qps
            .iter()
            .enumerate()
            .map(|(i, qp)| {
                let ep = qp.endpoint();
                Dest {
                    lid: 0,
                    out_reads: u32::from(cfg.out_reads),
                    qpn: ep.qpn,
                    psn: ep.psn,
                    rkey: self.mr.rkey(),
                    vaddr: self.mr.addr() + self.target_off(i) as u64,
                    gid: gid.octets(),
                    srqn: 0,
                }
            })
            .collect())
    }

    /// RTR and RTS towards the peer (`ctx_connect`).
    fn connect(&mut self, cfg: &Config, mtu: Mtu, theirs: &[Dest]) -> Res<()> {
        for (qp, d) in self.qps.iter().zip(theirs) {
            let ep = Endpoint {
                lid: d.lid,
                qpn: d.qpn,
                psn: d.psn,
                gid: d.gid_addr(),
            };
            let o = ConnectOptions {
                mtu,
                max_rd_atomic: cfg.out_reads.max(1),
                sgid_index: cfg.gid_index,
                ..ConnectOptions::default()
            };
            qp.connect(&ep, &o)
                .map_err(|e| format!("Failed to modify QP {:#x} to RTR/RTS: {e}", qp.qp_num()))?;
        }
        if cfg.conn == Conn::Ud {
            let mut av = AddressVector::to(addr_of(theirs[0].gid_addr()));
            av.sgid_index = cfg.gid_index;
            self.ah = Some(
                self.pd
                    .create_ah(av)
                    .map_err(|e| format!("Failed to create AH: {e}"))?,
            );
        }
        Ok(())
    }

    /// Waits for completions on `cq` (with `--events`, through the channel),
    /// at most `limit`; returns how many were appended to `out`.
    pub fn wait(
        &self,
        cq: &CompletionQueue,
        out: &mut Vec<Completion>,
        max: usize,
        limit: Duration,
    ) -> Res<usize> {
        let n = cq.poll_into(out, max);
        if n > 0 {
            return Ok(n);
        }
        if let Some(ch) = &self.channel {
            cq.req_notify(false)
                .map_err(|e| format!("Couldn't request CQ notification: {e}"))?;
            // A completion may have come between the poll and the arming.
            let n = cq.poll_into(out, max);
            if n > 0 {
                return Ok(n);
            }
            if ch.get_event(limit).is_none() {
                return Ok(0);
            }
            return Ok(cq.poll_into(out, max));
        }
        match cq.wait_into(out, 1, limit) {
            Ok(n) => Ok(n + cq.poll_into(out, max.saturating_sub(n))),
            Err(Error::Timeout(_)) => Ok(0),
            Err(e) => Err(format!("poll CQ failed: {e}")),
        }
    }
}

/// The remote access perftest's `create_single_mr` gives the buffer: the
/// one the test's verb needs, no more (an `ib_read_bw` server's buffer can
/// be read, not written, from the wire: `rxe fuzz --perftest` relies on it).
fn remote_access(test: Test) -> Access {
    match test {
        Test::WriteBw | Test::WriteLat => Access::REMOTE_WRITE,
        Test::ReadBw | Test::ReadLat => Access::REMOTE_READ,
        Test::AtomicBw | Test::AtomicLat => Access::REMOTE_ATOMIC,
        Test::SendBw | Test::SendLat | Test::UdpBw | Test::UdpLat => Access::empty(),
    }
}

/// Where `--dump-buffer PATH` puts the buffer as it was before the test.
fn init_path(path: &std::path::Path) -> std::path::PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(".init");
    p.into()
}

/// xorshift64 bytes from `seed` (not zero).
fn random_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Checks a completion's status the way perftest reports a bad one.
pub(crate) fn check_wc(wc: &Completion, what: &str) -> Res<()> {
    if wc.status != WcStatus::Success {
        return Err(format!(
            " Completion with error at {what}:\n Failed status {}: wr_id {} ({})",
            wc.status as u32, wc.wr_id, wc.status
        ));
    }
    Ok(())
}

fn io(what: &'static str) -> impl Fn(std::io::Error) -> String {
    move |e| format!("{what}: {e}")
}

/// The handshakes around `ctx_connect` of `seq`, printing both sides'
/// addresses as perftest does; returns the peer's destinations.
fn exchange_and_connect(
    oob: &mut Oob,
    res: &mut Resources,
    cfg: &Config,
    mtu: Mtu,
    seq: oob::Sequence,
    mine: &[Dest],
) -> Res<Vec<Dest>> {
    oob.handshakes(
        seq,
        mine,
        |theirs| {
            let (my4, their4) = (
                std::net::Ipv6Addr::from(mine[0].gid)
                    .to_ipv4_mapped()
                    .is_some(),
                theirs[0].gid_addr().to_ipv4_mapped().is_some(),
            );
            if my4 != their4 {
                return Err("\n Found Incompatibility issue with GID types.\n Please Try to use a different IP version.\n".into());
            }
            res.connect(cfg, mtu, theirs)
                .map_err(|e| format!("{e}\n Unable to Connect the HCA's through the link"))
        },
        || {
            for d in mine {
                report::print_dest(cfg, d, "local");
            }
        },
        |d| report::print_dest(cfg, d, "remote"),
    )
}

/// What one run measured, for the summary and `--out_json`.
#[derive(Debug, Clone)]
pub(crate) enum Measured {
    Bw(oob::BwReport),
    Lat(stats::LatReport),
}

fn run_roce(cfg: &Config) -> Res<Vec<Measured>> {
    let kind = cfg.test.kind();
    let mut oob = match &cfg.server {
        Some(s) => Oob::connect(s, cfg.port, cfg.timeout.min(Duration::from_secs(10)))
            .map_err(|e| format!("{e}\n Unable to init the socket connection"))?,
        None => {
            println!("\n************************************");
            println!("* Waiting for client to connect... *");
            println!("************************************");
            Oob::accept(cfg.port, cfg.timeout)
                .map_err(|e| format!("{e}\n Unable to init the socket connection"))?
        }
    };
    oob.set_timeout(Some(cfg.timeout))
        .map_err(io("set a TCP timeout"))?;
    let opening = oob.open(CYCLE_BUFFER, CACHE_LINE, cfg.mtu as u8)?;
    let cycle = opening.cycle;
    let mtu = Mtu::from_bytes(128usize << opening.mtu_enum).unwrap_or(Mtu::Mtu1024);
    let mut cfg = cfg.clone();
    cfg.mtu = mtu;
    if cfg.conn == Conn::Ud && cfg.size as usize > mtu.bytes() {
        if cfg.all || !cfg.size_given {
            eprintln!(" Max msg size in UD is MTU {}", mtu.bytes());
            eprintln!(" Changing to this MTU");
            cfg.size = mtu.bytes() as u64;
        } else {
            return Err(" Max message size in UD cannot be greater than MTU ".into());
        }
    }
    let cfg = &cfg;
    let mut res = Resources::new(cfg, cycle.max(1) as usize)?;
    if cfg.dump_buffer.is_some() {
        res.fill_random(cfg)?;
    }
    let mine = res.dests(cfg)?;
    if let Some(path) = &cfg.dump_buffer {
        res.dump(&init_path(path))?;
    }
    report::print_test_info(cfg);
    let seq = match (kind, cfg.test) {
        (Kind::Bw, Test::SendBw) => oob::Sequence::SEND_BW,
        (Kind::Bw, _) => oob::Sequence::RDMA_BW,
        (Kind::Lat, Test::SendLat) => oob::Sequence::SEND_LAT,
        _ => oob::Sequence::RDMA_LAT,
    };
    let theirs = exchange_and_connect(&mut oob, &mut res, cfg, mtu, seq, &mine)?;
    let sizes = cfg.sizes();
    let measured = match cfg.test {
        Test::WriteBw | Test::ReadBw | Test::AtomicBw => {
            bw::rdma_bw(cfg, &mut oob, &res, &mine, &theirs, &sizes)
        }
        Test::SendBw => bw::send_bw(cfg, &mut oob, &res, &mine, &theirs, &sizes),
        Test::WriteLat => lat::write_lat(cfg, &res, &theirs, &sizes),
        Test::ReadLat | Test::AtomicLat => {
            lat::read_lat(cfg, &mut oob, &res, &mine, &theirs, &sizes)
        }
        Test::SendLat => lat::send_lat(cfg, &mut oob, &res, &mine, &theirs, &sizes),
        Test::UdpBw | Test::UdpLat => unreachable!("not a RoCE test"),
    };
    // Let the last ACKs leave before the QPs go.
    std::thread::sleep(Duration::from_millis(20));
    if let (Some(path), Ok(_)) = (&cfg.dump_buffer, &measured) {
        res.dump(path)?;
        println!("{}", res.buffer_line(path, &theirs[0]));
    }
    if cfg.counters || measured.is_err() {
        let c = res.ctx.counters();
        println!(
            " counters: sent {} received {} retransmitted {} retry timeouts {} tail probes {} \
             seq errors sent {} received {} out of sequence {} duplicates {} RNR sent {} received {} dropped {} {:?} \
             refused by the host {:?} held posts {}",
            c.sent_pkts,
            c.rcvd_pkts,
            c.retransmitted_pkts,
            c.retry_timeouts,
            c.tail_probes,
            c.send_seq_err,
            c.rcvd_seq_err,
            c.out_of_seq_request,
            c.duplicate_request,
            c.send_rnr_err,
            c.rcvd_rnr_err,
            c.dropped(),
            c.drops,
            c.send_refused,
            res.ctx.held_posts()
        );
    }
    drop(res);
    measured
}

fn run_inner(a: &Args) -> Res<()> {
    let cfg = Config::from_args(a)?;
    let started = Instant::now();
    let (measured, base) = match cfg.test {
        Test::UdpBw | Test::UdpLat => (Vec::new(), Some(baseline::run(&cfg, None)?)),
        _ => {
            let m = run_roce(&cfg)?;
            let base = if cfg.baseline {
                Some(baseline::run(&cfg, m.last())?)
            } else {
                None
            };
            (m, base)
        }
    };
    if let Some(path) = &cfg.json_path {
        report::write_json(
            path,
            &cfg,
            &measured,
            base.as_ref().map(|b| b.to_json()),
            started.elapsed(),
        )?;
    }
    Ok(())
}

/// Runs `rxe perf`.
pub fn run(args: &Args) -> ExitCode {
    match run_inner(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
