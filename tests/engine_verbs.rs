//! Verbs-level features of the protocol engine over the simulated network:
//! memory windows, shared receive queues, send flags (signaling, inline,
//! solicited events, fences, the READ/atomic depth), UD specifics, argument
//! checking and error states, counters, and edge cases (zero-length
//! messages, scatter/gather lists, the PSN wrap).
//!
//! Each test states in its name what it proves. Packet-level assertions use
//! the network tap; the exact loss scenarios drive the engines by hand
//! (`pull`/`push` below) so that exactly the chosen packet goes missing.

use rxe_core::engine::mem::{key_index, key_variant, MwType};
use rxe_core::engine::state::ModifyError;
use rxe_core::engine::{
    AsyncEvent, CqId, DropReason, EngineError, IcrcStatus, MrKeys, QpInit, RecvMeta, RegionMemory,
    SrqId, Transmit, VecMemory,
};
use rxe_core::psn::Psn;
use rxe_core::types::*;
use rxe_core::wire::Opcode;
use rxe_net::sim::{Faults, SimNet};
use rxe_tests::sim::*;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// Plenty of virtual time for anything these tests do.
const LIMIT: Duration = Duration::from_secs(2);

fn run(net: &mut SimNet) {
    net.run(LIMIT);
}

fn post_recv(net: &mut SimNet, n: &Node, qpn: u32, wr_id: u64, sg_list: Vec<Sge>) {
    net.engines[n.idx]
        .post_recv(qpn, RecvWr { wr_id, sg_list })
        .unwrap();
}

fn send(id: u64, sg_list: Vec<Sge>) -> SendWr {
    let mut wr = SendWr::new(id, SendOpcode::Send);
    wr.sg_list = sg_list;
    wr
}

fn write(id: u64, sg_list: Vec<Sge>, remote_addr: u64, rkey: u32) -> SendWr {
    let mut wr = SendWr::new(id, SendOpcode::RdmaWrite);
    wr.sg_list = sg_list;
    wr.remote_addr = remote_addr;
    wr.rkey = rkey;
    wr
}

fn read(id: u64, sg_list: Vec<Sge>, remote_addr: u64, rkey: u32) -> SendWr {
    let mut wr = SendWr::new(id, SendOpcode::RdmaRead);
    wr.sg_list = sg_list;
    wr.remote_addr = remote_addr;
    wr.rkey = rkey;
    wr
}

/// Posts `wr` on `qpn` of node `n`, runs the network, and returns the one
/// completion `n` got.
fn one(net: &mut SimNet, n: &Node, qpn: u32, wr: SendWr) -> Completion {
    net.engines[n.idx].post_send(qpn, wr).unwrap();
    run(net);
    let c = completions(net, n);
    assert_eq!(c.len(), 1, "{c:?}");
    c[0]
}

fn ids_and_statuses(c: &[Completion]) -> Vec<(u64, WcStatus)> {
    c.iter().map(|c| (c.wr_id, c.status)).collect()
}

fn state(net: &SimNet, n: &Node, qpn: u32) -> QpState {
    net.engines[n.idx].query_qp(qpn).unwrap().0.state
}

fn events(net: &mut SimNet, n: &Node) -> Vec<AsyncEvent> {
    std::iter::from_fn(|| net.engines[n.idx].poll_event()).collect()
}

/// A bytes pattern that differs from one test buffer to the next.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Creates a QP with explicit creation attributes (the shared helper always
/// uses the node's CQ, no SRQ and no `sq_sig_all`).
fn create_qp_with(
    net: &mut SimNet,
    n: &Node,
    qp_type: QpType,
    srq: Option<SrqId>,
    sq_sig_all: bool,
    cap: QpCap,
) -> u32 {
    net.engines[n.idx]
        .create_qp(QpInit {
            qp_type,
            pd: n.pd,
            send_cq: n.cq,
            recv_cq: n.cq,
            srq,
            cap,
            sq_sig_all,
        })
        .unwrap()
}

/// Connects two QPs created by the caller.
fn connect_qps(net: &mut SimNet, a: &Node, qa: u32, b: &Node, qb: u32, p: &ConnParams) {
    bring_up(net, a, qa, b.addr, qb, p.psn_b, p.psn_a, p);
    bring_up(net, b, qb, a.addr, qa, p.psn_a, p.psn_b, p);
}

/// Every packet handed to the network, with the virtual time it was sent.
type Log = Arc<Mutex<Vec<(Duration, Transmit)>>>;

fn tap(net: &mut SimNet) -> Log {
    let log: Log = Arc::default();
    let l = log.clone();
    net.set_tap(move |at, t| l.lock().unwrap().push((at, t.clone())));
    log
}

fn logged(log: &Log) -> Vec<(Duration, Transmit)> {
    log.lock().unwrap().clone()
}

fn opcode(t: &Transmit) -> Opcode {
    Opcode(t.payload[0])
}

fn bth_psn(t: &Transmit) -> u32 {
    u32::from_be_bytes([0, t.payload[9], t.payload[10], t.payload[11]])
}

/// BTH byte 1 bit 7: the solicited event bit.
fn solicited(t: &Transmit) -> bool {
    t.payload[1] & 0x80 != 0
}

/// Takes every packet engine `idx` wants to send now, without the network.
fn pull(net: &mut SimNet, idx: usize, now: Instant) -> Vec<Transmit> {
    std::iter::from_fn(|| net.engines[idx].poll_transmit(now)).collect()
}

fn meta(t: &Transmit) -> RecvMeta {
    RecvMeta {
        src: t.src,
        dst: t.dst,
        src_port: t.src_port,
        icrc: IcrcStatus::Ok,
    }
}

/// Hands a packet to the engine that owns its destination, without the network.
fn push(net: &mut SimNet, now: Instant, t: &Transmit) {
    let to = net
        .engines
        .iter()
        .position(|e| e.is_local(t.dst))
        .expect("routable");
    net.engines[to].handle_datagram(now, meta(t), &t.payload);
}

// ---------------------------------------------------------------------------
// 1. Memory windows
// ---------------------------------------------------------------------------

/// Where the windowed region of a node starts.
const WIN_IOVA: u64 = 0x2000_0000;

/// A second region on `n` with local rights and MW_BIND only: a peer can
/// reach it through memory windows alone.
fn window_region(net: &mut SimNet, n: &Node, len: usize) -> (Arc<VecMemory>, MrKeys) {
    let mem = Arc::new(VecMemory::new(len));
    let keys = net.engines[n.idx]
        .reg_mr(
            n.pd,
            mem.clone(),
            WIN_IOVA,
            Access::LOCAL_WRITE | Access::MW_BIND,
        )
        .unwrap();
    (mem, keys)
}

fn mw_bind(
    mw_rkey: u32,
    new_rkey: u32,
    mr: MrKeys,
    addr: u64,
    length: u64,
    access: Access,
) -> MwBind {
    MwBind {
        mw_rkey,
        new_rkey,
        mr_lkey: mr.lkey,
        addr,
        length,
        access,
    }
}

/// The rkey a window gets on its next bind (`ibv_inc_rkey`).
fn inc_rkey(rkey: u32) -> u32 {
    (rkey & !0xff) | (rkey.wrapping_add(1) & 0xff)
}

/// The rkey a type 2 window gets when bound with the key part `variant`.
fn with_variant(rkey: u32, variant: u8) -> u32 {
    (rkey & !0xff) | u32::from(variant)
}

const RW: Access = Access::REMOTE_WRITE.union(Access::REMOTE_READ);

/// Binds type 2 window `mw` through `qpn` of `n` with a BIND_MW work request;
/// returns the completion.
fn post_bind(net: &mut SimNet, n: &Node, qpn: u32, id: u64, bind: MwBind) -> Completion {
    let mut wr = SendWr::new(id, SendOpcode::BindMw);
    wr.bind = Some(bind);
    one(net, n, qpn, wr)
}

#[test]
fn type1_window_grants_its_range_only() {
    let (mut net, nodes) = network(101, Faults::none(), 2, 1 << 16);
    let (a, b) = (&nodes[0], &nodes[1]);
    let p = ConnParams::default();
    let (qa, qb) = connect(&mut net, a, b, &p);
    let (wmem, wmr) = window_region(&mut net, b, 8192);
    let e = &mut net.engines[b.idx];
    let mw = e.alloc_mw(b.pd, MwType::Type1).unwrap();
    let rkey = e
        .bind_mw(
            qb,
            &mw_bind(mw, inc_rkey(mw), wmr, WIN_IOVA + 1024, 1024, RW),
        )
        .unwrap();
    assert_eq!(key_index(rkey), key_index(mw), "same window, new key part");
    assert_ne!(rkey, mw);

    // WRITE inside the window.
    let data = pattern(100, 1);
    a.mem.write(0, &data);
    let c = one(
        &mut net,
        a,
        qa,
        write(1, vec![sge(a, 0, 100)], WIN_IOVA + 1034, rkey),
    );
    assert_eq!(
        (c.status, c.opcode),
        (WcStatus::Success, WcOpcode::RdmaWrite)
    );
    assert_eq!(&wmem.snapshot()[1034..1134], &data[..]);

    // READ the whole window back.
    let back = pattern(1024, 2);
    wmem.write(1024, &back);
    let c = one(
        &mut net,
        a,
        qa,
        read(2, vec![sge(a, 4096, 1024)], WIN_IOVA + 1024, rkey),
    );
    assert_eq!(
        (c.status, c.opcode),
        (WcStatus::Success, WcOpcode::RdmaRead)
    );
    assert_eq!(&a.mem.snapshot()[4096..5120], &back[..]);

    // The window's last byte is inside; one more byte is not.
    let c = one(
        &mut net,
        a,
        qa,
        write(3, vec![sge(a, 0, 1)], WIN_IOVA + 2047, rkey),
    );
    assert_eq!(c.status, WcStatus::Success);
    let before = wmem.snapshot();
    let c = one(
        &mut net,
        a,
        qa,
        write(4, vec![sge(a, 0, 2)], WIN_IOVA + 2047, rkey),
    );
    assert_eq!(c.status, WcStatus::RemAccessErr);
    assert_eq!(wmem.snapshot(), before, "nothing written past the window");
    assert_eq!(state(&net, b, qb), QpState::Err);

    // Below the window's start, on a new connection (a type 1 window serves
    // every QP of its PD).
    let (qa2, _) = connect(&mut net, a, b, &p);
    let c = one(
        &mut net,
        a,
        qa2,
        read(5, vec![sge(a, 0, 8)], WIN_IOVA + 1020, rkey),
    );
    assert_eq!(c.status, WcStatus::RemAccessErr);
    // The region's own rkey grants nothing remote: only the window does.
    let (qa3, _) = connect(&mut net, a, b, &p);
    let c = one(
        &mut net,
        a,
        qa3,
        read(6, vec![sge(a, 0, 8)], WIN_IOVA + 1024, wmr.rkey),
    );
    assert_eq!(c.status, WcStatus::RemAccessErr);
}

#[test]
fn window_rights_limit_what_peers_may_do() {
    let (mut net, nodes) = network(102, Faults::none(), 2, 1 << 16);
    let (a, b) = (&nodes[0], &nodes[1]);
    let p = ConnParams::default();
    let (qa, qb) = connect(&mut net, a, b, &p);
    let (wmem, wmr) = window_region(&mut net, b, 4096);
    let e = &mut net.engines[b.idx];
    let mw = e.alloc_mw(b.pd, MwType::Type1).unwrap();
    let rkey = e
        .bind_mw(
            qb,
            &mw_bind(mw, inc_rkey(mw), wmr, WIN_IOVA, 4096, Access::REMOTE_READ),
        )
        .unwrap();
    wmem.write(0, &[7; 64]);
    let c = one(
        &mut net,
        a,
        qa,
        read(1, vec![sge(a, 0, 64)], WIN_IOVA, rkey),
    );
    assert_eq!(c.status, WcStatus::Success);
    assert_eq!(&a.mem.snapshot()[..64], &[7; 64]);
    let before = wmem.snapshot();
    let c = one(
        &mut net,
        a,
        qa,
        write(2, vec![sge(a, 0, 64)], WIN_IOVA, rkey),
    );
    assert_eq!(c.status, WcStatus::RemAccessErr, "a read-only window");
    assert_eq!(wmem.snapshot(), before);
    // Atomics need REMOTE_ATOMIC, which the window does not grant either.
    let (qa2, _) = connect(&mut net, a, b, &p);
    let mut wr = SendWr::new(3, SendOpcode::AtomicFetchAdd);
    wr.sg_list = vec![sge(a, 0, 8)];
    wr.remote_addr = WIN_IOVA;
    wr.rkey = rkey;
    wr.compare_add = 1;
    assert_eq!(one(&mut net, a, qa2, wr).status, WcStatus::RemAccessErr);
    assert_eq!(wmem.snapshot(), before);
}

