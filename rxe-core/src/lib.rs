//! # rxe-core: the RoCE v2 protocol without I/O
//!
//! This crate knows what RoCE v2 packets look like and how the InfiniBand
//! transport behaves, and nothing about sockets, threads or clocks. Bytes come
//! in as slices, time comes in as an argument, and packets to send come out as
//! values. That makes every piece testable packet by packet and deterministic
//! under simulation.
//!
//! * [`wire`]: every header of the InfiniBand transport as carried by RoCE v2
//!   (BTH, RDETH, DETH, RETH, FETH, AtomicETH, AETH, AtomicAckETH, ImmDt, IETH),
//!   the opcode table, the invariant CRC, and Ethernet/IP/UDP framing.
//! * [`psn`]: 24-bit packet sequence number arithmetic.
//! * [`types`]: the verbs vocabulary (QP types and states, attributes, work
//!   requests, completions).
//! * [`engine`]: the RC/UC/UD protocol engine with its memory-key tables.
//! * [`cm`]: the Communication Manager protocol (connection set-up and
//!   release, SIDR) over the CM MADs of [`mad`], one agent per address.
#![forbid(unsafe_code)]

pub mod cm;
pub mod engine;
pub mod fasthash;
pub mod mad;
pub mod psn;
pub mod types;
pub mod wire;
