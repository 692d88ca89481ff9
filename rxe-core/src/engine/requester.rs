//! The requester: turning send work requests into packets (segmentation
//! into path-MTU packets, PSN assignment, AckReq). What comes back (ACKs,
//! NAKs, READ and atomic responses, the transport timer) is the
//! completer's ([`super::completer`]).
//!
//! PSNs are assigned when a WQE starts: a SEND or WRITE of `n` packets takes
//! `n` PSNs, a READ takes one PSN per response packet it will get back, an
//! atomic one. A retransmission reuses the same PSNs, so "go back to PSN p"
//! means: find the WQE whose range holds `p` and send again from there.
//!
//! A long READ is asked for in **chunks**: one READ request per
//! `read_chunk` response packets (half the send window), a chunk asked for
//! only when its responses fit in the window and the responder's resources
//! (`max_rd_atomic` requests outstanding). Without that, one 8 MiB READ made
//! the responder send 2048 packets at once; a receiver slower than the
//! sender lost most of them to its socket buffer, and each retry recovered
//! about one buffer's worth, until the retries ran out (RETRY_EXC_ERR). Each
//! chunk is an ordinary READ request on the wire (RETH with the chunk's
//! address and length, PSN of its first response), as any responder serves.

use super::qp::{Qp, DEFAULT_PKEY};
use super::send_queue::SendWqe;
use super::slices::{gather, Slices};
use super::timers::ack_timeout;
use super::txpool::BuildError;
use super::{Ctx, Transmit};
use crate::types::*;
use crate::wire::{
    AtomicEthRepr, BthRepr, DethRepr, FethRepr, Opcode, PacketRepr, Position, RethRepr,
};

/// What starting a WQE found it to be.
enum Started {
    /// A local operation, done once started: it sends nothing.
    Local,
    /// A request with packets to send.
    Sends,
}

fn wc_opcode(op: SendOpcode) -> WcOpcode {
    match op {
        SendOpcode::Send | SendOpcode::SendWithImm | SendOpcode::SendWithInv => WcOpcode::Send,
        SendOpcode::RdmaWrite | SendOpcode::RdmaWriteWithImm => WcOpcode::RdmaWrite,
        SendOpcode::RdmaRead => WcOpcode::RdmaRead,
        SendOpcode::AtomicCmpSwap => WcOpcode::CompSwap,
        SendOpcode::AtomicFetchAdd => WcOpcode::FetchAdd,
        SendOpcode::AtomicWrite => WcOpcode::AtomicWrite,
        SendOpcode::Flush => WcOpcode::Flush,
        SendOpcode::LocalInv => WcOpcode::LocalInv,
        SendOpcode::BindMw => WcOpcode::BindMw,
    }
}