#[test]
fn rebinding_a_type1_window_retires_the_old_rkey() {
    let (mut net, nodes) = network(103, Faults::none(), 2, 1 << 16);
    let (a, b) = (&nodes[0], &nodes[1]);
    let p = ConnParams::default();
    let (qa, qb) = connect(&mut net, a, b, &p);
    let (wmem, wmr) = window_region(&mut net, b, 4096);
    let e = &mut net.engines[b.idx];
    let mw = e.alloc_mw(b.pd, MwType::Type1).unwrap();
    let old = e
        .bind_mw(qb, &mw_bind(mw, inc_rkey(mw), wmr, WIN_IOVA, 1024, RW))
        .unwrap();
    let new = e
        .bind_mw(
            qb,
            &mw_bind(old, inc_rkey(old), wmr, WIN_IOVA + 2048, 1024, RW),
        )
        .unwrap();
    assert_ne!(old, new);
    assert_eq!(
        new,
        inc_rkey(old),
        "the key part the bind asked for, as the kernel's rxe"
    );
    assert_eq!(key_index(old), key_index(new));
    // The new binding's range, under the new rkey.
    a.mem.write(0, &[0xab; 16]);
    let c = one(
        &mut net,
        a,
        qa,
        write(1, vec![sge(a, 0, 16)], WIN_IOVA + 2048, new),
    );
    assert_eq!(c.status, WcStatus::Success);
    assert_eq!(&wmem.snapshot()[2048..2064], &[0xab; 16]);
    // The new rkey does not reach the old range.
    let c = one(
        &mut net,
        a,
        qa,
        write(2, vec![sge(a, 0, 16)], WIN_IOVA, new),
    );
    assert_eq!(c.status, WcStatus::RemAccessErr);
    // The old rkey reaches nothing at all, not even its old range.
    let (qa2, _) = connect(&mut net, a, b, &p);
    let before = wmem.snapshot();
    let c = one(
        &mut net,
        a,
        qa2,
        write(3, vec![sge(a, 0, 16)], WIN_IOVA, old),
    );
    assert_eq!(c.status, WcStatus::RemAccessErr);
    assert_eq!(wmem.snapshot(), before);
}

#[test]
fn type2_window_bound_by_work_request_and_invalidated_by_local_inv() {
    let (mut net, nodes) = network(104, Faults::none(), 2, 1 << 16);
    let (a, b) = (&nodes[0], &nodes[1]);
    let p = ConnParams::default();
    let (qa, qb) = connect(&mut net, a, b, &p);
    let (wmem, wmr) = window_region(&mut net, b, 4096);
    let mw = net.engines[b.idx].alloc_mw(b.pd, MwType::Type2).unwrap();
    let rkey = with_variant(mw, key_variant(mw).wrapping_add(1));
    let c = post_bind(
        &mut net,
        b,
        qb,
        50,
        mw_bind(mw, rkey, wmr, WIN_IOVA + 512, 512, RW),
    );
    assert_eq!(
        (c.wr_id, c.status, c.opcode, c.qp_num),
        (50, WcStatus::Success, WcOpcode::BindMw, qb)
    );
    let info = net.engines[b.idx]
        .mem()
        .query_mw(rkey)
        .expect("the new rkey");
    let binding = info.binding.expect("bound");
    assert_eq!(
        (binding.addr, binding.length, binding.qpn),
        (WIN_IOVA + 512, 512, Some(qb))
    );
    assert!(
        net.engines[b.idx].mem().query_mw(mw).is_none(),
        "old rkey retired"
    );

    a.mem.write(0, &[0x42; 32]);
    let c = one(
        &mut net,
        a,
        qa,
        write(1, vec![sge(a, 0, 32)], WIN_IOVA + 512, rkey),
    );
    assert_eq!(c.status, WcStatus::Success);
    assert_eq!(&wmem.snapshot()[512..544], &[0x42; 32]);

    // LOCAL_INV through the same QP.
    let mut inv = SendWr::new(51, SendOpcode::LocalInv);
    inv.invalidate_rkey = rkey;
    let c = one(&mut net, b, qb, inv);
    assert_eq!(
        (c.wr_id, c.status, c.opcode),
        (51, WcStatus::Success, WcOpcode::LocalInv)
    );
    assert_eq!(
        net.engines[b.idx].mem().query_mw(rkey).unwrap().binding,
        None
    );
    let before = wmem.snapshot();
    let c = one(
        &mut net,
        a,
        qa,
        write(2, vec![sge(a, 0, 32)], WIN_IOVA + 512, rkey),
    );
    assert_eq!(c.status, WcStatus::RemAccessErr, "invalidated");
    assert_eq!(wmem.snapshot(), before);

    // Invalidated, the window may be bound again (here through a new QP,
    // with a new key part); the previous rkey stays dead.
    let (qa2, qb2) = connect(&mut net, a, b, &p);
    let rkey2 = with_variant(rkey, key_variant(rkey).wrapping_add(1));
    let c = post_bind(
        &mut net,
        b,
        qb2,
        52,
        mw_bind(rkey, rkey2, wmr, WIN_IOVA, 64, RW),
    );
    assert_eq!(c.status, WcStatus::Success);
    let c = one(
        &mut net,
        a,
        qa2,
        write(3, vec![sge(a, 0, 32)], WIN_IOVA, rkey2),
    );
    assert_eq!(c.status, WcStatus::Success);
    let c = one(
        &mut net,
        a,
        qa2,
        write(4, vec![sge(a, 0, 32)], WIN_IOVA, rkey),
    );
    assert_eq!(c.status, WcStatus::RemAccessErr);
}

#[test]
fn binding_a_bound_type2_window_fails_with_mw_bind_err() {
    let (mut net, nodes) = network(105, Faults::none(), 2, 1 << 16);
    let (a, b) = (&nodes[0], &nodes[1]);
    let (_qa, qb) = connect(&mut net, a, b, &ConnParams::default());
    let (_wmem, wmr) = window_region(&mut net, b, 4096);
    let mw = net.engines[b.idx].alloc_mw(b.pd, MwType::Type2).unwrap();
    let rkey = with_variant(mw, key_variant(mw).wrapping_add(1));
    let c = post_bind(&mut net, b, qb, 1, mw_bind(mw, rkey, wmr, WIN_IOVA, 64, RW));
    assert_eq!(c.status, WcStatus::Success);
    let again = with_variant(rkey, key_variant(rkey).wrapping_add(1));
    let c = post_bind(
        &mut net,
        b,
        qb,
        2,
        mw_bind(rkey, again, wmr, WIN_IOVA, 64, RW),
    );
    assert_eq!(
        (c.wr_id, c.status, c.opcode),
        (2, WcStatus::MwBindErr, WcOpcode::BindMw)
    );
    assert_eq!(state(&net, b, qb), QpState::Err);
    // The first binding is untouched.
    assert!(net.engines[b.idx]
        .mem()
        .query_mw(rkey)
        .unwrap()
        .binding
        .is_some());
}

#[test]
fn bind_mw_verb_refuses_type2_windows() {
    // `ibv_bind_mw` is for type 1 windows (libibverbs returns EINVAL for a
    // type 2 window): those are bound by a BIND_MW work request only, which
    // ties them to the QP and the key part the consumer chose.
    let (mut net, nodes) = network(106, Faults::none(), 2, 1 << 16);
    let (a, b) = (&nodes[0], &nodes[1]);
    let (_qa, qb) = connect(&mut net, a, b, &ConnParams::default());
    let (_wmem, wmr) = window_region(&mut net, b, 4096);
    let e = &mut net.engines[b.idx];
    let mw = e.alloc_mw(b.pd, MwType::Type2).unwrap();
    let err = e
        .bind_mw(qb, &mw_bind(mw, mw, wmr, WIN_IOVA, 64, RW))
        .unwrap_err();
    assert!(
        matches!(err, EngineError::InvalidArgument { name: "mw", .. }),
        "{err}"
    );
    assert_eq!(e.mem().query_mw(mw).unwrap().binding, None);
}

#[test]
fn send_with_invalidate_unbinds_the_window_at_the_responder() {
    let (mut net, nodes) = network(107, Faults::none(), 2, 1 << 16);
    let (a, b) = (&nodes[0], &nodes[1]);
    let p = ConnParams::default();
    let (qa, qb) = connect(&mut net, a, b, &p);
    let (wmem, wmr) = window_region(&mut net, b, 4096);
    let mw = net.engines[b.idx].alloc_mw(b.pd, MwType::Type2).unwrap();
    let rkey = with_variant(mw, key_variant(mw).wrapping_add(7));
    assert_eq!(
        post_bind(
            &mut net,
            b,
            qb,
            1,
            mw_bind(mw, rkey, wmr, WIN_IOVA, 256, RW)
        )
        .status,
        WcStatus::Success
    );
    post_recv(&mut net, b, qb, 9, vec![sge(b, 0, 64)]);
    a.mem.write(0, b"done with your buffer");
    let mut wr = SendWr::new(2, SendOpcode::SendWithInv);
    wr.sg_list = vec![sge(a, 0, 21)];
    wr.invalidate_rkey = rkey;
    let log = tap(&mut net);
    let c = one(&mut net, a, qa, wr);
    assert_eq!((c.status, c.opcode), (WcStatus::Success, WcOpcode::Send));
    assert!(logged(&log)
        .iter()
        .any(|(_, t)| opcode(t) == Opcode::RC_SEND_ONLY_WITH_INVALIDATE));
    let cb = completions(&mut net, b);
    assert_eq!(cb.len(), 1);
    assert_eq!(
        (cb[0].wr_id, cb[0].status, cb[0].opcode, cb[0].byte_len),
        (9, WcStatus::Success, WcOpcode::Recv, 21)
    );
    assert_eq!(cb[0].invalidated_rkey, Some(rkey));
    assert_eq!(&b.mem.snapshot()[..21], b"done with your buffer");
    assert_eq!(
        net.engines[b.idx].mem().query_mw(rkey).unwrap().binding,
        None
    );
    // Later use of the rkey fails.
    let before = wmem.snapshot();
    let c = one(
        &mut net,
        a,
        qa,
        write(3, vec![sge(a, 0, 8)], WIN_IOVA, rkey),
    );
    assert_eq!(c.status, WcStatus::RemAccessErr);
    assert_eq!(wmem.snapshot(), before);
}

#[test]
fn type2_window_serves_only_the_qp_it_was_bound_through() {
    let (mut net, nodes) = network(108, Faults::none(), 2, 1 << 16);
    let (a, b) = (&nodes[0], &nodes[1]);
    let p = ConnParams::default();
    let (qa1, qb1) = connect(&mut net, a, b, &p);
    let (qa2, qb2) = connect(&mut net, a, b, &p);
    let (wmem, wmr) = window_region(&mut net, b, 4096);
    let mw = net.engines[b.idx].alloc_mw(b.pd, MwType::Type2).unwrap();
    let rkey = with_variant(mw, key_variant(mw) ^ 0x80);
    assert_eq!(
        post_bind(
            &mut net,
            b,
            qb1,
            1,
            mw_bind(mw, rkey, wmr, WIN_IOVA, 256, RW)
        )
        .status,
        WcStatus::Success
    );
    a.mem.write(0, &[0x11; 8]);
    // Through QP 2: refused, nothing written.
    let before = wmem.snapshot();
    let c = one(
        &mut net,
        a,
        qa2,
        write(1, vec![sge(a, 0, 8)], WIN_IOVA, rkey),
    );
    assert_eq!(c.status, WcStatus::RemAccessErr);
    assert_eq!(wmem.snapshot(), before);
    assert_eq!(state(&net, b, qb2), QpState::Err);
    // Through QP 1: fine.
    let c = one(
        &mut net,
        a,
        qa1,
        write(2, vec![sge(a, 0, 8)], WIN_IOVA, rkey),
    );
    assert_eq!(c.status, WcStatus::Success);
    assert_eq!(&wmem.snapshot()[..8], &[0x11; 8]);
    // A SEND with invalidate arriving on another QP cannot invalidate it.
    let (qa3, qb3) = connect(&mut net, a, b, &p);
    post_recv(&mut net, b, qb3, 3, vec![sge(b, 0, 64)]);
    let mut wr = SendWr::new(4, SendOpcode::SendWithInv);
    wr.sg_list = vec![sge(a, 0, 8)];
    wr.invalidate_rkey = rkey;
    let c = one(&mut net, a, qa3, wr);
    assert_eq!(c.status, WcStatus::RemInvReqErr);
    let cb = completions(&mut net, b);
    assert_eq!(cb.len(), 1);
    assert_ne!(cb[0].status, WcStatus::Success);
    assert_eq!(cb[0].invalidated_rkey, None);
    assert!(
        net.engines[b.idx]
            .mem()
            .query_mw(rkey)
            .unwrap()
            .binding
            .is_some(),
        "still bound"
    );
    let c = one(
        &mut net,
        a,
        qa1,
        write(5, vec![sge(a, 0, 8)], WIN_IOVA + 8, rkey),
    );
    assert_eq!(c.status, WcStatus::Success, "and still usable through QP 1");
}

