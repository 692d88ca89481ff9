//! Completion queues and completion channels.

use crate::context::{Context, CtxImp, Inner};
use crate::error::Error;
use crate::native::{NChannel, NCq};
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
    imp: ChanImp,
}

#[derive(Clone)]
enum ChanImp {
    Soft {
        inner: Arc<ChannelInner>,
        ctx: Arc<Inner>,
    },
    Native(Arc<NChannel>),
    /// `ibv_create_comp_channel` failed; CQs refuse the channel.
    NativeFailed(Arc<Error>),
}

impl std::fmt::Debug for CompletionChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.imp {
            ChanImp::Soft { inner, .. } => f
                .debug_struct("CompletionChannel")
                .field("pending", &inner.events.lock().len())
                .finish(),
            ChanImp::Native(_) => f
                .debug_struct("CompletionChannel")
                .field("kind", &"native")
                .finish(),
            ChanImp::NativeFailed(e) => f
                .debug_struct("CompletionChannel")
                .field("failed", e)
                .finish(),
        }
    }
}

impl CompletionChannel {
    /// Waits for the next CQ event; returns the number of the CQ that fired,
    /// or `None` after `timeout`.
    pub fn get_event(&self, timeout: Duration) -> Option<u32> {
        let inner = match &self.imp {
            ChanImp::Soft { inner, .. } => inner,
            ChanImp::Native(n) => return n.get_event(timeout),
            ChanImp::NativeFailed(_) => {
                std::thread::sleep(timeout);
                return None;
            }
        };
        let deadline = Instant::now() + timeout;
        let mut q = inner.events.lock();
        loop {
            if let Some(cq) = q.pop_front() {
                return Some(cq.0);
            }
            if inner.cond.wait_until(&mut q, deadline).timed_out() {
                return q.pop_front().map(|c| c.0);
            }
        }
    }
}

/// A completion queue (`ibv_cq`).
pub struct CompletionQueue {
    imp: CqImp,
}

enum CqImp {
    Soft(SoftCq),
    Native(Arc<NCq>),
}

struct SoftCq {
    ctx: Arc<Inner>,
    id: CqId,
    capacity: u32,
}

impl std::fmt::Debug for CompletionQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompletionQueue")
            .field("id", &self.id())
            .field("capacity", &self.capacity())
            .finish()
    }
}

impl Context {
    /// Creates a completion channel. (On a native device whose
    /// `ibv_create_comp_channel` fails, the channel is refused by
    /// [`Context::create_cq`] with that error; [`Context::try_create_comp_channel`]
    /// reports it at once.)
    pub fn create_comp_channel(&self) -> CompletionChannel {
        self.try_create_comp_channel()
            .unwrap_or_else(|e| CompletionChannel {
                imp: ChanImp::NativeFailed(Arc::new(e)),
            })
    }

    /// Creates a completion channel, or says why it cannot.
    pub fn try_create_comp_channel(&self) -> Result<CompletionChannel, Error> {
        Ok(CompletionChannel {
            imp: match &self.imp {
                CtxImp::Soft(inner) => ChanImp::Soft {
                    inner: Arc::new(ChannelInner {
                        events: Mutex::new(VecDeque::new()),
                        cond: Condvar::new(),
                    }),
                    ctx: inner.clone(),
                },
                CtxImp::Native(n) => ChanImp::Native(NChannel::create(n)?),
            },
        })
    }

    /// Creates a CQ of `cqe` entries, optionally tied to a completion channel.
    pub fn create_cq(
        &self,
        cqe: u32,
        channel: Option<&CompletionChannel>,
    ) -> Result<CompletionQueue, Error> {
        let inner = match &self.imp {
            CtxImp::Soft(inner) => inner,
            CtxImp::Native(n) => {
                let ch = match channel.map(|c| &c.imp) {
                    None => None,
                    Some(ChanImp::Native(ch)) if ch.same_context(n) => Some(ch),
                    Some(ChanImp::NativeFailed(e)) => {
                        return Err(Error::InvalidArgument {
                            name: "channel",
                            reason: format!("the channel could not be created: {e}"),
                        })
                    }
                    Some(_) => return Err(Error::WrongDevice("channel")),
                };
                return Ok(CompletionQueue {
                    imp: CqImp::Native(NCq::create(n, cqe, ch)?),
                });
            }
        };
        let ch = match channel.map(|c| &c.imp) {
            None => None,
            Some(ChanImp::Soft { inner: ch, ctx }) if Arc::ptr_eq(ctx, inner) => Some(ch),
            Some(_) => return Err(Error::WrongDevice("channel")),
        };
        let s = &inner.shared;
        let id = s.with_engine(|e| e.create_cq(cqe))?;
        if let Some(ch) = ch {
            s.channels.lock().insert(id, ch.clone());
        }
        Ok(CompletionQueue {
            imp: CqImp::Soft(SoftCq {
                ctx: inner.clone(),
                id,
                capacity: cqe,
            }),
        })
    }
}

