//! # rxe-ibverbs-sys: rdma-core 44's verbs structs, generated
//!
//! The C types, enum values and constants of `<infiniband/verbs.h>`,
//! `<rdma/rdma_cma.h>` and the kernel ABI structs they use, as bindgen
//! generated them from Debian bookworm's headers (rdma-core 44.0, x86_64)
//! and checked in (`sys.rs`; `rxe-verbs/ibverbs/abi/bindgen.sh` regenerates
//! it). Nothing here calls C: there are no function declarations, only
//! layouts, so depending on this crate needs neither rdma-core nor its
//! headers.
//!
//! Two crates read and write these structs, and share this one copy:
//! * the drop-in `libibverbs.so.1` (`rxe-verbs/ibverbs`, as its `sys`
//!   module), whose callers are C programs built against the header;
//! * rxe-verbs' native backend (`rxe-verbs/src/native/`), which loads the
//!   system's libibverbs at run time and calls it with these structs.
//!
//! bindgen's own compile-time assertions in `sys.rs` state every size,
//! alignment and field offset; `tests/ibverbs_abi.rs` compares each of them
//! with Debian's C headers, so a wrong number fails a test rather than a
//! program.
//!
//! Anonymous unions and structs of the header are `__bindgen_anon_N`
//! fields (`ibv_wc.__bindgen_anon_1.imm_data` is C's `wc.imm_data`), and an
//! anonymous type is named after where it sits (`ibv_send_wr__bindgen_ty_2`
//! is the type of `ibv_send_wr.wr`).

mod sys;

pub use sys::*;
