//! A queue pair: its attributes and state, and the dispatch of commands,
//! packets and timers to its requester/completer ([`super::requester`]) and
//! responder ([`super::responder`]) halves.

use super::counters::{Counters, DropReason};
use super::mem::PdId;
use super::resp_state::Responder;
use super::send_queue::Requester;
use super::{AsyncEvent, CqId, Ctx, IcrcStatus, QpInit, RecvMeta, SrqId, Transmit};
use crate::psn::Psn;
use crate::types::*;
use crate::wire::Packet;
use std::collections::VecDeque;
use std::net::IpAddr;
use std::time::Instant;

/// The default P_Key (full member of the default partition), entry 0 of
/// the one-entry P_Key table.
pub(crate) const DEFAULT_PKEY: u16 = 0xffff;

#[derive(Debug)]
pub(crate) struct Qp {
    pub qpn: u32,
    pub qp_type: QpType,
    pub pd: PdId,
    pub send_cq: CqId,
    pub recv_cq: CqId,
    pub srq: Option<SrqId>,
    pub cap: QpCap,
    pub sq_sig_all: bool,
    pub state: QpState,
    pub attr: QpAttr,
    /// UDP source port: a hash of the QP number, so that ECMP spreads QPs.
    pub src_port: u16,
    pub counters: Counters,
    pub req: Requester,
    pub resp: Responder,
    pub rq: VecDeque<RecvWr>,
    pub comm_established: bool,
    /// What this QP last added to the engine's count of packets in flight
    /// (see [`Qp::in_flight`]).
    pub counted_in_flight: u32,
    /// On the engine's list of QPs waiting for room in `max_in_flight`.
    pub budget_waiting: bool,
    /// Woken from that list, and its turn has not ended yet.
    pub budget_woken: bool,
    /// On the engine's list of QPs that may have something to send.
    pub active: bool,
    /// The deadline filed for this QP in the engine's timer heap (see
    /// `deadlines.rs`): its `next_timeout()` as of the QP's last change.
    pub filed: Option<Instant>,
    /// The device's test fault (`EngineConfig::test_fault`, for testing
    /// fuzzers only) has been tripped on this QP.
    pub fault_tripped: bool,
}

/// A UDP source port in 0xC000..=0xFFFF derived from the QP number.
fn src_port_for(qpn: u32) -> u16 {
    let h = qpn.wrapping_mul(0x9e37_79b1);
    0xc000 | ((h >> 18) as u16 & 0x3fff)
}

impl Qp {
    pub fn new(qpn: u32, init: QpInit, initial_psn: Psn) -> Self {
        let attr = QpAttr {
            sq_psn: initial_psn,
            ..QpAttr::default()
        };
        Qp {
            qpn,
            qp_type: init.qp_type,
            pd: init.pd,
            send_cq: init.send_cq,
            recv_cq: init.recv_cq,
            srq: init.srq,
            cap: init.cap,
            sq_sig_all: init.sq_sig_all,
            state: QpState::Reset,
            attr,
            src_port: src_port_for(qpn),
            counters: Counters::default(),
            req: Requester::new(initial_psn),
            resp: Responder::new(),
            rq: VecDeque::new(),
            comm_established: false,
            counted_in_flight: 0,
            budget_waiting: false,
            budget_woken: false,
            active: false,
            filed: None,
            fault_tripped: false,
        }
    }

    /// Packets this QP's requester has sent (or, for a READ, asked for)
    /// and not yet seen acknowledged: what it has in flight on the network.
    /// RC only; 0 in any state that does not send.
    pub fn in_flight(&self) -> u32 {
        if self.qp_type != QpType::Rc || !matches!(self.state, QpState::Rts | QpState::Sqd) {
            return 0;
        }
        self.req.acked.next().distance_to(self.req.sent_high)
    }

    /// Packets in flight whose last asked for no ACK: stranded until the
    /// QP sends again.
    pub fn stranded(&self) -> bool {
        self.req.since_ackreq > 0 && self.in_flight() > 0
    }

    /// The PSN the requester sends next and the one the responder expects
    /// (`ibv_query_qp`'s `sq_psn` and `rq_psn`).
    pub fn psns(&self) -> (Psn, Psn) {
        (self.req.psn, self.resp.epsn)
    }

