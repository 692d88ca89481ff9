//! Verbs this stack does not do, and rdma-core's provider-internal calls.
//!
//! Each exists, because Debian's programs and provider libraries are linked
//! with BIND_NOW and one missing symbol stops them at load (`libmlx5.so.1`,
//! which pyverbs loads, imports 61 `IBVERBS_PRIVATE_34` symbols). Each
//! fails the way libibverbs documents for an operation the device lacks:
//! `EOPNOTSUPP` (NULL with errno, or the errno value), and says why with
//! `RXE_DEBUG=1`. The provider-registration calls do nothing: this library
//! loads no providers, so a provider library that registers itself from
//! its constructor is simply never asked for a device.
//!
//! They reach no engine, so they leave the packets a poll deferred queued
//! (`data;` in [`entry!`]), as they did before they had a guard.

use crate::ffi::{entry, note, set_errno};
use crate::sys::*;
use std::ffi::{c_char, c_int, c_uint, c_void};

fn refuse(verb: &str, why: &str) -> c_int {
    note(verb, format!("not supported: {why}"));
    set_errno(libc::EOPNOTSUPP);
    libc::EOPNOTSUPP
}

entry! {
    data;
    pub unsafe extern "C" fn ibv_import_pd(
        _context: *mut ibv_context,
        _pd_handle: u32,
    ) -> *mut ibv_pd {
        refuse(VERB, "importing objects of another process");
        std::ptr::null_mut()
    }
}

entry! {
    data;
    pub unsafe extern "C" fn ibv_unimport_pd(_pd: *mut ibv_pd) {
        refuse(VERB, "no object is ever imported");
    }
}

entry! {
    data;
    pub unsafe extern "C" fn ibv_import_mr(_pd: *mut ibv_pd, _mr_handle: u32) -> *mut ibv_mr {
        refuse(VERB, "importing objects of another process");
        std::ptr::null_mut()
    }
}

entry! {
    data;
    pub unsafe extern "C" fn ibv_unimport_mr(_mr: *mut ibv_mr) {
        refuse(VERB, "no object is ever imported");
    }
}

entry! {
    data;
    pub unsafe extern "C" fn ibv_import_dm(
        _context: *mut ibv_context,
        _dm_handle: u32,
    ) -> *mut ibv_dm {
        refuse(VERB, "device memory");
        std::ptr::null_mut()
    }
}

entry! {
    data;
    pub unsafe extern "C" fn ibv_unimport_dm(_dm: *mut ibv_dm) {
        refuse(VERB, "device memory");
    }
}

entry! {
    data;
    pub unsafe extern "C" fn ibv_set_ece(_qp: *mut ibv_qp, _ece: *mut ibv_ece) -> c_int {
        refuse(VERB, "enhanced connection establishment")
    }
}

entry! {
    data;
    pub unsafe extern "C" fn ibv_query_ece(_qp: *mut ibv_qp, _ece: *mut ibv_ece) -> c_int {
        refuse(VERB, "enhanced connection establishment")
    }
}

entry! {
    data;
    pub unsafe extern "C" fn ibv_reg_dmabuf_mr(
        _pd: *mut ibv_pd,
        _offset: u64,
        _length: usize,
        _iova: u64,
        _fd: c_int,
        _access: c_int,
    ) -> *mut ibv_mr {
        refuse(
            VERB,
            "dma-buf memory (there is no device to map it for)",
        );
        std::ptr::null_mut()
    }
}

entry! {
    data;
    on_panic = -1;
    pub unsafe extern "C" fn ibv_resolve_eth_l2_from_gid(
        _context: *mut ibv_context,
        _attr: *mut ibv_ah_attr,
        _eth_mac: *mut u8,
        _vid: *mut u16,
    ) -> c_int {
        // A provider-internal helper (returns -1 with errno): the soft stack
        // sends over UDP sockets and never needs the peer's MAC address.
        refuse(
            VERB,
            "layer-2 resolution (the stack sends through UDP sockets)",
        );
        -1
    }
}

entry! {
    data;
    /// 0: data placement in order is not promised (the safe answer the man
    /// page allows for any device).
    pub unsafe extern "C" fn ibv_query_qp_data_in_order(
        _qp: *mut ibv_qp,
        _op: ibv_wr_opcode,
        _flags: u32,
    ) -> c_int {
        0
    }
}

entry! {
    data;
    pub unsafe extern "C" fn verbs_register_driver_34(_ops: *const c_void) {}
}