// ---------------------------------------------------------------------------
// 2. Shared receive queues
// ---------------------------------------------------------------------------

/// `n` RC connections from A to B whose B side takes its receives from `srq`.
fn srq_pairs(net: &mut SimNet, a: &Node, b: &Node, srq: SrqId, n: usize) -> Vec<(u32, u32)> {
    let p = ConnParams::default();
    (0..n)
        .map(|_| {
            let qa = create_qp(net, a, &p);
            let qb = create_qp_with(net, b, QpType::Rc, Some(srq), false, QpCap::default());
            connect_qps(net, a, qa, b, qb, &p);
            (qa, qb)
        })
        .collect()
}

fn post_srq(net: &mut SimNet, n: &Node, srq: SrqId, wr_id: u64, sg_list: Vec<Sge>) {
    net.engines[n.idx]
        .post_srq_recv(srq, RecvWr { wr_id, sg_list })
        .unwrap();
}

#[test]
fn srq_wqes_are_consumed_in_order_by_every_qp_that_shares_it() {
    let (mut net, nodes) = network(201, Faults::none(), 2, 1 << 16);
    let (a, b) = (&nodes[0], &nodes[1]);
    let srq = net.engines[b.idx].create_srq(b.pd, 16, 4, 0).unwrap();
    let pairs = srq_pairs(&mut net, a, b, srq, 2);
    for k in 0..4u64 {
        post_srq(&mut net, b, srq, 100 + k, vec![sge(b, 1024 * k, 1024)]);
    }
    // Messages alternate between the two QPs; each is 100 + k bytes of k.
    for k in 0..4u64 {
        let (qa, _) = pairs[k as usize % 2];
        a.mem
            .write(1024 * k as usize, &vec![k as u8 + 1; 100 + k as usize]);
        net.engines[a.idx]
            .post_send(qa, send(k, vec![sge(a, 1024 * k, 100 + k as u32)]))
            .unwrap();
        run(&mut net);
    }
    let cb = completions(&mut net, b);
    let got: Vec<_> = cb
        .iter()
        .map(|c| (c.wr_id, c.qp_num, c.byte_len, c.status))
        .collect();
    let want: Vec<_> = (0..4u64)
        .map(|k| {
            (
                100 + k,
                pairs[k as usize % 2].1,
                100 + k as u32,
                WcStatus::Success,
            )
        })
        .collect();
    assert_eq!(got, want);
    let snap = b.mem.snapshot();
    for k in 0..4usize {
        assert!(snap[1024 * k..1024 * k + 100 + k]
            .iter()
            .all(|&x| x == k as u8 + 1));
        assert_eq!(snap[1024 * k + 100 + k], 0, "no byte past the message");
    }
    assert_eq!(completions(&mut net, a).len(), 4);
}

#[test]
fn post_recv_on_a_qp_with_an_srq_is_refused() {
    let (mut net, nodes) = network(202, Faults::none(), 2, 1 << 16);
    let (a, b) = (&nodes[0], &nodes[1]);
    let srq = net.engines[b.idx].create_srq(b.pd, 16, 4, 0).unwrap();
    let (_, qb) = srq_pairs(&mut net, a, b, srq, 1)[0];
    let err = net.engines[b.idx]
        .post_recv(
            qb,
            RecvWr {
                wr_id: 1,
                sg_list: vec![sge(b, 0, 64)],
            },
        )
        .unwrap_err();
    assert!(
        matches!(err, EngineError::InvalidArgument { name: "qp", .. }),
        "{err}"
    );
    assert!(err.to_string().contains("shared receive queue"), "{err}");
}

#[test]
fn srq_limit_event_fires_once_when_the_queue_drops_below_the_limit() {
    let (mut net, nodes) = network(203, Faults::none(), 2, 1 << 16);
    let (a, b) = (&nodes[0], &nodes[1]);
    let srq = net.engines[b.idx].create_srq(b.pd, 16, 4, 0).unwrap();
    let (qa, _) = srq_pairs(&mut net, a, b, srq, 1)[0];
    for k in 0..6u64 {
        post_srq(&mut net, b, srq, k, vec![sge(b, 64 * k, 64)]);
    }
    // A limit above what the SRQ holds (16 asked for: a ring of 31, as the
    // kernel's rxe rounds it) is refused; 4 arms the event.
    assert_eq!(net.engines[b.idx].srq_size(srq).unwrap(), (31, 4));
    let err = net.engines[b.idx].modify_srq(srq, 32).unwrap_err();
    assert!(
        matches!(
            err,
            EngineError::InvalidArgument {
                name: "srq_limit",
                ..
            }
        ),
        "{err}"
    );
    net.engines[b.idx].modify_srq(srq, 4).unwrap();
    let mut seen = Vec::new();
    for k in 0..6u64 {
        net.engines[a.idx]
            .post_send(qa, send(k, vec![sge(a, 0, 8)]))
            .unwrap();
        run(&mut net);
        seen.push(events(&mut net, b));
    }
    // 6 WQEs: after the 1st and 2nd messages 5 and 4 are left (not below 4);
    // after the 3rd, 3: the event, once; then it is disarmed.
    let limit = vec![AsyncEvent::SrqLimitReached(srq)];
    assert_eq!(seen[0], vec![]);
    assert_eq!(seen[1], vec![]);
    assert_eq!(seen[2], limit);
    assert_eq!(&seen[3..], &[vec![], vec![], vec![]]);
    assert_eq!(completions(&mut net, b).len(), 6);
    // Re-armed with the queue empty, the next WQE taken fires it again.
    net.engines[b.idx].modify_srq(srq, 1).unwrap();
    post_srq(&mut net, b, srq, 6, vec![sge(b, 0, 64)]);
    net.engines[a.idx]
        .post_send(qa, send(6, vec![sge(a, 0, 8)]))
        .unwrap();
    run(&mut net);
    assert_eq!(events(&mut net, b), limit);
}

#[test]
fn empty_srq_gives_rnr_naks_until_a_wqe_is_posted() {
    let (mut net, nodes) = network(204, Faults::none(), 2, 1 << 16);
    let (a, b) = (&nodes[0], &nodes[1]);
    let srq = net.engines[b.idx].create_srq(b.pd, 16, 4, 0).unwrap();
    let (qa, qb) = srq_pairs(&mut net, a, b, srq, 1)[0];
    a.mem.write(0, b"hello srq");
    net.engines[a.idx]
        .post_send(qa, send(1, vec![sge(a, 0, 9)]))
        .unwrap();
    net.run_until(Duration::from_millis(5), |net| {
        net.engines[a.idx].counters().rcvd_rnr_err >= 2
    });
    assert!(completions(&mut net, a).is_empty());
    assert!(net.engines[b.idx].qp_counters(qb).unwrap().send_rnr_err >= 2);
    post_srq(&mut net, b, srq, 77, vec![sge(b, 512, 64)]);
    run(&mut net);
    let ca = completions(&mut net, a);
    assert_eq!(ids_and_statuses(&ca), vec![(1, WcStatus::Success)]);
    let cb = completions(&mut net, b);
    assert_eq!(
        (cb[0].wr_id, cb[0].qp_num, cb[0].byte_len, cb[0].status),
        (77, qb, 9, WcStatus::Success)
    );
    assert_eq!(&b.mem.snapshot()[512..521], b"hello srq");
}

// ---------------------------------------------------------------------------
// 3. Send flags and work requests
// ---------------------------------------------------------------------------

fn unsignaled(mut wr: SendWr) -> SendWr {
    wr.flags.remove(SendFlags::SIGNALED);
    wr
}

#[test]
fn unsignaled_requests_complete_silently_and_signaled_ones_in_order() {
    let (mut net, nodes) = network(301, Faults::none(), 2, 1 << 16);
    let (a, b) = (&nodes[0], &nodes[1]);
    let (qa, qb) = connect(&mut net, a, b, &ConnParams::default());
    for k in 0..4 {
        post_recv(&mut net, b, qb, k, vec![sge(b, 0, 4096)]);
    }
    let e = &mut net.engines[a.idx];
    e.post_send(
        qa,
        unsignaled(write(1, vec![sge(a, 0, 2000)], IOVA, b.mr.rkey)),
    )
    .unwrap();
    e.post_send(qa, unsignaled(send(2, vec![sge(a, 0, 100)])))
        .unwrap();
    e.post_send(qa, send(3, vec![sge(a, 0, 100)])).unwrap();
    e.post_send(
        qa,
        unsignaled(read(4, vec![sge(a, 0, 64)], IOVA, b.mr.rkey)),
    )
    .unwrap();
    e.post_send(qa, unsignaled(send(5, vec![sge(a, 0, 10)])))
        .unwrap();
    e.post_send(qa, read(6, vec![sge(a, 100, 64)], IOVA, b.mr.rkey))
        .unwrap();
    e.post_send(qa, send(7, vec![sge(a, 0, 10)])).unwrap();
    run(&mut net);
    let ca = completions(&mut net, a);
    assert_eq!(
        ca.iter().map(|c| (c.wr_id, c.opcode)).collect::<Vec<_>>(),
        vec![
            (3, WcOpcode::Send),
            (6, WcOpcode::RdmaRead),
            (7, WcOpcode::Send)
        ]
    );
    assert!(ca.iter().all(|c| c.status == WcStatus::Success));
    // The unsignaled ones were done all the same.
    assert_eq!(completions(&mut net, b).len(), 4);
}

#[test]
fn sq_sig_all_signals_every_request() {
    let (mut net, nodes) = network(302, Faults::none(), 2, 1 << 16);
    let (a, b) = (&nodes[0], &nodes[1]);
    let p = ConnParams::default();
    let qa = create_qp_with(&mut net, a, QpType::Rc, None, true, QpCap::default());
    let qb = create_qp(&mut net, b, &p);
    connect_qps(&mut net, a, qa, b, qb, &p);
    for k in 0..3u64 {
        net.engines[a.idx]
            .post_send(
                qa,
                unsignaled(write(k, vec![sge(a, 0, 64)], IOVA, b.mr.rkey)),
            )
            .unwrap();
    }
    run(&mut net);
    assert_eq!(
        ids_and_statuses(&completions(&mut net, a)),
        vec![
            (0, WcStatus::Success),
            (1, WcStatus::Success),
            (2, WcStatus::Success)
        ]
    );
}

#[test]
fn inline_data_is_sent_without_reading_the_gather_list() {
    let (mut net, nodes) = network(303, Faults::none(), 2, 1 << 16);
    let (a, b) = (&nodes[0], &nodes[1]);
    let p = ConnParams {
        mtu: Mtu::Mtu256,
        ..ConnParams::default()
    };
    let (qa, qb) = connect(&mut net, a, b, &p);
    // An SGE no region answers to: it would fail with LOC_PROT_ERR if read.
    let bogus = Sge {
        addr: 0xdead_0000,
        length: 200,
        lkey: 0x00ab_cd00,
    };
    post_recv(&mut net, b, qb, 9, vec![sge(b, 0, 1024)]);
    let data = pattern(200, 9);
    let mut wr = send(1, vec![bogus]);
    wr.flags |= SendFlags::INLINE;
    wr.inline_data = Some(data.clone());
    let c = one(&mut net, a, qa, wr);
    assert_eq!(c.status, WcStatus::Success);
    let cb = completions(&mut net, b);
    assert_eq!((cb[0].wr_id, cb[0].byte_len), (9, 200));
    assert_eq!(&b.mem.snapshot()[..200], &data[..]);
    // An inline RDMA WRITE of max_inline_data bytes (a full 256-byte packet).
    let data = pattern(256, 10);
    let mut wr = write(2, vec![bogus], IOVA + 4096, b.mr.rkey);
    wr.flags |= SendFlags::INLINE;
    wr.inline_data = Some(data.clone());
    let log = tap(&mut net);
    let c = one(&mut net, a, qa, wr);
    assert_eq!((c.status, c.byte_len), (WcStatus::Success, 256));
    assert_eq!(&b.mem.snapshot()[4096..4352], &data[..]);
    let writes: Vec<(Opcode, usize)> = logged(&log)
        .iter()
        .filter(|(_, t)| t.src == a.addr)
        .map(|(_, t)| (opcode(t), t.payload.len()))
        .collect();
    // BTH + RETH + 256 bytes + ICRC.
    assert_eq!(
        writes,
        vec![(Opcode::RC_RDMA_WRITE_ONLY, 12 + 16 + 256 + 4)]
    );
    // The bogus SGE was never checked: no LOC_PROT_ERR took the QP to ERR.
    assert_eq!(state(&net, a, qa), QpState::Rts);
}

