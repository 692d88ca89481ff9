//! The verbs layer's threads over real UDP on loopback: the progress
//! thread, application threads posting and polling (blocking waits,
//! `poll_progress`, a completion channel) and destroying while traffic
//! flows. Runs in `cargo test`; `tests/tsan.sh` runs it under
//! ThreadSanitizer too (see "Concurrency" in docs/reliability.md).
//!
//! Address plan: 127.0.21.1-10, used by no other test.

use rxe_verbs::*;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const T: Duration = Duration::from_secs(20);

fn addr(n: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 21, n))
}

struct Node {
    qp: QueuePair,
    mr: MemoryRegion,
    cq: CompletionQueue,
    ch: CompletionChannel,
    _pd: ProtectionDomain,
    _ctx: Context,
}

fn node(host: u8) -> Node {
    let ctx = Device::soft(addr(host)).open().expect("open device");
    let pd = ctx.alloc_pd().unwrap();
    let ch = ctx.create_comp_channel();
    let cq = ctx.create_cq(512, Some(&ch)).unwrap();
    let mr = pd
        .alloc_mr(1 << 16, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    let qp = ctx
        .create_qp(&pd, &QpInitAttr::new(QpType::Rc, &cq, &cq))
        .unwrap();
    Node {
        qp,
        mr,
        cq,
        ch,
        _pd: pd,
        _ctx: ctx,
    }
}

fn pair(host: u8) -> (Node, Node) {
    let a = node(host);
    let b = node(host + 1);
    let o = ConnectOptions::default();
    a.qp.connect(&b.qp.endpoint(), &o).unwrap();
    b.qp.connect(&a.qp.endpoint(), &o).unwrap();
    (a, b)
}

fn to_state(qp: &QueuePair, state: QpState) {
    let attr = QpAttr {
        state,
        ..QpAttr::default()
    };
    qp.modify(&attr, QpAttrMask::STATE).unwrap();
}

fn recv(id: u64, sge: Sge) -> RecvWr {
    RecvWr {
        wr_id: id,
        sg_list: vec![sge],
    }
}

/// A thread blocked in `CompletionQueue::wait` gets the completion
/// another thread's call delivers (here the flush of a receive when the
/// QP is moved to the error state), not a timeout: the wait that took the
/// receiver token looks at the CQ before it sleeps on the socket (the
/// lost wake-up `wait_wakes_for_a_completion_another_thread_delivers` in
/// tests/model.rs shows).
#[test]
fn wait_returns_a_completion_another_thread_delivers() {
    let (a, b) = pair(1);
    let a = Arc::new(a);
    for id in 0..20u64 {
        a.qp.post_recv(&[recv(id, a.mr.sge(0..64))]).unwrap();
        let waiter = {
            let a = a.clone();
            std::thread::spawn(move || a.cq.wait(1, T))
        };
        if id % 2 == 1 {
            std::thread::yield_now();
        }
        // Flush the receive from this thread: error, then back to a
        // connected QP for the next round.
        to_state(&a.qp, QpState::Err);
        let wc = waiter
            .join()
            .unwrap()
            .expect("the flushed receive, not a timeout");
        assert_eq!((wc[0].wr_id, wc[0].status), (id, WcStatus::WrFlushErr));
        to_state(&a.qp, QpState::Reset);
        a.qp.connect(&b.qp.endpoint(), &ConnectOptions::default())
            .unwrap();
    }
}

/// A receive posted to a QP in the error state completes at once (flushed),
/// and `post_recv`, which collects only when its call completed something
/// (`Shared::with_engine_quiet`), hands that completion to every kind of
/// waiter before it returns: the completion channel of the armed CQ, a
/// busy poller whose `poll_progress` found the CQ empty (it looks again
/// only once the device's count of delivered completions moved), and a
/// thread blocked in `CompletionQueue::wait`.
#[test]
fn a_receive_posted_to_a_qp_in_error_reaches_every_waiter() {
    let (a, _b) = pair(7);
    let a = Arc::new(a);
    to_state(&a.qp, QpState::Err);
    let mut out = Vec::new();
    for round in 0..20u64 {
        assert_eq!(a.cq.poll_progress(&mut out, 1), 0, "round {round}");
        a.cq.req_notify(false).unwrap();
        let waiter = {
            let a = a.clone();
            std::thread::spawn(move || a.cq.wait(1, T))
        };
        if round % 2 == 1 {
            std::thread::yield_now();
        }
        let ids = [2 * round, 2 * round + 1];
        a.qp.post_recv(&ids.map(|id| recv(id, a.mr.sge(0..64))))
            .unwrap();
        // Delivered before post_recv returned: no waiting needed.
        assert_eq!(a.ch.get_event(Duration::ZERO), Some(a.cq.id()));
        out.clear();
        assert_eq!(a.cq.poll_progress(&mut out, 1), 1, "round {round}");
        let waited = waiter
            .join()
            .unwrap()
            .expect("the other flushed receive, not a timeout");
        let mut got: Vec<_> = out
            .iter()
            .chain(&waited)
            .map(|wc| (wc.wr_id, wc.status))
            .collect();
        got.sort_by_key(|(id, _)| *id);
        assert_eq!(got, ids.map(|id| (id, WcStatus::WrFlushErr)));
    }
}

/// A thread blocked in `CompletionQueue::wait` without a timeout is woken
/// by the completion another thread's call delivers after the waiter's
/// last look at the CQ. The wake-up is one `eventfd` shared with the
/// progress thread, which may be waiting on it too (it looked before the
/// application thread took the socket) and use it up: the blocked thread
/// then slept until the next datagram, on an idle device for ever (with
/// a timeout, until the timeout: `wait_returns_a_completion_another_thread_delivers`
/// took 20 s for one of its rounds in about half of its runs). The
/// receiving waiter now has a wake-up of its own (`Waiter::wait_receiver`),
/// which the progress thread never reads.
#[test]
fn a_wait_without_timeout_sees_a_completion_whose_wake_up_another_thread_took() {
    let (a, _b) = pair(9);
    let a = Arc::new(a);
    to_state(&a.qp, QpState::Err);
    for id in 0..40u64 {
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = {
            let a = a.clone();
            std::thread::spawn(move || {
                let _ = tx.send(a.cq.wait(1, Duration::MAX));
            })
        };
        // Let the waiter fall asleep on the socket, and the progress
        // thread go back to its own wait, some of the time.
        std::thread::sleep(Duration::from_millis(id % 3));
        a.qp.post_recv(&[recv(id, a.mr.sge(0..64))]).unwrap();
        let wc = rx
            .recv_timeout(T)
            .expect("the wait ended (a lost wake-up leaves it asleep)")
            .unwrap();
        assert_eq!((wc[0].wr_id, wc[0].status), (id, WcStatus::WrFlushErr));
        waiter.join().unwrap();
    }
}

/// SENDs posted by one thread while a second polls the send CQ the busy
/// way (`poll_progress`) and the receiving side's thread sleeps on its
/// completion channel between polls (arm, poll, get the event, ack by
/// polling again); then the receiving QP is destroyed while more SENDs are
/// in flight. Every message arrives once, in order, byte-exact; every send
/// completes; destroying during traffic neither hangs nor panics.
#[test]
fn posting_polling_and_channels_from_threads_then_destroy_during_traffic() {
    const N: u64 = 250;
    const LEN: usize = 128;
    let (a, b) = pair(3);
    let (a, b) = (Arc::new(a), Arc::new(b));
    for i in 0..N {
        let off = i as usize * LEN;
        b.qp.post_recv(&[recv(i, b.mr.sge(off..off + LEN))])
            .unwrap();
    }
    let receiver = {
        let b = b.clone();
        std::thread::spawn(move || {
            let mut got = Vec::new();
            while (got.len() as u64) < N {
                b.cq.req_notify(false).unwrap();
                let wcs = b.cq.poll(16);
                if wcs.is_empty() {
                    b.ch.get_event(T).expect("a channel event");
                    continue;
                }
                for wc in wcs {
                    assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
                    let off = wc.wr_id as usize * LEN;
                    let bytes = b.mr.with_bytes(|m| m[off..off + LEN].to_vec());
                    assert!(bytes.iter().all(|x| *x == wc.wr_id as u8), "{wc:?}");
                    got.push(wc.wr_id);
                }
            }
            got
        })
    };
    let completed = Arc::new(AtomicU64::new(0));
    let poller = {
        let (a, completed) = (a.clone(), completed.clone());
        std::thread::spawn(move || {
            let mut done = Vec::new();
            let mut out = Vec::new();
            while (done.len() as u64) < N {
                out.clear();
                a.cq.poll_progress(&mut out, 16);
                for wc in &out {
                    assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
                    done.push(wc.wr_id);
                }
                completed.store(done.len() as u64, Ordering::Release);
                std::thread::yield_now();
            }
            done
        })
    };
    // The sender: 64 region slots, each rewritten only once the SEND that
    // last used it completed (at most 32 in flight).
    for i in 0..N {
        while completed.load(Ordering::Acquire) + 32 < i {
            std::thread::yield_now();
        }
        let off = (i as usize % 64) * LEN;
        a.mr.write(off, &[i as u8; LEN]).unwrap();
        a.qp.post_send(&[SendWr::send(i, &[a.mr.sge(off..off + LEN)])])
            .unwrap();
    }
    assert_eq!(receiver.join().unwrap(), (0..N).collect::<Vec<_>>());
    assert_eq!(poller.join().unwrap(), (0..N).collect::<Vec<_>>());

    // Destroy during traffic: more SENDs in flight, from a thread, while
    // the receiving QP goes.
    for i in 0..32 {
        b.qp.post_recv(&[recv(1000 + i, b.mr.sge(0..LEN))]).unwrap();
    }
    let sender = {
        let a = a.clone();
        std::thread::spawn(move || {
            for i in 0..32u64 {
                let wr = SendWr::send(2000 + i, &[a.mr.sge(0..LEN)]);
                let _ = a.qp.post_send(&[wr]);
            }
        })
    };
    let b = Arc::into_inner(b).expect("the receiver thread is done");
    let Node { qp, cq, .. } = b;
    drop(qp);
    // The receives still posted are flushed; those that completed first
    // succeeded.
    for wc in cq.poll(64) {
        assert!(
            matches!(wc.status, WcStatus::Success | WcStatus::WrFlushErr),
            "{wc:?}"
        );
    }
    sender.join().unwrap();
    let a = Arc::into_inner(a).expect("the poller and the sender are done");
    drop(a.qp);
    for wc in a.cq.poll(64) {
        assert!(
            matches!(wc.status, WcStatus::Success | WcStatus::WrFlushErr),
            "{wc:?}"
        );
    }
}
