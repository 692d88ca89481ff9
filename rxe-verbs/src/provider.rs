//! Which backend serves a device: the soft RoCE v2 stack or native verbs.
//!
//! Where an RDMA device is present (a NIC with RoCE offload, or the
//! kernel's own rxe, which libibverbs lists like any other device),
//! rxe-verbs can hand the work to native verbs instead of its software
//! engine, behind the same API. The choice:
//!
//! * an explicit [`Provider`] given to [`crate::Device::with_provider`] or
//!   [`crate::Device::find_with`] wins;
//! * else the environment variable `RXE_PROVIDER=soft|native|auto`;
//! * else `auto`: for an address, a native device that has that address as
//!   a RoCE v2 GID, else the soft stack; for a name, a native device of
//!   that name, else a soft device named in `RXE_DEVICES`.
//!
//! [`choose`] is the policy as a pure function of its inputs, so it can be
//! tested without libibverbs. Where libibverbs cannot be loaded or lists no
//! device, `auto` quietly uses the soft stack after writing one line to
//! standard error, once per process.

use crate::error::{invalid, Error};
use std::net::{IpAddr, Ipv6Addr};
use std::str::FromStr;

/// Which backend to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Provider {
    /// Always the soft RoCE v2 stack (UDP port 4791 through the kernel).
    Soft,
    /// Always native verbs through libibverbs; an error if none fits.
    Native,
    /// A native device when one fits, else the soft stack.
    #[default]
    Auto,
}

impl FromStr for Provider {
    type Err = Error;
    fn from_str(s: &str) -> Result<Provider, Error> {
        match s.trim().to_ascii_lowercase().as_str() {
            "soft" | "rxe-rs" | "software" => Ok(Provider::Soft),
            "native" | "verbs" | "ibverbs" | "hw" => Ok(Provider::Native),
            "auto" | "" => Ok(Provider::Auto),
            other => Err(invalid(
                "RXE_PROVIDER",
                format!("{other:?}: expected soft, native or auto"),
            )),
        }
    }
}

impl std::fmt::Display for Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Provider::Soft => "soft",
            Provider::Native => "native",
            Provider::Auto => "auto",
        })
    }
}

impl Provider {
    /// The provider `RXE_PROVIDER` asks for (unset or empty: `Auto`).
    pub fn from_env() -> Result<Provider, Error> {
        Provider::parse_env(crate::config::provider().as_deref())
    }

    /// The provider a value of `RXE_PROVIDER` asks for (`None`: unset).
    pub fn parse_env(value: Option<&str>) -> Result<Provider, Error> {
        value.map_or(Ok(Provider::Auto), str::parse)
    }
}

/// The kind of backend a [`crate::Device`] runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeviceKind {
    /// The rxe-rs software engine.
    Soft,
    /// A device driven through libibverbs.
    Native,
}

impl std::fmt::Display for DeviceKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DeviceKind::Soft => "soft",
            DeviceKind::Native => "native",
        })
    }
}

/// The type of a GID table entry (`enum ibv_gid_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GidType {
    /// InfiniBand.
    Ib,
    /// RoCE v1 (Ethernet, no IP/UDP): the soft stack cannot talk to it.
    RoceV1,
    /// RoCE v2 (IP/UDP port 4791).
    RoceV2,
    /// Not known (an old libibverbs without `_ibv_query_gid_ex` and no sysfs).
    Unknown,
}

/// One GID table entry of a native device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NativeGid {
    /// Port number (from 1).
    pub port: u8,
    /// Index in the port's GID table.
    pub index: u32,
    /// The GID.
    pub gid: Ipv6Addr,
    /// Its type.
    pub gid_type: GidType,
}

/// What [`choose`] needs to know of a native device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NativeDeviceInfo {
    /// The libibverbs device name (`mlx5_0`, `rxe0`).
    pub name: String,
    /// Node GUID (host order).
    pub node_guid: u64,
    /// Its GID table entries (non-zero ones), all ports.
    pub gids: Vec<NativeGid>,
}

impl NativeDeviceInfo {
    /// The entry a context opened for `addr` uses: its RoCE v2 GID (an
    /// entry of unknown type when no type is known).
    pub fn gid_for(&self, addr: IpAddr) -> Option<NativeGid> {
        let want = crate::device::gid_of(addr);
        let m = |t: GidType| {
            self.gids
                .iter()
                .find(|g| g.gid == want && g.gid_type == t)
                .copied()
        };
        m(GidType::RoceV2).or_else(|| m(GidType::Unknown))
    }

