//! The soft backend: a device made of the rxe-core engine, one UDP socket
//! (rxe-net) and the threads that feed them.
//!
//! * [`driver`]: the open device's shared state (`Shared`): collecting
//!   what the engine produced, sending it, receiving, the timers;
//! * [`progress`]: who feeds the engine (the progress thread, or the
//!   application thread that waits), and deferred sending;
//! * [`doorbell`]: posts in quick succession leave together;
//! * [`capture`]: the device's own pcap of what it sent and received;
//! * [`cm`]: the device's side of rdma_cm (its CM agent, QP 1's MADs,
//!   the ids it serves), which `crate::cm`'s ids call;
//! * [`context`]: what a `Context` asks of the device (attributes,
//!   tunables, async events, counters);
//! * [`cq`], [`mr`], [`qp`]: the objects behind the public handles'
//!   `Soft` variants (channels and CQs; protection domains, regions and
//!   windows; QPs and SRQs), each a key in the engine plus the device.
//!
//! The public handles (`Context`, `QueuePair`, ...) reach it through their
//! `Soft` variants and call one method here per verb.

pub(crate) mod capture;
mod cm;
mod context;
mod cq;
pub(crate) mod doorbell;
mod driver;
mod mr;
pub(crate) mod progress;
mod qp;

pub(crate) use cm::{flow_label, to_err, to_init, ud_ready, CmPort, Gone, UdPath};
pub(crate) use cq::{SoftChannel, SoftCq};
pub(crate) use driver::{open, Inner, Shared, MAX_SPIN};
pub(crate) use mr::{SoftForeignMr, SoftMr, SoftMw, SoftPd};
pub(crate) use qp::{SoftQp, SoftSrq};
