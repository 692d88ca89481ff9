//! Memory regions and memory windows: the key tables every local SGE and
//! every remote request is checked against.
//!
//! # Keys
//!
//! Registering memory (`ibv_reg_mr`, here [`MemTable::reg_mr`]) gives the
//! consumer two 32-bit keys. The **lkey** is named by the consumer's own
//! work requests, in every scatter/gather element ([`Sge`](crate::types::Sge)),
//! so that the device may read the data to send and write the data received.
//! The **rkey** is handed to a peer, out of band, so that the peer's RDMA
//! READ, RDMA WRITE and atomic requests may name the memory in their RETH or
//! AtomicETH. Like the kernel's rxe, a region's lkey and rkey are the same
//! number; they differ in how they are checked.
//!
//! ```text
//!  31                                   8 7            0
//! +--------------------------------------+--------------+
//! |            index (24 bits)           | key (8 bits) |
//! +--------------------------------------+--------------+
//! ```
//!
//! The index selects a slot of the table; regions and windows share one
//! index space, so a key names one object. The low byte, the "key" part
//! (called the *variant* here), tells successive users of a slot apart: a
//! key whose index is in use but whose variant differs is *stale*. Both parts
//! are drawn at random, because an rkey is a capability sent over the
//! network: a peer must not be able to reach memory by counting keys up from
//! one it was given, nor predict the next key from the ones it was given. So
//! they come from a cryptographic generator ([`StdRng`], ChaCha12) seeded by
//! [`MemTable::new`], so that a simulation replays exactly; seed it from OS
//! entropy in production. (A non-cryptographic generator such as `SmallRng`
//! would let a peer handed enough keys work out its state.) Index 0 is
//! never used, so no key below 256 is ever valid, and the last
//! [`RETIRED_KEYS`] keys that were deregistered or deallocated are never
//! handed out again.
//!
//! # How a request is checked
//!
//! A local SGE goes through [`MemTable::local`], a remote request through
//! [`MemTable::remote`]. Both check, in order:
//!
//! 1. the key: its index names an object ([`KeyError::UnknownKey`]) of the
//!    right kind ([`KeyError::WrongKind`]: a window has no lkey) whose
//!    current key is exactly this one ([`KeyError::StaleKey`]);
//! 2. the protection domain: the object belongs to the PD of the QP doing the
//!    work ([`KeyError::WrongPd`]);
//! 3. the state: the object is valid, a window is bound
//!    ([`KeyError::Invalid`]);
//! 4. the rights: the key grants every flag of `need`
//!    ([`KeyError::AccessDenied`]). Local reads need nothing, local writes
//!    (receives, READ responses, atomic results) need `LOCAL_WRITE`, remote
//!    requests need `REMOTE_READ`, `REMOTE_WRITE` or `REMOTE_ATOMIC`;
//! 5. the range: `[addr, addr + len)` lies inside the object
//!    ([`KeyError::OutOfRange`], also when `addr + len` overflows).
//!
//! Addresses are absolute: a region registered at `iova` covers
//! `[iova, iova + length)`, and SGEs and RETHs carry addresses in that range.
//! A region or type 2 window registered with [`Access::ZERO_BASED`] covers
//! `[0, length)` instead.
//!
//! A check that passes gives a [`MemSlice`]: the bytes, as an
//! `Arc<dyn RegionMemory>` with an offset and a length, that the engine then
//! reads or writes in pieces (one packet at a time). A slice checks its own
//! bounds again on every access, and it is *revoked* when the key that
//! produced it goes away (deregistration, window invalidation or rebind):
//! a multi-packet RDMA WRITE whose region is deregistered halfway stops with
//! [`KeyError::Revoked`] instead of writing into memory the consumer has
//! taken back.
//!
//! Zero-length operations are not checked: IBTA says an RDMA READ or WRITE
//! of length 0 does not validate its R_Key or virtual address,
//! and the kernel's rxe skips zero-length SGEs without looking at their lkey.
//! Both [`MemTable::local`] and [`MemTable::remote`] therefore return an
//! empty slice for `len == 0` whatever the key.
//!
//! The QP's own remote access flags (`qp_access_flags`) and the alignment of
//! an atomic's virtual address are checked by the engine, not here.
//!
//! # What a window adds
//!
//! A memory window (`ibv_alloc_mw`, [`MemTable::alloc_mw`]) is an rkey
//! without memory of its own. Binding it ([`MemTable::bind_mw`]) points it at
//! a sub-range `[addr, addr + length)` of a region of the same PD that was
//! registered with [`Access::MW_BIND`], with remote rights of its own: a
//! consumer can register a large buffer once with only local rights and hand
//! out, and take back, narrow remote grants cheaply. A window may not grant
//! `REMOTE_WRITE` or `REMOTE_ATOMIC` on a region without `LOCAL_WRITE`.
//!
//! Each bind changes the key part of the window's rkey (the index stays), so
//! the rkey given out for the previous binding stops working: the new key
//! part is the one the consumer chose (the low 8 bits of the bind's
//! `new_rkey`; libibverbs' `ibv_inc_rkey` adds one), as in the kernel's rxe.
//! A **type 1** window is bound with the `ibv_bind_mw` verb (which rxe, like
//! the kernel's, carries out as a `BIND_MW` work request), may be rebound at
//! any time, and serves any QP of its PD. A **type 2** window is bound by a
//! `BIND_MW` work request, serves only requests arriving on the QP
//! that bound it, and must be invalidated (`LOCAL_INV`, or a peer's SEND with
//! invalidate) before it may be bound again. A region with bound windows
//! cannot be deregistered ([`MemError::InUse`]).
//!
//! # Errors
//!
//! [`KeyError`] is what a check returns; the engine maps it onto a completion
//! status (`IBV_WC_LOC_PROT_ERR` for SGEs, `IBV_WC_MW_BIND_ERR` for binds) or
//! a NAK (remote access error for R_Key, range and rights violations).
//! [`MemError`] is what a verb returns, and names the offending argument.

use crate::fasthash::{FastMap, FastSet};
use crate::types::{Access, DeviceCaps, MwBind};
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

/// A protection domain handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PdId(pub u32);

/// 8-byte atomic operations on registered memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtomicOp {
    /// Replace with `swap` if equal to `compare`.
    CompareSwap {
        /// Value to compare.
        compare: u64,
        /// Value to store if equal.
        swap: u64,
    },
    /// Add (wrapping).
    FetchAdd(u64),
    /// Store these 8 bytes (ATOMIC WRITE); the old value comes back.
    Store(u64),
}

/// The bytes behind a registered region, as the engine reaches them.
///
/// The engine checks every range against the region before calling these,
/// and implementations check again: a range outside `0..len()` returns
/// `false`/`None` and touches nothing.
pub trait RegionMemory: Send + Sync + fmt::Debug {
    /// Length in bytes.
    fn len(&self) -> usize;
    /// True if the region has no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Copies `dst.len()` bytes starting at `offset` into `dst`.
    fn read(&self, offset: usize, dst: &mut [u8]) -> bool;
    /// Copies `src` to `offset`.
    fn write(&self, offset: usize, src: &[u8]) -> bool;
    /// Performs an 8-byte atomic at `offset` (8-byte aligned), native byte
    /// order, and returns the original value.
    fn atomic(&self, offset: usize, op: AtomicOp) -> Option<u64>;
}

/// How many of the most recently retired keys are never handed out again.
pub const RETIRED_KEYS: usize = 4096;

/// The largest key index (24 bits).
pub const MAX_KEY_INDEX: u32 = (1 << 24) - 1;

/// Random index draws before falling back to a scan for a free slot.
const RANDOM_TRIES: usize = 64;

/// The table slot a key names (its high 24 bits).
pub const fn key_index(key: u32) -> u32 {
    key >> 8
}

/// The key part of a key (its low 8 bits), which changes from one user of a
/// slot to the next and on every window bind.
pub const fn key_variant(key: u32) -> u8 {
    (key & 0xff) as u8
}

const fn make_key(index: u32, variant: u8) -> u32 {
    (index << 8) | variant as u32
}

/// Memory window types (`ibv_mw_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MwType {
    /// Bound by the `ibv_bind_mw` verb; usable by any QP of the PD; rebinding
    /// replaces the binding.
    Type1,
    /// Bound by a `BIND_MW` work request; usable only by the QP that bound
    /// it; must be invalidated before it is bound again.
    Type2,
}

/// The keys of a registered region. They are equal, as in the kernel's rxe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MrKeys {
    /// Key for local SGEs.
    pub lkey: u32,
    /// Key for remote requests.
    pub rkey: u32,
}

/// What [`MemTable::query_mr`] reports about a region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MrInfo {
    /// Protection domain.
    pub pd: PdId,
    /// Local key.
    pub lkey: u32,
    /// Remote key.
    pub rkey: u32,
    /// The address the region was registered at (addresses start at 0
    /// instead when `access` has `ZERO_BASED`).
    pub iova: u64,
    /// Length in bytes.
    pub length: u64,
    /// Access rights.
    pub access: Access,
    /// Memory windows currently bound to the region.
    pub bound_windows: u32,
}

/// A window's current binding, as [`MemTable::query_mw`] reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MwBinding {
    /// The region the window is bound to.
    pub mr_lkey: u32,
    /// Start of the window, in the region's address space.
    pub addr: u64,
    /// Length in bytes.
    pub length: u64,
    /// Remote rights through the window.
    pub access: Access,
    /// The QP a type 2 window is bound through; `None` for type 1.
    pub qpn: Option<u32>,
}

/// What [`MemTable::query_mw`] reports about a window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MwInfo {
    /// Protection domain.
    pub pd: PdId,
    /// The window's current rkey.
    pub rkey: u32,
    /// Window type.
    pub mw_type: MwType,
    /// The binding, if the window is bound.
    pub binding: Option<MwBinding>,
}

/// Why a key check failed. The engine maps these onto completion statuses
/// (`IBV_WC_LOC_PROT_ERR` for local SGEs) and NAK codes (remote access error
/// for incoming requests).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum KeyError {
    /// No region or window uses the key's index.
    #[error("unknown key")]
    UnknownKey,
    /// The key's index is in use, with another key part: the key belonged to
    /// an earlier registration or binding.
    #[error("stale key (its slot now holds another key)")]
    StaleKey,
    /// The key names a memory window where only a region will do (an lkey),
    /// or a region where only a window will do.
    #[error("key names the wrong kind of object (region or window)")]
    WrongKind,
    /// The key belongs to another protection domain.
    #[error("key belongs to another protection domain")]
    WrongPd,
    /// The key is not valid: an unbound window, or an invalidated region.
    #[error("key is not valid (unbound window or invalidated region)")]
    Invalid,
    /// A type 2 window used by (or invalidated from) a QP other than the one
    /// it is bound through.
    #[error("memory window is bound to another queue pair")]
    WrongQp,
    /// The key does not grant every right the operation needs.
    #[error("access denied: needs {}, key grants {}", AccessNames(.need), AccessNames(.have))]
    AccessDenied {
        /// Rights the operation needs.
        need: Access,
        /// Rights the key grants.
        have: Access,
    },
    /// The range is outside the key's bounds (or its end overflows).
    #[error("address range outside the key's bounds")]
    OutOfRange,
    /// An 8-byte atomic on memory that is not 8-byte aligned.
    #[error("atomic target is not 8-byte aligned")]
    Misaligned,
    /// The key cannot be invalidated: a region, or a type 1 window.
    #[error("key cannot be invalidated (not a type 2 memory window)")]
    NotInvalidatable,
    /// The slice's key was deregistered, invalidated or rebound since the
    /// slice was handed out.
    #[error("key was deregistered or invalidated while in use")]
    Revoked,
}

