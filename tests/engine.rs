//! Targeted engine scenarios over the simulated network.

use rxe_core::engine::RegionMemory;
use rxe_core::types::*;
use rxe_core::wire::Opcode;
use rxe_net::sim::{Fate, Faults};
use rxe_tests::sim::*;
use std::time::Duration;

#[test]
fn rc_send_multi_packet() {
    let (mut net, nodes) = network(1, Faults::none(), 2, 1 << 20);
    let (a, b) = (&nodes[0], &nodes[1]);
    let p = ConnParams::default();
    let (qa, qb) = connect(&mut net, a, b, &p);
    let data: Vec<u8> = (0..10000u32).map(|i| (i * 7) as u8).collect();
    a.mem.write(0, &data);
    net.engines[b.idx]
        .post_recv(
            qb,
            RecvWr {
                wr_id: 7,
                sg_list: vec![sge(b, 4096, 20000)],
            },
        )
        .unwrap();
    let mut wr = SendWr::new(1, SendOpcode::Send);
    wr.sg_list = vec![sge(a, 0, 10000)];
    net.engines[a.idx].post_send(qa, wr).unwrap();
    net.run(Duration::from_secs(1));
    let ca = completions(&mut net, a);
    let cb = completions(&mut net, b);
    assert_eq!(ca.len(), 1, "{ca:?}");
    assert_eq!(ca[0].status, WcStatus::Success);
    assert_eq!(cb.len(), 1, "{cb:?}");
    assert_eq!(cb[0].status, WcStatus::Success);
    assert_eq!(cb[0].byte_len, 10000);
    assert_eq!(&b.mem.snapshot()[4096..14096], &data[..]);
}

fn rc(retry_cnt: u8, rnr_retry: u8) -> ConnParams {
    ConnParams {
        retry_cnt,
        rnr_retry,
        timeout: 8,
        ..ConnParams::default()
    }
}

/// A write request of `len` bytes from A's offset 0 to B's offset `dst`.
fn write_wr(id: u64, a: &Node, b: &Node, len: u32, dst: u64) -> SendWr {
    let mut wr = SendWr::new(id, SendOpcode::RdmaWrite);
    wr.sg_list = vec![sge(a, 0, len)];
    wr.remote_addr = IOVA + dst;
    wr.rkey = b.mr.rkey;
    wr
}

#[test]
fn link_down_gives_retry_exceeded_after_retry_cnt_plus_one_transmissions() {
    for retry_cnt in [0u8, 1, 3, 7] {
        let (mut net, nodes) = network(2, Faults::none(), 2, 4096);
        let (a, b) = (&nodes[0], &nodes[1]);
        let (qa, _qb) = connect(&mut net, a, b, &rc(retry_cnt, 7));
        let sent = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let s = sent.clone();
        net.set_tap(move |_, t| {
            if t.payload[0] == rxe_core::wire::Opcode::RC_RDMA_WRITE_ONLY.0 {
                s.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        });
        net.faults.loss = 1.0;
        net.engines[a.idx]
            .post_send(qa, write_wr(1, a, b, 100, 0))
            .unwrap();
        net.run(Duration::from_secs(10));
        let c = completions(&mut net, a);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].status, WcStatus::RetryExcErr);
        assert_eq!(
            sent.load(std::sync::atomic::Ordering::Relaxed),
            u64::from(retry_cnt) + 1,
            "retry_cnt {retry_cnt}"
        );
        let (attr, _) = net.engines[a.idx].query_qp(qa).unwrap();
        assert_eq!(attr.state, QpState::Err);
        assert_eq!(
            net.engines[a.idx].counters().retry_timeouts,
            u64::from(retry_cnt) + 1
        );
        assert_eq!(
            net.engines[a.idx].poll_event(),
            Some(rxe_core::engine::AsyncEvent::QpFatal(qa))
        );
    }
}

/// What one side sent, in order: (virtual time, whether it came from A,
/// PSN, opcode).
type Sent = std::sync::Arc<std::sync::Mutex<Vec<(Duration, bool, u32, u8)>>>;

fn record_sent(net: &mut rxe_net::sim::SimNet, a: &Node) -> Sent {
    let sent: Sent = Default::default();
    let (s, addr) = (sent.clone(), a.addr);
    net.set_tap(move |at, t| {
        let p = rxe_core::wire::packet::Packet::new_checked(&t.payload[..]).unwrap();
        let b = p.bth();
        s.lock()
            .unwrap()
            .push((at, t.src == addr, b.psn().value(), t.payload[0]));
    });
    sent
}

/// After a transport timeout the requester sends the oldest unacknowledged
/// packet alone and the rest only once the responder has answered it: a
/// 16-packet WRITE whose first transmission is lost goes out again as one
/// packet, B's ACK of it, then the other 15, and completes byte-exact.
/// Before, the timeout sent all 16 again at once (a slow responder got a
/// duplicate in its backlog for each).
#[test]
fn after_a_timeout_one_packet_goes_first_and_the_rest_when_it_is_answered() {
    let (mut net, nodes) = network(21, Faults::none(), 2, 1 << 16);
    let (a, b) = (&nodes[0], &nodes[1]);
    let (qa, _qb) = connect(&mut net, a, b, &rc(7, 7));
    let data: Vec<u8> = (0..16384u32).map(|i| (i * 13 / 5) as u8).collect();
    a.mem.write(0, &data);
    let sent = record_sent(&mut net, a);
    net.faults.loss = 1.0;
    net.engines[a.idx]
        .post_send(qa, write_wr(1, a, b, 16384, 0))
        .unwrap();
    net.flush();
    net.faults.loss = 0.0;
    net.run(Duration::from_secs(1));
    let c = completions(&mut net, a);
    assert_eq!(c.len(), 1, "{c:?}");
    assert_eq!(c[0].status, WcStatus::Success);
    assert_eq!(&b.mem.snapshot()[..16384], &data[..]);
    let sent = sent.lock().unwrap().clone();
    let first = sent[0].2;
    let a_psns: Vec<u32> = sent.iter().filter(|p| p.1).map(|p| p.2 - first).collect();
    let expect: Vec<u32> = (0..16).chain(0..16).collect();
    assert_eq!(a_psns, expect, "A's PSNs, from the first");
    // The probe (the 17th packet of A's) asks for an ACK, and the next
    // packet of A's comes after B's ACK of the probe.
    let probe = sent.iter().filter(|p| p.1).nth(16).unwrap();
    let next = sent.iter().filter(|p| p.1).nth(17).unwrap();
    let ack = sent
        .iter()
        .find(|p| !p.1 && p.0 >= probe.0)
        .expect("B answered the probe");
    assert_eq!(ack.2, first, "B's ACK is for the probe's PSN");
    assert!(
        ack.0 < next.0,
        "A sent its 18th packet at {:?}, before B's ACK of the probe at {:?}",
        next.0,
        ack.0
    );
    let ca = net.engines[a.idx].counters();
    assert_eq!(ca.retry_timeouts, 1);
    assert_eq!(ca.retransmitted_pkts, 16);
}

