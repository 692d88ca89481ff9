//! The two event queues of a soft device: a completion channel's
//! ([`ChannelEvents`]) and the device's asynchronous events
//! ([`AsyncEvents`]). Both are filled by whichever thread collects what the
//! engine produced (`Shared::collect`, with the engine locked) and emptied
//! by application threads; they use only [`crate::sync`], so the model
//! tests (`tests/model.rs`) check them under loom as they are.

use crate::sync::{Condvar, Mutex, OnceLock};
use std::collections::VecDeque;
use std::time::Instant;

/// A hook that takes a channel's events instead of its queue, called with
/// the engine locked: it must be quick and must not call back into the
/// device (queueing the event where a C program's descriptor shows it is
/// what it is for).
pub(crate) type Sink<T> = Box<dyn Fn(T) + Send + Sync>;

/// A completion channel's queue of CQ events.
pub(crate) struct ChannelEvents<T> {
    queue: Mutex<VecDeque<T>>,
    cond: Condvar,
    /// Takes every event once set (`CompletionChannel::set_notify`).
    sink: OnceLock<Sink<T>>,
}

impl<T> ChannelEvents<T> {
    pub fn new() -> Self {
        ChannelEvents {
            queue: Mutex::new(VecDeque::new()),
            cond: Condvar::new(),
            sink: OnceLock::new(),
        }
    }

    /// Hands the event to the sink, or queues it and wakes the threads
    /// waiting for one.
    pub fn push(&self, event: T) {
        // Under the queue's lock, so that a sink being set (which drains
        // the queue under the same lock) misses nothing.
        let mut q = self.queue.lock();
        match self.sink.get() {
            Some(f) => {
                drop(q);
                f(event);
            }
            None => {
                q.push_back(event);
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

/// A hook that takes asynchronous events instead of the queue.
pub(crate) type AsyncHook<E> = Box<dyn Fn(E) + Send + Sync>;

/// The device's asynchronous events: a queue that
/// [`AsyncEvents::get`] reads, until a hook is set
/// ([`AsyncEvents::set_hook`]), which from then on takes every event.
pub(crate) struct AsyncEvents<E> {
    queue: Mutex<VecDeque<E>>,
    cond: Condvar,
    hook: OnceLock<AsyncHook<E>>,
}

impl<E> AsyncEvents<E> {
    pub fn new(queued: impl IntoIterator<Item = E>) -> Self {
        AsyncEvents {
            queue: Mutex::new(queued.into_iter().collect()),
            cond: Condvar::new(),
            hook: OnceLock::new(),
        }
    }

    /// Hands new events to the hook, or queues them if none is set.
    pub fn raise(&self, events: Vec<E>) {
        if events.is_empty() {
            return;
        }
        // Under the queue's lock, so that a hook being set (which drains
        // the queue under the same lock) misses nothing.
        let mut q = self.queue.lock();
        match self.hook.get() {
            Some(f) => {
                drop(q);
                events.into_iter().for_each(f);
            }
            None => {
                q.extend(events);
                self.cond.notify_all();
            }
        }
    }

    /// The oldest queued event, waiting for one until `deadline`.
    pub fn get(&self, deadline: Instant) -> Option<E> {
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

    /// Sets the hook and hands it the events already queued; false if a
    /// hook was set already.
    pub fn set_hook(&self, f: AsyncHook<E>) -> bool {
        let mut q = self.queue.lock();
        if self.hook.set(f).is_err() {
            return false;
        }
        let f = self.hook.get().expect("just set");
        q.drain(..).for_each(f);
        true
    }
}
