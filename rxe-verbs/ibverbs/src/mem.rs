//! Protection domains and memory regions over the program's own memory.
//!
//! `ibv_reg_mr` registers memory the program owns. The engine reaches it
//! only through [`ProgramMemory`], which copies in and out at the
//! registered address after the engine has checked every range against the
//! region: no byte outside a registered region is read or written. As with
//! a NIC's DMA, the program promises the memory stays mapped until it
//! deregisters, and what it sees while an operation is in flight is
//! unspecified.

use crate::ffi::{entry, int_result, ptr_result, Fail};
use crate::handle::{self};
use crate::objects::{ibv_ctx, Ctx, Mr, Pd};
use crate::sys::*;
use rxe_verbs::{AtomicOp, RegionMemory};
use std::ffi::{c_int, c_uint, c_void};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

entry! {
    pub unsafe extern "C" fn ibv_alloc_pd(context: *mut ibv_context) -> *mut ibv_pd {
        let r = handle::get::<Ctx>(context, "context").and_then(|c: &Ctx| {
            let rx = c.open.rx.alloc_pd()?;
            let pd = Box::into_raw(Box::new(Pd {
                pd: ibv_pd {
                    context: ibv_ctx(c),
                    handle: 0,
                },
                rx,
                open: c.open.clone(),
                users: AtomicUsize::new(0),
            }));
            // SAFETY: just allocated.
            unsafe { (*pd).pd.handle = pd as usize as u32 };
            handle::add(pd);
            Ok(pd.cast::<ibv_pd>())
        });
        ptr_result(VERB, r)
    }
}

entry! {
    pub unsafe extern "C" fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int {
        let r = handle::get::<Pd>(pd, "pd").and_then(|p| {
            let n = p.users.load(Ordering::Acquire);
            if n > 0 {
                return Err(Fail::new(
                    libc::EBUSY,
                    format!("{n} objects still use the protection domain"),
                ));
            }
            handle::remove(pd.cast::<Pd>());
            // SAFETY: was a live Box<Pd>.
            drop(unsafe { Box::from_raw(pd.cast::<Pd>()) });
            Ok(())
        });
        int_result(VERB, r)
    }
}

/// The program's bytes at `[base, base + len)`, reached by copies.
#[derive(Debug)]
pub struct ProgramMemory {
    base: usize,
    len: usize,
}

impl ProgramMemory {
    /// The address of `[offset, offset + n)`, if inside.
    fn at(&self, offset: usize, n: usize) -> Option<usize> {
        let end = offset.checked_add(n)?;
        (end <= self.len).then(|| self.base + offset)
    }
}

// The program registered [base, base + len) and promised to keep it mapped
// until it deregisters; every access below is inside it.
impl RegionMemory for ProgramMemory {
    fn len(&self) -> usize {
        self.len
    }
    fn read(&self, offset: usize, dst: &mut [u8]) -> bool {
        let Some(a) = self.at(offset, dst.len()) else {
            return false;
        };
        // SAFETY: inside the registered range (see above).
        unsafe { std::ptr::copy_nonoverlapping(a as *const u8, dst.as_mut_ptr(), dst.len()) };
        true
    }
    fn write(&self, offset: usize, src: &[u8]) -> bool {
        let Some(a) = self.at(offset, src.len()) else {
            return false;
        };
        // SAFETY: inside the registered range (see above).
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), a as *mut u8, src.len()) };
        true
    }
    fn atomic(&self, offset: usize, op: AtomicOp) -> Option<u64> {
        let a = self.at(offset, 8)?;
        if a % 8 != 0 {
            return None;
        }
        // SAFETY: 8 aligned bytes inside the registered range; atomics
        // from this process's other threads on the same word stay atomic.
        let cell = unsafe { AtomicU64::from_ptr(a as *mut u64) };
        Some(match op {
            AtomicOp::FetchAdd(add) => cell.fetch_add(add, Ordering::SeqCst),
            AtomicOp::Store(v) => cell.swap(v, Ordering::SeqCst),
            AtomicOp::CompareSwap { compare, swap } => {
                match cell.compare_exchange(compare, swap, Ordering::SeqCst, Ordering::SeqCst) {
                    Ok(v) | Err(v) => v,
                }
            }
        })
    }
}