/// A probe that is lost too goes again at the next timeout, one retry
/// each: on a dead link a 4-packet WRITE with `retry_cnt` 3 is sent whole
/// once and then probed 3 times (its first packet), before
/// `RETRY_EXC_ERR`.
#[test]
fn a_lost_probe_is_sent_again_at_each_timeout_until_the_retries_run_out() {
    let (mut net, nodes) = network(22, Faults::none(), 2, 1 << 16);
    let (a, b) = (&nodes[0], &nodes[1]);
    let (qa, _qb) = connect(&mut net, a, b, &rc(3, 7));
    let sent = record_sent(&mut net, a);
    net.faults.loss = 1.0;
    net.engines[a.idx]
        .post_send(qa, write_wr(1, a, b, 4096, 0))
        .unwrap();
    net.run(Duration::from_secs(10));
    let c = completions(&mut net, a);
    assert_eq!(c.len(), 1, "{c:?}");
    assert_eq!(c[0].status, WcStatus::RetryExcErr);
    let sent = sent.lock().unwrap().clone();
    let first = sent[0].2;
    let a_psns: Vec<u32> = sent.iter().filter(|p| p.1).map(|p| p.2 - first).collect();
    assert_eq!(a_psns, vec![0, 1, 2, 3, 0, 0, 0]);
    assert_eq!(net.engines[a.idx].counters().retry_timeouts, 4);
}

#[test]
fn no_receive_buffer_gives_rnr_naks_then_success() {
    let (mut net, nodes) = network(3, Faults::none(), 2, 1 << 16);
    let (a, b) = (&nodes[0], &nodes[1]);
    let p = rc(7, 7);
    let (qa, qb) = connect(&mut net, a, b, &p);
    a.mem.write(0, b"ping");
    let mut wr = SendWr::new(1, SendOpcode::Send);
    wr.sg_list = vec![sge(a, 0, 4)];
    net.engines[a.idx].post_send(qa, wr).unwrap();
    // Nothing posted at B: RNR NAKs, retried after the min RNR timer (code 1 = 10 µs).
    net.run_until(Duration::from_millis(1), |net| {
        net.engines[a.idx].counters().rcvd_rnr_err >= 3
    });
    assert!(completions(&mut net, a).is_empty());
    assert!(net.engines[a.idx].counters().rcvd_rnr_err >= 3);
    net.engines[b.idx]
        .post_recv(
            qb,
            RecvWr {
                wr_id: 9,
                sg_list: vec![sge(b, 100, 64)],
            },
        )
        .unwrap();
    net.run(Duration::from_secs(1));
    let ca = completions(&mut net, a);
    assert_eq!(ca.len(), 1);
    assert_eq!(ca[0].status, WcStatus::Success);
    let cb = completions(&mut net, b);
    assert_eq!(
        (cb[0].wr_id, cb[0].byte_len, cb[0].status),
        (9, 4, WcStatus::Success)
    );
    assert_eq!(&b.mem.snapshot()[100..104], b"ping");
}

#[test]
fn rnr_retry_exceeded() {
    for rnr_retry in [0u8, 2, 6] {
        let (mut net, nodes) = network(4, Faults::none(), 2, 1 << 16);
        let (a, b) = (&nodes[0], &nodes[1]);
        let (qa, qb) = connect(&mut net, a, b, &rc(7, rnr_retry));
        let mut wr = SendWr::new(1, SendOpcode::Send);
        wr.sg_list = vec![sge(a, 0, 4)];
        net.engines[a.idx].post_send(qa, wr).unwrap();
        net.run(Duration::from_secs(10));
        let ca = completions(&mut net, a);
        assert_eq!(ca.len(), 1);
        assert_eq!(ca[0].status, WcStatus::RnrRetryExcErr);
        assert_eq!(
            net.engines[b.idx].qp_counters(qb).unwrap().send_rnr_err,
            u64::from(rnr_retry) + 1
        );
        assert_eq!(net.engines[a.idx].counters().retry_rnr_exceeded_err, 1);
    }
}

#[test]
fn rnr_timer_is_the_responders_min_rnr_timer() {
    // Code 14 = 1.28 ms between tries.
    let (mut net, nodes) = network(5, Faults::none(), 2, 1 << 16);
    let (a, b) = (&nodes[0], &nodes[1]);
    let p = ConnParams {
        min_rnr_timer: 14,
        ..rc(7, 2)
    };
    let (qa, _qb) = connect(&mut net, a, b, &p);
    let times = std::sync::Arc::new(parking_lot_free::Times::default());
    let t2 = times.clone();
    net.set_tap(move |at, t| {
        if t.payload[0] == rxe_core::wire::Opcode::RC_SEND_ONLY.0 {
            t2.push(at);
        }
    });
    let mut wr = SendWr::new(1, SendOpcode::Send);
    wr.sg_list = vec![sge(a, 0, 4)];
    net.engines[a.idx].post_send(qa, wr).unwrap();
    net.run(Duration::from_secs(10));
    let t = times.get();
    assert_eq!(t.len(), 3);
    for w in t.windows(2) {
        let gap = w[1] - w[0];
        assert!(
            gap >= Duration::from_micros(1280) && gap < Duration::from_micros(1400),
            "{gap:?}"
        );
    }
}

/// A tiny thread-safe list of times for taps.
mod parking_lot_free {
    use std::sync::Mutex;
    use std::time::Duration;
    #[derive(Debug, Default)]
    pub struct Times(Mutex<Vec<Duration>>);
    impl Times {
        pub fn push(&self, d: Duration) {
            self.0.lock().unwrap().push(d);
        }
        pub fn get(&self) -> Vec<Duration> {
            self.0.lock().unwrap().clone()
        }
    }
}

#[test]
fn bad_rkey_gives_remote_access_error_and_both_qps_error() {
    let (mut net, nodes) = network(6, Faults::none(), 2, 1 << 16);
    let (a, b) = (&nodes[0], &nodes[1]);
    let (qa, qb) = connect(&mut net, a, b, &rc(7, 7));
    net.engines[b.idx]
        .post_recv(
            qb,
            RecvWr {
                wr_id: 5,
                sg_list: vec![sge(b, 0, 64)],
            },
        )
        .unwrap();
    b.mem.write(0, &[0xee; 64]);
    let before = b.mem.snapshot();
    let mut wr = write_wr(1, a, b, 64, 0);
    wr.rkey ^= 0x55;
    net.engines[a.idx].post_send(qa, wr).unwrap();
    net.engines[a.idx]
        .post_send(qa, write_wr(2, a, b, 64, 0))
        .unwrap();
    net.run(Duration::from_secs(1));
    let ca = completions(&mut net, a);
    assert_eq!(
        ca.iter().map(|c| c.status).collect::<Vec<_>>(),
        vec![WcStatus::RemAccessErr, WcStatus::WrFlushErr]
    );
    assert_eq!(
        net.engines[a.idx].query_qp(qa).unwrap().0.state,
        QpState::Err
    );
    assert_eq!(
        net.engines[b.idx].query_qp(qb).unwrap().0.state,
        QpState::Err
    );
    // B's posted receive is flushed, and not one byte of B changed.
    let cb = completions(&mut net, b);
    assert_eq!((cb[0].wr_id, cb[0].status), (5, WcStatus::WrFlushErr));
    assert_eq!(b.mem.snapshot(), before);
}

#[test]
fn write_past_the_region_is_refused_without_touching_memory() {
    let (mut net, nodes) = network(7, Faults::none(), 2, 4096);
    let (a, b) = (&nodes[0], &nodes[1]);
    let (qa, _) = connect(&mut net, a, b, &rc(7, 7));
    let before = b.mem.snapshot();
    net.engines[a.idx]
        .post_send(qa, write_wr(1, a, b, 200, 4000))
        .unwrap();
    net.run(Duration::from_secs(1));
    assert_eq!(completions(&mut net, a)[0].status, WcStatus::RemAccessErr);
    assert_eq!(b.mem.snapshot(), before);
}

