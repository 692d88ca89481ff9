//! Several processes on one soft-device address, as with a kernel device
//! (a test's server and client, MPI ranks on one host).
//!
//! Every [`crate::udp::UdpTransport`] binds `ADDR:4791` with `SO_REUSEPORT`,
//! so the kernel lets several sockets (of the same user) share the address
//! and hands each arriving datagram to one of them, chosen by a hash of the
//! peer's address and port. Which process owns a packet is told by its
//! destination QP number: each transport claims a *prefix*, the top 8 bits
//! of every QP number its engine hands out (`EngineConfig::qpn_prefix`), by
//! binding the abstract Unix datagram socket `rxe-rs/v1/ADDR/PREFIX`. The
//! kernel releases that name when the process ends, however it ends, so no
//! file is left behind and no registry can go stale.
//!
//! A datagram for another prefix is passed on to that socket (a
//! *forward*), with where it came from and its ICRC verdict in front, and
//! the owner takes it in as if from the wire. A datagram for a prefix
//! nobody holds is dropped and counted, as a kernel drops a packet for an
//! unknown QP. In raw receive mode every process sees every packet anyway,
//! so there others' packets are only skipped.
//!
//! QP 1, where the connection manager's MADs arrive, belongs to every
//! process, so a MAD is routed on what it says ([`cm_route`]): a REQ or
//! SIDR_REQ goes to the process that listens on its service ID (which
//! claims the abstract names `rxe-rs/v1/ADDR/svc/SID` and
//! `rxe-rs/v1/ADDR/svc/SID/PREFIX`, [`Share::claim_service`]); any other
//! CM message to the process whose prefix tops the ID it names (each CM
//! agent hands out communication IDs with its prefix on top). A MAD that no
//! process owns (a REQ nobody listens for) is answered by the process that
//! receives it, or in raw mode by the holder of the lowest held prefix.
//!
//! One process alone pays one byte comparison per packet for all this.
//!
//! What it does not guard against: another program of the same user can
//! bind the names first or send into them, as it could send UDP datagrams
//! to the port; sharing is for cooperating processes, like the kernel's
//! device sharing among one user's processes.

use rxe_core::engine::{IcrcStatus, RecvMeta};
use rxe_core::mad::{cm_route, CmRoute};
use std::io;
use std::net::{IpAddr, Ipv6Addr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// What precedes a forwarded datagram: a magic, the source address (as
/// IPv6, IPv4-mapped), the source port and the ICRC verdict.
const MAGIC: &[u8; 4] = b"RXF1";
const HEADER: usize = 4 + 16 + 2 + 1;

/// The prefixes a transport may claim (0 would give QP numbers below 16,
/// 255 the top ones, which are kept clear).
const PREFIXES: std::ops::RangeInclusive<u8> = 1..=254;

/// A transport's claim on a share of its address.
#[derive(Debug)]
pub struct Share {
    addr: IpAddr,
    prefix: u8,
    sock: OwnedFd,
    /// For raw mode: whether each prefix is held, as last looked up
    /// (`1 + 2 * milliseconds since `born` | held`, 0: never).
    held: Box<[AtomicU64; 256]>,
    born: Instant,
}

/// How long a look-up of whether a prefix is held counts.
const HELD_FOR: Duration = Duration::from_millis(100);

/// What became of a forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forward {
    /// Passed on.
    Sent,
    /// The holder's queue is full: the datagram is lost (the protocol
    /// retries, as for any loss).
    Full,
    /// Nobody holds the prefix.
    Nobody,
}

/// The owner of a datagram: the top 8 bits of the destination QP in its
/// BTH (`None` for a datagram too short to carry one; the engine counts
/// it as malformed).
pub fn dest_prefix(payload: &[u8]) -> Option<u8> {
    (payload.len() >= 12).then(|| payload[5])
}

fn name(addr: IpAddr, prefix: u8) -> (libc::sockaddr_un, libc::socklen_t) {
    abstract_name(&format!("rxe-rs/v1/{addr}/{prefix}"))
}

