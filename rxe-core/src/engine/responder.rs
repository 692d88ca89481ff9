//! The responder: incoming requests checked and executed in the order of
//! the kernel's `rxe_resp.c` (check PSN, check opcode sequence, check
//! resources, check length, check R_Key, execute, acknowledge), with typed
//! outcomes that map onto NAK codes and completion statuses.
//!
//! * A request ahead of the expected PSN gets one PSN-sequence-error NAK.
//! * A duplicate SEND/WRITE is re-acknowledged; a duplicate READ is answered
//!   again from the responder resources (memory read again); a duplicate
//!   atomic gets the saved result, never a second execution.
//! * A SEND with no receive WQE gets an RNR NAK with the QP's min RNR timer.
//! * Key, address, length and access errors NAK with remote access error or
//!   invalid request, touch no memory, and move the QP to ERR (IBTA class C).

use super::counters::DropReason;
use super::mem::AtomicOp;
use super::qp::{Qp, DEFAULT_PKEY};
use super::resp_state::{InMsg, ReadJob, Resource, RespOut, RESP_OUT_LIMIT};
use super::slices::Slices;
use super::slices::{scatter, ScatterError};
use super::txpool::BuildError;
use super::{Ctx, RecvMeta, TestFault, Transmit};
use crate::psn::Psn;
use crate::types::*;
use crate::wire::aeth::CREDITS_INVALID;
use crate::wire::{
    AethRepr, AethSyndrome, AtomicAckEthRepr, BthRepr, NakCode, Opcode, Operation, Packet,
    PacketRepr, Position,
};
use std::net::IpAddr;

/// Why a request is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    /// NAK with this code and take the QP to ERR (RC); drop the message (UC).
    Nak(NakCode, Option<WcStatus>),
    /// No receive WQE: RNR NAK (RC), drop (UC, UD).
    Rnr,
}

fn refuse_key(_e: super::mem::KeyError) -> Refusal {
    Refusal::Nak(NakCode::RemoteAccessError, None)
}

impl Qp {
    /// Handles a request packet (RC, UC or UD).
    pub fn handle_request(&mut self, ctx: &mut Ctx<'_>, meta: &RecvMeta, pkt: &Packet<&[u8]>) {
        match self.qp_type {
            QpType::Ud => self.handle_ud(ctx, meta, pkt),
            QpType::Uc => self.handle_uc(ctx, pkt),
            QpType::Rc => self.handle_rc(ctx, pkt),
        }
    }

    fn count_drop(&mut self, ctx: &mut Ctx<'_>, why: DropReason) {
        self.counters.drop(why);
        ctx.counters.drop(why);
    }

    fn handle_rc(&mut self, ctx: &mut Ctx<'_>, pkt: &Packet<&[u8]>) {
        let psn = pkt.bth().psn();
        let d = psn.diff(self.resp.epsn);
        if d > 0 {
            self.counters.out_of_seq_request += 1;
            ctx.counters.out_of_seq_request += 1;
            if !self.resp.nak_sent {
                self.resp.nak_sent = true;
                self.counters.send_seq_err += 1;
                ctx.counters.send_seq_err += 1;
                let e = self.resp.epsn;
                self.resp
                    .push_nak(e, AethSyndrome::Nak(NakCode::PsnSequenceError));
            } else {
                self.count_drop(ctx, DropReason::Sequence);
            }
            return;
        }
        if d < 0 {
            self.counters.duplicate_request += 1;
            ctx.counters.duplicate_request += 1;
            return self.duplicate(ctx, pkt, psn);
        }
        self.resp.nak_sent = false;
        match self.execute(ctx, pkt, psn) {
            Ok(()) => {
                // READs and atomics are answered by their responses.
                let answered = matches!(
                    pkt.info().operation,
                    Operation::ReadRequest
                        | Operation::CompareSwap
                        | Operation::FetchAdd
                        | Operation::AtomicWrite
                        | Operation::Flush
                );
                if pkt.bth().ack_req() && !answered && self.resp.push_ack(psn) {
                    self.counters.ack_deferred += 1;
                    ctx.counters.ack_deferred += 1;
                }
            }
            Err(Refusal::Rnr) => {
                self.counters.send_rnr_err += 1;
                ctx.counters.send_rnr_err += 1;
                // A WRITE (only) with immediate that found no receive WQE
                // did not start: its retry must be taken as a new message.
                if pkt.info().position.starts() {
                    self.resp.cur = None;
                }
                let timer = self.attr.min_rnr_timer;
                self.resp.push_nak(psn, AethSyndrome::RnrNak { timer });
            }
            Err(Refusal::Nak(code, recv_status)) => self.refuse(ctx, psn, code, recv_status),
        }
    }

