//! Capturing frames from a network interface as they pass:
//! [`LiveCapture`], what `rxe dump -i IFACE` reads.
//!
//! A packet socket (`AF_PACKET`, `SOCK_RAW`, every protocol) bound to one
//! interface sees every frame the interface sends and receives, as tcpdump
//! does; it needs `CAP_NET_RAW` (root). Frames come out as capture
//! [`Record`]s, numbered from 1 and stamped with the time they were read,
//! so everything that reads a capture file reads a live interface too.
//!
//! Two details of Linux that tcpdump (libpcap) handles and so does this:
//!
//! * On the loopback interface every packet passes twice, once going out
//!   and once coming in. The socket is told to ignore outgoing frames
//!   (`PACKET_IGNORE_OUTGOING`) there, so each packet is seen once; on any
//!   other interface both directions are what one wants to see.
//! * The link layer is the interface's: Ethernet for Ethernet and loopback
//!   devices (loopback frames have an all-zero Ethernet header), raw IP for
//!   tunnels without one (`tun`, WireGuard), read from
//!   `/sys/class/net/IFACE/type`.
//!
//! Why not `pnet_datalink`: its channel does not say which direction a frame
//! went, so on loopback every packet would be seen twice.

use crate::capture::Record;
use rxe_core::wire::LinkType;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Largest frame taken whole (bigger ones are cut, their `orig_len` kept).
const SNAPLEN: usize = 65_536;

/// `ARPHRD_*` link types of `/sys/class/net/IFACE/type`.
const ARPHRD_ETHER: u32 = 1;
const ARPHRD_LOOPBACK: u32 = 772;
const ARPHRD_NONE: u32 = 0xfffe;
/// `SOL_PACKET` options (linux/if_packet.h); the first Linux 4.20 and later.
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
const PACKET_STATISTICS: libc::c_int = 6;
/// The socket's receive buffer, as large as tcpdump's default: a busy
/// loopback fills the kernel's default (about 200 KiB) in a blink.
const RCVBUF: libc::c_int = 4 << 20;

/// Frames from one interface, as they pass.
#[derive(Debug)]
pub struct LiveCapture {
    fd: OwnedFd,
    iface: String,
    link: LinkType,
    buf: Vec<u8>,
    next_number: u64,
    drops: u64,
}

fn context(e: io::Error, what: String) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

