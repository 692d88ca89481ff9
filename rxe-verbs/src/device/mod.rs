//! Devices: soft ones (the rxe-rs engine on a local IP address) and native
//! ones (what libibverbs lists), what they are called and what they offer.
//!
//! A soft device has no kernel registry. It is named in the environment
//! (`RXE_DEVICES="rxe0=127.0.0.2,rxe1=::1"`) or made on the spot from an IP
//! address ([`Device::soft`], or a bare address wherever a device name is
//! accepted: `rxe pingpong -d 127.0.0.2`). A native device is an RDMA
//! device libibverbs lists (a RoCE NIC, or the kernel's rxe); which kind
//! serves a name or an address is decided by [`crate::provider`].

use crate::attr::{
    addr_of, gid_of, DeviceAttr, DeviceKind, NativeDeviceInfo, NativeGid, PortAttr, PortState,
    Provider,
};
use crate::error::Error;
use rxe_core::engine::EngineConfig;
use rxe_core::types::{DeviceCaps, Mtu};
use rxe_net::faults::FaultSpec;
use std::net::{IpAddr, Ipv6Addr};
use std::path::PathBuf;

mod discover;

/// An RDMA device: soft (the rxe-rs engine bound to one local IP address)
/// or native (a libibverbs device, with the GID it will use).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    name: String,
    addr: IpAddr,
    /// Set with [`Device::with_mtu`]; `None`: follow the link.
    mtu: Option<Mtu>,
    capture: Option<PathBuf>,
    /// Faults to inject into what the device sends ([`Device::with_faults`]).
    faults: Option<Faults>,
    /// For a native device: what libibverbs told of it and the chosen GID.
    native: Option<NativeSel>,
    /// An explicit provider to resolve again with at open.
    provider: Option<Provider>,
}

/// A [`FaultSpec`] that compares bit for bit, so that [`Device`] stays `Eq`.
#[derive(Debug, Clone, Copy)]
struct Faults(FaultSpec);

impl PartialEq for Faults {
    fn eq(&self, o: &Self) -> bool {
        let bits = |f: &FaultSpec| {
            (
                f.loss.to_bits(),
                f.duplicate.to_bits(),
                f.reorder.to_bits(),
                f.corrupt.to_bits(),
                f.seed,
            )
        };
        bits(&self.0) == bits(&o.0)
    }
}

impl Eq for Faults {}

/// A native device and the GID table entry a context on it uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NativeSel {
    pub info: NativeDeviceInfo,
    pub gid: Option<NativeGid>,
}

impl Device {
    /// A soft device on `addr`, named after it. This is an explicit choice
    /// of the soft stack: `RXE_PROVIDER` does not change it (see
    /// [`Device::with_provider`] for one that may go native).
    pub fn soft(addr: IpAddr) -> Device {
        Device {
            name: format!("rxe-{addr}"),
            addr,
            mtu: None,
            capture: None,
            faults: None,
            native: None,
            provider: None,
        }
    }

    pub(crate) fn from_native(info: NativeDeviceInfo, gid: Option<NativeGid>) -> Device {
        let addr = gid.map_or(IpAddr::V6(Ipv6Addr::UNSPECIFIED), |g| addr_of(g.gid));
        Device {
            name: info.name.clone(),
            addr,
            mtu: None,
            capture: None,
            faults: None,
            native: Some(NativeSel { info, gid }),
            provider: None,
        }
    }

    /// The same device, writing every packet it sends and receives to a
    /// pcap file (see the `capture` module; `RXE_PCAP` does the same).
    /// Soft devices only: opening a native device with a capture file set
    /// this way is refused as unsupported (`RXE_PCAP` is ignored there).
    pub fn with_capture(mut self, path: impl Into<PathBuf>) -> Device {
        self.capture = Some(path.into());
        self
    }

    /// Where packets are captured: [`Device::with_capture`], else the
    /// `RXE_PCAP` environment variable with `{addr}` replaced.
    pub fn capture_path(&self) -> Option<PathBuf> {
        self.capture.clone().or_else(|| {
            let p = crate::config::pcap()?;
            Some(PathBuf::from(p.replace("{addr}", &self.addr.to_string())))
        })
    }

    pub(crate) fn explicit_capture(&self) -> bool {
        self.capture.is_some()
    }

    pub(crate) fn explicit_faults(&self) -> bool {
        self.faults.is_some()
    }

    /// The same device, dropping, duplicating, reordering and corrupting
    /// the packets it sends as `spec` draws them (see
    /// [`rxe_net::faults`]): a lossy network on loopback, without root.
    /// The `RXE_FAULTS` environment variable does the same for every soft
    /// device a process opens (`RXE_FAULTS='loss=5%,dup=1%,seed=7'`).
    /// Soft devices only.
    pub fn with_faults(mut self, spec: FaultSpec) -> Device {
        self.faults = Some(Faults(spec));
        self
    }

    /// The faults this device's packets will meet: those given to
    /// [`Device::with_faults`], else `RXE_FAULTS`'s; `None` for none. A
    /// spec that does not parse is an error naming `RXE_FAULTS`.
    pub fn faults(&self) -> Result<Option<FaultSpec>, Error> {
        if let Some(Faults(f)) = self.faults {
            return Ok((!f.is_none()).then_some(f));
        }
        let Some(s) = crate::config::faults() else {
            return Ok(None);
        };
        let spec: FaultSpec =
            s.parse().map_err(
                |e: rxe_net::faults::FaultSpecError| Error::InvalidArgument {
                    name: "RXE_FAULTS",
                    reason: e.to_string(),
                },
            )?;
        Ok((!spec.is_none()).then_some(spec))
    }

