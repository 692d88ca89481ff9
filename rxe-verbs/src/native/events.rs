//! A native context's asynchronous events: `ibv_get_async_event`, mapped
//! to the API's `AsyncEventKind` and acknowledged at once.

use super::context::NContext;
use super::fd::wait_readable;
use super::ffi::*;
use crate::attr::AsyncEventKind;
use std::time::{Duration, Instant};

impl NContext {
    /// The next asynchronous event, waiting up to `timeout`. Events this
    /// API has no name for are acknowledged and skipped.
    pub fn get_async_event(&self, timeout: Duration) -> Option<AsyncEventKind> {
        if let Some(e) = self.events.lock().pop_front() {
            return Some(e);
        }
        let deadline = Instant::now() + timeout;
        let _g = self.async_lock.lock();
        // SAFETY: live context.
        let fd = unsafe { (*self.ctx).async_fd };
        loop {
            if !wait_readable(fd, deadline) {
                return None;
            }
            let mut ev = ibv_async_event::default();
            // SAFETY: live context, valid out-parameter; the descriptor is
            // non-blocking, so this returns at once if another reader won.
            if unsafe { (self.v.get_async_event)(self.ctx, &mut ev) } != 0 {
                if Instant::now() >= deadline {
                    return None;
                }
                continue;
            }
            // SAFETY: until the event is acknowledged its object is alive
            // (destroying it waits for the acknowledgement); the union
            // member read is the one the event type says.
            let kind = unsafe {
                match ev.event_type {
                    IBV_EVENT_QP_FATAL | IBV_EVENT_QP_REQ_ERR | IBV_EVENT_QP_ACCESS_ERR => {
                        Some(AsyncEventKind::QpFatal((*ev.element.qp).qp_num))
                    }
                    IBV_EVENT_COMM_EST => {
                        Some(AsyncEventKind::CommEstablished((*ev.element.qp).qp_num))
                    }
                    IBV_EVENT_SQ_DRAINED => {
                        Some(AsyncEventKind::SqDrained((*ev.element.qp).qp_num))
                    }
                    IBV_EVENT_CQ_ERR => Some(AsyncEventKind::CqError((*ev.element.cq).handle)),
                    IBV_EVENT_SRQ_LIMIT_REACHED => {
                        Some(AsyncEventKind::SrqLimitReached((*ev.element.srq).handle))
                    }
                    IBV_EVENT_PORT_ACTIVE => Some(AsyncEventKind::PortActive),
                    _ => None,
                }
            };
            // SAFETY: acknowledging the event just read, once.
            unsafe { (self.v.ack_async_event)(&mut ev) };
            if kind.is_some() {
                return kind;
            }
        }
    }
}