/// The wire opcode for packet `k` of `n` of a message.
fn opcode_for(qp_type: QpType, op: SendOpcode, k: u32, n: u32) -> Opcode {
    let pos = match (k, n) {
        (_, 1) => Position::Only,
        (0, _) => Position::First,
        (k, n) if k + 1 == n => Position::Last,
        _ => Position::Middle,
    };
    use Position::*;
    use SendOpcode as S;
    let rc = match (op, pos) {
        (S::Send | S::SendWithImm | S::SendWithInv, First) => Opcode::RC_SEND_FIRST,
        (S::Send | S::SendWithImm | S::SendWithInv, Middle) => Opcode::RC_SEND_MIDDLE,
        (S::Send, Last) => Opcode::RC_SEND_LAST,
        (S::Send, Only) => Opcode::RC_SEND_ONLY,
        (S::SendWithImm, Last) => Opcode::RC_SEND_LAST_WITH_IMMEDIATE,
        (S::SendWithImm, Only) => Opcode::RC_SEND_ONLY_WITH_IMMEDIATE,
        (S::SendWithInv, Last) => Opcode::RC_SEND_LAST_WITH_INVALIDATE,
        (S::SendWithInv, Only) => Opcode::RC_SEND_ONLY_WITH_INVALIDATE,
        (S::RdmaWrite | S::RdmaWriteWithImm, First) => Opcode::RC_RDMA_WRITE_FIRST,
        (S::RdmaWrite | S::RdmaWriteWithImm, Middle) => Opcode::RC_RDMA_WRITE_MIDDLE,
        (S::RdmaWrite, Last) => Opcode::RC_RDMA_WRITE_LAST,
        (S::RdmaWrite, Only) => Opcode::RC_RDMA_WRITE_ONLY,
        (S::RdmaWriteWithImm, Last) => Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
        (S::RdmaWriteWithImm, Only) => Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
        (S::RdmaRead, _) => Opcode::RC_RDMA_READ_REQUEST,
        (S::AtomicCmpSwap, _) => Opcode::RC_COMPARE_SWAP,
        (S::AtomicFetchAdd, _) => Opcode::RC_FETCH_ADD,
        (S::AtomicWrite, _) => Opcode::RC_ATOMIC_WRITE,
        (S::Flush, _) => Opcode::RC_FLUSH,
        // Local operations send no packets: an opcode no table row has.
        (S::LocalInv | S::BindMw, _) => Opcode(0x1f),
    };
    match qp_type {
        QpType::Rc => rc,
        // UC opcodes are the RC ones plus 0x20 (no READ, atomics or invalidate on UC).
        QpType::Uc => Opcode(rc.0 | 0x20),
        QpType::Ud => {
            if op == S::SendWithImm {
                Opcode::UD_SEND_ONLY_WITH_IMMEDIATE
            } else {
                Opcode::UD_SEND_ONLY
            }
        }
    }
}

impl Qp {
    /// Queues a send WQE (already checked by `check_post_send`).
    pub fn post_send(&mut self, ctx: &mut Ctx<'_>, wr: SendWr) {
        self.queue_wqe(ctx, wr);
    }

    /// [`Qp::post_send`] of a borrowed request, copied field by field
    /// into the new WQE (its list into one from the pool).
    pub fn post_send_ref(&mut self, ctx: &mut Ctx<'_>, wr: &SendWr) {
        let owned = SendWr {
            wr_id: wr.wr_id,
            opcode: wr.opcode,
            flags: wr.flags,
            sg_list: ctx.pool.copy_sges(&wr.sg_list),
            inline_data: wr.inline_data.clone(),
            imm_data: wr.imm_data,
            invalidate_rkey: wr.invalidate_rkey,
            remote_addr: wr.remote_addr,
            rkey: wr.rkey,
            compare_add: wr.compare_add,
            swap: wr.swap,
            ud: wr.ud,
            bind: wr.bind,
            flush: wr.flush,
        };
        self.queue_wqe(ctx, owned);
    }

    /// Puts `wr` on the send queue. Inlined into both callers so that the
    /// request is built where the new WQE is (a `SendWqe` is about 230
    /// bytes: each move of it by value was a `memcpy`, three per post).
    #[inline(always)]
    fn queue_wqe(&mut self, ctx: &mut Ctx<'_>, wr: SendWr) {
        // In SQE (UC/UD after a failed send) the send queue is in error too:
        // new work is flushed until SQE->RTS.
        let flushed = matches!(self.state, QpState::Err | QpState::Sqe);
        self.req.sq.push_back(SendWqe {
            wr,
            len: 0,
            npkts: 0,
            first_psn: self.req.psn,
            started: false,
            done: flushed.then_some(WcStatus::WrFlushErr),
            slices: Slices::Empty,
            read_rcvd: 0,
            read_chunk: 0,
        });
        if flushed {
            self.retire(ctx);
        }
    }

