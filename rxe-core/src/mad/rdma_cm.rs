//! What rdma_cm (the Linux kernel's `drivers/infiniband/core/cma.c`, and
//! librdmacm over it) puts into CM messages when it connects IP addresses.
//!
//! * **Service IDs.** A listener on a port of a port space listens on the
//!   service ID `port_space << 16 | port` (`cma_get_service_id`), so an
//!   `rdma_listen` on TCP port 7174 takes REQs for 0x0000_0000_0106_1C06.
//!   The IBTA's annex A11 ("RDMA IP CM Service") calls the upper 40 bits
//!   the IP CM service-ID prefix 0x0000_0000_01 and the next byte the
//!   protocol (0x06 TCP, 0x11 UDP, 0x3F IB); rdma_cm's port-space numbers
//!   are exactly those 16 bits.
//! * **The private-data header** (`struct cma_hdr`, annex A11.4): the first
//!   36 bytes of the private data of a REQ (and of a SIDR_REQ) carry the
//!   addresses the application connected with, so that the passive side
//!   can tell its listeners apart by IP address:
//!
//! ```text
//!  0               1               2               3
//! +---------------+-------+-------+-------------------------------+
//! | CMA version 0 |IP ver | resv  |  source port (active side's)  |  0
//! +---------------+-------+-------+-------------------------------+
//! |                source IP address (16 bytes)                   |  4
//! +---------------------------------------------------------------+
//! |              destination IP address (16 bytes)                | 20
//! +---------------------------------------------------------------+
//! ```
//! An IPv4 address takes the last 4 of its 16 bytes, after 12 zero bytes
//! (the kernel's `union cma_ip_addr`; not the `::ffff:` mapping GIDs use).
//! The application's own private data follows the header, so a REQ leaves
//! it 92 − 36 = 56 bytes and a SIDR_REQ 216 − 36 = 180. The REP, REJ, RTU,
//! DREQ and DREP private data is the application's alone. The destination
//! port is in the service ID, not the header.

use super::{Error, Result};
use core::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// An rdma_cm port space (`enum rdma_ucm_port_space`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PortSpace(pub u16);

impl PortSpace {
    /// RDMA_PS_IPOIB.
    pub const IPOIB: PortSpace = PortSpace(0x0002);
    /// RDMA_PS_TCP: connected QPs (RC), what `rping` and `ucmatose` use.
    pub const TCP: PortSpace = PortSpace(0x0106);
    /// RDMA_PS_UDP: UD QPs resolved through SIDR, what `udaddy` uses.
    pub const UDP: PortSpace = PortSpace(0x0111);
    /// RDMA_PS_IB: any QP type, native IB addressing (AF_IB).
    pub const IB: PortSpace = PortSpace(0x013f);

    /// The service ID a listener on `port` in this port space listens on.
    pub const fn service_id(self, port: u16) -> u64 {
        ((self.0 as u64) << 16) | port as u64
    }

    /// Splits a service ID into port space and port, if it is one that
    /// rdma_cm makes (a known port space in bits 16–31, zero above).
    pub fn from_service_id(service_id: u64) -> Option<(PortSpace, u16)> {
        if service_id >> 32 != 0 {
            return None;
        }
        let ps = PortSpace((service_id >> 16) as u16);
        ps.name()?;
        Some((ps, service_id as u16))
    }

    /// "TCP", "UDP", "IB" or "IPOIB", if it is one of those.
    pub fn name(self) -> Option<&'static str> {
        Some(match self {
            Self::IPOIB => "IPOIB",
            Self::TCP => "TCP",
            Self::UDP => "UDP",
            Self::IB => "IB",
            _ => return None,
        })
    }
}

impl fmt::Display for PortSpace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "port space {:#06x}", self.0),
        }
    }
}

/// Length of the rdma_cm private-data header.
pub const CMA_HEADER_LEN: usize = 36;
/// The only header version (`CMA_VERSION`).
pub const CMA_VERSION: u8 = 0;

/// The rdma_cm private-data header (`struct cma_hdr`) at the start of a
/// REQ's or SIDR_REQ's private data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmaHeader {
    /// The active side's port (the passive side's is in the service ID).
    pub src_port: u16,
    /// The active side's address.
    pub src: IpAddr,
    /// The address the active side connected to.
    pub dst: IpAddr,
}

impl CmaHeader {
    /// Reads the header from the start of `private_data`. Fails if there
    /// are fewer than 36 bytes, the version is not 0, the IP version is
    /// neither 4 nor 6; the reserved nibble and the zero bytes in front of
    /// an IPv4 address are not checked. Source and destination have the
    /// same version.
    pub fn parse(private_data: &[u8]) -> Result<Self> {
        let b = private_data
            .get(..CMA_HEADER_LEN)
            .ok_or(Error::CmaTruncated {
                need: CMA_HEADER_LEN,
                have: private_data.len(),
            })?;
        if b[0] != CMA_VERSION {
            return Err(Error::BadCmaVersion(b[0]));
        }
        let addr = |at: usize| -> [u8; 16] {
            let mut a = [0u8; 16];
            a.copy_from_slice(&b[at..at + 16]);
            a
        };
        let (src, dst) = match b[1] >> 4 {
            4 => {
                let v4 = |a: [u8; 16]| IpAddr::V4(Ipv4Addr::new(a[12], a[13], a[14], a[15]));
                (v4(addr(4)), v4(addr(20)))
            }
            6 => (
                IpAddr::V6(Ipv6Addr::from(addr(4))),
                IpAddr::V6(Ipv6Addr::from(addr(20))),
            ),
            v => return Err(Error::BadCmaIpVersion(v)),
        };
        Ok(CmaHeader {
            src_port: u16::from_be_bytes([b[2], b[3]]),
            src,
            dst,
        })
    }