#[test]
fn send_longer_than_the_receive_is_an_invalid_request() {
    let (mut net, nodes) = network(8, Faults::none(), 2, 1 << 16);
    let (a, b) = (&nodes[0], &nodes[1]);
    let (qa, qb) = connect(&mut net, a, b, &rc(7, 7));
    net.engines[b.idx]
        .post_recv(
            qb,
            RecvWr {
                wr_id: 5,
                sg_list: vec![sge(b, 0, 100)],
            },
        )
        .unwrap();
    let mut wr = SendWr::new(1, SendOpcode::Send);
    wr.sg_list = vec![sge(a, 0, 3000)];
    net.engines[a.idx].post_send(qa, wr).unwrap();
    net.run(Duration::from_secs(1));
    assert_eq!(completions(&mut net, a)[0].status, WcStatus::RemInvReqErr);
    let cb = completions(&mut net, b);
    assert_eq!((cb[0].wr_id, cb[0].status), (5, WcStatus::LocLenErr));
}

/// The receive buffer's region is deregistered while a multi-packet SEND is
/// landing in it (its owner tearing down mid-transfer). The kernel's rxe
/// calls that a malformed WQE (class A): NAK *remote operational error*,
/// the receive completes with `LocQpOpErr`. It is not an invalid request:
/// the requester did nothing wrong, and not one more byte is written.
#[test]
fn receive_region_deregistered_mid_send_is_a_remote_operational_error() {
    let (mut net, nodes) = network(16, Faults::none(), 2, 1 << 16);
    let (a, b) = (&nodes[0], &nodes[1]);
    let (qa, qb) = connect(&mut net, a, b, &rc(7, 7));
    net.engines[b.idx]
        .post_recv(
            qb,
            RecvWr {
                wr_id: 5,
                sg_list: vec![sge(b, 0, 1 << 15)],
            },
        )
        .unwrap();
    let mut wr = SendWr::new(1, SendOpcode::Send);
    wr.sg_list = vec![sge(a, 0, 1 << 15)];
    net.engines[a.idx].post_send(qa, wr).unwrap();
    // Stop once B has taken the first packets of the SEND in.
    let before = net.engines[b.idx].counters().rcvd_pkts;
    assert!(net.run_until(Duration::from_secs(1), |n| {
        n.engines[b.idx].counters().rcvd_pkts >= before + 2
    }));
    net.engines[b.idx].dereg_mr(b.mr.lkey).unwrap();
    let frozen = b.mem.snapshot();
    net.run(Duration::from_secs(1));
    assert_eq!(completions(&mut net, a)[0].status, WcStatus::RemOpErr);
    let cb = completions(&mut net, b);
    assert_eq!((cb[0].wr_id, cb[0].status), (5, WcStatus::LocQpOpErr));
    assert_eq!(
        b.mem.snapshot(),
        frozen,
        "nothing written after deregistration"
    );
}

#[test]
fn uc_and_ud_under_loss_lose_whole_messages_only() {
    for qp_type in [QpType::Uc, QpType::Ud] {
        let faults = Faults {
            loss: 0.1,
            ..Faults::none()
        };
        let (mut net, nodes) = network(9, faults, 2, 1 << 22);
        let (a, b) = (&nodes[0], &nodes[1]);
        let mtu = Mtu::Mtu1024;
        let p = ConnParams {
            qp_type,
            mtu,
            ..ConnParams::default()
        };
        let (qa, qb) = connect(&mut net, a, b, &p);
        let (n, len) = (200u64, if qp_type == QpType::Ud { 1000u32 } else { 5000 });
        let slot = 8192u64;
        for i in 0..n {
            a.mem
                .write((i * slot) as usize, &vec![i as u8 + 1; len as usize]);
            net.engines[b.idx]
                .post_recv(
                    qb,
                    RecvWr {
                        wr_id: i,
                        sg_list: vec![sge(b, i * slot, len + 40)],
                    },
                )
                .unwrap();
        }
        for i in 0..n {
            let mut wr = SendWr::new(i, SendOpcode::Send);
            wr.sg_list = vec![sge(a, i * slot, len)];
            if qp_type == QpType::Ud {
                wr.ud = Some(UdDest {
                    av: AddressVector::to(b.addr),
                    remote_qpn: qb,
                    remote_qkey: 0x1111_1111,
                });
            }
            net.engines[a.idx].post_send(qa, wr).unwrap();
            net.run(Duration::from_micros(200));
        }
        net.run(Duration::from_secs(1));
        let ca = completions(&mut net, a);
        assert_eq!(ca.len() as u64, n);
        assert!(
            ca.iter().all(|c| c.status == WcStatus::Success),
            "senders complete locally"
        );
        let cb = completions(&mut net, b);
        assert!(
            !cb.is_empty() && (cb.len() as u64) < n,
            "{qp_type:?}: {} of {n} arrived",
            cb.len()
        );
        let snap = b.mem.snapshot();
        let mut last = None;
        for c in &cb {
            assert_eq!(c.status, WcStatus::Success);
            let grh = if qp_type == QpType::Ud { 40 } else { 0 };
            assert_eq!(c.byte_len, len + grh);
            // UC reuses the WQE of a lost message: the k-th receive holds some later message, whole.
            let at = (c.wr_id * slot) as usize + grh as usize;
            let v = snap[at];
            assert!(
                snap[at..at + len as usize].iter().all(|&x| x == v),
                "partial message in {c:?}"
            );
            assert!(last.is_none_or(|l| v > l), "out of order");
            last = Some(v);
            if qp_type == QpType::Ud {
                assert_eq!(c.src_qp, qa);
                assert!(c.grh);
            }
        }
    }
}

#[test]
fn atomics_are_executed_once_and_return_the_original_value() {
    let (mut net, nodes) = network(
        10,
        Faults {
            duplicate: 0.5,
            loss: 0.1,
            ..Faults::none()
        },
        2,
        4096,
    );
    let (a, b) = (&nodes[0], &nodes[1]);
    let (qa, _) = connect(&mut net, a, b, &rc(7, 7));
    b.mem.write(64, &100u64.to_ne_bytes());
    for i in 0..20u64 {
        let mut wr = SendWr::new(i, SendOpcode::AtomicFetchAdd);
        wr.sg_list = vec![sge(a, i * 8, 8)];
        wr.remote_addr = IOVA + 64;
        wr.rkey = b.mr.rkey;
        wr.compare_add = 1;
        net.engines[a.idx].post_send(qa, wr).unwrap();
    }
    let mut wr = SendWr::new(20, SendOpcode::AtomicCmpSwap);
    wr.sg_list = vec![sge(a, 200, 8)];
    wr.remote_addr = IOVA + 64;
    wr.rkey = b.mr.rkey;
    wr.compare_add = 120;
    wr.swap = 7;
    net.engines[a.idx].post_send(qa, wr).unwrap();
    net.run(Duration::from_secs(5));
    let ca = completions(&mut net, a);
    assert_eq!(ca.len(), 21);
    assert!(ca.iter().all(|c| c.status == WcStatus::Success));
    let am = a.mem.snapshot();
    for i in 0..20usize {
        assert_eq!(
            u64::from_ne_bytes(am[i * 8..i * 8 + 8].try_into().unwrap()),
            100 + i as u64
        );
    }
    assert_eq!(u64::from_ne_bytes(am[200..208].try_into().unwrap()), 120);
    assert_eq!(
        u64::from_ne_bytes(b.mem.snapshot()[64..72].try_into().unwrap()),
        7
    );
    assert!(
        net.engines[b.idx].counters().duplicate_request > 0,
        "the duplicates were seen"
    );
}

