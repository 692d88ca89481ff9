//! Packets a poll left for the program's answer ("Deferred sending" in
//! [`crate::soft::progress`]), and the one call that sends them when the program
//! turns to anything else.
//!
//! A look at the socket by a polling program
//! (`Shared::poll_socket_as_receiver`) that delivered completions keeps the
//! packets it produced (the ACK of the SEND it took in, typically) queued:
//! a ping-pong program posts its answer next, and that post sends ACK and
//! answer in one `sendmmsg`. A program that instead goes on to other
//! library calls (rdma_cm's, a destroy, a blocking wait for an event) must
//! not leave them waiting for the progress thread, which on a busy host can
//! wait milliseconds for a CPU (docs/performance.md, "2026-11-29": a late
//! final ACK made a kernel peer miss its next connection). The drop-in
//! calls [`send_deferred`] at the start of every entry point that is not
//! itself the data path, so such a call sends them first.
//!
//! The registry holds each context with deferred packets once; a context
//! leaves it when [`send_deferred`] takes it (its other flushes send the
//! packets but leave it listed, which costs only a lock-free check later).

use crate::soft::Shared;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

/// Contexts a poll deferred packets on, each listed once. (parking_lot's
/// lock, as everywhere in the stack: ThreadSanitizer sees its atomics,
/// not those of std's prebuilt futex lock, and reported the list as
/// raced between two threads' `send_deferred`.)
static LISTED: Mutex<Vec<Weak<Shared>>> = Mutex::new(Vec::new());
/// How many are listed: the check every entry point makes.
static COUNT: AtomicUsize = AtomicUsize::new(0);

/// Whether a context is listed (a field of [`Shared`]).
#[derive(Default)]
pub(crate) struct Listed(AtomicBool);

/// Lists `shared` as having packets a poll deferred.
pub(crate) fn list(shared: &Arc<Shared>) {
    if shared.deferred.0.swap(true, Ordering::AcqRel) {
        return;
    }
    let mut l = LISTED.lock();
    l.push(Arc::downgrade(shared));
    COUNT.store(l.len(), Ordering::Release);
}

/// Sends what polls of any soft context in this process deferred. Cheap
/// when nothing waits (one atomic load). Call it with no lock of the stack
/// held: the drop-in does at the start of its non-data-path entry points.
pub fn send_deferred() {
    if COUNT.load(Ordering::Acquire) == 0 {
        return;
    }
    let taken = {
        let mut l = LISTED.lock();
        COUNT.store(0, Ordering::Release);
        std::mem::take(&mut *l)
    };
    for s in taken.iter().filter_map(Weak::upgrade) {
        s.deferred.0.store(false, Ordering::Release);
        s.flush();
    }
}
