//! The system calls under the transport: sockets and their options, BPF
//! filters, socket addresses, and errors that say what was being done.

use super::SOCKET_BUFFER;
use rxe_core::wire::ROCE_V2_PORT;
use std::fmt;
use std::io;
use std::mem::size_of;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// An `io::Error` that says what was being done, keeping the kind and the
/// original error as its source.
#[derive(Debug)]
struct Context {
    what: String,
    source: io::Error,
}

impl fmt::Display for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.what, self.source)
    }
}

impl std::error::Error for Context {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// The errno behind `e`, also when this transport wrapped it with what it
/// was doing (`e.raw_os_error()` sees only the outer error).
pub fn os_error_of(e: &io::Error) -> Option<i32> {
    e.raw_os_error().or_else(|| {
        e.get_ref()
            .and_then(|i| i.downcast_ref::<Context>())
            .and_then(|c| os_error_of(&c.source))
    })
}

pub(super) fn context(source: io::Error, what: impl Into<String>) -> io::Error {
    io::Error::new(
        source.kind(),
        Context {
            what: what.into(),
            source,
        },
    )
}

pub(super) fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

pub(super) fn socket(
    domain: libc::c_int,
    ty: libc::c_int,
    proto: libc::c_int,
) -> io::Result<OwnedFd> {
    // SAFETY: plain system call; a nonnegative result is a new descriptor
    // that nothing else owns.
    let fd =
        cvt(unsafe { libc::socket(domain, ty | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, proto) })?;
    // SAFETY: fd is open and ours.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn setsockopt<T>(fd: RawFd, level: libc::c_int, name: libc::c_int, val: &T) -> io::Result<()> {
    // SAFETY: val points at size_of::<T>() readable bytes.
    cvt(unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (val as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    })
    .map(drop)
}

pub(super) fn setsockopt_int(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    val: i32,
) -> io::Result<()> {
    setsockopt(fd, level, name, &(val as libc::c_int))
}

pub(super) fn getsockopt_int(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
) -> io::Result<libc::c_int> {
    let mut val: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: val and len are valid for writes of the lengths given.
    cvt(unsafe {
        libc::getsockopt(
            fd,
            level,
            name,
            (&mut val as *mut libc::c_int).cast(),
            &mut len,
        )
    })?;
    Ok(val)
}

/// Asks for large buffers: the forcing variant if permitted, else the capped one.
fn grow_buffers(fd: RawFd, rcv: bool, snd: bool) {
    let size = SOCKET_BUFFER as i32;
    let set = |force, plain| {
        if setsockopt_int(fd, libc::SOL_SOCKET, force, size).is_err() {
            let _ = setsockopt_int(fd, libc::SOL_SOCKET, plain, size);
        }
    };
    if rcv {
        set(libc::SO_RCVBUFFORCE, libc::SO_RCVBUF);
    }
    if snd {
        set(libc::SO_SNDBUFFORCE, libc::SO_SNDBUF);
    }
}

fn attach_filter(fd: RawFd, prog: &[libc::sock_filter]) -> io::Result<()> {
    let fprog = libc::sock_fprog {
        len: prog.len() as libc::c_ushort,
        // The kernel copies the program and only reads it.
        filter: prog.as_ptr() as *mut libc::sock_filter,
    };
    setsockopt(fd, libc::SOL_SOCKET, libc::SO_ATTACH_FILTER, &fprog)
}

const fn bpf(code: u32, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    }
}

/// `ret #0`: drop everything.
const DROP_ALL: [libc::sock_filter; 1] = [bpf(libc::BPF_RET | libc::BPF_K, 0, 0, 0)];

/// For a raw IPv4 socket (data starts at the IP header): keep UDP
/// destination port 4791, drop the rest.
const KEEP_ROCE: [libc::sock_filter; 5] = [
    // x = 4 * (ip[0] & 0xf): the IP header length
    bpf(libc::BPF_LDX | libc::BPF_B | libc::BPF_MSH, 0, 0, 0),
    // a = the 16 bits at x + 2: the UDP destination port
    bpf(libc::BPF_LD | libc::BPF_H | libc::BPF_IND, 0, 0, 2),
    bpf(
        libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K,
        0,
        1,
        ROCE_V2_PORT as u32,
    ),
    bpf(libc::BPF_RET | libc::BPF_K, 0, 0, u32::MAX),
    bpf(libc::BPF_RET | libc::BPF_K, 0, 0, 0),
];