impl LiveCapture {
    /// Opens a capture of `iface`. Fails with a message that says what to
    /// do if the process lacks `CAP_NET_RAW`.
    pub fn open(iface: &str) -> io::Result<LiveCapture> {
        let kind: u32 = std::fs::read_to_string(format!("/sys/class/net/{iface}/type"))
            .map_err(|e| context(e, format!("no interface {iface:?}")))?
            .trim()
            .parse()
            .map_err(|_| io::Error::other(format!("{iface}: unreadable link type")))?;
        let link = match kind {
            ARPHRD_ETHER | ARPHRD_LOOPBACK => LinkType::Ethernet,
            ARPHRD_NONE => LinkType::RawIp,
            other => {
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    format!("{iface}: link type {other} (only Ethernet, loopback and raw IP)"),
                ))
            }
        };
        let name = std::ffi::CString::new(iface)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface name with NUL"))?;
        // SAFETY: if_nametoindex reads a NUL-terminated string.
        let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
        if index == 0 {
            return Err(context(
                io::Error::last_os_error(),
                format!("interface {iface}"),
            ));
        }
        let proto = (libc::ETH_P_ALL as u16).to_be();
        // SAFETY: plain socket(2) call; the descriptor is owned below.
        let raw = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::c_int::from(proto),
            )
        };
        if raw < 0 {
            let e = io::Error::last_os_error();
            let hint = if e.kind() == io::ErrorKind::PermissionDenied {
                " (capturing needs root or CAP_NET_RAW; or record with RXE_PCAP instead)"
            } else {
                ""
            };
            return Err(context(e, format!("open a packet socket{hint}")));
        }
        // SAFETY: `raw` is a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: sockaddr_ll is plain data; all-zero is a valid start.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = proto;
        sll.sll_ifindex = index as i32;
        // SAFETY: bind(2) with a sockaddr_ll of the right size.
        let r = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(context(
                io::Error::last_os_error(),
                format!("bind to {iface}"),
            ));
        }
        // Room for bursts: SO_RCVBUFFORCE (root) past rmem_max, else as
        // much as SO_RCVBUF allows. Failing both is no reason to stop.
        for opt in [libc::SO_RCVBUFFORCE, libc::SO_RCVBUF] {
            // SAFETY: setsockopt(2) with an int option.
            let r = unsafe {
                libc::setsockopt(
                    fd.as_raw_fd(),
                    libc::SOL_SOCKET,
                    opt,
                    (&RCVBUF as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
            if r == 0 {
                break;
            }
        }
        if kind == ARPHRD_LOOPBACK {
            let one: libc::c_int = 1;
            // SAFETY: setsockopt(2) with an int option.
            let r = unsafe {
                libc::setsockopt(
                    fd.as_raw_fd(),
                    libc::SOL_PACKET,
                    PACKET_IGNORE_OUTGOING,
                    (&one as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
            if r < 0 {
                return Err(context(
                    io::Error::last_os_error(),
                    format!("{iface}: ignore outgoing copies (Linux 4.20 or later)"),
                ));
            }
        }
        Ok(LiveCapture {
            fd,
            iface: iface.to_string(),
            link,
            buf: vec![0; SNAPLEN],
            next_number: 1,
            drops: 0,
        })
    }

    /// Frames the kernel dropped so far because this socket's buffer was
    /// full (what tcpdump reports as "dropped by kernel").
    pub fn drops(&mut self) -> u64 {
        let mut st = [0u32; 2]; // struct tpacket_stats { tp_packets, tp_drops }
        let mut len = std::mem::size_of_val(&st) as libc::socklen_t;
        // SAFETY: getsockopt(2) into a buffer of the size given; the
        // kernel resets its counters on each read, so they are summed.
        let r = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                PACKET_STATISTICS,
                st.as_mut_ptr().cast(),
                &mut len,
            )
        };
        if r == 0 {
            self.drops += u64::from(st[1]);
        }
        self.drops
    }

    /// The interface.
    pub fn iface(&self) -> &str {
        &self.iface
    }

    /// The link type of its frames.
    pub fn link_type(&self) -> LinkType {
        self.link
    }

    /// The next frame, waiting at most `timeout` (for ever if `None`);
    /// `Ok(None)` if none came in time.
    pub fn next_frame(&mut self, timeout: Option<Duration>) -> io::Result<Option<Record>> {
        let ms = timeout.map_or(-1, |t| t.as_millis().min(i32::MAX as u128) as i32);
        let mut pfd = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll(2) on one pollfd.
        let r = unsafe { libc::poll(&mut pfd, 1, ms) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                return Ok(None);
            }
            return Err(context(e, format!("wait for frames on {}", self.iface)));
        }
        if r == 0 {
            return Ok(None);
        }
        // SAFETY: recv(2) into our own buffer of its length; MSG_TRUNC
        // makes it return the frame's real length.
        let n = unsafe {
            libc::recv(
                self.fd.as_raw_fd(),
                self.buf.as_mut_ptr().cast(),
                self.buf.len(),
                libc::MSG_TRUNC | libc::MSG_DONTWAIT,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
            ) {
                return Ok(None);
            }
            return Err(context(e, format!("read a frame on {}", self.iface)));
        }
        let orig = n as usize;
        let data = self.buf[..orig.min(self.buf.len())].to_vec();
        let number = self.next_number;
        self.next_number += 1;
        Ok(Some(Record {
            number,
            timestamp: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default(),
            link_type: self.link,
            orig_len: orig.min(u32::MAX as usize) as u32,
            data,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_interface_is_named() {
        let e = LiveCapture::open("rxe-no-such-if0").unwrap_err();
        assert!(e.to_string().contains("rxe-no-such-if0"), "{e}");
    }

    /// Root only: datagrams sent on loopback are seen, each once.
    #[test]
    fn loopback_frames_are_seen_once() {
        let mut cap = match LiveCapture::open("lo") {
            Ok(c) => c,
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                eprintln!("skipped: {e}");
                return;
            }
            Err(e) => panic!("{e}"),
        };
        assert_eq!(cap.link_type(), LinkType::Ethernet);
        let rx = std::net::UdpSocket::bind("127.0.9.77:0").unwrap();
        let tx = std::net::UdpSocket::bind("127.0.9.78:0").unwrap();
        let marker = b"rxe-rs live capture marker 5b1f";
        for _ in 0..3 {
            tx.send_to(marker, rx.local_addr().unwrap()).unwrap();
        }
        let mut seen = 0;
        let mut until = std::time::Instant::now() + Duration::from_secs(5);
        while std::time::Instant::now() < until {
            if let Some(r) = cap.next_frame(Some(Duration::from_millis(50))).unwrap() {
                if r.data.windows(marker.len()).any(|w| w == marker) {
                    seen += 1;
                    if seen == 3 {
                        // Long enough for outgoing copies to show up.
                        until = std::time::Instant::now() + Duration::from_millis(300);
                    }
                }
            }
        }
        assert_eq!(seen, 3, "each datagram once, not twice");
    }
}
