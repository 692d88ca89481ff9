//! `NMr`, a native memory region.
//!
//! A native region owns a heap buffer registered with `ibv_reg_mr`. The
//! device reads and writes it by DMA at any time, so Rust never holds a
//! reference (`&[u8]`/`&mut [u8]`) to it: the application's accesses are
//! raw-pointer copies (`ptr::copy_nonoverlapping`) under the region's
//! reader-writer lock, which orders the application's own accesses; the
//! closures of `with_bytes`/`with_bytes_mut` work on a copy (written back
//! afterwards for `with_bytes_mut`). The buffer is freed only after
//! `ibv_dereg_mr` succeeded (never, if it fails: leaked rather than freed
//! under the device). As on the soft stack, bytes an operation in flight is
//! changing have unspecified contents; memory safety does not depend on it.

use super::error::{errno, os_error, rc_errno};
use super::ffi::ibv_mr;
use super::pd::NPd;
use crate::error::{unsupported, Error};
use parking_lot::RwLock;
use rxe_core::types::Access;
use std::ffi::c_int;
use std::ptr;
use std::sync::Arc;

/// A native memory region owning its buffer (see the module docs).
pub(crate) struct NMr {
    pd: Arc<NPd>,
    mr: *mut ibv_mr,
    buf: *mut u8,
    len: usize,
    lock: RwLock<()>,
    pub lkey: u32,
    pub rkey: u32,
    pub iova: u64,
}

// SAFETY: the buffer is only accessed through raw-pointer copies under
// `lock` (and by the device); the verbs object is thread-safe.
unsafe impl Send for NMr {}
// SAFETY: as above.
unsafe impl Sync for NMr {}

impl NMr {
    pub fn register(pd: &Arc<NPd>, bytes: Vec<u8>, access: Access) -> Result<NMr, Error> {
        let len = bytes.len();
        let buf = Box::into_raw(bytes.into_boxed_slice()) as *mut u8;
        let v = pd.ctx.v;
        let flags = (access - Access::ZERO_BASED).bits();
        let mr = if access.contains(Access::ZERO_BASED) {
            match v.reg_mr_iova2 {
                // SAFETY: `buf` is valid for `len` bytes until freed after
                // deregistration; iova 0 makes the region zero-based.
                Some(f) => unsafe { f(pd.pd, buf.cast(), len, 0, flags) },
                None => {
                    // SAFETY: reclaiming the box just leaked, never registered.
                    drop(unsafe { Box::from_raw(ptr::slice_from_raw_parts_mut(buf, len)) });
                    return Err(unsupported(
                        "zero-based memory regions need ibv_reg_mr_iova2 (rdma-core 29+)",
                    ));
                }
            }
        } else {
            // SAFETY: as above; the exported ibv_reg_mr is what the verbs.h
            // macro calls for flags outside IBV_ACCESS_OPTIONAL_RANGE.
            unsafe { (v.reg_mr)(pd.pd, buf.cast(), len, flags as c_int) }
        };
        if mr.is_null() {
            let e = errno();
            // SAFETY: registration failed, the device never saw the buffer.
            drop(unsafe { Box::from_raw(ptr::slice_from_raw_parts_mut(buf, len)) });
            return Err(os_error("ibv_reg_mr", pd.ctx.name(), e));
        }
        // SAFETY: a registered region's fields are set by ibv_reg_mr.
        let (lkey, rkey, addr) = unsafe { ((*mr).lkey, (*mr).rkey, (*mr).addr as u64) };
        Ok(NMr {
            pd: pd.clone(),
            mr,
            buf,
            len,
            lock: RwLock::new(()),
            lkey,
            rkey,
            iova: if access.contains(Access::ZERO_BASED) {
                0
            } else {
                addr
            },
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    fn check(&self, off: usize, n: usize) -> bool {
        off.checked_add(n).is_some_and(|e| e <= self.len)
    }

    pub fn read(&self, off: usize, dst: &mut [u8]) -> bool {
        if !self.check(off, dst.len()) {
            return false;
        }
        let _g = self.lock.read();
        // SAFETY: in bounds (checked); `buf` is live while `self` is; `dst`
        // is a distinct Rust buffer. No reference to the DMA buffer is made.
        unsafe { ptr::copy_nonoverlapping(self.buf.add(off), dst.as_mut_ptr(), dst.len()) };
        true
    }

    pub fn write(&self, off: usize, src: &[u8]) -> bool {
        if !self.check(off, src.len()) {
            return false;
        }
        let _g = self.lock.write();
        // SAFETY: as in `read`, the other way.
        unsafe { ptr::copy_nonoverlapping(src.as_ptr(), self.buf.add(off), src.len()) };
        true
    }

    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.len];
        self.read(0, &mut v);
        v
    }

    /// Runs `f` on a copy of the bytes taken and written back under the
    /// write lock.
    pub fn with_copy_mut<R>(&self, f: impl FnOnce(&mut [u8]) -> R) -> R {
        let _g = self.lock.write();
        let mut v = vec![0u8; self.len];
        // SAFETY: whole buffer, live; see `read`.
        unsafe { ptr::copy_nonoverlapping(self.buf, v.as_mut_ptr(), self.len) };
        let r = f(&mut v);
        // SAFETY: as above, back.
        unsafe { ptr::copy_nonoverlapping(v.as_ptr(), self.buf, self.len) };
        r
    }

    /// Deregisters; on success the bytes come back.
    pub fn deregister(mut self) -> Result<Vec<u8>, (NMr, Error)> {
        // SAFETY: registered region, deregistered once.
        let rc = unsafe { (self.pd.ctx.v.dereg_mr)(self.mr) };
        if rc != 0 {
            let e = os_error("ibv_dereg_mr", self.pd.ctx.name(), rc_errno(rc));
            return Err((self, e));
        }
        self.mr = ptr::null_mut();
        // SAFETY: deregistered: the device no longer touches the buffer,
        // which was leaked from a Box<[u8]> of `len` bytes.
        let b = unsafe { Box::from_raw(ptr::slice_from_raw_parts_mut(self.buf, self.len)) };
        self.buf = ptr::null_mut();
        Ok(b.into_vec())
    }
}

impl Drop for NMr {
    fn drop(&mut self) {
        if self.mr.is_null() {
            return;
        }
        // SAFETY: registered region, deregistered once.
        let rc = unsafe { (self.pd.ctx.v.dereg_mr)(self.mr) };
        if rc == 0 && !self.buf.is_null() {
            // SAFETY: deregistered; the buffer was a leaked Box<[u8]>.
            drop(unsafe { Box::from_raw(ptr::slice_from_raw_parts_mut(self.buf, self.len)) });
        }
        // If deregistration failed the device may still write the buffer:
        // it is leaked rather than freed under it.
    }
}