    /// The entry a context opened by name uses: the first RoCE v2 GID with
    /// an IPv4-mapped address, else the first RoCE v2 GID that is not
    /// link-local, else the first RoCE v2 GID (unknown types count as v2).
    pub fn default_gid(&self) -> Option<NativeGid> {
        let v2 = |g: &&NativeGid| matches!(g.gid_type, GidType::RoceV2 | GidType::Unknown);
        let link_local = |g: &Ipv6Addr| (g.segments()[0] & 0xffc0) == 0xfe80;
        self.gids
            .iter()
            .filter(v2)
            .find(|g| g.gid.to_ipv4_mapped().is_some())
            .or_else(|| self.gids.iter().filter(v2).find(|g| !link_local(&g.gid)))
            .or_else(|| self.gids.iter().find(v2))
            .copied()
    }
}

/// What a program asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target<'a> {
    /// The device that has this address.
    Addr(IpAddr),
    /// The device of this name.
    Name(&'a str),
    /// Any device (the first that fits).
    Any,
}

/// What [`choose`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Choice {
    /// The soft stack on `addr`, named `name` in `RXE_DEVICES` if it is.
    Soft {
        /// Its name, for a device named in `RXE_DEVICES`.
        name: Option<String>,
        /// The local address.
        addr: IpAddr,
    },
    /// Native device number `device` of the list given, using `gid`.
    Native {
        /// Index in the list of native devices.
        device: usize,
        /// The GID table entry the context will use.
        gid: NativeGid,
    },
}

/// The selection policy. `natives` is what libibverbs lists (empty where
/// it is missing); `softs` the `(name, address)` pairs of `RXE_DEVICES`.
pub fn choose(
    provider: Provider,
    target: Target<'_>,
    natives: &[NativeDeviceInfo],
    softs: &[(String, IpAddr)],
) -> Result<Choice, Error> {
    let native = || -> Option<Choice> {
        match target {
            Target::Addr(a) => natives
                .iter()
                .enumerate()
                .find_map(|(i, d)| d.gid_for(a).map(|gid| Choice::Native { device: i, gid })),
            Target::Name(n) => natives
                .iter()
                .enumerate()
                .find(|(_, d)| d.name == n)
                .and_then(|(i, d)| d.default_gid().map(|gid| Choice::Native { device: i, gid })),
            Target::Any => natives
                .iter()
                .enumerate()
                .find_map(|(i, d)| d.default_gid().map(|gid| Choice::Native { device: i, gid })),
        }
    };
    let soft = || -> Option<Choice> {
        match target {
            Target::Addr(addr) => Some(Choice::Soft { name: None, addr }),
            Target::Name(n) => softs
                .iter()
                .find(|(name, _)| name == n)
                .map(|(name, addr)| Choice::Soft {
                    name: Some(name.clone()),
                    addr: *addr,
                }),
            Target::Any => softs.first().map(|(name, addr)| Choice::Soft {
                name: Some(name.clone()),
                addr: *addr,
            }),
        }
    };
    let what = match target {
        Target::Addr(a) => format!("address {a}"),
        Target::Name(n) => format!("{n:?}"),
        Target::Any => "any device".to_string(),
    };
    match provider {
        Provider::Soft => soft().ok_or_else(|| {
            invalid(
                "device",
                format!(
                    "no soft device {what}: give an IP address or name it in RXE_DEVICES=name=addr"
                ),
            )
        }),
        Provider::Native => native().ok_or_else(|| {
            let known: Vec<&str> = natives.iter().map(|d| d.name.as_str()).collect();
            invalid(
                "device",
                format!(
                    "no native device with a RoCE v2 GID for {what} (native devices: {})",
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                ),
            )
        }),
        Provider::Auto => native().or_else(soft).ok_or_else(|| {
            invalid(
                "device",
                format!("no device {what}: give an IP address or name it in RXE_DEVICES=name=addr"),
            )
        }),
    }
}

/// Loads libibverbs (once per process; `RXE_LIBIBVERBS` names another
/// file) and says what was loaded, or why nothing could be.
pub fn native_library() -> Result<String, String> {
    crate::native::available()
}

/// The native devices libibverbs lists now, with their GID tables; an error
/// says why there can be none (no libibverbs, no kernel support). Unlike
/// [`crate::Device::list`] this ignores `RXE_PROVIDER` and writes no log line.
pub fn native_devices() -> Result<Vec<NativeDeviceInfo>, String> {
    crate::native::discover()
}