#[test]
fn solicited_flag_sets_the_bit_on_the_last_packet_only() {
    let (mut net, nodes) = network(304, Faults::none(), 2, 1 << 16);
    let (a, b) = (&nodes[0], &nodes[1]);
    let (qa, qb) = connect(&mut net, a, b, &ConnParams::default());
    post_recv(&mut net, b, qb, 1, vec![sge(b, 0, 4096)]);
    post_recv(&mut net, b, qb, 2, vec![sge(b, 0, 4096)]);
    let log = tap(&mut net);
    let mut wr = send(1, vec![sge(a, 0, 3000)]);
    wr.flags |= SendFlags::SOLICITED;
    one(&mut net, a, qa, wr);
    one(&mut net, a, qa, send(2, vec![sge(a, 0, 3000)]));
    let sends: Vec<(Opcode, bool)> = logged(&log)
        .iter()
        .filter(|(_, t)| t.src == a.addr)
        .map(|(_, t)| (opcode(t), solicited(t)))
        .collect();
    use Opcode as O;
    assert_eq!(
        sends,
        vec![
            (O::RC_SEND_FIRST, false),
            (O::RC_SEND_MIDDLE, false),
            (O::RC_SEND_LAST, true),
            (O::RC_SEND_FIRST, false),
            (O::RC_SEND_MIDDLE, false),
            (O::RC_SEND_LAST, false),
        ]
    );
    // No response carries it.
    assert!(logged(&log)
        .iter()
        .filter(|(_, t)| t.src == b.addr)
        .all(|(_, t)| !solicited(t)));
}

#[test]
fn solicited_only_notification_waits_for_a_solicited_or_failed_completion() {
    let (mut net, nodes) = network(305, Faults::none(), 2, 1 << 16);
    let (a, b) = (&nodes[0], &nodes[1]);
    let (qa, qb) = connect(&mut net, a, b, &ConnParams::default());
    for k in 0..4 {
        post_recv(&mut net, b, qb, k, vec![sge(b, 0, 100)]);
    }
    let (e, cq) = (b.idx, b.cq);
    net.engines[e].req_notify_cq(cq, true).unwrap();
    // An unsolicited message completes without a notification.
    one(&mut net, a, qa, send(1, vec![sge(a, 0, 10)]));
    assert_eq!(net.engines[e].cq_len(cq), Some(1));
    assert!(!net.engines[e].take_cq_notification(cq));
    // A solicited one notifies, once.
    let mut wr = send(2, vec![sge(a, 0, 10)]);
    wr.flags |= SendFlags::SOLICITED;
    one(&mut net, a, qa, wr);
    assert!(net.engines[e].take_cq_notification(cq));
    assert!(!net.engines[e].take_cq_notification(cq));
    // Not re-armed: another solicited one does not notify.
    let mut wr = send(3, vec![sge(a, 0, 10)]);
    wr.flags |= SendFlags::SOLICITED;
    one(&mut net, a, qa, wr);
    assert!(!net.engines[e].take_cq_notification(cq));
    // Re-armed solicited-only, an error completion notifies: an unsolicited
    // message too long for B's 100-byte buffer completes in error.
    completions(&mut net, b);
    net.engines[e].req_notify_cq(cq, true).unwrap();
    let c = one(&mut net, a, qa, send(4, vec![sge(a, 0, 200)]));
    assert_eq!(c.status, WcStatus::RemInvReqErr);
    let cb = completions(&mut net, b);
    assert_eq!((cb[0].wr_id, cb[0].status), (3, WcStatus::LocLenErr));
    assert!(
        net.engines[e].take_cq_notification(cq),
        "errors always notify"
    );
}

#[test]
fn any_completion_notifies_a_cq_armed_without_solicited_only() {
    let (mut net, nodes) = network(306, Faults::none(), 2, 1 << 16);
    let (a, b) = (&nodes[0], &nodes[1]);
    let (qa, qb) = connect(&mut net, a, b, &ConnParams::default());
    post_recv(&mut net, b, qb, 1, vec![sge(b, 0, 100)]);
    net.engines[b.idx].req_notify_cq(b.cq, false).unwrap();
    assert!(!net.engines[b.idx].take_cq_notification(b.cq));
    one(&mut net, a, qa, send(1, vec![sge(a, 0, 10)]));
    assert!(net.engines[b.idx].take_cq_notification(b.cq));
}

/// Times the tap saw the first packet with opcode `op` from `src`, in order.
fn times_of(log: &[(Duration, Transmit)], src: IpAddr, op: Opcode) -> Vec<Duration> {
    log.iter()
        .filter(|(_, t)| t.src == src && opcode(t) == op)
        .map(|(at, _)| *at)
        .collect()
}

#[test]
fn fenced_send_waits_for_the_read_before_it() {
    for fence in [false, true] {
        let (mut net, nodes) = network(307, Faults::none(), 2, 1 << 16);
        let (a, b) = (&nodes[0], &nodes[1]);
        let (qa, qb) = connect(&mut net, a, b, &ConnParams::default());
        post_recv(&mut net, b, qb, 1, vec![sge(b, 0, 100)]);
        let log = tap(&mut net);
        let e = &mut net.engines[a.idx];
        e.post_send(qa, read(1, vec![sge(a, 0, 4096)], IOVA + 8192, b.mr.rkey))
            .unwrap();
        let mut wr = send(2, vec![sge(a, 8192, 10)]);
        if fence {
            wr.flags |= SendFlags::FENCE;
        }
        e.post_send(qa, wr).unwrap();
        run(&mut net);
        assert_eq!(
            ids_and_statuses(&completions(&mut net, a)),
            vec![(1, WcStatus::Success), (2, WcStatus::Success)]
        );
        let log = logged(&log);
        let read_req = times_of(&log, a.addr, Opcode::RC_RDMA_READ_REQUEST);
        let last_resp = times_of(&log, b.addr, Opcode::RC_RDMA_READ_RESPONSE_LAST);
        let send_at = times_of(&log, a.addr, Opcode::RC_SEND_ONLY);
        assert_eq!((read_req.len(), last_resp.len(), send_at.len()), (1, 1, 1));
        if fence {
            // Not before the READ's last response has travelled back.
            assert!(
                send_at[0] >= last_resp[0] + Faults::none().delay,
                "{send_at:?} vs {last_resp:?}"
            );
        } else {
            assert_eq!(send_at[0], read_req[0], "unfenced: right behind the READ");
        }
    }
}

#[test]
fn max_rd_atomic_one_keeps_one_read_outstanding() {
    for rd_atomic in [1u8, 2] {
        let (mut net, nodes) = network(308, Faults::none(), 2, 1 << 16);
        let (a, b) = (&nodes[0], &nodes[1]);
        let p = ConnParams {
            rd_atomic,
            ..ConnParams::default()
        };
        let (qa, _) = connect(&mut net, a, b, &p);
        let log = tap(&mut net);
        for k in 0..3u64 {
            net.engines[a.idx]
                .post_send(
                    qa,
                    read(k, vec![sge(a, 4096 * k, 3000)], IOVA + 16384, b.mr.rkey),
                )
                .unwrap();
        }
        run(&mut net);
        assert_eq!(completions(&mut net, a).len(), 3);
        let log = logged(&log);
        let reqs = times_of(&log, a.addr, Opcode::RC_RDMA_READ_REQUEST);
        let lasts = times_of(&log, b.addr, Opcode::RC_RDMA_READ_RESPONSE_LAST);
        assert_eq!((reqs.len(), lasts.len()), (3, 3));
        if rd_atomic == 1 {
            for k in 1..3 {
                assert!(
                    reqs[k] >= lasts[k - 1] + Faults::none().delay,
                    "READ {k} sent at {:?}, READ {} answered at {:?}",
                    reqs[k],
                    k - 1,
                    lasts[k - 1]
                );
            }
        } else {
            // Two at once: the second goes right away, the third waits.
            assert_eq!(reqs[1], reqs[0]);
            assert!(reqs[2] >= lasts[0] + Faults::none().delay);
        }
    }
}

// ---------------------------------------------------------------------------
// 4. UD
// ---------------------------------------------------------------------------

/// The Q_Key `bring_up` gives UD QPs.
const QKEY: u32 = 0x1111_1111;

fn ud_pair(net: &mut SimNet, a: &Node, b: &Node) -> (u32, u32) {
    let p = ConnParams {
        qp_type: QpType::Ud,
        ..ConnParams::default()
    };
    connect(net, a, b, &p)
}

fn ud_send(id: u64, sg_list: Vec<Sge>, to: &Node, qpn: u32, qkey: u32) -> SendWr {
    let mut wr = send(id, sg_list);
    wr.ud = Some(UdDest {
        av: AddressVector::to(to.addr),
        remote_qpn: qpn,
        remote_qkey: qkey,
    });
    wr
}

fn ipv4(a: IpAddr) -> [u8; 4] {
    match a {
        IpAddr::V4(v4) => v4.octets(),
        IpAddr::V6(_) => panic!("IPv4 expected"),
    }
}

#[test]
fn ud_receive_starts_with_a_grh_area_holding_the_ipv4_header() {
    let (mut net, nodes) = network(401, Faults::none(), 2, 1 << 16);
    let (a, b) = (&nodes[0], &nodes[1]);
    let (qa, qb) = ud_pair(&mut net, a, b);
    post_recv(&mut net, b, qb, 5, vec![sge(b, 1000, 40 + 100)]);
    let data = pattern(100, 4);
    a.mem.write(0, &data);
    let c = one(
        &mut net,
        a,
        qa,
        ud_send(1, vec![sge(a, 0, 100)], b, qb, QKEY),
    );
    assert_eq!(c.status, WcStatus::Success);
    let cb = completions(&mut net, b);
    assert_eq!(cb.len(), 1);
    let c = cb[0];
    assert_eq!(
        (c.wr_id, c.status, c.opcode, c.byte_len, c.src_qp, c.grh),
        (5, WcStatus::Success, WcOpcode::Recv, 140, qa, true)
    );
    let snap = b.mem.snapshot();
    let grh = &snap[1000..1040];
    // rdma_rxe's union rdma_network_hdr: 20 reserved zero bytes, then the
    // IPv4 header of the packet.
    assert_eq!(&grh[..20], &[0; 20]);
    let ip = &grh[20..];
    assert_eq!(ip[0], 0x45, "IPv4, 20-byte header");
    // IP + UDP + BTH + DETH + payload + ICRC.
    let total = 20 + 8 + 12 + 8 + 100 + 4;
    assert_eq!(u16::from_be_bytes([ip[2], ip[3]]), total);
    assert_eq!(ip[9], 17, "protocol UDP");
    assert_eq!(ip[12..16], ipv4(a.addr), "source address");
    assert_eq!(ip[16..20], ipv4(b.addr), "destination address");
    let sum: u32 = ip
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    assert_eq!((sum & 0xffff) + (sum >> 16), 0xffff, "header checksum");
    assert_eq!(&snap[1040..1140], &data[..]);
}

