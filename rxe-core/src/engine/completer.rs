//! The completer: turning ACKs, NAKs and READ/atomic responses back into
//! completions, with go-back-N retransmission, the transport timer and its
//! probe, retry counting and RNR waits (the kernel's `rxe_comp.c`). The
//! requester ([`super::requester`]) builds the packets these decisions send
//! again.

use super::qp::Qp;
use super::slices::scatter;
use super::timers::{ack_timeout, rnr_delay, RNR_RETRY_INFINITE};
use super::Ctx;
use crate::psn::Psn;
use crate::types::*;
use crate::wire::{AethSyndrome, NakCode, Operation, Packet, Position};

impl Qp {
    /// Restarts sending from `psn` (go-back-N). Inside a READ, never from
    /// past its first missing response: only responses acknowledge a
    /// READ's bytes, so a NAK for a later PSN of it (an RNR NAK, which no
    /// honest responder sends for a READ, or a forged one) must not skip
    /// the responses in between. (Found by the `requester` fuzz target: an
    /// RNR NAK inside a READ made it wait for its last response only, and
    /// it completed successfully with the rest of its buffer unwritten.)
    fn go_back(&mut self, ctx: &mut Ctx<'_>, psn: Psn) {
        let mtu = self.mtu() as u64;
        let mut psn = psn;
        self.req.probe = None;
        match self
            .req
            .sq
            .iter()
            .position(|w| w.done.is_none() && w.holds(psn))
        {
            Some(i) => {
                let w = &mut self.req.sq[i];
                let mut k = w.first_psn.distance_to(psn);
                if w.wr.opcode == SendOpcode::RdmaRead {
                    k = k.min((w.read_rcvd / mtu) as u32);
                    w.read_rcvd = u64::from(k) * mtu;
                    psn = w.first_psn.add(k);
                }
                self.req.next = i;
                self.req.next_pkt = k;
            }
            None => {
                self.req.next = self
                    .req
                    .sq
                    .iter()
                    .position(|w| !w.started)
                    .unwrap_or(self.req.sq.len());
                self.req.next_pkt = 0;
            }
        }
        self.req.since_ackreq = 0;
        self.req.retransmit_at = ack_timeout(self.attr.timeout).map(|d| ctx.now + d);
        // What is sent again may be answered for either copy (Karn).
        self.req.rtt.discard();
        self.req.round = psn
            .is_before(self.req.sent_high)
            .then_some((psn, self.req.sent_high));
    }

    /// True if `psn` is being sent again by the current go-back.
    fn in_round(&self, psn: Psn) -> bool {
        self.req
            .round
            .is_some_and(|(from, to)| psn.in_window(from, from.distance_to(to)))
    }

    /// Uses up one retry; fails the head WQE when none are left.
    fn consume_retry(&mut self, ctx: &mut Ctx<'_>) -> bool {
        if self.req.retry_left == 0 {
            let i = self
                .req
                .sq
                .iter()
                .position(|w| w.done.is_none())
                .unwrap_or(0);
            self.fail(ctx, i, WcStatus::RetryExcErr);
            return false;
        }
        self.req.retry_left -= 1;
        true
    }

    /// Forward progress resets the retry counters and the transport timer,
    /// and ends a probe. Sending never resumes behind what the responder
    /// acknowledged: after a probe, or a go-back that answers for packets
    /// the responder had after all (late, not lost: a READ's responses
    /// still on their way when the probe asked again), the rest goes from
    /// the first PSN not acknowledged. (A cursor left behind `acked` also
    /// closed the send window for good, which counts from `acked`.)
    fn progress(&mut self, ctx: &mut Ctx<'_>) {
        self.req.retry_left = self.attr.retry_cnt;
        self.req.rnr_left = self.attr.rnr_retry;
        self.req.rtt.acked(self.req.acked, ctx.now);
        self.req.rtt.progressed();
        self.req.tlp_sent = false;
        let next = self.req.acked.next();
        if self.req.cursor_psn().is_before(next) {
            self.go_back(ctx, next);
        }
        self.req.probe = None;
        // The timer runs while packets are on the network unanswered, not
        // while a started message waits to send its next packet (for the
        // device's budget of packets in flight: that is no loss).
        self.req.retransmit_at = if self.req.acked.next().is_before(self.req.sent_high) {
            ack_timeout(self.attr.timeout).map(|d| ctx.now + d)
        } else {
            None
        };
        self.arm_tail_probe(ctx);
    }