/// Displays access flags as `LOCAL_WRITE|REMOTE_READ`, or `none`.
struct AccessNames<'a>(&'a Access);

impl fmt::Display for AccessNames<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("none");
        }
        let mut first = true;
        for (name, _) in self.0.iter_names() {
            if !first {
                f.write_str("|")?;
            }
            f.write_str(name)?;
            first = false;
        }
        let unknown = self.0.bits() & !Access::all().bits();
        if unknown != 0 {
            if !first {
                f.write_str("|")?;
            }
            write!(f, "{unknown:#x}")?;
        }
        Ok(())
    }
}

/// Why a memory verb (register, deregister, allocate, bind) failed. The
/// message starts with the offending argument, as in `access: REMOTE_WRITE
/// requires LOCAL_WRITE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum MemError {
    /// A key argument was rejected.
    #[error("{arg}: {err}")]
    Key {
        /// The argument (`lkey`, `rkey`, `mw_rkey`, `mr_lkey`).
        arg: &'static str,
        /// Why.
        err: KeyError,
    },
    /// Access flags that cannot be granted.
    #[error("{arg}: {reason}")]
    Access {
        /// The argument (`access`, `bind.access`, `mr_lkey`).
        arg: &'static str,
        /// Why.
        reason: &'static str,
    },
    /// Deregistering a region that memory windows are still bound to.
    #[error("mr: {windows} memory windows still bound")]
    InUse {
        /// Windows bound to the region.
        windows: u32,
    },
    /// The region is larger than the device's `max_mr_size`.
    #[error("length: {length} bytes exceeds max_mr_size ({max})")]
    TooLarge {
        /// Region length.
        length: u64,
        /// The limit.
        max: u64,
    },
    /// `iova + length` does not fit in 64 bits.
    #[error("iova: iova + length overflows 64 bits")]
    IovaOverflow,
    /// A window range that is not inside its region.
    #[error("bind.addr: [addr, addr + length) is outside the region")]
    OutOfRegion,
    /// Binding a type 2 window that is bound: it must be invalidated first.
    #[error("mw_rkey: type 2 memory window is already bound; invalidate it first")]
    AlreadyBound,
    /// Binding a type 2 window with length 0 (IBTA o10-37.2.40).
    #[error("bind.length: a type 2 memory window cannot be bound with length 0")]
    ZeroLength,
    /// The device's `max_mw` windows are allocated.
    #[error("mw: {max} memory windows already allocated (max_mw)")]
    TooManyWindows {
        /// The limit.
        max: u32,
    },
    /// All 2^24 - 1 key indices are in use.
    #[error("key: all key indices are in use")]
    Exhausted,
}

/// A checked range of registered memory: what a successful key check gives
/// the engine to read or write.
///
/// Cloning is cheap (two reference counts). Every access is checked against
/// the slice's own bounds and refuses to touch anything outside them, and
/// fails with [`KeyError::Revoked`] once the key it came through has been
/// deregistered, invalidated or rebound.
#[derive(Debug, Clone)]
pub struct MemSlice {
    mem: Arc<dyn RegionMemory>,
    offset: usize,
    len: usize,
    /// Cleared when the key this slice came through goes away; `None` for
    /// slices that are never revoked.
    live: Option<Arc<AtomicBool>>,
}

fn empty_memory() -> Arc<dyn RegionMemory> {
    static EMPTY: OnceLock<Arc<VecMemory>> = OnceLock::new();
    EMPTY.get_or_init(|| Arc::new(VecMemory::new(0))).clone()
}

impl MemSlice {
    /// A slice of `len` bytes at `offset` in `mem`, if that range lies within
    /// `mem`. Such a slice is never revoked.
    pub fn new(mem: Arc<dyn RegionMemory>, offset: usize, len: usize) -> Option<MemSlice> {
        let end = offset.checked_add(len)?;
        (end <= mem.len()).then_some(MemSlice {
            mem,
            offset,
            len,
            live: None,
        })
    }

    /// A slice of no bytes, as zero-length operations get.
    pub fn empty() -> MemSlice {
        MemSlice {
            mem: empty_memory(),
            offset: 0,
            len: 0,
            live: None,
        }
    }

    fn revocable(
        mem: &Arc<dyn RegionMemory>,
        offset: u64,
        len: u64,
        live: &Arc<AtomicBool>,
    ) -> Result<MemSlice, KeyError> {
        let offset = usize::try_from(offset).map_err(|_| KeyError::OutOfRange)?;
        let len = usize::try_from(len).map_err(|_| KeyError::OutOfRange)?;
        // The bounds check of `MemSlice::new`, with the slice then built
        // once (building it through `new` and setting `live` after cost a
        // call, an `Option` and two moves of the slice per lookup).
        let end = offset.checked_add(len).ok_or(KeyError::OutOfRange)?;
        if end > mem.len() {
            return Err(KeyError::OutOfRange);
        }
        Ok(MemSlice {
            mem: mem.clone(),
            offset,
            len,
            live: Some(live.clone()),
        })
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a slice of no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Where the slice starts in its [`RegionMemory`].
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// The memory the slice points into.
    pub fn memory(&self) -> &Arc<dyn RegionMemory> {
        &self.mem
    }

    /// False once the key the slice came through has gone away.
    pub fn is_live(&self) -> bool {
        match &self.live {
            Some(live) => live.load(Ordering::Acquire),
            None => true,
        }
    }

    fn check_live(&self) -> Result<(), KeyError> {
        if self.is_live() {
            Ok(())
        } else {
            Err(KeyError::Revoked)
        }
    }

    /// Offset in the memory of `[at, at + len)` of the slice, if inside it.
    fn span(&self, at: usize, len: usize) -> Result<usize, KeyError> {
        self.check_live()?;
        let end = at.checked_add(len).ok_or(KeyError::OutOfRange)?;
        if end > self.len {
            return Err(KeyError::OutOfRange);
        }
        self.offset.checked_add(at).ok_or(KeyError::OutOfRange)
    }

    /// The `len` bytes at `at` of this slice, as a slice of their own (one
    /// packet's worth of a message, say). It is revoked with this one.
    pub fn sub(&self, at: usize, len: usize) -> Result<MemSlice, KeyError> {
        let offset = self.span(at, len)?;
        Ok(MemSlice {
            mem: self.mem.clone(),
            offset,
            len,
            live: self.live.clone(),
        })
    }

    /// Copies `dst.len()` bytes starting at `at` (relative to the slice)
    /// into `dst`.
    pub fn read(&self, at: usize, dst: &mut [u8]) -> Result<(), KeyError> {
        let offset = self.span(at, dst.len())?;
        if dst.is_empty() || self.mem.read(offset, dst) {
            Ok(())
        } else {
            Err(KeyError::OutOfRange)
        }
    }

    /// Copies `src` to `at` (relative to the slice).
    pub fn write(&self, at: usize, src: &[u8]) -> Result<(), KeyError> {
        let offset = self.span(at, src.len())?;
        if src.is_empty() || self.mem.write(offset, src) {
            Ok(())
        } else {
            Err(KeyError::OutOfRange)
        }
    }

    /// Performs an 8-byte atomic on the slice, which must be exactly 8 bytes
    /// long ([`KeyError::OutOfRange`] otherwise) and 8-byte aligned in its
    /// memory ([`KeyError::Misaligned`] otherwise), and returns the original
    /// value.
    pub fn atomic(&self, op: AtomicOp) -> Result<u64, KeyError> {
        let offset = self.span(0, 8)?;
        if self.len != 8 {
            return Err(KeyError::OutOfRange);
        }
        if offset & 7 != 0 {
            return Err(KeyError::Misaligned);
        }
        self.mem.atomic(offset, op).ok_or(KeyError::OutOfRange)
    }
}

/// A [`RegionMemory`] over a `Vec<u8>` behind a mutex, for tests and
/// simulation. Its length never changes.
#[derive(Default)]
pub struct VecMemory {
    bytes: Mutex<Vec<u8>>,
}

impl VecMemory {
    /// `len` zero bytes.
    pub fn new(len: usize) -> VecMemory {
        VecMemory::from_vec(vec![0; len])
    }

    /// These bytes.
    pub fn from_vec(bytes: Vec<u8>) -> VecMemory {
        VecMemory {
            bytes: Mutex::new(bytes),
        }
    }

    /// A copy of the bytes.
    pub fn snapshot(&self) -> Vec<u8> {
        self.bytes.lock().clone()
    }

    /// Sets every byte to `value`.
    pub fn fill(&self, value: u8) {
        self.bytes.lock().fill(value);
    }
}

impl fmt::Debug for VecMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VecMemory")
            .field("len", &self.len())
            .finish()
    }
}

impl RegionMemory for VecMemory {
    fn len(&self) -> usize {
        self.bytes.lock().len()
    }

    fn read(&self, offset: usize, dst: &mut [u8]) -> bool {
        let Some(end) = offset.checked_add(dst.len()) else {
            return false;
        };
        match self.bytes.lock().get(offset..end) {
            Some(src) => {
                dst.copy_from_slice(src);
                true
            }
            None => false,
        }
    }

    fn write(&self, offset: usize, src: &[u8]) -> bool {
        let Some(end) = offset.checked_add(src.len()) else {
            return false;
        };
        match self.bytes.lock().get_mut(offset..end) {
            Some(dst) => {
                dst.copy_from_slice(src);
                true
            }
            None => false,
        }
    }

    fn atomic(&self, offset: usize, op: AtomicOp) -> Option<u64> {
        if offset & 7 != 0 {
            return None;
        }
        let end = offset.checked_add(8)?;
        let mut bytes = self.bytes.lock();
        let cell: &mut [u8; 8] = bytes.get_mut(offset..end)?.try_into().ok()?;
        let old = u64::from_ne_bytes(*cell);
        let new = match op {
            AtomicOp::CompareSwap { compare, swap } => {
                if old == compare {
                    swap
                } else {
                    old
                }
            }
            AtomicOp::FetchAdd(add) => old.wrapping_add(add),
            AtomicOp::Store(v) => v,
        };
        *cell = new.to_ne_bytes();
        Some(old)
    }
}

/// The offset of `[addr, addr + len)` in an object covering
/// `[base, base + length)`, if the range lies inside it.
fn range_offset(base: u64, length: u64, addr: u64, len: u64) -> Result<u64, KeyError> {
    let offset = addr.checked_sub(base).ok_or(KeyError::OutOfRange)?;
    let end = offset.checked_add(len).ok_or(KeyError::OutOfRange)?;
    if end > length {
        return Err(KeyError::OutOfRange);
    }
    Ok(offset)
}

#[derive(Debug)]
struct Region {
    pd: PdId,
    key: u32,
    access: Access,
    iova: u64,
    /// First valid address: `iova`, or 0 for zero-based regions.
    base: u64,
    length: u64,
    mem: Arc<dyn RegionMemory>,
    /// The region's state: valid while set. Cleared on deregistration, which
    /// revokes every slice handed out through the region's key.
    live: Arc<AtomicBool>,
    bound_windows: u32,
}

impl Region {
    fn check(&self, pd: PdId, addr: u64, len: u64, need: Access) -> Result<MemSlice, KeyError> {
        self.admits(pd, need)?;
        let offset = range_offset(self.base, self.length, addr, len)?;
        MemSlice::revocable(&self.mem, offset, len, &self.live)
    }
}

