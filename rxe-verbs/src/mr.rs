//! Protection domains, memory regions and memory windows.
//!
//! ## The safety contract of registered memory
//! A region's bytes are written by the engine (incoming WRITEs, READ
//! responses, receives, atomics) from the progress thread while the
//! application holds the region. Rust must never see a `&[u8]` or `&mut [u8]`
//! to bytes that change underneath it, so:
//!
//! * a [`MemoryRegion`] owns its bytes (allocated here, or a `Vec<u8>` the
//!   application hands over and gets back from [`MemoryRegion::deregister`]);
//! * the bytes sit behind a reader-writer lock; the engine takes it for each
//!   packet's worth of data, the application for [`MemoryRegion::read`],
//!   [`MemoryRegion::write`] and the closures of [`MemoryRegion::with_bytes`]
//!   and [`MemoryRegion::with_bytes_mut`] — a borrow handed to a closure ends
//!   with the closure, so it can never outlive the lock;
//! * the engine checks every range against the region (and the region's
//!   own accessors check again), so no byte outside a region is ever read or
//!   written, whatever a peer sends;
//! * after deregistration the engine's references are revoked: work still in
//!   flight completes with an error instead of touching the bytes, and the
//!   bytes themselves stay alive as long as anything refers to them.
//!
//! As with real RDMA, the *contents* seen while an operation is in flight
//! are unspecified (a READ may see a WRITE half done); the memory safety is
//! not.
//!
//! On a native device the region owns a heap buffer registered with
//! `ibv_reg_mr`, which the device reads and writes by DMA without taking
//! any lock of ours: the same accessors copy in and out through raw
//! pointers under the region's lock (which orders the application's own
//! accesses), and the closures of `with_bytes`/`with_bytes_mut` see a copy
//! (written back after `with_bytes_mut`'s closure returns, so bytes the
//! device wrote meanwhile are overwritten with what the closure saw). No
//! Rust reference to DMA memory ever exists; the buffer is freed only after
//! `ibv_dereg_mr` succeeds. Memory windows are soft-only.

use crate::attr::AddressHandle;
use crate::context::{Context, CtxImp};
use crate::error::{invalid, unsupported, Error};
use crate::native::{NMr, NPd};
use crate::soft::{SoftForeignMr, SoftMr, SoftMw, SoftPd};
use rxe_core::engine::mem::MwType;
use rxe_core::engine::RegionMemory;
use rxe_core::types::{Access, AddressVector, Sge};
use std::ops::Range;
use std::sync::Arc;

/// A protection domain (`ibv_pd`).
#[derive(Clone)]
pub struct ProtectionDomain {
    pub(crate) imp: PdImp,
}

#[derive(Clone)]
pub(crate) enum PdImp {
    Soft(SoftPd),
    Native(Arc<NPd>),
}

impl std::fmt::Debug for ProtectionDomain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pd = match &self.imp {
            PdImp::Soft(p) => p.id().0,
            PdImp::Native(p) => p.handle(),
        };
        f.debug_struct("ProtectionDomain").field("pd", &pd).finish()
    }
}

impl Context {
    /// Allocates a protection domain.
    pub fn alloc_pd(&self) -> Result<ProtectionDomain, Error> {
        let imp = match &self.imp {
            CtxImp::Soft(c) => PdImp::Soft(SoftPd::alloc(c)),
            CtxImp::Native(c) => PdImp::Native(NPd::alloc(c)?),
        };
        Ok(ProtectionDomain { imp })
    }
}

impl ProtectionDomain {
    /// Registers `len` zeroed bytes allocated by the library.
    ///
    /// Memory the process cannot get is an [`Error::Io`] of kind
    /// `OutOfMemory` (`ENOMEM` through the C library), not an abort.
    pub fn alloc_mr(&self, len: usize, access: Access) -> Result<MemoryRegion, Error> {
        // Ask first, fallibly; then take the zeroed memory the usual way,
        // which maps zero pages lazily (filling a reserved vector with
        // zeros would touch every page of a large region). A process that
        // just got `len` bytes gets them again unless it is racing itself.
        let mut probe: Vec<u8> = Vec::new();
        probe.try_reserve_exact(len).map_err(|_| Error::Io {
            what: format!("allocate {len} bytes for a memory region"),
            source: std::io::Error::from(std::io::ErrorKind::OutOfMemory),
        })?;
        drop(probe);
        self.register(vec![0u8; len], access)
    }