    pub fn mtu(&self) -> usize {
        self.attr.path_mtu.bytes()
    }

    /// Copies the attributes a modify sets and performs the transition.
    pub fn apply_modify(&mut self, ctx: &mut Ctx<'_>, a: &QpAttr, mask: QpAttrMask, next: QpState) {
        let m = |bit| mask.contains(bit);
        if m(QpAttrMask::ACCESS_FLAGS) {
            self.attr.access = a.access;
        }
        if m(QpAttrMask::PKEY_INDEX) {
            self.attr.pkey_index = a.pkey_index;
        }
        if m(QpAttrMask::PORT) {
            self.attr.port = a.port;
        }
        if m(QpAttrMask::QKEY) {
            self.attr.qkey = a.qkey;
        }
        if m(QpAttrMask::AV) {
            self.attr.av = a.av;
        }
        if m(QpAttrMask::PATH_MTU) {
            self.attr.path_mtu = a.path_mtu;
        }
        if m(QpAttrMask::TIMEOUT) {
            self.attr.timeout = a.timeout;
        }
        if m(QpAttrMask::RETRY_CNT) {
            self.attr.retry_cnt = a.retry_cnt;
            self.req.retry_left = a.retry_cnt;
        }
        if m(QpAttrMask::RNR_RETRY) {
            self.attr.rnr_retry = a.rnr_retry;
            self.req.rnr_left = a.rnr_retry;
        }
        if m(QpAttrMask::RQ_PSN) {
            self.attr.rq_psn = a.rq_psn;
            self.resp.epsn = a.rq_psn;
        }
        if m(QpAttrMask::SQ_PSN) {
            self.attr.sq_psn = a.sq_psn;
            self.req.set_psn(a.sq_psn);
        }
        if m(QpAttrMask::MAX_QP_RD_ATOMIC) {
            self.attr.max_rd_atomic = a.max_rd_atomic;
        }
        if m(QpAttrMask::MAX_DEST_RD_ATOMIC) {
            self.attr.max_dest_rd_atomic = a.max_dest_rd_atomic;
        }
        if m(QpAttrMask::MIN_RNR_TIMER) {
            self.attr.min_rnr_timer = a.min_rnr_timer;
        }
        if m(QpAttrMask::DEST_QPN) {
            self.attr.dest_qpn = a.dest_qpn;
        }
        if m(QpAttrMask::EN_SQD_ASYNC_NOTIFY) {
            self.attr.en_sqd_async_notify = a.en_sqd_async_notify;
        }
        let prev = self.state;
        self.state = next;
        match next {
            QpState::Reset if prev != QpState::Reset => self.reset(),
            QpState::Err if prev != QpState::Err => self.enter_error(ctx, false),
            QpState::Sqd => self.req.sqd_notified = false,
            _ => {}
        }
    }

    /// RESET: everything posted is dropped without completions, as verbs says.
    fn reset(&mut self) {
        let psn = self.req.psn;
        self.req = Requester::new(psn);
        self.resp = Responder::new();
        self.rq.clear();
        self.comm_established = false;
    }

    /// Moves to ERR and flushes both queues. `fatal` raises `QpFatal`.
    pub fn enter_error(&mut self, ctx: &mut Ctx<'_>, fatal: bool) {
        self.state = QpState::Err;
        if fatal {
            ctx.events.push_back(AsyncEvent::QpFatal(self.qpn));
        }
        // Completions in order: whatever finished first, then flushes.
        for w in self.req.sq.iter_mut() {
            if w.done.is_none() {
                w.done = Some(WcStatus::WrFlushErr);
            }
        }
        self.retire(ctx);
        self.req.retransmit_at = None;
        self.req.tlp_at = None;
        self.req.rnr_until = None;
        if let Some(wr) = self.resp.take_current_recv() {
            let c = self.flush_completion_recv(&wr);
            ctx.complete(self.recv_cq, c, false);
        }
        while let Some(wr) = self.rq.pop_front() {
            let c = self.flush_completion_recv(&wr);
            ctx.complete(self.recv_cq, c, false);
        }
        // Responses already queued (the NAK that explains the error) still go out.
        self.resp.out.retain(|o| o.is_nak());
    }

