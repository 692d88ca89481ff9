//! The soft backend's protection domains, memory regions and windows:
//! the bytes a region owns (shared with the engine under a lock, see the
//! safety contract in [`crate::mr`]), and the engine calls behind each
//! handle.

use super::Inner;
use crate::attr::AddressHandle;
use crate::error::{invalid, Error};
use parking_lot::RwLock;
use rxe_core::engine::mem::MwType;
use rxe_core::engine::{AtomicOp, MrKeys, PdId, RegionMemory};
use rxe_core::types::{Access, AddressVector};
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// The bytes of a region, shared with the engine.
struct RegionBytes {
    bytes: RwLock<Box<[u8]>>,
    /// `bytes.len()`, readable without the lock: the engine asks for it
    /// whenever it resolves an SGE or a key (once per message), and taking
    /// the lock for it showed in a 64-byte SEND's profile on each side
    /// (docs/performance.md). The bytes change length only when the region
    /// is deregistered (to 0, stored after the bytes went); every accessor
    /// still checks its range against the bytes under the lock.
    len: AtomicUsize,
}

impl std::fmt::Debug for RegionBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RegionBytes({} bytes)", self.bytes.read().len())
    }
}

fn range(off: usize, len: usize, total: usize) -> Option<Range<usize>> {
    let end = off.checked_add(len)?;
    (end <= total).then_some(off..end)
}

impl RegionMemory for RegionBytes {
    fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }
    fn read(&self, offset: usize, dst: &mut [u8]) -> bool {
        let b = self.bytes.read();
        match range(offset, dst.len(), b.len()) {
            Some(r) => {
                dst.copy_from_slice(&b[r]);
                true
            }
            None => false,
        }
    }
    fn write(&self, offset: usize, src: &[u8]) -> bool {
        let mut b = self.bytes.write();
        let total = b.len();
        match range(offset, src.len(), total) {
            Some(r) => {
                b[r].copy_from_slice(src);
                true
            }
            None => false,
        }
    }
    fn atomic(&self, offset: usize, op: AtomicOp) -> Option<u64> {
        if !offset.is_multiple_of(8) {
            return None;
        }
        let mut b = self.bytes.write();
        let total = b.len();
        let r = range(offset, 8, total)?;
        let old = u64::from_ne_bytes(b[r.clone()].try_into().ok()?);
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
        b[r].copy_from_slice(&new.to_ne_bytes());
        Some(old)
    }
}

/// A protection domain of a soft device.
#[derive(Clone)]
pub(crate) struct SoftPd {
    ctx: Arc<Inner>,
    pd: PdId,
}

impl SoftPd {
    pub fn alloc(ctx: &Arc<Inner>) -> SoftPd {
        SoftPd {
            pd: ctx.shared.with_engine(|e| e.alloc_pd()),
            ctx: ctx.clone(),
        }
    }

    pub fn id(&self) -> PdId {
        self.pd
    }

    /// True if the PD belongs to device `ctx`.
    pub fn is_of(&self, ctx: &Arc<Inner>) -> bool {
        Arc::ptr_eq(&self.ctx, ctx)
    }

    /// Registers `bytes`, which the region then owns.
    pub fn register(&self, bytes: Vec<u8>, access: Access) -> Result<SoftMr, Error> {
        let bytes: Box<[u8]> = bytes.into_boxed_slice();
        // The region's I/O virtual address is where its bytes really are, as
        // with ibv_reg_mr: peers see ordinary-looking addresses.
        let iova = if access.contains(Access::ZERO_BASED) {
            0
        } else {
            bytes.as_ptr() as u64
        };
        let len = bytes.len();
        let region = Arc::new(RegionBytes {
            bytes: RwLock::new(bytes),
            len: AtomicUsize::new(len),
        });
        let keys = self
            .ctx
            .shared
            .with_engine(|e| e.reg_mr(self.pd, region.clone(), iova, access))?;
        Ok(SoftMr {
            ctx: self.ctx.clone(),
            bytes: region,
            keys,
            iova,
            len,
            registered: true,
        })
    }

    /// Registers memory the engine reaches only through `mem`.
    pub fn register_foreign(
        &self,
        mem: Arc<dyn RegionMemory>,
        iova: u64,
        access: Access,
    ) -> Result<SoftForeignMr, Error> {
        let len = mem.len();
        let keys = self
            .ctx
            .shared
            .with_engine(|e| e.reg_mr(self.pd, mem, iova, access))?;
        Ok(SoftForeignMr {
            ctx: self.ctx.clone(),
            keys,
            len,
            registered: true,
        })
    }

    pub fn alloc_mw(&self, mw_type: MwType) -> Result<SoftMw, Error> {
        let rkey = self
            .ctx
            .shared
            .with_engine(|e| e.alloc_mw(self.pd, mw_type))?;
        Ok(SoftMw {
            ctx: self.ctx.clone(),
            rkey,
            mw_type,
        })
    }