    /// Acknowledges every PSN up to `psn`: WQEs whose last PSN is at or
    /// before it complete. A READ or atomic covered this way has lost its
    /// response: its index comes back (an "implicit NAK"). Progress means
    /// the acknowledged PSN moved, even inside one long message.
    fn ack_through(&mut self, psn: Psn) -> (bool, Option<usize>) {
        let mtu = self.mtu() as u64;
        let mut limit = psn;
        let mut lost = None;
        for (i, w) in self.req.sq.iter_mut().enumerate() {
            if !w.started {
                break;
            }
            if w.done.is_some() || w.npkts == 0 {
                continue;
            }
            if w.last_psn().is_after(psn) {
                // An ACK inside a READ or atomic that still misses responses
                // acknowledges none of the missing ones (only responses do):
                // clamp it before them. (Found by the `requester` fuzz target:
                // a bogus ACK inside a READ moved `acked` past responses never
                // received, a timeout then resumed the READ after them, and
                // it completed successfully with part of its buffer never
                // written.)
                if w.is_rd_atomic() {
                    let first_missing = w.first_psn.add((w.read_rcvd / mtu) as u32);
                    if !psn.is_before(first_missing) && first_missing.sub(1).is_before(limit) {
                        limit = first_missing.sub(1);
                    }
                }
                break;
            }
            if w.is_rd_atomic() {
                let first_missing = w.first_psn.add((w.read_rcvd / mtu) as u32);
                if first_missing.sub(1).is_before(limit) {
                    limit = first_missing.sub(1);
                }
                lost = Some(i);
                break;
            }
            w.done = Some(WcStatus::Success);
        }
        let progress = limit.is_after(self.req.acked);
        if progress {
            self.req.acked = limit;
            if self
                .req
                .round
                .is_some_and(|(_, to)| !limit.is_before(to.sub(1)))
            {
                self.req.round = None;
            }
        }
        (progress, lost)
    }

    /// Retries from the start of READ/atomic WQE `i` whose response was lost,
    /// unless we are already resending it.
    fn implicit_nak(&mut self, ctx: &mut Ctx<'_>, i: usize) {
        let mtu = self.mtu() as u64;
        let w = &self.req.sq[i];
        let from = w.first_psn.add((w.read_rcvd / mtu) as u32);
        if !self.in_round(from) && self.req.cursor_psn().is_after(from) && self.consume_retry(ctx) {
            self.go_back(ctx, from);
        }
    }