fn atomic_write_wr(id: u64, a: &Node, b: &Node, src: u64, len: u32, dst: u64) -> SendWr {
    let mut wr = SendWr::new(id, SendOpcode::AtomicWrite);
    wr.sg_list = vec![sge(a, src, len)];
    wr.remote_addr = IOVA + dst;
    wr.rkey = b.mr.rkey;
    wr
}

/// RDMA ATOMIC WRITE, as the kernel's rxe has it since 6.2: the 8 bytes of
/// the gather list land at the remote address as they are, the request is
/// an RC_ATOMIC_WRITE with a RETH and 8 bytes of payload, the answer an
/// RDMA READ response only without payload, and the completion an
/// `AtomicWrite` of 8 bytes. When the answer is lost, the resent request
/// is answered from the responder's resources and not stored again: B's
/// word, changed by B in between, keeps B's value.
#[test]
fn atomic_write_stores_eight_bytes_once_and_is_answered_by_an_empty_read_response() {
    let (mut net, nodes) = network(23, Faults::none(), 2, 4096);
    let (a, b) = (&nodes[0], &nodes[1]);
    let (qa, _qb) = connect(&mut net, a, b, &rc(7, 7));
    let sent = record_sent(&mut net, a);
    a.mem.write(0, &0x1122_3344_5566_7788u64.to_ne_bytes());
    net.engines[a.idx]
        .post_send(qa, atomic_write_wr(1, a, b, 0, 8, 64))
        .unwrap();
    net.run(Duration::from_secs(1));
    let c = completions(&mut net, a);
    assert_eq!(c.len(), 1, "{c:?}");
    assert_eq!(c[0].status, WcStatus::Success);
    assert_eq!(c[0].opcode, WcOpcode::AtomicWrite);
    assert_eq!(c[0].byte_len, 8);
    assert_eq!(&b.mem.snapshot()[64..72], &a.mem.snapshot()[0..8]);
    let opcodes: Vec<(bool, u8)> = sent.lock().unwrap().iter().map(|p| (p.1, p.3)).collect();
    assert_eq!(
        opcodes,
        vec![
            (true, rxe_core::wire::Opcode::RC_ATOMIC_WRITE.0),
            (false, rxe_core::wire::Opcode::RC_RDMA_READ_RESPONSE_ONLY.0)
        ]
    );

    // The answer to the next one is lost; B changes the word before A's
    // resend arrives.
    a.mem.write(8, &7u64.to_ne_bytes());
    net.engines[a.idx]
        .post_send(qa, atomic_write_wr(2, a, b, 8, 8, 64))
        .unwrap();
    net.flush();
    net.faults.loss = 1.0;
    net.run_until(Duration::from_secs(1), |n| {
        n.engines[b.idx].counters().rcvd_pkts >= 2
    });
    net.flush();
    net.faults.loss = 0.0;
    assert_eq!(&b.mem.snapshot()[64..72], &7u64.to_ne_bytes());
    b.mem.write(64, &9u64.to_ne_bytes());
    net.run(Duration::from_secs(1));
    let c = completions(&mut net, a);
    assert_eq!(c.len(), 1, "{c:?}");
    assert_eq!(c[0].status, WcStatus::Success);
    assert_eq!(net.engines[b.idx].counters().duplicate_request, 1);
    assert_eq!(
        &b.mem.snapshot()[64..72],
        &9u64.to_ne_bytes(),
        "the duplicate was stored again"
    );
}

/// An ATOMIC WRITE of other than 8 bytes fails locally (LOC_LEN_ERR); one
/// to an address that is not 8-byte aligned is refused by the responder
/// with a NAK invalid request (REM_INV_REQ_ERR), as the kernel's rxe
/// refuses it (RESPST_ERR_MISALIGNED_ATOMIC), and B's memory is untouched.
#[test]
fn atomic_write_needs_eight_bytes_and_an_aligned_address() {
    let (mut net, nodes) = network(24, Faults::none(), 2, 4096);
    let (a, b) = (&nodes[0], &nodes[1]);
    let (qa, _qb) = connect(&mut net, a, b, &rc(7, 7));
    net.engines[a.idx]
        .post_send(qa, atomic_write_wr(1, a, b, 0, 7, 64))
        .unwrap();
    net.run(Duration::from_secs(1));
    let c = completions(&mut net, a);
    assert_eq!(c.len(), 1, "{c:?}");
    assert_eq!(c[0].status, WcStatus::LocLenErr);

    let (mut net, nodes) = network(25, Faults::none(), 2, 4096);
    let (a, b) = (&nodes[0], &nodes[1]);
    let (qa, _qb) = connect(&mut net, a, b, &rc(7, 7));
    a.mem.write(0, &[0xab; 8]);
    let before = b.mem.snapshot();
    net.engines[a.idx]
        .post_send(qa, atomic_write_wr(1, a, b, 0, 8, 68))
        .unwrap();
    net.run(Duration::from_secs(1));
    let c = completions(&mut net, a);
    assert_eq!(c.len(), 1, "{c:?}");
    assert_eq!(c[0].status, WcStatus::RemInvReqErr);
    assert_eq!(b.mem.snapshot(), before);
}

/// A region deregistered after the responder accepted a READ but before it
/// sent the answer: the answer cannot be read, and the requester's retry
/// (a duplicate READ) is refused with a remote access NAK, so the READ
/// fails with `RemAccessErr` after one timeout instead of retrying from
/// revoked memory until `retry_cnt` runs out (`RetryExcErr`).
#[test]
fn read_from_a_region_deregistered_mid_read_fails_with_remote_access_error() {
    let (mut net, nodes) = network(15, Faults::none(), 2, 1 << 16);
    let (a, b) = (&nodes[0], &nodes[1]);
    let (qa, _) = connect(&mut net, a, b, &rc(7, 7));
    let before = net.engines[b.idx].counters().rcvd_pkts;
    let mut wr = SendWr::new(1, SendOpcode::RdmaRead);
    wr.sg_list = vec![sge(a, 0, 8192)];
    wr.remote_addr = IOVA;
    wr.rkey = b.mr.rkey;
    net.engines[a.idx].post_send(qa, wr).unwrap();
    // Stop right after B took the READ request in, before it answers.
    assert!(net.run_until(Duration::from_secs(1), |n| {
        n.engines[b.idx].counters().rcvd_pkts > before
    }));
    net.engines[b.idx].dereg_mr(b.mr.lkey).unwrap();
    net.run(Duration::from_secs(5));
    let c = completions(&mut net, a);
    assert_eq!(c.len(), 1, "{c:?}");
    assert_eq!(c[0].status, WcStatus::RemAccessErr, "{c:?}");
    assert_eq!(net.engines[a.idx].counters().retry_timeouts, 1);
}

