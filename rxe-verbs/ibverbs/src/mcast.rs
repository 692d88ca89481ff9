//! `ibv_attach_mcast` and `ibv_detach_mcast`: UD QPs in multicast groups.
//!
//! As the kernel's uverbs does, each QP keeps the (GID, LID) pairs the
//! program attached: attaching a pair again is a no-op, detaching a pair
//! never attached is EINVAL, and a QP with attachments left cannot be
//! destroyed (EBUSY, in `ibv_destroy_qp`). The device's own checks
//! (multicast GID, UD QP: EINVAL; the group limits: ENOMEM) are the
//! engine's. The LID is ignored on RoCE.

use crate::ffi::{entry, int_result, Fail};
use crate::handle;
use crate::objects::Qp;
use crate::sys::*;
use std::ffi::c_int;

fn gid_at(gid: *const ibv_gid) -> Result<[u8; 16], Fail> {
    if gid.is_null() {
        return Err(Fail::new(libc::EFAULT, "gid: NULL"));
    }
    // SAFETY: the caller passes a readable `union ibv_gid`; every bit
    // pattern is a valid `raw`.
    Ok(unsafe { (*gid).raw })
}

entry! {
    /// # Safety
    /// `qp` is a QP of this library or NULL; `gid` points at a GID or is NULL.
    pub unsafe extern "C" fn ibv_attach_mcast(
        qp: *mut ibv_qp,
        gid: *const ibv_gid,
        lid: u16,
    ) -> c_int {
        let r = (|| {
            let q = handle::get::<Qp>(qp, "qp")?;
            let g = gid_at(gid)?;
            let mut list = q.mcast.lock();
            if list.contains(&(g, lid)) {
                return Ok(());
            }
            q.rx.attach_mcast(g, lid)?;
            list.push((g, lid));
            Ok(())
        })();
        int_result(VERB, r)
    }
}

entry! {
    /// # Safety
    /// As [`ibv_attach_mcast`].
    pub unsafe extern "C" fn ibv_detach_mcast(
        qp: *mut ibv_qp,
        gid: *const ibv_gid,
        lid: u16,
    ) -> c_int {
        let r = (|| {
            let q = handle::get::<Qp>(qp, "qp")?;
            let g = gid_at(gid)?;
            let mut list = q.mcast.lock();
            // As Linux 6.1's uverbs: the device first, then the list. The
            // device's group is the GID alone (kernel rxe's), so after a
            // detach under one LID the QP is out of the group, a detach
            // under another LID it was attached with is EINVAL, and that
            // pair stays on the list: the QP is then EBUSY to destroy.
            q.rx.detach_mcast(g, lid)?;
            let Some(i) = list.iter().position(|&e| e == (g, lid)) else {
                return Err(Fail::inval(
                    "gid",
                    "this QP was not attached to that group with that LID",
                ));
            };
            list.remove(i);
            Ok(())
        })();
        int_result(VERB, r)
    }
}