    /// Answers the request at `psn` with NAK `code` and moves the QP to ERR;
    /// the message's receive WQE, if `recv_status` says so, completes with
    /// that status first.
    fn refuse(
        &mut self,
        ctx: &mut Ctx<'_>,
        psn: Psn,
        code: NakCode,
        recv_status: Option<WcStatus>,
    ) {
        self.counters.send_err += 1;
        ctx.counters.send_err += 1;
        // Take the message's receive WQE only to complete it with the
        // refusal's status; otherwise `enter_error` flushes it. (Found by the
        // `responder` fuzz target: the `take()` used to sit in the tuple the
        // caller matched, so a refusal without a receive status, such as a
        // SEND FIRST in the middle of a SEND, took the WQE and dropped it:
        // it never completed, not even flushed.)
        if let Some(status) = recv_status {
            if let Some(InMsg::Send { wr, .. }) = self.resp.cur.take() {
                let c = self.recv_completion(wr.wr_id, status, WcOpcode::Recv, 0, None);
                ctx.complete(self.recv_cq, c, false);
            }
        }
        self.resp.push_nak(psn, AethSyndrome::Nak(code));
        self.enter_error(ctx, true);
    }

    fn handle_uc(&mut self, ctx: &mut Ctx<'_>, pkt: &Packet<&[u8]>) {
        let psn = pkt.bth().psn();
        if psn != self.resp.epsn {
            // A gap: whatever message was in progress is lost. Its receive
            // WQE goes back to the queue for the next message.
            self.counters.out_of_seq_request += 1;
            ctx.counters.out_of_seq_request += 1;
            self.abort_uc_message(ctx);
            self.resp.epsn = psn;
        }
        self.resp.epsn = psn.next();
        match self.execute(ctx, pkt, psn) {
            Ok(()) => {}
            Err(Refusal::Rnr) => self.count_drop(ctx, DropReason::NoReceiveBuffer),
            Err(Refusal::Nak(_, status)) => {
                // As for RC: without a receive status the WQE stays current,
                // and `abort_uc_message` puts it back for the next message
                // (it used to be taken and dropped here).
                if let Some(status) = status {
                    if let Some(InMsg::Send { wr, .. }) = self.resp.cur.take() {
                        let c = self.recv_completion(wr.wr_id, status, WcOpcode::Recv, 0, None);
                        ctx.complete(self.recv_cq, c, false);
                    }
                }
                self.abort_uc_message(ctx);
                self.count_drop(ctx, DropReason::Other);
            }
        }
    }

    fn abort_uc_message(&mut self, ctx: &mut Ctx<'_>) {
        if let Some(InMsg::Send { wr, from_srq, .. }) = self.resp.cur.take() {
            self.untake_recv(ctx, wr, from_srq);
        }
    }

