//! `rxe churn`: create and destroy verbs objects and connections in a loop,
//! and watch that nothing leaks and nothing slows down.
//!
//! One process, two soft devices (`--addrs A,B`, both local). Each
//! iteration is one *lifetime*: a PD, a CQ, an MR (of a random size) and a
//! QP on each device (RC, UC or UD in turn), connected to each other; every
//! `--traffic-every` lifetimes they move data (a SEND and, on RC, a WRITE
//! and a READ, all checked), and every `--cm-every` lifetimes the pair is
//! connected through rdma_cm instead (listen, connect, accept, established,
//! disconnect). Then everything is dropped. Every `--reopen-every`
//! lifetimes the devices themselves are closed and opened again (socket,
//! progress thread).
//!
//! Every `--report-every` lifetimes it prints resident memory, open
//! descriptors, threads and the time per lifetime of that stretch; at the
//! end one line that starts with `churn:` (values at the start, after the
//! first stretch, the warm-up, and at the end, devices closed). The exit
//! status is 1 if a lifetime failed, if descriptors or threads at the last
//! report exceed those at the first (or, devices closed, those at the
//! start), or if resident memory grew by more than `--max-growth-kib`
//! between the first report and the last. Time per lifetime is reported, not
//! judged: the machine may be busy.

use clap::Parser;
use rxe_verbs::cm::{CmId, ConnParam, EventChannel, EventKind, PortSpace};
use rxe_verbs::{
    Access, AddressVector, CompletionQueue, ConnectOptions, Context, Device, MemoryRegion, Mtu,
    ProtectionDomain, QpInitAttr, QpType, QueuePair, RecvWr, SendWr, SendWrExt, WcStatus,
};
use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// `rxe churn` arguments.
#[derive(Debug, Parser)]
pub struct Args {
    /// The two local addresses of the soft devices.
    #[arg(long, value_delimiter = ',', default_values_t = [
        "127.0.9.1".parse::<IpAddr>().unwrap(), "127.0.9.2".parse::<IpAddr>().unwrap()])]
    pub addrs: Vec<IpAddr>,
    /// Lifetimes to run.
    #[arg(short, long, default_value_t = 10_000)]
    pub iters: u64,
    /// Move data every this many lifetimes (0: never).
    #[arg(long, default_value_t = 10)]
    pub traffic_every: u64,
    /// Connect through rdma_cm every this many lifetimes (0: never).
    #[arg(long, default_value_t = 100)]
    pub cm_every: u64,
    /// Close and reopen both devices every this many lifetimes (0: never).
    #[arg(long, default_value_t = 1000)]
    pub reopen_every: u64,
    /// Print a report line every this many lifetimes.
    #[arg(long, default_value_t = 1000)]
    pub report_every: u64,
    /// Largest growth of resident memory after the first report, in KiB,
    /// before it counts as a leak.
    #[arg(long, default_value_t = 16 * 1024)]
    pub max_growth_kib: u64,
    /// The rdma_cm port the second device listens on.
    #[arg(long, default_value_t = 7471)]
    pub cm_port: u16,
    /// For testing the leak check itself: leak one file descriptor every
    /// this many lifetimes.
    #[arg(long, hide = true, default_value_t = 0)]
    pub sabotage_leak_every: u64,
}

/// Resident KiB, open descriptors and threads of this process.
fn footprint() -> (u64, usize, usize) {
    let rss = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .unwrap_or(0)
        * 4;
    let fds = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count().saturating_sub(1));
    let threads = std::fs::read_dir("/proc/self/task").map_or(0, |d| d.count());
    (rss, fds, threads)
}

const T: Duration = Duration::from_secs(10);

struct Half {
    qp: QueuePair,
    cq: CompletionQueue,
    mr: MemoryRegion,
    pd: ProtectionDomain,
}

fn half(ctx: &Context, t: QpType, len: usize) -> Result<Half, String> {
    let pd = ctx.alloc_pd().map_err(|e| format!("alloc_pd: {e}"))?;
    let cq = ctx
        .create_cq(16, None)
        .map_err(|e| format!("create_cq: {e}"))?;
    let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let mr = pd
        .alloc_mr(len, access)
        .map_err(|e| format!("alloc_mr({len}): {e}"))?;
    let qp = ctx
        .create_qp(&pd, &QpInitAttr::new(t, &cq, &cq))
        .map_err(|e| format!("create_qp: {e}"))?;
    Ok(Half { qp, cq, mr, pd })
}

fn ok(cq: &CompletionQueue, what: &str) -> Result<(), String> {
    let wc = cq
        .wait(1, T)
        .map_err(|e| format!("{what}: no completion: {e}"))?
        .remove(0);
    if wc.status != WcStatus::Success {
        return Err(format!("{what}: {:?}", wc.status));
    }
    Ok(())
}

