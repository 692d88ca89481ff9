//! # rxe-ibverbs: a drop-in `libibverbs.so.1` over rxe-rs
//!
//! Unmodified programs written against rdma-core's libibverbs (`ibv_devinfo`,
//! `ibv_rc_pingpong`, perftest, pyverbs, your own) load this library instead
//! of the system's and run on the rxe-rs soft RoCE v2 stack: no RDMA NIC, no
//! kernel module, no root. `rxe exec -d ADDR -- PROGRAM` sets it up; see
//! `docs/drop-in.md`.
//!
//! ## How it is shaped
//! * **Symbols.** Every symbol of Debian bookworm's libibverbs1 44.0 exists
//!   here with its version ([`exports`]); the list is
//!   `abi/libibverbs1-44.0.symbols`, and a test compares it with `objdump -T`
//!   of the built library.
//! * **Layouts.** The structs a program reads and writes are rdma-core 44's,
//!   generated from the header ([`sys`]); a test compares every size and
//!   offset with Debian's `<infiniband/verbs.h>`.
//! * **Objects.** Each object a program holds (`ibv_context`, `ibv_pd`,
//!   `ibv_mr`, `ibv_cq`, `ibv_qp`, ...) is the first field of a Rust struct
//!   that also holds the rxe-verbs object behind it, so the program's
//!   pointer is the Rust object's address (`objects`; `handle` keeps the
//!   addresses of the live ones). The library allocates them and frees them
//!   when the program destroys them.
//! * **The hot path.** `ibv_post_send`, `ibv_post_recv`, `ibv_poll_cq` and
//!   `ibv_req_notify_cq` are inline in the header and jump through
//!   `context->ops`; the extended verbs find `struct verbs_context` in front
//!   of the `ibv_context`. Both tables are filled at open.
//! * **Errors.** A call that fails returns what libibverbs documents for it
//!   (NULL with `errno`, or the errno value) and never panics across the C
//!   boundary: every entry point (each export, each function of an ops
//!   table) is written inside `ffi::entry!`, which runs its body under
//!   [`ffi::guard`] (or [`ffi::guard_data`] on the data path) with the
//!   failure value of its return type, and an export written without it
//!   does not compile. `RXE_DEBUG=1` prints why a call failed to standard
//!   error.
//! * **librdmacm.** The same object is the drop-in `librdmacm.so.1`
//!   ([`rdmacm`]): `rxe exec` links it under both sonames, and the loader
//!   maps the file once.
//! * **File descriptors.** Completion channels and `context->async_fd` are
//!   pipes whose read end holds one byte per pending event, so `poll`,
//!   `epoll`, `select` and `O_NONBLOCK` behave as on the kernel's.

// Under `cargo test` the exports (and so the functions only they reach)
// are left out: a test executable has no version script for them.
#![cfg_attr(test, allow(dead_code))]

pub use rxe_ibverbs_sys as sys;

mod compat;
mod context;
mod cq;
mod device;
mod event_count;
mod event_queue;
mod events;
#[cfg(not(test))]
mod exports;
mod ffi;
mod handle;
mod import;
mod kern;
mod mcast;
mod mem;
mod mw;
mod native;
mod objects;
mod qp;
mod rdmacm;
mod strings;
mod sync;
mod unsupported;
mod wr;

/// Hands `exports`' forwarding table to `native` as the loader maps the
/// library (an ELF constructor: before any verb can load the system
/// library), so that `native` needs nothing of `exports`, which names
/// every verb of every module.
#[cfg(not(test))]
#[used]
#[unsafe(link_section = ".init_array")]
static HAND_OVER_FORWARDS: unsafe extern "C" fn() = hand_over_forwards;

#[cfg(not(test))]
ffi::entry! {
    data;
    unsafe extern "C" fn hand_over_forwards() {
        native::set_forwarder(exports::resolve_forwards);
    }
}