    /// Registers memory the application hands over; [`MemoryRegion::deregister`]
    /// gives it back.
    pub fn register(&self, bytes: Vec<u8>, access: Access) -> Result<MemoryRegion, Error> {
        let imp = match &self.imp {
            PdImp::Soft(p) => MrImp::Soft(p.register(bytes, access)?),
            PdImp::Native(p) => MrImp::Native(Box::new(NMr::register(p, bytes, access)?)),
        };
        Ok(MemoryRegion { imp, access })
    }

    /// Registers memory the library does not own (`ibv_reg_mr` on the
    /// application's own buffer, as the C library does): the engine reaches
    /// it only through `mem`, at I/O virtual address `iova` (ignored with
    /// [`Access::ZERO_BASED`]). The region's length is `mem.len()`. Soft
    /// devices only.
    pub fn register_foreign(
        &self,
        mem: Arc<dyn RegionMemory>,
        iova: u64,
        access: Access,
    ) -> Result<ForeignRegion, Error> {
        match &self.imp {
            PdImp::Soft(p) => Ok(ForeignRegion {
                imp: p.register_foreign(mem, iova, access)?,
            }),
            PdImp::Native(_) => Err(unsupported("registering foreign memory on a native device")),
        }
    }

    /// Allocates a memory window (`ibv_alloc_mw`). Soft devices only.
    pub fn alloc_mw(&self, mw_type: MwType) -> Result<MemoryWindow, Error> {
        match &self.imp {
            PdImp::Soft(p) => Ok(MemoryWindow {
                imp: p.alloc_mw(mw_type)?,
            }),
            PdImp::Native(_) => Err(unsupported("memory windows on a native device")),
        }
    }

    /// Creates an address handle for UD sends (`ibv_create_ah`). On a
    /// native device the `ibv_ah` is created here and kept with the PD;
    /// sends through the handle use it.
    pub fn create_ah(&self, av: AddressVector) -> Result<AddressHandle, Error> {
        match &self.imp {
            PdImp::Soft(p) => p.create_ah(av),
            PdImp::Native(p) => p.ah(&av).map(|_| AddressHandle { av }),
        }
    }
}

/// Where a peer may WRITE or READ: what to send it out of band.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RemoteRegion {
    /// Start address.
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
    /// Remote key.
    pub rkey: u32,
}

impl RemoteRegion {
    /// The part `range` of this region.
    pub fn slice(&self, r: Range<u64>) -> RemoteRegion {
        RemoteRegion {
            addr: self.addr + r.start,
            len: r.end - r.start,
            rkey: self.rkey,
        }
    }
}

/// A registered memory region that owns its bytes (`ibv_mr`).
pub struct MemoryRegion {
    imp: MrImp,
    access: Access,
}

enum MrImp {
    Soft(SoftMr),
    Native(Box<NMr>),
}

impl std::fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryRegion")
            .field("lkey", &format_args!("{:#010x}", self.lkey()))
            .field("rkey", &format_args!("{:#010x}", self.rkey()))
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("len", &self.len())
            .finish()
    }
}

fn outside(offset: usize, n: usize, len: usize) -> Error {
    invalid(
        "offset",
        format!("{offset}+{n} is outside the {len}-byte region"),
    )
}

impl MemoryRegion {
    /// Local key.
    pub fn lkey(&self) -> u32 {
        match &self.imp {
            MrImp::Soft(m) => m.lkey(),
            MrImp::Native(m) => m.lkey,
        }
    }
    /// Remote key.
    pub fn rkey(&self) -> u32 {
        match &self.imp {
            MrImp::Soft(m) => m.rkey(),
            MrImp::Native(m) => m.rkey,
        }
    }
    /// The address peers and SGEs use for byte 0.
    pub fn addr(&self) -> u64 {
        match &self.imp {
            MrImp::Soft(m) => m.iova(),
            MrImp::Native(m) => m.iova,
        }
    }
    /// Length in bytes.
    pub fn len(&self) -> usize {
        match &self.imp {
            MrImp::Soft(m) => m.len(),
            MrImp::Native(m) => m.len(),
        }
    }
    /// True for a zero-length region.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Access rights.
    pub fn access(&self) -> Access {
        self.access
    }

    /// An SGE over `r` (byte offsets in the region).
    pub fn sge(&self, r: Range<usize>) -> Sge {
        Sge {
            addr: self.addr() + r.start as u64,
            length: (r.end - r.start) as u32,
            lkey: self.lkey(),
        }
    }

    /// What a peer needs to WRITE or READ this region.
    pub fn remote(&self) -> RemoteRegion {
        RemoteRegion {
            addr: self.addr(),
            len: self.len() as u64,
            rkey: self.rkey(),
        }
    }