    /// The in-sequence path shared by RC and UC. On success the expected PSN
    /// has moved on (RC; UC moves it before).
    fn execute(&mut self, ctx: &mut Ctx<'_>, pkt: &Packet<&[u8]>, psn: Psn) -> Result<(), Refusal> {
        let info = pkt.info();
        let mtu = self.mtu() as u64;
        let payload = pkt.payload();
        // Opcode sequence: a message in progress continues with middle/last
        // of the same operation; otherwise a new one starts with first/only.
        let continuing = match (&self.resp.cur, info.operation) {
            (Some(InMsg::Send { .. }), Operation::Send)
            | (Some(InMsg::Write { .. }), Operation::RdmaWrite) => true,
            (None, _) => false,
            _ => return Err(Refusal::Nak(NakCode::InvalidRequest, None)),
        };
        if continuing == info.position.starts() {
            return Err(Refusal::Nak(NakCode::InvalidRequest, None));
        }
        // Length: first and middle packets are exactly one MTU, the others at most one.
        let len_ok = match info.position {
            Position::First | Position::Middle => payload.len() as u64 == mtu,
            Position::Last | Position::Only => payload.len() as u64 <= mtu,
        };
        if info.payload && !len_ok {
            return Err(Refusal::Nak(NakCode::InvalidRequest, None));
        }
        let rc = self.qp_type == QpType::Rc;
        match info.operation {
            Operation::Send => {
                if info.position.starts() {
                    let (wr, from_srq) = self.take_recv(ctx).ok_or(Refusal::Rnr)?;
                    let slices = match self.recv_slices(ctx, &wr) {
                        Ok(s) => s,
                        Err(_) => {
                            self.resp.cur = Some(InMsg::Send {
                                wr,
                                from_srq,
                                slices: Slices::Empty,
                                written: 0,
                            });
                            return Err(Refusal::Nak(
                                NakCode::RemoteOperationalError,
                                Some(WcStatus::LocProtErr),
                            ));
                        }
                    };
                    self.resp.cur = Some(InMsg::Send {
                        wr,
                        from_srq,
                        slices,
                        written: 0,
                    });
                }
                let Some(InMsg::Send {
                    slices, written, ..
                }) = &mut self.resp.cur
                else {
                    unreachable!("a send is in progress")
                };
                match scatter(slices, *written, payload) {
                    Ok(()) => {}
                    // Longer than the receive buffers: invalid request, as
                    // IBTA and NICs answer (the kernel's rxe 6.1 answers
                    // remote operational error: docs/divergences.md).
                    Err(ScatterError::TooLong) => {
                        return Err(Refusal::Nak(
                            NakCode::InvalidRequest,
                            Some(WcStatus::LocLenErr),
                        ))
                    }
                    // The receive buffer's MR went away mid-message (its
                    // owner deregistered it): a malformed WQE, class A.
                    Err(ScatterError::Revoked) => {
                        return Err(Refusal::Nak(
                            NakCode::RemoteOperationalError,
                            Some(WcStatus::LocQpOpErr),
                        ))
                    }
                }
                *written += payload.len() as u64;
                if info.position.ends() {
                    let Some(InMsg::Send { wr, written, .. }) = self.resp.cur.take() else {
                        unreachable!()
                    };
                    let mut c = self.recv_completion(
                        wr.wr_id,
                        WcStatus::Success,
                        WcOpcode::Recv,
                        written as u32,
                        pkt.immdt(),
                    );
                    ctx.pool.give_sges(wr.sg_list);
                    if let Some(rkey) = pkt.ieth() {
                        if ctx.mem.invalidate(self.pd, Some(self.qpn), rkey).is_err() {
                            c.status = WcStatus::LocQpOpErr;
                            ctx.complete(self.recv_cq, c, false);
                            return Err(Refusal::Nak(NakCode::InvalidRequest, None));
                        }
                        c.invalidated_rkey = Some(rkey);
                    }
                    self.finish_message(ctx, c, pkt.bth().solicited());
                }
            }
            Operation::RdmaWrite => {
                if let Some(reth) = pkt.reth() {
                    // For testing fuzzers only (`test_fault`): a device
                    // broken on purpose skips the permission checks.
                    let need = if TestFault::ignores_write_access(ctx.config.test_fault) {
                        Access::empty()
                    } else {
                        Access::REMOTE_WRITE
                    };
                    if !self.attr.access.contains(need) {
                        return Err(Refusal::Nak(NakCode::RemoteAccessError, None));
                    }
                    let dma_len = u64::from(reth.dma_len());
                    if dma_len > u64::from(ctx.config.caps.max_msg_size) {
                        return Err(Refusal::Nak(NakCode::InvalidRequest, None));
                    }
                    // (`remote_key`: for testing fuzzers only.)
                    let rkey = TestFault::remote_key(ctx.config.test_fault, ctx.mem, reth.rkey());
                    let slice = ctx
                        .mem
                        .remote(self.pd, self.qpn, rkey, reth.va(), dma_len, need)
                        .map_err(refuse_key)?;
                    self.resp.cur = Some(InMsg::Write {
                        slice,
                        written: 0,
                        dma_len,
                    });
                }
                let Some(InMsg::Write {
                    written, dma_len, ..
                }) = &self.resp.cur
                else {
                    unreachable!("a write is in progress")
                };
                let end = *written + payload.len() as u64;
                if end > *dma_len || (info.position.ends() && end != *dma_len) {
                    return Err(Refusal::Nak(NakCode::InvalidRequest, None));
                }
                // WRITE with immediate needs a receive WQE: check before touching memory.
                let recv = if info.has_immediate() {
                    Some(self.take_recv(ctx).ok_or(Refusal::Rnr)?)
                } else {
                    None
                };
                let Some(InMsg::Write {
                    slice,
                    written,
                    dma_len,
                }) = &mut self.resp.cur
                else {
                    unreachable!()
                };
                if slice.write(*written as usize, payload).is_err() {
                    // The region went away under the message (deregistered,
                    // or its window invalidated). The receive WQE a WRITE
                    // with immediate took goes back, so that it completes
                    // (flushed, RC) or serves the next message (UC) instead
                    // of vanishing without a completion, as it used to.
                    if let Some((wr, from_srq)) = recv {
                        self.untake_recv(ctx, wr, from_srq);
                    }
                    return Err(Refusal::Nak(NakCode::RemoteAccessError, None));
                }
                *written = end;
                let total = *dma_len;
                if info.position.ends() {
                    self.resp.cur = None;
                    if let Some((wr, _)) = recv {
                        let c = self.recv_completion(
                            wr.wr_id,
                            WcStatus::Success,
                            WcOpcode::RecvRdmaWithImm,
                            total as u32,
                            pkt.immdt(),
                        );
                        self.finish_message(ctx, c, pkt.bth().solicited());
                    } else {
                        self.resp.msn = self.resp.msn.wrapping_add(1);
                    }
                }
            }
            Operation::ReadRequest
            | Operation::CompareSwap
            | Operation::FetchAdd
            | Operation::AtomicWrite
            | Operation::Flush
                if rc && self.resp.out.len() >= RESP_OUT_LIMIT =>
            {
                return Err(Refusal::Nak(NakCode::InvalidRequest, None));
            }
            Operation::ReadRequest if rc => {
                let reth = pkt.reth().expect("READ requests carry a RETH");
                if !self.attr.access.contains(Access::REMOTE_READ) {
                    return Err(Refusal::Nak(NakCode::RemoteAccessError, None));
                }
                let len = u64::from(reth.dma_len());
                if len > u64::from(ctx.config.caps.max_msg_size) {
                    return Err(Refusal::Nak(NakCode::InvalidRequest, None));
                }
                let rkey = TestFault::remote_key(ctx.config.test_fault, ctx.mem, reth.rkey());
                let slice = ctx
                    .mem
                    .remote(self.pd, self.qpn, rkey, reth.va(), len, Access::REMOTE_READ)
                    .map_err(refuse_key)?;
                let npkts = len.div_ceil(mtu).max(1) as u32;
                self.resp.msn = self.resp.msn.wrapping_add(1);
                self.remember(Resource::Read {
                    psn,
                    npkts,
                    va: reth.va(),
                    len,
                    slice: slice.clone(),
                });
                self.resp.out.push_back(RespOut::Read(ReadJob {
                    slice,
                    start: 0,
                    len,
                    psn,
                    npkts,
                    sent: 0,
                    msn: self.resp.msn,
                }));
                self.resp.epsn = psn.add(npkts);
                return Ok(());
            }
            Operation::CompareSwap | Operation::FetchAdd if rc => {
                let a = pkt.atomic_eth().expect("atomics carry an AtomicETH");
                if !self.attr.access.contains(Access::REMOTE_ATOMIC) {
                    return Err(Refusal::Nak(NakCode::RemoteAccessError, None));
                }
                if !a.va().is_multiple_of(8) {
                    return Err(Refusal::Nak(NakCode::InvalidRequest, None));
                }
                let rkey = TestFault::remote_key(ctx.config.test_fault, ctx.mem, a.rkey());
                let slice = ctx
                    .mem
                    .remote(self.pd, self.qpn, rkey, a.va(), 8, Access::REMOTE_ATOMIC)
                    .map_err(refuse_key)?;
                let op = if info.operation == Operation::CompareSwap {
                    AtomicOp::CompareSwap {
                        compare: a.compare(),
                        swap: a.swap_add(),
                    }
                } else {
                    AtomicOp::FetchAdd(a.swap_add())
                };
                let orig = slice
                    .atomic(op)
                    .map_err(|_| Refusal::Nak(NakCode::InvalidRequest, None))?;
                self.resp.msn = self.resp.msn.wrapping_add(1);
                self.remember(Resource::Atomic { psn, orig });
                self.resp.out.push_back(RespOut::AtomicAck {
                    psn,
                    orig,
                    msn: self.resp.msn,
                });
                self.resp.epsn = psn.next();
                return Ok(());
            }
            Operation::AtomicWrite if rc => {
                // As the kernel's rxe (6.2 on): it takes a responder
                // resource and the QP's remote write right, and stores
                // exactly 8 bytes at an 8-byte aligned address the R_Key
                // grants writing, in one indivisible store.
                let reth = pkt.reth().expect("ATOMIC WRITE carries a RETH");
                if !self.attr.access.contains(Access::REMOTE_WRITE) {
                    return Err(Refusal::Nak(NakCode::RemoteAccessError, None));
                }
                let Ok(value) = <[u8; 8]>::try_from(payload) else {
                    return Err(Refusal::Nak(NakCode::InvalidRequest, None));
                };
                if self.attr.max_dest_rd_atomic == 0
                    || reth.dma_len() != 8
                    || !reth.va().is_multiple_of(8)
                {
                    return Err(Refusal::Nak(NakCode::InvalidRequest, None));
                }
                let rkey = TestFault::remote_key(ctx.config.test_fault, ctx.mem, reth.rkey());
                let slice = ctx
                    .mem
                    .remote(self.pd, self.qpn, rkey, reth.va(), 8, Access::REMOTE_WRITE)
                    .map_err(refuse_key)?;
                // The payload's bytes land as they are (a native store of
                // the same bytes).
                slice
                    .atomic(AtomicOp::Store(u64::from_ne_bytes(value)))
                    .map_err(|_| Refusal::Nak(NakCode::RemoteAccessError, None))?;
                self.resp.msn = self.resp.msn.wrapping_add(1);
                self.remember(Resource::AtomicWrite { psn });
                self.resp.out.push_back(RespOut::EmptyReadResponse {
                    psn,
                    msn: self.resp.msn,
                });
                self.resp.epsn = psn.next();
                return Ok(());
            }
            Operation::Flush if rc => {
                // As the kernel's rxe (6.2 on): the QP must allow each
                // placement type asked for and the length fit in 31 bits
                // (else invalid request), then the key must grant them
                // over the range, or over the whole region for selectivity
                // level 1, even for 0 bytes (else remote access error).
                // The region's bytes are always visible to every reader
                // here and never persistent (no region can have the
                // persistence right), so nothing more is done.
                let (Some(reth), Some(feth)) = (pkt.reth(), pkt.feth()) else {
                    return Err(Refusal::Nak(NakCode::InvalidRequest, None));
                };
                let flush = FlushParams {
                    len: reth.dma_len(),
                    placement: feth.placement(),
                    whole_region: feth.selectivity() == 1,
                };
                let rights = flush.rights();
                if !self.attr.access.contains(rights)
                    || flush.len > 1 << 31
                    || feth.selectivity() > 1
                    || !payload.is_empty()
                {
                    return Err(Refusal::Nak(NakCode::InvalidRequest, None));
                }
                let rkey = TestFault::remote_key(ctx.config.test_fault, ctx.mem, reth.rkey());
                ctx.mem
                    .check_flush(self.pd, self.qpn, rkey, reth.va(), &flush)
                    .map_err(refuse_key)?;
                self.resp.msn = self.resp.msn.wrapping_add(1);
                self.resp.out.push_back(RespOut::EmptyReadResponse {
                    psn,
                    msn: self.resp.msn,
                });
                self.resp.epsn = psn.next();
                return Ok(());
            }
            _ => return Err(Refusal::Nak(NakCode::InvalidRequest, None)),
        }
        if rc {
            self.resp.epsn = psn.next();
        }
        Ok(())
    }