    /// Completes the finished WQEs at the head of the send queue, in order,
    /// and drops them. They are completed where they lie and dropped
    /// together (popping them one by one moved each WQE's ~230 bytes out
    /// of the queue only to drop them).
    pub fn retire(&mut self, ctx: &mut Ctx<'_>) {
        let mut n = 0;
        for w in self.req.sq.iter_mut() {
            let Some(status) = w.done else {
                break;
            };
            n += 1;
            ctx.pool.give_sges(std::mem::take(&mut w.wr.sg_list));
            let signaled = self.sq_sig_all || w.wr.flags.contains(SendFlags::SIGNALED);
            if signaled || status != WcStatus::Success {
                let c = Completion {
                    wr_id: w.wr.wr_id,
                    status,
                    opcode: wc_opcode(w.wr.opcode),
                    qp_num: self.qpn,
                    byte_len: w.len as u32,
                    imm_data: None,
                    invalidated_rkey: None,
                    src_qp: 0,
                    grh: false,
                    pkey_index: 0,
                };
                ctx.complete(self.send_cq, c, false);
            }
            match status {
                WcStatus::RetryExcErr => {
                    self.counters.retry_exceeded_err += 1;
                    ctx.counters.retry_exceeded_err += 1;
                }
                WcStatus::RnrRetryExcErr => {
                    self.counters.retry_rnr_exceeded_err += 1;
                    ctx.counters.retry_rnr_exceeded_err += 1;
                }
                _ => {}
            }
        }
        if n > 0 {
            // One WQE (each ACK of a latency test) pops for less than a
            // drain costs to set up; a burst's worth drains in one go.
            if n == 1 {
                self.req.sq.pop_front();
            } else {
                self.req.sq.drain(..n);
            }
            if self.req.next < n {
                // The send cursor was inside a WQE that just finished (a
                // go-back into a READ whose missing responses then came in
                // before the READ was asked again): it moves to the start
                // of the next WQE. Keeping `next_pkt` sent the next WQE
                // from the middle, past its end for a short one (found by
                // the `requester` fuzz target: a slice index out of range
                // on inline data).
                self.req.next = 0;
                self.req.next_pkt = 0;
            } else {
                self.req.next -= n;
            }
        }
        if self.state == QpState::Sqd && !self.req.sqd_notified && !self.req.anything_outstanding()
        {
            self.req.sqd_notified = true;
            if self.attr.en_sqd_async_notify {
                ctx.events.push_back(super::AsyncEvent::SqDrained(self.qpn));
            }
        }
    }

    /// Fails WQE `i` with `status` and takes the QP to ERR.
    pub(super) fn fail(&mut self, ctx: &mut Ctx<'_>, i: usize, status: WcStatus) {
        if let Some(w) = self.req.sq.get_mut(i) {
            w.done = Some(status);
        }
        // Everything before it finished (that is how we got here).
        for w in self.req.sq.iter_mut().take(i) {
            if w.done.is_none() {
                w.done = Some(WcStatus::WrFlushErr);
            }
        }
        if self.qp_type != QpType::Rc {
            // UC and UD: a send completing in error takes only the send queue
            // down (IBTA 10.3.1 SQEr; the RTS->SQE edge of state.rs): the rest
            // of the send queue is flushed, receives go on, no QP_FATAL, and
            // SQE->RTS resumes sending. Before, this took UC/UD QPs to ERR
            // like RC, flushing the receive queue too.
            self.state = QpState::Sqe;
            for w in self.req.sq.iter_mut() {
                if w.done.is_none() {
                    w.done = Some(WcStatus::WrFlushErr);
                }
            }
            self.retire(ctx);
            return;
        }
        self.enter_error(ctx, true);
    }