/// A SEND from `a` to `b` (and on RC a WRITE and a READ), checked.
fn traffic(a: &Half, b: &Half, t: QpType, i: u64, bddr: IpAddr) -> Result<(), String> {
    let n = 64.min(a.mr.len()).min(b.mr.len() - 40);
    let data: Vec<u8> = (0..n).map(|k| (k as u64 ^ i) as u8).collect();
    a.mr.write(0, &data).map_err(|e| e.to_string())?;
    b.qp.post_recv(&[RecvWr {
        wr_id: 1,
        sg_list: vec![b.mr.sge(0..n + 40)],
    }])
    .map_err(|e| format!("post_recv: {e}"))?;
    let send = if t == QpType::Ud {
        let ah =
            a.pd.create_ah(AddressVector::to(bddr))
                .map_err(|e| format!("create_ah: {e}"))?;
        ah.send(
            2,
            &[a.mr.sge(0..n)],
            b.qp.qp_num(),
            ConnectOptions::default().qkey,
        )
    } else {
        SendWr::send(2, &[a.mr.sge(0..n)])
    };
    a.qp.post_send(&[send])
        .map_err(|e| format!("post_send: {e}"))?;
    ok(&a.cq, "SEND")?;
    ok(&b.cq, "RECV")?;
    let off = if t == QpType::Ud { 40 } else { 0 };
    let mut got = vec![0u8; n];
    b.mr.read(off, &mut got).map_err(|e| e.to_string())?;
    if got != data {
        return Err("SEND: the bytes received differ".into());
    }
    if t == QpType::Rc {
        let r = b.mr.remote().slice(100..100 + n as u64);
        a.qp.post_send(&[SendWr::write(3, &[a.mr.sge(0..n)], r)])
            .map_err(|e| format!("post WRITE: {e}"))?;
        ok(&a.cq, "WRITE")?;
        a.mr.write(0, &vec![0; n]).map_err(|e| e.to_string())?;
        a.qp.post_send(&[SendWr::read(4, &[a.mr.sge(0..n)], r)])
            .map_err(|e| format!("post READ: {e}"))?;
        ok(&a.cq, "READ")?;
        a.mr.read(0, &mut got).map_err(|e| e.to_string())?;
        if got != data {
            return Err("WRITE then READ: the bytes read back differ".into());
        }
    }
    Ok(())
}

/// One lifetime of a directly connected pair.
fn lifetime(ctx: &[Context; 2], addrs: &[IpAddr], i: u64, move_data: bool) -> Result<(), String> {
    let t = [QpType::Rc, QpType::Uc, QpType::Ud][(i % 3) as usize];
    let len = 4096 + ((i * 7919) % 61_440) as usize;
    let a = half(&ctx[0], t, len)?;
    let b = half(&ctx[1], t, len)?;
    let o = ConnectOptions {
        mtu: Mtu::Mtu1024,
        ..ConnectOptions::default()
    };
    a.qp.connect(&b.qp.endpoint(), &o)
        .map_err(|e| format!("connect: {e}"))?;
    b.qp.connect(&a.qp.endpoint(), &o)
        .map_err(|e| format!("connect: {e}"))?;
    if move_data {
        traffic(&a, &b, t, i, addrs[1])?;
    }
    Ok(())
}

/// One lifetime of an rdma_cm connection: the client on the first device
/// connects to `listener` on the second, both see it established, the
/// client disconnects, both see it end.
fn cm_lifetime(
    ctx: &[Context; 2],
    listener_ch: &EventChannel,
    to: SocketAddr,
    i: u64,
) -> Result<(), String> {
    let a = half(&ctx[0], QpType::Rc, 4096)?;
    let b = half(&ctx[1], QpType::Rc, 4096)?;
    let ch = EventChannel::new();
    let id = CmId::new(&ch, PortSpace::TCP).map_err(|e| format!("rdma_create_id: {e}"))?;
    id.connect(&ctx[0], to, &a.qp, &ConnParam::new())
        .map_err(|e| format!("rdma_connect: {e}"))?;
    let ev = |ch: &EventChannel, want: EventKind| {
        let e = ch
            .get_event(T)
            .ok_or_else(|| format!("lifetime {i}: no rdma_cm event, waiting for {want:?}"))?;
        if e.kind != want {
            return Err(format!("lifetime {i}: {:?} where {want:?} was due", e.kind));
        }
        Ok(e)
    };
    let req = ev(listener_ch, EventKind::ConnectRequest)?;
    req.id
        .accept(Some(&b.qp), &ConnParam::new())
        .map_err(|e| format!("rdma_accept: {e}"))?;
    ev(&ch, EventKind::Established)?;
    ev(listener_ch, EventKind::Established)?;
    traffic(&a, &b, QpType::Rc, i, to.ip())?;
    id.disconnect()
        .map_err(|e| format!("rdma_disconnect: {e}"))?;
    ev(listener_ch, EventKind::Disconnected)?;
    req.id
        .disconnect()
        .map_err(|e| format!("rdma_disconnect: {e}"))?;
    ev(&ch, EventKind::Disconnected)?;
    Ok(())
}

