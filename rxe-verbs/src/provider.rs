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

pub use crate::attr::{DeviceKind, GidType, NativeDeviceInfo, NativeGid, Provider};
use crate::error::{invalid, Error};
use std::net::IpAddr;

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
