//! UD multicast through IP multicast: the groups a device's QPs are
//! attached to, as the host's UDP stack sees them.
//!
//! Kernel rxe receives a multicast RoCE v2 packet because its device
//! joined the group's IP address (rdma_cm's join sends the IGMP report);
//! rxe-rs does the same from user space, with one UDP socket per group,
//! bound to `(group, 4791)` with `SO_REUSEADDR` and joined on the
//! device's interface. The kernel then gives every such socket on the
//! host its own copy of each datagram to the group, so every process
//! with a QP in the group receives it, the sender's own included (the
//! sending socket keeps `IP_MULTICAST_LOOP` on), as on kernel rxe.
//!
//! The group sockets sit in one epoll set made with the transport. A
//! [`crate::udp::Waiter`] watches its descriptor next to the unicast
//! socket, so a group joined after the waiter was made wakes it too.
//! With no group joined the set stays empty and costs nothing.

use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use socket2::{Domain, Protocol, SockRef, Socket, Type};

use rxe_core::wire::ROCE_V2_PORT;

/// The groups one transport has joined.
#[derive(Debug)]
pub(crate) struct Groups {
    /// The device's address: where groups are joined and sent from.
    local: IpAddr,
    /// Its interface's index (IPv6 joins name the interface by index).
    ifindex: u32,
    epoll: OwnedFd,
    joined: Vec<(IpAddr, UdpSocket)>,
}

impl Groups {
    pub(crate) fn new(local: IpAddr) -> io::Result<Self> {
        // SAFETY: plain system call; the result is checked before use.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let ifindex = crate::route::interface_of(local).map_or(0, |i| i.index);
        Ok(Groups {
            local,
            ifindex,
            // SAFETY: `fd` is a new descriptor that nothing else owns.
            epoll: unsafe { OwnedFd::from_raw_fd(fd) },
            joined: Vec::new(),
        })
    }

    /// Sets what the device's sending socket `s` needs for multicast: the
    /// device's interface (not the route's default) and the same hop
    /// limit as for unicast (`ttl`), as kernel rxe gives a multicast
    /// packet the address vector's hop limit like any other.
    pub(crate) fn configure_sender(&self, s: &OwnedFd, ttl: u8) -> io::Result<()> {
        let s = SockRef::from(s);
        match self.local {
            IpAddr::V4(a) => {
                s.set_multicast_if_v4(&a)?;
                s.set_multicast_ttl_v4(u32::from(ttl))?;
                s.set_multicast_loop_v4(true)
            }
            IpAddr::V6(_) => {
                s.set_multicast_if_v6(self.ifindex)?;
                s.set_multicast_hops_v6(u32::from(ttl))?;
                s.set_multicast_loop_v6(true)
            }
        }
    }

    /// The epoll set's descriptor, readable while a group socket is.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.epoll.as_fd()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.joined.is_empty()
    }

    pub(crate) fn is_joined(&self, group: IpAddr) -> bool {
        self.joined.iter().any(|(g, _)| *g == group)
    }

    /// Joins `group` (a multicast address of the device's family); joining
    /// a group already joined does nothing.
    pub(crate) fn join(&mut self, group: IpAddr) -> io::Result<()> {
        let group = group.to_canonical();
        if self.is_joined(group) {
            return Ok(());
        }
        if !group.is_multicast() || group.is_ipv4() != self.local.is_ipv4() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "join {group}: not a multicast address of {}'s family",
                    self.local
                ),
            ));
        }
        let sock = self
            .open(group)
            .map_err(|e| io::Error::new(e.kind(), format!("join multicast group {group}: {e}")))?;
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: 0,
        };
        // SAFETY: both descriptors are open; `ev` is valid for the call.
        let r = unsafe {
            libc::epoll_ctl(
                self.epoll.as_raw_fd(),
                libc::EPOLL_CTL_ADD,
                sock.as_raw_fd(),
                &mut ev,
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        self.joined.push((group, sock));
        Ok(())
    }

    fn open(&self, group: IpAddr) -> io::Result<UdpSocket> {
        let s = Socket::new(
            Domain::for_address(SocketAddr::new(group, 0)),
            Type::DGRAM,
            Some(Protocol::UDP),
        )?;
        // Every process with a QP in the group binds the same address.
        s.set_reuse_address(true)?;
        s.set_nonblocking(true)?;
        match (group, self.local) {
            (IpAddr::V4(g), IpAddr::V4(l)) => {
                // Only this group's datagrams, joined by whichever socket.
                s.set_multicast_all_v4(false)?;
                s.bind(&SocketAddr::new(group, ROCE_V2_PORT).into())?;
                s.join_multicast_v4(&g, &l)?;
            }
            (IpAddr::V6(g), _) => {
                s.set_only_v6(true)?;
                let at = std::net::SocketAddrV6::new(g, ROCE_V2_PORT, 0, self.ifindex);
                s.bind(&at.into())?;
                s.join_multicast_v6(&g, self.ifindex)?;
            }
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "an IPv4 group on an IPv6 device",
                ))
            }
        }
        Ok(s.into())
    }

    /// Leaves `group`; false if it was not joined.
    pub(crate) fn leave(&mut self, group: IpAddr) -> bool {
        let group = group.to_canonical();
        let Some(i) = self.joined.iter().position(|(g, _)| *g == group) else {
            return false;
        };
        // Closing the socket drops its membership and its place in the
        // epoll set.
        self.joined.swap_remove(i);
        true
    }

    /// Receives what the group sockets hold, at most `limit` datagrams,
    /// into `buf` one at a time: `f(group, from, payload)` for each.
    /// Returns how many it received.
    pub(crate) fn recv(
        &mut self,
        buf: &mut [u8],
        limit: usize,
        mut f: impl FnMut(IpAddr, SocketAddr, &[u8]),
    ) -> usize {
        let mut n = 0;
        for (group, sock) in &self.joined {
            while n < limit {
                match sock.recv_from(buf) {
                    Ok((len, from)) => {
                        n += 1;
                        f(*group, from, &buf[..len.min(buf.len())]);
                    }
                    // EAGAIN, or an error ICMP queued: nothing more here.
                    Err(_) => break,
                }
            }
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_sockets_in_one_group_each_get_the_datagram() {
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        let g: IpAddr = "239.255.77.1".parse().unwrap();
        let mut a = Groups::new(lo).unwrap();
        let mut b = Groups::new(lo).unwrap();
        a.join(g).unwrap();
        b.join(g).unwrap();
        a.join(g).unwrap(); // again: nothing
        assert!(a.is_joined(g));
        let tx = Socket::new(Domain::IPV4, Type::DGRAM, None).unwrap();
        tx.bind(&SocketAddr::new(lo, 0).into()).unwrap();
        let tx: UdpSocket = tx.into();
        let fd = OwnedFd::from(tx.try_clone().unwrap());
        a.configure_sender(&fd, 64).unwrap();
        tx.send_to(b"hello", SocketAddr::new(g, ROCE_V2_PORT))
            .unwrap();
        let mut buf = [0u8; 64];
        for gs in [&mut a, &mut b] {
            let mut got = Vec::new();
            for _ in 0..200 {
                gs.recv(&mut buf, 8, |grp, _, d| got.push((grp, d.to_vec())));
                if !got.is_empty() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            assert_eq!(got, vec![(g, b"hello".to_vec())]);
        }
        assert!(a.leave(g));
        assert!(!a.leave(g));
        assert!(a.is_empty());
        assert!(a.join("10.0.0.1".parse().unwrap()).is_err());
    }
}
