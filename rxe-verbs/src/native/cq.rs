//! `NCq`, a native completion queue, and the conversion of its work
//! completions (`ibv_wc`) to the API's `Completion`.

use super::channel::NChannel;
use super::context::NContext;
use super::error::{errno, os_error, rc_errno};
use super::ffi::*;
use super::inline::ops;
use crate::error::{invalid, unsupported, Error};
use rxe_core::engine::{CqId, EngineError};
use rxe_core::types::{Completion, WcOpcode, WcStatus};
use std::ffi::c_int;
use std::ptr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Converts a work completion.
pub(super) fn completion(w: &ibv_wc) -> Completion {
    let status = match w.status {
        IBV_WC_SUCCESS => WcStatus::Success,
        IBV_WC_LOC_LEN_ERR => WcStatus::LocLenErr,
        IBV_WC_LOC_QP_OP_ERR => WcStatus::LocQpOpErr,
        IBV_WC_LOC_PROT_ERR | IBV_WC_LOC_ACCESS_ERR => WcStatus::LocProtErr,
        IBV_WC_WR_FLUSH_ERR => WcStatus::WrFlushErr,
        IBV_WC_MW_BIND_ERR => WcStatus::MwBindErr,
        IBV_WC_REM_INV_REQ_ERR => WcStatus::RemInvReqErr,
        IBV_WC_REM_ACCESS_ERR => WcStatus::RemAccessErr,
        IBV_WC_REM_OP_ERR | IBV_WC_REM_ABORT_ERR => WcStatus::RemOpErr,
        IBV_WC_RETRY_EXC_ERR => WcStatus::RetryExcErr,
        IBV_WC_RNR_RETRY_EXC_ERR => WcStatus::RnrRetryExcErr,
        IBV_WC_REM_INV_RD_REQ_ERR => WcStatus::RemInvalidRdReqErr,
        // LOC_EEC_OP_ERR, BAD_RESP_ERR, LOC_RDD_VIOL_ERR, INV_EECN_ERR,
        // INV_EEC_STATE_ERR, FATAL_ERR, RESP_TIMEOUT_ERR, GENERAL_ERR, TM_*.
        _ => WcStatus::GeneralErr,
    };
    let opcode = match w.opcode {
        IBV_WC_SEND => WcOpcode::Send,
        IBV_WC_RDMA_WRITE => WcOpcode::RdmaWrite,
        IBV_WC_RDMA_READ => WcOpcode::RdmaRead,
        IBV_WC_COMP_SWAP => WcOpcode::CompSwap,
        IBV_WC_FETCH_ADD => WcOpcode::FetchAdd,
        IBV_WC_BIND_MW => WcOpcode::BindMw,
        IBV_WC_LOCAL_INV => WcOpcode::LocalInv,
        IBV_WC_ATOMIC_WRITE => WcOpcode::AtomicWrite,
        IBV_WC_RECV_RDMA_WITH_IMM => WcOpcode::RecvRdmaWithImm,
        // "consumers can test if a completion is a receive by testing
        // (opcode & IBV_WC_RECV)" (verbs.h).
        x if x & IBV_WC_RECV != 0 => WcOpcode::Recv,
        _ => WcOpcode::Send,
    };
    // SAFETY: both members of the union are a u32; `wc_flags` says which
    // one the provider wrote.
    let imm_or_inv = unsafe { w.__bindgen_anon_1.imm_data };
    Completion {
        wr_id: w.wr_id,
        status,
        opcode,
        qp_num: w.qp_num,
        byte_len: w.byte_len,
        // The wire's immediate, as the soft stack gives it (ntohl).
        imm_data: (w.wc_flags & IBV_WC_WITH_IMM != 0).then(|| u32::from_be(imm_or_inv)),
        invalidated_rkey: (w.wc_flags & IBV_WC_WITH_INV != 0).then_some(imm_or_inv),
        src_qp: w.src_qp,
        grh: w.wc_flags & IBV_WC_GRH != 0,
        pkey_index: w.pkey_index,
    }
}

/// A native completion queue.
pub(crate) struct NCq {
    ctx: Arc<NContext>,
    pub(super) cq: *mut ibv_cq,
    pub id: u32,
    capacity: AtomicU32,
    _channel: Option<Arc<NChannel>>,
}

// SAFETY: see NContext (providers lock their CQs).
unsafe impl Send for NCq {}
// SAFETY: as above.
unsafe impl Sync for NCq {}

impl Drop for NCq {
    fn drop(&mut self) {
        self.ctx.cqs.remove(self.id);
        // SAFETY: every QP using the CQ holds an Arc of it; destroyed once;
        // channel events are acknowledged as they are read.
        unsafe { (self.ctx.v.destroy_cq)(self.cq) };
    }
}

