//! The device list: soft devices named in `RXE_DEVICES`
//! (`rxe0=127.0.0.2,rxe1=::1`, which `rxe exec -d ADDR` sets), as
//! `ibv_get_device_list` returns them, and what they answer about
//! themselves.

use crate::ffi::{arg, entry, int_result, note, ptr_result, set_errno, Fail};
use crate::native::{self, Mode};
use crate::objects::Dev;
use crate::sys::*;
use std::ffi::{c_char, c_int, CStr};
use std::sync::OnceLock;

fn copy_name(dst: &mut [c_char], s: &str) {
    let room = dst.len() - 1;
    for (d, b) in dst.iter_mut().zip(s.bytes().take(room)) {
        *d = b as c_char;
    }
}

/// The devices of this process, made once and never freed: programs keep
/// `ibv_device` pointers after `ibv_free_device_list`.
pub fn devices() -> &'static [Dev] {
    static DEVS: OnceLock<Vec<Dev>> = OnceLock::new();
    DEVS.get_or_init(|| {
        rxe_verbs::Device::named_soft()
            .into_iter()
            .enumerate()
            .map(|(i, rx)| {
                let name = rx.name().to_string();
                // SAFETY: ibv_device is plain data; all zeroes is valid.
                let mut dev: ibv_device = unsafe { std::mem::zeroed() };
                dev.node_type = IBV_NODE_CA;
                dev.transport_type = IBV_TRANSPORT_IB;
                copy_name(&mut dev.name, &name);
                copy_name(&mut dev.dev_name, &format!("uverbs{i}"));
                copy_name(
                    &mut dev.dev_path,
                    &format!("/sys/class/infiniband_verbs/uverbs{i}"),
                );
                copy_name(
                    &mut dev.ibdev_path,
                    &format!("/sys/class/infiniband/{name}"),
                );
                let guid_be = rx.node_guid().to_be();
                Dev {
                    dev,
                    rx,
                    guid_be,
                    open: parking_lot::Mutex::new(std::sync::Weak::new()),
                }
            })
            .collect()
    })
}

/// Our device behind a program's `ibv_device` pointer, if it is one.
pub fn dev_of(p: *const ibv_device) -> Result<&'static Dev, Fail> {
    devices()
        .iter()
        .find(|d| std::ptr::eq(&d.dev, p))
        .ok_or_else(|| Fail::inval("device", "not a device of ibv_get_device_list"))
}

entry! {
    /// `ibv_get_device_list`: the soft devices (unless `RXE_PROVIDER=native`),
    /// then the system library's (with `RXE_PROVIDER=auto|native`, see
    /// `native.rs`). The system library's own list stays allocated until the
    /// program frees ours, as its devices' references are held by it.
    pub unsafe extern "C" fn ibv_get_device_list(num_devices: *mut c_int) -> *mut *mut ibv_device {
        let mode = native::mode();
        let soft: &[Dev] = if mode == Mode::Native { &[] } else { devices() };
        let (native_list, natives) = match mode {
            Mode::Soft => (0, Vec::new()),
            _ => match native::device_list() {
                Ok(l) => l,
                Err(_) if mode == Mode::Native => return native::no_native_devices(),
                Err(_) => (0, Vec::new()),
            },
        };
        let n = soft.len() + natives.len();
        // SAFETY: an array of n + 1 pointers, freed by ibv_free_device_list.
        let list = unsafe { libc::calloc(n + 1, std::mem::size_of::<*mut ibv_device>()) }
            as *mut *mut ibv_device;
        if list.is_null() {
            set_errno(libc::ENOMEM);
            if native_list != 0 {
                // Nothing refers to it: give it back now.
                native::keep_list(list, native_list);
                native::free_list(list);
            }
            return list;
        }
        let all = soft
            .iter()
            .map(|d| std::ptr::from_ref(&d.dev).cast_mut())
            .chain(natives);
        for (i, d) in all.enumerate() {
            // SAFETY: i < n of the n + 1 slots allocated above.
            unsafe { *list.add(i) = d };
        }
        if native_list != 0 {
            native::keep_list(list, native_list);
        }
        if !num_devices.is_null() {
            // SAFETY: the program passed a place for the count.
            unsafe { *num_devices = n as c_int };
        }
        list
    }
}

entry! {
    pub unsafe extern "C" fn ibv_free_device_list(list: *mut *mut ibv_device) {
        native::free_list(list);
        // SAFETY: list came from ibv_get_device_list's calloc (or is NULL).
        unsafe { libc::free(list.cast()) }
    }
}

entry! {
    pub unsafe extern "C" fn ibv_get_device_name(device: *mut ibv_device) -> *const c_char {
        let r = dev_of(device).map(|d| d.dev.name.as_ptr().cast_mut());
        ptr_result(VERB, r)
    }
}

entry! {
    pub unsafe extern "C" fn ibv_get_device_guid(device: *mut ibv_device) -> u64 {
        match dev_of(device) {
            Ok(d) => d.guid_be,
            Err(f) => {
                note(VERB, &f.why);
                set_errno(f.errno);
                0
            }
        }
    }
}