#[test]
fn duplicate_read_flood_is_bounded() {
    let (mut net, nodes) = network(11, Faults::none(), 2, 1 << 16);
    let (a, b) = (&nodes[0], &nodes[1]);
    let (qa, _qb) = connect(&mut net, a, b, &rc(7, 7));
    let seen = std::sync::Arc::new(std::sync::Mutex::new(None::<rxe_core::engine::Transmit>));
    let s = seen.clone();
    net.set_tap(move |_, t| {
        if t.payload[0] == rxe_core::wire::Opcode::RC_RDMA_READ_REQUEST.0 {
            *s.lock().unwrap() = Some(t.clone());
        }
    });
    let mut wr = SendWr::new(1, SendOpcode::RdmaRead);
    wr.sg_list = vec![sge(a, 0, 8192)];
    wr.remote_addr = IOVA;
    wr.rkey = b.mr.rkey;
    net.engines[a.idx].post_send(qa, wr).unwrap();
    net.run(Duration::from_secs(1));
    assert_eq!(completions(&mut net, a)[0].status, WcStatus::Success);
    let read = seen
        .lock()
        .unwrap()
        .clone()
        .expect("a READ request went out");
    // The same (now duplicate) READ, 5000 times, with nothing sent meanwhile.
    let meta = rxe_core::engine::RecvMeta {
        src: read.src,
        dst: read.dst,
        src_port: read.src_port,
        icrc: rxe_core::engine::IcrcStatus::Ok,
    };
    let now = net.now();
    for _ in 0..5000 {
        net.engines[b.idx].handle_datagram(now, meta, &read.payload);
    }
    let c = net.engines[b.idx].counters();
    assert_eq!(c.duplicate_request, 5000);
    assert!(c.dropped_for(rxe_core::engine::DropReason::Backlog) >= 5000 - 512);
    // What is queued is bounded: 512 replays of an 8-packet READ at most.
    let mut n = 0;
    while net.engines[b.idx].poll_transmit(now).is_some() {
        n += 1;
    }
    assert!(n <= 512 * 8, "{n} packets queued");
}

/// Counts the packets `n` sends before `limit` (virtual time).
fn count_sent_before(
    net: &mut rxe_net::sim::SimNet,
    n: &Node,
    limit: Duration,
) -> std::sync::Arc<std::sync::atomic::AtomicU64> {
    let count = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let c = count.clone();
    let addr = n.addr;
    net.set_tap(move |at, t| {
        if t.src == addr && at < limit {
            c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    });
    count
}

/// The send window counts packets: a 1 MiB SEND (1024 packets) has at most
/// `max_unacked_psns` (128) on the wire before the first ACK can be back.
#[test]
fn long_message_respects_the_packet_window() {
    let faults = Faults {
        delay: Duration::from_millis(1),
        ..Faults::none()
    };
    let (mut net, nodes) = network(12, faults, 2, 1 << 21);
    let (a, b) = (&nodes[0], &nodes[1]);
    // A timeout (16.8 ms) well above the 2 ms round trip.
    let (qa, qb) = connect(
        &mut net,
        a,
        b,
        &ConnParams {
            timeout: 12,
            ..rc(7, 7)
        },
    );
    // Round trip is 2 ms: anything A sends before then is unacknowledged.
    let early = count_sent_before(&mut net, a, Duration::from_micros(1990));
    net.engines[b.idx]
        .post_recv(
            qb,
            RecvWr {
                wr_id: 1,
                sg_list: vec![sge(b, 0, 1 << 20)],
            },
        )
        .unwrap();
    let mut wr = SendWr::new(1, SendOpcode::Send);
    wr.sg_list = vec![sge(a, 1 << 20, 1 << 20)];
    net.engines[a.idx].post_send(qa, wr).unwrap();
    net.run(Duration::from_secs(5));
    assert_eq!(completions(&mut net, a)[0].status, WcStatus::Success);
    assert_eq!(early.load(std::sync::atomic::Ordering::Relaxed), 128);
    assert_eq!(net.engines[a.idx].counters().retransmitted_pkts, 0);
}

/// A long READ (1 MiB, 1024 response packets of 1 KiB) is asked for in
/// chunks of half the send window (64 packets), each an ordinary READ request
/// for the next 64 KiB, and never has more responses on the way than the
/// window (128) or more requests outstanding than `rd_atomic`: a receiver is
/// not flooded with the whole READ at once (which overran slow receivers'
/// sockets until the retries ran out).
fn long_read_in_chunks(rd_atomic: u8) -> (Vec<(Duration, u32, u64, u32)>, u64) {
    let faults = Faults {
        delay: Duration::from_millis(1),
        ..Faults::none()
    };
    let (mut net, nodes) = network(13, faults, 2, 1 << 21);
    let (a, b) = (&nodes[0], &nodes[1]);
    let (qa, _qb) = connect(
        &mut net,
        a,
        b,
        &ConnParams {
            timeout: 12,
            rd_atomic,
            ..rc(7, 7)
        },
    );
    let src: Vec<u8> = (0..1u32 << 20).map(|i| (i * 7 + i / 1024) as u8).collect();
    b.mem.write(1 << 20, &src);
    // What each side sends: A's READ requests (time, PSN, va, length) and
    // the number of B's responses before the first round trip is over.
    let requests = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let early = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let (r, e, a_addr, b_addr) = (requests.clone(), early.clone(), a.addr, b.addr);
    net.set_tap(move |at, t| {
        let p = rxe_core::wire::packet::Packet::new_checked(&t.payload[..]).unwrap();
        if t.src == a_addr {
            if let Some(reth) = p.reth() {
                r.lock()
                    .unwrap()
                    .push((at, p.bth().psn().value(), reth.va(), reth.dma_len()));
            }
        } else if t.src == b_addr && at < Duration::from_micros(1990) {
            e.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    });
    let mut wr = SendWr::new(1, SendOpcode::RdmaRead);
    wr.sg_list = vec![sge(a, 0, 1 << 20)];
    wr.remote_addr = IOVA + (1 << 20);
    wr.rkey = b.mr.rkey;
    net.engines[a.idx].post_send(qa, wr).unwrap();
    net.run(Duration::from_secs(5));
    let c = completions(&mut net, a);
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].status, WcStatus::Success);
    assert_eq!(c[0].byte_len, 1 << 20);
    assert!(
        a.mem.snapshot()[..1 << 20] == src[..],
        "the READ's bytes differ"
    );
    assert_eq!(net.engines[a.idx].counters().retransmitted_pkts, 0);
    let v = requests.lock().unwrap().clone();
    (v, early.load(std::sync::atomic::Ordering::Relaxed))
}

#[test]
fn long_read_is_asked_for_in_chunks_within_the_window() {
    let (requests, early) = long_read_in_chunks(8);
    assert_eq!(requests.len(), 16, "{requests:?}");
    for (k, &(_, psn, va, len)) in requests.iter().enumerate() {
        let k = k as u64;
        assert_eq!(va, IOVA + (1 << 20) + k * 65536, "request {k}");
        assert_eq!(len, 65536, "request {k}");
        assert_eq!(u64::from(psn), (100 + k * 64) & 0xff_ffff, "request {k}");
    }
    // Two chunks (the window) at once, then one per chunk received.
    assert_eq!(requests.iter().filter(|r| r.0.is_zero()).count(), 2);
    assert_eq!(early, 128, "B's responses in the first round trip");
}

#[test]
fn long_read_with_one_responder_resource_asks_for_one_chunk_at_a_time() {
    let (requests, early) = long_read_in_chunks(1);
    assert_eq!(requests.len(), 16, "{requests:?}");
    assert_eq!(early, 64, "B's responses in the first round trip");
    // Each request waits for the previous chunk's last response.
    for w in requests.windows(2) {
        assert!(w[1].0 >= w[0].0 + Duration::from_millis(2), "{w:?}");
    }
}

