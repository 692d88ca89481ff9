//! The locks of [`crate::event_count`] and [`crate::event_queue`]:
//! parking_lot's here; the model tests (`rxe-verbs/tests/model.rs`)
//! compile those files against loom's (see "Concurrency" in
//! docs/reliability.md).

pub(crate) use parking_lot::{Condvar, Mutex};
