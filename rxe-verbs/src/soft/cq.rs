//! The soft backend's completion queues and completion channels: polls
//! and waits that take in what the socket holds when no other thread
//! receives (see [`super::progress`]).

use super::Inner;
use crate::error::Error;
use crate::events::Events;
use rxe_core::engine::CqId;
use rxe_core::types::Completion;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A soft completion channel's queue.
pub(crate) type ChannelInner = Events<CqId>;

/// A completion channel of a soft device.
#[derive(Clone)]
pub(crate) struct SoftChannel {
    inner: Arc<ChannelInner>,
    ctx: Arc<Inner>,
}

impl SoftChannel {
    pub fn new(ctx: &Arc<Inner>) -> SoftChannel {
        SoftChannel {
            inner: Arc::new(ChannelInner::new()),
            ctx: ctx.clone(),
        }
    }

    /// Events queued and not yet taken.
    pub fn pending(&self) -> usize {
        self.inner.len()
    }

    /// Sets the hook that takes every event; false if one is set already.
    pub fn set_notify(&self, f: crate::cq::Notify) -> bool {
        self.inner.set_sink(Box::new(move |c: CqId| f(c.0)))
    }

    /// Drops the queued events of CQ `cq`; returns how many.
    pub fn forget(&self, cq: u32) -> usize {
        self.inner.forget(|c| c.0 == cq)
    }

    pub fn get_event(&self, timeout: Duration) -> Option<u32> {
        self.inner.pop(Instant::now() + timeout).map(|c| c.0)
    }
}

/// A CQ of a soft device.
pub(crate) struct SoftCq {
    ctx: Arc<Inner>,
    id: CqId,
    /// Changes only with [`SoftCq::resize`].
    capacity: AtomicU32,
    /// The device's count of delivered completions when this CQ was last
    /// found empty by [`SoftCq::poll_progress`] (`u64::MAX`: never):
    /// while the count has not moved, the CQ is still empty and a busy
    /// poller need not lock the engine to see it.
    empty_at: AtomicU64,
}

impl SoftCq {
    /// Creates a CQ of `cqe` entries whose events go to `channel`, which
    /// must be of the same device.
    pub fn create(
        ctx: &Arc<Inner>,
        cqe: u32,
        channel: Option<&SoftChannel>,
    ) -> Result<SoftCq, Error> {
        if channel.is_some_and(|ch| !Arc::ptr_eq(&ch.ctx, ctx)) {
            return Err(Error::WrongDevice("channel"));
        }
        let s = &ctx.shared;
        let (id, capacity) = s.with_engine(|e| {
            let id = e.create_cq(cqe)?;
            e.cq_capacity(id).map(|c| (id, c))
        })?;
        if let Some(ch) = channel {
            s.channels.lock().insert(id, ch.inner.clone());
        }
        Ok(SoftCq {
            ctx: ctx.clone(),
            id,
            capacity: AtomicU32::new(capacity),
            empty_at: AtomicU64::new(u64::MAX),
        })
    }

    pub fn id(&self) -> u32 {
        self.id.0
    }

    pub fn capacity(&self) -> u32 {
        self.capacity.load(Ordering::Acquire)
    }

    pub fn resize(&self, cqe: u32) -> Result<u32, Error> {
        let n = self.ctx.shared.with_engine(|e| e.resize_cq(self.id, cqe))?;
        self.capacity.store(n, Ordering::Release);
        Ok(n)
    }

    pub fn poll_into(&self, out: &mut Vec<Completion>, max: usize) -> usize {
        // Posts held for a batch go out before the look.
        self.ctx.shared.flush_held();
        let mut e = self.ctx.shared.lock();
        e.poll_cq(self.id, max, out).unwrap_or(0)
    }

    /// A busy poller's look (see [`crate::CompletionQueue::poll_progress`]).
    pub fn poll_progress(&self, out: &mut Vec<Completion>, max: usize) -> usize {
        let s = &self.ctx.shared;
        s.flush_held();
        let seen = s.delivered.load(Ordering::Acquire);
        if self.empty_at.load(Ordering::Relaxed) != seen {
            let n = self.poll_into(out, max);
            if n > 0 {
                return n;
            }
            // Empty as of `seen` at least (a completion delivered since
            // moved the count on, and the next poll looks again).
            self.empty_at.store(seen, Ordering::Relaxed);
        }
        if s.poll_socket_as_receiver() > 0 && s.delivered.load(Ordering::Acquire) != seen {
            return self.poll_into(out, max);
        }
        0
    }

    /// Waits for `n` completions (see [`crate::CompletionQueue::wait_into`]).
    pub fn wait_into(
        &self,
        out: &mut Vec<Completion>,
        n: usize,
        timeout: Duration,
    ) -> Result<usize, Error> {
        let s = &self.ctx.shared;
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
            s.lock().poll_cq(self.id, n - got(out), out)?;
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
                    s.lock().poll_cq(self.id, n - got(out), out)?;
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
                            s.lock().poll_cq(self.id, n - got(out), out)?;
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
            e.poll_cq(self.id, n - got(out), out)?;
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

    pub fn req_notify(&self, solicited_only: bool) -> Result<(), Error> {
        Ok(self
            .ctx
            .shared
            .with_engine(|e| e.req_notify_cq(self.id, solicited_only))?)
    }
}

impl Drop for SoftCq {
    fn drop(&mut self) {
        let s = &self.ctx.shared;
        s.channels.lock().remove(&self.id);
        let _ = s.with_engine(|e| e.destroy_cq(self.id));
    }
}