entry! {
    on_panic = -1;
    pub unsafe extern "C" fn ibv_get_device_index(device: *mut ibv_device) -> c_int {
        match dev_of(device) {
            Ok(d) => devices()
                .iter()
                .position(|x| std::ptr::eq(x, d))
                .unwrap_or(0) as c_int,
            Err(_) => -1,
        }
    }
}

entry! {
    data;
    pub unsafe extern "C" fn ibv_node_type_str(node_type: c_int) -> *const c_char {
        let s: &CStr = match node_type {
            IBV_NODE_CA => c"InfiniBand channel adapter",
            IBV_NODE_SWITCH => c"InfiniBand switch",
            IBV_NODE_ROUTER => c"InfiniBand router",
            IBV_NODE_RNIC => c"iWARP NIC",
            IBV_NODE_USNIC => c"usNIC",
            IBV_NODE_USNIC_UDP => c"usNIC UDP",
            IBV_NODE_UNSPECIFIED => c"unspecified",
            _ => c"unknown",
        };
        s.as_ptr()
    }
}

entry! {
    data;
    pub unsafe extern "C" fn ibv_port_state_str(state: c_int) -> *const c_char {
        let s: &CStr = match state as u32 {
            IBV_PORT_NOP => c"no state change (NOP)",
            IBV_PORT_DOWN => c"down",
            IBV_PORT_INIT => c"init",
            IBV_PORT_ARMED => c"armed",
            IBV_PORT_ACTIVE => c"active",
            IBV_PORT_ACTIVE_DEFER => c"active defer",
            _ => c"unknown",
        };
        s.as_ptr()
    }
}

entry! {
    data;
    /// The sysfs of a soft device does not exist: these say so the way
    /// libibverbs does when a file is missing.
    pub unsafe extern "C" fn ibv_get_sysfs_path() -> *const c_char {
        c"/sys".as_ptr()
    }
}

entry! {
    data;
    on_panic = -1;
    pub unsafe extern "C" fn ibv_read_sysfs_file(
        _dir: *const c_char,
        _file: *const c_char,
        _buf: *mut c_char,
        _size: usize,
    ) -> c_int {
        set_errno(libc::ENOENT);
        -1
    }
}

entry! {
    data;
    on_panic = -1;
    pub unsafe extern "C" fn ibv_read_ibdev_sysfs_file(
        _buf: *mut c_char,
        _size: usize,
        _sysfs_dev: *mut std::ffi::c_void,
        _fnfmt: *const c_char,
    ) -> c_int {
        set_errno(libc::ENOENT);
        -1
    }
}

entry! {
    /// `ibv_fork_init`: the system library's when native devices are asked
    /// for (it must protect their pinned memory across fork), else nothing
    /// to do. The soft stack reads and writes registered memory with the
    /// CPU in this process, never by DMA into pinned pages, so a fork cannot
    /// make the parent's regions stale (what `ibv_fork_init` guards
    /// against). The child inherits no working RDMA resources, as the man
    /// page says.
    pub unsafe extern "C" fn ibv_fork_init() -> c_int {
        match native::lib().and_then(|l| l.fork_init) {
            // SAFETY: the system library's ibv_fork_init.
            Some(f) => native::bridged(|| unsafe { f() }),
            None => 0,
        }
    }
}

entry! {
    on_panic = IBV_FORK_UNNEEDED;
    /// The system library's answer when it is loaded; for the soft devices
    /// fork protection is not needed (see `ibv_fork_init`).
    pub unsafe extern "C" fn ibv_is_fork_initialized() -> ibv_fork_status {
        match native::lib().and_then(|l| l.is_fork_initialized) {
            // SAFETY: the system library's ibv_is_fork_initialized.
            Some(f) => native::bridged(|| unsafe { f() }),
            None => IBV_FORK_UNNEEDED,
        }
    }
}

entry! {
    data;
    pub unsafe extern "C" fn ibv_dontfork_range(
        _base: *mut std::ffi::c_void,
        _size: usize,
    ) -> c_int {
        0
    }
}

entry! {
    data;
    pub unsafe extern "C" fn ibv_dofork_range(
        _base: *mut std::ffi::c_void,
        _size: usize,
    ) -> c_int {
        0
    }
}

