//! `NContext`: an open native device, with the port and GID the API uses
//! on it, its attributes, and its queue of asynchronous events
//! (`events.rs` reads them).

use super::discover::DevList;
use super::error::{errno, os_error, rc_errno};
use super::fd::set_nonblocking;
use super::ffi::*;
use super::inline::query_port;
use super::loader::{verbs, Verbs};
use super::registry::Registry;
use crate::attr::{AsyncEventKind, DeviceAttr, PortAttr, PortState};
use crate::device::Device;
use crate::error::{invalid, unsupported, Error};
use parking_lot::Mutex;
use rxe_core::types::{DeviceCaps, Mtu};
use std::collections::VecDeque;
use std::net::Ipv6Addr;
use std::sync::Arc;

/// A fixed-size C string field (NUL-terminated, or filling it).
fn cbuf(b: &[std::ffi::c_char]) -> String {
    let bytes: Vec<u8> = b
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// An open native device.
pub(crate) struct NContext {
    pub(super) v: &'static Verbs,
    pub(super) ctx: *mut ibv_context,
    pub device: Device,
    pub port: u8,
    /// The GID table index of the context's own GID (what source GID index 0
    /// stands for in the API).
    pub gid_index: u8,
    pub gid: Ipv6Addr,
    pub attr: DeviceAttr,
    /// The context's CQs and SRQs, for `NQp::create` (see `registry.rs`).
    pub(super) cqs: Registry,
    pub(super) srqs: Registry,
    /// Events raised before the application asked (`PortActive` at
    /// open), handed out before the device's own.
    pub(super) events: Mutex<VecDeque<AsyncEventKind>>,
    /// Held by the one reader of `async_fd` at a time.
    pub(super) async_lock: Mutex<()>,
}

// SAFETY: libibverbs objects may be used from any thread; providers lock
// what needs locking (verbs' documented thread-safety). The raw pointer is
// only dereferenced through libibverbs calls and read-only field reads.
unsafe impl Send for NContext {}
// SAFETY: as above.
unsafe impl Sync for NContext {}

impl Drop for NContext {
    fn drop(&mut self) {
        // SAFETY: every child object holds an Arc of this context, so none
        // is left; the context is closed once.
        unsafe { (self.v.close_device)(self.ctx) };
    }
}

impl NContext {
    pub fn open(device: Device) -> Result<Arc<NContext>, Error> {
        let sel = device
            .native_sel()
            .ok_or_else(|| invalid("device", "not a native device"))?;
        let name = sel.info.name.clone();
        let gid = sel.gid.ok_or_else(|| {
            unsupported(format!(
                "native device {name} has no RoCE v2 GID: the soft stack and rxe-verbs speak RoCE v2 only"
            ))
        })?;
        let v = verbs().map_err(|e| unsupported(format!("native verbs: {e}")))?;
        let list = DevList::get(v).map_err(|e| unsupported(format!("native verbs: {e}")))?;
        let d = list
            .devices()
            .into_iter()
            .find(|&d| list.name(d) == name)
            .ok_or_else(|| invalid("device", format!("native device {name} is gone")))?;
        // SAFETY: `d` is an entry of the live list.
        let ctx = unsafe { (v.open_device)(d) };
        if ctx.is_null() {
            return Err(os_error("ibv_open_device", &name, errno()));
        }
        drop(list);
        let close = |e: Error| {
            // SAFETY: opened above, not shared yet.
            unsafe { (v.close_device)(ctx) };
            e
        };
        // SAFETY: zeroed out-parameter, live context.
        let mut da: ibv_device_attr = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let rc = unsafe { (v.query_device)(ctx, &mut da) };
        if rc != 0 {
            return Err(close(os_error("ibv_query_device", &name, rc_errno(rc))));
        }
        // SAFETY: live context.
        let pa = unsafe { query_port(v, ctx, gid.port) }
            .map_err(|e| close(os_error("ibv_query_port", &name, e)))?;
        if gid.index > 255 {
            return Err(close(unsupported(format!(
                "GID index {} of {name}: the API's GID indices are 8 bits",
                gid.index
            ))));
        }
        let caps = DeviceCaps {
            max_mr_size: da.max_mr_size,
            max_qp: da.max_qp.max(0) as u32,
            max_qp_wr: da.max_qp_wr.max(0) as u32,
            max_sge: da.max_sge.max(0) as u32,
            max_cqe: da.max_cqe.max(0) as u32,
            max_qp_rd_atom: da.max_qp_rd_atom.clamp(0, 255) as u8,
            max_qp_init_rd_atom: da.max_qp_init_rd_atom.clamp(0, 255) as u8,
            max_inline_data: 0,
            max_pkeys: da.max_pkeys,
            max_msg_size: pa.max_msg_sz,
            max_srq: da.max_srq.max(0) as u32,
            max_srq_sge: da.max_srq_sge.max(0) as u32,
            max_mw: da.max_mw.max(0) as u32,
        };
        let attr = DeviceAttr {
            fw_ver: cbuf(&da.fw_ver),
            node_guid: u64::from_be(da.node_guid),
            sys_image_guid: u64::from_be(da.sys_image_guid),
            vendor_id: da.vendor_id,
            vendor_part_id: da.vendor_part_id,
            hw_ver: da.hw_ver,
            phys_port_cnt: da.phys_port_cnt,
            caps,
        };
        // SAFETY: async_fd belongs to the live context.
        set_nonblocking(unsafe { (*ctx).async_fd });
        let mut events = VecDeque::new();
        if pa.state == IBV_PORT_ACTIVE {
            // The soft stack raises PortActive when a device opens; so do we.
            events.push_back(AsyncEventKind::PortActive);
        }
        Ok(Arc::new(NContext {
            v,
            ctx,
            port: gid.port,
            gid_index: gid.index as u8,
            gid: gid.gid,
            attr,
            device,
            cqs: Registry::default(),
            srqs: Registry::default(),
            events: Mutex::new(events),
            async_lock: Mutex::new(()),
        }))
    }

    pub(super) fn name(&self) -> &str {
        self.device.name()
    }

    /// The GID index an API index stands for: 0 is the context's own GID.
    pub fn sgid(&self, index: u8) -> u8 {
        if index == 0 {
            self.gid_index
        } else {
            index
        }
    }

    /// The port's attributes, or a port that is down should the query
    /// fail (what `Context::query_port` reports).
    pub fn port_attr(&self) -> PortAttr {
        self.query_port().unwrap_or_else(|_| PortAttr {
            state: PortState::Down,
            max_mtu: Mtu::Mtu1024,
            active_mtu: Mtu::Mtu1024,
            gid_tbl_len: 0,
            max_msg_sz: 0,
            pkey_tbl_len: 0,
            link_layer: "Unspecified",
            gids: Vec::new(),
        })
    }

    pub fn query_port(&self) -> Result<PortAttr, Error> {
        // SAFETY: live context.
        let pa = unsafe { query_port(self.v, self.ctx, self.port) }
            .map_err(|e| os_error("ibv_query_port", self.name(), e))?;
        let mtu = |m: u32| match m {
            1 => Mtu::Mtu256,
            2 => Mtu::Mtu512,
            3 => Mtu::Mtu1024,
            4 => Mtu::Mtu2048,
            _ => Mtu::Mtu4096,
        };
        Ok(PortAttr {
            state: match pa.state {
                0 => PortState::Nop,
                1 => PortState::Down,
                2 => PortState::Init,
                3 => PortState::Armed,
                5 => PortState::ActiveDefer,
                _ => PortState::Active,
            },
            max_mtu: mtu(pa.max_mtu),
            active_mtu: mtu(pa.active_mtu),
            gid_tbl_len: pa.gid_tbl_len.max(0) as u32,
            max_msg_sz: pa.max_msg_sz,
            pkey_tbl_len: pa.pkey_tbl_len,
            link_layer: match u32::from(pa.link_layer) {
                IBV_LINK_LAYER_INFINIBAND => "InfiniBand",
                IBV_LINK_LAYER_ETHERNET => "Ethernet",
                _ => "Unspecified",
            },
            gids: self.device.gids(),
        })
    }
}