/// Bytes each QP of a budget test writes: 64 packets of 1 KiB.
const BUDGET_LEN: u32 = 64 << 10;

/// Two nodes 1 ms apart with `qps` RC QPs between them, A's device limited
/// to `max_in_flight` packets in flight; A's region holds every QP's source
/// bytes, then room for as many at B.
fn budget_network(
    seed: u64,
    qps: usize,
    max_in_flight: u32,
) -> (rxe_net::sim::SimNet, Vec<Node>, Vec<(u32, u32)>) {
    let faults = Faults {
        delay: Duration::from_millis(1),
        ..Faults::none()
    };
    let (mut net, nodes) = network(seed, faults, 2, 2 * qps * BUDGET_LEN as usize);
    let (a, b) = (&nodes[0], &nodes[1]);
    net.engines[a.idx].set_max_in_flight(max_in_flight);
    let p = ConnParams {
        timeout: 12,
        ..rc(7, 7)
    };
    let pairs = (0..qps).map(|_| connect(&mut net, a, b, &p)).collect();
    (net, nodes, pairs)
}

/// Posts one WRITE of `BUDGET_LEN` bytes on each QP: QP `i` writes A's
/// `i`-th slice to B's `i`-th slice past all the sources.
fn post_budget_writes(net: &mut rxe_net::sim::SimNet, a: &Node, b: &Node, qps: &[(u32, u32)]) {
    let len = u64::from(BUDGET_LEN);
    for (i, &(qa, _)) in qps.iter().enumerate() {
        let off = i as u64 * len;
        let mut wr = SendWr::new(i as u64, SendOpcode::RdmaWrite);
        wr.sg_list = vec![sge(a, off, BUDGET_LEN)];
        wr.remote_addr = IOVA + qps.len() as u64 * len + off;
        wr.rkey = b.mr.rkey;
        net.engines[a.idx].post_send(qa, wr).unwrap();
    }
}