/// `rdma_rxe`-like identity of a device for `ibv_query_device`.
pub fn device_attr(d: &rxe_verbs::DeviceAttr) -> ibv_device_attr {
    // SAFETY: plain data; all zeroes is valid.
    let mut a: ibv_device_attr = unsafe { std::mem::zeroed() };
    let c = &d.caps;
    copy_name(&mut a.fw_ver, &d.fw_ver);
    a.node_guid = d.node_guid.to_be();
    a.sys_image_guid = d.sys_image_guid.to_be();
    a.max_mr_size = c.max_mr_size;
    a.page_size_cap = 0xffff_f000;
    a.vendor_id = d.vendor_id;
    a.vendor_part_id = d.vendor_part_id;
    a.hw_ver = d.hw_ver;
    a.max_qp = c.max_qp as c_int;
    a.max_qp_wr = c.max_qp_wr as c_int;
    // The kernel's rxe's flags (RXE_DEVICE_CAP_FLAGS in rxe_param.h), so
    // that a program that reads them takes the same paths on both: the
    // counters exist (and stay 0), ports and path migration are its words
    // too (ALT_PATH is refused with EINVAL on both).
    a.device_cap_flags = IBV_DEVICE_BAD_PKEY_CNTR
        | IBV_DEVICE_BAD_QKEY_CNTR
        | IBV_DEVICE_AUTO_PATH_MIG
        | IBV_DEVICE_CHANGE_PHY_PORT
        | IBV_DEVICE_UD_AV_PORT_ENFORCE
        | IBV_DEVICE_PORT_ACTIVE_EVENT
        | IBV_DEVICE_SYS_IMAGE_GUID
        | IBV_DEVICE_RC_RNR_NAK_GEN
        | IBV_DEVICE_SRQ_RESIZE
        | IBV_DEVICE_MEM_WINDOW
        | IBV_DEVICE_MEM_MGT_EXTENSIONS
        | IBV_DEVICE_MEM_WINDOW_TYPE_2B;
    a.max_sge = c.max_sge as c_int;
    a.max_sge_rd = c.max_sge as c_int;
    // Counts of objects as the kernel's rxe reports them (rxe_param.h);
    // a process meets its own memory long before these.
    a.max_cq = 1 << 20;
    a.max_cqe = c.max_cqe as c_int;
    a.max_mr = 0x7ffff;
    a.max_pd = 1 << 20;
    a.max_qp_rd_atom = c.max_qp_rd_atom as c_int;
    a.max_res_rd_atom = 0x3f000;
    a.max_qp_init_rd_atom = c.max_qp_init_rd_atom as c_int;
    a.atomic_cap = IBV_ATOMIC_HCA;
    a.max_mw = c.max_mw as c_int;
    a.max_ah = 0x7fff;
    a.max_srq = c.max_srq as c_int;
    a.max_srq_wr = c.max_qp_wr as c_int;
    a.max_srq_sge = c.max_srq_sge as c_int;
    a.max_pkeys = c.max_pkeys;
    {
        use rxe_core::engine::mcast::*;
        a.max_mcast_grp = MAX_MCAST_GRP as c_int;
        a.max_mcast_qp_attach = MAX_MCAST_QP_ATTACH as c_int;
        a.max_total_mcast_qp_attach = MAX_TOTAL_MCAST_QP_ATTACH as c_int;
    }
    a.local_ca_ack_delay = 15;
    a.phys_port_cnt = d.phys_port_cnt;
    a
}

pub fn mtu_value(m: rxe_core::types::Mtu) -> ibv_mtu {
    m as ibv_mtu
}

/// The port's attributes, as `ibv_query_port` fills them.
pub fn port_attr(p: &rxe_verbs::PortAttr) -> ibv_port_attr {
    // SAFETY: plain data; all zeroes is valid.
    let mut a: ibv_port_attr = unsafe { std::mem::zeroed() };
    a.state = p.state.ibv_value();
    a.max_mtu = mtu_value(p.max_mtu);
    a.active_mtu = mtu_value(p.active_mtu);
    a.gid_tbl_len = p.gid_tbl_len as c_int;
    a.port_cap_flags = IBV_PORT_CM_SUP;
    a.max_msg_sz = p.max_msg_sz;
    a.pkey_tbl_len = p.pkey_tbl_len;
    a.max_vl_num = 1;
    a.active_width = 1; // 1X
    a.active_speed = 1; // SDR, 2.5 Gb/s: what a soft device claims
                        // LinkUp, or Disabled while the port is down (as rdma_rxe reports it)
    a.phys_state = if p.state == rxe_verbs::PortState::Down {
        3
    } else {
        5
    };
    a.link_layer = IBV_LINK_LAYER_ETHERNET as u8;
    // RoCE addresses every packet by GID: an AH or QP path needs the GRH
    a.flags = 1; // IBV_QPF_GRH_REQUIRED
    a
}

/// `ibv_query_device` on a device pointer's own data, for the tools that
/// only look (kept here to share the checks).
pub fn check_port(port_num: u8) -> Result<(), Fail> {
    if port_num != 1 {
        return Err(Fail::inval(
            "port_num",
            format!("{port_num}: the device has port 1 only"),
        ));
    }
    Ok(())
}

entry! {
    on_panic = -1;
    pub unsafe extern "C" fn ibv_get_pkey_index(
        context: *mut ibv_context,
        port_num: u8,
        pkey: u16,
    ) -> c_int {
        // SAFETY: the program's context pointer.
        let r = unsafe { arg(context, "context") }.and_then(|_| check_port(port_num));
        match r {
            Ok(()) if u16::from_be(pkey) & 0x7fff == 0x7fff => 0,
            Ok(()) => -1,
            Err(f) => int_result(VERB, Err(f)).min(-1),
        }
    }
}
