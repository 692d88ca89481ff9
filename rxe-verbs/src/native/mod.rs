//! The native backend: RDMA devices driven through libibverbs, loaded at
//! run time (see `loader.rs`; no link-time dependency).
//!
//! All of rxe-verbs' unsafe code is here. Each wrapper owns one verbs object
//! (a raw pointer libibverbs gave out) and keeps alive, through `Arc`s,
//! everything the object depends on, so objects are destroyed children
//! first whatever order the application drops its handles in: a QP holds its
//! PD, CQs and SRQ; a CQ its channel and context; everything its context.
//!
//! The fast paths libibverbs implements as inline functions in `verbs.h`
//! are reproduced exactly: `ibv_post_send(qp, wr, bad)` is
//! `qp->context->ops.post_send(qp, wr, bad)`, and likewise `ibv_post_recv`,
//! `ibv_post_srq_recv`, `ibv_poll_cq`, `ibv_req_notify_cq`; `ibv_query_port`
//! is the inline `___ibv_query_port` (the extended `verbs_context`'s
//! `query_port` when the provider has one, else the exported compat symbol).
//!
//! ## Files
//! One object per file, as the handles over them (`crate::context`,
//! `crate::cq`, ...) are split:
//! * `context.rs` (`NContext`, an open device) and `events.rs` (its
//!   asynchronous events); `registry.rs`, its CQs and SRQs by number;
//! * `pd.rs` (`NPd` and its address handles, `NAh`), `mr.rs` (`NMr`, with
//!   how registered memory is accessed);
//! * `channel.rs` (`NChannel`), `cq.rs` (`NCq`, and completions);
//! * `srq.rs` (`NSrq`), `qp.rs` (`NQp`), `wr.rs` (work requests in C);
//! * below them: `loader.rs` (`dlopen`, `dlsym`, once per process),
//!   `discover.rs` (the device list and GID tables), `inline.rs` (the
//!   inline functions of `verbs.h`), `ffi.rs` (the names used from the
//!   generated bindings, crate rxe-ibverbs-sys), `error.rs` (errno),
//!   `fd.rs` (event descriptors);
//! * `tests.rs`, and `fake_ibverbs.c`, the stand-in libibverbs the
//!   integration tests build.
//!
//! Nothing in these files names this one: the other files of rxe-verbs
//! reach them through the names re-exported here.

mod channel;
mod context;
mod cq;
mod discover;
mod error;
mod events;
mod fd;
mod ffi;
mod inline;
mod loader;
mod mr;
mod pd;
mod qp;
mod registry;
mod srq;
mod wr;

pub(crate) use channel::NChannel;
pub(crate) use context::NContext;
pub(crate) use cq::NCq;
pub(crate) use discover::discover;
pub(crate) use loader::available;
pub(crate) use mr::NMr;
pub(crate) use pd::NPd;
pub(crate) use qp::NQp;
pub(crate) use srq::NSrq;

#[cfg(test)]
mod tests;