#[test]
fn ud_qkey_mismatch_is_dropped_and_counted() {
    let (mut net, nodes) = network(402, Faults::none(), 2, 1 << 16);
    let (a, b) = (&nodes[0], &nodes[1]);
    let (qa, qb) = ud_pair(&mut net, a, b);
    post_recv(&mut net, b, qb, 5, vec![sge(b, 0, 140)]);
    let c = one(
        &mut net,
        a,
        qa,
        ud_send(1, vec![sge(a, 0, 10)], b, qb, 0x2222_2222),
    );
    assert_eq!(c.status, WcStatus::Success, "UD senders never learn");
    assert!(completions(&mut net, b).is_empty());
    assert_eq!(
        net.engines[b.idx]
            .counters()
            .dropped_for(DropReason::QkeyMismatch),
        1
    );
    assert_eq!(
        net.engines[b.idx]
            .qp_counters(qb)
            .unwrap()
            .dropped_for(DropReason::QkeyMismatch),
        1
    );
    // The receive is still there for the next datagram with the right key.
    one(
        &mut net,
        a,
        qa,
        ud_send(2, vec![sge(a, 0, 10)], b, qb, QKEY),
    );
    let cb = completions(&mut net, b);
    assert_eq!((cb[0].wr_id, cb[0].status), (5, WcStatus::Success));
}

#[test]
fn ud_remote_qkey_with_the_high_bit_uses_the_qps_own_qkey() {
    let (mut net, nodes) = network(403, Faults::none(), 2, 1 << 16);
    let (a, b) = (&nodes[0], &nodes[1]);
    let (qa, qb) = ud_pair(&mut net, a, b);
    post_recv(&mut net, b, qb, 5, vec![sge(b, 0, 140)]);
    post_recv(&mut net, b, qb, 6, vec![sge(b, 0, 140)]);
    let log = tap(&mut net);
    // 0x8000_0000 taken literally would not match B's Q_Key.
    one(
        &mut net,
        a,
        qa,
        ud_send(1, vec![sge(a, 0, 10)], b, qb, 0x8000_0000),
    );
    let cb = completions(&mut net, b);
    assert_eq!((cb[0].wr_id, cb[0].status), (5, WcStatus::Success));
    // The DETH carries A's own Q_Key.
    let deth_qkey = |t: &Transmit| u32::from_be_bytes(t.payload[12..16].try_into().unwrap());
    assert_eq!(deth_qkey(&logged(&log)[0].1), QKEY);
    // Change A's Q_Key: the substituted key follows it, and B refuses it.
    let attr = QpAttr {
        state: QpState::Rts,
        qkey: 0x3333_3333,
        ..QpAttr::default()
    };
    net.engines[a.idx]
        .modify_qp(qa, &attr, QpAttrMask::STATE | QpAttrMask::QKEY)
        .unwrap();
    one(
        &mut net,
        a,
        qa,
        ud_send(2, vec![sge(a, 0, 10)], b, qb, 0xffff_ffff),
    );
    assert_eq!(deth_qkey(&logged(&log)[1].1), 0x3333_3333);
    assert!(completions(&mut net, b).is_empty());
    assert_eq!(
        net.engines[b.idx]
            .counters()
            .dropped_for(DropReason::QkeyMismatch),
        1
    );
}

#[test]
fn ud_message_limit_is_the_port_mtu() {
    // UD QPs have no path MTU attribute (INIT->RTR does not accept one):
    // their messages are limited by the port's active MTU, 4096 here.
    let (mut net, nodes) = network(404, Faults::none(), 2, 1 << 16);
    let (a, b) = (&nodes[0], &nodes[1]);
    assert_eq!(net.engines[a.idx].config().port_mtu, Mtu::Mtu4096);
    let (qa, qb) = ud_pair(&mut net, a, b);
    post_recv(&mut net, b, qb, 5, vec![sge(b, 0, 40 + 4096)]);
    let data = pattern(4096, 7);
    a.mem.write(8192, &data);
    let log = tap(&mut net);
    let c = one(
        &mut net,
        a,
        qa,
        ud_send(1, vec![sge(a, 8192, 4096)], b, qb, QKEY),
    );
    assert_eq!(c.status, WcStatus::Success);
    let cb = completions(&mut net, b);
    assert_eq!(cb.len(), 1, "the full-MTU datagram arrived");
    assert_eq!(
        (cb[0].status, cb[0].byte_len),
        (WcStatus::Success, 40 + 4096)
    );
    assert_eq!(&b.mem.snapshot()[40..40 + 4096], &data[..]);
    // One byte more: LOC_LEN_ERR, and nothing is sent.
    post_recv(&mut net, b, qb, 6, vec![sge(b, 0, 40 + 8192)]);
    let sent = logged(&log).len();
    let c = one(
        &mut net,
        a,
        qa,
        ud_send(2, vec![sge(a, 0, 4097)], b, qb, QKEY),
    );
    assert_eq!((c.wr_id, c.status), (2, WcStatus::LocLenErr));
    assert_eq!(logged(&log).len(), sent);
    assert!(completions(&mut net, b).is_empty());
}

#[test]
fn ud_receive_buffer_too_small_completes_with_loc_len_err() {
    let (mut net, nodes) = network(405, Faults::none(), 2, 1 << 16);
    let (a, b) = (&nodes[0], &nodes[1]);
    let (qa, qb) = ud_pair(&mut net, a, b);
    b.mem.write(0, &[0xee; 256]);
    post_recv(&mut net, b, qb, 5, vec![sge(b, 0, 40 + 50)]);
    let c = one(
        &mut net,
        a,
        qa,
        ud_send(1, vec![sge(a, 0, 100)], b, qb, QKEY),
    );
    assert_eq!(c.status, WcStatus::Success);
    let cb = completions(&mut net, b);
    assert_eq!(cb.len(), 1);
    assert_eq!(
        (cb[0].wr_id, cb[0].status, cb[0].opcode),
        (5, WcStatus::LocLenErr, WcOpcode::Recv)
    );
    let snap = b.mem.snapshot();
    assert_eq!(&snap[40..256], &[0xee; 216], "no payload byte written");
}

fn group_gid(group: IpAddr) -> [u8; 16] {
    rxe_core::engine::mcast::gid_of_group(group)
}

#[test]
fn ud_multicast_reaches_every_attached_qp_and_only_those() {
    let (mut net, nodes) = network(406, Faults::none(), 3, 1 << 16);
    let (a, b, c) = (&nodes[0], &nodes[1], &nodes[2]);
    let (qa, qb) = ud_pair(&mut net, a, b);
    let (_, qc) = ud_pair(&mut net, a, c);
    let (_, qb2) = ud_pair(&mut net, a, b);
    let group: IpAddr = "239.1.2.3".parse().unwrap();
    let gid = group_gid(group);
    use rxe_core::engine::mcast::{Attached, Detached, MULTICAST_QPN};
    assert_eq!(
        net.engines[b.idx].attach_mcast(qb, gid).unwrap(),
        Attached::First
    );
    assert_eq!(
        net.engines[b.idx].attach_mcast(qb2, gid).unwrap(),
        Attached::Added
    );
    assert_eq!(
        net.engines[b.idx].attach_mcast(qb2, gid).unwrap(),
        Attached::Already
    );
    assert_eq!(
        net.engines[c.idx].attach_mcast(qc, gid).unwrap(),
        Attached::First
    );
    for (n, q) in [(b, qb), (b, qb2), (c, qc)] {
        post_recv(&mut net, n, q, u64::from(q), vec![sge(n, 1000, 40 + 64)]);
    }
    let data = pattern(64, 9);
    a.mem.write(0, &data);
    let mut wr = send(1, vec![sge(a, 0, 64)]);
    wr.ud = Some(UdDest {
        av: AddressVector::to(group),
        remote_qpn: MULTICAST_QPN,
        remote_qkey: QKEY,
    });
    let done = one(&mut net, a, qa, wr.clone());
    assert_eq!(done.status, WcStatus::Success);
    // The sender's device has no QP in the group: its copy is dropped.
    assert_eq!(
        net.engines[a.idx]
            .counters()
            .dropped_for(DropReason::NoGroup),
        1
    );
    let mut got_b: Vec<_> = completions(&mut net, b)
        .iter()
        .map(|c| (c.wr_id, c.status, c.byte_len, c.src_qp))
        .collect();
    got_b.sort_by_key(|g| g.0);
    let mut want = vec![
        (u64::from(qb), WcStatus::Success, 104, qa),
        (u64::from(qb2), WcStatus::Success, 104, qa),
    ];
    want.sort_by_key(|g| g.0);
    assert_eq!(got_b, want);
    let cc = completions(&mut net, c);
    assert_eq!(
        (cc.len(), cc[0].status, cc[0].src_qp),
        (1, WcStatus::Success, qa)
    );
    // Each got the payload, behind a GRH whose destination is the group.
    for n in [b, c] {
        let snap = n.mem.snapshot();
        assert_eq!(&snap[1040..1104], &data[..]);
        assert_eq!(snap[1036..1040], ipv4(group), "destination address");
    }
    // Detached, c's QP gets nothing more; b's two still do.
    assert_eq!(
        net.engines[c.idx].detach_mcast(qc, gid).unwrap(),
        Detached::Last
    );
    assert!(
        net.engines[c.idx].detach_mcast(qc, gid).is_err(),
        "not attached any more"
    );
    post_recv(&mut net, c, qc, 7, vec![sge(c, 1000, 40 + 64)]);
    for q in [qb, qb2] {
        post_recv(&mut net, b, q, 8, vec![sge(b, 1000, 40 + 64)]);
    }
    one(&mut net, a, qa, wr);
    assert_eq!(completions(&mut net, b).len(), 2);
    assert!(completions(&mut net, c).is_empty());
    assert_eq!(
        net.engines[c.idx]
            .counters()
            .dropped_for(DropReason::NoGroup),
        1
    );
}

#[test]
fn multicast_attach_is_refused_as_the_kernel_refuses_it() {
    let (mut net, nodes) = network(407, Faults::none(), 2, 1 << 16);
    let (a, b) = (&nodes[0], &nodes[1]);
    let (_, qb) = ud_pair(&mut net, a, b);
    let (_, rc) = connect(&mut net, a, b, &ConnParams::default());
    let gid = group_gid("239.9.9.9".parse().unwrap());
    let e = &mut net.engines[b.idx];
    // Only UD QPs, only multicast GIDs.
    assert!(matches!(
        e.attach_mcast(rc, gid),
        Err(EngineError::InvalidArgument { name: "qp", .. })
    ));
    let unicast = group_gid("10.0.0.1".parse().unwrap());
    assert!(matches!(
        e.attach_mcast(qb, unicast),
        Err(EngineError::InvalidArgument { name: "gid", .. })
    ));
    // An attached QP cannot be destroyed (EBUSY) until it is detached.
    e.attach_mcast(qb, gid).unwrap();
    assert!(matches!(e.destroy_qp(qb), Err(EngineError::Busy(_))));
    assert!(e.detach_all_mcast(qb) == vec![gid]);
    e.destroy_qp(qb).unwrap();
}

// ---------------------------------------------------------------------------
// 5. Argument errors and error states
// ---------------------------------------------------------------------------

fn init_attr() -> (QpAttr, QpAttrMask) {
    let a = QpAttr {
        state: QpState::Init,
        access: Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
        ..QpAttr::default()
    };
    let m =
        QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS;
    (a, m)
}

fn rtr_attr(remote: IpAddr, remote_qpn: u32) -> (QpAttr, QpAttrMask) {
    let a = QpAttr {
        state: QpState::Rtr,
        av: Some(AddressVector::to(remote)),
        path_mtu: Mtu::Mtu1024,
        dest_qpn: remote_qpn,
        rq_psn: Psn::new(0),
        ..QpAttr::default()
    };
    let m = QpAttrMask::STATE
        | QpAttrMask::AV
        | QpAttrMask::PATH_MTU
        | QpAttrMask::DEST_QPN
        | QpAttrMask::RQ_PSN
        | QpAttrMask::MAX_DEST_RD_ATOMIC
        | QpAttrMask::MIN_RNR_TIMER;
    (a, m)
}

#[test]
fn post_send_before_rts_is_refused_with_wrong_state() {
    let (mut net, nodes) = network(501, Faults::none(), 2, 1 << 16);
    let (a, b) = (&nodes[0], &nodes[1]);
    let qa = create_qp(&mut net, a, &ConnParams::default());
    let now = net.now();
    let e = &mut net.engines[a.idx];
    let check = |e: &mut rxe_core::engine::Engine, want: QpState| {
        let err = e.post_send(qa, send(1, vec![sge(a, 0, 8)])).unwrap_err();
        assert_eq!(
            err,
            EngineError::WrongState {
                qpn: qa,
                state: want,
                what: "post_send"
            }
        );
    };
    check(e, QpState::Reset);
    let (attr, mask) = init_attr();
    e.modify_qp(qa, &attr, mask).unwrap();
    check(e, QpState::Init);
    let (attr, mask) = rtr_attr(b.addr, 0x42);
    e.modify_qp(qa, &attr, mask).unwrap();
    check(e, QpState::Rtr);
    // Nothing was queued: nothing to send, nothing completes.
    assert!(e.poll_transmit(now).is_none());
    assert!(completions(&mut net, a).is_empty());
}

