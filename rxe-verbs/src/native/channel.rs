//! `NChannel`, a native completion channel: the CQ events of the CQs
//! created on it, read with a deadline and acknowledged at once.

use super::context::NContext;
use super::error::{errno, os_error};
use super::fd::{set_nonblocking, wait_readable};
use super::ffi::*;
use crate::error::Error;
use parking_lot::Mutex;
use std::ffi::c_void;
use std::ptr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A native completion channel.
pub(crate) struct NChannel {
    ctx: Arc<NContext>,
    pub(super) ch: *mut ibv_comp_channel,
    lock: Mutex<()>,
}

// SAFETY: see NContext; readers are serialized by `lock`.
unsafe impl Send for NChannel {}
// SAFETY: as above.
unsafe impl Sync for NChannel {}

impl Drop for NChannel {
    fn drop(&mut self) {
        // SAFETY: every CQ using the channel holds an Arc of it; destroyed once.
        unsafe { (self.ctx.v.destroy_comp_channel)(self.ch) };
    }
}

impl NChannel {
    pub fn create(ctx: &Arc<NContext>) -> Result<Arc<NChannel>, Error> {
        // SAFETY: live context.
        let ch = unsafe { (ctx.v.create_comp_channel)(ctx.ctx) };
        if ch.is_null() {
            return Err(os_error("ibv_create_comp_channel", ctx.name(), errno()));
        }
        // SAFETY: the channel's descriptor, just created.
        set_nonblocking(unsafe { (*ch).fd });
        Ok(Arc::new(NChannel {
            ctx: ctx.clone(),
            ch,
            lock: Mutex::new(()),
        }))
    }

    pub fn same_context(&self, ctx: &Arc<NContext>) -> bool {
        Arc::ptr_eq(&self.ctx, ctx)
    }

    /// The next CQ event (acknowledged at once), as the CQ's number.
    pub fn get_event(&self, timeout: Duration) -> Option<u32> {
        let deadline = Instant::now() + timeout;
        let _g = self.lock.lock();
        // SAFETY: live channel.
        let fd = unsafe { (*self.ch).fd };
        loop {
            if !wait_readable(fd, deadline) {
                return None;
            }
            let mut cq: *mut ibv_cq = ptr::null_mut();
            let mut cq_ctx: *mut c_void = ptr::null_mut();
            // SAFETY: live channel, valid out-parameters; non-blocking fd.
            if unsafe { (self.ctx.v.get_cq_event)(self.ch, &mut cq, &mut cq_ctx) } == 0 {
                // SAFETY: the CQ cannot be destroyed before this event is
                // acknowledged (ibv_destroy_cq waits for it).
                let id = unsafe { (*cq).handle };
                // SAFETY: acknowledging the one event just read.
                unsafe { (self.ctx.v.ack_cq_events)(cq, 1) };
                return Some(id);
            }
            if Instant::now() >= deadline {
                return None;
            }
        }
    }
}
