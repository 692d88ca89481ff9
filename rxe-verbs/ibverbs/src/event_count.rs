//! Counting the events handed out about an object and the
//! acknowledgements, which destroying the object waits for. Uses only
//! [`crate::sync`], so the model tests (`rxe-verbs/tests/model.rs`) check
//! it under loom as it is.

use crate::sync::{Condvar, Mutex};

/// How many events about an object the program took
/// (`ibv_get_async_event`, `ibv_get_cq_event`) and how many it
/// acknowledged: destroying the object waits until they are equal, as
/// libibverbs does. Events still queued and not taken do not count: they
/// are dropped with the object, as the kernel drops them.
#[derive(Debug, Default)]
pub struct EventCount {
    counts: Mutex<(u64, u64)>,
    cond: Condvar,
}

impl EventCount {
    pub fn reported(&self, n: u64) {
        self.counts.lock().0 += n;
    }
    pub fn acked(&self, n: u64) {
        self.counts.lock().1 += n;
        self.cond.notify_all();
    }
    /// Waits until every reported event is acknowledged.
    pub fn wait_all_acked(&self) {
        let mut c = self.counts.lock();
        while c.1 < c.0 {
            self.cond.wait(&mut c);
        }
    }
}