    /// Copies bytes out of the region.
    ///
    /// On a soft device, reading a region is also a point of progress: if
    /// no thread is receiving from the device's socket, the reader first
    /// takes in what waits there, so a program that polls its memory for a
    /// peer's RDMA WRITE (a flag, the last byte of a message) sees it as
    /// soon as it arrives. The same holds for [`Self::with_bytes`].
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), Error> {
        let ok = match &self.imp {
            MrImp::Soft(m) => m.read(offset, dst),
            MrImp::Native(m) => m.read(offset, dst),
        };
        if ok {
            Ok(())
        } else {
            Err(outside(offset, dst.len(), self.len()))
        }
    }

    /// Copies bytes into the region.
    pub fn write(&self, offset: usize, src: &[u8]) -> Result<(), Error> {
        let ok = match &self.imp {
            MrImp::Soft(m) => m.write(offset, src),
            MrImp::Native(m) => m.write(offset, src),
        };
        if ok {
            Ok(())
        } else {
            Err(outside(offset, src.len(), self.len()))
        }
    }

    /// A copy of all the bytes.
    pub fn to_vec(&self) -> Vec<u8> {
        match &self.imp {
            MrImp::Soft(m) => m.to_vec(),
            MrImp::Native(m) => m.to_vec(),
        }
    }

    /// Runs `f` with the bytes, the engine kept out meanwhile (on a native
    /// device: with a copy of them, see the module docs).
    pub fn with_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        match &self.imp {
            MrImp::Soft(m) => m.with_bytes(f),
            MrImp::Native(m) => f(&m.to_vec()),
        }
    }

    /// Runs `f` with the bytes mutable, the engine kept out meanwhile (on a
    /// native device: with a copy, written back when `f` returns).
    pub fn with_bytes_mut<R>(&self, f: impl FnOnce(&mut [u8]) -> R) -> R {
        match &self.imp {
            MrImp::Soft(m) => m.with_bytes_mut(f),
            MrImp::Native(m) => m.with_copy_mut(f),
        }
    }

    /// Deregisters the region and gives its bytes back. Refused while memory
    /// windows are bound to it. Work in flight that still refers to it fails
    /// with an error completion.
    pub fn deregister(self) -> Result<Vec<u8>, (MemoryRegion, Error)> {
        let MemoryRegion { imp, access } = self;
        let back = |imp| MemoryRegion { imp, access };
        match imp {
            MrImp::Soft(m) => m.deregister().map_err(|(m, e)| (back(MrImp::Soft(m)), e)),
            MrImp::Native(m) => m
                .deregister()
                .map_err(|(m, e)| (back(MrImp::Native(Box::new(m))), e)),
        }
    }
}

/// A registration of memory the library does not own
/// ([`ProtectionDomain::register_foreign`]). Dropping it deregisters.
pub struct ForeignRegion {
    imp: SoftForeignMr,
}

impl std::fmt::Debug for ForeignRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForeignRegion")
            .field("lkey", &format_args!("{:#010x}", self.lkey()))
            .field("len", &self.len())
            .finish()
    }
}

impl ForeignRegion {
    /// Local key.
    pub fn lkey(&self) -> u32 {
        self.imp.keys().lkey
    }
    /// Remote key.
    pub fn rkey(&self) -> u32 {
        self.imp.keys().rkey
    }
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.imp.len()
    }
    /// True for a zero-length region.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Deregisters: refused (and the region given back) while memory
    /// windows are bound to it. Work in flight that still refers to the
    /// region fails with an error completion; once this returns, the engine
    /// never touches the memory again.
    pub fn deregister(self) -> Result<(), (ForeignRegion, Error)> {
        self.imp
            .deregister()
            .map_err(|(imp, e)| (ForeignRegion { imp }, e))
    }
}

/// A memory window (`ibv_mw`): a remotely accessible part of a region with
/// rights of its own. Dropping it frees it.
pub struct MemoryWindow {
    imp: SoftMw,
}

impl std::fmt::Debug for MemoryWindow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryWindow")
            .field("rkey", &format_args!("{:#010x}", self.rkey()))
            .field("type", &self.mw_type())
            .finish()
    }
}

impl MemoryWindow {
    /// The window's current rkey (it changes on every bind).
    pub fn rkey(&self) -> u32 {
        self.imp.rkey()
    }
    /// Type 1 or 2.
    pub fn mw_type(&self) -> MwType {
        self.imp.mw_type()
    }
    pub(crate) fn set_rkey(&mut self, rkey: u32) {
        self.imp.set_rkey(rkey);
    }
}
