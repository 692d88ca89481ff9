//! Random workloads under random faults.
//!
//! Each case is derived from one `u64` seed: the number of QP pairs, the path
//! MTU, the first PSNs (near the 2^24 wrap), the fault rates (up to 20% loss,
//! plus duplication, reordering and corruption) and a mixed list of SENDs,
//! WRITEs, READs and atomics with sizes from 0 to 1 MiB. The oracle:
//!
//! * the requester's completions come in posting order; successes first, and
//!   if the QP gave up (retry exceeded), one error and flushes after it;
//! * every successful SEND was received exactly once, in order, byte-exact,
//!   with its immediate data; every successful WRITE and READ moved exactly
//!   the right bytes;
//! * every successful atomic returned the value before it and took effect
//!   exactly once (fetch-and-adds of distinct powers of two on one counter
//!   sum up exactly; a compare-and-swap returns the old value);
//! * with at most 5% loss nothing may fail at all.
//!
//! A failing case prints its seed; `RXE_SIM_SEED=<seed> cargo test -p
//! rxe-tests --test engine_props replay` runs that one case again.

use proptest::prelude::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rxe_core::engine::RegionMemory;
use rxe_core::psn::Psn;
use rxe_core::types::*;
use rxe_net::sim::{Faults, SimNet};
use rxe_tests::sim::*;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Send,
    SendImm,
    Write,
    WriteImm,
    Read,
    CmpSwap,
    FetchAdd,
}

#[derive(Debug, Clone)]
struct Op {
    kind: Kind,
    len: u32,
    /// Offset of the source bytes (A for sends/writes, B for reads).
    src: u64,
    /// Offset of the destination (B for sends/writes, A for reads and atomic results).
    dst: u64,
    imm: u32,
    /// Atomics: the addend or swap value.
    value: u64,
}

#[derive(Debug)]
struct Case {
    mtu: Mtu,
    faults: Faults,
    window: u32,
    psn_a: Psn,
    psn_b: Psn,
    /// Per QP pair: its ops and the offset of its 8-byte counter in B.
    qps: Vec<(Vec<Op>, u64)>,
    region: usize,
}

fn size(rng: &mut SmallRng, big_left: &mut u32) -> u32 {
    match rng.gen_range(0..100) {
        0..=29 => rng.gen_range(0..=64),
        30..=89 => rng.gen_range(0..=3 * 4096),
        _ if *big_left > 0 => {
            *big_left -= 1;
            rng.gen_range(64 * 1024..=1 << 20)
        }
        _ => rng.gen_range(4096..=64 * 1024),
    }
}

fn make_case(seed: u64) -> Case {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mtu = [
        Mtu::Mtu256,
        Mtu::Mtu512,
        Mtu::Mtu1024,
        Mtu::Mtu2048,
        Mtu::Mtu4096,
    ][rng.gen_range(0..5)];
    let loss = match rng.gen_range(0..4) {
        0 => 0.0,
        1 => rng.gen_range(0.0..0.05),
        _ => rng.gen_range(0.0..0.20),
    };
    let faults = Faults {
        loss,
        duplicate: rng.gen_range(0.0..0.05),
        reorder: rng.gen_range(0.0..0.05),
        corrupt: rng.gen_range(0.0..0.02),
        delay: Duration::from_micros(rng.gen_range(1..50)),
        jitter: Duration::from_micros(rng.gen_range(0..5)),
        reorder_window: Duration::from_micros(rng.gen_range(1..200)),
    };
    // One 1 MiB-class message per case at most, none with small MTUs under heavy loss
    // (go-back-N would need hundreds of thousands of packets).
    let mut big_left = u32::from(mtu >= Mtu::Mtu1024 || loss < 0.05);
    let mut off = 0u64;
    let mut alloc = |len: u64| {
        let o = off;
        off += len.div_ceil(64) * 64 + 64;
        o
    };
    let nqps = rng.gen_range(1..=3);
    let mut qps = Vec::new();
    for _ in 0..nqps {
        let counter = alloc(8);
        let mut ops = Vec::new();
        for _ in 0..rng.gen_range(1..=8) {
            let kind = match rng.gen_range(0..14) {
                0..=2 => Kind::Send,
                3 => Kind::SendImm,
                4..=6 => Kind::Write,
                7 => Kind::WriteImm,
                8..=10 => Kind::Read,
                11 => Kind::CmpSwap,
                _ => Kind::FetchAdd,
            };
            let len = match kind {
                Kind::CmpSwap | Kind::FetchAdd => 8,
                _ => size(&mut rng, &mut big_left),
            };
            let src = alloc(u64::from(len));
            let dst = alloc(u64::from(len));
            ops.push(Op {
                kind,
                len,
                src,
                dst,
                imm: rng.gen(),
                value: 0,
            });
        }
        // Distinct powers of two for the fetch-and-adds, so the counter tells how often each ran.
        for (bit, op) in ops
            .iter_mut()
            .filter(|o| o.kind == Kind::FetchAdd)
            .enumerate()
        {
            op.value = 1 << bit;
        }
        for op in ops.iter_mut().filter(|o| o.kind == Kind::CmpSwap) {
            op.value = rng.gen();
        }
        qps.push((ops, counter));
    }
    let near_wrap = |rng: &mut SmallRng| Psn::new(0xff_ffff - rng.gen_range(0..64));
    Case {
        mtu,
        faults,
        window: [16, 64, 256][rng.gen_range(0..3)],
        psn_a: near_wrap(&mut rng),
        psn_b: near_wrap(&mut rng),
        qps,
        region: off as usize + 64,
    }
}