    /// An address handle, if the device has the source GID index and its
    /// address family is the destination's.
    pub fn create_ah(&self, av: AddressVector) -> Result<AddressHandle, Error> {
        let e = self.ctx.shared.lock();
        let gids = &e.config().gids;
        match gids.get(usize::from(av.sgid_index)) {
            None => Err(invalid("ah_attr.grh.sgid_index", "no such GID index")),
            Some(g) if g.is_ipv4() != av.dest.is_ipv4() => Err(invalid(
                "ah_attr.grh.dgid",
                "address family differs from the source GID",
            )),
            _ => Ok(AddressHandle { av }),
        }
    }
}

/// A region of a soft device that owns its bytes.
pub(crate) struct SoftMr {
    ctx: Arc<Inner>,
    bytes: Arc<RegionBytes>,
    keys: MrKeys,
    iova: u64,
    len: usize,
    registered: bool,
}

impl SoftMr {
    pub fn lkey(&self) -> u32 {
        self.keys.lkey
    }
    pub fn rkey(&self) -> u32 {
        self.keys.rkey
    }
    pub fn iova(&self) -> u64 {
        self.iova
    }
    pub fn len(&self) -> usize {
        self.len
    }

    /// Copies bytes out; first takes in what waits on the socket if no
    /// thread is receiving (a program polling its memory for a peer's
    /// WRITE sees it at once). False if the range is outside the region.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> bool {
        self.ctx.shared.poll_socket();
        self.bytes.read(offset, dst)
    }

    pub fn write(&self, offset: usize, src: &[u8]) -> bool {
        self.bytes.write(offset, src)
    }

    pub fn to_vec(&self) -> Vec<u8> {
        self.bytes.bytes.read().to_vec()
    }

    /// `f` with the bytes, after taking in what waits on the socket.
    pub fn with_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        self.ctx.shared.poll_socket();
        f(&self.bytes.bytes.read())
    }

    pub fn with_bytes_mut<R>(&self, f: impl FnOnce(&mut [u8]) -> R) -> R {
        f(&mut self.bytes.bytes.write())
    }

    /// Deregisters and gives the bytes back, or the region and why not.
    pub fn deregister(mut self) -> Result<Vec<u8>, (SoftMr, Error)> {
        let lkey = self.keys.lkey;
        if let Err(e) = self.ctx.shared.with_engine(|e| e.dereg_mr(lkey)) {
            return Err((self, e.into()));
        }
        self.registered = false;
        let bytes = std::mem::replace(&mut *self.bytes.bytes.write(), Box::new([]));
        self.bytes.len.store(0, Ordering::Release);
        Ok(bytes.into_vec())
    }
}

impl Drop for SoftMr {
    fn drop(&mut self) {
        if self.registered {
            let lkey = self.keys.lkey;
            let _ = self.ctx.shared.with_engine(|e| e.dereg_mr(lkey));
        }
    }
}

/// A registration of memory the library does not own.
pub(crate) struct SoftForeignMr {
    ctx: Arc<Inner>,
    keys: MrKeys,
    len: usize,
    registered: bool,
}

impl SoftForeignMr {
    pub fn keys(&self) -> MrKeys {
        self.keys
    }
    pub fn len(&self) -> usize {
        self.len
    }

    /// Deregisters, or gives the registration back with why not.
    pub fn deregister(mut self) -> Result<(), (SoftForeignMr, Error)> {
        let lkey = self.keys.lkey;
        match self.ctx.shared.with_engine(|e| e.dereg_mr(lkey)) {
            Ok(()) => {
                self.registered = false;
                Ok(())
            }
            Err(e) => Err((self, e.into())),
        }
    }
}

impl Drop for SoftForeignMr {
    fn drop(&mut self) {
        if self.registered {
            let lkey = self.keys.lkey;
            let _ = self.ctx.shared.with_engine(|e| e.dereg_mr(lkey));
        }
    }
}

/// A memory window of a soft device, under the key it was last given.
pub(crate) struct SoftMw {
    ctx: Arc<Inner>,
    rkey: u32,
    mw_type: MwType,
}

impl SoftMw {
    pub fn rkey(&self) -> u32 {
        self.rkey
    }
    pub fn mw_type(&self) -> MwType {
        self.mw_type
    }
    pub fn set_rkey(&mut self, rkey: u32) {
        self.rkey = rkey;
    }
}

impl Drop for SoftMw {
    /// Frees the window under its current key, which a `BIND_MW` work
    /// request posted without [`crate::QueuePair::post_bind_mw`] may have
    /// changed.
    fn drop(&mut self) {
        let _ = self.ctx.shared.with_engine(|e| {
            let rkey = e.mw_key(self.rkey).unwrap_or(self.rkey);
            e.dealloc_mw(rkey)
        });
    }
}