/// The access flags a region may have; the optional ones (relaxed
/// ordering and beyond) may be ignored, as libibverbs allows.
const KNOWN_ACCESS: u32 = IBV_ACCESS_LOCAL_WRITE
    | IBV_ACCESS_REMOTE_WRITE
    | IBV_ACCESS_REMOTE_READ
    | IBV_ACCESS_REMOTE_ATOMIC
    | IBV_ACCESS_MW_BIND
    | IBV_ACCESS_ZERO_BASED;

/// The engine's access flags for `access`, or EINVAL naming what is wrong.
pub fn access_of(access: u32, arg: &str) -> Result<rxe_verbs::Access, Fail> {
    // IB_UVERBS_ACCESS_OPTIONAL_RANGE: bits 20 to 29 may be ignored.
    let optional = 0x3ff0_0000u32;
    debug_assert_eq!(
        optional.trailing_zeros(),
        IBV_ACCESS_OPTIONAL_FIRST.trailing_zeros()
    );
    // HUGETLB says how the memory was allocated, which changes nothing
    // here (the kernel's rxe takes it too).
    let a = access & !optional & !IBV_ACCESS_HUGETLB;
    if a & !KNOWN_ACCESS != 0 {
        if a & IBV_ACCESS_ON_DEMAND != 0 {
            // The kernel's uverbs answers EINVAL for a device without ODP.
            return Err(Fail::inval(
                arg,
                format!("{access:#x}: on-demand paging is not supported"),
            ));
        }
        return Err(Fail::inval(arg, format!("{access:#x} has unknown bits")));
    }
    Ok(rxe_verbs::Access::from_bits_truncate(a))
}

/// Fails with EFAULT unless every page of `[addr, addr + len)` is mapped,
/// as the kernel's pinning would.
fn check_mapped(addr: usize, len: usize) -> Result<(), Fail> {
    if len == 0 {
        return Ok(());
    }
    let page = 4096usize;
    let start = addr & !(page - 1);
    let end = addr
        .checked_add(len)
        .ok_or_else(|| Fail::inval("length", "the range wraps around the address space"))?;
    let pages = (end - start).div_ceil(page);
    let mut vec = vec![0u8; pages.min(1 << 20)];
    let mut at = start;
    let mut left = pages;
    while left > 0 {
        let n = left.min(vec.len());
        // SAFETY: mincore only reports on the range; vec has n bytes.
        let r = unsafe { libc::mincore(at as *mut c_void, n * page, vec.as_mut_ptr()) };
        if r != 0 {
            return Err(Fail::new(
                libc::EFAULT,
                format!("[{addr:#x}, {end:#x}) is not all mapped"),
            ));
        }
        at += n * page;
        left -= n;
    }
    Ok(())
}

/// The rkey a program sees: 0 for a region with no remote rights, as the
/// kernel's rxe gives it (`rxe_mr_init`); no peer may use such a region, so
/// its key is nothing to hand out.
pub fn shown_rkey(access: rxe_verbs::Access, rkey: u32) -> u32 {
    use rxe_verbs::Access as A;
    if access.intersects(A::REMOTE_READ | A::REMOTE_WRITE | A::REMOTE_ATOMIC) {
        rkey
    } else {
        0
    }
}