fn run_case(seed: u64) -> Result<(), String> {
    let case = make_case(seed);
    let (mut net, nodes) = network(seed, case.faults, 2, case.region);
    for e in &mut net.engines {
        e.set_max_unacked_psns(case.window);
    }
    let (a, b) = (&nodes[0], &nodes[1]);
    let mut fill = SmallRng::seed_from_u64(seed ^ 0xa5a5);
    let mut pattern = vec![0u8; case.region];
    fill.fill(&mut pattern[..]);
    a.mem.write(0, &pattern);
    fill.fill(&mut pattern[..]);
    b.mem.write(0, &pattern);
    let a0 = a.mem.snapshot();
    let b0 = b.mem.snapshot();
    let p = ConnParams {
        mtu: case.mtu,
        psn_a: case.psn_a,
        psn_b: case.psn_b,
        timeout: 8,
        retry_cnt: 7,
        rnr_retry: 7,
        depth: 64,
        ..ConnParams::default()
    };
    let mut pairs = Vec::new();
    for (ops, counter) in &case.qps {
        let (qa, qb) = connect(&mut net, a, b, &p);
        // Receives first (one per SEND and WRITE with immediate), then the sends.
        for (i, op) in ops.iter().enumerate() {
            if matches!(op.kind, Kind::Send | Kind::SendImm | Kind::WriteImm) {
                let sg = if op.kind == Kind::WriteImm {
                    vec![]
                } else {
                    vec![sge(b, op.dst, op.len)]
                };
                net.engines[b.idx]
                    .post_recv(
                        qb,
                        RecvWr {
                            wr_id: i as u64,
                            sg_list: sg,
                        },
                    )
                    .unwrap();
            }
        }
        for (i, op) in ops.iter().enumerate() {
            let mut wr = SendWr::new(i as u64, SendOpcode::Send);
            match op.kind {
                Kind::Send | Kind::SendImm => {
                    wr.opcode = if op.kind == Kind::Send {
                        SendOpcode::Send
                    } else {
                        SendOpcode::SendWithImm
                    };
                    wr.sg_list = vec![sge(a, op.src, op.len)];
                }
                Kind::Write | Kind::WriteImm => {
                    wr.opcode = if op.kind == Kind::Write {
                        SendOpcode::RdmaWrite
                    } else {
                        SendOpcode::RdmaWriteWithImm
                    };
                    wr.sg_list = vec![sge(a, op.src, op.len)];
                    wr.remote_addr = IOVA + op.dst;
                    wr.rkey = b.mr.rkey;
                }
                Kind::Read => {
                    wr.opcode = SendOpcode::RdmaRead;
                    wr.sg_list = vec![sge(a, op.dst, op.len)];
                    wr.remote_addr = IOVA + op.src;
                    wr.rkey = b.mr.rkey;
                }
                Kind::CmpSwap => {
                    wr.opcode = SendOpcode::AtomicCmpSwap;
                    wr.sg_list = vec![sge(a, op.dst, 8)];
                    wr.remote_addr = IOVA + op.src;
                    wr.rkey = b.mr.rkey;
                    wr.compare_add = u64::from_ne_bytes(
                        b0[op.src as usize..op.src as usize + 8].try_into().unwrap(),
                    );
                    wr.swap = op.value;
                }
                Kind::FetchAdd => {
                    wr.opcode = SendOpcode::AtomicFetchAdd;
                    wr.sg_list = vec![sge(a, op.dst, 8)];
                    wr.remote_addr = IOVA + counter;
                    wr.rkey = b.mr.rkey;
                    wr.compare_add = op.value;
                }
            }
            wr.imm_data = op.imm;
            net.engines[a.idx].post_send(qa, wr).unwrap();
        }
        pairs.push((qa, qb));
    }
    let total: usize = case.qps.iter().map(|(ops, _)| ops.len()).sum();
    let mut ca = Vec::new();
    let finished = net.run_until(Duration::from_secs(3600), |net: &mut SimNet| {
        net.engines[a.idx]
            .poll_cq(a.cq, usize::MAX, &mut ca)
            .unwrap();
        ca.len() >= total
    });
    // Let the last ACKs and duplicates settle, then collect the receiver's side.
    net.run(Duration::from_secs(1));
    let cb = completions(&mut net, b);
    let info = format!(
        "seed {seed}: {case:?}\nnet: {:?}\nA: {:?}",
        net.stats,
        net.engines[a.idx].counters()
    );
    if !finished {
        return Err(format!("only {} of {total} completions\n{info}", ca.len()));
    }
    let (am, bm) = (a.mem.snapshot(), b.mem.snapshot());
    for ((ops, counter), (qa, qb)) in case.qps.iter().zip(&pairs) {
        let mine: Vec<_> = ca.iter().filter(|c| c.qp_num == *qa).collect();
        let recvs: Vec<_> = cb.iter().filter(|c| c.qp_num == *qb).collect();
        let ids: Vec<u64> = mine.iter().map(|c| c.wr_id).collect();
        if ids != (0..ops.len() as u64).collect::<Vec<_>>() {
            return Err(format!(
                "completions out of order or missing: {ids:?}\n{info}"
            ));
        }
        // Successes, then at most one error, then flushes.
        let ok = mine
            .iter()
            .take_while(|c| c.status == WcStatus::Success)
            .count();
        if ok < ops.len() {
            let st = mine[ok].status;
            if !matches!(st, WcStatus::RetryExcErr | WcStatus::RnrRetryExcErr) {
                return Err(format!("op {ok} failed with {st}\n{info}"));
            }
            if mine[ok + 1..]
                .iter()
                .any(|c| c.status != WcStatus::WrFlushErr)
            {
                return Err(format!(
                    "completions after the error are not flushes: {mine:?}\n{info}"
                ));
            }
            if case.faults.loss <= 0.05 && case.faults.corrupt <= 0.05 {
                return Err(format!(
                    "gave up ({st}) with only {:.1}% loss\n{info}",
                    case.faults.loss * 100.0
                ));
            }
            eprintln!(
                "seed {seed}: QP gave up ({st}) at {:.1}% loss after {ok} of {} ops",
                case.faults.loss * 100.0,
                ops.len()
            );
        }
        // The receiver saw each message at most once, in order; all of the successful ones.
        let expect_recv: Vec<u64> = ops
            .iter()
            .enumerate()
            .filter(|(_, o)| matches!(o.kind, Kind::Send | Kind::SendImm | Kind::WriteImm))
            .map(|(i, _)| i as u64)
            .collect();
        let got: Vec<u64> = recvs
            .iter()
            .filter(|c| c.status == WcStatus::Success)
            .map(|c| c.wr_id)
            .collect();
        if !expect_recv.starts_with(&got) {
            return Err(format!(
                "receives {got:?} are not a prefix of {expect_recv:?}\n{info}"
            ));
        }
        let mut fetch_sum = 0u64;
        let mut fetch_all_ok = true;
        for (i, op) in ops.iter().enumerate() {
            let success = i < ok;
            let (s, d, l) = (op.src as usize, op.dst as usize, op.len as usize);
            match op.kind {
                Kind::Send | Kind::SendImm | Kind::Write | Kind::WriteImm if success => {
                    if bm[d..d + l] != a0[s..s + l] {
                        return Err(format!(
                            "op {i} ({:?}, {l} bytes): data differs\n{info}",
                            op.kind
                        ));
                    }
                    if op.kind != Kind::Write {
                        let r = recvs.iter().find(|c| c.wr_id == i as u64);
                        let Some(r) = r else {
                            return Err(format!("op {i}: no receive completion\n{info}"));
                        };
                        let imm =
                            matches!(op.kind, Kind::SendImm | Kind::WriteImm).then_some(op.imm);
                        if r.status != WcStatus::Success
                            || r.byte_len != op.len
                            || r.imm_data != imm
                        {
                            return Err(format!("op {i}: receive completion {r:?}\n{info}"));
                        }
                    }
                }
                Kind::Read if success && am[d..d + l] != b0[s..s + l] => {
                    return Err(format!("op {i} (READ, {l} bytes): data differs\n{info}"));
                }
                Kind::CmpSwap if success => {
                    let orig = u64::from_ne_bytes(am[d..d + 8].try_into().unwrap());
                    let before = u64::from_ne_bytes(b0[s..s + 8].try_into().unwrap());
                    let after = u64::from_ne_bytes(bm[s..s + 8].try_into().unwrap());
                    if orig != before || after != op.value {
                        return Err(format!(
                            "op {i}: compare-and-swap returned {orig:#x}, left {after:#x}\n{info}"
                        ));
                    }
                }
                Kind::FetchAdd => {
                    let c = *counter as usize;
                    let start = u64::from_ne_bytes(b0[c..c + 8].try_into().unwrap());
                    if success {
                        let orig = u64::from_ne_bytes(am[d..d + 8].try_into().unwrap());
                        if orig != start.wrapping_add(fetch_sum) {
                            return Err(format!(
                                "op {i}: fetch-and-add returned {orig:#x}, want {:#x}\n{info}",
                                start.wrapping_add(fetch_sum)
                            ));
                        }
                        fetch_sum += op.value;
                    } else {
                        fetch_all_ok = false;
                    }
                }
                _ => {}
            }
        }
        let c = *counter as usize;
        let start = u64::from_ne_bytes(b0[c..c + 8].try_into().unwrap());
        let end = u64::from_ne_bytes(bm[c..c + 8].try_into().unwrap());
        let applied = end.wrapping_sub(start);
        // Each add is a distinct bit: a second execution would carry into another bit.
        if fetch_all_ok && applied != fetch_sum {
            return Err(format!(
                "counter moved by {applied:#x}, the adds sum to {fetch_sum:#x}\n{info}"
            ));
        }
        if !fetch_all_ok && applied & fetch_sum != fetch_sum {
            return Err(format!(
                "counter moved by {applied:#x}, missing completed adds {fetch_sum:#x}\n{info}"
            ));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_workloads_under_faults(seed in any::<u64>()) {
        if let Err(e) = run_case(seed) {
            prop_assert!(false, "{}", e);
        }
    }
}

/// Replays one case: `RXE_SIM_SEED=<seed>`.
#[test]
fn replay() {
    if let Ok(s) = std::env::var("RXE_SIM_SEED") {
        let seed: u64 = s.parse().expect("RXE_SIM_SEED must be a u64");
        if let Err(e) = run_case(seed) {
            panic!("{e}");
        }
    }
}

/// A few fixed seeds, so that every run covers the same ground too.
#[test]
fn fixed_seeds() {
    for seed in 0..16 {
        if let Err(e) = run_case(seed) {
            panic!("{e}");
        }
    }
}