/// The name that says a process listens on service `sid` at `addr`
/// (`holder`: the name that also says which prefix it holds).
fn service_name(
    addr: IpAddr,
    sid: u64,
    holder: Option<u8>,
) -> (libc::sockaddr_un, libc::socklen_t) {
    match holder {
        None => abstract_name(&format!("rxe-rs/v1/{addr}/svc/{sid:016x}")),
        Some(p) => abstract_name(&format!("rxe-rs/v1/{addr}/svc/{sid:016x}/{p}")),
    }
}

fn abstract_name(text: &str) -> (libc::sockaddr_un, libc::socklen_t) {
    // SAFETY: sockaddr_un is plain data; all zeroes is valid.
    let mut sa: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    sa.sun_family = libc::AF_UNIX as libc::sa_family_t;
    // Abstract namespace: a leading NUL, then the name (not NUL-terminated).
    for (d, b) in sa.sun_path[1..].iter_mut().zip(text.bytes()) {
        *d = b as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + 1 + text.len();
    (sa, len as libc::socklen_t)
}

impl Share {
    /// Claims a free prefix for `addr`, trying them in a random order (so
    /// that QP numbers stay hard to guess).
    pub fn claim(addr: IpAddr, seed: u64) -> io::Result<Share> {
        // SAFETY: plain system call; a nonnegative result is ours.
        let fd = unsafe {
            libc::socket(
                libc::AF_UNIX,
                libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is open and ours.
        let sock = unsafe { OwnedFd::from_raw_fd(fd) };
        let n = PREFIXES.len() as u64;
        // A permutation of the prefixes: start anywhere, step by a number
        // prime to their count (254 = 2 * 127, so any odd step but 127).
        let start = seed % n;
        let step = [1u64, 3, 5, 7, 9, 11, 13][(seed >> 32) as usize % 7];
        for i in 0..n {
            let prefix = *PREFIXES.start() + ((start + i * step) % n) as u8;
            let (sa, len) = name(addr, prefix);
            // SAFETY: sa is a valid sockaddr_un of `len` bytes.
            let r = unsafe {
                libc::bind(
                    sock.as_raw_fd(),
                    (&sa as *const libc::sockaddr_un).cast(),
                    len,
                )
            };
            if r == 0 {
                return Ok(Share {
                    addr,
                    prefix,
                    sock,
                    held: Box::new(std::array::from_fn(|_| AtomicU64::new(0))),
                    born: Instant::now(),
                });
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EADDRINUSE) {
                return Err(e);
            }
        }
        Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!(
                "{addr}:4791 is shared by {} processes already, the most it can be",
                PREFIXES.len()
            ),
        ))
    }

    /// The prefix of this transport's QP numbers.
    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    /// The descriptor forwarded datagrams arrive on (for waiting).
    pub fn fd(&self) -> &OwnedFd {
        &self.sock
    }

    /// Whether a process holds `prefix` (looked up at most every
    /// [`HELD_FOR`]): in raw mode, a packet for a held prefix is its
    /// holder's to take, one for a free prefix this process's engine's.
    pub fn is_held(&self, prefix: u8) -> bool {
        let now = self.born.elapsed().as_millis() as u64;
        let cell = &self.held[usize::from(prefix)];
        let v = cell.load(Ordering::Relaxed);
        if v != 0 && now.saturating_sub((v - 1) >> 1) < HELD_FOR.as_millis() as u64 {
            return (v - 1) & 1 == 1;
        }
        let held = prefix == self.prefix || self.probe(prefix);
        cell.store(1 + ((now << 1) | u64::from(held)), Ordering::Relaxed);
        held
    }

    /// Whether the name of `prefix` is bound (a `connect` to it succeeds).
    fn probe(&self, prefix: u8) -> bool {
        let (sa, len) = name(self.addr, prefix);
        is_bound(&sa, len)
    }

    /// Claims service `sid` (a CM listener's service ID) at this address
    /// for this process: REQs and SIDR_REQs for it that another process
    /// receives are passed on here. Fails with `AddrInUse` if a process
    /// (this one included) holds it already, as a second listener on one
    /// port fails with the kernel's rdma_cm. The claim ends when the
    /// returned value is dropped or the process ends.
    pub fn claim_service(&self, sid: u64) -> io::Result<ServiceClaim> {
        let exclusive = bound_socket(service_name(self.addr, sid, None)).map_err(|e| {
            if e.raw_os_error() == Some(libc::EADDRINUSE) {
                io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!(
                        "service {sid:#018x} at {} has a listener already",
                        self.addr
                    ),
                )
            } else {
                e
            }
        })?;
        let lookup = bound_socket(service_name(self.addr, sid, Some(self.prefix)))?;
        Ok(ServiceClaim {
            _exclusive: exclusive,
            _lookup: lookup,
        })
    }

    /// The prefix of the process listening on service `sid` at this
    /// address (maybe this one), if any.
    pub fn service_owner(&self, sid: u64) -> Option<u8> {
        let (sa, len) = service_name(self.addr, sid, None);
        if !is_bound(&sa, len) {
            return None;
        }
        PREFIXES.into_iter().find(|&p| {
            (p == self.prefix || self.is_held(p)) && {
                let (sa, len) = service_name(self.addr, sid, Some(p));
                is_bound(&sa, len)
            }
        })
    }

    /// The prefix whose holder should take a datagram: the owner of its
    /// destination QP, or for a MAD to QP 1 the CM agent it names
    /// ([`cm_route`]). `None`: whichever process receives it.
    pub fn owner(&self, payload: &[u8]) -> Option<u8> {
        match cm_route(payload) {
            None => dest_prefix(payload),
            Some(CmRoute::Agent(p)) => Some(p),
            Some(CmRoute::Service(sid)) => self.service_owner(sid),
            Some(CmRoute::Any) => None,
        }
    }

    /// Whether this process answers a MAD that no agent owns, in raw mode
    /// (where every process sees every packet): the holder of the lowest
    /// held prefix does, so that one answer goes out, not one per process.
    pub fn answers_unowned(&self) -> bool {
        (*PREFIXES.start()..self.prefix).all(|p| !self.is_held(p))
    }

    /// Passes a datagram on to the holder of `prefix`.
    pub fn forward(&self, prefix: u8, meta: &RecvMeta, payload: &[u8]) -> Forward {
        let mut head = [0u8; HEADER];
        head[..4].copy_from_slice(MAGIC);
        let src = match meta.src {
            IpAddr::V4(a) => a.to_ipv6_mapped(),
            IpAddr::V6(a) => a,
        };
        head[4..20].copy_from_slice(&src.octets());
        head[20..22].copy_from_slice(&meta.src_port.to_be_bytes());
        head[22] = match meta.icrc {
            IcrcStatus::Ok => 0,
            IcrcStatus::Bad => 1,
            IcrcStatus::Unverified => 2,
        };
        let (mut sa, len) = name(self.addr, prefix);
        let mut iov = [
            libc::iovec {
                iov_base: head.as_mut_ptr().cast(),
                iov_len: HEADER,
            },
            libc::iovec {
                iov_base: payload.as_ptr().cast_mut().cast(),
                iov_len: payload.len(),
            },
        ];
        // SAFETY: msghdr is plain data; all zeroes is valid.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_name = (&mut sa as *mut libc::sockaddr_un).cast();
        msg.msg_namelen = len;
        msg.msg_iov = iov.as_mut_ptr();
        msg.msg_iovlen = 2;
        // SAFETY: every pointer in msg is live for the call; the kernel
        // only reads them.
        if unsafe { libc::sendmsg(self.sock.as_raw_fd(), &msg, libc::MSG_DONTWAIT) } >= 0 {
            return Forward::Sent;
        }
        match io::Error::last_os_error().raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::ENOBUFS) => Forward::Full,
            _ => Forward::Nobody,
        }
    }

    /// Takes one forwarded datagram into `buf`, without waiting: its
    /// metadata (with this transport's address as the destination) and
    /// the payload's range in `buf`. `None` when nothing is queued;
    /// something that is not a forward of ours is skipped.
    pub fn recv(&self, buf: &mut [u8]) -> Option<(RecvMeta, std::ops::Range<usize>)> {
        loop {
            // SAFETY: reads at most buf.len() bytes into buf.
            let n = unsafe {
                libc::recv(
                    self.sock.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            if n < 0 {
                return None;
            }
            let n = n as usize;
            if n < HEADER || &buf[..4] != MAGIC || buf[22] > 2 {
                continue;
            }
            let mut src = [0u8; 16];
            src.copy_from_slice(&buf[4..20]);
            let src = Ipv6Addr::from(src);
            let meta = RecvMeta {
                src: match src.to_ipv4_mapped() {
                    Some(v4) if self.addr.is_ipv4() => IpAddr::V4(v4),
                    _ => IpAddr::V6(src),
                },
                dst: self.addr,
                src_port: u16::from_be_bytes([buf[20], buf[21]]),
                icrc: match buf[22] {
                    0 => IcrcStatus::Ok,
                    1 => IcrcStatus::Bad,
                    _ => IcrcStatus::Unverified,
                },
            };
            return Some((meta, HEADER..n));
        }
    }
}

/// A process's claim on a service ID ([`Share::claim_service`]).
#[derive(Debug)]
pub struct ServiceClaim {
    _exclusive: OwnedFd,
    _lookup: OwnedFd,
}

/// Whether an abstract name is bound (a `connect` to it succeeds).
fn is_bound(sa: &libc::sockaddr_un, len: libc::socklen_t) -> bool {
    // SAFETY: plain system call; a nonnegative result is ours.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return false;
    }
    // SAFETY: fd is open and ours.
    let s = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: sa is a valid sockaddr_un of `len` bytes.
    unsafe { libc::connect(s.as_raw_fd(), (sa as *const libc::sockaddr_un).cast(), len) == 0 }
}