/// Many QPs sharing a full budget of packets in flight do not ask for an
/// ACK on every packet: one in each QP's turn (a burst of 16) and one at
/// each message's end is enough, since ACKs are cumulative. (Asking on every
/// packet once the budget was half full made the responder send 2.5 times
/// the ACKs of one QP moving the same bytes.) Every WRITE still completes
/// without a retransmission or a timeout.
#[test]
fn a_full_budget_does_not_make_every_packet_ask_for_an_ack() {
    const QPS: usize = 32;
    let (mut net, nodes, qps) = budget_network(14, QPS, 128);
    let (a, b) = (&nodes[0], &nodes[1]);
    let (sent, asked) = (
        std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0)),
        std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0)),
    );
    let (s, k, addr) = (sent.clone(), asked.clone(), a.addr);
    net.set_tap(move |_, t| {
        if t.src == addr {
            let p = rxe_core::wire::packet::Packet::new_checked(&t.payload[..]).unwrap();
            s.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if p.bth().ack_req() {
                k.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
    });
    post_budget_writes(&mut net, a, b, &qps);
    net.run(Duration::from_secs(5));
    let c = completions(&mut net, a);
    assert_eq!(c.len(), QPS, "{c:?}");
    assert!(c.iter().all(|w| w.status == WcStatus::Success), "{c:?}");
    assert_eq!(net.engines[a.idx].counters().retransmitted_pkts, 0);
    assert_eq!(net.engines[a.idx].counters().retry_timeouts, 0);
    let (sent, asked) = (
        sent.load(std::sync::atomic::Ordering::Relaxed),
        asked.load(std::sync::atomic::Ordering::Relaxed),
    );
    assert_eq!(sent, QPS as u64 * 64);
    // 64 packets a QP: 4 turns of 16, the last ending the message too.
    assert!(
        asked <= QPS as u64 * 5,
        "{asked} of {sent} packets asked for an ACK"
    );
    assert!(
        asked >= QPS as u64 * 4,
        "{asked} of {sent} packets asked for an ACK"
    );
}

/// The device's budget of packets in flight holds over all its QPs: eight
/// QPs, each free to have 128 packets unacknowledged, together put no more
/// than `max_in_flight` (64) on the wire before the first ACK can be back,
/// and every WRITE still completes byte-exact without a retransmission
/// (no QP is left with packets nobody acknowledges).
#[test]
fn many_qps_share_the_devices_budget_of_packets_in_flight() {
    const QPS: usize = 8;
    let (mut net, nodes, qps) = budget_network(13, QPS, 64);
    let (a, b) = (&nodes[0], &nodes[1]);
    let data: Vec<u8> = (0..QPS * BUDGET_LEN as usize)
        .map(|i| (i * 31 / 7) as u8)
        .collect();
    a.mem.write(0, &data);
    // Round trip is 2 ms: anything A sends before then is unacknowledged.
    let early = count_sent_before(&mut net, a, Duration::from_micros(1990));
    post_budget_writes(&mut net, a, b, &qps);
    net.run(Duration::from_secs(5));
    let c = completions(&mut net, a);
    assert_eq!(c.len(), QPS, "{c:?}");
    assert!(c.iter().all(|w| w.status == WcStatus::Success), "{c:?}");
    assert_eq!(early.load(std::sync::atomic::Ordering::Relaxed), 64);
    assert_eq!(net.engines[a.idx].counters().retransmitted_pkts, 0);
    assert_eq!(net.engines[a.idx].counters().retry_timeouts, 0);
    let total = QPS * BUDGET_LEN as usize;
    assert_eq!(&b.mem.snapshot()[total..2 * total], &data[..]);
}

/// A FLUSH of `len` bytes at B's offset `dst`, through region `rkey`.
fn flush_wr(id: u64, rkey: u32, dst: u64, len: u32, placement: u8, whole: bool) -> SendWr {
    let mut wr = SendWr::new(id, SendOpcode::Flush);
    wr.remote_addr = IOVA + dst;
    wr.rkey = rkey;
    wr.flush = FlushParams {
        len,
        placement,
        whole_region: whole,
    };
    wr
}

/// Gives B's QP `qb` the QP rights of `bring_up` plus `extra`, and B a
/// second region over the same bytes with the usual rights plus `mr_extra`;
/// returns that region's rkey.
fn flush_rights(
    net: &mut rxe_net::sim::SimNet,
    b: &Node,
    qb: u32,
    extra: Access,
    mr_extra: Access,
) -> u32 {
    let e = &mut net.engines[b.idx];
    let qp = QpAttr {
        access: Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | extra,
        ..QpAttr::default()
    };
    e.modify_qp(qb, &qp, QpAttrMask::ACCESS_FLAGS).unwrap();
    let mr = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | mr_extra;
    e.reg_mr(b.pd, b.mem.clone(), IOVA, mr).unwrap().rkey
}

/// RDMA FLUSH, as the kernel's rxe has it since 6.2: one RC_FLUSH packet
/// (FETH with the placement type and selectivity level, RETH with the
/// range, AckReq, no payload), answered by an RDMA READ response only
/// without payload at the same PSN, and completed as `Flush` with the
/// length asked for. A whole-region FLUSH ignores the range (here one far
/// outside the region); a 0-byte one still has its key checked.
#[test]
fn flush_is_one_packet_answered_by_an_empty_read_response() {
    let (mut net, nodes) = network(26, Faults::none(), 2, 4096);
    let (a, b) = (&nodes[0], &nodes[1]);
    let (qa, qb) = connect(&mut net, a, b, &rc(7, 7));
    let rkey = flush_rights(&mut net, b, qb, Access::FLUSH_GLOBAL, Access::FLUSH_GLOBAL);
    let sent = record_sent(&mut net, a);
    net.engines[a.idx]
        .post_send(qa, flush_wr(1, rkey, 512, 1024, 1, false))
        .unwrap();
    net.run(Duration::from_secs(1));
    let c = completions(&mut net, a);
    assert_eq!(c.len(), 1, "{c:?}");
    assert_eq!(c[0].status, WcStatus::Success);
    assert_eq!(c[0].opcode, WcOpcode::Flush);
    assert_eq!(c[0].byte_len, 1024);
    let packets: Vec<(bool, u8)> = sent.lock().unwrap().iter().map(|p| (p.1, p.3)).collect();
    assert_eq!(
        packets,
        vec![
            (true, rxe_core::wire::Opcode::RC_FLUSH.0),
            (false, rxe_core::wire::Opcode::RC_RDMA_READ_RESPONSE_ONLY.0)
        ]
    );

    // The whole region, whatever the range; and 0 bytes.
    net.engines[a.idx]
        .post_send(qa, flush_wr(2, rkey, 1 << 40, 1 << 20, 1, true))
        .unwrap();
    net.engines[a.idx]
        .post_send(qa, flush_wr(3, rkey, 0, 0, 1, false))
        .unwrap();
    net.run(Duration::from_secs(1));
    let c = completions(&mut net, a);
    assert_eq!(c.len(), 2, "{c:?}");
    assert!(c.iter().all(|c| c.status == WcStatus::Success), "{c:?}");
    assert_eq!((c[0].wr_id, c[0].byte_len), (2, 1 << 20));
    assert_eq!((c[1].wr_id, c[1].byte_len), (3, 0));

    // 0 bytes through a key that is not there: a remote access error.
    net.engines[a.idx]
        .post_send(qa, flush_wr(4, rkey ^ 0x100, 0, 0, 1, false))
        .unwrap();
    net.run(Duration::from_secs(1));
    let c = completions(&mut net, a);
    assert_eq!(c[0].status, WcStatus::RemAccessErr, "{c:?}");
}

/// The responder's checks, in the kernel's order: the QP's own rights for
/// each placement type asked for come first (else *invalid request*), then
/// the region's key, rights and range (else *remote access error*).
#[test]
fn flush_needs_the_qp_rights_then_the_regions() {
    // (QP rights, region rights, placement, whole, offset, len, status)
    let g = Access::FLUSH_GLOBAL;
    let none = Access::empty();
    let cases = [
        (none, g, 1, false, 0, 64, WcStatus::RemInvReqErr),
        (g, g, 2, false, 0, 64, WcStatus::RemInvReqErr),
        (g, g, 3, false, 0, 64, WcStatus::RemInvReqErr),
        (g, none, 1, false, 0, 64, WcStatus::RemAccessErr),
        (g, none, 1, true, 0, 64, WcStatus::RemAccessErr),
        (g, g, 1, false, 4000, 200, WcStatus::RemAccessErr),
        (g, g, 1, false, 0, 4096, WcStatus::Success),
    ];
    for (i, &(qp, mr, placement, whole, off, len, want)) in cases.iter().enumerate() {
        let (mut net, nodes) = network(40 + i as u64, Faults::none(), 2, 4096);
        let (a, b) = (&nodes[0], &nodes[1]);
        let (qa, qb) = connect(&mut net, a, b, &rc(7, 7));
        let rkey = flush_rights(&mut net, b, qb, qp, mr);
        net.engines[a.idx]
            .post_send(qa, flush_wr(1, rkey, off, len, placement, whole))
            .unwrap();
        net.run(Duration::from_secs(1));
        let c = completions(&mut net, a);
        assert_eq!(c.len(), 1, "case {i}: {c:?}");
        assert_eq!(c[0].status, want, "case {i}");
    }
}

/// A FLUSH whose answer is lost is sent again and answered again (it
/// changes nothing, so no responder resource is kept for it); a region
/// asking for the persistence right is refused, since no memory here is
/// persistent (the kernel's rxe refuses it on memory that is not).
#[test]
fn a_lost_flush_answer_is_answered_again_and_persistence_is_refused() {
    let (mut net, nodes) = network(27, Faults::none(), 2, 4096);
    let (a, b) = (&nodes[0], &nodes[1]);
    let (qa, qb) = connect(&mut net, a, b, &rc(7, 7));
    let rkey = flush_rights(&mut net, b, qb, Access::FLUSH_GLOBAL, Access::FLUSH_GLOBAL);
    net.engines[a.idx]
        .post_send(qa, flush_wr(1, rkey, 0, 64, 1, false))
        .unwrap();
    net.flush();
    net.faults.loss = 1.0;
    net.run_until(Duration::from_secs(1), |n| {
        n.engines[b.idx].counters().rcvd_pkts >= 1
    });
    net.flush();
    net.faults.loss = 0.0;
    net.run(Duration::from_secs(1));
    let c = completions(&mut net, a);
    assert_eq!(c.len(), 1, "{c:?}");
    assert_eq!(
        (c[0].status, c[0].opcode),
        (WcStatus::Success, WcOpcode::Flush)
    );
    assert_eq!(net.engines[b.idx].counters().duplicate_request, 1);

    let access = Access::LOCAL_WRITE | Access::FLUSH_PERSISTENT;
    assert!(net.engines[b.idx]
        .reg_mr(b.pd, b.mem.clone(), IOVA, access)
        .is_err());
}

/// The default ACK timeout (timeout 14: 67 ms) and an RTT sample taken by
/// a first WRITE, so that the tail loss probe is armed.
fn probed_pair(seed: u64) -> (rxe_net::sim::SimNet, Vec<Node>, u32) {
    let (mut net, nodes) = network(seed, Faults::none(), 2, 1 << 20);
    let p = ConnParams {
        timeout: 14,
        ..ConnParams::default()
    };
    let (qa, _qb) = connect(&mut net, &nodes[0], &nodes[1], &p);
    let (a, b) = (&nodes[0], &nodes[1]);
    net.engines[a.idx]
        .post_send(qa, write_wr(100, a, b, 64, 0))
        .unwrap();
    net.run(Duration::from_millis(10));
    assert_eq!(completions(&mut net, a).len(), 1);
    (net, nodes, qa)
}

/// A rule that gives the first `n` packets from `from` with opcode `op`
/// the fate `fate`.
fn first_ones(
    net: &mut rxe_net::sim::SimNet,
    from: std::net::IpAddr,
    op: rxe_core::wire::Opcode,
    n: usize,
    fate: Fate,
) {
    let mut left = n;
    net.set_rule(move |t| {
        if left > 0 && t.src == from && t.payload[0] == op.0 {
            left -= 1;
            fate
        } else {
            Fate::Pass
        }
    });
}

/// A lost last packet of a message (nothing follows it, so no sequence
/// NAK can tell) costs one probe timeout, the 10 ms floor here, not the
/// 67 ms transport timer: the requester sends its last packet again
/// alone, the responder takes it, the WRITE completes byte for byte, and
/// no retry is used.
#[test]
fn a_lost_tail_is_recovered_by_a_probe_not_the_transport_timer() {
    let (mut net, nodes, qa) = probed_pair(60);
    let (a, b) = (&nodes[0], &nodes[1]);
    let data: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
    a.mem.write(0, &data);
    first_ones(&mut net, a.addr, Opcode::RC_RDMA_WRITE_LAST, 1, Fate::Lose);
    let t0 = net.elapsed();
    net.engines[a.idx]
        .post_send(qa, write_wr(1, a, b, 4096, 8192))
        .unwrap();
    assert!(net.run_until(Duration::from_millis(200), |n| !completions_empty(n, a)));
    let done = net.elapsed() - t0;
    let c = completions(&mut net, a);
    assert_eq!(c.len(), 1, "{c:?}");
    assert_eq!(c[0].status, WcStatus::Success);
    assert!(done < Duration::from_millis(11), "took {done:?}");
    assert_eq!(&b.mem.snapshot()[8192..8192 + 4096], &data[..]);
    let ca = net.engines[a.idx].counters();
    assert_eq!((ca.tail_probes, ca.retry_timeouts), (1, 0));
    assert_eq!(ca.retransmitted_pkts, 1, "only the last packet went again");
}

fn completions_empty(net: &mut rxe_net::sim::SimNet, n: &Node) -> bool {
    net.engines[n.idx].cq_len(n.cq).unwrap_or(0) == 0
}

/// A lost ACK: the probe is a duplicate to the responder, which answers
/// it, and that answer completes the WRITE; still no retry.
#[test]
fn a_lost_ack_is_recovered_by_the_probes_answer() {
    let (mut net, nodes, qa) = probed_pair(61);
    let (a, b) = (&nodes[0], &nodes[1]);
    first_ones(&mut net, b.addr, Opcode::RC_ACKNOWLEDGE, 1, Fate::Lose);
    let t0 = net.elapsed();
    net.engines[a.idx]
        .post_send(qa, write_wr(1, a, b, 2048, 0))
        .unwrap();
    assert!(net.run_until(Duration::from_millis(200), |n| !completions_empty(n, a)));
    let done = net.elapsed() - t0;
    assert!(done < Duration::from_millis(11), "took {done:?}");
    assert_eq!(completions(&mut net, a)[0].status, WcStatus::Success);
    let (ca, cb) = (net.engines[a.idx].counters(), net.engines[b.idx].counters());
    assert_eq!((ca.tail_probes, ca.retry_timeouts), (1, 0));
    assert_eq!(cb.duplicate_request, 1);
}

/// A lost probe is followed by another, twice as late (10 ms, then 20 ms
/// more); when every probe before the transport timer is lost too (two:
/// 10 and 30 ms after the send, the next would leave the 67 ms timer less
/// than its own timeout), the timer recovers as before, with one timeout
/// and one retry.
#[test]
fn lost_probes_back_off_and_leave_the_rest_to_the_transport_timer() {
    // (copies lost, probes, timeouts, done after at least, at most)
    let ms = Duration::from_millis;
    for (lost, probes, timeouts, from, to) in [(2, 2, 0, ms(30), ms(31)), (3, 2, 1, ms(67), ms(70))]
    {
        let (mut net, nodes, qa) = probed_pair(62);
        let (a, b) = (&nodes[0], &nodes[1]);
        first_ones(
            &mut net,
            a.addr,
            Opcode::RC_RDMA_WRITE_ONLY,
            lost,
            Fate::Lose,
        );
        let t0 = net.elapsed();
        net.engines[a.idx]
            .post_send(qa, write_wr(1, a, b, 512, 0))
            .unwrap();
        assert!(net.run_until(ms(500), |n| !completions_empty(n, a)));
        let done = net.elapsed() - t0;
        assert!(done >= from && done <= to, "{lost} lost: took {done:?}");
        assert_eq!(completions(&mut net, a)[0].status, WcStatus::Success);
        let ca = net.engines[a.idx].counters();
        assert_eq!(
            (ca.tail_probes, ca.retry_timeouts),
            (probes, timeouts),
            "{lost} lost"
        );
    }
}

/// A last packet that is only late starts no go-back: late by less than
/// the probe timeout, nothing is sent again; late by more, the probe goes
/// and is answered (the responder takes it as the new packet it is), and
/// the late original is then a duplicate. Neither asks for a sequence NAK.
#[test]
fn a_late_tail_starts_no_go_back() {
    for (late_us, probes) in [(5000u64, 0u64), (15000, 1)] {
        let (mut net, nodes, qa) = probed_pair(63);
        let (a, b) = (&nodes[0], &nodes[1]);
        let late = Fate::Delay(Duration::from_micros(late_us));
        first_ones(&mut net, a.addr, Opcode::RC_RDMA_WRITE_LAST, 1, late);
        net.engines[a.idx]
            .post_send(qa, write_wr(1, a, b, 4096, 0))
            .unwrap();
        net.run(Duration::from_millis(100));
        let c = completions(&mut net, a);
        assert_eq!(c.len(), 1, "{c:?}");
        assert_eq!(c[0].status, WcStatus::Success);
        let (ca, cb) = (net.engines[a.idx].counters(), net.engines[b.idx].counters());
        let why = format!("late by {late_us} µs");
        assert_eq!(ca.tail_probes, probes, "{why}");
        assert_eq!(ca.retransmitted_pkts, probes, "{why}");
        assert_eq!(
            (ca.rcvd_seq_err, cb.send_seq_err, ca.retry_timeouts),
            (0, 0, 0),
            "{why}"
        );
        assert_eq!(cb.duplicate_request, probes, "{why}");
    }
}

/// A READ whose responses all come late, after the first ten (a
/// responder descheduled mid-READ, say), by more than the probe timeout:
/// no tail probe goes (it could only ask for the READ's data again, a
/// chunk of responses each time), the late responses come, and the READ
/// completes byte for byte without the transport timer.
#[test]
fn a_read_whose_responses_are_late_is_not_probed() {
    let (mut net, nodes, qa) = probed_pair(64);
    let (a, b) = (&nodes[0], &nodes[1]);
    let (mut k, from) = (0, b.addr);
    net.set_rule(move |t| {
        let response = Opcode::RC_RDMA_READ_RESPONSE_FIRST.0..=Opcode::RC_RDMA_READ_RESPONSE_ONLY.0;
        if t.src == from && response.contains(&t.payload[0]) {
            k += 1;
            if k >= 10 {
                return Fate::Delay(Duration::from_millis(3));
            }
        }
        Fate::Pass
    });
    let mut wr = SendWr::new(1, SendOpcode::RdmaRead);
    // More chunks than the QP has READs in flight (rd_atomic 8).
    let len = 1 << 20;
    b.mem
        .write(0, &(0..len).map(|i| (i * 7 / 3) as u8).collect::<Vec<_>>());
    wr.sg_list = vec![sge(a, 0, len as u32)];
    wr.remote_addr = IOVA;
    wr.rkey = b.mr.rkey;
    net.engines[a.idx].post_send(qa, wr).unwrap();
    net.run(Duration::from_millis(500));
    let c = completions(&mut net, a);
    assert_eq!(c.len(), 1, "{c:?}");
    assert_eq!(c[0].status, WcStatus::Success);
    assert_eq!(a.mem.snapshot(), b.mem.snapshot());
    let ca = net.engines[a.idx].counters();
    assert_eq!((ca.tail_probes, ca.retry_timeouts), (0, 0));
}
