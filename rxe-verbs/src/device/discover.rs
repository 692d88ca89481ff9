//! Which devices there are and which one a name or an address means:
//! native ones from libibverbs, soft ones from `RXE_DEVICES` or made from
//! an address, chosen between as [`crate::provider`] decides; and opening
//! one into a [`Context`].

use super::Device;
use crate::attr::{NativeDeviceInfo, Provider};
use crate::context::Context;
use crate::error::Error;
use crate::native;
use crate::provider::{choose, Choice, Target};
use std::net::IpAddr;

/// Writes `line` to standard error the first time it is called in the
/// process, never again: the one line that says the native backend is not
/// in use and why.
fn note_soft_fallback(reason: &str) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        eprintln!("rxe-verbs: no native RDMA device ({reason}); using the soft RoCE v2 stack");
    });
}

/// The native devices a provider may use. `Soft` never loads libibverbs;
/// `Auto` turns "no libibverbs" and "no device" into an empty list (and,
/// when listing devices, the one log line: a program that asked for a
/// device by name or address and got a soft one hears nothing about
/// native ones); `Native` makes them errors.
fn natives_for(provider: Provider, listing: bool) -> Result<Vec<NativeDeviceInfo>, Error> {
    let note_soft_fallback = |reason: &str| {
        if listing {
            note_soft_fallback(reason)
        }
    };
    match provider {
        Provider::Soft => Ok(Vec::new()),
        Provider::Native => native::discover().map_err(|reason| Error::Unsupported {
            what: format!("native verbs: {reason}"),
        }),
        Provider::Auto => match native::discover() {
            Ok(v) if !v.is_empty() => Ok(v),
            Ok(_) => {
                note_soft_fallback("libibverbs lists no RDMA device");
                Ok(Vec::new())
            }
            Err(reason) => {
                note_soft_fallback(&reason);
                Ok(Vec::new())
            }
        },
    }
}

/// The `(name, address)` pairs of `RXE_DEVICES` (`name=address,...`; a
/// bare address is named `rxeN` after its position). An item that is
/// neither is left out, and said so on standard error once.
fn soft_named() -> Vec<(String, IpAddr)> {
    let spec = crate::config::devices();
    let mut out: Vec<(String, IpAddr)> = Vec::new();
    let mut bad = Vec::new();
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, addr) = match item.split_once('=') {
            Some((n, a)) => (n.trim().to_string(), a.trim()),
            None => (format!("rxe{}", out.len()), item),
        };
        match addr.parse::<IpAddr>() {
            Ok(a) if !name.is_empty() && name.len() < 64 => out.push((name, a)),
            _ => bad.push(item.to_string()),
        }
    }
    if !bad.is_empty() {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            eprintln!("rxe-verbs: RXE_DEVICES: ignoring {bad:?} (want NAME=ADDRESS)")
        });
    }
    out
}

impl Device {
    fn from_choice(c: Choice, natives: Vec<NativeDeviceInfo>) -> Device {
        match c {
            Choice::Soft { name, addr } => {
                let mut d = Device::soft(addr);
                if let Some(n) = name {
                    d.name = n;
                }
                d
            }
            Choice::Native { device, gid } => {
                let info = natives
                    .into_iter()
                    .nth(device)
                    .expect("choose returns a listed device");
                Device::from_native(info, Some(gid))
            }
        }
    }

    /// The devices `RXE_PROVIDER` allows, native ones (as libibverbs lists
    /// them) first, then the soft ones named in `RXE_DEVICES`
    /// (`name=address,...`). Never fails: without libibverbs, or with an
    /// invalid `RXE_PROVIDER`, it lists the soft devices.
    pub fn list() -> Vec<Device> {
        let provider = Provider::from_env().unwrap_or_default();
        let mut out = Vec::new();
        if provider != Provider::Soft {
            let natives = natives_for(Provider::Auto, true).unwrap_or_default();
            out.extend(natives.into_iter().map(|info| {
                let gid = info.default_gid();
                Device::from_native(info, gid)
            }));
        }
        if provider != Provider::Native {
            out.extend(Device::named_soft());
        }
        out
    }

    /// The soft devices named in `RXE_DEVICES`, in its order, without
    /// looking for native ones (and so without loading libibverbs: the
    /// drop-in library, which is libibverbs, lists its devices this way).
    pub fn named_soft() -> Vec<Device> {
        soft_named()
            .into_iter()
            .map(|(name, addr)| Device {
                name,
                ..Device::soft(addr)
            })
            .collect()
    }

    /// A device by name or by IP address, as `RXE_PROVIDER` says (default
    /// `auto`: for an address, a native device that has it as a RoCE v2 GID,
    /// else the soft stack on it; for a name, the native device of that
    /// name, else the soft device of that name in `RXE_DEVICES`).
    pub fn find(name_or_addr: &str) -> Result<Device, Error> {
        Device::find_with(name_or_addr, Provider::from_env()?)
    }

    /// [`Device::find`] with an explicit provider instead of `RXE_PROVIDER`.
    pub fn find_with(name_or_addr: &str, provider: Provider) -> Result<Device, Error> {
        let target = match name_or_addr.parse::<IpAddr>() {
            Ok(a) => Target::Addr(a),
            Err(_) => Target::Name(name_or_addr),
        };
        let natives = natives_for(provider, false)?;
        let c = choose(provider, target, &natives, &soft_named())?;
        Ok(Device::from_choice(c, natives))
    }

    /// The device this one stands for once its explicit provider (if any)
    /// is applied.
    fn resolved(&self) -> Result<Device, Error> {
        let Some(p) = self.provider else {
            return Ok(self.clone());
        };
        if self.native.is_some() && p != Provider::Soft {
            return Ok(Device {
                provider: None,
                ..self.clone()
            });
        }
        let natives = natives_for(p, false)?;
        let c = choose(p, Target::Addr(self.addr), &natives, &[])?;
        let mut d = Device::from_choice(c, natives);
        if d.native.is_none() {
            d.name = self.name.clone();
            d.mtu = self.mtu;
            d.capture = self.capture.clone();
        }
        Ok(d)
    }

    /// Opens the device: for a soft one, binds UDP port 4791 on its address
    /// and starts its progress thread; for a native one, opens it through
    /// libibverbs.
    pub fn open(&self) -> Result<Context, Error> {
        let d = self.resolved()?;
        if d.native.is_some() {
            Context::open_native(d)
        } else {
            Context::open(d)
        }
    }
}