impl Region {
    /// Whether a remote request in `pd` may use the region for `need`,
    /// whatever the range.
    fn admits(&self, pd: PdId, need: Access) -> Result<(), KeyError> {
        if self.pd != pd {
            return Err(KeyError::WrongPd);
        }
        if !self.live.load(Ordering::Acquire) {
            return Err(KeyError::Invalid);
        }
        if !self.access.contains(need) {
            return Err(KeyError::AccessDenied {
                need,
                have: self.access,
            });
        }
        Ok(())
    }
}

#[derive(Debug)]
struct Binding {
    mr_lkey: u32,
    /// Start of the window in the region's address space.
    addr: u64,
    length: u64,
    access: Access,
    qpn: Option<u32>,
    /// Cleared when the binding ends (invalidation, rebind, deallocation),
    /// which revokes every slice handed out through it.
    live: Arc<AtomicBool>,
}

#[derive(Debug)]
struct Window {
    pd: PdId,
    key: u32,
    mw_type: MwType,
    binding: Option<Binding>,
}

impl Window {
    /// The window's binding, if a remote request of QP `qpn` in `pd` may
    /// use it for `need`, whatever the range.
    fn admits(&self, pd: PdId, qpn: u32, need: Access) -> Result<&Binding, KeyError> {
        if self.pd != pd {
            return Err(KeyError::WrongPd);
        }
        let binding = self.binding.as_ref().ok_or(KeyError::Invalid)?;
        if !binding.live.load(Ordering::Acquire) {
            return Err(KeyError::Invalid);
        }
        if binding.qpn.is_some_and(|bound| bound != qpn) {
            return Err(KeyError::WrongQp);
        }
        if !binding.access.contains(need) {
            return Err(KeyError::AccessDenied {
                need,
                have: binding.access,
            });
        }
        Ok(binding)
    }
}

#[derive(Debug)]
enum Entry {
    Mr(Region),
    Mw(Window),
}

impl Entry {
    fn key(&self) -> u32 {
        match self {
            Entry::Mr(mr) => mr.key,
            Entry::Mw(mw) => mw.key,
        }
    }
}

/// The memory regions and windows of a device, by key.
///
/// Verbs ([`reg_mr`](Self::reg_mr), [`bind_mw`](Self::bind_mw), ...) take
/// `&mut self`; checks ([`local`](Self::local), [`remote`](Self::remote))
/// take `&self`. Keys are drawn from a seeded RNG, so a table built by the
/// same calls from the same seed hands out the same keys.
#[derive(Debug)]
pub struct MemTable {
    entries: FastMap<u32, Entry>,
    /// A CSPRNG: keys must not be predictable from other keys.
    rng: StdRng,
    retired: VecDeque<u32>,
    retired_set: FastSet<u32>,
    num_mrs: usize,
    num_mws: usize,
    max_mr_size: u64,
    max_mw: u32,
    /// Largest index handed out: [`MAX_KEY_INDEX`], smaller in tests.
    max_index: u32,
}

fn key_err(arg: &'static str) -> impl Fn(KeyError) -> MemError {
    move |err| MemError::Key { arg, err }
}

impl MemTable {
    /// An empty table with the default device limits, drawing keys from an
    /// RNG seeded with `seed`.
    pub fn new(seed: u64) -> MemTable {
        MemTable::with_caps(seed, &DeviceCaps::default())
    }

    /// An empty table enforcing `caps.max_mr_size` and `caps.max_mw`.
    pub fn with_caps(seed: u64, caps: &DeviceCaps) -> MemTable {
        MemTable {
            entries: FastMap::default(),
            rng: StdRng::seed_from_u64(seed),
            retired: VecDeque::new(),
            retired_set: FastSet::default(),
            num_mrs: 0,
            num_mws: 0,
            max_mr_size: caps.max_mr_size,
            max_mw: caps.max_mw,
            max_index: MAX_KEY_INDEX,
        }
    }

    /// Registered regions.
    pub fn num_mrs(&self) -> usize {
        self.num_mrs
    }

    /// Allocated windows.
    pub fn num_mws(&self) -> usize {
        self.num_mws
    }

    /// A key for a free slot: random index, random key part, not recently
    /// retired.
    fn fresh_key(&mut self) -> Result<u32, MemError> {
        for _ in 0..RANDOM_TRIES {
            let index = self.rng.gen_range(1..=self.max_index);
            if let Some(key) = self.fresh_variant(index) {
                return Ok(key);
            }
        }
        // The table is nearly full: walk the slots from a random start.
        let start = self.rng.gen_range(0..self.max_index);
        for step in 0..self.max_index {
            let index = (start + step) % self.max_index + 1;
            if let Some(key) = self.fresh_variant(index) {
                return Ok(key);
            }
        }
        Err(MemError::Exhausted)
    }

    /// A key for slot `index` if it is free.
    fn fresh_variant(&mut self, index: u32) -> Option<u32> {
        if self.entries.contains_key(&index) {
            return None;
        }
        let first: u8 = self.rng.gen();
        (0..=u8::MAX)
            .map(|step| make_key(index, first.wrapping_add(step)))
            .find(|key| !self.retired_set.contains(key))
    }

    fn retire(&mut self, key: u32) {
        if self.retired_set.insert(key) {
            self.retired.push_back(key);
        }
        while self.retired.len() > RETIRED_KEYS {
            if let Some(old) = self.retired.pop_front() {
                self.retired_set.remove(&old);
            }
        }
    }

    /// The key of the region or window in the slot `key` names, whatever
    /// its variant: for the `accept-neighbour-rkey` test fault only
    /// ([`super::TestFault`]), which honours a key with the wrong variant
    /// as the slot's own (and so checks it against that entry's own PD,
    /// rights and range: no byte outside a registered region is reachable).
    #[cfg(feature = "test-fault")]
    pub(crate) fn key_in_slot(&self, key: u32) -> Option<u32> {
        self.entries.get(&key_index(key)).map(Entry::key)
    }

    fn lookup(&self, key: u32) -> Result<&Entry, KeyError> {
        let entry = self
            .entries
            .get(&key_index(key))
            .ok_or(KeyError::UnknownKey)?;
        if entry.key() == key {
            Ok(entry)
        } else {
            Err(KeyError::StaleKey)
        }
    }

    fn region(&self, key: u32) -> Result<&Region, KeyError> {
        match self.lookup(key)? {
            Entry::Mr(mr) => Ok(mr),
            Entry::Mw(_) => Err(KeyError::WrongKind),
        }
    }

    fn window(&self, key: u32) -> Result<&Window, KeyError> {
        match self.lookup(key)? {
            Entry::Mw(mw) => Ok(mw),
            Entry::Mr(_) => Err(KeyError::WrongKind),
        }
    }

    fn window_mut(&mut self, key: u32) -> Option<&mut Window> {
        match self.entries.get_mut(&key_index(key)) {
            Some(Entry::Mw(mw)) if mw.key == key => Some(mw),
            _ => None,
        }
    }

    /// Registers `mem` (`ibv_reg_mr`): in protection domain `pd`, at address
    /// `iova` (ignored with [`Access::ZERO_BASED`]: addresses then start at
    /// 0), with rights `access`. The region's length is `mem.len()`; zero is
    /// allowed. Every registration gets a fresh random key, equal for lkey
    /// and rkey.
    ///
    /// Fails if `access` has `REMOTE_WRITE` or `REMOTE_ATOMIC` without
    /// `LOCAL_WRITE` (`EINVAL` in verbs), has unknown bits, or the region is
    /// too large or does not fit at `iova`.
    pub fn reg_mr(
        &mut self,
        pd: PdId,
        mem: Arc<dyn RegionMemory>,
        iova: u64,
        access: Access,
    ) -> Result<MrKeys, MemError> {
        if Access::from_bits(access.bits()).is_none() {
            return Err(MemError::Access {
                arg: "access",
                reason: "unknown flag bits",
            });
        }
        if access.contains(Access::FLUSH_PERSISTENT) {
            // As the kernel's rxe answers for memory that is not
            // persistent, which no memory here is.
            return Err(MemError::Access {
                arg: "access",
                reason: "FLUSH_PERSISTENT needs persistent memory",
            });
        }
        if !access.contains(Access::LOCAL_WRITE) {
            if access.contains(Access::REMOTE_WRITE) {
                return Err(MemError::Access {
                    arg: "access",
                    reason: "REMOTE_WRITE requires LOCAL_WRITE",
                });
            }
            if access.contains(Access::REMOTE_ATOMIC) {
                return Err(MemError::Access {
                    arg: "access",
                    reason: "REMOTE_ATOMIC requires LOCAL_WRITE",
                });
            }
        }
        let max = self.max_mr_size;
        let length = u64::try_from(mem.len()).map_err(|_| MemError::TooLarge {
            length: u64::MAX,
            max,
        })?;
        if length > max {
            return Err(MemError::TooLarge { length, max });
        }
        let base = if access.contains(Access::ZERO_BASED) {
            0
        } else {
            iova.checked_add(length).ok_or(MemError::IovaOverflow)?;
            iova
        };
        let key = self.fresh_key()?;
        let region = Region {
            pd,
            key,
            access,
            iova,
            base,
            length,
            mem,
            live: Arc::new(AtomicBool::new(true)),
            bound_windows: 0,
        };
        self.entries.insert(key_index(key), Entry::Mr(region));
        self.num_mrs += 1;
        Ok(MrKeys {
            lkey: key,
            rkey: key,
        })
    }

    /// Deregisters the region of `lkey` (`ibv_dereg_mr`). Refused while
    /// memory windows are bound to it. Slices handed out through the key are
    /// revoked, and the key is never reissued soon.
    pub fn dereg_mr(&mut self, lkey: u32) -> Result<(), MemError> {
        let mr = self.region(lkey).map_err(key_err("lkey"))?;
        if mr.bound_windows > 0 {
            return Err(MemError::InUse {
                windows: mr.bound_windows,
            });
        }
        if let Some(Entry::Mr(mr)) = self.entries.remove(&key_index(lkey)) {
            mr.live.store(false, Ordering::Release);
        }
        self.num_mrs -= 1;
        self.retire(lkey);
        Ok(())
    }

    /// The region of `lkey`, if that is its current key.
    pub fn query_mr(&self, lkey: u32) -> Option<MrInfo> {
        let mr = self.region(lkey).ok()?;
        Some(MrInfo {
            pd: mr.pd,
            lkey: mr.key,
            rkey: mr.key,
            iova: mr.iova,
            length: mr.length,
            access: mr.access,
            bound_windows: mr.bound_windows,
        })
    }

    /// Allocates an unbound memory window (`ibv_alloc_mw`) and returns its
    /// rkey, which names nothing usable until the window is bound.
    pub fn alloc_mw(&mut self, pd: PdId, mw_type: MwType) -> Result<u32, MemError> {
        let allocated = u32::try_from(self.num_mws).unwrap_or(u32::MAX);
        if allocated >= self.max_mw {
            return Err(MemError::TooManyWindows { max: self.max_mw });
        }
        let key = self.fresh_key()?;
        let window = Window {
            pd,
            key,
            mw_type,
            binding: None,
        };
        self.entries.insert(key_index(key), Entry::Mw(window));
        self.num_mws += 1;
        Ok(key)
    }

    /// Deallocates the window of `rkey` (`ibv_dealloc_mw`), bound or not.
    pub fn dealloc_mw(&mut self, rkey: u32) -> Result<(), MemError> {
        self.window(rkey).map_err(key_err("rkey"))?;
        self.unbind(rkey);
        self.entries.remove(&key_index(rkey));
        self.num_mws -= 1;
        self.retire(rkey);
        Ok(())
    }