    /// A message ended: complete its receive WQE.
    fn finish_message(&mut self, ctx: &mut Ctx<'_>, c: Completion, solicited: bool) {
        self.resp.msn = self.resp.msn.wrapping_add(1);
        self.counters.rdma_recvs += 1;
        ctx.counters.rdma_recvs += 1;
        ctx.complete(self.recv_cq, c, solicited);
    }

    fn recv_completion(
        &self,
        wr_id: u64,
        status: WcStatus,
        opcode: WcOpcode,
        byte_len: u32,
        imm: Option<u32>,
    ) -> Completion {
        Completion {
            wr_id,
            status,
            opcode,
            qp_num: self.qpn,
            byte_len,
            imm_data: imm,
            invalidated_rkey: None,
            src_qp: self.attr.dest_qpn,
            grh: false,
            pkey_index: 0,
        }
    }

    fn remember(&mut self, r: Resource) {
        let cap = usize::from(self.attr.max_dest_rd_atomic.max(1));
        while self.resp.resources.len() >= cap {
            self.resp.resources.pop_front();
        }
        self.resp.resources.push_back(r);
    }

    /// Answers a duplicate request.
    fn duplicate(&mut self, ctx: &mut Ctx<'_>, pkt: &Packet<&[u8]>, psn: Psn) {
        if self.resp.out.len() >= RESP_OUT_LIMIT {
            return self.count_drop(ctx, DropReason::Backlog);
        }
        let mtu = self.mtu() as u64;
        match pkt.info().operation {
            Operation::ReadRequest => {
                let reth = pkt.reth().expect("READ requests carry a RETH");
                let found = self.resp.resources.iter().find_map(|r| match r {
                    Resource::Read {
                        psn: p,
                        npkts,
                        va,
                        len,
                        slice,
                    } if psn.in_window(*p, *npkts) => {
                        let k = u64::from(p.distance_to(psn));
                        let start = k * mtu;
                        // A retried READ may start part way: it must be the same READ's tail.
                        (reth.va() == va.wrapping_add(start)
                            && u64::from(reth.dma_len()) == len - start.min(*len))
                        .then(|| (slice.clone(), start, len - start.min(*len)))
                    }
                    _ => None,
                });
                match found {
                    // The region went away after the READ was accepted: the
                    // replay cannot be read either. Refuse it as a new READ
                    // through a dead key would be, rather than answering
                    // nothing until the requester's retries run out.
                    Some((slice, ..)) if !slice.is_live() => {
                        self.refuse(ctx, psn, NakCode::RemoteAccessError, None)
                    }
                    Some((slice, start, len)) => {
                        let npkts = len.div_ceil(mtu).max(1) as u32;
                        let msn = self.resp.msn;
                        self.resp.out.push_back(RespOut::Read(ReadJob {
                            slice,
                            start,
                            len,
                            psn,
                            npkts,
                            sent: 0,
                            msn,
                        }));
                    }
                    None => self.count_drop(ctx, DropReason::Sequence),
                }
            }
            Operation::CompareSwap | Operation::FetchAdd => {
                let orig = self.resp.resources.iter().find_map(|r| match r {
                    Resource::Atomic { psn: p, orig } if *p == psn => Some(*orig),
                    _ => None,
                });
                match orig {
                    Some(orig) => {
                        let msn = self.resp.msn;
                        self.resp
                            .out
                            .push_back(RespOut::AtomicAck { psn, orig, msn });
                    }
                    None => self.count_drop(ctx, DropReason::Sequence),
                }
            }
            Operation::AtomicWrite => {
                let done = self
                    .resp
                    .resources
                    .iter()
                    .any(|r| matches!(r, Resource::AtomicWrite { psn: p } if *p == psn));
                if done {
                    let msn = self.resp.msn;
                    self.resp
                        .out
                        .push_back(RespOut::EmptyReadResponse { psn, msn });
                } else {
                    self.count_drop(ctx, DropReason::Sequence);
                }
            }
            Operation::Flush => {
                // A FLUSH changes nothing here (see `execute`), and one at
                // a PSN before the expected one succeeded (a refused one
                // took the QP to ERR): answered again, with no resource
                // kept for it.
                let msn = self.resp.msn;
                self.resp
                    .out
                    .push_back(RespOut::EmptyReadResponse { psn, msn });
            }
            _ => {
                if pkt.bth().ack_req() {
                    if self.resp.push_ack(psn) {
                        self.counters.ack_deferred += 1;
                        ctx.counters.ack_deferred += 1;
                    }
                } else {
                    self.count_drop(ctx, DropReason::Sequence);
                }
            }
        }
    }