    /// The same device with another active MTU (default 4096; use 1024 on
    /// a 1500-byte Ethernet link, as the kernel's rxe would). Soft devices
    /// only: a native port's MTU is the port's.
    pub fn with_mtu(mut self, mtu: Mtu) -> Device {
        self.mtu = Some(mtu);
        self
    }

    /// The same device, resolved again with `provider` when it is opened,
    /// whatever `RXE_PROVIDER` says: `Provider::Soft` opens the soft stack on
    /// the device's address, `Provider::Native` a native device that has the
    /// address as a RoCE v2 GID (an error if there is none), `Provider::Auto`
    /// the native device if there is one, else the soft stack.
    pub fn with_provider(mut self, provider: Provider) -> Device {
        self.provider = Some(provider);
        self
    }

    /// Soft or native.
    pub fn kind(&self) -> DeviceKind {
        if self.native.is_some() {
            DeviceKind::Native
        } else {
            DeviceKind::Soft
        }
    }

    /// The explicit provider set by [`Device::with_provider`], if any.
    pub fn provider(&self) -> Option<Provider> {
        self.provider
    }

    pub(crate) fn native_sel(&self) -> Option<&NativeSel> {
        self.native.as_ref()
    }

    /// The device's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The local address: a soft device's, or the address of the GID a
    /// native device will use (`::` for a native device with no RoCE GID).
    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// The GID table of port 1, index by index: for a soft device one entry
    /// (index 0, its address); for a native device the port's entries as
    /// libibverbs reports them (`::` for an empty slot before the last one).
    pub fn gids(&self) -> Vec<Ipv6Addr> {
        match &self.native {
            None => vec![gid_of(self.addr)],
            Some(n) => {
                let port = n.gid.map_or(1, |g| g.port);
                let entries: Vec<&NativeGid> =
                    n.info.gids.iter().filter(|g| g.port == port).collect();
                let len = entries
                    .iter()
                    .map(|g| g.index as usize + 1)
                    .max()
                    .unwrap_or(0);
                let mut t = vec![Ipv6Addr::UNSPECIFIED; len];
                for g in entries {
                    t[g.index as usize] = g.gid;
                }
                t
            }
        }
    }

    /// Every GID table entry of a native device, with its port and type
    /// (empty for a soft device).
    pub fn native_gids(&self) -> Vec<NativeGid> {
        self.native
            .as_ref()
            .map(|n| n.info.gids.clone())
            .unwrap_or_default()
    }

    /// The GID table entry contexts on this device use as their own: index
    /// 0 on a soft device; on a native one the RoCE v2 entry of its address.
    /// A source GID index of 0 given to the API means this entry on both
    /// backends (see [`crate::ConnectOptions::sgid_index`]).
    pub fn gid_index(&self) -> u8 {
        self.native
            .as_ref()
            .and_then(|n| n.gid)
            .map_or(0, |g| g.index.min(255) as u8)
    }

    /// The port contexts on this device use (1 on a soft device).
    pub fn port(&self) -> u8 {
        self.native
            .as_ref()
            .and_then(|n| n.gid)
            .map_or(1, |g| g.port)
    }

    /// The port's active MTU: as set with [`Device::with_mtu`], else, for a
    /// soft device, what the interface holding its address carries (as the
    /// kernel's rxe takes it from its net device: 1024 on a 1500-byte link,
    /// 4096 on loopback), 4096 if no interface has the address; for a
    /// native device 4096 unless configured ([`crate::Context::query_port`] tells
    /// the port's own).
    pub fn active_mtu(&self) -> Mtu {
        self.mtu.unwrap_or_else(|| {
            if self.native.is_some() {
                return Mtu::Mtu4096;
            }
            rxe_net::route::port_mtu(self.addr).unwrap_or(Mtu::Mtu4096)
        })
    }

    /// A node GUID: a native device's own; for a soft device one derived
    /// from the address (EUI-64 style), stable across runs.
    pub fn node_guid(&self) -> u64 {
        if let Some(n) = &self.native {
            return n.info.node_guid;
        }
        let g = gid_of(self.addr).octets();
        let mut x = 0x0200_00ff_fe00_0000u64;
        for (i, b) in g[10..].iter().enumerate() {
            x ^= u64::from(*b) << (8 * (i % 8));
        }
        x
    }
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

impl PortAttr {
    /// The attributes of a device's port under this configuration.
    pub fn new_for(d: &Device, config: &EngineConfig) -> Self {
        Self::new(d, config)
    }

    pub(crate) fn new(d: &Device, config: &EngineConfig) -> Self {
        // As the kernel's rxe takes its port state from its net device: down
        // while the interface holding the address is down.
        let down = d.native.is_none()
            && rxe_net::route::interface_of(d.addr).and_then(|i| i.running) == Some(false);
        PortAttr {
            state: if down {
                PortState::Down
            } else {
                PortState::Active
            },
            max_mtu: Mtu::Mtu4096,
            active_mtu: config.port_mtu,
            gid_tbl_len: d.gids().len() as u32,
            // What the kernel's rxe reports (RXE_MAX_MSG_SZ, 8 MiB); like
            // it, the engine takes messages up to 2 GiB (the spec's limit)
            max_msg_sz: (1 << 23).min(config.caps.max_msg_size),
            // one entry, the default P_Key 0xFFFF (QPs may still name any
            // index below max_pkeys, as on the kernel's rxe)
            pkey_tbl_len: 1,
            link_layer: "Ethernet",
            gids: d.gids(),
        }
    }
}
