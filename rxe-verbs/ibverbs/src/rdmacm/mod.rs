//! # The drop-in `librdmacm.so.1`
//!
//! Every symbol of Debian bookworm's librdmacm1 44.0 (`RDMACM_1.0` ...
//! `RDMACM_1.3`, `abi/librdmacm1-44.0.symbols`) is exported by this same
//! shared object, next to libibverbs' symbols: `rxe exec` links it as both
//! `libibverbs.so.1` and `librdmacm.so.1`. glibc's loader recognises an
//! object it has already mapped by the device and inode of its file, so a
//! program that needs both sonames maps this file once, and librdmacm's
//! objects (the `rdma_cm_id`'s `verbs`, `pd`, `qp`, CQs) are the very
//! libibverbs objects of the same engine and device sockets.
//!
//! What a program holds, all laid out as `<rdma/rdma_cma.h>` says
//! (`crate::sys`):
//! * an `rdma_event_channel` ([`channel::Channel`]): its `fd` is the read
//!   end of a pipe with one byte per pending event, so `poll`, `epoll` and
//!   `O_NONBLOCK` behave as on the kernel's `rdma_cm` device;
//! * an `rdma_cm_id` ([`object::CmId`]): the library writes its public fields
//!   (`verbs`, `pd`, `qp`, `route`, `port_num`, the CQs) as librdmacm does;
//! * an `rdma_cm_event` ([`channel::CmEvent`]), from `rdma_get_cm_event`
//!   to `rdma_ack_cm_event`;
//! * an `rdma_addrinfo` list ([`addrinfo`]), allocated with `malloc`.
//!
//! Address and route resolution need no protocol on RoCE: which soft device
//! owns or reaches an address, and the GIDs of both ends, are known at
//! once, so `rdma_resolve_addr` and `rdma_resolve_route` queue their event
//! before they return. What needs the connection manager's MADs on QP 1
//! (connect, listen, accept, reject, disconnect) is in [`connect`]; multicast
//! joins are in [`mcast`], over `rxe_verbs::cm`, and rsockets in [`rsocket`].

pub mod addrinfo;
pub mod channel;
pub mod connect;
pub mod id;
pub mod mcast;
pub mod object;
pub mod qp;
pub mod rsocket;

use crate::device::devices;
use crate::ffi::{note, set_errno, Fail};
use crate::objects::Dev;
use crate::sys::*;
use parking_lot::Mutex;
use std::ffi::c_int;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::sync::OnceLock;

/// librdmacm's `ucma_init`: without a device every call that starts the
/// library fails with ENODEV, as librdmacm does on a host without RDMA.
pub fn init() -> Result<(), Fail> {
    if devices().is_empty() {
        return Err(Fail::new(
            libc::ENODEV,
            "no soft device (RXE_DEVICES is empty or unset; `rxe exec -d ADDR` sets it)",
        ));
    }
    Ok(())
}

/// For calls that return 0, or -1 with errno (librdmacm's convention).
pub fn ret(verb: &str, r: Result<(), Fail>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(f) => {
            note(verb, &f.why);
            set_errno(f.errno);
            -1
        }
    }
}

/// The body of an entry point that returns 0 or -1 with errno (inside
/// [`crate::ffi::entry!`], with `on_panic = -1`).
pub fn minus_one(verb: &str, f: impl FnOnce() -> Result<(), Fail>) -> c_int {
    ret(verb, f())
}

// ---------------------------------------------------------------------------
// Devices as librdmacm keeps them: one open context per device for the
// process, and the PD it gives ids that have none.
// ---------------------------------------------------------------------------

/// What librdmacm's `cma_device` holds once the device is open. The
/// maxima are what `rdma_connect` and `rdma_accept` put in for
/// `RDMA_MAX_INIT_DEPTH` and `RDMA_MAX_RESP_RES` (`connect.rs`).
#[derive(Debug, Clone, Copy)]
#[allow(dead_code)]
pub struct Opened {
    pub ctx: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub max_qp_wr: c_int,
    pub max_initiator_depth: u8,
    pub max_responder_resources: u8,
}

// SAFETY: the pointers are objects of this library that live as long as
// the process (they are never closed); they are only handed to the program
// and to the library's own verbs, which lock what they share.
unsafe impl Send for Opened {}

/// A soft device as librdmacm sees it.
pub struct CmaDev {
    pub dev: &'static Dev,
    opened: Mutex<Option<Opened>>,
}

impl std::fmt::Debug for CmaDev {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CmaDev")
            .field("name", &self.dev.rx.name())
            .finish()
    }
}

pub fn cma_devices() -> &'static [CmaDev] {
    static D: OnceLock<Vec<CmaDev>> = OnceLock::new();
    D.get_or_init(|| {
        devices()
            .iter()
            .map(|dev| CmaDev {
                dev,
                opened: Mutex::new(None),
            })
            .collect()
    })
}

impl CmaDev {
    /// The device's address.
    pub fn addr(&self) -> IpAddr {
        self.dev.rx.addr()
    }