/// Fails with EFAULT unless every byte of `[addr, addr + len)` lies in a
/// writable mapping (`/proc/self/maps`), as the kernel's pinning for write
/// would. Passes when the maps cannot be read.
fn check_writable(addr: usize, len: usize) -> Result<(), Fail> {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return Ok(());
    };
    let end = addr.saturating_add(len);
    let mut at = addr;
    for l in maps.lines() {
        let mut f = l.split_whitespace();
        let (Some(range), Some(perms)) = (f.next(), f.next()) else {
            continue;
        };
        let Some((a, b)) = range.split_once('-') else {
            continue;
        };
        let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)) else {
            continue;
        };
        if a <= at && at < b {
            if !perms.starts_with("rw") {
                break;
            }
            at = b;
            if at >= end {
                return Ok(());
            }
        }
    }
    Err(Fail::new(
        libc::EFAULT,
        format!("[{addr:#x}, {end:#x}) is not all writable memory, and the region has LOCAL_WRITE"),
    ))
}

fn reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_uint,
) -> Result<*mut ibv_mr, Fail> {
    let p = handle::get::<Pd>(pd, "pd")?;
    let acc = access_of(access, "access")?;
    // As the kernel's ib_umem_get: no empty regions, and the pages must be
    // there (and writable, for a region the device may write).
    if length == 0 {
        return Err(Fail::inval("length", "0: a region has at least one byte"));
    }
    if addr.is_null() {
        return Err(Fail::new(libc::EFAULT, "addr: NULL"));
    }
    check_mapped(addr as usize, length)?;
    if acc.contains(rxe_verbs::Access::LOCAL_WRITE) {
        check_writable(addr as usize, length)?;
    }
    let mem = Arc::new(ProgramMemory {
        base: addr as usize,
        len: length,
    });
    let reg = p.rx.register_foreign(mem, iova, acc)?;
    let (lkey, rkey) = (reg.lkey(), shown_rkey(acc, reg.rkey()));
    let mr = Box::into_raw(Box::new(Mr {
        mr: ibv_mr {
            context: p.pd.context,
            pd,
            addr,
            length,
            handle: lkey,
            lkey,
            rkey,
        },
        reg: Some(reg),
        pd: std::ptr::from_ref(p),
        access,
        iova,
    }));
    p.users.fetch_add(1, Ordering::AcqRel);
    handle::add(mr);
    Ok(mr.cast())
}

entry! {
    pub unsafe extern "C" fn ibv_reg_mr(
        pd: *mut ibv_pd,
        addr: *mut c_void,
        length: usize,
        access: c_int,
    ) -> *mut ibv_mr {
        ptr_result(
            VERB,
            reg_mr(pd, addr, length, addr as u64, access as c_uint),
        )
    }
}

entry! {
    pub unsafe extern "C" fn ibv_reg_mr_iova(
        pd: *mut ibv_pd,
        addr: *mut c_void,
        length: usize,
        iova: u64,
        access: c_int,
    ) -> *mut ibv_mr {
        ptr_result(
            VERB,
            reg_mr(pd, addr, length, iova, access as c_uint),
        )
    }
}

entry! {
    pub unsafe extern "C" fn ibv_reg_mr_iova2(
        pd: *mut ibv_pd,
        addr: *mut c_void,
        length: usize,
        iova: u64,
        access: c_uint,
    ) -> *mut ibv_mr {
        ptr_result(VERB, reg_mr(pd, addr, length, iova, access))
    }
}

entry! {
    pub unsafe extern "C" fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int {
        let r = (|| {
            // SAFETY: a live Mr is a Box<Mr> at this address.
            let m = unsafe { &mut *handle::check::<Mr>(mr, "mr")? };
            if let Some(reg) = m.reg.take() {
                if let Err((reg, e)) = reg.deregister() {
                    m.reg = Some(reg);
                    return Err(e.into());
                }
            }
            handle::remove(mr.cast::<Mr>());
            // SAFETY: the PD outlives its regions (dealloc is EBUSY while they exist).
            unsafe { (*m.pd).users.fetch_sub(1, Ordering::AcqRel) };
            // SAFETY: was a live Box<Mr>.
            drop(unsafe { Box::from_raw(mr.cast::<Mr>()) });
            Ok(())
        })();
        int_result(VERB, r)
    }
}