#[test]
fn modify_without_a_required_attribute_names_it() {
    let (mut net, nodes) = network(502, Faults::none(), 2, 1 << 16);
    let (a, b) = (&nodes[0], &nodes[1]);
    let qa = create_qp(&mut net, a, &ConnParams::default());
    let e = &mut net.engines[a.idx];
    let (attr, mask) = init_attr();
    e.modify_qp(qa, &attr, mask).unwrap();
    let (attr, mask) = rtr_attr(b.addr, 0x42);
    e.modify_qp(qa, &attr, mask).unwrap();
    let attr = QpAttr {
        state: QpState::Rts,
        ..QpAttr::default()
    };
    let mask = QpAttrMask::STATE
        | QpAttrMask::RETRY_CNT
        | QpAttrMask::RNR_RETRY
        | QpAttrMask::SQ_PSN
        | QpAttrMask::MAX_QP_RD_ATOMIC;
    let err = e.modify_qp(qa, &attr, mask).unwrap_err();
    assert!(
        matches!(
            err,
            EngineError::Modify(ModifyError::MissingAttribute {
                attr: QpAttrMask::TIMEOUT,
                ..
            })
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("IBV_QP_TIMEOUT"), "{err}");
    assert_eq!(e.query_qp(qa).unwrap().0.state, QpState::Rtr, "unchanged");
    // With it, the same call succeeds.
    e.modify_qp(qa, &attr, mask | QpAttrMask::TIMEOUT).unwrap();
    assert_eq!(e.query_qp(qa).unwrap().0.state, QpState::Rts);
}

#[test]
fn post_send_arguments_are_checked_and_named() {
    let (mut net, nodes) = network(503, Faults::none(), 2, 1 << 16);
    let (a, b) = (&nodes[0], &nodes[1]);
    let (qa, _) = connect(&mut net, a, b, &ConnParams::default());
    let uc = ConnParams {
        qp_type: QpType::Uc,
        ..ConnParams::default()
    };
    let (qa_uc, _) = connect(&mut net, a, b, &uc);
    let now = net.now();
    let e = &mut net.engines[a.idx];
    let name = |r: Result<(), EngineError>| match r {
        Err(EngineError::InvalidArgument { name, reason }) => (name, reason),
        other => panic!("expected InvalidArgument, got {other:?}"),
    };
    // max_send_sge is 16.
    let sges: Vec<Sge> = (0..17).map(|k| sge(a, 8 * k, 8)).collect();
    let (n, why) = name(e.post_send(qa, send(1, sges)));
    assert_eq!(n, "sg_list");
    assert!(why.contains("17") && why.contains("16"), "{why}");
    // max_inline_data is 256.
    let mut wr = send(2, vec![]);
    wr.flags |= SendFlags::INLINE;
    wr.inline_data = Some(vec![0; 257]);
    let (n, why) = name(e.post_send(qa, wr));
    assert_eq!(n, "inline_data");
    assert!(why.contains("257") && why.contains("256"), "{why}");
    // UC has no READ or atomics.
    for op in [
        SendOpcode::RdmaRead,
        SendOpcode::AtomicCmpSwap,
        SendOpcode::AtomicFetchAdd,
    ] {
        let mut wr = SendWr::new(3, op);
        wr.sg_list = vec![sge(a, 0, 8)];
        wr.rkey = b.mr.rkey;
        wr.remote_addr = IOVA;
        let (n, why) = name(e.post_send(qa_uc, wr));
        assert_eq!(n, "opcode");
        assert!(why.contains("Uc"), "{why}");
    }
    // None of them was queued.
    assert!(e.poll_transmit(now).is_none());
    run(&mut net);
    assert!(completions(&mut net, a).is_empty());
}

#[test]
fn full_send_queue_refuses_with_queue_full() {
    let (mut net, nodes) = network(504, Faults::none(), 2, 1 << 16);
    let (a, b) = (&nodes[0], &nodes[1]);
    // (3: a ring's size, as the kernel's rxe rounds it, holds 3)
    let p = ConnParams {
        depth: 3,
        ..ConnParams::default()
    };
    let (qa, _) = connect(&mut net, a, b, &p);
    let e = &mut net.engines[a.idx];
    for k in 0..3 {
        e.post_send(qa, write(k, vec![sge(a, 0, 8)], IOVA, b.mr.rkey))
            .unwrap();
    }
    let err = e
        .post_send(qa, write(3, vec![sge(a, 0, 8)], IOVA, b.mr.rkey))
        .unwrap_err();
    assert_eq!(
        err,
        EngineError::QueueFull {
            queue: "send queue",
            capacity: 3
        }
    );
    run(&mut net);
    assert_eq!(completions(&mut net, a).len(), 3);
    // Completed WQEs free their slots.
    net.engines[a.idx]
        .post_send(qa, write(4, vec![sge(a, 0, 8)], IOVA, b.mr.rkey))
        .unwrap();
}

#[test]
fn create_qp_with_an_unknown_cq_or_srq_is_refused() {
    let (mut net, nodes) = network(505, Faults::none(), 1, 4096);
    let a = &nodes[0];
    let e = &mut net.engines[a.idx];
    let init = QpInit {
        qp_type: QpType::Rc,
        pd: a.pd,
        send_cq: a.cq,
        recv_cq: CqId(999),
        srq: None,
        cap: QpCap::default(),
        sq_sig_all: false,
    };
    assert_eq!(e.create_qp(init), Err(EngineError::UnknownCq(CqId(999))));
    let init = QpInit {
        send_cq: CqId(998),
        recv_cq: a.cq,
        ..init
    };
    assert_eq!(e.create_qp(init), Err(EngineError::UnknownCq(CqId(998))));
    let init = QpInit {
        send_cq: a.cq,
        srq: Some(SrqId(7)),
        ..init
    };
    assert_eq!(e.create_qp(init), Err(EngineError::UnknownSrq(SrqId(7))));
    assert_eq!(e.num_qps(), 0);
}

#[test]
fn bad_lkey_completes_with_loc_prot_err_and_takes_the_qp_to_err() {
    let (mut net, nodes) = network(506, Faults::none(), 2, 1 << 16);
    let (a, b) = (&nodes[0], &nodes[1]);
    let (qa, qb) = connect(&mut net, a, b, &ConnParams::default());
    post_recv(&mut net, b, qb, 1, vec![sge(b, 0, 64)]);
    post_recv(&mut net, a, qa, 2, vec![sge(a, 4096, 64)]);
    let log = tap(&mut net);
    let mut bad = sge(a, 0, 8);
    bad.lkey ^= 0x5500;
    // Unsignaled: an error completes all the same.
    net.engines[a.idx]
        .post_send(qa, unsignaled(send(10, vec![bad])))
        .unwrap();
    net.engines[a.idx]
        .post_send(qa, send(11, vec![sge(a, 0, 8)]))
        .unwrap();
    run(&mut net);
    let ca = completions(&mut net, a);
    assert_eq!(
        ids_and_statuses(&ca),
        vec![
            (10, WcStatus::LocProtErr),
            (11, WcStatus::WrFlushErr),
            (2, WcStatus::WrFlushErr)
        ]
    );
    assert_eq!(ca[0].opcode, WcOpcode::Send);
    assert_eq!(state(&net, a, qa), QpState::Err);
    assert_eq!(events(&mut net, a), vec![AsyncEvent::QpFatal(qa)]);
    assert!(logged(&log).is_empty(), "nothing went out");
    // In ERR, new work is flushed at once, not refused.
    net.engines[a.idx]
        .post_send(qa, send(12, vec![sge(a, 0, 8)]))
        .unwrap();
    post_recv(&mut net, a, qa, 13, vec![sge(a, 0, 8)]);
    let ca = completions(&mut net, a);
    assert_eq!(
        ids_and_statuses(&ca),
        vec![(12, WcStatus::WrFlushErr), (13, WcStatus::WrFlushErr)]
    );
    assert_eq!(ca[1].opcode, WcOpcode::Recv);
    run(&mut net);
    assert!(logged(&log).is_empty());
    assert!(completions(&mut net, b).is_empty(), "B saw nothing");
}

#[test]
fn modify_to_reset_drops_posted_work_without_completions() {
    let (mut net, nodes) = network(507, Faults::none(), 2, 1 << 16);
    let (a, b) = (&nodes[0], &nodes[1]);
    let p = ConnParams::default();
    let (qa, qb) = connect(&mut net, a, b, &p);
    post_recv(&mut net, b, qb, 1, vec![sge(b, 0, 64)]);
    post_recv(&mut net, a, qa, 2, vec![sge(a, 4096, 64)]);
    post_recv(&mut net, a, qa, 3, vec![sge(a, 4096, 64)]);
    for k in 10..13 {
        net.engines[a.idx]
            .post_send(qa, send(k, vec![sge(a, 0, 8)]))
            .unwrap();
    }
    let log = tap(&mut net);
    let reset = QpAttr {
        state: QpState::Reset,
        ..QpAttr::default()
    };
    net.engines[a.idx]
        .modify_qp(qa, &reset, QpAttrMask::STATE)
        .unwrap();
    run(&mut net);
    assert!(completions(&mut net, a).is_empty());
    assert!(logged(&log).is_empty());
    assert!(events(&mut net, a).is_empty());
    // Back up: only new work happens.
    bring_up(&mut net, a, qa, b.addr, qb, p.psn_b, p.psn_a, &p);
    a.mem.write(0, b"new!");
    net.engines[a.idx]
        .post_send(qa, send(20, vec![sge(a, 0, 4)]))
        .unwrap();
    run(&mut net);
    assert_eq!(
        ids_and_statuses(&completions(&mut net, a)),
        vec![(20, WcStatus::Success)]
    );
    let cb = completions(&mut net, b);
    assert_eq!((cb.len(), cb[0].wr_id, cb[0].byte_len), (1, 1, 4));
    assert_eq!(&b.mem.snapshot()[..4], b"new!");
    // A's old receives are gone too: a message for A meets RNR NAKs.
    net.engines[b.idx]
        .post_send(qb, send(30, vec![sge(b, 0, 4)]))
        .unwrap();
    net.run(Duration::from_millis(2));
    assert!(net.engines[a.idx].qp_counters(qa).unwrap().send_rnr_err > 0);
    assert!(completions(&mut net, a).is_empty());
}

#[test]
fn failed_ud_send_moves_the_qp_to_sqe_where_receives_keep_working() {
    // IBTA 10.3.1 (and state.rs): on UC and UD a send completing in error
    // takes only the send queue down (SQE); receives go on, and SQE->RTS
    // resumes sending. RC has no SQE (see the LOC_PROT_ERR test above).
    let (mut net, nodes) = network(508, Faults::none(), 2, 1 << 16);
    let (a, b) = (&nodes[0], &nodes[1]);
    let (qa, qb) = ud_pair(&mut net, a, b);
    post_recv(&mut net, a, qa, 7, vec![sge(a, 8192, 140)]);
    let e = &mut net.engines[a.idx];
    e.post_send(qa, ud_send(1, vec![sge(a, 0, 4097)], b, qb, QKEY))
        .unwrap();
    e.post_send(qa, ud_send(2, vec![sge(a, 0, 10)], b, qb, QKEY))
        .unwrap();
    run(&mut net);
    assert_eq!(
        ids_and_statuses(&completions(&mut net, a)),
        vec![(1, WcStatus::LocLenErr), (2, WcStatus::WrFlushErr)]
    );
    assert_eq!(state(&net, a, qa), QpState::Sqe);
    assert!(!events(&mut net, a).contains(&AsyncEvent::QpFatal(qa)));
    // The receive side still works.
    b.mem.write(0, b"still listening?");
    one(
        &mut net,
        b,
        qb,
        ud_send(3, vec![sge(b, 0, 16)], a, qa, QKEY),
    );
    let ca = completions(&mut net, a);
    assert_eq!(
        (ca[0].wr_id, ca[0].status, ca[0].byte_len),
        (7, WcStatus::Success, 40 + 16)
    );
    assert_eq!(&a.mem.snapshot()[8192 + 40..8192 + 56], b"still listening?");
    // New sends are flushed in SQE...
    net.engines[a.idx]
        .post_send(qa, ud_send(4, vec![sge(a, 0, 10)], b, qb, QKEY))
        .unwrap();
    assert_eq!(
        ids_and_statuses(&completions(&mut net, a)),
        vec![(4, WcStatus::WrFlushErr)]
    );
    // ... until SQE->RTS.
    let rts = QpAttr {
        state: QpState::Rts,
        ..QpAttr::default()
    };
    net.engines[a.idx]
        .modify_qp(qa, &rts, QpAttrMask::STATE)
        .unwrap();
    post_recv(&mut net, b, qb, 8, vec![sge(b, 0, 140)]);
    let c = one(
        &mut net,
        a,
        qa,
        ud_send(5, vec![sge(a, 0, 10)], b, qb, QKEY),
    );
    assert_eq!(c.status, WcStatus::Success);
    assert_eq!(completions(&mut net, b)[0].wr_id, 8);
}

#[test]
fn failed_uc_send_moves_the_qp_to_sqe_where_receives_keep_working() {
    let (mut net, nodes) = network(509, Faults::none(), 2, 1 << 16);
    let (a, b) = (&nodes[0], &nodes[1]);
    let uc = ConnParams {
        qp_type: QpType::Uc,
        ..ConnParams::default()
    };
    let (qa, qb) = connect(&mut net, a, b, &uc);
    post_recv(&mut net, a, qa, 7, vec![sge(a, 8192, 64)]);
    let mut bad = sge(a, 0, 8);
    bad.lkey ^= 0x5500;
    let c = one(&mut net, a, qa, send(1, vec![bad]));
    assert_eq!(c.status, WcStatus::LocProtErr);
    assert_eq!(state(&net, a, qa), QpState::Sqe);
    b.mem.write(0, b"uc data");
    assert_eq!(
        one(&mut net, b, qb, send(2, vec![sge(b, 0, 7)])).status,
        WcStatus::Success
    );
    let ca = completions(&mut net, a);
    assert_eq!(ids_and_statuses(&ca), vec![(7, WcStatus::Success)]);
    assert_eq!(&a.mem.snapshot()[8192..8199], b"uc data");
}

// ---------------------------------------------------------------------------
// 6. Counters
// ---------------------------------------------------------------------------

#[test]
fn lost_request_packet_counts_sequence_errors_and_retransmissions_exactly() {
    let (mut net, nodes) = network(601, Faults::none(), 2, 1 << 16);
    let (a, b) = (&nodes[0], &nodes[1]);
    let (qa, qb) = connect(&mut net, a, b, &ConnParams::default());
    let data = pattern(4096, 3);
    a.mem.write(0, &data);
    net.engines[a.idx]
        .post_send(qa, write(1, vec![sge(a, 0, 4096)], IOVA + 8192, b.mr.rkey))
        .unwrap();
    let now = net.now();
    // Four 1024-byte packets; the second is lost.
    let reqs = pull(&mut net, a.idx, now);
    assert_eq!(reqs.len(), 4);
    for (k, t) in reqs.iter().enumerate() {
        if k != 1 {
            push(&mut net, now, t);
        }
    }
    let bq = net.engines[b.idx].qp_counters(qb).unwrap().clone();
    assert_eq!(bq.out_of_seq_request, 2, "packets 3 and 4");
    assert_eq!(bq.send_seq_err, 1, "one NAK per gap");
    assert_eq!(bq.dropped_for(DropReason::Sequence), 1);
    assert_eq!(bq.duplicate_request, 0);
    // B answers with one PSN sequence error NAK for packet 2.
    let resp = pull(&mut net, b.idx, now);
    assert_eq!(resp.len(), 1);
    assert_eq!(opcode(&resp[0]), Opcode::RC_ACKNOWLEDGE);
    assert_eq!(bth_psn(&resp[0]), bth_psn(&reqs[1]));
    push(&mut net, now, &resp[0]);
    assert_eq!(net.engines[a.idx].counters().rcvd_seq_err, 1);
    // A goes back to packet 2: three retransmissions.
    let again = pull(&mut net, a.idx, now);
    assert_eq!(
        again.iter().map(bth_psn).collect::<Vec<_>>(),
        reqs[1..].iter().map(bth_psn).collect::<Vec<_>>()
    );
    for t in &again {
        push(&mut net, now, t);
    }
    let resp = pull(&mut net, b.idx, now);
    for t in &resp {
        push(&mut net, now, t);
    }
    assert_eq!(
        ids_and_statuses(&completions(&mut net, a)),
        vec![(1, WcStatus::Success)]
    );
    assert_eq!(&b.mem.snapshot()[8192..8192 + 4096], &data[..]);
    let ac = net.engines[a.idx].qp_counters(qa).unwrap();
    assert_eq!((ac.sent_pkts, ac.retransmitted_pkts), (7, 3));
    assert_eq!(ac.retry_timeouts, 0);
    let bq = net.engines[b.idx].qp_counters(qb).unwrap();
    assert_eq!(
        (bq.out_of_seq_request, bq.send_seq_err, bq.duplicate_request),
        (2, 1, 0)
    );
}

#[test]
fn lost_ack_counts_a_timeout_a_retransmission_and_a_duplicate() {
    let (mut net, nodes) = network(602, Faults::none(), 2, 1 << 16);
    let (a, b) = (&nodes[0], &nodes[1]);
    let (qa, qb) = connect(&mut net, a, b, &ConnParams::default());
    net.engines[a.idx]
        .post_send(qa, write(1, vec![sge(a, 0, 100)], IOVA, b.mr.rkey))
        .unwrap();
    let now = net.now();
    let reqs = pull(&mut net, a.idx, now);
    assert_eq!(reqs.len(), 1);
    push(&mut net, now, &reqs[0]);
    let acks = pull(&mut net, b.idx, now);
    assert_eq!(acks.len(), 1, "the ACK, which is lost");
    let deadline = net.engines[a.idx].next_timeout().expect("transport timer");
    net.engines[a.idx].handle_timeout(deadline);
    let again = pull(&mut net, a.idx, deadline);
    assert_eq!(again.len(), 1);
    assert_eq!(bth_psn(&again[0]), bth_psn(&reqs[0]));
    push(&mut net, deadline, &again[0]);
    // B re-acknowledges the duplicate without executing it again.
    let acks = pull(&mut net, b.idx, deadline);
    assert_eq!(acks.len(), 1);
    push(&mut net, deadline, &acks[0]);
    assert_eq!(
        ids_and_statuses(&completions(&mut net, a)),
        vec![(1, WcStatus::Success)]
    );
    let ac = net.engines[a.idx].qp_counters(qa).unwrap();
    assert_eq!(
        (ac.retry_timeouts, ac.retransmitted_pkts, ac.rcvd_seq_err),
        (1, 1, 0)
    );
    let bq = net.engines[b.idx].qp_counters(qb).unwrap();
    assert_eq!(
        (bq.duplicate_request, bq.out_of_seq_request, bq.send_seq_err),
        (1, 0, 0)
    );
}

#[test]
fn counters_under_random_loss_agree_with_the_network() {
    for loss in [0.0, 0.1] {
        let faults = Faults {
            loss,
            ..Faults::none()
        };
        let (mut net, nodes) = network(603, faults, 2, 1 << 20);
        let (a, b) = (&nodes[0], &nodes[1]);
        let mtu = 1024u64;
        let (qa, qb) = connect(&mut net, a, b, &ConnParams::default());
        let mut first_transmissions = 0;
        for k in 0..40u64 {
            let len = 500 + 997 * (k % 9);
            first_transmissions += len.div_ceil(mtu);
            net.engines[a.idx]
                .post_send(
                    qa,
                    write(k, vec![sge(a, 0, len as u32)], IOVA + 8192 * k, b.mr.rkey),
                )
                .unwrap();
        }
        net.run(Duration::from_secs(10));
        let ca = completions(&mut net, a);
        assert_eq!(ca.len(), 40);
        assert!(ca.iter().all(|c| c.status == WcStatus::Success));
        let ac = net.engines[a.idx].qp_counters(qa).unwrap();
        let bc = net.engines[b.idx].qp_counters(qb).unwrap();
        let s = &net.stats;
        // Every packet is accounted for.
        assert_eq!(
            net.engines[a.idx].counters().sent_pkts + net.engines[b.idx].counters().sent_pkts,
            s.sent
        );
        assert_eq!(
            net.engines[a.idx].counters().rcvd_pkts + net.engines[b.idx].counters().rcvd_pkts,
            s.delivered
        );
        assert_eq!(s.sent, s.delivered + s.lost);
        // A sends only requests: each packet once, plus its retransmissions.
        assert_eq!(ac.sent_pkts - ac.retransmitted_pkts, first_transmissions);
        // One sequence NAK per gap at most; some of them may be lost.
        assert!(bc.send_seq_err <= bc.out_of_seq_request);
        assert!(ac.rcvd_seq_err <= bc.send_seq_err);
        // Without duplication in the network, duplicates are retransmissions.
        assert!(bc.duplicate_request <= ac.retransmitted_pkts);
        if loss == 0.0 {
            assert_eq!(s.lost, 0);
            assert_eq!(
                (
                    ac.retransmitted_pkts,
                    ac.rcvd_seq_err,
                    ac.retry_timeouts,
                    bc.duplicate_request,
                    bc.out_of_seq_request,
                    bc.send_seq_err
                ),
                (0, 0, 0, 0, 0, 0)
            );
        } else {
            assert!(s.lost > 0);
            assert!(ac.retransmitted_pkts > 0);
            assert!(bc.out_of_seq_request > 0, "lost requests leave gaps");
            assert!(bc.send_seq_err > 0 && ac.rcvd_seq_err > 0);
            assert!(
                ac.retransmitted_pkts > bc.duplicate_request,
                "some retransmissions filled gaps"
            );
        }
    }
}

#[test]
fn corrupted_packets_are_dropped_as_icrc_errors() {
    let (mut net, nodes) = network(604, Faults::none(), 2, 1 << 16);
    let (a, b) = (&nodes[0], &nodes[1]);
    let (qa, _) = connect(&mut net, a, b, &ConnParams::default());
    let data = pattern(4096, 5);
    a.mem.write(0, &data);
    net.engines[a.idx]
        .post_send(qa, write(1, vec![sge(a, 0, 4096)], IOVA + 4096, b.mr.rkey))
        .unwrap();
    // The four packets of the first transmission each get one flipped bit.
    net.faults.corrupt = 1.0;
    net.flush();
    net.faults.corrupt = 0.0;
    assert_eq!(net.stats.corrupted, 4);
    run(&mut net);
    assert_eq!(
        ids_and_statuses(&completions(&mut net, a)),
        vec![(1, WcStatus::Success)]
    );
    assert_eq!(&b.mem.snapshot()[4096..8192], &data[..]);
    let bc = net.engines[b.idx].counters();
    // (A flip in the few bits the ICRC does not cover, such as BTH byte 4,
    // would not be caught; this seed flips covered bits only.)
    assert_eq!(bc.dropped_for(DropReason::IcrcError), 4);
    assert_eq!(bc.dropped(), 4, "nothing else was dropped");
    assert!(
        net.engines[a.idx].counters().retry_timeouts >= 1,
        "recovered by the timer"
    );
}

#[test]
fn packet_for_an_unknown_qp_is_counted_and_ignored() {
    let (mut net, nodes) = network(605, Faults::none(), 2, 1 << 16);
    let (a, b) = (&nodes[0], &nodes[1]);
    let (qa, qb) = connect(&mut net, a, b, &ConnParams::default());
    net.engines[a.idx]
        .post_send(qa, write(1, vec![sge(a, 0, 8)], IOVA, b.mr.rkey))
        .unwrap();
    let now = net.now();
    let mut t = pull(&mut net, a.idx, now).remove(0);
    // QP numbers are drawn below 0xFFFFF0.
    let unknown = 0x00ff_fff5u32;
    t.payload[5..8].copy_from_slice(&unknown.to_be_bytes()[1..]);
    let before = b.mem.snapshot();
    let m = RecvMeta {
        icrc: IcrcStatus::Unverified,
        ..meta(&t)
    };
    net.engines[b.idx].handle_datagram(now, m, &t.payload);
    let bc = net.engines[b.idx].counters();
    assert_eq!(bc.rcvd_pkts, 1);
    assert_eq!(bc.dropped_for(DropReason::UnknownQp), 1);
    assert_eq!(bc.dropped(), 1);
    assert_eq!(net.engines[b.idx].qp_counters(qb).unwrap().rcvd_pkts, 0);
    assert!(pull(&mut net, b.idx, now).is_empty(), "no answer");
    assert_eq!(b.mem.snapshot(), before);
}

#[test]
fn packet_from_the_wrong_source_address_is_counted_and_ignored() {
    let (mut net, nodes) = network(606, Faults::none(), 2, 1 << 16);
    let (a, b) = (&nodes[0], &nodes[1]);
    let (qa, qb) = connect(&mut net, a, b, &ConnParams::default());
    a.mem.write(0, &[9; 8]);
    net.engines[a.idx]
        .post_send(qa, write(1, vec![sge(a, 0, 8)], IOVA, b.mr.rkey))
        .unwrap();
    let now = net.now();
    let t = pull(&mut net, a.idx, now).remove(0);
    let before = b.mem.snapshot();
    let epsn = net.engines[b.idx].query_qp(qb).unwrap().0.rq_psn;
    let m = RecvMeta {
        src: IpAddr::V4(Ipv4Addr::new(127, 0, 0, 99)),
        ..meta(&t)
    };
    net.engines[b.idx].handle_datagram(now, m, &t.payload);
    assert_eq!(
        net.engines[b.idx]
            .qp_counters(qb)
            .unwrap()
            .dropped_for(DropReason::WrongSource),
        1
    );
    assert_eq!(
        net.engines[b.idx]
            .counters()
            .dropped_for(DropReason::WrongSource),
        1
    );
    assert!(pull(&mut net, b.idx, now).is_empty(), "no answer");
    assert_eq!(b.mem.snapshot(), before);
    assert_eq!(net.engines[b.idx].query_qp(qb).unwrap().0.rq_psn, epsn);
    // The same packet from the right address is executed.
    push(&mut net, now, &t);
    assert_eq!(&b.mem.snapshot()[..8], &[9; 8]);
}

// ---------------------------------------------------------------------------
// 7. Edge cases
// ---------------------------------------------------------------------------

#[test]
fn zero_length_send_and_read_complete() {
    let (mut net, nodes) = network(701, Faults::none(), 2, 1 << 16);
    let (a, b) = (&nodes[0], &nodes[1]);
    let (qa, qb) = connect(&mut net, a, b, &ConnParams::default());
    post_recv(&mut net, b, qb, 5, vec![sge(b, 0, 64)]);
    let log = tap(&mut net);
    let c = one(&mut net, a, qa, send(1, vec![]));
    assert_eq!((c.status, c.byte_len), (WcStatus::Success, 0));
    let cb = completions(&mut net, b);
    assert_eq!(
        (cb[0].wr_id, cb[0].status, cb[0].byte_len),
        (5, WcStatus::Success, 0)
    );
    let before = a.mem.snapshot();
    let c = one(&mut net, a, qa, read(2, vec![], IOVA, b.mr.rkey));
    assert_eq!(
        (c.status, c.opcode, c.byte_len),
        (WcStatus::Success, WcOpcode::RdmaRead, 0)
    );
    assert_eq!(a.mem.snapshot(), before);
    let ops: Vec<Opcode> = logged(&log).iter().map(|(_, t)| opcode(t)).collect();
    assert_eq!(
        ops,
        vec![
            Opcode::RC_SEND_ONLY,
            Opcode::RC_ACKNOWLEDGE,
            Opcode::RC_RDMA_READ_REQUEST,
            Opcode::RC_RDMA_READ_RESPONSE_ONLY
        ]
    );
    // A zero-length SGE is fine too, and so is a zero-length WRITE.
    post_recv(&mut net, b, qb, 6, vec![sge(b, 0, 64)]);
    assert_eq!(
        one(&mut net, a, qa, send(3, vec![sge(a, 0, 0)])).status,
        WcStatus::Success
    );
    assert_eq!(completions(&mut net, b)[0].byte_len, 0);
    assert_eq!(
        one(&mut net, a, qa, write(4, vec![], IOVA, b.mr.rkey)).status,
        WcStatus::Success
    );
}

#[test]
fn read_scatters_into_two_sges() {
    let (mut net, nodes) = network(702, Faults::none(), 2, 1 << 16);
    let (a, b) = (&nodes[0], &nodes[1]);
    let p = ConnParams {
        mtu: Mtu::Mtu256,
        ..ConnParams::default()
    };
    let (qa, _) = connect(&mut net, a, b, &p);
    let data = pattern(1000, 6);
    b.mem.write(2000, &data);
    a.mem.write(0, &[0xcc; 8192]);
    // 300 + 700 bytes, the split inside the second response packet.
    let c = one(
        &mut net,
        a,
        qa,
        read(
            1,
            vec![sge(a, 100, 300), sge(a, 5000, 700)],
            IOVA + 2000,
            b.mr.rkey,
        ),
    );
    assert_eq!((c.status, c.byte_len), (WcStatus::Success, 1000));
    let snap = a.mem.snapshot();
    assert_eq!(&snap[100..400], &data[..300]);
    assert_eq!(&snap[5000..5700], &data[300..]);
    assert_eq!(
        (snap[99], snap[400], snap[4999], snap[5700]),
        (0xcc, 0xcc, 0xcc, 0xcc)
    );
}

#[test]
fn send_gathers_three_sges_and_scatters_into_two() {
    let (mut net, nodes) = network(703, Faults::none(), 2, 1 << 16);
    let (a, b) = (&nodes[0], &nodes[1]);
    let p = ConnParams {
        mtu: Mtu::Mtu256,
        ..ConnParams::default()
    };
    let (qa, qb) = connect(&mut net, a, b, &p);
    let parts = [pattern(100, 1), pattern(300, 2), pattern(77, 3)];
    a.mem.write(0, &parts[0]);
    a.mem.write(4096, &parts[1]);
    a.mem.write(9000, &parts[2]);
    b.mem.write(0, &[0xcc; 16384]);
    post_recv(
        &mut net,
        b,
        qb,
        5,
        vec![sge(b, 1000, 200), sge(b, 8000, 400)],
    );
    let c = one(
        &mut net,
        a,
        qa,
        send(1, vec![sge(a, 0, 100), sge(a, 4096, 300), sge(a, 9000, 77)]),
    );
    assert_eq!((c.status, c.byte_len), (WcStatus::Success, 477));
    let cb = completions(&mut net, b);
    assert_eq!((cb[0].status, cb[0].byte_len), (WcStatus::Success, 477));
    let msg: Vec<u8> = parts.concat();
    let snap = b.mem.snapshot();
    assert_eq!(&snap[1000..1200], &msg[..200]);
    assert_eq!(&snap[8000..8277], &msg[200..]);
    assert_eq!((snap[999], snap[1200], snap[8277]), (0xcc, 0xcc, 0xcc));
}

#[test]
fn psns_wrap_past_0xffffff_in_the_middle_of_messages() {
    for loss in [0.0, 0.15] {
        let faults = Faults {
            loss,
            ..Faults::none()
        };
        let (mut net, nodes) = network(704, faults, 2, 1 << 16);
        let (a, b) = (&nodes[0], &nodes[1]);
        let p = ConnParams {
            mtu: Mtu::Mtu256,
            psn_a: Psn::new(0xff_fffe),
            psn_b: Psn::new(0xff_fffd),
            ..ConnParams::default()
        };
        let (qa, qb) = connect(&mut net, a, b, &p);
        let log = tap(&mut net);
        // A: SEND, WRITE and READ of 5 packets each, starting 2 PSNs before the wrap.
        let msg = pattern(1200, 7);
        a.mem.write(0, &msg);
        b.mem.write(20000, &msg);
        post_recv(&mut net, b, qb, 5, vec![sge(b, 0, 2000)]);
        let e = &mut net.engines[a.idx];
        e.post_send(qa, send(1, vec![sge(a, 0, 1200)])).unwrap();
        e.post_send(qa, write(2, vec![sge(a, 0, 1200)], IOVA + 4096, b.mr.rkey))
            .unwrap();
        e.post_send(
            qa,
            read(3, vec![sge(a, 8192, 1200)], IOVA + 20000, b.mr.rkey),
        )
        .unwrap();
        // B: a SEND across its own wrap, 3 PSNs before it.
        post_recv(&mut net, a, qa, 6, vec![sge(a, 12000, 2000)]);
        net.engines[b.idx]
            .post_send(qb, send(4, vec![sge(b, 20000, 1200)]))
            .unwrap();
        net.run(Duration::from_secs(10));
        let mut ca = completions(&mut net, a);
        ca.sort_by_key(|c| c.wr_id);
        assert_eq!(
            ids_and_statuses(&ca),
            vec![
                (1, WcStatus::Success),
                (2, WcStatus::Success),
                (3, WcStatus::Success),
                (6, WcStatus::Success)
            ],
            "loss {loss}"
        );
        let mut cb = completions(&mut net, b);
        cb.sort_by_key(|c| c.wr_id);
        assert_eq!(
            ids_and_statuses(&cb),
            vec![(4, WcStatus::Success), (5, WcStatus::Success)]
        );
        let sa = a.mem.snapshot();
        let sb = b.mem.snapshot();
        assert_eq!(&sb[..1200], &msg[..]);
        assert_eq!(&sb[4096..4096 + 1200], &msg[..]);
        assert_eq!(&sa[8192..8192 + 1200], &msg[..]);
        assert_eq!(&sa[12000..12000 + 1200], &msg[..]);
        let (qa_attr, _) = net.engines[a.idx].query_qp(qa).unwrap();
        // 5 + 5 + 5 PSNs from 0xFFFFFE.
        assert_eq!(qa_attr.sq_psn, Psn::new(0xff_fffe).add(15));
        assert_eq!(qa_attr.sq_psn.value(), 13);
        if loss == 0.0 {
            // First transmissions, in order, across the wrap.
            let a_reqs: Vec<(Opcode, u32)> = logged(&log)
                .iter()
                .filter(|(_, t)| t.src == a.addr && opcode(t) != Opcode::RC_ACKNOWLEDGE)
                .map(|(_, t)| (opcode(t), bth_psn(t)))
                .collect();
            use Opcode as O;
            assert_eq!(
                a_reqs,
                vec![
                    (O::RC_SEND_FIRST, 0xff_fffe),
                    (O::RC_SEND_MIDDLE, 0xff_ffff),
                    (O::RC_SEND_MIDDLE, 0),
                    (O::RC_SEND_MIDDLE, 1),
                    (O::RC_SEND_LAST, 2),
                    (O::RC_RDMA_WRITE_FIRST, 3),
                    (O::RC_RDMA_WRITE_MIDDLE, 4),
                    (O::RC_RDMA_WRITE_MIDDLE, 5),
                    (O::RC_RDMA_WRITE_MIDDLE, 6),
                    (O::RC_RDMA_WRITE_LAST, 7),
                    (O::RC_RDMA_READ_REQUEST, 8),
                ]
            );
            let b_sends: Vec<u32> = logged(&log)
                .iter()
                .filter(|(_, t)| t.src == b.addr && opcode(t).0 <= 0x04)
                .map(|(_, t)| bth_psn(t))
                .collect();
            assert_eq!(b_sends, vec![0xff_fffd, 0xff_fffe, 0xff_ffff, 0, 1]);
        } else {
            assert!(net.stats.lost > 0);
        }
    }
}

/// A device that shares its address (a QP-number prefix, as every soft
/// device on a UDP socket has) owns 65536 numbers, fewer than `max_qp`
/// allows. Once they are all taken, creating one more QP is an error, not
/// a search that never ends; a number set free is found again at once.
#[test]
fn a_full_qp_number_range_is_an_error_not_a_hang() {
    use rxe_core::engine::{Engine, EngineConfig};
    let mut cfg = EngineConfig::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), 7);
    cfg.qpn_prefix = Some(0);
    let mut e = Engine::new(cfg);
    let pd = e.alloc_pd();
    let cq = e.create_cq(16).unwrap();
    let init = QpInit {
        qp_type: QpType::Ud,
        pd,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap: QpCap {
            max_send_wr: 1,
            max_recv_wr: 1,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        sq_sig_all: false,
    };
    // Prefix 0: 0x10..=0xffff, QP 0 and 1 and their neighbours kept clear.
    let room = 0x1_0000 - 0x10;
    let mut qpns = Vec::with_capacity(room);
    for _ in 0..room {
        qpns.push(e.create_qp(init).expect("a number is free"));
    }
    assert!(qpns.iter().all(|&q| (0x10..0x1_0000).contains(&q)));
    assert!(matches!(
        e.create_qp(init),
        Err(EngineError::QueueFull { .. })
    ));
    e.destroy_qp(qpns[1234]).unwrap();
    assert_eq!(e.create_qp(init), Ok(qpns[1234]));
}
