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

/// The interface that holds `addr`: its index and MTU (`getifaddrs`, then
/// `/sys/class/net/NAME/mtu`). A loopback address that no interface lists
/// (127.0.0.2 and the rest of 127/8) belongs to `lo`. `None` if no
/// interface has it.
pub fn interface_of(addr: IpAddr) -> Option<Interface> {
    let name = interface_name(addr).or_else(|| addr.is_loopback().then(|| "lo".to_string()))?;
    let c = std::ffi::CString::new(name.clone()).ok()?;
    // SAFETY: a NUL-terminated name.
    let index = unsafe { libc::if_nametoindex(c.as_ptr()) };
    let sys = |f: &str| std::fs::read_to_string(format!("/sys/class/net/{name}/{f}")).ok();
    let mtu = sys("mtu").and_then(|m| m.trim().parse().ok());
    // "up", or "unknown" for lo and others that report no carrier state
    let running = sys("operstate").map(|s| s.trim() != "down");
    Some(Interface {
        index,
        name,
        mtu,
        running,
    })
}

/// A network interface, as [`interface_of`] finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interface {
    pub index: u32,
    pub name: String,
    /// Its MTU in bytes, if sysfs tells.
    pub mtu: Option<u32>,
    /// Whether it carries traffic (its operstate is not `down`), if sysfs
    /// tells.
    pub running: Option<bool>,
}

/// The name of the interface `getifaddrs` lists with `addr`.
fn interface_name(addr: IpAddr) -> Option<String> {
    let mut ifs: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills ifs with a list freed below.
    if unsafe { libc::getifaddrs(&mut ifs) } != 0 {
        return None;
    }
    let mut found = None;
    let mut p = ifs;
    while !p.is_null() {
        // SAFETY: p walks the list getifaddrs made.
        let i = unsafe { &*p };
        // SAFETY: ifa_addr, when set, points to a sockaddr of its family.
        let same =
            unsafe { i.ifa_addr.as_ref() }.is_some_and(|sa| match (sa.sa_family as i32, addr) {
                (libc::AF_INET, IpAddr::V4(v4)) => {
                    // SAFETY: an AF_INET sockaddr is a sockaddr_in.
                    let sin = unsafe { &*(i.ifa_addr as *const libc::sockaddr_in) };
                    u32::from_be(sin.sin_addr.s_addr) == u32::from(v4)
                }
                (libc::AF_INET6, IpAddr::V6(v6)) => {
                    // SAFETY: an AF_INET6 sockaddr is a sockaddr_in6.
                    let sin6 = unsafe { &*(i.ifa_addr as *const libc::sockaddr_in6) };
                    sin6.sin6_addr.s6_addr == v6.octets()
                }
                _ => false,
            });
        if same {
            // SAFETY: ifa_name is the interface's NUL-terminated name.
            found = Some(
                unsafe { std::ffi::CStr::from_ptr(i.ifa_name) }
                    .to_string_lossy()
                    .into_owned(),
            );
            break;
        }
        p = i.ifa_next;
    }
    // SAFETY: the list getifaddrs made.
    unsafe { libc::freeifaddrs(ifs) };
    found
}

/// The active MTU of a port on the interface holding `addr`, as the
/// kernel's rxe sets it from its net device (`rxe_set_mtu`): the largest
/// RoCE MTU that fits the interface's MTU; `None` if the address is on no
/// interface whose MTU can be read.
pub fn port_mtu(addr: IpAddr) -> Option<Mtu> {
    interface_of(addr)?.mtu.and_then(roce_mtu)
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
    fn loopback_addresses_are_on_lo_with_the_largest_mtu() {
        for a in ["127.0.0.1", "127.0.0.2", "::1"] {
            let i = interface_of(a.parse().unwrap()).expect("lo");
            assert_eq!(i.name, "lo", "{a}");
            assert!(i.index > 0);
            assert_eq!(port_mtu(a.parse().unwrap()), Some(Mtu::Mtu4096), "{a}");
        }
        // TEST-NET-1 is on no interface of a test machine
        assert_eq!(interface_of("192.0.2.77".parse().unwrap()), None);
    }

    #[test]
    fn loopback_allows_the_largest() {
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        assert!(link_mtu(lo, lo).unwrap() >= 4096 + 96);
        assert_eq!(path_mtu(lo, lo, Mtu::Mtu4096), Mtu::Mtu4096);
        assert_eq!(path_mtu(lo, lo, Mtu::Mtu1024), Mtu::Mtu1024);
    }
}
