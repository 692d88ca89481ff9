//! `NSrq`, a native shared receive queue.

use super::context::NContext;
use super::error::{errno, os_error, rc_errno};
use super::ffi::*;
use super::inline::ops;
use super::pd::NPd;
use super::wr::RecvChain;
use crate::error::Error;
use rxe_core::engine::{EngineError, SrqId};
use rxe_core::types::RecvWr;
use std::ffi::c_int;
use std::ptr;
use std::sync::Arc;

/// A native shared receive queue.
pub(crate) struct NSrq {
    ctx: Arc<NContext>,
    _pd: Arc<NPd>,
    pub(super) srq: *mut ibv_srq,
    pub id: u32,
}

// SAFETY: see NContext.
unsafe impl Send for NSrq {}
// SAFETY: see NContext.
unsafe impl Sync for NSrq {}

impl Drop for NSrq {
    fn drop(&mut self) {
        self.ctx.srqs.remove(self.id);
        // SAFETY: every QP using the SRQ holds an Arc of it; destroyed once.
        unsafe { (self.ctx.v.destroy_srq)(self.srq) };
    }
}

impl NSrq {
    pub fn create(pd: &Arc<NPd>, max_wr: u32, max_sge: u32) -> Result<Arc<NSrq>, Error> {
        let ctx = &pd.ctx;
        let mut init = ibv_srq_init_attr {
            srq_context: ptr::null_mut(),
            attr: ibv_srq_attr {
                max_wr,
                max_sge,
                srq_limit: 0,
            },
        };
        // SAFETY: live PD, valid attributes.
        let srq = unsafe { (ctx.v.create_srq)(pd.pd, &mut init) };
        if srq.is_null() {
            return Err(os_error("ibv_create_srq", ctx.name(), errno()));
        }
        // SAFETY: field of the SRQ just created.
        let id = unsafe { (*srq).handle };
        let s = Arc::new(NSrq {
            ctx: ctx.clone(),
            _pd: pd.clone(),
            srq,
            id,
        });
        ctx.srqs.insert(id, &s);
        Ok(s)
    }

    /// The SRQ of `ctx` numbered `id` (for a QP's `srq`).
    pub(super) fn by_id(ctx: &NContext, id: u32) -> Result<Arc<NSrq>, Error> {
        ctx.srqs
            .get(id)
            .ok_or(Error::Engine(EngineError::UnknownSrq(SrqId(id))))
    }

    /// `ibv_post_srq_recv`: `srq->context->ops.post_srq_recv(srq, wr, bad)`.
    pub fn post_recv(&self, wrs: &[RecvWr]) -> Result<(), Error> {
        if wrs.is_empty() {
            return Ok(());
        }
        let mut chain = RecvChain::new(wrs);
        let mut bad: *mut ibv_recv_wr = ptr::null_mut();
        // SAFETY: live SRQ; the chain's pointers stay valid for the call.
        let rc = unsafe {
            match ops((*self.srq).context).post_srq_recv {
                Some(f) => f(self.srq, chain.head(), &mut bad),
                None => libc::EOPNOTSUPP,
            }
        };
        chain.result(rc, bad, wrs, "shared receive queue", 0)
    }

    pub fn set_limit(&self, limit: u32) -> Result<(), Error> {
        let mut a = ibv_srq_attr {
            max_wr: 0,
            max_sge: 0,
            srq_limit: limit,
        };
        self.modify(&mut a, IBV_SRQ_LIMIT as c_int)
    }

    /// `ibv_modify_srq` with `IBV_SRQ_MAX_WR`; the new capacity is what the
    /// provider then reports.
    /// Resizes, then arms the limit (two `ibv_modify_srq` calls); returns
    /// the new size.
    pub fn resize_and_set_limit(&self, max_wr: u32, limit: u32) -> Result<u32, Error> {
        let got = self.resize(max_wr)?;
        self.set_limit(limit)?;
        Ok(got)
    }

    pub fn id(&self) -> u32 {
        self.id
    }

    pub fn resize(&self, max_wr: u32) -> Result<u32, Error> {
        let mut a = ibv_srq_attr {
            max_wr,
            max_sge: 0,
            srq_limit: 0,
        };
        self.modify(&mut a, IBV_SRQ_MAX_WR as c_int)?;
        let Some(query) = self.ctx.v.query_srq else {
            return Ok(max_wr);
        };
        // SAFETY: live SRQ; `a` is written by the provider.
        let rc = unsafe { query(self.srq, &mut a) };
        if rc != 0 {
            return Err(os_error("ibv_query_srq", self.ctx.name(), rc_errno(rc)));
        }
        Ok(a.max_wr.max(max_wr))
    }

    fn modify(&self, a: &mut ibv_srq_attr, mask: c_int) -> Result<(), Error> {
        // SAFETY: live SRQ, valid attributes.
        let rc = unsafe { (self.ctx.v.modify_srq)(self.srq, a, mask) };
        if rc == 0 {
            Ok(())
        } else {
            Err(os_error("ibv_modify_srq", self.ctx.name(), rc_errno(rc)))
        }
    }
}
