//! The event queues of a soft device: a completion channel's CQ events,
//! an rdma_cm channel's connection events and the device's asynchronous
//! events are each an [`Events`]. They are filled by whichever thread
//! collects what the engine produced (`Shared::collect`, with the engine
//! locked) and emptied by application threads; they use only
//! [`crate::sync`], so the model tests (`tests/model.rs`) check them under
//! loom as they are.

use crate::sync::{Condvar, Mutex, OnceLock};
use std::collections::VecDeque;
use std::time::Instant;

/// A hook that takes a queue's events instead of the queue, called with
/// the engine locked: it must be quick and must not call back into the
/// device (queueing the event where a C program's descriptor shows it is
/// what it is for).
pub(crate) type Sink<T> = Box<dyn Fn(T) + Send + Sync>;

/// A queue of events that [`Events::pop`] reads, until a sink is set
/// ([`Events::set_sink`]), which from then on takes every event.
pub(crate) struct Events<T> {
    queue: Mutex<VecDeque<T>>,
    cond: Condvar,
    /// Takes every event once set.
    sink: OnceLock<Sink<T>>,
}

impl<T> Events<T> {
    /// An empty queue.
    pub fn new() -> Self {
        Self::with(None)
    }

    /// A queue that holds `queued` already (the device's first
    /// asynchronous event, port active).
    pub fn with(queued: impl IntoIterator<Item = T>) -> Self {
        Events {
            queue: Mutex::new(queued.into_iter().collect()),
            cond: Condvar::new(),
            sink: OnceLock::new(),
        }
    }

    /// Hands the event to the sink, or queues it and wakes the threads
    /// waiting for one.
    pub fn push(&self, event: T) {
        self.push_all([event]);
    }

    /// [`Events::push`] for several events, in order.
    pub fn push_all(&self, events: impl IntoIterator<Item = T>) {
        let mut events = events.into_iter().peekable();
        if events.peek().is_none() {
            return; // (every collect raises its async events, mostly none)
        }
        // Under the queue's lock, so that a sink being set (which drains
        // the queue under the same lock) misses nothing.
        let mut q = self.queue.lock();
        match self.sink.get() {
            Some(f) => {
                drop(q);
                events.for_each(f);
            }
            None => {
                q.extend(events);
                drop(q);
                self.cond.notify_all();
            }
        }
    }

    /// Sets the sink and hands it the events already queued; false if one
    /// was set already.
    pub fn set_sink(&self, f: Sink<T>) -> bool {
        let mut q = self.queue.lock();
        if self.sink.set(f).is_err() {
            return false;
        }
        let f = self.sink.get().expect("just set");
        q.drain(..).for_each(f);
        true
    }

    /// The oldest event, waiting for one until `deadline`.
    pub fn pop(&self, deadline: Instant) -> Option<T> {
        let mut q = self.queue.lock();
        loop {
            if let Some(e) = q.pop_front() {
                return Some(e);
            }
            if self.cond.wait_until(&mut q, deadline).timed_out() {
                return q.pop_front();
            }
        }
    }

    /// Drops the queued events `gone` says are withdrawn; returns how many.
    pub fn forget(&self, gone: impl Fn(&T) -> bool) -> usize {
        let mut q = self.queue.lock();
        let before = q.len();
        q.retain(|e| !gone(e));
        before - q.len()
    }

    /// How many events are queued.
    pub fn len(&self) -> usize {
        self.queue.lock().len()
    }
}