    /// The current rkey of the window in the slot `rkey` names, whatever
    /// `rkey`'s key part: a consumer that posted `BIND_MW` work requests may
    /// not know which of them took effect (a failed bind keeps the old key).
    pub fn window_key(&self, rkey: u32) -> Option<u32> {
        match self.entries.get(&key_index(rkey)) {
            Some(Entry::Mw(mw)) => Some(mw.key),
            _ => None,
        }
    }

    /// The window of `rkey`, if that is its current key.
    pub fn query_mw(&self, rkey: u32) -> Option<MwInfo> {
        let mw = self.window(rkey).ok()?;
        Some(MwInfo {
            pd: mw.pd,
            rkey: mw.key,
            mw_type: mw.mw_type,
            binding: mw.binding.as_ref().map(|b| MwBinding {
                mr_lkey: b.mr_lkey,
                addr: b.addr,
                length: b.length,
                access: b.access,
                qpn: b.qpn,
            }),
        })
    }

    /// Ends the binding of the window of `rkey`, if any: revokes its slices
    /// and releases its region.
    fn unbind(&mut self, rkey: u32) {
        let Some(binding) = self.window_mut(rkey).and_then(|mw| mw.binding.take()) else {
            return;
        };
        binding.live.store(false, Ordering::Release);
        if let Some(Entry::Mr(mr)) = self.entries.get_mut(&key_index(binding.mr_lkey)) {
            if mr.key == binding.mr_lkey {
                mr.bound_windows = mr.bound_windows.saturating_sub(1);
            }
        }
    }

    /// Binds the window `bind.mw_rkey` to `[bind.addr, bind.addr +
    /// bind.length)` of the region `bind.mr_lkey` with remote rights
    /// `bind.access`, on behalf of QP `qpn` in protection domain `pd` (the
    /// `ibv_bind_mw` verb for type 1 windows, a `BIND_MW` work request for
    /// type 2). Returns the window's new rkey: same index, new key part —
    /// the low 8 bits of `bind.new_rkey` (its other bits are ignored, as in
    /// the kernel's rxe). The previous rkey stops working.
    ///
    /// The window and the region must belong to `pd`; the region must be
    /// valid, registered with `MW_BIND`, and have `LOCAL_WRITE` if the window
    /// grants `REMOTE_WRITE` or `REMOTE_ATOMIC`. `bind.access` may hold only
    /// remote rights and, for type 2, `ZERO_BASED`. A type 1 window bound
    /// with length 0 is unbound (`bind.mr_lkey` is then ignored); a type 2
    /// window must be bound with a nonzero length, and only when unbound
    /// (freshly allocated or invalidated).
    pub fn bind_mw(&mut self, pd: PdId, qpn: u32, bind: &MwBind) -> Result<u32, MemError> {
        let mw = self.window(bind.mw_rkey).map_err(key_err("mw_rkey"))?;
        if mw.pd != pd {
            return Err(MemError::Key {
                arg: "mw_rkey",
                err: KeyError::WrongPd,
            });
        }
        let mw_type = mw.mw_type;
        if mw_type == MwType::Type2 && mw.binding.is_some() {
            return Err(MemError::AlreadyBound);
        }
        // A window grants only remote rights (and may be zero-based); other
        // bits, such as LOCAL_WRITE or MW_BIND, mean nothing for a window
        // and are ignored, as the kernel's rxe_check_bind_mw does.
        let remote = Access::REMOTE_READ | Access::REMOTE_WRITE | Access::REMOTE_ATOMIC;
        let bind = &MwBind {
            access: bind.access & (remote | Access::ZERO_BASED),
            ..*bind
        };
        if mw_type == MwType::Type1 && bind.access.contains(Access::ZERO_BASED) {
            return Err(MemError::Access {
                arg: "bind.access",
                reason: "a type 1 window cannot be zero-based",
            });
        }
        let binding = if bind.length == 0 {
            if mw_type == MwType::Type2 {
                return Err(MemError::ZeroLength);
            }
            None
        } else {
            let mr = self.region(bind.mr_lkey).map_err(key_err("mr_lkey"))?;
            if mr.pd != pd {
                return Err(MemError::Key {
                    arg: "mr_lkey",
                    err: KeyError::WrongPd,
                });
            }
            if !mr.live.load(Ordering::Acquire) {
                return Err(MemError::Key {
                    arg: "mr_lkey",
                    err: KeyError::Invalid,
                });
            }
            if !mr.access.contains(Access::MW_BIND) {
                return Err(MemError::Access {
                    arg: "mr_lkey",
                    reason: "the region was not registered with MW_BIND",
                });
            }
            if bind
                .access
                .intersects(Access::REMOTE_WRITE | Access::REMOTE_ATOMIC)
                && !mr.access.contains(Access::LOCAL_WRITE)
            {
                return Err(MemError::Access {
                    arg: "bind.access",
                    reason: "REMOTE_WRITE or REMOTE_ATOMIC needs LOCAL_WRITE on the region",
                });
            }
            range_offset(mr.base, mr.length, bind.addr, bind.length)
                .map_err(|_| MemError::OutOfRegion)?;
            Some(Binding {
                mr_lkey: mr.key,
                addr: bind.addr,
                length: bind.length,
                access: bind.access,
                qpn: (mw_type == MwType::Type2).then_some(qpn),
                live: Arc::new(AtomicBool::new(true)),
            })
        };

        let new_rkey = make_key(key_index(bind.mw_rkey), key_variant(bind.new_rkey));

        self.unbind(bind.mw_rkey);
        if let Some(b) = &binding {
            if let Some(Entry::Mr(mr)) = self.entries.get_mut(&key_index(b.mr_lkey)) {
                mr.bound_windows += 1;
            }
        }
        if let Some(mw) = self.window_mut(bind.mw_rkey) {
            mw.binding = binding;
            mw.key = new_rkey;
        }
        Ok(new_rkey)
    }

    /// Invalidates `rkey` (`LOCAL_INV` with `qpn == None`, or a SEND with
    /// invalidate arriving on QP `qpn`): the type 2 window it names becomes
    /// unbound, so that it may be bound again, and slices handed out through
    /// it are revoked. The rkey keeps naming the window until the next bind
    /// changes its key part. Invalidating an unbound window succeeds.
    ///
    /// Only type 2 windows can be invalidated: regions and type 1 windows
    /// give [`KeyError::NotInvalidatable`]. A SEND with invalidate must
    /// arrive on the QP the window is bound through.
    pub fn invalidate(&mut self, pd: PdId, qpn: Option<u32>, rkey: u32) -> Result<(), KeyError> {
        match self.lookup(rkey)? {
            Entry::Mr(mr) => {
                if mr.pd != pd {
                    return Err(KeyError::WrongPd);
                }
                return Err(KeyError::NotInvalidatable);
            }
            Entry::Mw(mw) => {
                if mw.pd != pd {
                    return Err(KeyError::WrongPd);
                }
                if mw.mw_type == MwType::Type1 {
                    return Err(KeyError::NotInvalidatable);
                }
                if let (Some(qpn), Some(binding)) = (qpn, &mw.binding) {
                    if binding.qpn != Some(qpn) {
                        return Err(KeyError::WrongQp);
                    }
                }
            }
        }
        self.unbind(rkey);
        Ok(())
    }

    /// Checks a local SGE: `len` bytes at `addr` in the region of `lkey`, for
    /// a work request of a QP in protection domain `pd`. `need` is
    /// `LOCAL_WRITE` when the device writes the memory (receives, READ
    /// responses, atomic results) and empty when it only reads it.
    ///
    /// A zero-length SGE is not checked: it gives an empty slice whatever
    /// its key, as the kernel's rxe skips it.
    pub fn local(
        &self,
        pd: PdId,
        lkey: u32,
        addr: u64,
        len: u64,
        need: Access,
    ) -> Result<MemSlice, KeyError> {
        if len == 0 {
            return Ok(MemSlice::empty());
        }
        self.region(lkey)?.check(pd, addr, len, need)
    }

    /// Checks an incoming request: `len` bytes at virtual address `va` under
    /// `rkey` (from a RETH or AtomicETH), arriving on QP `qpn` of protection
    /// domain `pd`, needing `need` (`REMOTE_READ`, `REMOTE_WRITE` or
    /// `REMOTE_ATOMIC`).
    ///
    /// The rkey may name a region or a window. A window checks its own PD,
    /// binding, QP (type 2), rights and range, then the underlying region
    /// must still be valid; the window's rights replace the region's.
    ///
    /// A zero-length request is not checked (IBTA: an RDMA READ or WRITE of
    /// length 0 does not validate its R_Key): it gives an empty slice
    /// whatever its key.
    pub fn remote(
        &self,
        pd: PdId,
        qpn: u32,
        rkey: u32,
        va: u64,
        len: u64,
        need: Access,
    ) -> Result<MemSlice, KeyError> {
        if len == 0 {
            return Ok(MemSlice::empty());
        }
        let mw = match self.lookup(rkey)? {
            Entry::Mr(mr) => return mr.check(pd, va, len, need),
            Entry::Mw(mw) => mw,
        };
        let binding = mw.admits(pd, qpn, need)?;
        let base = if binding.access.contains(Access::ZERO_BASED) {
            0
        } else {
            binding.addr
        };
        let in_window = range_offset(base, binding.length, va, len)?;
        let mr = self
            .region(binding.mr_lkey)
            .map_err(|_| KeyError::Invalid)?;
        if !mr.live.load(Ordering::Acquire) {
            return Err(KeyError::Invalid);
        }
        let addr = binding
            .addr
            .checked_add(in_window)
            .ok_or(KeyError::OutOfRange)?;
        let offset = range_offset(mr.base, mr.length, addr, len)?;
        MemSlice::revocable(&mr.mem, offset, len, &binding.live)
    }