    /// Handles an ACK, NAK, READ response or atomic acknowledge.
    pub fn handle_response(&mut self, ctx: &mut Ctx<'_>, pkt: &Packet<&[u8]>) {
        let psn = pkt.bth().psn();
        // Responses for PSNs we never sent are bogus.
        if !psn.is_before(self.req.sent_high) {
            self.counters.drop(super::DropReason::UnexpectedResponse);
            ctx.counters.drop(super::DropReason::UnexpectedResponse);
            return;
        }
        let info = pkt.info();
        // An ACK or NAK for a PSN before the oldest unacknowledged one is
        // stale: every PSN up to `acked` is answered already (a READ or
        // atomic moves `acked` only with its responses), so it can only be
        // an old copy, reordered or duplicated on the way, or a spoofer's.
        // Drop it before it can start a go-back, use up a retry or fail a
        // request (IBTA: a requester discards duplicate responses; the
        // kernel's rxe ignores responses before the PSN it expects next).
        // Without this, eight sequence NAKs for old PSNs in decreasing
        // order took an RC QP with retry_cnt 7 to ERR with RETRY_EXC_ERR.
        // READ responses and atomic acknowledges are matched against their
        // WQE below and dropped there when stale.
        if info.operation == Operation::Acknowledge && !psn.is_after(self.req.acked) {
            self.counters.drop(super::DropReason::Sequence);
            ctx.counters.drop(super::DropReason::Sequence);
            return;
        }
        let syndrome = pkt.aeth().map(|a| a.syndrome());
        match (info.operation, syndrome) {
            (Operation::Acknowledge, Some(AethSyndrome::Ack { .. })) => {
                let (progress, lost) = self.ack_through(psn);
                if progress {
                    self.progress(ctx);
                }
                if let Some(i) = lost {
                    self.implicit_nak(ctx, i);
                }
            }
            (Operation::Acknowledge, Some(AethSyndrome::RnrNak { timer })) => {
                self.counters.rcvd_rnr_err += 1;
                ctx.counters.rcvd_rnr_err += 1;
                let (progress, _) = self.ack_through(psn.sub(1));
                if progress {
                    self.progress(ctx);
                }
                let Some(i) = self
                    .req
                    .sq
                    .iter()
                    .position(|w| w.done.is_none() && w.holds(psn))
                else {
                    return;
                };
                if self.attr.rnr_retry != RNR_RETRY_INFINITE {
                    if self.req.rnr_left == 0 {
                        self.fail(ctx, i, WcStatus::RnrRetryExcErr);
                        return;
                    }
                    self.req.rnr_left -= 1;
                }
                self.go_back(ctx, psn);
                self.req.retransmit_at = None;
                self.req.rnr_until = Some(ctx.now + rnr_delay(timer));
            }
            (Operation::Acknowledge, Some(AethSyndrome::Nak(NakCode::PsnSequenceError))) => {
                self.counters.rcvd_seq_err += 1;
                ctx.counters.rcvd_seq_err += 1;
                let (progress, lost) = self.ack_through(psn.sub(1));
                if progress {
                    self.progress(ctx);
                }
                if let Some(i) = lost {
                    self.implicit_nak(ctx, i);
                } else if !self.in_round(psn)
                    && self.req.cursor_psn().is_after(psn)
                    && self.consume_retry(ctx)
                {
                    self.go_back(ctx, psn);
                }
            }
            (Operation::Acknowledge, Some(AethSyndrome::Nak(code))) => {
                let (_, _) = self.ack_through(psn.sub(1));
                let status = match code {
                    NakCode::InvalidRequest => WcStatus::RemInvReqErr,
                    NakCode::RemoteAccessError => WcStatus::RemAccessErr,
                    NakCode::RemoteOperationalError => WcStatus::RemOpErr,
                    NakCode::InvalidRdRequest => WcStatus::RemInvalidRdReqErr,
                    _ => WcStatus::RemOpErr,
                };
                let i = self
                    .req
                    .sq
                    .iter()
                    .position(|w| w.done.is_none() && w.holds(psn))
                    .or_else(|| self.req.sq.iter().position(|w| w.done.is_none()));
                if let Some(i) = i {
                    self.fail(ctx, i, status);
                }
            }
            (Operation::ReadResponse, _) => self.handle_read_response(ctx, pkt, psn),
            (Operation::AtomicAcknowledge, Some(AethSyndrome::Ack { .. })) => {
                let Some(i) = self
                    .req
                    .sq
                    .iter()
                    .position(|w| w.done.is_none() && w.holds(psn))
                else {
                    return self.unexpected(ctx);
                };
                if !matches!(
                    self.req.sq[i].wr.opcode,
                    SendOpcode::AtomicCmpSwap | SendOpcode::AtomicFetchAdd
                ) {
                    return self.unexpected(ctx);
                }
                let (progress, lost) = self.ack_through(psn.sub(1));
                if let Some(j) = lost {
                    if j < i {
                        return self.implicit_nak(ctx, j);
                    }
                }
                let orig = pkt.atomic_ack_eth().map(|a| a.orig()).unwrap_or(0);
                let w = &mut self.req.sq[i];
                let status = if scatter(&w.slices, 0, &orig.to_ne_bytes()).is_ok() {
                    WcStatus::Success
                } else {
                    WcStatus::LocProtErr
                };
                w.done = Some(status);
                let _ = progress;
                if psn.is_after(self.req.acked) {
                    self.req.acked = psn;
                }
                self.progress(ctx);
            }
            _ => self.unexpected(ctx),
        }
        self.retire(ctx);
    }

    fn unexpected(&mut self, ctx: &mut Ctx<'_>) {
        self.counters.drop(super::DropReason::UnexpectedResponse);
        ctx.counters.drop(super::DropReason::UnexpectedResponse);
    }

