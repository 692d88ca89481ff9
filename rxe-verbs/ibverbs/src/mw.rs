//! Memory windows: `ibv_alloc_mw`, `ibv_bind_mw`, `ibv_dealloc_mw` (all
//! inline in `verbs.h`, reached through the context's `ops`), and the bind
//! work requests (`IBV_WR_BIND_MW`, `ibv_wr_bind_mw`).
//!
//! As in the kernel's rxe and its rdma-core provider, a bind is a work
//! request: it runs in send-queue order and completes on the send CQ
//! (`IBV_WC_BIND_MW`, or `IBV_WC_MW_BIND_ERR`). `ibv_bind_mw` (type 1 only)
//! posts one with the window's next rkey (`ibv_inc_rkey`) and sets
//! `mw->rkey` to it at once; a program that gets an error completion must
//! undo that itself, as rdma-core's man page says. A type 2 window is bound
//! with `IBV_WR_BIND_MW` or `ibv_wr_bind_mw` and the rkey the program
//! chooses (only its low 8 bits count); its `mw->rkey` is left alone, and
//! the bind must name the window's current rkey, as the kernel requires.

use crate::ffi::{entry, int_result, ptr_result, Fail};
use crate::handle::{self};
use crate::objects::{Mw, Pd, Qp};
use crate::sys::*;
use crate::wr::bind_of;
use parking_lot::Mutex;
use rxe_verbs::{inc_rkey, MwType, SendFlags, SendOpcode, SendWr};
use std::ffi::c_int;
use std::sync::atomic::Ordering;

entry! {
    unsafe extern "C" fn ibv_alloc_mw(pd: *mut ibv_pd, mw_type: ibv_mw_type) -> *mut ibv_mw {
        let r = handle::get::<Pd>(pd, "pd").and_then(|p| {
            let t = match mw_type {
                IBV_MW_TYPE_1 => MwType::Type1,
                IBV_MW_TYPE_2 => MwType::Type2,
                t => return Err(Fail::inval("type", format!("{t} is not a window type"))),
            };
            let rx = p.rx.alloc_mw(t)?;
            let mw = Box::into_raw(Box::new(Mw {
                mw: ibv_mw {
                    context: p.pd.context,
                    pd,
                    rkey: rx.rkey(),
                    handle: 0,
                    type_: mw_type,
                },
                rx: Mutex::new(Some(rx)),
                pd: p,
            }));
            // SAFETY: just allocated.
            unsafe { (*mw).mw.handle = mw as usize as u32 };
            p.users.fetch_add(1, Ordering::AcqRel);
            handle::add(mw);
            Ok(mw.cast::<ibv_mw>())
        });
        ptr_result(VERB, r)
    }
}

entry! {
    unsafe extern "C" fn ibv_dealloc_mw(mw: *mut ibv_mw) -> c_int {
        let r = handle::get::<Mw>(mw, "mw").map(|m| {
            handle::remove(mw.cast::<Mw>());
            drop(m.rx.lock().take());
            // SAFETY: the PD outlives its windows (dealloc is EBUSY while they exist).
            unsafe { (*m.pd).users.fetch_sub(1, Ordering::AcqRel) };
            // SAFETY: was a live Box<Mw>.
            drop(unsafe { Box::from_raw(mw.cast::<Mw>()) });
        });
        int_result(VERB, r)
    }
}

entry! {
    /// `ibv_bind_mw` (type 1): a `BIND_MW` work request with the window's next
    /// rkey, which becomes `mw->rkey` once it is posted.
    unsafe extern "C" fn ibv_bind_mw(
        qp: *mut ibv_qp,
        mw: *mut ibv_mw,
        b: *mut ibv_mw_bind,
    ) -> c_int {
        let r = (|| {
            let q = handle::get::<Qp>(qp, "qp")?;
            let m = handle::get::<Mw>(mw, "mw")?;
            if b.is_null() {
                return Err(Fail::inval("mw_bind", "NULL"));
            }
            if m.mw.type_ != IBV_MW_TYPE_1 {
                return Err(Fail::inval("mw", "ibv_bind_mw binds type 1 windows"));
            }
            // SAFETY: the program's bind.
            let b = unsafe { &*b };
            let known = IBV_SEND_SIGNALED | IBV_SEND_FENCE;
            if b.send_flags & !known != 0 {
                return Err(Fail::inval(
                    "mw_bind.send_flags",
                    format!("{:#x}: a bind takes only SIGNALED and FENCE", b.send_flags),
                ));
            }
            // rdma-core's rxe provider refuses this before it posts (a
            // type 1 window is never zero-based, o10-36.2.2); the region's
            // rights are the bind's to check, with a completion.
            if b.bind_info.mw_access_flags & IBV_ACCESS_ZERO_BASED != 0 {
                return Err(Fail::inval(
                    "mw_bind.bind_info.mw_access_flags",
                    "ZERO_BASED: a type 1 window cannot be zero-based",
                ));
            }
            let new_rkey = inc_rkey(m.mw.rkey);
            let mut wr = SendWr::new(b.wr_id, SendOpcode::BindMw);
            wr.flags = SendFlags::from_bits_truncate(b.send_flags);
            // SAFETY: the program's bind information, inside its bind.
            wr.bind = Some(unsafe { bind_of(mw, new_rkey, &b.bind_info) }?);
            q.rx.post_send(&[wr])?;
            // SAFETY: a live window; the program owns its fields, as with rdma-core.
            unsafe { (*mw).rkey = new_rkey };
            Ok(())
        })();
        int_result(VERB, r)
    }
}

/// The window verbs of a context's `ops` table.
pub fn fill_ops(v: &mut verbs_context) {
    v.context.ops.alloc_mw = Some(ibv_alloc_mw);
    v.context.ops.dealloc_mw = Some(ibv_dealloc_mw);
    v.context.ops.bind_mw = Some(ibv_bind_mw);
}