    pub fn flush_completion_recv(&self, wr: &RecvWr) -> Completion {
        Completion {
            wr_id: wr.wr_id,
            status: WcStatus::WrFlushErr,
            opcode: WcOpcode::Recv,
            qp_num: self.qpn,
            byte_len: 0,
            imm_data: None,
            invalidated_rkey: None,
            src_qp: 0,
            grh: false,
            pkey_index: 0,
        }
    }

    /// Checks what `ibv_post_send` checks before queueing.
    pub fn check_post_send(
        &self,
        wr: &SendWr,
        config: &super::EngineConfig,
    ) -> Result<(), super::EngineError> {
        use super::EngineError as E;
        match self.state {
            QpState::Reset | QpState::Init | QpState::Rtr => {
                return Err(E::WrongState {
                    qpn: self.qpn,
                    state: self.state,
                    what: "post_send",
                })
            }
            _ => {}
        }
        if self.req.sq.len() >= self.cap.max_send_wr as usize {
            return Err(E::QueueFull {
                queue: "send queue",
                capacity: self.cap.max_send_wr as usize,
            });
        }
        if wr.sg_list.len() > self.cap.max_send_sge as usize {
            return Err(super::invalid(
                "sg_list",
                format!(
                    "{} entries, max_send_sge is {}",
                    wr.sg_list.len(),
                    self.cap.max_send_sge
                ),
            ));
        }
        // (An ATOMIC WRITE's 8 bytes travel as inline data whatever the
        // QP's inline size: `ibv_wr_atomic_write` passes them by pointer.)
        if let Some(d) = wr
            .inline_data
            .as_ref()
            .filter(|_| wr.opcode != SendOpcode::AtomicWrite)
        {
            if d.len() > self.cap.max_inline_data as usize {
                return Err(super::invalid(
                    "inline_data",
                    format!(
                        "{} bytes, max_inline_data is {}",
                        d.len(),
                        self.cap.max_inline_data
                    ),
                ));
            }
        }
        use SendOpcode as O;
        let allowed = match self.qp_type {
            QpType::Rc => true,
            // UC has no SEND with invalidate opcodes, nor READ or atomics.
            QpType::Uc => matches!(
                wr.opcode,
                O::Send
                    | O::SendWithImm
                    | O::RdmaWrite
                    | O::RdmaWriteWithImm
                    | O::LocalInv
                    | O::BindMw
            ),
            QpType::Ud => matches!(wr.opcode, O::Send | O::SendWithImm),
        };
        if !allowed {
            return Err(super::invalid(
                "opcode",
                format!(
                    "{:?} is not supported on a {:?} QP",
                    wr.opcode, self.qp_type
                ),
            ));
        }
        if self.qp_type == QpType::Ud {
            match &wr.ud {
                None => return Err(super::invalid("wr.ud", "a UD send needs an address handle")),
                Some(ud) => {
                    if config
                        .gids
                        .get(usize::from(ud.av.sgid_index))
                        .is_none_or(|g| g.is_ipv4() != ud.av.dest.is_ipv4())
                    {
                        return Err(super::invalid(
                            "wr.ud.ah",
                            "no source GID of the destination's address family",
                        ));
                    }
                }
            }
        }
        if matches!(wr.opcode, O::BindMw) && wr.bind.is_none() {
            return Err(super::invalid(
                "wr.bind_mw",
                "a BIND_MW request needs bind parameters",
            ));
        }
        Ok(())
    }

    /// Where this QP's packets come from and go to (RC/UC).
    pub fn path(&self, config: &super::EngineConfig) -> Option<(IpAddr, IpAddr)> {
        let av = self.attr.av?;
        let src = *config.gids.get(usize::from(av.sgid_index))?;
        Some((src, av.dest))
    }