    fn handle_read_response(&mut self, ctx: &mut Ctx<'_>, pkt: &Packet<&[u8]>, psn: Psn) {
        let mtu = self.mtu() as u64;
        let Some(i) = self
            .req
            .sq
            .iter()
            .position(|w| w.done.is_none() && w.holds(psn))
        else {
            return self.unexpected(ctx);
        };
        if matches!(
            self.req.sq[i].wr.opcode,
            SendOpcode::AtomicWrite | SendOpcode::Flush
        ) {
            return self.handle_empty_read_response(ctx, pkt, psn, i);
        }
        if self.req.sq[i].wr.opcode != SendOpcode::RdmaRead {
            return self.unexpected(ctx);
        }
        if !self.ack_before(ctx, i) {
            return;
        }
        let w = &self.req.sq[i];
        let expected = w.first_psn.add((w.read_rcvd / mtu) as u32);
        if psn != expected {
            self.counters.drop(super::DropReason::Sequence);
            ctx.counters.drop(super::DropReason::Sequence);
            if psn.is_after(expected) {
                // A response packet went missing: ask again from there.
                self.implicit_nak(ctx, i);
            }
            return;
        }
        let payload = pkt.payload();
        let position = pkt.info().position;
        // The last response of a request ends its chunk; the others are
        // full packets.
        let k = (w.read_rcvd / mtu) as u32;
        let chunk_done = k + 1 == w.chunk_end(k);
        if position.ends() != chunk_done {
            return self.unexpected(ctx);
        }
        let want = if chunk_done {
            (u64::from(w.chunk_end(k)) * mtu).min(w.len) - w.read_rcvd
        } else {
            mtu
        };
        if payload.len() as u64 != want || want > mtu {
            return self.unexpected(ctx);
        }
        if scatter(&w.slices, w.read_rcvd, payload).is_err() {
            return self.fail(ctx, i, WcStatus::LocProtErr);
        }
        let w = &mut self.req.sq[i];
        w.read_rcvd += payload.len() as u64;
        if w.read_rcvd == w.len {
            w.done = Some(WcStatus::Success);
        }
        self.answered(ctx, psn);
    }

    /// The answer to ATOMIC WRITE or FLUSH `i`: an RDMA READ response only
    /// with no payload (as the kernel's rxe sends both). A FLUSH may also
    /// be answered by a plain ACK, which [`Qp::ack_through`] takes.
    fn handle_empty_read_response(
        &mut self,
        ctx: &mut Ctx<'_>,
        pkt: &Packet<&[u8]>,
        psn: Psn,
        i: usize,
    ) {
        if pkt.info().position != Position::Only || !pkt.payload().is_empty() {
            return self.unexpected(ctx);
        }
        if self.ack_before(ctx, i) {
            self.req.sq[i].done = Some(WcStatus::Success);
            self.answered(ctx, psn);
        }
    }

    /// A response to WQE `i` acknowledges every PSN before the WQE's. False
    /// when that found an earlier READ or atomic whose response was lost
    /// and went back for it (the response is then not taken).
    fn ack_before(&mut self, ctx: &mut Ctx<'_>, i: usize) -> bool {
        let (progress, lost) = self.ack_through(self.req.sq[i].first_psn.sub(1));
        if progress {
            self.progress(ctx);
        }
        match lost {
            Some(j) if j < i => {
                self.implicit_nak(ctx, j);
                false
            }
            _ => true,
        }
    }

    /// The response at `psn` was taken: it is acknowledged, and progress.
    fn answered(&mut self, ctx: &mut Ctx<'_>, psn: Psn) {
        if psn.is_after(self.req.acked) {
            self.req.acked = psn;
        }
        self.progress(ctx);
    }

    /// Arms the tail loss probe ([`super::rtt`]) while packets are
    /// unanswered: a probe timeout from now, unless the transport timer's
    /// probe is out, an RNR wait holds the QP, no round trip was measured
    /// yet, or the transport timer fires within two probe timeouts anyway.
    /// While a tail probe is out, its own next one stands (`tail_probe`).
    pub(super) fn arm_tail_probe(&mut self, ctx: &Ctx<'_>) {
        if self.req.tlp_sent {
            return;
        }
        self.req.tlp_at = None;
        if self.qp_type != QpType::Rc
            || self.req.probe.is_some()
            || self.req.rnr_until.is_some()
            || !self.req.acked.next().is_before(self.req.sent_high)
        {
            return;
        }
        self.schedule_tail_probe(ctx);
    }

    /// `tlp_at` a probe timeout from now, if that leaves the transport
    /// timer at least one more probe timeout.
    fn schedule_tail_probe(&mut self, ctx: &Ctx<'_>) {
        let (Some(pto), Some(rto)) = (self.req.rtt.pto(), self.req.retransmit_at) else {
            return;
        };
        let at = ctx.now + pto;
        if at + pto <= rto {
            self.req.tlp_at = Some(at);
        }
    }