    /// What a FLUSH of `rkey` needs: the key, its PD and QP, and the
    /// rights of `flush`'s placement type always (even for 0 bytes), and
    /// the range from `va` unless it is the whole region.
    pub fn check_flush(
        &self,
        pd: PdId,
        qpn: u32,
        rkey: u32,
        va: u64,
        flush: &crate::types::FlushParams,
    ) -> Result<(), KeyError> {
        let need = flush.rights();
        let len = u64::from(flush.len);
        if !flush.whole_region && len > 0 {
            return self.remote(pd, qpn, rkey, va, len, need).map(drop);
        }
        match self.lookup(rkey)? {
            Entry::Mr(mr) => mr.admits(pd, need),
            Entry::Mw(mw) => {
                let binding = mw.admits(pd, qpn, need)?;
                let mr = self
                    .region(binding.mr_lkey)
                    .map_err(|_| KeyError::Invalid)?;
                if mr.live.load(Ordering::Acquire) {
                    Ok(())
                } else {
                    Err(KeyError::Invalid)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    const PD: PdId = PdId(1);
    const OTHER_PD: PdId = PdId(2);
    const QPN: u32 = 0x11;
    const OTHER_QPN: u32 = 0x12;
    const IOVA: u64 = 0x7f00_0000_1000;

    const RW: Access = Access::LOCAL_WRITE
        .union(Access::REMOTE_WRITE)
        .union(Access::REMOTE_READ)
        .union(Access::REMOTE_ATOMIC);

    fn vec_mem(len: usize) -> Arc<VecMemory> {
        let mem = VecMemory::from_vec((0..len).map(|i| i as u8).collect());
        Arc::new(mem)
    }

    fn reg(t: &mut MemTable, len: usize, access: Access) -> (Arc<VecMemory>, u32) {
        let mem = vec_mem(len);
        let keys = t
            .reg_mr(PD, mem.clone(), IOVA, access)
            .expect("registration");
        assert_eq!(keys.lkey, keys.rkey);
        (mem, keys.lkey)
    }

    fn remote(
        t: &MemTable,
        rkey: u32,
        va: u64,
        len: u64,
        need: Access,
    ) -> Result<MemSlice, KeyError> {
        t.remote(PD, QPN, rkey, va, len, need)
    }

    fn bind(mw_rkey: u32, mr_lkey: u32, addr: u64, length: u64, access: Access) -> MwBind {
        MwBind {
            mw_rkey,
            new_rkey: mw_rkey.wrapping_add(1),
            mr_lkey,
            addr,
            length,
            access,
        }
    }

    /// A table with a region (MW_BIND, 256 bytes at IOVA) and a bound window
    /// of the given type over [IOVA + 64, IOVA + 128).
    fn with_window(mw_type: MwType, access: Access) -> (MemTable, Arc<VecMemory>, u32, u32) {
        let mut t = MemTable::new(7);
        let (mem, lkey) = reg(&mut t, 256, Access::LOCAL_WRITE | Access::MW_BIND);
        let mw = t.alloc_mw(PD, mw_type).expect("alloc");
        let rkey = t
            .bind_mw(PD, QPN, &bind(mw, lkey, IOVA + 64, 64, access))
            .expect("bind");
        (t, mem, lkey, rkey)
    }

    #[test]
    fn keys_are_random_unique_and_deterministic() {
        let mut t = MemTable::new(1);
        let mem = vec_mem(16);
        let keys: Vec<u32> = (0..1000)
            .map(|_| {
                t.reg_mr(PD, mem.clone(), IOVA, Access::empty())
                    .expect("reg")
                    .lkey
            })
            .collect();
        let unique: HashSet<u32> = keys.iter().copied().collect();
        assert_eq!(unique.len(), 1000);
        assert_eq!(t.num_mrs(), 1000);
        assert!(keys.iter().all(|&k| key_index(k) != 0));
        // Not sequential: neither in key nor in index order.
        let steps = keys
            .windows(2)
            .filter(|w| w[1].wrapping_sub(w[0]) <= 256)
            .count();
        assert!(steps < 5, "{steps} near-sequential steps");
        let increasing = keys.windows(2).filter(|w| w[1] > w[0]).count();
        assert!(
            (300..700).contains(&increasing),
            "{increasing} increasing steps"
        );
        let variants: HashSet<u8> = keys.iter().map(|&k| key_variant(k)).collect();
        assert!(variants.len() > 200);

        // The same seed replays the same keys; another seed does not.
        let mut again = MemTable::new(1);
        let mut other = MemTable::new(2);
        for &k in &keys[..10] {
            assert_eq!(
                again
                    .reg_mr(PD, mem.clone(), 0, Access::empty())
                    .expect("reg")
                    .lkey,
                k
            );
        }
        let first = other.reg_mr(PD, mem, 0, Access::empty()).expect("reg").lkey;
        assert_ne!(first, keys[0]);
    }

    #[test]
    fn reregistration_rotates_the_key() {
        let mut t = MemTable::new(3);
        let mem = vec_mem(64);
        let mut seen = HashSet::new();
        for _ in 0..200 {
            let k = t
                .reg_mr(PD, mem.clone(), IOVA, Access::LOCAL_WRITE)
                .expect("reg")
                .lkey;
            assert!(seen.insert(k), "key {k:#x} reissued");
            t.dereg_mr(k).expect("dereg");
            assert_eq!(
                t.local(PD, k, IOVA, 1, Access::empty()).unwrap_err(),
                KeyError::UnknownKey
            );
            assert_eq!(t.query_mr(k), None);
        }
        assert_eq!(t.num_mrs(), 0);
    }

    #[test]
    fn retired_keys_are_not_reissued_even_in_the_same_slot() {
        let mut t = MemTable::new(4);
        let mem = vec_mem(8);
        let k = t
            .reg_mr(PD, mem.clone(), 0, Access::empty())
            .expect("reg")
            .lkey;
        t.dereg_mr(k).expect("dereg");
        assert!(t.retired_set.contains(&k));
        // Force the slot: every other key part of it is fine, that one is not.
        for _ in 0..1000 {
            let key = t.fresh_variant(key_index(k)).expect("slot is free");
            assert_ne!(key, k);
        }
    }

    #[test]
    fn a_nearly_full_table_still_finds_the_free_slots() {
        // 16 slots instead of 2^24 - 1, so that the table fills quickly.
        let mut t = MemTable::new(5);
        t.max_index = 16;
        let mem = vec_mem(8);
        let mut keys: Vec<u32> = (0..16)
            .map(|_| {
                t.reg_mr(PD, mem.clone(), 0, Access::empty())
                    .expect("reg")
                    .lkey
            })
            .collect();
        let indices: HashSet<u32> = keys.iter().map(|&k| key_index(k)).collect();
        assert_eq!(indices, (1..=16).collect());
        let err = t.reg_mr(PD, mem.clone(), 0, Access::empty()).unwrap_err();
        assert_eq!(err, MemError::Exhausted);
        assert_eq!(err.to_string(), "key: all key indices are in use");
        assert_eq!(t.alloc_mw(PD, MwType::Type1), Err(MemError::Exhausted));
        // Free one: it is found, with a new key part.
        let freed = keys.swap_remove(5);
        t.dereg_mr(freed).expect("dereg");
        let k = t.reg_mr(PD, mem, 0, Access::empty()).expect("reg").lkey;
        assert_eq!(key_index(k), key_index(freed));
        assert_ne!(k, freed);
    }

    #[test]
    fn registration_rules() {
        let mut t = MemTable::new(6);
        let mem = vec_mem(16);
        for (access, msg) in [
            (
                Access::REMOTE_WRITE,
                "access: REMOTE_WRITE requires LOCAL_WRITE",
            ),
            (
                Access::REMOTE_ATOMIC,
                "access: REMOTE_ATOMIC requires LOCAL_WRITE",
            ),
            (
                Access::REMOTE_READ | Access::REMOTE_ATOMIC,
                "access: REMOTE_ATOMIC requires LOCAL_WRITE",
            ),
            (
                Access::from_bits_retain(1 << 20),
                "access: unknown flag bits",
            ),
        ] {
            let err = t.reg_mr(PD, mem.clone(), 0, access).unwrap_err();
            assert!(matches!(err, MemError::Access { arg: "access", .. }));
            assert_eq!(err.to_string(), msg);
        }
        assert_eq!(t.num_mrs(), 0);
        assert!(t.reg_mr(PD, mem.clone(), 0, Access::REMOTE_READ).is_ok());
        assert!(t.reg_mr(PD, mem.clone(), 0, RW).is_ok());

        // Zero length is fine.
        let k = t.reg_mr(PD, vec_mem(0), IOVA, RW).expect("reg").lkey;
        let info = t.query_mr(k).expect("query");
        assert_eq!(
            (info.length, info.iova, info.pd, info.access),
            (0, IOVA, PD, RW)
        );

        // iova + length must fit; not for zero-based regions.
        let err = t
            .reg_mr(PD, mem.clone(), u64::MAX - 8, Access::empty())
            .unwrap_err();
        assert_eq!(err, MemError::IovaOverflow);
        assert_eq!(err.to_string(), "iova: iova + length overflows 64 bits");
        assert!(t
            .reg_mr(PD, mem.clone(), u64::MAX - 16, Access::empty())
            .is_ok());
        assert!(t
            .reg_mr(PD, mem.clone(), u64::MAX, Access::ZERO_BASED)
            .is_ok());

        // max_mr_size.
        let caps = DeviceCaps {
            max_mr_size: 8,
            ..DeviceCaps::default()
        };
        let mut small = MemTable::with_caps(0, &caps);
        let err = small.reg_mr(PD, mem, 0, Access::empty()).unwrap_err();
        assert_eq!(err, MemError::TooLarge { length: 16, max: 8 });
        assert_eq!(err.to_string(), "length: 16 bytes exceeds max_mr_size (8)");
        assert!(small.reg_mr(PD, vec_mem(8), 0, Access::empty()).is_ok());
    }

    #[test]
    fn dereg_and_query_errors() {
        let mut t = MemTable::new(8);
        let (_, k) = reg(&mut t, 16, Access::empty());
        let mw = t.alloc_mw(PD, MwType::Type1).expect("alloc");
        let err = t.dereg_mr(k ^ 0xff).unwrap_err();
        assert_eq!(
            err,
            MemError::Key {
                arg: "lkey",
                err: KeyError::StaleKey
            }
        );
        assert_eq!(
            err.to_string(),
            "lkey: stale key (its slot now holds another key)"
        );
        let err = t.dereg_mr(mw).unwrap_err();
        assert_eq!(
            err,
            MemError::Key {
                arg: "lkey",
                err: KeyError::WrongKind
            }
        );
        assert_eq!(
            t.dealloc_mw(k).unwrap_err(),
            MemError::Key {
                arg: "rkey",
                err: KeyError::WrongKind
            }
        );
        assert_eq!(t.query_mr(mw), None);
        assert_eq!(t.query_mw(k), None);
        assert_eq!(t.query_mr(k ^ 1), None);
        t.dereg_mr(k).expect("dereg");
        assert_eq!(t.dereg_mr(k).unwrap_err().to_string(), "lkey: unknown key");
        t.dealloc_mw(mw).expect("dealloc");
        assert_eq!((t.num_mrs(), t.num_mws()), (0, 0));
    }

    #[test]
    fn local_checks_every_error() {
        let mut t = MemTable::new(9);
        let (mem, ro) = reg(&mut t, 64, Access::empty());
        let (_, rw) = reg(&mut t, 64, Access::LOCAL_WRITE);
        let mw = t.alloc_mw(PD, MwType::Type1).expect("alloc");

        let slice = t.local(PD, ro, IOVA + 8, 4, Access::empty()).expect("read");
        let mut buf = [0; 4];
        slice.read(0, &mut buf).expect("read");
        assert_eq!(buf, [8, 9, 10, 11]);
        assert_eq!(slice.offset(), 8);
        assert!(Arc::ptr_eq(slice.memory(), &(mem as Arc<dyn RegionMemory>)));

        let check = |key, pd, addr, len, need| t.local(pd, key, addr, len, need).unwrap_err();
        let unknown = make_key(key_index(ro) ^ 0x80_0000, 0);
        assert_eq!(
            check(unknown, PD, IOVA, 1, Access::empty()),
            KeyError::UnknownKey
        );
        assert_eq!(
            check(ro ^ 0x01, PD, IOVA, 1, Access::empty()),
            KeyError::StaleKey
        );
        assert_eq!(check(mw, PD, IOVA, 1, Access::empty()), KeyError::WrongKind);
        assert_eq!(
            check(ro, OTHER_PD, IOVA, 1, Access::empty()),
            KeyError::WrongPd
        );
        let err = check(ro, PD, IOVA, 1, Access::LOCAL_WRITE);
        assert_eq!(
            err,
            KeyError::AccessDenied {
                need: Access::LOCAL_WRITE,
                have: Access::empty()
            }
        );
        assert_eq!(
            err.to_string(),
            "access denied: needs LOCAL_WRITE, key grants none"
        );
        assert!(t.local(PD, rw, IOVA, 1, Access::LOCAL_WRITE).is_ok());
        assert_eq!(
            check(ro, PD, IOVA - 1, 1, Access::empty()),
            KeyError::OutOfRange
        );
        assert_eq!(
            check(ro, PD, IOVA + 64, 1, Access::empty()),
            KeyError::OutOfRange
        );

        // A deregistered region's slices are revoked.
        let slice = t
            .local(PD, rw, IOVA, 64, Access::LOCAL_WRITE)
            .expect("slice");
        t.dereg_mr(rw).expect("dereg");
        assert!(!slice.is_live());
        assert_eq!(slice.write(0, &[1]), Err(KeyError::Revoked));
        assert_eq!(slice.read(0, &mut [0]), Err(KeyError::Revoked));
        assert_eq!(slice.sub(0, 1).unwrap_err(), KeyError::Revoked);
        assert_eq!(slice.atomic(AtomicOp::FetchAdd(1)), Err(KeyError::Revoked));
    }

    #[test]
    fn invalid_region_state_is_refused() {
        // Nothing in the verbs API makes a plain region invalid while it is
        // registered; the state check still guards the lookup path.
        let mut t = MemTable::new(10);
        let (_, k) = reg(&mut t, 64, RW | Access::MW_BIND);
        if let Some(Entry::Mr(mr)) = t.entries.get(&key_index(k)) {
            mr.live.store(false, Ordering::Release);
        }
        assert_eq!(
            t.local(PD, k, IOVA, 1, Access::empty()).unwrap_err(),
            KeyError::Invalid
        );
        assert_eq!(
            t.remote(PD, QPN, k, IOVA, 1, Access::REMOTE_READ)
                .unwrap_err(),
            KeyError::Invalid
        );
        let mw = t.alloc_mw(PD, MwType::Type1).expect("alloc");
        let err = t
            .bind_mw(PD, QPN, &bind(mw, k, IOVA, 8, Access::REMOTE_READ))
            .unwrap_err();
        assert_eq!(
            err,
            MemError::Key {
                arg: "mr_lkey",
                err: KeyError::Invalid
            }
        );
    }

    #[test]
    fn boundaries() {
        let mut t = MemTable::new(11);
        let (_, k) = reg(&mut t, 64, RW);
        let local = |addr, len| t.local(PD, k, addr, len, Access::empty()).map(|s| s.len());
        // The whole region, and up to exactly its end.
        assert_eq!(local(IOVA, 64), Ok(64));
        assert_eq!(local(IOVA + 60, 4), Ok(4));
        assert_eq!(local(IOVA + 63, 1), Ok(1));
        // One past.
        assert_eq!(local(IOVA + 60, 5), Err(KeyError::OutOfRange));
        assert_eq!(local(IOVA, 65), Err(KeyError::OutOfRange));
        assert_eq!(local(IOVA + 64, 1), Err(KeyError::OutOfRange));
        // Overflow of addr + len.
        assert_eq!(local(u64::MAX, 2), Err(KeyError::OutOfRange));
        assert_eq!(local(IOVA + 1, u64::MAX), Err(KeyError::OutOfRange));
        assert_eq!(local(0, u64::MAX), Err(KeyError::OutOfRange));
        let remote = |va, len| {
            t.remote(PD, QPN, k, va, len, Access::REMOTE_WRITE)
                .map(|s| s.len())
        };
        assert_eq!(remote(IOVA + 56, 8), Ok(8));
        assert_eq!(remote(IOVA + 57, 8), Err(KeyError::OutOfRange));
        assert_eq!(remote(u64::MAX - 3, 8), Err(KeyError::OutOfRange));
        // Zero length: no check at all, even of a garbage key, as IBTA says.
        assert_eq!(local(IOVA + 64, 0), Ok(0));
        assert_eq!(local(u64::MAX, 0), Ok(0));
        let garbage = t.remote(
            OTHER_PD,
            QPN,
            0xdead_beef,
            u64::MAX,
            0,
            Access::REMOTE_WRITE,
        );
        assert!(garbage.expect("zero length").is_empty());
        let garbage = t.local(OTHER_PD, 0, 0, 0, Access::LOCAL_WRITE);
        assert!(garbage.expect("zero length").is_empty());
    }

    #[test]
    fn zero_based_regions_start_at_zero() {
        let mut t = MemTable::new(12);
        let mem = vec_mem(32);
        let k = t
            .reg_mr(PD, mem, IOVA, Access::ZERO_BASED | Access::REMOTE_READ)
            .expect("reg");
        let slice = t
            .remote(PD, QPN, k.rkey, 16, 16, Access::REMOTE_READ)
            .expect("zb");
        assert_eq!(slice.offset(), 16);
        assert_eq!(
            t.remote(PD, QPN, k.rkey, IOVA, 1, Access::REMOTE_READ)
                .unwrap_err(),
            KeyError::OutOfRange
        );
        assert_eq!(
            t.remote(PD, QPN, k.rkey, 17, 16, Access::REMOTE_READ)
                .unwrap_err(),
            KeyError::OutOfRange
        );
    }

    #[test]
    fn remote_checks_on_regions() {
        let mut t = MemTable::new(13);
        let (mem, k) = reg(&mut t, 64, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
        let slice = t
            .remote(PD, QPN, k, IOVA + 8, 8, Access::REMOTE_WRITE)
            .expect("write");
        slice.write(0, &[0xaa; 8]).expect("write");
        assert_eq!(&mem.snapshot()[8..16], &[0xaa; 8]);
        let err = t
            .remote(PD, QPN, k, IOVA, 8, Access::REMOTE_READ)
            .unwrap_err();
        assert_eq!(
            err,
            KeyError::AccessDenied {
                need: Access::REMOTE_READ,
                have: Access::LOCAL_WRITE | Access::REMOTE_WRITE
            }
        );
        assert_eq!(
            err.to_string(),
            "access denied: needs REMOTE_READ, key grants LOCAL_WRITE|REMOTE_WRITE"
        );
        let err = t
            .remote(PD, QPN, k, IOVA, 8, Access::REMOTE_ATOMIC)
            .unwrap_err();
        assert!(matches!(err, KeyError::AccessDenied { .. }));
        assert_eq!(
            t.remote(OTHER_PD, QPN, k, IOVA, 8, Access::REMOTE_WRITE)
                .unwrap_err(),
            KeyError::WrongPd
        );
        assert_eq!(
            t.remote(PD, QPN, k ^ 0x10, IOVA, 8, Access::REMOTE_WRITE)
                .unwrap_err(),
            KeyError::StaleKey
        );
        assert_eq!(
            t.remote(PD, QPN, 0x42, IOVA, 8, Access::REMOTE_WRITE)
                .unwrap_err(),
            KeyError::UnknownKey
        );
        // Any QP of the PD may use a region's rkey.
        assert!(t
            .remote(PD, OTHER_QPN, k, IOVA, 8, Access::REMOTE_WRITE)
            .is_ok());
    }

    #[test]
    fn window_bind_use_invalidate_rebind() {
        let access = Access::REMOTE_READ | Access::REMOTE_WRITE;
        let (mut t, mem, lkey, rkey) = with_window(MwType::Type2, access);
        assert_eq!(t.query_mr(lkey).expect("mr").bound_windows, 1);
        let info = t.query_mw(rkey).expect("mw");
        assert_eq!(info.mw_type, MwType::Type2);
        assert_eq!(
            info.binding,
            Some(MwBinding {
                mr_lkey: lkey,
                addr: IOVA + 64,
                length: 64,
                access,
                qpn: Some(QPN)
            })
        );

        // Use it: the window's range maps onto the region.
        let slice = t
            .remote(PD, QPN, rkey, IOVA + 64, 64, Access::REMOTE_WRITE)
            .expect("use");
        assert_eq!(slice.offset(), 64);
        slice.write(0, &[0xee; 64]).expect("write");
        let bytes = mem.snapshot();
        assert!(bytes[64..128].iter().all(|&b| b == 0xee));
        assert_eq!(bytes[63], 63);
        assert_eq!(bytes[128], 128);

        // Outside the window but inside the region: refused.
        assert_eq!(
            remote(&t, rkey, IOVA + 63, 1, Access::REMOTE_READ).unwrap_err(),
            KeyError::OutOfRange
        );
        assert_eq!(
            remote(&t, rkey, IOVA + 64, 65, Access::REMOTE_READ).unwrap_err(),
            KeyError::OutOfRange
        );
        assert_eq!(
            remote(&t, rkey, u64::MAX, 2, Access::REMOTE_READ).unwrap_err(),
            KeyError::OutOfRange
        );
        assert_eq!(
            remote(&t, rkey, IOVA + 64, 8, Access::REMOTE_ATOMIC).unwrap_err(),
            KeyError::AccessDenied {
                need: Access::REMOTE_ATOMIC,
                have: access
            }
        );
        // The window's key is an rkey only.
        assert_eq!(
            t.local(PD, rkey, IOVA + 64, 1, Access::empty())
                .unwrap_err(),
            KeyError::WrongKind
        );

        // A bound type 2 window cannot be bound again.
        let again = bind(rkey, lkey, IOVA, 8, access);
        assert_eq!(
            t.bind_mw(PD, QPN, &again).unwrap_err(),
            MemError::AlreadyBound
        );

        // Invalidate: the window is unbound, in-flight slices are revoked,
        // the rkey names the window but gives no access.
        t.invalidate(PD, None, rkey).expect("invalidate");
        assert_eq!(t.query_mr(lkey).expect("mr").bound_windows, 0);
        assert_eq!(t.query_mw(rkey).expect("mw").binding, None);
        assert_eq!(slice.write(0, &[1]), Err(KeyError::Revoked));
        assert_eq!(
            remote(&t, rkey, IOVA + 64, 1, Access::REMOTE_READ).unwrap_err(),
            KeyError::Invalid
        );
        // Invalidating an unbound window is harmless.
        t.invalidate(PD, None, rkey).expect("again");

        // Rebind with the next key (ibv_inc_rkey): the old rkey is stale.
        let rebind = MwBind {
            mw_rkey: rkey,
            new_rkey: make_key(key_index(rkey), key_variant(rkey).wrapping_add(1)),
            mr_lkey: lkey,
            addr: IOVA,
            length: 8,
            access: Access::REMOTE_READ,
        };
        let new_rkey = t.bind_mw(PD, QPN, &rebind).expect("rebind");
        assert_eq!(new_rkey, rebind.new_rkey);
        assert_eq!(key_index(new_rkey), key_index(rkey));
        assert_eq!(
            remote(&t, rkey, IOVA, 8, Access::REMOTE_READ).unwrap_err(),
            KeyError::StaleKey
        );
        assert!(remote(&t, new_rkey, IOVA, 8, Access::REMOTE_READ).is_ok());
        assert_eq!(t.query_mw(rkey), None);
        assert_eq!(t.query_mw(new_rkey).expect("mw").rkey, new_rkey);
        assert_eq!(t.query_mr(lkey).expect("mr").bound_windows, 1);
        // The old rkey can no longer be invalidated or bound.
        assert_eq!(t.invalidate(PD, None, rkey), Err(KeyError::StaleKey));

        // Only the low 8 bits of new_rkey count.
        t.invalidate(PD, None, new_rkey).expect("invalidate");
        let odd = MwBind {
            mw_rkey: new_rkey,
            new_rkey: 0xffff_ff00 | 0x5a,
            ..rebind
        };
        let k = t.bind_mw(PD, QPN, &odd).expect("rebind");
        assert_eq!(k, make_key(key_index(rkey), 0x5a));
    }

    #[test]
    fn type2_windows_serve_only_their_qp() {
        let (mut t, _, _, rkey) = with_window(MwType::Type2, Access::REMOTE_READ);
        assert!(t
            .remote(PD, QPN, rkey, IOVA + 64, 8, Access::REMOTE_READ)
            .is_ok());
        assert_eq!(
            t.remote(PD, OTHER_QPN, rkey, IOVA + 64, 8, Access::REMOTE_READ)
                .unwrap_err(),
            KeyError::WrongQp
        );
        // A SEND with invalidate from another QP is refused; from the bound
        // QP it works.
        assert_eq!(
            t.invalidate(PD, Some(OTHER_QPN), rkey),
            Err(KeyError::WrongQp)
        );
        assert_eq!(
            t.invalidate(OTHER_PD, Some(QPN), rkey),
            Err(KeyError::WrongPd)
        );
        t.invalidate(PD, Some(QPN), rkey)
            .expect("send with invalidate");
        assert_eq!(
            t.remote(PD, QPN, rkey, IOVA + 64, 8, Access::REMOTE_READ)
                .unwrap_err(),
            KeyError::Invalid
        );
    }

    #[test]
    fn type1_windows_serve_any_qp_and_rebind_freely() {
        let (mut t, _, lkey, rkey) = with_window(MwType::Type1, Access::REMOTE_READ);
        assert_eq!(
            t.query_mw(rkey).expect("mw").binding.expect("bound").qpn,
            None
        );
        assert!(t
            .remote(PD, QPN, rkey, IOVA + 64, 8, Access::REMOTE_READ)
            .is_ok());
        let slice = t
            .remote(PD, OTHER_QPN, rkey, IOVA + 64, 8, Access::REMOTE_READ)
            .expect("ok");
        // Not invalidatable.
        assert_eq!(
            t.invalidate(PD, None, rkey),
            Err(KeyError::NotInvalidatable)
        );
        // Rebinding moves it, with a random new key; the old binding's
        // slices and rkey stop working.
        let mut keys = HashSet::from([rkey]);
        let mut current = rkey;
        for i in 0..20 {
            let b = bind(current, lkey, IOVA + i, 16, Access::REMOTE_READ);
            let next = t.bind_mw(PD, OTHER_QPN, &b).expect("rebind");
            assert_eq!(key_index(next), key_index(rkey));
            assert_ne!(next, current);
            keys.insert(next);
            assert_eq!(
                t.remote(PD, QPN, current, IOVA + i, 1, Access::REMOTE_READ)
                    .unwrap_err(),
                KeyError::StaleKey
            );
            current = next;
        }
        assert!(keys.len() > 10, "type 1 keys should not just count up");
        assert_eq!(slice.read(0, &mut [0; 8]), Err(KeyError::Revoked));
        assert_eq!(t.query_mr(lkey).expect("mr").bound_windows, 1);
        // Length 0 unbinds (and still changes the key).
        let next = t
            .bind_mw(PD, QPN, &bind(current, 0, 0, 0, Access::empty()))
            .expect("unbind");
        assert_ne!(next, current);
        assert_eq!(t.query_mr(lkey).expect("mr").bound_windows, 0);
        assert_eq!(
            t.remote(PD, QPN, next, IOVA, 1, Access::REMOTE_READ)
                .unwrap_err(),
            KeyError::Invalid
        );
        // Zero-based type 1 windows do not exist (o10-36.2.2).
        let err = t
            .bind_mw(
                PD,
                QPN,
                &bind(next, lkey, 0, 8, Access::REMOTE_READ | Access::ZERO_BASED),
            )
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "bind.access: a type 1 window cannot be zero-based"
        );
    }

    #[test]
    fn zero_based_type2_window() {
        let access = Access::REMOTE_READ | Access::ZERO_BASED;
        let (t, _, _, rkey) = with_window(MwType::Type2, access);
        let slice = t
            .remote(PD, QPN, rkey, 0, 64, Access::REMOTE_READ)
            .expect("zb");
        assert_eq!(slice.offset(), 64);
        let slice = t
            .remote(PD, QPN, rkey, 60, 4, Access::REMOTE_READ)
            .expect("zb end");
        assert_eq!(slice.offset(), 124);
        assert_eq!(
            t.remote(PD, QPN, rkey, IOVA + 64, 1, Access::REMOTE_READ)
                .unwrap_err(),
            KeyError::OutOfRange
        );
        assert_eq!(
            t.remote(PD, QPN, rkey, 61, 4, Access::REMOTE_READ)
                .unwrap_err(),
            KeyError::OutOfRange
        );
    }

    #[test]
    fn bind_errors() {
        let mut t = MemTable::new(14);
        let (_, lkey) = reg(&mut t, 256, Access::LOCAL_WRITE | Access::MW_BIND);
        let (_, ro_lkey) = reg(&mut t, 256, Access::MW_BIND);
        let (_, plain) = reg(&mut t, 256, RW);
        let other_pd = t
            .reg_mr(OTHER_PD, vec_mem(256), IOVA, RW | Access::MW_BIND)
            .expect("reg");
        let mw = t.alloc_mw(PD, MwType::Type2).expect("alloc");
        let mw1 = t.alloc_mw(PD, MwType::Type1).expect("alloc");
        let r = Access::REMOTE_READ;
        let fail = |t: &mut MemTable, pd, b: MwBind| t.bind_mw(pd, QPN, &b).unwrap_err();

        let err = fail(&mut t, PD, bind(mw ^ 1, lkey, IOVA, 8, r));
        assert_eq!(
            err,
            MemError::Key {
                arg: "mw_rkey",
                err: KeyError::StaleKey
            }
        );
        let err = fail(&mut t, PD, bind(lkey, lkey, IOVA, 8, r));
        assert_eq!(
            err,
            MemError::Key {
                arg: "mw_rkey",
                err: KeyError::WrongKind
            }
        );
        let err = fail(&mut t, OTHER_PD, bind(mw, other_pd.lkey, IOVA, 8, r));
        assert_eq!(
            err,
            MemError::Key {
                arg: "mw_rkey",
                err: KeyError::WrongPd
            }
        );
        assert_eq!(
            err.to_string(),
            "mw_rkey: key belongs to another protection domain"
        );
        let err = fail(&mut t, PD, bind(mw, other_pd.lkey, IOVA, 8, r));
        assert_eq!(
            err,
            MemError::Key {
                arg: "mr_lkey",
                err: KeyError::WrongPd
            }
        );
        let err = fail(&mut t, PD, bind(mw, mw1, IOVA, 8, r));
        assert_eq!(
            err,
            MemError::Key {
                arg: "mr_lkey",
                err: KeyError::WrongKind
            }
        );
        let err = fail(&mut t, PD, bind(mw, 0x77, IOVA, 8, r));
        assert_eq!(
            err,
            MemError::Key {
                arg: "mr_lkey",
                err: KeyError::UnknownKey
            }
        );
        let err = fail(&mut t, PD, bind(mw, plain, IOVA, 8, r));
        assert_eq!(
            err.to_string(),
            "mr_lkey: the region was not registered with MW_BIND"
        );
        let err = fail(&mut t, PD, bind(mw, ro_lkey, IOVA, 8, Access::REMOTE_WRITE));
        assert_eq!(
            err.to_string(),
            "bind.access: REMOTE_WRITE or REMOTE_ATOMIC needs LOCAL_WRITE on the region"
        );
        let err = fail(
            &mut t,
            PD,
            bind(mw, ro_lkey, IOVA, 8, Access::REMOTE_ATOMIC),
        );
        assert!(matches!(
            err,
            MemError::Access {
                arg: "bind.access",
                ..
            }
        ));
        assert!(t.bind_mw(PD, QPN, &bind(mw1, ro_lkey, IOVA, 8, r)).is_ok());
        // Local rights in a bind mean nothing for a window and are ignored,
        // as the kernel's rxe does (a type 1 window, so that `mw` stays free).
        let mut k1 = mw1.wrapping_add(1); // the key the bind above gave mw1
        for extra in [Access::LOCAL_WRITE, Access::MW_BIND | r] {
            let k = t
                .bind_mw(PD, QPN, &bind(k1, lkey, IOVA, 8, extra))
                .expect("bind");
            k1 = k;
            let w = t.window(k).expect("window");
            let b = w.binding.as_ref().expect("bound");
            assert_eq!(b.access, extra & r, "{extra:?}");
        }
        assert_eq!(
            fail(&mut t, PD, bind(mw, lkey, IOVA, 0, r)),
            MemError::ZeroLength
        );
        // Range: inside the region, exact end included.
        assert_eq!(
            fail(&mut t, PD, bind(mw, lkey, IOVA - 1, 8, r)),
            MemError::OutOfRegion
        );
        assert_eq!(
            fail(&mut t, PD, bind(mw, lkey, IOVA + 249, 8, r)),
            MemError::OutOfRegion
        );
        assert_eq!(
            fail(&mut t, PD, bind(mw, lkey, IOVA, u64::MAX, r)),
            MemError::OutOfRegion
        );
        let rkey = t
            .bind_mw(PD, QPN, &bind(mw, lkey, IOVA + 248, 8, r))
            .expect("exact end");
        assert_eq!(
            fail(&mut t, PD, bind(rkey, lkey, IOVA, 8, r)).to_string(),
            "mw_rkey: type 2 memory window is already bound; invalidate it first"
        );
        // Invalidating regions is not supported.
        assert_eq!(
            t.invalidate(PD, None, lkey),
            Err(KeyError::NotInvalidatable)
        );
        assert_eq!(t.invalidate(OTHER_PD, None, lkey), Err(KeyError::WrongPd));
        assert_eq!(t.invalidate(PD, None, 0x10), Err(KeyError::UnknownKey));
    }

    #[test]
    fn windows_pin_their_region_and_dealloc_always_works() {
        let mut t = MemTable::new(15);
        let (_, lkey) = reg(&mut t, 256, RW | Access::MW_BIND);
        let a = t.alloc_mw(PD, MwType::Type1).expect("alloc");
        let b = t.alloc_mw(PD, MwType::Type2).expect("alloc");
        assert_eq!(t.num_mws(), 2);
        let a = t
            .bind_mw(PD, QPN, &bind(a, lkey, IOVA, 8, Access::REMOTE_READ))
            .expect("a");
        let b = t
            .bind_mw(PD, QPN, &bind(b, lkey, IOVA, 8, Access::REMOTE_WRITE))
            .expect("b");
        let err = t.dereg_mr(lkey).unwrap_err();
        assert_eq!(err, MemError::InUse { windows: 2 });
        assert_eq!(err.to_string(), "mr: 2 memory windows still bound");
        // Rebinding a type 1 window to the same region keeps the count.
        let a = t
            .bind_mw(PD, QPN, &bind(a, lkey, IOVA + 8, 8, Access::REMOTE_READ))
            .expect("a");
        assert_eq!(t.query_mr(lkey).expect("mr").bound_windows, 2);
        let slice = t
            .remote(PD, QPN, b, IOVA, 8, Access::REMOTE_WRITE)
            .expect("b");
        t.dealloc_mw(b).expect("dealloc bound window");
        assert_eq!(slice.write(0, &[0; 8]), Err(KeyError::Revoked));
        assert_eq!(
            t.remote(PD, QPN, b, IOVA, 8, Access::REMOTE_WRITE)
                .unwrap_err(),
            KeyError::UnknownKey
        );
        assert_eq!(
            t.dereg_mr(lkey).unwrap_err(),
            MemError::InUse { windows: 1 }
        );
        t.dealloc_mw(a).expect("dealloc");
        assert_eq!(
            t.dealloc_mw(a).unwrap_err().to_string(),
            "rkey: unknown key"
        );
        t.dereg_mr(lkey).expect("dereg");
        assert_eq!((t.num_mrs(), t.num_mws()), (0, 0));
        assert!(t.entries.is_empty());
    }

    #[test]
    fn windows_check_their_pd_and_state() {
        let (mut t, _, lkey, rkey) = with_window(MwType::Type1, Access::REMOTE_READ);
        assert_eq!(
            t.remote(OTHER_PD, QPN, rkey, IOVA + 64, 8, Access::REMOTE_READ)
                .unwrap_err(),
            KeyError::WrongPd
        );
        // A fresh window is unbound.
        let fresh = t.alloc_mw(PD, MwType::Type2).expect("alloc");
        assert_eq!(t.query_mw(fresh).expect("mw").binding, None);
        assert_eq!(
            t.remote(PD, QPN, fresh, IOVA, 8, Access::REMOTE_READ)
                .unwrap_err(),
            KeyError::Invalid
        );
        // A window's rights replace the region's: the region has no remote
        // rights at all.
        assert_eq!(
            t.query_mr(lkey).expect("mr").access,
            Access::LOCAL_WRITE | Access::MW_BIND
        );
        assert!(matches!(
            t.remote(PD, QPN, lkey, IOVA, 8, Access::REMOTE_READ)
                .unwrap_err(),
            KeyError::AccessDenied { .. }
        ));
    }

    #[test]
    fn window_limit() {
        let caps = DeviceCaps {
            max_mw: 2,
            ..DeviceCaps::default()
        };
        let mut t = MemTable::with_caps(16, &caps);
        let a = t.alloc_mw(PD, MwType::Type1).expect("1");
        t.alloc_mw(PD, MwType::Type2).expect("2");
        let err = t.alloc_mw(PD, MwType::Type1).unwrap_err();
        assert_eq!(err, MemError::TooManyWindows { max: 2 });
        assert_eq!(
            err.to_string(),
            "mw: 2 memory windows already allocated (max_mw)"
        );
        t.dealloc_mw(a).expect("dealloc");
        assert!(t.alloc_mw(PD, MwType::Type1).is_ok());
    }

    #[test]
    fn slices_never_leave_their_bounds() {
        let mem = vec_mem(32);
        let dynmem: Arc<dyn RegionMemory> = mem.clone();
        assert!(MemSlice::new(dynmem.clone(), 0, 32).is_some());
        assert!(MemSlice::new(dynmem.clone(), 32, 0).is_some());
        assert!(MemSlice::new(dynmem.clone(), 16, 17).is_none());
        assert!(MemSlice::new(dynmem.clone(), usize::MAX, 2).is_none());

        let slice = MemSlice::new(dynmem, 8, 16).expect("slice");
        let before = mem.snapshot();
        assert_eq!(slice.write(1, &[0xff; 16]), Err(KeyError::OutOfRange));
        assert_eq!(slice.write(16, &[0xff]), Err(KeyError::OutOfRange));
        assert_eq!(
            slice.write(usize::MAX, &[0xff; 2]),
            Err(KeyError::OutOfRange)
        );
        assert_eq!(slice.read(15, &mut [0; 2]), Err(KeyError::OutOfRange));
        assert_eq!(
            slice.read(usize::MAX, &mut [0; 1]),
            Err(KeyError::OutOfRange)
        );
        assert_eq!(mem.snapshot(), before);
        // Empty accesses at the end are fine.
        assert_eq!(slice.write(16, &[]), Ok(()));
        assert_eq!(slice.read(16, &mut []), Ok(()));

        slice.write(15, &[0xff]).expect("last byte");
        let mut buf = [0; 16];
        slice.read(0, &mut buf).expect("read all");
        assert_eq!(buf[0], 8);
        assert_eq!(buf[15], 0xff);
        assert_eq!(mem.snapshot()[22..25], [22, 0xff, 24]);

        // Sub-slices are bounded by their parent.
        let sub = slice.sub(4, 8).expect("sub");
        assert_eq!((sub.offset(), sub.len()), (12, 8));
        assert_eq!(sub.sub(4, 5).unwrap_err(), KeyError::OutOfRange);
        assert_eq!(slice.sub(9, 8).unwrap_err(), KeyError::OutOfRange);
        assert_eq!(sub.write(0, &[0; 9]), Err(KeyError::OutOfRange));

        // Atomics: exactly 8 bytes, aligned in memory.
        assert_eq!(
            slice.atomic(AtomicOp::FetchAdd(1)),
            Err(KeyError::OutOfRange)
        );
        assert_eq!(sub.atomic(AtomicOp::FetchAdd(1)), Err(KeyError::Misaligned));
        assert_eq!(
            sub.sub(4, 4)
                .expect("4 bytes")
                .atomic(AtomicOp::FetchAdd(1)),
            Err(KeyError::OutOfRange)
        );
        let aligned = slice.sub(0, 8).expect("aligned");
        let old = aligned.atomic(AtomicOp::FetchAdd(1)).expect("atomic");
        assert_eq!(old, u64::from_ne_bytes([8, 9, 10, 11, 12, 13, 14, 15]));
        let misaligned = slice.sub(1, 8).expect("misaligned");
        assert_eq!(
            misaligned.atomic(AtomicOp::FetchAdd(1)),
            Err(KeyError::Misaligned)
        );

        // The empty slice.
        let empty = MemSlice::empty();
        assert!(empty.is_empty() && empty.is_live());
        assert_eq!(empty.read(0, &mut []), Ok(()));
        assert_eq!(empty.write(0, &[1]), Err(KeyError::OutOfRange));
        assert_eq!(
            empty.atomic(AtomicOp::FetchAdd(1)),
            Err(KeyError::OutOfRange)
        );
    }

    /// A memory whose `len()` lies (claims more than it has): slices must
    /// still fail cleanly rather than touch anything.
    #[derive(Debug)]
    struct LyingMemory(VecMemory);

    impl RegionMemory for LyingMemory {
        fn len(&self) -> usize {
            self.0.len() * 2
        }
        fn read(&self, offset: usize, dst: &mut [u8]) -> bool {
            self.0.read(offset, dst)
        }
        fn write(&self, offset: usize, src: &[u8]) -> bool {
            self.0.write(offset, src)
        }
        fn atomic(&self, offset: usize, op: AtomicOp) -> Option<u64> {
            self.0.atomic(offset, op)
        }
    }

    #[test]
    fn memory_refusals_become_errors() {
        let mut t = MemTable::new(17);
        let mem = Arc::new(LyingMemory(VecMemory::new(16)));
        let k = t.reg_mr(PD, mem.clone(), 0, RW).expect("reg");
        let slice = t
            .remote(PD, QPN, k.rkey, 8, 16, Access::REMOTE_WRITE)
            .expect("checked");
        assert_eq!(slice.write(0, &[1; 16]), Err(KeyError::OutOfRange));
        assert_eq!(slice.read(0, &mut [0; 16]), Err(KeyError::OutOfRange));
        let atomic = t
            .remote(PD, QPN, k.rkey, 16, 8, Access::REMOTE_ATOMIC)
            .expect("checked");
        assert_eq!(
            atomic.atomic(AtomicOp::FetchAdd(1)),
            Err(KeyError::OutOfRange)
        );
        assert_eq!(mem.0.snapshot(), vec![0; 16]);
    }

    #[test]
    fn vec_memory_atomics() {
        let mem = VecMemory::new(24);
        mem.write(8, &7u64.to_ne_bytes());
        let cas = |compare, swap| AtomicOp::CompareSwap { compare, swap };
        // Compare-swap miss: nothing changes, the old value comes back.
        assert_eq!(mem.atomic(8, cas(6, 100)), Some(7));
        assert_eq!(&mem.snapshot()[8..16], &7u64.to_ne_bytes());
        // Hit.
        assert_eq!(mem.atomic(8, cas(7, 100)), Some(7));
        assert_eq!(&mem.snapshot()[8..16], &100u64.to_ne_bytes());
        // Fetch-add wraps.
        mem.write(16, &u64::MAX.to_ne_bytes());
        assert_eq!(mem.atomic(16, AtomicOp::FetchAdd(2)), Some(u64::MAX));
        assert_eq!(&mem.snapshot()[16..24], &1u64.to_ne_bytes());
        assert_eq!(mem.atomic(0, AtomicOp::FetchAdd(5)), Some(0));
        assert_eq!(mem.atomic(0, AtomicOp::FetchAdd(5)), Some(5));
        // Misaligned, out of range: refused, nothing touched.
        let before = mem.snapshot();
        assert_eq!(mem.atomic(4, AtomicOp::FetchAdd(1)), None);
        assert_eq!(mem.atomic(1, cas(0, 1)), None);
        assert_eq!(mem.atomic(24, AtomicOp::FetchAdd(1)), None);
        assert_eq!(mem.atomic(usize::MAX - 7, AtomicOp::FetchAdd(1)), None);
        assert_eq!(mem.snapshot(), before);
    }

    #[test]
    fn vec_memory_basics() {
        let mem = VecMemory::from_vec(vec![1, 2, 3, 4]);
        assert_eq!(RegionMemory::len(&mem), 4);
        assert!(!RegionMemory::is_empty(&mem));
        assert!(RegionMemory::is_empty(&VecMemory::new(0)));
        let mut buf = [0; 2];
        assert!(mem.read(2, &mut buf));
        assert_eq!(buf, [3, 4]);
        assert!(!mem.read(3, &mut buf));
        assert!(!mem.read(usize::MAX, &mut buf));
        assert!(!mem.write(3, &[9, 9]));
        assert!(!mem.write(usize::MAX, &[9, 9]));
        assert_eq!(mem.snapshot(), vec![1, 2, 3, 4]);
        assert!(mem.write(0, &[9, 9]));
        mem.fill(0xab);
        assert_eq!(mem.snapshot(), vec![0xab; 4]);
        assert_eq!(format!("{mem:?}"), "VecMemory { len: 4 }");
    }

    #[test]
    fn remote_atomics_through_a_region() {
        let mut t = MemTable::new(18);
        let mem = Arc::new(VecMemory::new(64));
        let k = t.reg_mr(PD, mem.clone(), 0x1000, RW).expect("reg");
        let target = t
            .remote(PD, QPN, k.rkey, 0x1008, 8, Access::REMOTE_ATOMIC)
            .expect("ok");
        let op = AtomicOp::CompareSwap {
            compare: 0,
            swap: 42,
        };
        assert_eq!(target.atomic(op), Ok(0));
        assert_eq!(target.atomic(op), Ok(42));
        assert_eq!(&mem.snapshot()[8..16], &42u64.to_ne_bytes());
        let odd = t
            .remote(PD, QPN, k.rkey, 0x1004, 8, Access::REMOTE_ATOMIC)
            .expect("checked");
        assert_eq!(odd.atomic(AtomicOp::FetchAdd(1)), Err(KeyError::Misaligned));
    }

    #[test]
    fn key_error_messages() {
        for (err, msg) in [
            (KeyError::UnknownKey, "unknown key"),
            (
                KeyError::WrongQp,
                "memory window is bound to another queue pair",
            ),
            (
                KeyError::Revoked,
                "key was deregistered or invalidated while in use",
            ),
            (
                KeyError::NotInvalidatable,
                "key cannot be invalidated (not a type 2 memory window)",
            ),
        ] {
            assert_eq!(err.to_string(), msg);
        }
        let err = KeyError::AccessDenied {
            need: Access::REMOTE_ATOMIC,
            have: Access::from_bits_retain(Access::REMOTE_READ.bits() | 1 << 30),
        };
        assert_eq!(
            err.to_string(),
            "access denied: needs REMOTE_ATOMIC, key grants REMOTE_READ|0x40000000"
        );
    }
}