    fn handle_ud(&mut self, ctx: &mut Ctx<'_>, meta: &RecvMeta, pkt: &Packet<&[u8]>) {
        let Some(deth) = pkt.deth() else { return };
        if deth.qkey() != self.attr.qkey {
            return self.count_drop(ctx, DropReason::QkeyMismatch);
        }
        let payload = pkt.payload();
        if payload.len() > self.mtu() {
            return self.count_drop(ctx, DropReason::TooLong);
        }
        let Some((wr, _)) = self.take_recv(ctx) else {
            return self.count_drop(ctx, DropReason::NoReceiveBuffer);
        };
        let mut c =
            self.recv_completion(wr.wr_id, WcStatus::Success, WcOpcode::Recv, 0, pkt.immdt());
        c.src_qp = deth.src_qp();
        c.grh = true;
        let grh = grh_for(meta, pkt.as_bytes().len());
        let ok = self
            .recv_slices(ctx, &wr)
            .map_err(|_| WcStatus::LocProtErr)
            .and_then(|s| {
                scatter(&s, 0, &grh)
                    .and_then(|()| scatter(&s, 40, payload))
                    .map_err(|e| match e {
                        ScatterError::TooLong => WcStatus::LocLenErr,
                        ScatterError::Revoked => WcStatus::LocProtErr,
                    })
            });
        match ok {
            Ok(()) => {
                c.byte_len = (40 + payload.len()) as u32;
                self.finish_message(ctx, c, pkt.bth().solicited());
            }
            Err(status) => {
                c.status = status;
                ctx.complete(self.recv_cq, c, false);
            }
        }
    }