struct Devices {
    ctx: [Context; 2],
    /// The rdma_cm listener on the second device, and its channel.
    listener: Option<(CmId, EventChannel)>,
}

fn open(a: &Args) -> Result<Devices, String> {
    let o = |addr: IpAddr| {
        Device::soft(addr)
            .open()
            .map_err(|e| format!("open {addr}: {e}"))
    };
    let ctx = [o(a.addrs[0])?, o(a.addrs[1])?];
    let listener = if a.cm_every > 0 {
        let ch = EventChannel::new();
        let l = CmId::new(&ch, PortSpace::TCP).map_err(|e| e.to_string())?;
        l.bind(&ctx[1], a.cm_port)
            .map_err(|e| format!("rdma_bind_addr port {}: {e}", a.cm_port))?;
        l.listen().map_err(|e| format!("rdma_listen: {e}"))?;
        Some((l, ch))
    } else {
        None
    };
    Ok(Devices { ctx, listener })
}

/// Runs `rxe churn`.
pub fn run(a: &Args) -> ExitCode {
    match run_inner(a) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("rxe churn: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run_inner(a: &Args) -> Result<bool, String> {
    if a.addrs.len() != 2 || a.addrs[0] == a.addrs[1] {
        return Err("--addrs wants two different local addresses".into());
    }
    let every = |n: u64, i: u64| n > 0 && i % n == n - 1;
    let report_every = a.report_every.max(1);
    let at_start = footprint();
    let mut dev = Some(open(a)?);
    let mut warm: Option<(u64, usize, usize)> = None;
    let mut last = at_start;
    let mut stretch = Instant::now();
    let (mut first_us, mut last_us) = (None, 0.0);
    let t0 = Instant::now();
    for i in 0..a.iters {
        let d = dev.as_ref().expect("devices are open");
        let r = match &d.listener {
            Some((_, ch)) if every(a.cm_every, i) => {
                cm_lifetime(&d.ctx, ch, SocketAddr::new(a.addrs[1], a.cm_port), i)
            }
            _ => lifetime(&d.ctx, &a.addrs, i, every(a.traffic_every, i)),
        };
        if let Err(e) = r {
            println!("churn: FAILED at lifetime {i}: {e}");
            return Ok(false);
        }
        if every(a.sabotage_leak_every, i) {
            if let Ok(f) = std::fs::File::open("/dev/null") {
                std::mem::forget(f);
            }
        }
        if every(a.reopen_every, i) {
            drop(dev.take()); // close both devices (and the listener) first
            dev = Some(open(a)?);
        }
        if (i + 1) % report_every == 0 {
            let us = stretch.elapsed().as_secs_f64() * 1e6 / report_every as f64;
            stretch = Instant::now();
            let f = footprint();
            println!(
                "churn: lifetimes={} rss_kib={} fds={} threads={} us_per_lifetime={us:.0}",
                i + 1,
                f.0,
                f.1,
                f.2
            );
            last = f;
            if warm.is_none() {
                warm = Some(f);
                first_us = Some(us);
            }
            last_us = us;
        }
    }
    drop(dev);
    let end = footprint();
    let warm = warm.unwrap_or(at_start);
    // With the devices open: the last report against the first; with them
    // closed: the end against the start.
    let grew = last.0.saturating_sub(warm.0);
    let leak_fds = last.1 > warm.1 || end.1 > at_start.1;
    let leak_threads = last.2 > warm.2 || end.2 > at_start.2;
    let leak_mem = grew > a.max_growth_kib;
    println!(
        "churn: lifetimes={} rss_kib={}->{}->{} fds={}->{}->{} threads={}->{}->{} \
         us_per_lifetime={:.0}->{:.0} elapsed={:.1}s verdict={}",
        a.iters,
        at_start.0,
        warm.0,
        end.0,
        at_start.1,
        warm.1,
        end.1,
        at_start.2,
        warm.2,
        end.2,
        first_us.unwrap_or(last_us),
        last_us,
        t0.elapsed().as_secs_f64(),
        if leak_fds || leak_threads || leak_mem {
            "LEAK"
        } else {
            "ok"
        }
    );
    Ok(!(leak_fds || leak_threads || leak_mem))
}