entry! {
    data;
    pub unsafe extern "C" fn verbs_set_ops(_vctx: *mut verbs_context, _ops: *const c_void) {}
}

entry! {
    data;
    pub unsafe extern "C" fn verbs_uninit_context(_vctx: *mut verbs_context) {}
}

entry! {
    data;
    pub unsafe extern "C" fn verbs_init_cq(
        _cq: *mut ibv_cq,
        _context: *mut ibv_context,
        _channel: *mut ibv_comp_channel,
        _cq_context: *mut c_void,
    ) {
    }
}

entry! {
    data;
    pub unsafe extern "C" fn __verbs_log(_ctx: *mut c_void, _level: u32, _fmt: *const c_char) {}
}

entry! {
    data;
    pub unsafe extern "C" fn __ioctl_final_num_attrs(
        num_attrs: c_uint,
        _link: *mut c_void,
    ) -> c_uint {
        num_attrs
    }
}

entry! {
    data;
    pub unsafe extern "C" fn _verbs_init_and_alloc_context(
        _device: *mut ibv_device,
        _cmd_fd: c_int,
        _alloc_size: usize,
        _context_offset: usize,
        _driver_id: u32,
    ) -> *mut c_void {
        refuse(
            VERB,
            "rdma-core provider libraries",
        );
        std::ptr::null_mut()
    }
}

entry! {
    data;
    pub unsafe extern "C" fn verbs_open_device(
        _device: *mut ibv_device,
        _private: *mut c_void,
    ) -> *mut ibv_context {
        refuse(VERB, "rdma-core provider libraries");
        std::ptr::null_mut()
    }
}

/// rdma-core's kernel-command helpers, for provider libraries: each
/// returns EOPNOTSUPP (there is no kernel device to command).
macro_rules! kernel_commands {
    ($($name:ident),* $(,)?) => {
        $(entry! {
            data;
            pub unsafe extern "C" fn $name() -> c_int {
                refuse(VERB, "rdma-core provider libraries (no kernel device)")
            }
        })*
    };
}

kernel_commands!(
    execute_ioctl,
    ibv_cmd_advise_mr,
    ibv_cmd_alloc_dm,
    ibv_cmd_alloc_mw,
    ibv_cmd_alloc_pd,
    ibv_cmd_attach_mcast,
    ibv_cmd_close_xrcd,
    ibv_cmd_create_ah,
    ibv_cmd_create_counters,
    ibv_cmd_create_cq,
    ibv_cmd_create_cq_ex,
    ibv_cmd_create_flow,
    ibv_cmd_create_flow_action_esp,
    ibv_cmd_create_qp,
    ibv_cmd_create_qp_ex,
    ibv_cmd_create_qp_ex2,
    ibv_cmd_create_rwq_ind_table,
    ibv_cmd_create_srq,
    ibv_cmd_create_srq_ex,
    ibv_cmd_create_wq,
    ibv_cmd_dealloc_mw,
    ibv_cmd_dealloc_pd,
    ibv_cmd_dereg_mr,
    ibv_cmd_destroy_ah,
    ibv_cmd_destroy_counters,
    ibv_cmd_destroy_cq,
    ibv_cmd_destroy_flow,
    ibv_cmd_destroy_flow_action,
    ibv_cmd_destroy_qp,
    ibv_cmd_destroy_rwq_ind_table,
    ibv_cmd_destroy_srq,
    ibv_cmd_destroy_wq,
    ibv_cmd_detach_mcast,
    ibv_cmd_free_dm,
    ibv_cmd_get_context,
    ibv_cmd_modify_cq,
    ibv_cmd_modify_flow_action_esp,
    ibv_cmd_modify_qp,
    ibv_cmd_modify_qp_ex,
    ibv_cmd_modify_srq,
    ibv_cmd_modify_wq,
    ibv_cmd_open_qp,
    ibv_cmd_open_xrcd,
    ibv_cmd_poll_cq,
    ibv_cmd_post_recv,
    ibv_cmd_post_send,
    ibv_cmd_post_srq_recv,
    ibv_cmd_query_context,
    ibv_cmd_query_device_any,
    ibv_cmd_query_mr,
    ibv_cmd_query_port,
    ibv_cmd_query_qp,
    ibv_cmd_query_srq,
    ibv_cmd_read_counters,
    ibv_cmd_reg_dm_mr,
    ibv_cmd_reg_dmabuf_mr,
    ibv_cmd_reg_mr,
    ibv_cmd_req_notify_cq,
    ibv_cmd_rereg_mr,
    ibv_cmd_resize_cq,
);