    /// Handles a packet addressed to this QP.
    pub fn handle_packet(&mut self, ctx: &mut Ctx<'_>, meta: &RecvMeta, pkt: &Packet<&[u8]>) {
        let info = pkt.info();
        let drop = |qp: &mut Self, ctx: &mut Ctx<'_>, why| {
            qp.counters.drop(why);
            ctx.counters.drop(why);
        };
        if !matches!(
            self.state,
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
        ) {
            return drop(self, ctx, DropReason::QpState);
        }
        let transport_ok = matches!(
            (info.transport, self.qp_type),
            (crate::wire::Transport::Rc, QpType::Rc)
                | (crate::wire::Transport::Uc, QpType::Uc)
                | (crate::wire::Transport::Ud, QpType::Ud)
        );
        if !transport_ok {
            return drop(self, ctx, DropReason::WrongTransport);
        }
        if pkt.bth().pkey() & 0x7fff != DEFAULT_PKEY & 0x7fff {
            return drop(self, ctx, DropReason::PkeyMismatch);
        }
        if self.qp_type != QpType::Ud && self.attr.av.map(|a| a.dest) != Some(meta.src) {
            return drop(self, ctx, DropReason::WrongSource);
        }
        if meta.icrc == IcrcStatus::Unverified {
            self.counters.icrc_unverified += 1;
        }
        if let Some(f) = ctx.config.test_fault {
            // For testing fuzzers only (see `test_fault`); never set unless
            // the process asked for it.
            if info.operation.is_request() && Some(pkt.as_bytes()[0]) == f.opcode() {
                self.fault_tripped = true;
            }
            if self.fault_tripped && f.wedges() {
                return;
            }
        }
        if self.state == QpState::Rtr && !self.comm_established {
            self.comm_established = true;
            ctx.events.push_back(AsyncEvent::CommEstablished(self.qpn));
        }
        if info.operation.is_request() {
            self.handle_request(ctx, meta, pkt);
        } else if self.qp_type == QpType::Rc {
            self.handle_response(ctx, pkt);
        }
    }

    pub fn next_timeout(&self) -> Option<Instant> {
        [self.req.retransmit_at, self.req.rnr_until, self.req.tlp_at]
            .into_iter()
            .flatten()
            .min()
    }

    /// The next packet this QP wants to send: responses first, then requests.
    pub fn poll_transmit(&mut self, ctx: &mut Ctx<'_>) -> Option<Transmit> {
        if self.fault_tripped {
            return self.faulty_transmit(ctx);
        }
        if let Some(t) = self.responder_poll(ctx) {
            return Some(t);
        }
        self.requester_poll(ctx)
    }

    /// [`Qp::poll_transmit`] on a QP whose test fault has been tripped (for
    /// testing fuzzers only): a wedged QP sends nothing, a garbling one
    /// sends its packets cut short.
    #[cold]
    fn faulty_transmit(&mut self, ctx: &mut Ctx<'_>) -> Option<Transmit> {
        let f = ctx.config.test_fault?;
        if f.wedges() {
            return None;
        }
        let mut t = self
            .responder_poll(ctx)
            .or_else(|| self.requester_poll(ctx))?;
        t.payload.truncate(super::test_fault::GARBLE_LEN);
        Some(t)
    }

    /// Takes a receive WQE from the SRQ or the QP's receive queue.
    pub fn take_recv(&mut self, ctx: &mut Ctx<'_>) -> Option<(RecvWr, bool)> {
        match self.srq {
            Some(id) => {
                let s = ctx.srqs.get_mut(&id)?;
                let wr = s.queue.pop_front()?;
                if s.limit > 0 && (s.queue.len() as u32) < s.limit {
                    s.limit = 0;
                    ctx.events.push_back(AsyncEvent::SrqLimitReached(id));
                }
                Some((wr, true))
            }
            None => self.rq.pop_front().map(|w| (w, false)),
        }
    }

    /// Puts back a receive WQE that a dropped message had taken.
    pub fn untake_recv(&mut self, ctx: &mut Ctx<'_>, wr: RecvWr, from_srq: bool) {
        if from_srq {
            if let Some(s) = self.srq.and_then(|id| ctx.srqs.get_mut(&id)) {
                s.queue.push_front(wr);
            }
        } else {
            self.rq.push_front(wr);
        }
    }

    /// Validates the scatter list of a receive WQE.
    pub fn recv_slices(
        &self,
        ctx: &Ctx<'_>,
        wr: &RecvWr,
    ) -> Result<super::slices::Slices, super::mem::KeyError> {
        wr.sg_list
            .iter()
            .map(|s| {
                ctx.mem.local(
                    self.pd,
                    s.lkey,
                    s.addr,
                    u64::from(s.length),
                    Access::LOCAL_WRITE,
                )
            })
            .collect()
    }
}