impl CompletionQueue {
    /// The CQ's number (as async events and channel events name it; on a
    /// native device, the CQ's kernel handle).
    pub fn id(&self) -> u32 {
        match &self.imp {
            CqImp::Soft(c) => c.id.0,
            CqImp::Native(n) => n.id,
        }
    }

    /// Capacity in completions (at least what was asked for).
    pub fn capacity(&self) -> u32 {
        match &self.imp {
            CqImp::Soft(c) => c.capacity,
            CqImp::Native(n) => n.capacity,
        }
    }

    /// Takes up to `max` completions (`ibv_poll_cq`), oldest first.
    pub fn poll(&self, max: usize) -> Vec<Completion> {
        let mut v = Vec::new();
        self.poll_into(&mut v, max);
        v
    }

    /// Appends up to `max` completions to `out`; returns how many.
    pub fn poll_into(&self, out: &mut Vec<Completion>, max: usize) -> usize {
        match &self.imp {
            CqImp::Soft(c) => {
                let mut e = c.ctx.shared.lock();
                e.poll_cq(c.id, max, out).unwrap_or(0)
            }
            CqImp::Native(n) => n.poll_into(out, max),
        }
    }

    /// Waits until `n` completions are there (or `timeout` passes) and
    /// takes them.
    pub fn wait(&self, n: usize, timeout: Duration) -> Result<Vec<Completion>, Error> {
        let c = match &self.imp {
            CqImp::Soft(c) => c,
            CqImp::Native(q) => return wait_native(q, n, timeout),
        };
        let deadline = Instant::now() + timeout;
        let mut out = Vec::with_capacity(n);
        let s = &c.ctx.shared;
        // First poll for a short while in this thread: the answer to what
        // was just posted often arrives within microseconds, and driving the
        // socket here saves two thread wake-ups per packet.
        let spin_until = Instant::now() + spin_budget().min(timeout);
        loop {
            s.lock().poll_cq(c.id, n - out.len(), &mut out)?;
            if out.len() >= n {
                return Ok(out);
            }
            if Instant::now() >= spin_until {
                break;
            }
            if !s.poll_progress() {
                std::hint::spin_loop();
            }
        }
        let mut e = s.lock();
        loop {
            let want = n - out.len();
            e.poll_cq(c.id, want, &mut out)?;
            if out.len() >= n {
                return Ok(out);
            }
            if s.progress.wait_until(&mut e, deadline).timed_out() {
                e.poll_cq(c.id, n - out.len(), &mut out)?;
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
        match &self.imp {
            CqImp::Soft(c) => Ok(c
                .ctx
                .shared
                .with_engine(|e| e.req_notify_cq(c.id, solicited_only))?),
            CqImp::Native(n) => n.req_notify(solicited_only),
        }
    }
}

/// How long [`CompletionQueue::wait`] polls before it sleeps:
/// `RXE_SPIN_US` microseconds (default 0: on a machine with few cores the
/// polling thread takes the CPU the peer and the progress thread need, and
/// latency got worse, not better; worth trying where cores are spare).
fn spin_budget() -> Duration {
    static BUDGET: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *BUDGET.get_or_init(|| {
        let us = std::env::var("RXE_SPIN_US")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        Duration::from_micros(us)
    })
}

/// [`CompletionQueue::wait`] on a native CQ: polls, spinning briefly and
/// then sleeping a little longer each round (at most 1 ms).
fn wait_native(q: &NCq, n: usize, timeout: Duration) -> Result<Vec<Completion>, Error> {
    let deadline = Instant::now() + timeout;
    let mut out = Vec::with_capacity(n);
    let mut nap = Duration::ZERO;
    loop {
        let want = n - out.len();
        q.poll_into(&mut out, want);
        if out.len() >= n {
            return Ok(out);
        }
        let now = Instant::now();
        if now >= deadline {
            return if out.is_empty() {
                Err(Error::Timeout(timeout))
            } else {
                Ok(out)
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

impl Drop for SoftCq {
    fn drop(&mut self) {
        let s = &self.ctx.shared;
        s.channels.lock().remove(&self.id);
        let _ = s.with_engine(|e| e.destroy_cq(self.id));
    }
}
