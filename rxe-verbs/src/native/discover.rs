//! Which native devices there are: `ibv_get_device_list`, and each
//! device's GUID and GID table (with each GID's type), read by opening it
//! for a moment.

use super::ffi::*;
use super::inline::query_port;
use super::loader::{verbs, Verbs};
use crate::attr::{GidType, NativeDeviceInfo, NativeGid};
use std::ffi::{c_int, CStr};
use std::net::Ipv6Addr;

/// A C string libibverbs returned (empty for null).
fn cstr(p: *const std::ffi::c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: libibverbs returns NUL-terminated strings that live as long
    // as the object they belong to, which outlives this call.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// `ibv_get_device_list`'s array, freed on drop.
pub(super) struct DevList {
    v: &'static Verbs,
    list: *mut *mut ibv_device,
    n: usize,
}

impl DevList {
    pub(super) fn get(v: &'static Verbs) -> Result<DevList, String> {
        let mut n: c_int = 0;
        // SAFETY: `n` is a valid out-parameter; the result is null or an
        // array of `n` device pointers followed by null.
        let list = unsafe { (v.get_device_list)(&mut n) };
        if list.is_null() {
            let e = std::io::Error::last_os_error();
            return Err(format!("ibv_get_device_list: {e}"));
        }
        Ok(DevList {
            v,
            list,
            n: n.max(0) as usize,
        })
    }

    pub(super) fn devices(&self) -> Vec<*mut ibv_device> {
        // SAFETY: the array has `n` valid entries while the list lives.
        (0..self.n).map(|i| unsafe { *self.list.add(i) }).collect()
    }

    pub(super) fn name(&self, d: *mut ibv_device) -> String {
        // SAFETY: `d` is an entry of the live list.
        cstr(unsafe { (self.v.get_device_name)(d) })
    }
}

impl Drop for DevList {
    fn drop(&mut self) {
        // SAFETY: the list came from ibv_get_device_list and is freed once.
        // Contexts opened from it keep their devices referenced.
        unsafe { (self.v.free_device_list)(self.list) }
    }
}

fn gid_type(t: u32) -> GidType {
    match t {
        IBV_GID_TYPE_IB => GidType::Ib,
        IBV_GID_TYPE_ROCE_V1 => GidType::RoceV1,
        IBV_GID_TYPE_ROCE_V2 => GidType::RoceV2,
        _ => GidType::Unknown,
    }
}

/// The GID type from sysfs, for a libibverbs without `_ibv_query_gid_ex`.
fn sysfs_gid_type(dev: &str, port: u8, index: u32) -> GidType {
    let p = format!("/sys/class/infiniband/{dev}/ports/{port}/gid_attrs/types/{index}");
    match std::fs::read_to_string(p) {
        Ok(s) if s.trim().eq_ignore_ascii_case("RoCE v2") => GidType::RoceV2,
        Ok(s) if s.contains("v1") => GidType::RoceV1,
        _ => GidType::Unknown,
    }
}

/// Every non-zero GID table entry of every port.
///
/// # Safety
/// `ctx` must be a live context.
unsafe fn gid_table(v: &Verbs, ctx: *mut ibv_context, dev: &str) -> Vec<NativeGid> {
    // SAFETY: zeroed plain-integer struct as an out-parameter.
    let mut da: ibv_device_attr = unsafe { std::mem::zeroed() };
    // SAFETY: live context, valid out-parameter.
    if unsafe { (v.query_device)(ctx, &mut da) } != 0 {
        return Vec::new();
    }
    let mut lens = Vec::new();
    for port in 1..=da.phys_port_cnt {
        // SAFETY: live context.
        if let Ok(pa) = unsafe { query_port(v, ctx, port) } {
            lens.push((port, pa.gid_tbl_len.max(0) as u32));
        }
    }
    let total: usize = lens.iter().map(|(_, n)| *n as usize).sum();
    let mut out = Vec::new();
    if let Some(table) = v.query_gid_table {
        let mut entries = vec![ibv_gid_entry::default(); total];
        // SAFETY: `entries` has room for `total` entries of the size given.
        let n = unsafe {
            table(
                ctx,
                entries.as_mut_ptr(),
                total,
                0,
                std::mem::size_of::<ibv_gid_entry>(),
            )
        };
        if n >= 0 {
            for e in &entries[..(n as usize).min(total)] {
                // SAFETY: either member of `union ibv_gid` is plain bytes.
                let gid = Ipv6Addr::from(unsafe { e.gid.raw });
                if !gid.is_unspecified() {
                    out.push(NativeGid {
                        port: e.port_num as u8,
                        index: e.gid_index,
                        gid,
                        gid_type: gid_type(e.gid_type),
                    });
                }
            }
            return out;
        }
    }
    for (port, len) in lens {
        for index in 0..len {
            let mut g = ibv_gid::default();
            // SAFETY: live context, valid out-parameter.
            if unsafe { (v.query_gid)(ctx, port, index as c_int, &mut g) } != 0 {
                continue;
            }
            // SAFETY: either member of `union ibv_gid` is plain bytes.
            let gid = Ipv6Addr::from(unsafe { g.raw });
            if gid.is_unspecified() {
                continue;
            }
            let t = match v.query_gid_ex {
                Some(f) => {
                    let mut e = ibv_gid_entry::default();
                    // SAFETY: live context, out-parameter of the size given.
                    let rc = unsafe {
                        f(
                            ctx,
                            u32::from(port),
                            index,
                            &mut e,
                            0,
                            std::mem::size_of::<ibv_gid_entry>(),
                        )
                    };
                    if rc == 0 {
                        gid_type(e.gid_type)
                    } else {
                        sysfs_gid_type(dev, port, index)
                    }
                }
                None => sysfs_gid_type(dev, port, index),
            };
            out.push(NativeGid {
                port,
                index,
                gid,
                gid_type: t,
            });
        }
    }
    out
}

/// The native devices libibverbs lists, with their GID tables. An error
/// names why there are none to be had (no library, no kernel support).
pub(crate) fn discover() -> Result<Vec<NativeDeviceInfo>, String> {
    let v = verbs()?;
    let list = DevList::get(v)?;
    let mut out = Vec::new();
    for d in list.devices() {
        let name = list.name(d);
        // SAFETY: `d` is an entry of the live list; the GUID is big-endian.
        let node_guid = u64::from_be(unsafe { (v.get_device_guid)(d) });
        // SAFETY: as above.
        let ctx = unsafe { (v.open_device)(d) };
        let gids = if ctx.is_null() {
            Vec::new()
        } else {
            // SAFETY: ctx was just opened; closed right after.
            let g = unsafe { gid_table(v, ctx, &name) };
            // SAFETY: opened above, closed once, nothing else refers to it.
            unsafe { (v.close_device)(ctx) };
            g
        };
        out.push(NativeDeviceInfo {
            name,
            node_guid,
            gids,
        });
    }
    Ok(out)
}