    /// The probe timeout passed with nothing answered: one packet goes
    /// again alone, asking for an ACK. Normally the flight's last: a
    /// responder that had it answers the duplicate (and so acknowledges the
    /// flight); one missing an earlier packet NAKs for it, which starts the
    /// go-back at once. During a go-back round the oldest unacknowledged
    /// packet instead: the silence then most likely means a packet sent
    /// again was lost again, and a responder that has NAKed once answers
    /// nothing past the hole until it is filled (as the kernel's rxe does).
    /// Not a retry: the transport timer keeps its time and its count. A
    /// probe that goes unanswered is followed by another, each after twice
    /// the timeout of the last, while the transport timer is far enough
    /// off; the transport timer's own probe stops them.
    fn tail_probe(&mut self, ctx: &mut Ctx<'_>) {
        self.req.tlp_at = None;
        if (self.req.probe.is_some() && !self.req.tlp_sent)
            || self.req.rnr_until.is_some()
            || !self.req.acked.next().is_before(self.req.sent_high)
        {
            return;
        }
        let target = match (self.req.round, self.oldest_unacked_psn()) {
            (Some(_), Some(oldest)) => oldest,
            _ => self.req.sent_high.sub(1),
        };
        // A READ is not probed: the only way to ask again is a READ
        // request, which has the responder send a chunk of responses
        // again; its silence is left to the transport timer, as before.
        let read = self
            .req
            .sq
            .iter()
            .find(|w| w.done.is_none() && w.holds(target))
            .is_some_and(|w| w.wr.opcode == SendOpcode::RdmaRead);
        if read {
            return;
        }
        self.counters.tail_probes += 1;
        ctx.counters.tail_probes += 1;
        self.req.rtt.probed();
        let rto = self.req.retransmit_at;
        self.go_back(ctx, target);
        self.req.retransmit_at = rto;
        self.req.probe = Some(self.req.cursor_psn());
        self.req.tlp_sent = true;
        self.schedule_tail_probe(ctx);
    }

    /// Runs the transport timer, the tail loss probe and the RNR wait.
    pub fn handle_timeout(&mut self, ctx: &mut Ctx<'_>) {
        if self.fault_tripped && ctx.config.test_fault.is_some_and(|f| f.wedges()) {
            // A wedged QP (a test fault, for testing fuzzers only) neither
            // retries nor gives up: its timers stop.
            self.req.rnr_until = None;
            self.req.retransmit_at = None;
            self.req.tlp_at = None;
            return;
        }
        if self.req.rnr_until.is_some_and(|t| t <= ctx.now) {
            self.req.rnr_until = None;
            self.req.retransmit_at = ack_timeout(self.attr.timeout).map(|d| ctx.now + d);
        }
        if self.req.tlp_at.is_some_and(|t| t <= ctx.now)
            && self.req.retransmit_at.is_none_or(|t| t > ctx.now)
        {
            self.tail_probe(ctx);
        }
        if self.req.retransmit_at.is_some_and(|t| t <= ctx.now) {
            self.req.retransmit_at = None;
            self.req.tlp_at = None;
            self.req.tlp_sent = false;
            let Some(oldest) = self.oldest_unacked_psn() else {
                return;
            };
            self.counters.retry_timeouts += 1;
            ctx.counters.retry_timeouts += 1;
            if self.consume_retry(ctx) {
                self.go_back(ctx, oldest);
                // A timeout says nothing came back: the packets or their
                // ACKs were lost, or the responder is too slow to answer in
                // time. Send the oldest unacknowledged packet alone, asking
                // for an ACK, and the rest once the responder answers: a
                // whole window sent again to a responder that is only slow
                // (kernel rxe in a busy VM) adds a duplicate to its backlog
                // for every packet, each of which it acknowledges, and with
                // a few QPs doing so at once it never catches up (as TCP
                // sends one segment after its retransmission timeout).
                self.req.probe = Some(self.req.cursor_psn());
            }
        }
    }

    /// The oldest PSN still waiting for an answer, READ progress included.
    fn oldest_unacked_psn(&self) -> Option<Psn> {
        let mtu = self.mtu() as u64;
        let w = self
            .req
            .sq
            .iter()
            .find(|w| w.done.is_none() && w.npkts > 0 && w.started)?;
        let first = if w.wr.opcode == SendOpcode::RdmaRead {
            w.first_psn.add((w.read_rcvd / mtu) as u32)
        } else {
            w.first_psn
        };
        // Part of a long message may be acknowledged already (an ACK every
        // `ack_every` packets): resume after it, not from the message start.
        let after_acked = self.req.acked.next();
        Some(
            if after_acked.in_window(first, w.npkts.max(1)) && after_acked.is_after(first) {
                after_acked
            } else {
                first
            },
        )
    }
}