    /// The next response packet, if any.
    pub fn responder_poll(&mut self, ctx: &mut Ctx<'_>) -> Option<Transmit> {
        // Nothing to answer, the common case on a QP that sends requests:
        // no need to work out the path.
        if self.resp.out.is_empty() {
            return None;
        }
        loop {
            let mut ended = false;
            let t = self.next_response(ctx, &mut ended);
            // A READ response whose region went away ended without a
            // packet: go on with the responses queued behind it.
            if t.is_some() || !ended {
                return t;
            }
        }
    }

    /// The next response packet; sets `ended` when the READ response at the
    /// front could not read its memory and was dropped instead.
    fn next_response(&mut self, ctx: &mut Ctx<'_>, ended: &mut bool) -> Option<Transmit> {
        let (src, dst) = self.path(ctx.config)?;
        let mtu = self.mtu() as u64;
        let dest_qp = self.attr.dest_qpn;
        let bth = |opcode: Opcode, psn: Psn| BthRepr {
            opcode,
            solicited: false,
            mig_req: false,
            pad_count: 0,
            pkey: DEFAULT_PKEY,
            fecn: false,
            becn: false,
            dest_qp,
            ack_req: false,
            psn,
        };
        let front = self.resp.out.front()?;
        let av = self.attr.av;
        match front {
            RespOut::Ack { psn, syndrome, msn } => {
                let mut r = PacketRepr::new(bth(Opcode::RC_ACKNOWLEDGE, *psn));
                r.aeth = Some(AethRepr {
                    syndrome: *syndrome,
                    msn: *msn & 0xff_ffff,
                });
                self.resp.out.pop_front();
                ctx.pool.build(self.src_port, &r, src, dst, av.as_ref())
            }
            RespOut::AtomicAck { psn, orig, msn } => {
                let mut r = PacketRepr::new(bth(Opcode::RC_ATOMIC_ACKNOWLEDGE, *psn));
                r.aeth = Some(AethRepr {
                    syndrome: AethSyndrome::Ack {
                        credits: CREDITS_INVALID,
                    },
                    msn: *msn & 0xff_ffff,
                });
                r.atomic_ack_eth = Some(AtomicAckEthRepr { orig: *orig });
                self.resp.out.pop_front();
                ctx.pool.build(self.src_port, &r, src, dst, av.as_ref())
            }
            RespOut::EmptyReadResponse { psn, msn } => {
                let mut r = PacketRepr::new(bth(Opcode::RC_RDMA_READ_RESPONSE_ONLY, *psn));
                r.aeth = Some(AethRepr {
                    syndrome: AethSyndrome::Ack {
                        credits: CREDITS_INVALID,
                    },
                    msn: *msn & 0xff_ffff,
                });
                self.resp.out.pop_front();
                ctx.pool.build(self.src_port, &r, src, dst, av.as_ref())
            }
            RespOut::Read(job) => {
                let i = job.sent;
                let opcode = match (i, job.npkts) {
                    (_, 1) => Opcode::RC_RDMA_READ_RESPONSE_ONLY,
                    (0, _) => Opcode::RC_RDMA_READ_RESPONSE_FIRST,
                    (i, n) if i + 1 == n => Opcode::RC_RDMA_READ_RESPONSE_LAST,
                    _ => Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
                };
                let off = u64::from(i) * mtu;
                let n = (job.len - off).min(mtu) as usize;
                let mut r = PacketRepr::new(bth(opcode, job.psn.add(i)));
                if opcode != Opcode::RC_RDMA_READ_RESPONSE_MIDDLE {
                    r.aeth = Some(AethRepr {
                        syndrome: AethSyndrome::Ack {
                            credits: CREDITS_INVALID,
                        },
                        msn: job.msn & 0xff_ffff,
                    });
                }
                let finished = i + 1 >= job.npkts;
                // Straight from the region into the packet buffer.
                let at = (job.start + off) as usize;
                // For testing fuzzers only (`test_fault`): wrong bytes in
                // the packet, never in memory.
                let corrupt = TestFault::corrupts_read(ctx.config.test_fault, job.slice.offset());
                let fill = |b: &mut [u8]| {
                    let ok = job.slice.read(at, b).is_ok();
                    if corrupt {
                        TestFault::corrupt(b);
                    }
                    ok
                };
                let t = ctx
                    .pool
                    .build_filled(self.src_port, &r, src, dst, av.as_ref(), (n, fill));
                // A region deregistered under a READ ends the response: the
                // requester times out and retries, and its duplicate READ
                // gets a remote access NAK (see `duplicate`).
                *ended = t == Err(BuildError::Fill);
                if finished || *ended {
                    self.resp.out.pop_front();
                } else if let Some(RespOut::Read(job)) = self.resp.out.front_mut() {
                    job.sent += 1;
                }
                t.ok()
            }
        }
    }
}

/// The 40 bytes a UD receive buffer starts with: for IPv6 the IPv6 header,
/// for IPv4 20 zero bytes and then the IPv4 header, as the kernel's rxe
/// writes them.
fn grh_for(meta: &RecvMeta, transport_len: usize) -> [u8; 40] {
    let mut g = [0u8; 40];
    let udp_len = (8 + transport_len) as u16;
    match (meta.src, meta.dst) {
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            g[0] = 0x60;
            g[4..6].copy_from_slice(&udp_len.to_be_bytes());
            g[6] = 17;
            g[7] = 64;
            g[8..24].copy_from_slice(&s.octets());
            g[24..40].copy_from_slice(&d.octets());
        }
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let h = &mut g[20..];
            h[0] = 0x45;
            h[2..4].copy_from_slice(&(20 + udp_len).to_be_bytes());
            h[6] = 0x40;
            h[8] = 64;
            h[9] = 17;
            h[12..16].copy_from_slice(&s.octets());
            h[16..20].copy_from_slice(&d.octets());
            let mut sum: u32 = h
                .chunks(2)
                .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
                .sum();
            while sum > 0xffff {
                sum = (sum & 0xffff) + (sum >> 16);
            }
            h[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
        }
        _ => {}
    }
    g
}
