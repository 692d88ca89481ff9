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
//! One process alone pays one byte comparison per packet for all this.
//!
//! What it does not guard against: another program of the same user can
//! bind the names first or send into them, as it could send UDP datagrams
//! to the port; sharing is for cooperating processes, like the kernel's
//! device sharing among one user's processes.

use rxe_core::engine::{IcrcStatus, RecvMeta};
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
    // SAFETY: sockaddr_un is plain data; all zeroes is valid.
    let mut sa: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    sa.sun_family = libc::AF_UNIX as libc::sa_family_t;
    // Abstract namespace: a leading NUL, then the name (not NUL-terminated).
    let text = format!("rxe-rs/v1/{addr}/{prefix}");
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
        // SAFETY: plain system call; a nonnegative result is ours.
        let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return false;
        }
        // SAFETY: fd is open and ours.
        let s = unsafe { OwnedFd::from_raw_fd(fd) };
        let (sa, len) = name(self.addr, prefix);
        // SAFETY: sa is a valid sockaddr_un of `len` bytes.
        unsafe { libc::connect(s.as_raw_fd(), (&sa as *const libc::sockaddr_un).cast(), len) == 0 }
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

    #[test]
    fn the_owner_is_the_top_byte_of_the_destination_qp() {
        let mut bth = [0u8; 12];
        bth[5..8].copy_from_slice(&[0x42, 0x12, 0x34]);
        assert_eq!(dest_prefix(&bth), Some(0x42));
        assert_eq!(dest_prefix(&bth[..11]), None);
    }
}