    /// Opens the device once for the process (`ibv_open_device` of this
    /// library, so the context shares the engine of any other context of
    /// the device), with the PD that ids without one get.
    pub fn open(&self) -> Result<Opened, Fail> {
        let mut o = self.opened.lock();
        if let Some(op) = *o {
            return Ok(op);
        }
        let devp = std::ptr::from_ref(&self.dev.dev).cast_mut();
        // SAFETY: a device of ibv_get_device_list.
        let ctx = unsafe { crate::context::ibv_open_device(devp) };
        if ctx.is_null() {
            return Err(Fail::new(
                libc::ENODEV,
                format!("cannot open {}", self.dev.rx.name()),
            ));
        }
        // SAFETY: ibv_device_attr is plain data.
        let mut attr: ibv_device_attr = unsafe { std::mem::zeroed() };
        // SAFETY: an open context and a place for the answer.
        let r = unsafe { crate::context::ibv_query_device(ctx, &mut attr) };
        // SAFETY: an open context.
        let pd = unsafe { crate::mem::ibv_alloc_pd(ctx) };
        if r != 0 || pd.is_null() {
            // SAFETY: the context opened above, with nothing made from it.
            unsafe { crate::context::ibv_close_device(ctx) };
            return Err(Fail::new(
                libc::ENODEV,
                format!("cannot set up {}", self.dev.rx.name()),
            ));
        }
        let op = Opened {
            ctx,
            pd,
            max_qp_wr: attr.max_qp_wr,
            max_initiator_depth: attr.max_qp_init_rd_atom.clamp(0, 255) as u8,
            max_responder_resources: attr.max_qp_rd_atom.clamp(0, 255) as u8,
        };
        *o = Some(op);
        Ok(op)
    }
}

/// An address without the IPv4-mapped IPv6 form.
pub fn canonical(a: IpAddr) -> IpAddr {
    match a {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(a, IpAddr::V4),
        v4 => v4,
    }
}

/// The soft device that owns `addr`.
pub fn dev_by_addr(addr: IpAddr) -> Option<&'static CmaDev> {
    let a = canonical(addr);
    cma_devices().iter().find(|d| canonical(d.addr()) == a)
}

/// Whether `a` is on this host's loopback (127.0.0.0/8, ::1).
pub fn is_loopback(a: IpAddr) -> bool {
    canonical(a).is_loopback()
}

// ---------------------------------------------------------------------------
// Socket addresses
// ---------------------------------------------------------------------------

/// A program's `struct sockaddr *`: AF_INET or AF_INET6, read whole.
///
/// # Safety
/// A non-null `p` must point to a sockaddr of its family's size.
pub unsafe fn read_sockaddr(p: *const sockaddr, what: &str) -> Result<SocketAddr, Fail> {
    // SAFETY: the caller's contract.
    let family = unsafe { p.as_ref() }
        .ok_or_else(|| Fail::inval(what, "NULL"))?
        .sa_family as c_int;
    match family {
        libc::AF_INET => {
            // SAFETY: an AF_INET sockaddr is a sockaddr_in.
            let s = unsafe { &*p.cast::<libc::sockaddr_in>() };
            Ok(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(s.sin_addr.s_addr)),
                u16::from_be(s.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: an AF_INET6 sockaddr is a sockaddr_in6.
            let s = unsafe { &*p.cast::<libc::sockaddr_in6>() };
            Ok(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(s.sin6_addr.s6_addr),
                u16::from_be(s.sin6_port),
                u32::from_be(s.sin6_flowinfo),
                s.sin6_scope_id,
            )))
        }
        27 => Err(Fail::new(
            libc::EAFNOSUPPORT,
            format!("{what}: AF_IB addresses need InfiniBand; soft devices are RoCE (AF_INET, AF_INET6)"),
        )),
        f => Err(Fail::inval(what, format!("address family {f} (AF_INET or AF_INET6)"))),
    }
}

/// Writes `a` into a `sockaddr_storage`-sized place (the rest zeroed).
///
/// # Safety
/// `p` must be valid for writes of a `sockaddr_storage`.
pub unsafe fn write_sockaddr(p: *mut sockaddr_storage, a: Option<SocketAddr>) {
    // SAFETY: the caller's contract; all zeroes is a valid sockaddr_storage.
    unsafe { std::ptr::write_bytes(p, 0, 1) };
    match a {
        None => {}
        Some(SocketAddr::V4(v4)) => {
            let s = libc::sockaddr_in {
                sin_family: libc::AF_INET as u16,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(*v4.ip()).to_be(),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: a sockaddr_in fits in a sockaddr_storage.
            unsafe { p.cast::<libc::sockaddr_in>().write(s) };
        }
        Some(SocketAddr::V6(v6)) => {
            let s = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as u16,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: v6.flowinfo().to_be(),
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.ip().octets(),
                },
                sin6_scope_id: v6.scope_id(),
            };
            // SAFETY: a sockaddr_in6 fits in a sockaddr_storage.
            unsafe { p.cast::<libc::sockaddr_in6>().write(s) };
        }
    }
}

/// The RoCE v2 GID of an address (GID index 0 of its device).
pub fn gid(a: IpAddr) -> ibv_gid {
    ibv_gid {
        raw: rxe_verbs::gid_of(canonical(a)).octets(),
    }
}