pub(super) fn open_udp(sa: SocketAddr, drop_all: bool) -> io::Result<OwnedFd> {
    let setup = || -> io::Result<OwnedFd> {
        let domain = if sa.is_ipv4() {
            libc::AF_INET
        } else {
            libc::AF_INET6
        };
        let s = socket(domain, libc::SOCK_DGRAM, 0)?;
        let fd = s.as_raw_fd();
        if sa.is_ipv4() {
            setsockopt_int(
                fd,
                libc::IPPROTO_IP,
                libc::IP_MTU_DISCOVER,
                libc::IP_PMTUDISC_DO,
            )?;
        } else {
            setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, 1)?;
            setsockopt_int(fd, libc::IPPROTO_UDP, libc::UDP_NO_CHECK6_RX, 1)?;
            setsockopt_int(
                fd,
                libc::IPPROTO_IPV6,
                libc::IPV6_MTU_DISCOVER,
                libc::IPV6_PMTUDISC_DO,
            )?;
        }
        // Several processes may share the address (crate::share).
        setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_REUSEPORT, 1)?;
        grow_buffers(fd, !drop_all, true);
        if drop_all {
            // Before bind, so that nothing is ever queued here.
            attach_filter(fd, &DROP_ALL)?;
        }
        Ok(s)
    };
    let s = setup().map_err(|e| context(e, format!("set up a UDP socket for {sa}")))?;
    bind_fd(&s, sa).map_err(|e| context(e, format!("bind {sa}")))?;
    Ok(s)
}

pub(super) fn open_raw(addr: Ipv4Addr) -> io::Result<OwnedFd> {
    let s = socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_UDP).map_err(|e| {
        context(
            e,
            format!("raw IPv4/UDP socket for {addr} (needs CAP_NET_RAW)"),
        )
    })?;
    let fd = s.as_raw_fd();
    attach_filter(fd, &KEEP_ROCE).map_err(|e| {
        context(
            e,
            format!("attach a BPF filter to the raw socket for {addr}"),
        )
    })?;
    grow_buffers(fd, true, false);
    // A bound raw socket only gets packets to that address.
    bind_fd(&s, SocketAddr::new(IpAddr::V4(addr), 0))
        .map_err(|e| context(e, format!("bind a raw socket to {addr}")))?;
    Ok(s)
}

fn bind_fd(s: &OwnedFd, sa: SocketAddr) -> io::Result<()> {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = to_sockaddr(sa, &mut ss);
    // SAFETY: ss holds a sockaddr of len bytes.
    cvt(unsafe {
        libc::bind(
            s.as_raw_fd(),
            (&ss as *const libc::sockaddr_storage).cast(),
            len,
        )
    })
    .map(drop)
}

/// Writes a socket address in C form; returns its length.
pub(super) fn to_sockaddr(sa: SocketAddr, out: &mut libc::sockaddr_storage) -> libc::socklen_t {
    match sa {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is big enough and aligned for any sockaddr.
            unsafe { std::ptr::write((out as *mut libc::sockaddr_storage).cast(), sin) };
            size_of::<libc::sockaddr_in>() as libc::socklen_t
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: 0,
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: as above.
            unsafe { std::ptr::write((out as *mut libc::sockaddr_storage).cast(), sin6) };
            size_of::<libc::sockaddr_in6>() as libc::socklen_t
        }
    }
}

/// Reads a socket address the kernel wrote.
pub(super) fn from_sockaddr(
    ss: &libc::sockaddr_storage,
    len: libc::socklen_t,
) -> Option<SocketAddr> {
    let len = len as usize;
    match libc::c_int::from(ss.ss_family) {
        libc::AF_INET if len >= size_of::<libc::sockaddr_in>() => {
            // SAFETY: the family says it is a sockaddr_in, and the storage
            // is aligned for it.
            let sin =
                unsafe { &*(ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            let ip = Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
            Some(SocketAddr::V4(SocketAddrV4::new(
                ip,
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 if len >= size_of::<libc::sockaddr_in6>() => {
            // SAFETY: as above, for sockaddr_in6.
            let sin6 =
                unsafe { &*(ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Some(SocketAddr::V6(SocketAddrV6::new(
                ip,
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// `ppoll(2)`: true if a descriptor is ready, false on timeout or
/// interruption.
pub(super) fn ppoll(pfds: &mut [libc::pollfd], timeout: Option<Duration>) -> io::Result<bool> {
    let ts = timeout.map(|d| libc::timespec {
        tv_sec: d.as_secs().min(libc::time_t::MAX as u64) as libc::time_t,
        tv_nsec: d.subsec_nanos() as _,
    });
    let tsp = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: the pollfds and the optional timespec are valid for the call.
    let r = unsafe {
        libc::ppoll(
            pfds.as_mut_ptr(),
            pfds.len() as libc::nfds_t,
            tsp,
            std::ptr::null(),
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EINTR) {
            return Ok(false);
        }
        return Err(context(e, "poll"));
    }
    Ok(r > 0)
}

/// `ppoll(2)` on one descriptor. Returns whether it is ready; `false` on
/// timeout or interruption.
pub(super) fn wait_fd(
    fd: RawFd,
    events: libc::c_short,
    timeout: Option<Duration>,
) -> io::Result<bool> {
    let mut pfd = [libc::pollfd {
        fd,
        events,
        revents: 0,
    }];
    ppoll(&mut pfd, timeout)
}
