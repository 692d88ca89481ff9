//! How much memory a queue pair costs on a soft device.
//!
//! Opens two devices (127.0.4.2 and 127.0.4.3), creates N connected RC QP
//! pairs between them (each side's QPs share one CQ, as perftest's do) and
//! reports the growth of the process's resident memory per QP: first with
//! the QPs idle in RTS, then with `--posted` 64-byte WRITEs posted on
//! every QP and completed (so the send queues have held that many work
//! requests). Both devices live in this process, so "per QP" counts one QP
//! of each side: half of it is one QP's cost.
//!
//! `cargo run --release -p rxe-verbs --example qp_memory -- 1 16 256 1024`

use rxe_verbs::*;
use std::time::Duration;

/// Resident memory of this process, in bytes (`/proc/self/statm`).
fn rss() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = s
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

struct Dev {
    ctx: Context,
    pd: ProtectionDomain,
    cq: CompletionQueue,
    mr: MemoryRegion,
}

fn dev(addr: &str, cqe: u32) -> Result<Dev, Error> {
    let ctx = Device::find(addr)?.open()?;
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(cqe, None)?;
    let mr = pd.alloc_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    Ok(Dev { ctx, pd, cq, mr })
}

fn main() -> Result<(), Error> {
    let mut counts: Vec<usize> = Vec::new();
    let mut posted = 128usize;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--posted" {
            posted = args.next().and_then(|v| v.parse().ok()).unwrap_or(posted);
        } else if let Ok(n) = a.parse() {
            counts.push(n);
        }
    }
    if counts.is_empty() {
        counts = vec![1, 16, 256, 1024];
    }
    println!(" QPs   RSS growth idle   per QP pair   after {posted} WRITEs per QP   per QP pair");
    for n in counts {
        // Work requests complete CHUNK QPs at a time, within one CQ's size.
        const CHUNK: usize = 256;
        let cqe = (n.min(CHUNK) * posted + 16).min(32767) as u32; // the device's max_cqe
        let a = dev("127.0.4.2", cqe)?;
        let b = dev("127.0.4.3", cqe)?;
        let before = rss();
        let mut qps = Vec::with_capacity(n);
        for _ in 0..n {
            let qa = a
                .ctx
                .create_qp(&a.pd, &QpInitAttr::new(QpType::Rc, &a.cq, &a.cq))?;
            let qb = b
                .ctx
                .create_qp(&b.pd, &QpInitAttr::new(QpType::Rc, &b.cq, &b.cq))?;
            let o = ConnectOptions::default();
            qa.connect(&qb.endpoint(), &o)?;
            qb.connect(&qa.endpoint(), &o)?;
            qps.push((qa, qb));
        }
        let idle = rss().saturating_sub(before);
        let remote = RemoteRegion {
            addr: b.mr.sge(0..64).addr,
            len: 64,
            rkey: b.mr.rkey(),
        };
        let sge = [a.mr.sge(0..64)];
        for chunk in qps.chunks(CHUNK) {
            for (qa, _) in chunk {
                let wrs: Vec<SendWr> = (0..posted as u64)
                    .map(|i| SendWr::write(i, &sge, remote))
                    .collect();
                qa.post_send(&wrs)?;
            }
            let mut done = 0;
            while done < chunk.len() * posted {
                done += a.cq.wait(1, Duration::from_secs(30))?.len();
                done += a.cq.poll(usize::MAX).len();
            }
        }
        let busy = rss().saturating_sub(before);
        println!(
            "{n:5}   {:10.1} KiB   {:8.1} KiB   {:21.1} KiB   {:8.1} KiB",
            idle as f64 / 1024.0,
            idle as f64 / 1024.0 / n as f64,
            busy as f64 / 1024.0,
            busy as f64 / 1024.0 / n as f64,
        );
        drop(qps);
    }
    Ok(())
}
