//! The `IBVERBS_1.0` entry points: the ABI of libibverbs before 1.1
//! (2006), with other struct layouts. rdma-core keeps them for binaries
//! that old; this library fails them with ENOSYS rather than misread their
//! structs. A binary built against any libibverbs since 1.1 binds the
//! `IBVERBS_1.1` versions instead.

use crate::ffi::{entry, note, set_errno};
use std::ffi::{c_int, c_void};

fn refuse(verb: &str) {
    note(
        verb,
        "the IBVERBS_1.0 ABI (2006) is not supported; rebuild against a current libibverbs",
    );
    set_errno(libc::ENOSYS);
}

// The refusals reach no engine: `data;` leaves deferred packets queued,
// as these functions did before they had a guard.
macro_rules! compat_ptr {
    ($($name:ident),* $(,)?) => {
        $(entry! {
            data;
            pub unsafe extern "C" fn $name() -> *mut c_void {
                refuse(VERB);
                std::ptr::null_mut()
            }
        })*
    };
}

macro_rules! compat_int {
    ($($name:ident),* $(,)?) => {
        $(entry! {
            data;
            on_panic = -1;
            pub unsafe extern "C" fn $name() -> c_int {
                refuse(VERB);
                -1
            }
        })*
    };
}

macro_rules! compat_void {
    ($($name:ident),* $(,)?) => {
        $(entry! {
            data;
            pub unsafe extern "C" fn $name() {
                refuse(VERB);
            }
        })*
    };
}

compat_ptr!(
    ibv_get_device_list_1_0,
    ibv_get_device_name_1_0,
    ibv_open_device_1_0,
    ibv_alloc_pd_1_0,
    ibv_reg_mr_1_0,
    ibv_create_cq_1_0,
    ibv_create_srq_1_0,
    ibv_create_qp_1_0,
    ibv_create_ah_1_0,
);

compat_int!(
    ibv_close_device_1_0,
    ibv_get_async_event_1_0,
    ibv_query_device_1_0,
    ibv_query_port_1_0,
    ibv_query_gid_1_0,
    ibv_query_pkey_1_0,
    ibv_dealloc_pd_1_0,
    ibv_dereg_mr_1_0,
    ibv_resize_cq_1_0,
    ibv_destroy_cq_1_0,
    ibv_get_cq_event_1_0,
    ibv_modify_srq_1_0,
    ibv_query_srq_1_0,
    ibv_destroy_srq_1_0,
    ibv_query_qp_1_0,
    ibv_modify_qp_1_0,
    ibv_destroy_qp_1_0,
    ibv_destroy_ah_1_0,
    ibv_attach_mcast_1_0,
    ibv_detach_mcast_1_0,
);

compat_void!(
    ibv_free_device_list_1_0,
    ibv_ack_async_event_1_0,
    ibv_ack_cq_events_1_0,
    ibv_register_driver_1_1
);

entry! {
    data;
    verb = "ibv_get_device_guid";
    /// `ibv_get_device_guid@IBVERBS_1.0`: 0 (no GUID) with ENOSYS.
    pub unsafe extern "C" fn ibv_get_device_guid_1_0() -> u64 {
        refuse(VERB);
        0
    }
}
