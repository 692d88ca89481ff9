//! A queue of events shown on a file descriptor, one byte per event: a
//! completion channel's, a context's async events, an rdma_cm event
//! channel's. The program polls the descriptor and reads a byte for each
//! event it takes (`ibv_get_cq_event`, `ibv_get_async_event`,
//! `rdma_get_cm_event`), blocking or not as it set the descriptor; events
//! are withdrawn when the object they are about is destroyed.
//!
//! The rule: the descriptor holds as many bytes as the queue holds events,
//! except for the bytes that threads have read and not yet matched with an
//! event. A taker reads its byte first (that is where it blocks, exactly
//! as the program asked) and only then takes the queue's lock, so an event
//! may be withdrawn between the two while its byte is in that thread's
//! hands. [`EventQueue::withdraw`] then finds fewer bytes to drain than
//! events withdrawn and records the difference as owed; the next takers
//! to reach the lock pay it (their byte stood for a withdrawn event) and
//! read again. Without that count, a taker whose byte's event was
//! withdrawn took the next event (whose own byte stayed behind), and the
//! descriptor stayed readable with nothing queued: `poll` said an event
//! was there and the program's blocking read then hung (see
//! "Concurrency" in docs/reliability.md). Bytes are written under the
//! queue's lock for the same reason: a byte written after its event was
//! withdrawn would be one no event stands behind.
//!
//! Uses only [`crate::sync`], so the model tests
//! (`rxe-verbs/tests/model.rs`) check it under loom as it is, with a
//! modelled descriptor.

use crate::sync::Mutex;
use std::collections::VecDeque;

/// The descriptor side: [`crate::events::EventPipe`] in the library, a
/// counter in the model tests.
pub trait EventFd {
    /// One byte more. Never blocks.
    fn signal(&self);
    /// Takes up to `n` bytes without blocking; returns how many it took.
    fn drain(&self, n: usize) -> usize;
    /// Takes one byte, blocking unless the program made the descriptor
    /// non-blocking. Err is the errno (EAGAIN, EINTR, ...).
    fn take(&self) -> Result<(), i32>;
}

struct State<T> {
    queue: VecDeque<T>,
    /// Withdrawn events whose bytes were in other threads' hands.
    owed: usize,
}

/// Events of type `T` and the descriptor `F` that shows them.
pub struct EventQueue<T, F> {
    fd: F,
    st: Mutex<State<T>>,
}

impl<T, F: EventFd> EventQueue<T, F> {
    pub fn new(fd: F) -> Self {
        EventQueue {
            fd,
            st: Mutex::new(State {
                queue: VecDeque::new(),
                owed: 0,
            }),
        }
    }

    /// The descriptor.
    pub fn fd(&self) -> &F {
        &self.fd
    }

    /// Queues an event and makes the descriptor show it.
    pub fn push(&self, event: T) {
        let mut st = self.st.lock();
        st.queue.push_back(event);
        self.fd.signal();
    }

    /// Takes out the events `gone` names (their object is destroyed), and
    /// their bytes.
    pub fn withdraw(&self, mut gone: impl FnMut(&T) -> bool) -> Vec<T> {
        let mut st = self.st.lock();
        let (out, keep): (VecDeque<T>, VecDeque<T>) = st.queue.drain(..).partition(|e| gone(e));
        st.queue = keep;
        let drained = self.fd.drain(out.len());
        st.owed += out.len() - drained;
        out.into()
    }

    /// The next event `accept` takes: reads a byte (blocking unless the
    /// descriptor is non-blocking), then hands the oldest event to
    /// `accept` under the queue's lock. `accept` returns `None` for an
    /// event it drops (its object went meanwhile); then the next is
    /// waited for.
    pub fn take<R>(&self, mut accept: impl FnMut(T) -> Option<R>) -> Result<R, i32> {
        loop {
            self.fd.take()?;
            let mut st = self.st.lock();
            if st.owed > 0 {
                // This byte stood for an event withdrawn meanwhile.
                st.owed -= 1;
                continue;
            }
            if let Some(r) = st.queue.pop_front().and_then(&mut accept) {
                return Ok(r);
            }
        }
    }

    /// How many events are queued.
    pub fn len(&self) -> usize {
        self.st.lock().queue.len()
    }
}

impl<T, F: EventFd> std::fmt::Debug for EventQueue<T, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventQueue")
            .field("queued", &self.len())
            .finish()
    }
}
