//! RDMA WRITE and READ between two soft devices in one process.
//!
//! Two devices, on 127.0.0.2 and 127.0.0.3, each get a protection domain, a
//! completion queue, a registered memory region and an RC queue pair. The
//! QPs are connected to each other (two programs would swap their
//! `Endpoint`s and `RemoteRegion`s over a socket; here they are at hand).
//! Then side A WRITEs into B's memory and READs it back: B's CPU takes no
//! part, its device does the work.
//!
//! Run with `cargo run -p rxe-verbs --example rc_write`.

use rxe_verbs::*;
use std::time::Duration;

/// What one side holds. The order of the fields is the order they drop in:
/// the QP goes before the CQ it reports to, and everything before the
/// context that drives it.
struct Side {
    qp: QueuePair,
    mr: MemoryRegion,
    cq: CompletionQueue,
    _pd: ProtectionDomain,
    _ctx: Context,
}

fn side(addr: &str) -> Result<Side, Error> {
    // Open the device: binds UDP port 4791 on `addr`, starts its progress thread.
    let ctx = Device::find(addr)?.open()?;
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(16, None)?;
    // The peer may write and read this region; LOCAL_WRITE lets our own
    // device store READ responses into it.
    let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let mr = pd.alloc_mr(4096, access)?;
    let qp = ctx.create_qp(&pd, &QpInitAttr::new(QpType::Rc, &cq, &cq))?;
    Ok(Side {
        qp,
        mr,
        cq,
        _pd: pd,
        _ctx: ctx,
    })
}

/// Waits for one completion and insists that it succeeded.
fn complete(cq: &CompletionQueue) -> Result<Completion, Error> {
    let wc = cq.wait(1, Duration::from_secs(5))?.remove(0);
    assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    Ok(wc)
}

fn main() -> Result<(), Error> {
    let a = side("127.0.0.2")?;
    let b = side("127.0.0.3")?;

    // Connect: RESET -> INIT -> RTR -> RTS, each towards the other's endpoint
    // (QP number, first PSN, GID).
    let opts = ConnectOptions::default();
    a.qp.connect(&b.qp.endpoint(), &opts)?;
    b.qp.connect(&a.qp.endpoint(), &opts)?;
    println!(
        "A: QP {:#08x} on 127.0.0.2 <-> B: QP {:#08x} on 127.0.0.3",
        a.qp.qp_num(),
        b.qp.qp_num()
    );

    // B tells A where it may write: address, length and rkey.
    let remote = b.mr.remote();

    // RDMA WRITE: 26 bytes from A's region to offset 100 of B's.
    let msg = b"written by A, read by B!!!";
    a.mr.write(0, msg)?;
    a.qp.post_send(&[SendWr::write(
        1,
        &[a.mr.sge(0..msg.len())],
        remote.slice(100..200),
    )])?;
    let wc = complete(&a.cq)?;
    // The completion means B's device acknowledged: the bytes are in B's memory.
    let mut got = vec![0u8; msg.len()];
    b.mr.read(100, &mut got)?;
    println!(
        "WRITE {:?} {} bytes -> B now holds {:?}",
        wc.opcode,
        msg.len(),
        String::from_utf8_lossy(&got)
    );

    // RDMA READ: B changes its memory, A fetches it into offset 1024 of its region.
    b.mr.write(100, b"B changed this")?;
    a.qp.post_send(&[SendWr::read(
        2,
        &[a.mr.sge(1024..1024 + 14)],
        remote.slice(100..114),
    )])?;
    let wc = complete(&a.cq)?;
    let mut back = [0u8; 14];
    a.mr.read(1024, &mut back)?;
    println!(
        "READ  {:?} {} bytes <- A got {:?}",
        wc.opcode,
        wc.byte_len,
        String::from_utf8_lossy(&back)
    );

    // Neither operation consumed a receive or made a completion at B.
    assert!(b.cq.poll(16).is_empty());
    let c = a._ctx.counters();
    println!("A sent {} packets, received {}", c.sent_pkts, c.rcvd_pkts);
    Ok(())
}