    /// Validates a WQE's local memory and assigns its PSNs; a local
    /// operation (LOCAL_INV, BIND_MW) is carried out here.
    fn start(&mut self, ctx: &mut Ctx<'_>, i: usize) -> Result<Started, WcStatus> {
        let mtu = self.mtu() as u64;
        let pd = self.pd;
        let qpn = self.qpn;
        let qp_type = self.qp_type;
        let w = &mut self.req.sq[i];
        let need = if matches!(
            w.wr.opcode,
            SendOpcode::RdmaRead | SendOpcode::AtomicCmpSwap | SendOpcode::AtomicFetchAdd
        ) {
            Access::LOCAL_WRITE
        } else {
            Access::empty()
        };
        match w.wr.opcode {
            SendOpcode::LocalInv => {
                w.started = true;
                return ctx
                    .mem
                    .invalidate(pd, Some(qpn), w.wr.invalidate_rkey)
                    .map(|_| Started::Local)
                    .map_err(|_| WcStatus::LocProtErr);
            }
            SendOpcode::BindMw => {
                w.started = true;
                let bind = w.wr.bind.ok_or(WcStatus::MwBindErr)?;
                return ctx
                    .mem
                    .bind_mw(pd, qpn, &bind)
                    .map(|_| Started::Local)
                    .map_err(|_| WcStatus::MwBindErr);
            }
            _ => {}
        }
        if w.wr.opcode == SendOpcode::Flush {
            // One packet and no data: the length is the responder's range
            // (what the completion reports), not local memory.
            w.len = u64::from(w.wr.flush.len);
            w.npkts = 1;
            w.first_psn = self.req.psn;
            w.started = true;
            self.req.psn = self.req.psn.next();
            return Ok(Started::Sends);
        }
        let len = match &w.wr.inline_data {
            Some(d) => d.len() as u64,
            None => {
                // Resolved straight into the WQE (empty since it was posted:
                // a WQE starts once); a request that fails here keeps the
                // slices resolved so far until it retires, unused.
                debug_assert!(w.slices.is_empty(), "a WQE started twice");
                for s in &w.wr.sg_list {
                    match ctx.mem.local(pd, s.lkey, s.addr, u64::from(s.length), need) {
                        Ok(sl) => w.slices.push(sl),
                        Err(_) => return Err(WcStatus::LocProtErr),
                    }
                }
                w.wr.sg_list.iter().map(|s| u64::from(s.length)).sum()
            }
        };
        let is_atomic = matches!(
            w.wr.opcode,
            SendOpcode::AtomicCmpSwap | SendOpcode::AtomicFetchAdd
        );
        if is_atomic {
            if len < 8 {
                return Err(WcStatus::LocLenErr);
            }
            w.len = 8;
        } else if w.wr.opcode == SendOpcode::AtomicWrite {
            // Its payload is exactly the 8 bytes it stores.
            if len != 8 {
                return Err(WcStatus::LocLenErr);
            }
            w.len = 8;
        } else {
            if len > u64::from(ctx.config.caps.max_msg_size) {
                return Err(WcStatus::LocLenErr);
            }
            if qp_type == QpType::Ud && len > mtu {
                return Err(WcStatus::LocLenErr);
            }
            w.len = len;
        }
        w.npkts = if is_atomic {
            1
        } else {
            len.div_ceil(mtu).max(1) as u32
        };
        if w.wr.opcode == SendOpcode::RdmaRead {
            let window = ctx.config.max_unacked_psns.min(ctx.config.max_in_flight);
            w.read_chunk = (window / 2).max(1);
        }
        w.first_psn = self.req.psn;
        w.started = true;
        self.req.psn = self.req.psn.add(w.npkts);
        Ok(Started::Sends)
    }

