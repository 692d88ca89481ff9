//! # rxe-verbs: RDMA verbs over the rxe-rs soft RoCE v2 engine
//!
//! The API an RDMA program holds, shaped like libibverbs (and the `ibverbs`
//! crate) but with Rust ownership and typed errors:
//!
//! ```no_run
//! use rxe_verbs::*;
//! # fn main() -> Result<(), Error> {
//! let ctx = Device::soft("127.0.0.2".parse().unwrap()).open()?;
//! let pd = ctx.alloc_pd()?;
//! let cq = ctx.create_cq(64, None)?;
//! let mr = pd.alloc_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
//! let qp = ctx.create_qp(&pd, &QpInitAttr::new(QpType::Rc, &cq, &cq))?;
//! // ... exchange qp.endpoint() with the peer out of band, then:
//! # let remote = qp.endpoint();
//! qp.connect(&remote, &ConnectOptions::default())?;
//! mr.write(0, b"hello")?;
//! qp.post_send(&[SendWr::send(1, &[mr.sge(0..5)])])?;
//! let wc = cq.wait(1, std::time::Duration::from_secs(1))?;
//! # Ok(()) }
//! ```
//!
//! ## Devices
//! A soft device is bound to one local IP address (IPv4 or IPv6) and sends
//! RoCE v2 over UDP port 4791 through the kernel's UDP stack: no root, no
//! kernel module. Its GID table holds that address as the kernel's rxe would
//! show it: `::ffff:a.b.c.d` for IPv4. A background progress thread receives
//! packets, runs the timers and sends; application threads post work and
//! send what it produced directly, so a post does not wait for the thread.
//!
//! ## Memory and soundness
//! The engine reads and writes registered memory while the application holds
//! the region, from another thread. So a [`MemoryRegion`] owns its bytes and
//! never hands out a plain `&[u8]` or `&mut [u8]` that the engine could
//! change underneath: access goes through [`MemoryRegion::read`],
//! [`MemoryRegion::write`] and the closures of [`MemoryRegion::with_bytes`]
//! / [`MemoryRegion::with_bytes_mut`], which hold the region's lock (the
//! engine takes the same lock for each packet's worth of data). No `unsafe`
//! is involved: a bad key or an SGE outside its region becomes an error
//! completion, never an access outside the region. After deregistration
//! the engine's references to the region are revoked, so work still in
//! flight fails cleanly instead of touching freed memory.
//!
//! ## Native verbs
//! Where an RDMA device is present (a RoCE NIC, or the kernel's rxe, which
//! libibverbs lists like any other), the same API drives it through native
//! verbs instead of the software engine: libibverbs is loaded at run time
//! (`dlopen("libibverbs.so.1")`, no link-time dependency), and
//! [`Device::find`] / [`Device::list`] choose between the kinds as
//! [`provider`] describes (`RXE_PROVIDER=soft|native|auto`, default auto).
//! Without libibverbs, or with no device, everything runs on the soft stack
//! after one informative line on standard error. What a native device
//! cannot do here returns [`Error::Unsupported`].
//!
//! All unsafe code of this crate is in its private `native` module (the
//! FFI to libibverbs); everything else is safe Rust.
#![deny(unsafe_code)]

mod attr;
pub mod cm;
mod config;
mod context;
mod cq;
mod device;
mod error;
mod events;
mod mr;
#[allow(unsafe_code)]
mod native;
pub mod provider;
mod qp;
mod soft;
mod sync;

pub use attr::{
    addr_of, gid_of, AddressHandle, AsyncEventKind, AsyncNotify, DeviceAttr, DeviceKind, GidType,
    NativeDeviceInfo, NativeGid, PortAttr, PortState, Provider, QpInitAttr,
};
pub use context::Context;
pub use cq::Notify;
pub use cq::{CompletionChannel, CompletionQueue};
pub use device::Device;
pub use error::Error;
pub use mr::{ForeignRegion, MemoryRegion, MemoryWindow, ProtectionDomain, RemoteRegion};
pub use qp::{inc_rkey, ConnectOptions, Endpoint, QueuePair, SharedReceiveQueue, MULTICAST_QPN};
pub use rxe_core::engine::mem::MwType;
pub use rxe_core::engine::{AtomicOp, RegionMemory};
pub use rxe_core::psn::Psn;
pub use rxe_core::types::{
    Access, AddressVector, Completion, DeviceCaps, FlushParams, Mtu, MwBind, QpAttr, QpAttrMask,
    QpCap, QpState, QpType, RecvWr, SendFlags, SendOpcode, SendWr, Sge, UdDest, WcOpcode, WcStatus,
};
pub use rxe_net::route::{interface_of, Interface};
pub use soft::progress::send_deferred;

/// Convenience constructors for work requests.
pub trait SendWrExt {
    /// A signaled SEND of the given gather list.
    fn send(wr_id: u64, sges: &[Sge]) -> SendWr;
    /// A signaled RDMA WRITE to `remote`.
    fn write(wr_id: u64, sges: &[Sge], remote: RemoteRegion) -> SendWr;
    /// A signaled RDMA READ from `remote` into `sges`.
    fn read(wr_id: u64, sges: &[Sge], remote: RemoteRegion) -> SendWr;
}

impl SendWrExt for SendWr {
    fn send(wr_id: u64, sges: &[Sge]) -> SendWr {
        let mut wr = SendWr::new(wr_id, SendOpcode::Send);
        wr.sg_list = sges.to_vec();
        wr
    }
    fn write(wr_id: u64, sges: &[Sge], remote: RemoteRegion) -> SendWr {
        let mut wr = SendWr::new(wr_id, SendOpcode::RdmaWrite);
        wr.sg_list = sges.to_vec();
        wr.remote_addr = remote.addr;
        wr.rkey = remote.rkey;
        wr
    }
    fn read(wr_id: u64, sges: &[Sge], remote: RemoteRegion) -> SendWr {
        let mut wr = SendWr::new(wr_id, SendOpcode::RdmaRead);
        wr.sg_list = sges.to_vec();
        wr.remote_addr = remote.addr;
        wr.rkey = remote.rkey;
        wr
    }
}
