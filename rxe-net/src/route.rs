//! What the host's routing says about a path: the link MTU towards a peer,
//! and from it the RoCE path MTU, as the kernel's rdma_cm derives a route's
//! MTU from its net device (`iboe_get_mtu`).

use rxe_core::types::Mtu;
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;

/// The link MTU of the route from `src` to `dst` (the kernel's path MTU of
/// a UDP socket bound to `src` and connected to `dst`; nothing is sent).
pub fn link_mtu(src: IpAddr, dst: IpAddr) -> io::Result<u32> {
    let sock = UdpSocket::bind(SocketAddr::new(src, 0))?;
    sock.connect(SocketAddr::new(dst, 4791))?;
    let (level, name) = match dst {
        IpAddr::V4(_) => (libc::IPPROTO_IP, libc::IP_MTU),
        IpAddr::V6(_) => (libc::IPPROTO_IPV6, libc::IPV6_MTU),
    };
    let mut mtu: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `mtu` and `len` are valid for the kernel to write.
    let r = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            level,
            name,
            (&mut mtu as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(mtu.max(0) as u32)
}

/// The largest RoCE path MTU whose packets fit a link of `link` bytes:
/// what is left after the largest headers (GRH-sized IP header, UDP, BTH,
/// XRC and atomic extended headers, ICRC: 96 bytes), as the kernel's
/// `iboe_get_mtu` reckons; `None` below 256.
pub fn roce_mtu(link: u32) -> Option<Mtu> {
    let room = link.saturating_sub(40 + 8 + 12 + 4 + 28 + 4) as usize;
    [
        Mtu::Mtu4096,
        Mtu::Mtu2048,
        Mtu::Mtu1024,
        Mtu::Mtu512,
        Mtu::Mtu256,
    ]
    .into_iter()
    .find(|m| m.bytes() <= room)
}

/// The path MTU for a connection from `src` to `dst`: the route's, at most
/// `max` (the device's active MTU). `max` if the route cannot be asked.
pub fn path_mtu(src: IpAddr, dst: IpAddr, max: Mtu) -> Mtu {
    match link_mtu(src, dst).ok().and_then(roce_mtu) {
        Some(m) if (m as u8) < (max as u8) => m,
        _ => max,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_mtus_give_the_kernels_roce_mtus() {
        assert_eq!(roce_mtu(1500), Some(Mtu::Mtu1024));
        assert_eq!(roce_mtu(9000), Some(Mtu::Mtu4096));
        assert_eq!(roce_mtu(4096 + 96), Some(Mtu::Mtu4096));
        assert_eq!(roce_mtu(4096 + 95), Some(Mtu::Mtu2048));
        assert_eq!(roce_mtu(65536), Some(Mtu::Mtu4096));
        assert_eq!(roce_mtu(300), None);
    }

    #[test]
    fn loopback_allows_the_largest() {
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        assert!(link_mtu(lo, lo).unwrap() >= 4096 + 96);
        assert_eq!(path_mtu(lo, lo, Mtu::Mtu4096), Mtu::Mtu4096);
        assert_eq!(path_mtu(lo, lo, Mtu::Mtu1024), Mtu::Mtu1024);
    }
}
