//! The soft backend: a device made of the rxe-core engine, one UDP socket
//! (rxe-net) and the threads that feed them.
//!
//! * [`driver`]: the open device's shared state (`Shared`): collecting
//!   what the engine produced, sending it, receiving, the timers;
//! * [`progress`]: who feeds the engine (the progress thread, or the
//!   application thread that waits), and deferred sending;
//! * [`doorbell`]: posts in quick succession leave together;
//! * [`capture`]: the device's own pcap of what it sent and received.
//!
//! The public handles (`Context`, `QueuePair`, ...) reach it through their
//! `Soft` variants.

pub(crate) mod capture;
pub(crate) mod doorbell;
mod driver;
pub(crate) mod progress;

pub(crate) use driver::{open, Inner, Shared, MAX_SPIN};