    /// Bytes [`Self::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        CMA_HEADER_LEN
    }

    /// The IP version the header declares: 6 if either address is IPv6
    /// (the other is then written IPv4-mapped), else 4.
    pub fn ip_version(&self) -> u8 {
        if self.src.is_ipv6() || self.dst.is_ipv6() {
            6
        } else {
            4
        }
    }

    /// Writes the header into the first 36 bytes of `private_data`.
    /// Returns [`Error::CmaTruncated`] if it is shorter.
    pub fn emit(&self, private_data: &mut [u8]) -> Result<()> {
        let have = private_data.len();
        let b = private_data
            .get_mut(..CMA_HEADER_LEN)
            .ok_or(Error::CmaTruncated {
                need: CMA_HEADER_LEN,
                have,
            })?;
        let v6 = self.ip_version() == 6;
        let bytes = |a: IpAddr| -> [u8; 16] {
            match a {
                IpAddr::V6(a) => a.octets(),
                IpAddr::V4(a) if v6 => a.to_ipv6_mapped().octets(),
                IpAddr::V4(a) => {
                    let mut x = [0u8; 16];
                    x[12..].copy_from_slice(&a.octets());
                    x
                }
            }
        };
        b[0] = CMA_VERSION;
        b[1] = self.ip_version() << 4;
        b[2..4].copy_from_slice(&self.src_port.to_be_bytes());
        b[4..20].copy_from_slice(&bytes(self.src));
        b[20..36].copy_from_slice(&bytes(self.dst));
        Ok(())
    }
}

impl fmt::Display for CmaHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let port = self.src_port;
        match self.src {
            IpAddr::V4(a) => write!(f, "rdma_cm {a}:{port} -> {}", self.dst),
            IpAddr::V6(a) => write!(f, "rdma_cm [{a}]:{port} -> {}", self.dst),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_ids() {
        // rping's default port 7174 in the TCP port space: REQ service ID
        // 0x0000000001061c06, as in tests/data/pcaps/rping.pcap.
        assert_eq!(PortSpace::TCP.service_id(7174), 0x0000_0000_0106_1c06);
        assert_eq!(PortSpace::UDP.service_id(7174), 0x0000_0000_0111_1c06);
        assert_eq!(PortSpace::IB.service_id(1), 0x0000_0000_013f_0001);
        assert_eq!(PortSpace::IPOIB.service_id(2), 0x0000_0000_0002_0002);
        assert_eq!(
            PortSpace::from_service_id(0x0106_1c06),
            Some((PortSpace::TCP, 7174))
        );
        assert_eq!(PortSpace::from_service_id(0x0107_1c06), None);
        assert_eq!(PortSpace::from_service_id(1 << 40 | 0x0106_1c06), None);
        assert_eq!(PortSpace::TCP.to_string(), "TCP");
    }

    #[test]
    fn header_v4_and_v6() {
        // The first 36 bytes of rping.pcap's REQ private data.
        let mut want = [0u8; 36];
        want[1] = 0x40;
        want[2..4].copy_from_slice(&[0x8e, 0x7d]);
        want[16..20].copy_from_slice(&[10, 99, 0, 12]);
        want[32..36].copy_from_slice(&[10, 99, 0, 11]);
        let h = CmaHeader::parse(&want).unwrap();
        assert_eq!(
            h,
            CmaHeader {
                src_port: 0x8e7d,
                src: "10.99.0.12".parse().unwrap(),
                dst: "10.99.0.11".parse().unwrap(),
            }
        );
        assert_eq!(h.to_string(), "rdma_cm 10.99.0.12:36477 -> 10.99.0.11");
        let mut out = [0xffu8; 40];
        h.emit(&mut out).unwrap();
        assert_eq!(out[..36], want);
        assert_eq!(out[36..], [0xff; 4]);

        let h6 = CmaHeader {
            src_port: 1,
            src: "fe80::1".parse().unwrap(),
            dst: "10.0.0.1".parse().unwrap(),
        };
        let mut b = [0u8; 36];
        h6.emit(&mut b).unwrap();
        assert_eq!(b[1], 0x60);
        let back = CmaHeader::parse(&b).unwrap();
        assert_eq!(back.src, h6.src);
        assert_eq!(back.dst, "::ffff:10.0.0.1".parse::<IpAddr>().unwrap());

        assert_eq!(
            CmaHeader::parse(&want[..35]),
            Err(Error::CmaTruncated { need: 36, have: 35 })
        );
        assert_eq!(
            h.emit(&mut [0u8; 10]),
            Err(Error::CmaTruncated { need: 36, have: 10 })
        );
        let mut bad = want;
        bad[0] = 1;
        assert_eq!(CmaHeader::parse(&bad), Err(Error::BadCmaVersion(1)));
        bad = want;
        bad[1] = 0x50;
        assert_eq!(CmaHeader::parse(&bad), Err(Error::BadCmaIpVersion(5)));
    }
}
