//! The synchronisation primitives of the modules whose correctness is a
//! matter of threads only, not of sockets or clocks: the completion
//! channel's and the async events' queues ([`crate::events`]) and the
//! receiver token ([`crate::soft::progress::Receiver`]).
//!
//! Here they are the ones the rest of the crate uses (parking_lot's locks,
//! std's atomics). The model tests (`tests/model.rs`) compile those same
//! source files against a `sync` module of their own that maps these names
//! to loom's types, and explore every interleaving of the threads that use
//! them (see "Concurrency" in docs/reliability.md).

pub(crate) use parking_lot::{Condvar, Mutex};
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
pub(crate) use std::sync::OnceLock;