/// A datagram socket bound to an abstract name (never read: the name is
/// the claim).
fn bound_socket((sa, len): (libc::sockaddr_un, libc::socklen_t)) -> io::Result<OwnedFd> {
    // SAFETY: plain system call; a nonnegative result is ours.
    let fd = unsafe {
        libc::socket(
            libc::AF_UNIX,
            libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is open and ours.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: sa is a valid sockaddr_un of `len` bytes.
    let r = unsafe {
        libc::bind(
            sock.as_raw_fd(),
            (&sa as *const libc::sockaddr_un).cast(),
            len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(sock)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(src: &str) -> RecvMeta {
        RecvMeta {
            src: src.parse().unwrap(),
            dst: "127.0.9.1".parse().unwrap(),
            src_port: 50123,
            icrc: IcrcStatus::Unverified,
        }
    }

    #[test]
    fn two_claims_get_two_prefixes_and_forward_to_each_other() {
        let addr: IpAddr = "127.0.9.1".parse().unwrap();
        let a = Share::claim(addr, 7).unwrap();
        let b = Share::claim(addr, 7).unwrap();
        assert_ne!(a.prefix(), b.prefix());
        assert!(PREFIXES.contains(&a.prefix()) && PREFIXES.contains(&b.prefix()));
        let payload: Vec<u8> = (0..64).collect();
        assert_eq!(
            a.forward(b.prefix(), &meta("127.0.9.2"), &payload),
            Forward::Sent
        );
        assert!(a.is_held(b.prefix()));
        let mut buf = vec![0u8; 4096];
        let (m, r) = b.recv(&mut buf).expect("the forward arrives");
        assert_eq!(m, meta("127.0.9.2"));
        assert_eq!(&buf[r], &payload[..]);
        assert!(b.recv(&mut buf).is_none());
        // Nobody holds this prefix once its claim is dropped.
        let gone = b.prefix();
        drop(b);
        assert_eq!(
            a.forward(gone, &meta("127.0.9.2"), &payload),
            Forward::Nobody
        );
        assert!(!a.probe(gone));
    }

    #[test]
    fn every_prefix_can_be_claimed_once() {
        let addr: IpAddr = "127.0.9.3".parse().unwrap();
        let claims: Vec<Share> = PREFIXES
            .map(|i| Share::claim(addr, u64::from(i) * 0x1_0000_0001).unwrap())
            .collect();
        let mut seen: Vec<u8> = claims.iter().map(Share::prefix).collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), PREFIXES.len());
        let e = Share::claim(addr, 1).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
    }

    /// A CM MAD to QP 1 (attribute `attr`) with a 32-bit ID at data
    /// offset 4 and a service ID at data offset 8.
    fn mad_packet(attr: u16, id_at_4: u32, sid: u64) -> Vec<u8> {
        let mut p = vec![0u8; 12 + 8 + 256 + 4];
        p[0] = 0x64; // UD SEND ONLY
        p[7] = 1; // to QP 1
        let mad = &mut p[20..];
        mad[0] = 1;
        mad[1] = 0x07;
        mad[2] = 2;
        mad[16..18].copy_from_slice(&attr.to_be_bytes());
        mad[24 + 4..24 + 8].copy_from_slice(&id_at_4.to_be_bytes());
        mad[24 + 8..24 + 16].copy_from_slice(&sid.to_be_bytes());
        p
    }

    #[test]
    fn mads_go_to_the_listener_or_to_the_agent_their_id_names() {
        let addr: IpAddr = "127.0.9.5".parse().unwrap();
        let a = Share::claim(addr, 11).unwrap();
        let b = Share::claim(addr, 12).unwrap();
        let sid = 0x0106_1c06;
        let req = mad_packet(0x10, 0, sid);
        assert_eq!(a.owner(&req), None, "nobody listens yet");
        let claim = b.claim_service(sid).unwrap();
        assert_eq!(a.service_owner(sid), Some(b.prefix()));
        assert_eq!(b.service_owner(sid), Some(b.prefix()));
        assert_eq!(a.owner(&req), Some(b.prefix()));
        // One listener per service and address, in this process or another.
        let e = a.claim_service(sid).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
        assert!(e.to_string().contains("127.0.9.5"), "{e}");
        assert_eq!(
            b.claim_service(sid).unwrap_err().kind(),
            io::ErrorKind::AddrInUse
        );
        // Answers and follow-ups go by the receiver's own ID.
        let rep = mad_packet(0x13, u32::from(a.prefix()) << 24 | 0x1234, 0);
        assert_eq!(b.owner(&rep), Some(a.prefix()));
        // Other QPs by their prefix, as before.
        let mut data = mad_packet(0x10, 0, sid);
        data[5..8].copy_from_slice(&[0x42, 0, 9]);
        assert_eq!(a.owner(&data), Some(0x42));
        // The claim ends with its value.
        drop(claim);
        assert_eq!(a.service_owner(sid), None);
        a.claim_service(sid).expect("free again");
        // In raw mode, the lowest held prefix answers what nobody owns.
        let (low, high) = if a.prefix() < b.prefix() {
            (&a, &b)
        } else {
            (&b, &a)
        };
        assert!(low.answers_unowned());
        assert!(!high.answers_unowned());
    }

    #[test]
    fn the_owner_is_the_top_byte_of_the_destination_qp() {
        let mut bth = [0u8; 12];
        bth[5..8].copy_from_slice(&[0x42, 0x12, 0x34]);
        assert_eq!(dest_prefix(&bth), Some(0x42));
        assert_eq!(dest_prefix(&bth[..11]), None);
    }
}