    /// The next request packet, if the send queue has one ready.
    ///
    /// One packet's path looks the WQE at the cursor up once in each step:
    /// whether it may start ([`Qp::may_start`]), starting it, whether the
    /// send window has room for its next packet ([`Qp::window_open`]), and
    /// building that packet ([`Qp::build_request`]).
    pub fn requester_poll(&mut self, ctx: &mut Ctx<'_>) -> Option<Transmit> {
        if !matches!(self.state, QpState::Rts | QpState::Sqd) || self.req.rnr_until.is_some() {
            return None;
        }
        loop {
            let i = self.req.next;
            let w = self.req.sq.get(i)?;
            if !w.started {
                if !self.may_start(ctx, w, i) {
                    return None;
                }
                match self.start(ctx, i) {
                    Err(status) => {
                        self.fail(ctx, i, status);
                        return None;
                    }
                    Ok(Started::Local) => {
                        self.req.sq[i].done = Some(WcStatus::Success);
                        self.req.next += 1;
                        self.req.next_pkt = 0;
                        self.retire(ctx);
                        continue;
                    }
                    Ok(Started::Sends) => {}
                }
            } else if w.done.is_some() || self.req.next_pkt >= w.npkts {
                self.req.next += 1;
                self.req.next_pkt = 0;
                continue;
            }
            if self.qp_type == QpType::Rc && !self.window_open(ctx, i) {
                return None;
            }
            return self.build_request(ctx, i);
        }
    }

    /// Whether WQE `w` (index `i`, not started) may start now: not in SQD,
    /// within the responder's READ/atomic resources, after earlier READs
    /// and atomics for a fenced request, and (RC) with the send window not
    /// already full of earlier messages.
    fn may_start(&self, ctx: &Ctx<'_>, w: &SendWqe, i: usize) -> bool {
        if self.state == QpState::Sqd {
            return false;
        }
        let mtu = self.mtu() as u64;
        if w.is_rd_atomic()
            && self.req.rd_atomic_in_flight(i, mtu, false)
                >= usize::from(self.attr.max_rd_atomic.max(1))
        {
            return false;
        }
        if w.wr.flags.contains(SendFlags::FENCE) && self.req.rd_atomic_in_flight(i, mtu, false) > 0
        {
            return false;
        }
        if self.qp_type == QpType::Rc {
            if let Some(oldest) = self.req.oldest_unacked() {
                if oldest.distance_to(self.req.psn) >= ctx.config.max_unacked_psns {
                    return false;
                }
            }
        }
        true
    }

    /// RC: whether the packet at the cursor (in WQE `i`) may go now. When
    /// the device's budget holds it back, says so in `ctx.over_budget`.
    fn window_open(&self, ctx: &mut Ctx<'_>, i: usize) -> bool {
        // The send window counts packets, not messages: no more than
        // `max_unacked_psns` past the last acknowledged PSN, even inside
        // one long message (as the kernel's rxe limits itself to 128).
        let w = &self.req.sq[i];
        let cursor = w.first_psn.add(self.req.next_pkt);
        // After a timeout only the probe goes until the responder answers.
        if self.req.probe.is_some_and(|p| p != cursor) {
            return false;
        }
        let fresh = !cursor.is_before(self.req.sent_high);
        // A READ request asks for its whole chunk at once: all of it must
        // fit in the window, and the responder's resources must have room
        // for one more request.
        let last = if w.wr.opcode == SendOpcode::RdmaRead {
            if self.req.next_pkt > 0
                && fresh
                && self.req.rd_atomic_in_flight(i, self.mtu() as u64, true)
                    >= usize::from(self.attr.max_rd_atomic.max(1))
            {
                return false;
            }
            w.first_psn.add(w.chunk_end(self.req.next_pkt) - 1)
        } else {
            cursor
        };
        if self.req.acked.next().distance_to(last) >= ctx.config.max_unacked_psns {
            return false;
        }
        // ... and, for a packet not sent before, no more than the device's
        // budget over all its QPs (a retransmission takes the place of one
        // already counted).
        if fresh && ctx.in_flight >= ctx.config.max_in_flight {
            ctx.over_budget = true;
            return false;
        }
        true
    }

