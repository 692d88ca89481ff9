//! Soft devices: what they are called, where they live, what they offer.
//!
//! A soft device has no kernel registry. It is named in the environment
//! (`RXE_DEVICES="rxe0=127.0.0.2,rxe1=::1"`) or made on the spot from an IP
//! address ([`Device::soft`], or a bare address wherever a device name is
//! accepted: `rxe pingpong -d 127.0.0.2`).

use crate::context::Context;
use crate::error::{invalid, Error};
use rxe_core::engine::EngineConfig;
use rxe_core::types::{DeviceCaps, Mtu};
use std::net::{IpAddr, Ipv6Addr};
use std::path::PathBuf;

/// A soft RoCE v2 device bound to one local IP address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    name: String,
    addr: IpAddr,
    mtu: Mtu,
    capture: Option<PathBuf>,
}

/// The GID of an address as the kernel's rxe lists it: IPv4 addresses
/// IPv4-mapped (`::ffff:a.b.c.d`), IPv6 addresses as they are.
pub fn gid_of(addr: IpAddr) -> Ipv6Addr {
    match addr {
        IpAddr::V4(a) => a.to_ipv6_mapped(),
        IpAddr::V6(a) => a,
    }
}

/// The IP address a GID stands for (the inverse of [`gid_of`]).
pub fn addr_of(gid: Ipv6Addr) -> IpAddr {
    match gid.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(gid),
    }
}

impl Device {
    /// A soft device on `addr`, named after it.
    pub fn soft(addr: IpAddr) -> Device {
        Device {
            name: format!("rxe-{addr}"),
            addr,
            mtu: Mtu::Mtu4096,
            capture: None,
        }
    }

    /// The same device, writing every packet it sends and receives to a
    /// pcap file (see the `capture` module; `RXE_PCAP` does the same).
    pub fn with_capture(mut self, path: impl Into<PathBuf>) -> Device {
        self.capture = Some(path.into());
        self
    }

    /// Where packets are captured: [`Device::with_capture`], else the
    /// `RXE_PCAP` environment variable with `{addr}` replaced.
    pub fn capture_path(&self) -> Option<PathBuf> {
        self.capture.clone().or_else(|| {
            let p = std::env::var("RXE_PCAP").ok().filter(|p| !p.is_empty())?;
            Some(PathBuf::from(p.replace("{addr}", &self.addr.to_string())))
        })
    }

    /// The same device with another active MTU (default 4096; use 1024 on
    /// a 1500-byte Ethernet link, as the kernel's rxe would).
    pub fn with_mtu(mut self, mtu: Mtu) -> Device {
        self.mtu = mtu;
        self
    }

    /// The devices named in `RXE_DEVICES` (`name=address,...`).
    pub fn list() -> Vec<Device> {
        let spec = std::env::var("RXE_DEVICES").unwrap_or_default();
        spec.split(',')
            .filter_map(|item| {
                let (name, addr) = item.trim().split_once('=')?;
                let addr: IpAddr = addr.trim().parse().ok()?;
                Some(Device {
                    name: name.trim().to_string(),
                    ..Device::soft(addr)
                })
            })
            .collect()
    }

    /// A device by name (from [`Device::list`]) or by bare IP address.
    pub fn find(name_or_addr: &str) -> Result<Device, Error> {
        if let Ok(addr) = name_or_addr.parse::<IpAddr>() {
            return Ok(Device::soft(addr));
        }
        Device::list().into_iter().find(|d| d.name == name_or_addr).ok_or_else(|| {
            invalid(
                "device",
                format!("no device {name_or_addr:?}: give an IP address or name it in RXE_DEVICES=name=addr"),
            )
        })
    }

    /// Opens the device: binds UDP port 4791 on its address and starts its
    /// progress thread.
    pub fn open(&self) -> Result<Context, Error> {
        Context::open(self.clone())
    }

    /// The device's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The local address.
    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// The GID table: one entry, index 0.
    pub fn gids(&self) -> Vec<Ipv6Addr> {
        vec![gid_of(self.addr)]
    }

    /// The port's active MTU.
    pub fn active_mtu(&self) -> Mtu {
        self.mtu
    }

    /// A node GUID derived from the address (EUI-64 style), stable across runs.
    pub fn node_guid(&self) -> u64 {
        let g = gid_of(self.addr).octets();
        let mut x = 0x0200_00ff_fe00_0000u64;
        for (i, b) in g[10..].iter().enumerate() {
            x ^= u64::from(*b) << (8 * (i % 8));
        }
        x
    }
}

/// What `ibv_query_device` reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceAttr {
    /// Firmware version string.
    pub fw_ver: String,
    /// Node GUID.
    pub node_guid: u64,
    /// System image GUID.
    pub sys_image_guid: u64,
    /// Vendor id (0xFFFFFF like the kernel's rxe).
    pub vendor_id: u32,
    /// Vendor part id.
    pub vendor_part_id: u32,
    /// Hardware version.
    pub hw_ver: u32,
    /// Ports.
    pub phys_port_cnt: u8,
    /// The limits.
    pub caps: DeviceCaps,
}

impl DeviceAttr {
    /// The attributes a device with these limits reports.
    pub fn new_for(d: &Device, caps: &DeviceCaps) -> Self {
        Self::new(d, caps)
    }

    pub(crate) fn new(d: &Device, caps: &DeviceCaps) -> Self {
        DeviceAttr {
            fw_ver: env!("CARGO_PKG_VERSION").to_string(),
            node_guid: d.node_guid(),
            sys_image_guid: d.node_guid(),
            vendor_id: 0xff_ffff,
            vendor_part_id: 0,
            hw_ver: 0,
            phys_port_cnt: 1,
            caps: *caps,
        }
    }
}

/// Port states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortState {
    /// Up.
    Active,
}

/// What `ibv_query_port` reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortAttr {
    /// State.
    pub state: PortState,
    /// Largest MTU.
    pub max_mtu: Mtu,
    /// Active MTU.
    pub active_mtu: Mtu,
    /// GID table length.
    pub gid_tbl_len: u32,
    /// Largest message.
    pub max_msg_sz: u32,
    /// P_Key table length.
    pub pkey_tbl_len: u16,
    /// The link layer: always Ethernet (RoCE).
    pub link_layer: &'static str,
    /// The GID table.
    pub gids: Vec<Ipv6Addr>,
}

impl PortAttr {
    /// The attributes of a device's port under this configuration.
    pub fn new_for(d: &Device, config: &EngineConfig) -> Self {
        Self::new(d, config)
    }

    pub(crate) fn new(d: &Device, config: &EngineConfig) -> Self {
        PortAttr {
            state: PortState::Active,
            max_mtu: Mtu::Mtu4096,
            active_mtu: config.port_mtu,
            gid_tbl_len: d.gids().len() as u32,
            max_msg_sz: config.caps.max_msg_size,
            pkey_tbl_len: config.caps.max_pkeys,
            link_layer: "Ethernet",
            gids: d.gids(),
        }
    }
}
