//! Completion queues and completion channels.

use crate::context::{Context, CtxImp};
use crate::error::Error;
use crate::events::Events;
use crate::native::{NChannel, NCq};
use crate::soft::Inner;
use rxe_core::engine::CqId;
use rxe_core::types::Completion;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A soft completion channel's queue.
pub(crate) type ChannelInner = Events<CqId>;

/// Takes a channel's events, the numbers of the CQs that fired, instead of
/// [`CompletionChannel::get_event`] (see [`CompletionChannel::set_notify`]).
pub type Notify = Box<dyn Fn(u32) + Send + Sync>;

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
                .field("pending", &inner.len())
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
    /// Hands every event of the channel to `f` (the number of the CQ that
    /// fired) instead of queueing it for [`CompletionChannel::get_event`]:
    /// those queued already at once, each later one from whichever thread
    /// raises it (with the device's engine locked: the hook must be quick
    /// and must not call the device). This is how the C library queues
    /// events where the program's `channel->fd` shows them. Set once; on a
    /// native device, or when already set, it returns
    /// [`Error::Unsupported`].
    pub fn set_notify(&self, f: Notify) -> Result<(), Error> {
        match &self.imp {
            ChanImp::Soft { inner, .. } if inner.set_sink(Box::new(move |c: CqId| f(c.0))) => {
                Ok(())
            }
            ChanImp::Soft { .. } => Err(crate::error::unsupported(
                "a second notify hook on a channel",
            )),
            _ => Err(crate::error::unsupported(
                "notify hooks on a native completion channel",
            )),
        }
    }

    /// Drops the events of CQ `cq` still queued (the CQ is being
    /// destroyed, and the kernel drops them too); returns how many.
    pub fn forget(&self, cq: u32) -> usize {
        match &self.imp {
            ChanImp::Soft { inner, .. } => inner.forget(|c| c.0 == cq),
            _ => 0,
        }
    }

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
        inner.pop(Instant::now() + timeout).map(|c| c.0)
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
    /// Changes only with [`CompletionQueue::resize`].
    capacity: AtomicU32,
    /// The device's count of delivered completions when this CQ was last
    /// found empty by [`CompletionQueue::poll_progress`] (`u64::MAX`:
    /// never): while the count has not moved, the CQ is still empty and a
    /// busy poller need not lock the engine to see it.
    empty_at: AtomicU64,
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
                    inner: Arc::new(ChannelInner::new()),
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
        let (id, capacity) = s.with_engine(|e| {
            let id = e.create_cq(cqe)?;
            e.cq_capacity(id).map(|c| (id, c))
        })?;
        if let Some(ch) = ch {
            s.channels.lock().insert(id, ch.clone());
        }
        Ok(CompletionQueue {
            imp: CqImp::Soft(SoftCq {
                ctx: inner.clone(),
                id,
                capacity: AtomicU32::new(capacity),
                empty_at: AtomicU64::new(u64::MAX),
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
            CqImp::Soft(c) => c.capacity.load(Ordering::Acquire),
            CqImp::Native(n) => n.capacity(),
        }
    }

    /// Resizes the CQ to hold at least `cqe` completions (`ibv_resize_cq`),
    /// larger or smaller, keeping the completions it holds (never fewer
    /// than those); returns the new capacity.
    pub fn resize(&self, cqe: u32) -> Result<u32, Error> {
        match &self.imp {
            CqImp::Soft(c) => {
                let n = c.ctx.shared.with_engine(|e| e.resize_cq(c.id, cqe))?;
                c.capacity.store(n, Ordering::Release);
                Ok(n)
            }
            CqImp::Native(n) => n.resize(cqe),
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
                // Posts held for a batch go out before the look.
                c.ctx.shared.flush_held();
                let mut e = c.ctx.shared.lock();
                e.poll_cq(c.id, max, out).unwrap_or(0)
            }
            CqImp::Native(n) => n.poll_into(out, max),
        }
    }

    /// [`CompletionQueue::poll_into`] for a program that polls in a loop
    /// (the C library's `ibv_poll_cq`): when the CQ is empty and no other
    /// thread is receiving, it first takes in what the socket holds,
    /// without waiting, so the completion a busy poller waits for arrives
    /// on its own thread instead of after the progress thread's next turn.
    ///
    /// An empty poll is made cheap: while no completion has been delivered
    /// anywhere on the device since this CQ was last found empty, the
    /// engine is not locked to look again, and after taking in datagrams
    /// the CQ is looked at again only if that delivered a completion.
    pub fn poll_progress(&self, out: &mut Vec<Completion>, max: usize) -> usize {
        let c = match &self.imp {
            CqImp::Soft(c) => c,
            CqImp::Native(_) => return self.poll_into(out, max),
        };
        let s = &c.ctx.shared;
        s.flush_held();
        let seen = s.delivered.load(Ordering::Acquire);
        if c.empty_at.load(Ordering::Relaxed) != seen {
            let n = self.poll_into(out, max);
            if n > 0 {
                return n;
            }
            // Empty as of `seen` at least (a completion delivered since
            // moved the count on, and the next poll looks again).
            c.empty_at.store(seen, Ordering::Relaxed);
        }
        if s.poll_socket_as_receiver() > 0 && s.delivered.load(Ordering::Acquire) != seen {
            return self.poll_into(out, max);
        }
        0
    }

    /// Waits until `n` completions are there (or `timeout` passes) and
    /// takes them: all `n`, or after the timeout what came (an
    /// [`Error::Timeout`] if nothing did).
    ///
    /// On a soft device the waiting thread receives from the socket itself
    /// when no other thread does (see the crate's "Threads" notes), so the
    /// packet that completes the work wakes this thread directly.
    pub fn wait(&self, n: usize, timeout: Duration) -> Result<Vec<Completion>, Error> {
        let mut out = Vec::with_capacity(n.min(4096));
        self.wait_into(&mut out, n, timeout)?;
        Ok(out)
    }

    /// [`CompletionQueue::wait`] into a vector the caller keeps (no
    /// allocation per call once it has room): appends the completions
    /// and returns how many; [`Error::Timeout`] if none came.
    pub fn wait_into(
        &self,
        out: &mut Vec<Completion>,
        n: usize,
        timeout: Duration,
    ) -> Result<usize, Error> {
        let c = match &self.imp {
            CqImp::Soft(c) => c,
            CqImp::Native(q) => return wait_native(q, out, n, timeout),
        };
        let s = &c.ctx.shared;
        s.flush_held();
        let start = Instant::now();
        let deadline = start.checked_add(timeout);
        let base = out.len();
        let got = |out: &Vec<Completion>| out.len() - base;
        let timed_out = |out: &Vec<Completion>| {
            if got(out) == 0 {
                Err(Error::Timeout(timeout))
            } else {
                Ok(got(out))
            }
        };
        loop {
            s.lock().poll_cq(c.id, n - got(out), out)?;
            if got(out) >= n {
                return Ok(got(out));
            }
            if let Some(token) = s.receiver.try_take() {
                s.receiver.set_poller(false);
                // This thread is the receiver: take packets in until the
                // completions are there.
                // Datagrams the last round took in (see "Waiting" in
                // `crate::soft::progress`).
                let mut taken = 0;
                let r = (|| loop {
                    // Look before sleeping: a completion another thread
                    // delivered after the look above but before this thread
                    // took the token woke nobody (`Shared::collect` wakes
                    // the receiver only while the token is taken), and
                    // nothing else would end the wait below (see
                    // "Concurrency" in docs/reliability.md).
                    s.lock().poll_cq(c.id, n - got(out), out)?;
                    if got(out) >= n {
                        return Ok(got(out));
                    }
                    let left = match deadline {
                        Some(d) => match d.checked_duration_since(Instant::now()) {
                            Some(left) if !left.is_zero() => Some(left),
                            _ => return timed_out(out),
                        },
                        None => None,
                    };
                    // Nothing goes unsent while this thread sleeps.
                    s.flush();
                    // A bounded spin first, if asked for
                    // (`Context::set_poll_spin`): look at the socket without
                    // sleeping for a while, yielding the core between looks
                    // (a peer on the same core then runs at once).
                    let spin = Duration::from_nanos(s.spin_ns.load(Ordering::Relaxed));
                    if !spin.is_zero() {
                        let until = Instant::now() + left.map_or(spin, |l| l.min(spin));
                        loop {
                            taken = s.round(true, true, false);
                            s.lock().poll_cq(c.id, n - got(out), out)?;
                            if got(out) >= n {
                                return Ok(got(out));
                            }
                            // The wait goes on: what the round produced
                            // (the READ requests or data packets its
                            // responses and ACKs let go) leaves now, not
                            // when the spin ends ("Deferred sending" is for
                            // a round that ends the wait).
                            if taken > 0 {
                                s.flush();
                            }
                            if Instant::now() >= until {
                                break;
                            }
                            std::thread::yield_now();
                        }
                        s.flush();
                    }
                    // The receiver's own wake-up (`Shared::collect` sets
                    // it for a completion another thread delivers): the
                    // progress thread, which may be waiting too, cannot
                    // take it.
                    let readable = taken > 0 || s.waiter.wait_receiver(left).unwrap_or(false);
                    // What this round produces waits for the application's
                    // answer if the wait ends here ("Deferred sending").
                    taken = s.round(readable, true, false);
                })();
                drop(token);
                // Another waiting thread may take the socket now.
                s.progress.notify_all();
                return r;
            }
            // Another thread receives: sleep until its next round (or, at
            // the latest, a little later, to see whether the socket is
            // free to take).
            s.flush();
            let mut e = s.lock();
            e.poll_cq(c.id, n - got(out), out)?;
            if got(out) >= n {
                return Ok(got(out));
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return timed_out(out);
            }
            let recheck = now + crate::soft::progress::TIMER_TICK;
            s.progress
                .wait_until(&mut e, deadline.map_or(recheck, |d| d.min(recheck)));
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

/// [`CompletionQueue::wait`] on a native CQ: polls, spinning briefly and
/// then sleeping a little longer each round (at most 1 ms).
fn wait_native(
    q: &NCq,
    out: &mut Vec<Completion>,
    n: usize,
    timeout: Duration,
) -> Result<usize, Error> {
    let deadline = Instant::now() + timeout;
    let base = out.len();
    let mut nap = Duration::ZERO;
    loop {
        let want = n - (out.len() - base);
        q.poll_into(out, want);
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

impl Drop for SoftCq {
    fn drop(&mut self) {
        let s = &self.ctx.shared;
        s.channels.lock().remove(&self.id);
        let _ = s.with_engine(|e| e.destroy_cq(self.id));
    }
}