impl NCq {
    pub fn create(
        ctx: &Arc<NContext>,
        cqe: u32,
        channel: Option<&Arc<NChannel>>,
    ) -> Result<Arc<NCq>, Error> {
        let cqe_c = c_int::try_from(cqe).map_err(|_| invalid("cqe", "too large"))?;
        let ch = channel.map_or(ptr::null_mut(), |c| c.ch);
        // SAFETY: live context; the channel (if any) belongs to it.
        let cq = unsafe { (ctx.v.create_cq)(ctx.ctx, cqe_c, ptr::null_mut(), ch, 0) };
        if cq.is_null() {
            return Err(os_error("ibv_create_cq", ctx.name(), errno()));
        }
        // SAFETY: fields of the CQ just created.
        let (id, real) = unsafe { ((*cq).handle, (*cq).cqe) };
        let c = Arc::new(NCq {
            ctx: ctx.clone(),
            cq,
            id,
            capacity: AtomicU32::new((real.max(0) as u32).max(cqe)),
            _channel: channel.cloned(),
        });
        ctx.cqs.insert(id, &c);
        Ok(c)
    }

    /// The CQ of `ctx` numbered `id` (for a QP's `send_cq`/`recv_cq`).
    pub(super) fn by_id(ctx: &NContext, id: u32) -> Result<Arc<NCq>, Error> {
        ctx.cqs
            .get(id)
            .ok_or(Error::Engine(EngineError::UnknownCq(CqId(id))))
    }

    pub fn capacity(&self) -> u32 {
        self.capacity.load(Ordering::Acquire)
    }

    /// `ibv_resize_cq`; the new capacity is what the provider reports.
    pub fn resize(&self, cqe: u32) -> Result<u32, Error> {
        let cqe_c = c_int::try_from(cqe).map_err(|_| invalid("cqe", "too large"))?;
        let resize = self
            .ctx
            .v
            .resize_cq
            .ok_or_else(|| unsupported("ibv_resize_cq (the system's libibverbs lacks it)"))?;
        // SAFETY: live CQ of a live context.
        let rc = unsafe { resize(self.cq, cqe_c) };
        if rc != 0 {
            return Err(os_error("ibv_resize_cq", self.ctx.name(), rc));
        }
        // SAFETY: the CQ's own field, which the provider updated.
        let n = (unsafe { (*self.cq).cqe }.max(0) as u32).max(cqe);
        self.capacity.store(n, Ordering::Release);
        Ok(n)
    }

    /// `ibv_poll_cq`: `cq->context->ops.poll_cq(cq, n, wc)`.
    pub fn poll_into(&self, out: &mut Vec<Completion>, max: usize) -> usize {
        let mut wcs = [ibv_wc::default(); 16];
        let mut got = 0;
        while got < max {
            let want = (max - got).min(wcs.len());
            // SAFETY: live CQ of a live context; the ops table is the
            // provider's; `wcs` has room for `want` entries.
            let n = unsafe {
                match ops((*self.cq).context).poll_cq {
                    Some(f) => f(self.cq, want as c_int, wcs.as_mut_ptr()),
                    None => -1,
                }
            };
            if n <= 0 {
                break;
            }
            let n = n as usize;
            out.extend(wcs[..n].iter().map(completion));
            got += n;
            if n < want {
                break;
            }
        }
        got
    }

    /// `ibv_req_notify_cq`: `cq->context->ops.req_notify_cq(cq, solicited_only)`.
    pub fn req_notify(&self, solicited_only: bool) -> Result<(), Error> {
        // SAFETY: as in poll_into.
        let rc = unsafe {
            match ops((*self.cq).context).req_notify_cq {
                Some(f) => f(self.cq, c_int::from(solicited_only)),
                None => libc::EOPNOTSUPP,
            }
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(os_error("ibv_req_notify_cq", self.ctx.name(), rc_errno(rc)))
        }
    }
}

impl NCq {
    /// [`crate::CompletionQueue::wait_into`] on a native CQ: polls,
    /// spinning briefly and then sleeping a little longer each round (at
    /// most 1 ms).
    pub fn wait_into(
        &self,
        out: &mut Vec<Completion>,
        n: usize,
        timeout: Duration,
    ) -> Result<usize, Error> {
        let deadline = Instant::now() + timeout;
        let base = out.len();
        let mut nap = Duration::ZERO;
        loop {
            let want = n - (out.len() - base);
            self.poll_into(out, want);
            let got = out.len() - base;
            if got >= n {
                return Ok(got);
            }
            let now = Instant::now();
            if now >= deadline {
                return if got == 0 {
                    Err(Error::Timeout(timeout))
                } else {
                    Ok(got)
                };
            }
            if nap.is_zero() {
                std::thread::yield_now();
                nap = Duration::from_micros(1);
            } else {
                std::thread::sleep(nap.min(deadline - now));
                nap = (nap * 2).min(Duration::from_millis(1));
            }
        }
    }
}
