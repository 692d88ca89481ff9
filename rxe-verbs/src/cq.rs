//! Completion queues and completion channels.

use crate::context::{Context, Inner};
use crate::error::Error;
use parking_lot::{Condvar, Mutex};
use rxe_core::engine::CqId;
use rxe_core::types::Completion;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) struct ChannelInner {
    events: Mutex<VecDeque<CqId>>,
    cond: Condvar,
}

impl ChannelInner {
    pub fn push(&self, cq: CqId) {
        self.events.lock().push_back(cq);
        self.cond.notify_all();
    }
}

/// A completion channel (`ibv_comp_channel`): a CQ armed with
/// [`CompletionQueue::req_notify`] posts one event here when its next
/// (or next solicited) completion arrives; [`CompletionChannel::get_event`]
/// blocks until one does.
#[derive(Clone)]
pub struct CompletionChannel {
    pub(crate) inner: Arc<ChannelInner>,
    pub(crate) ctx: Arc<Inner>,
}

impl std::fmt::Debug for CompletionChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompletionChannel")
            .field("pending", &self.inner.events.lock().len())
            .finish()
    }
}

impl CompletionChannel {
    /// Waits for the next CQ event; returns the number of the CQ that fired,
    /// or `None` after `timeout`.
    pub fn get_event(&self, timeout: Duration) -> Option<u32> {
        let deadline = Instant::now() + timeout;
        let mut q = self.inner.events.lock();
        loop {
            if let Some(cq) = q.pop_front() {
                return Some(cq.0);
            }
            if self.inner.cond.wait_until(&mut q, deadline).timed_out() {
                return q.pop_front().map(|c| c.0);
            }
        }
    }
}

/// A completion queue (`ibv_cq`).
pub struct CompletionQueue {
    pub(crate) ctx: Arc<Inner>,
    pub(crate) id: CqId,
    capacity: u32,
}

impl std::fmt::Debug for CompletionQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompletionQueue")
            .field("id", &self.id.0)
            .field("capacity", &self.capacity)
            .finish()
    }
}

impl Context {
    /// Creates a completion channel.
    pub fn create_comp_channel(&self) -> CompletionChannel {
        CompletionChannel {
            inner: Arc::new(ChannelInner {
                events: Mutex::new(VecDeque::new()),
                cond: Condvar::new(),
            }),
            ctx: self.inner.clone(),
        }
    }

    /// Creates a CQ of `cqe` entries, optionally tied to a completion channel.
    pub fn create_cq(
        &self,
        cqe: u32,
        channel: Option<&CompletionChannel>,
    ) -> Result<CompletionQueue, Error> {
        if let Some(ch) = channel {
            if !Arc::ptr_eq(&ch.ctx, &self.inner) {
                return Err(Error::WrongDevice("channel"));
            }
        }
        let s = self.shared();
        let id = s.with_engine(|e| e.create_cq(cqe))?;
        if let Some(ch) = channel {
            s.channels.lock().insert(id, ch.inner.clone());
        }
        Ok(CompletionQueue {
            ctx: self.inner.clone(),
            id,
            capacity: cqe,
        })
    }
}

impl CompletionQueue {
    /// The CQ's number (as async events and channel events name it).
    pub fn id(&self) -> u32 {
        self.id.0
    }

    /// Capacity in completions.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// Takes up to `max` completions (`ibv_poll_cq`), oldest first.
    pub fn poll(&self, max: usize) -> Vec<Completion> {
        let mut v = Vec::new();
        self.poll_into(&mut v, max);
        v
    }

    /// Appends up to `max` completions to `out`; returns how many.
    pub fn poll_into(&self, out: &mut Vec<Completion>, max: usize) -> usize {
        let mut e = self.ctx.shared.lock();
        e.poll_cq(self.id, max, out).unwrap_or(0)
    }

    /// Waits until `n` completions are there (or `timeout` passes) and
    /// takes them.
    pub fn wait(&self, n: usize, timeout: Duration) -> Result<Vec<Completion>, Error> {
        let deadline = Instant::now() + timeout;
        let mut out = Vec::with_capacity(n);
        let s = &self.ctx.shared;
        let mut e = s.lock();
        loop {
            let want = n - out.len();
            e.poll_cq(self.id, want, &mut out)?;
            if out.len() >= n {
                return Ok(out);
            }
            if s.progress.wait_until(&mut e, deadline).timed_out() {
                e.poll_cq(self.id, n - out.len(), &mut out)?;
                if out.len() >= n {
                    return Ok(out);
                }
                if out.is_empty() {
                    return Err(Error::Timeout(timeout));
                }
                return Ok(out);
            }
        }
    }

    /// Arms the CQ for one channel event (`ibv_req_notify_cq`): on the next
    /// completion, or with `solicited_only` on the next solicited or error one.
    pub fn req_notify(&self, solicited_only: bool) -> Result<(), Error> {
        Ok(self
            .ctx
            .shared
            .with_engine(|e| e.req_notify_cq(self.id, solicited_only))?)
    }
}

impl Drop for CompletionQueue {
    fn drop(&mut self) {
        let s = &self.ctx.shared;
        s.channels.lock().remove(&self.id);
        let _ = s.with_engine(|e| e.destroy_cq(self.id));
    }
}
