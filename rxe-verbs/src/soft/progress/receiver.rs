//! The [`Receiver`] token (see [`crate::soft::progress`]). It uses only
//! [`crate::sync`], so the model tests (`tests/model.rs`) check it under
//! loom as it is.

use crate::soft::progress::HANDOFF;
use crate::sync::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

/// The token that makes one application thread the device's receiver.
pub(crate) struct Receiver {
    busy: AtomicBool,
    /// Whether the last holder only polled (`Shared::poll_socket_as_receiver`)
    /// rather than blocked on the socket in a wait.
    poller: AtomicBool,
    /// When the last application receiver let go, in nanoseconds since `epoch`.
    released: AtomicU64,
    epoch: Instant,
}

impl Receiver {
    pub fn new() -> Self {
        Receiver {
            busy: AtomicBool::new(false),
            poller: AtomicBool::new(false),
            released: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }

    /// Takes the token if no other thread holds it.
    pub fn try_take(&self) -> Option<ReceiverGuard<'_>> {
        self.busy
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| ReceiverGuard { receiver: self })
    }

    /// Says whether the holder only polls (see [`crate::soft::progress::ORPHAN`]).
    pub fn set_poller(&self, poller: bool) {
        self.poller.store(poller, Ordering::Relaxed);
    }

    /// Whether the last holder only polled.
    pub fn is_poller(&self) -> bool {
        self.poller.load(Ordering::Relaxed)
    }

    /// Whether an application thread holds the token now.
    pub fn is_taken(&self) -> bool {
        self.busy.load(Ordering::Acquire)
    }

    /// Whether the socket belongs to an application thread: it holds the
    /// token, or let go of it less than [`HANDOFF`] ago.
    pub fn app_is_receiving(&self, now: Instant) -> bool {
        if self.is_taken() {
            return true;
        }
        let released = self.released.load(Ordering::Acquire);
        released != 0 && self.nanos(now).saturating_sub(released) < HANDOFF.as_nanos() as u64
    }

    fn nanos(&self, t: Instant) -> u64 {
        // At least 1, so that 0 can mean "never".
        (t.saturating_duration_since(self.epoch).as_nanos() as u64).max(1)
    }
}

/// Holding the [`Receiver`] token; lets go when dropped.
pub(crate) struct ReceiverGuard<'a> {
    receiver: &'a Receiver,
}

impl Drop for ReceiverGuard<'_> {
    fn drop(&mut self) {
        let r = self.receiver;
        r.released.store(r.nanos(Instant::now()), Ordering::Release);
        r.busy.store(false, Ordering::Release);
    }
}