    /// Builds the packet at the cursor, in WQE `i`, and moves the cursor on.
    fn build_request(&mut self, ctx: &mut Ctx<'_>, i: usize) -> Option<Transmit> {
        let mtu = self.mtu() as u64;
        let k = self.req.next_pkt;
        let qp_type = self.qp_type;
        let w = &self.req.sq[i];
        let op = w.wr.opcode;
        let is_read = op == SendOpcode::RdmaRead;
        let opcode = opcode_for(qp_type, op, k, if is_read { 1 } else { w.npkts });
        let Some(info) = opcode.info() else {
            // A request this QP type cannot carry (post_send refuses them).
            self.fail(ctx, i, WcStatus::LocQpOpErr);
            return None;
        };
        let psn = w.first_psn.add(k);
        let offset = u64::from(k) * mtu;
        let is_last = k + 1 >= w.npkts;
        // Where the cursor goes next: a READ request asks for its chunk's
        // responses at once, anything else sends one packet.
        let next_pkt = if is_read { w.chunk_end(k) } else { k + 1 };
        let mut ack_req = false;
        if qp_type == QpType::Rc {
            self.req.since_ackreq += 1;
            // Every READ and atomic request asks for an answer, as the
            // kernel's rxe sets it.
            // Ask often enough that ACKs come back before the packet window
            // (max_unacked_psns) closes.
            let every = ctx
                .config
                .ack_every
                .min((ctx.config.max_unacked_psns / 2).max(1));
            // The last packet of the QP's turn asks too (the engine sets
            // `last_of_turn` when its burst ends with others waiting), and
            // a new packet that fills the device's budget, so that no
            // packet waits unacknowledged while the QP waits for its next
            // turn. So does the last packet of a resend: the budget may
            // hold the QP's next new packet back. A resent packet inside
            // the round does not ask because the budget is full: it takes
            // no room, the round goes on, and on a full budget every one
            // of them asking doubled the work of a peer already too slow
            // to acknowledge in time (every duplicate that asks gets its
            // own ACK).
            let ends_resend = psn.add(1) == self.req.sent_high;
            let fresh = !psn.is_before(self.req.sent_high);
            let fills_budget = fresh && ctx.in_flight + 1 >= ctx.config.max_in_flight;
            ack_req = is_last
                || self.req.probe.is_some()
                || w.is_rd_atomic()
                || ctx.last_of_turn
                || fills_budget
                || ends_resend
                || self.req.since_ackreq >= every;
            if ack_req {
                self.req.since_ackreq = 0;
            }
        }
        let bth = BthRepr {
            opcode,
            solicited: is_last && w.wr.flags.contains(SendFlags::SOLICITED),
            mig_req: false,
            pad_count: 0,
            pkey: DEFAULT_PKEY,
            fecn: false,
            becn: false,
            dest_qp: match &w.wr.ud {
                Some(ud) if qp_type == QpType::Ud => ud.remote_qpn,
                _ => self.attr.dest_qpn,
            },
            ack_req,
            psn,
        };
        let mut repr = PacketRepr::new(bth);
        if info.headers.contains(crate::wire::ExtHeaders::RETH) {
            let (va, len) = if is_read {
                let end = (u64::from(next_pkt) * mtu).min(w.len);
                (w.wr.remote_addr.wrapping_add(offset), end - offset)
            } else {
                (w.wr.remote_addr, w.len)
            };
            repr.reth = Some(RethRepr {
                va,
                rkey: w.wr.rkey,
                dma_len: len as u32,
            });
        }
        if info.headers.contains(crate::wire::ExtHeaders::FETH) {
            repr.feth = Some(FethRepr {
                selectivity: u8::from(w.wr.flush.whole_region),
                placement: w.wr.flush.placement,
            });
        }
        if info.headers.contains(crate::wire::ExtHeaders::ATOMIC_ETH) {
            let cmp_swap = op == SendOpcode::AtomicCmpSwap;
            repr.atomic_eth = Some(AtomicEthRepr {
                va: w.wr.remote_addr,
                rkey: w.wr.rkey,
                swap_add: if cmp_swap {
                    w.wr.swap
                } else {
                    w.wr.compare_add
                },
                compare: if cmp_swap { w.wr.compare_add } else { 0 },
            });
        }
        if info.has_immediate() {
            repr.immdt = Some(w.wr.imm_data);
        }
        if info.has_invalidate() {
            repr.ieth = Some(w.wr.invalidate_rkey);
        }
        let (src, dst, av) = match (&w.wr.ud, qp_type) {
            (Some(ud), QpType::Ud) => {
                let qkey = if ud.remote_qkey & 0x8000_0000 != 0 {
                    self.attr.qkey
                } else {
                    ud.remote_qkey
                };
                repr.deth = Some(DethRepr {
                    qkey,
                    src_qp: self.qpn,
                });
                let src = *ctx.config.gids.get(usize::from(ud.av.sgid_index))?;
                (src, ud.av.dest, Some(ud.av))
            }
            _ => {
                let (s, d) = self.path(ctx.config)?;
                (s, d, self.attr.av)
            }
        };
        // The payload goes straight from the inline data or the registered
        // memory into the packet buffer.
        let n = if info.payload && !is_read {
            (w.len - offset.min(w.len)).min(mtu) as usize
        } else {
            0
        };
        let t = match &w.wr.inline_data {
            Some(d) => {
                repr.payload = &d[offset as usize..offset as usize + n];
                ctx.pool
                    .build(self.src_port, &repr, src, dst, av.as_ref())
                    .ok_or(BuildError::Emit)
            }
            None => {
                let fill = |b: &mut [u8]| gather(&w.slices, offset, b);
                ctx.pool
                    .build_filled(self.src_port, &repr, src, dst, av.as_ref(), (n, fill))
            }
        };
        let t = match t {
            Ok(t) => t,
            Err(BuildError::Fill) => {
                self.fail(ctx, i, WcStatus::LocProtErr);
                return None;
            }
            Err(BuildError::Emit) => return None,
        };
        // A retransmission, not a first transmission (for the counters).
        let resent = qp_type == QpType::Rc && psn.is_before(self.req.sent_high);
        let first_psn = w.first_psn;
        // Advance the cursor.
        let w = &mut self.req.sq[i];
        self.req.next_pkt = next_pkt;
        if next_pkt >= w.npkts {
            self.req.next += 1;
            self.req.next_pkt = 0;
            if qp_type != QpType::Rc {
                // UC and UD complete once the last packet is on its way.
                w.done = Some(WcStatus::Success);
            }
        }
        if qp_type == QpType::Rc {
            if resent {
                self.counters.retransmitted_pkts += 1;
                ctx.counters.retransmitted_pkts += 1;
            } else {
                self.req.sent_high = psn.add(1);
                if ack_req {
                    self.req.rtt.sent(psn, ctx.now);
                }
            }
            if is_read {
                // A READ request covers its chunk's PSN range.
                let last_psn = first_psn.add(next_pkt.max(1) - 1);
                if last_psn.is_after(self.req.sent_high.sub(1)) {
                    self.req.sent_high = last_psn.add(1);
                }
            }
            if self.req.retransmit_at.is_none() {
                self.req.retransmit_at = ack_timeout(self.attr.timeout).map(|d| ctx.now + d);
            }
            if ack_req {
                // The flight's silence is counted from its last packet
                // that asks for an answer.
                self.arm_tail_probe(ctx);
            }
        } else {
            self.retire(ctx);
        }
        if is_last
            && !resent
            && matches!(
                op,
                SendOpcode::Send
                    | SendOpcode::SendWithImm
                    | SendOpcode::SendWithInv
                    | SendOpcode::RdmaWriteWithImm
            )
        {
            self.counters.rdma_sends += 1;
            ctx.counters.rdma_sends += 1;
        }
        Some(t)
    }
}