entry! {
    on_panic = IBV_REREG_MR_ERR_INPUT;
    pub unsafe extern "C" fn ibv_rereg_mr(
        mr: *mut ibv_mr,
        flags: c_int,
        pd: *mut ibv_pd,
        addr: *mut c_void,
        length: usize,
        access: c_int,
    ) -> c_int {
        if flags == 0 && access == 0 && handle::check::<Mr>(mr, "mr").is_ok() {
            // The kernel's uverbs refuses a re-registration that changes
            // nothing: the command fails with EINVAL (after libibverbs'
            // own checks of its arguments, which come first below).
            crate::ffi::note(VERB, "flags: 0 changes nothing");
            crate::ffi::set_errno(libc::EINVAL);
            return IBV_REREG_MR_ERR_CMD;
        }
        let r = (|| {
            let m = handle::check::<Mr>(mr, "mr")?;
            let flags = flags as u32;
            if flags & !IBV_REREG_MR_FLAGS_SUPPORTED != 0 {
                return Err(Fail::inval("flags", format!("{flags:#x} has unknown bits")));
            }

            if flags & IBV_REREG_MR_CHANGE_TRANSLATION != 0 && (addr.is_null() || length == 0) {
                return Err(Fail::inval(
                    "addr",
                    "IBV_REREG_MR_CHANGE_TRANSLATION needs an address and a length",
                ));
            }
            if access != 0 && flags & IBV_REREG_MR_CHANGE_ACCESS == 0 {
                return Err(Fail::inval(
                    "access",
                    "given without IBV_REREG_MR_CHANGE_ACCESS",
                ));
            }
            // SAFETY: a live Mr is a Box<Mr> at this address.
            let m = unsafe { &mut *m };
            let new_pd = if flags & IBV_REREG_MR_CHANGE_PD != 0 {
                pd
            } else {
                m.mr.pd
            };
            // A new translation is at its own address; otherwise the region
            // keeps its iova (which ibv_reg_mr_iova may have set apart).
            let (new_addr, new_len, new_iova) = if flags & IBV_REREG_MR_CHANGE_TRANSLATION != 0 {
                (addr, length, addr as u64)
            } else {
                (m.mr.addr, m.mr.length, m.iova)
            };
            let new_access = if flags & IBV_REREG_MR_CHANGE_ACCESS != 0 {
                access as c_uint
            } else {
                m.access
            };
            // Register the new translation first, so that a refusal leaves
            // the old region as it was.
            let fresh = reg_mr(new_pd, new_addr, new_len, new_iova, new_access)?;
            // SAFETY: just made by reg_mr.
            let f = unsafe { Box::from_raw(fresh.cast::<Mr>()) };
            handle::remove(fresh.cast::<Mr>());
            if let Some(old) = m.reg.take() {
                if let Err((old, e)) = old.deregister() {
                    m.reg = Some(old);
                    // SAFETY: the new region's PD is live (it was just used).
                    unsafe { (*f.pd).users.fetch_sub(1, Ordering::AcqRel) };
                    return Err(e.into());
                }
            }
            // SAFETY: the PDs outlive their regions.
            unsafe { (*m.pd).users.fetch_sub(1, Ordering::AcqRel) };
            let Mr {
                mr: fm,
                reg,
                pd: fpd,
                access: facc,
                iova: fiova,
            } = *f;
            m.mr.pd = fm.pd;
            m.mr.addr = fm.addr;
            m.mr.length = fm.length;
            m.mr.lkey = fm.lkey;
            m.mr.rkey = fm.rkey;
            m.mr.handle = fm.handle;
            m.reg = reg;
            m.pd = fpd;
            m.access = facc;
            m.iova = fiova;
            Ok(())
        })();
        match r {
            Ok(()) => 0,
            Err(f) => {
                crate::ffi::note(VERB, &f.why);
                crate::ffi::set_errno(f.errno);
                if f.errno == libc::EINVAL {
                    IBV_REREG_MR_ERR_INPUT
                } else {
                    IBV_REREG_MR_ERR_CMD
                }
            }
        }
    }
}
