//! The locks of [`crate::event_count`]: parking_lot's here; the model
//! tests (`rxe-verbs/tests/model.rs`) compile that file against loom's
//! (see "Concurrency" in docs/reliability.md).

pub(crate) use parking_lot::{Condvar, Mutex};
