//! The calls that need the connection manager's protocol (CM MADs on QP 1):
//! `rdma_listen`, `rdma_connect`, `rdma_accept`, `rdma_reject`,
//! `rdma_reject_ece`, `rdma_establish`, `rdma_disconnect`, `rdma_notify`,
//! `rdma_join_multicast`, `rdma_join_multicast_ex`, `rdma_leave_multicast`.
//!
//! Each checks its arguments as librdmacm does (EINVAL for a NULL or
//! unknown id), then fails with ENOSYS, and `RXE_DEBUG=1` says why. They
//! are shaped for the Rust CM API of rxe-verbs, which each will call with
//! what librdmacm writes to the kernel's `rdma_ucm` (see `cma.c`):
//!
//! * `rdma_listen(id, backlog)`: listen on the id's bound address and port
//!   (service ID = port space << 16 | port) with that backlog; each request
//!   becomes a new id (on the listener's channel, synchronous if the
//!   listener is) and a CONNECT_REQUEST event with the request's
//!   `rdma_conn_param` (or `rdma_ud_param` for SIDR) and the listener as
//!   `listen_id`.
//! * `rdma_connect(id, param)`: for RC, send a REQ on the resolved route
//!   with the QP's number (or `param->qp_num`), the starting PSN,
//!   `responder_resources`/`initiator_depth` (the device's maxima when
//!   `RDMA_MAX_RESP_RES`/`RDMA_MAX_INIT_DEPTH`), `flow_control`,
//!   `retry_count`, `rnr_retry_count` (7 and 7 when `param` is NULL), the
//!   SRQ flag and the private data (after `rdma_create_ep`'s `ai_connect`);
//!   for UD, a SIDR_REQ. A REP makes the library move the QP to RTR and RTS
//!   with the connection's attributes (see [`conn_qp_attr`]), send the RTU
//!   and queue ESTABLISHED; an id without QP gets CONNECT_RESPONSE and
//!   `rdma_establish` sends the RTU. REJECTED, UNREACHABLE, CONNECT_ERROR
//!   as the CM decides.
//! * `rdma_accept(id, param)`: move the QP to RTR and RTS, then send the
//!   REP (RC) or SIDR_REP (UD, QP number and Q_Key); ESTABLISHED on the RTU.
//! * `rdma_reject(id, data, len)` / `rdma_reject_ece`: a REJ with the
//!   private data, reason consumer-defined (28) or 35 (ECE).
//! * `rdma_disconnect(id)`: move the QP to ERR, send a DREQ (or answer
//!   one with a DREP); DISCONNECTED on each side, then TIMEWAIT_EXIT.
//! * `rdma_notify(id, event)`: pass IBV_EVENT_COMM_EST to the CM (a
//!   message arrived before the RTU).
//! * multicast: the engine has no multicast; these stay failures (they
//!   will say EOPNOTSUPP once the CM is in).

use super::entry;
use super::id::{id_of, CmId, IdState};
use crate::ffi::Fail;
use crate::sys::*;
use std::ffi::{c_int, c_void};

/// The failure of a call that needs the CM protocol.
fn needs_cm(call: &str) -> Fail {
    Fail::new(
        libc::ENOSYS,
        format!(
            "{call} needs the connection manager protocol (CM MADs on QP 1), which rxe-rs's \
             drop-in librdmacm does not speak yet; address and route resolution, QPs on ids \
             and events work"
        ),
    )
}

/// The QP attributes of an id's connection for `state` (RTR and RTS after
/// a REQ/REP), or `None` while the id has no connection: then
/// `rdma_init_qp_attr` gives the attributes of an id without one.
pub fn conn_qp_attr(
    _cm: &CmId,
    _st: &IdState,
    _state: ibv_qp_state,
) -> Option<Result<(ibv_qp_attr, c_int), Fail>> {
    None
}

pub unsafe extern "C" fn rdma_listen(id: *mut rdma_cm_id, _backlog: c_int) -> c_int {
    entry("rdma_listen", || {
        id_of(id)?;
        Err(needs_cm("rdma_listen"))
    })
}

pub unsafe extern "C" fn rdma_connect(
    id: *mut rdma_cm_id,
    _conn_param: *mut rdma_conn_param,
) -> c_int {
    entry("rdma_connect", || {
        id_of(id)?;
        Err(needs_cm("rdma_connect"))
    })
}

pub unsafe extern "C" fn rdma_accept(
    id: *mut rdma_cm_id,
    _conn_param: *mut rdma_conn_param,
) -> c_int {
    entry("rdma_accept", || {
        id_of(id)?;
        Err(needs_cm("rdma_accept"))
    })
}

pub unsafe extern "C" fn rdma_reject(
    id: *mut rdma_cm_id,
    _private_data: *const c_void,
    _private_data_len: u8,
) -> c_int {
    entry("rdma_reject", || {
        id_of(id)?;
        Err(needs_cm("rdma_reject"))
    })
}

pub unsafe extern "C" fn rdma_reject_ece(
    id: *mut rdma_cm_id,
    _private_data: *const c_void,
    _private_data_len: u8,
) -> c_int {
    entry("rdma_reject_ece", || {
        id_of(id)?;
        Err(needs_cm("rdma_reject_ece"))
    })
}

pub unsafe extern "C" fn rdma_establish(id: *mut rdma_cm_id) -> c_int {
    entry("rdma_establish", || {
        id_of(id)?;
        // SAFETY: a live id.
        if unsafe { !(*id).qp.is_null() } {
            return Err(Fail::inval(
                "id",
                "has a QP (rdma_establish is for ids that connect without one)",
            ));
        }
        Err(needs_cm("rdma_establish"))
    })
}

pub unsafe extern "C" fn rdma_disconnect(id: *mut rdma_cm_id) -> c_int {
    entry("rdma_disconnect", || {
        id_of(id)?;
        Err(needs_cm("rdma_disconnect"))
    })
}

pub unsafe extern "C" fn rdma_notify(id: *mut rdma_cm_id, _event: ibv_event_type) -> c_int {
    entry("rdma_notify", || {
        id_of(id)?;
        Err(needs_cm("rdma_notify"))
    })
}

pub unsafe extern "C" fn rdma_join_multicast(
    id: *mut rdma_cm_id,
    _addr: *mut sockaddr,
    _context: *mut c_void,
) -> c_int {
    entry("rdma_join_multicast", || {
        id_of(id)?;
        Err(needs_cm("rdma_join_multicast"))
    })
}

pub unsafe extern "C" fn rdma_join_multicast_ex(
    id: *mut rdma_cm_id,
    _mc_join_attr: *mut rdma_cm_join_mc_attr_ex,
    _context: *mut c_void,
) -> c_int {
    entry("rdma_join_multicast_ex", || {
        id_of(id)?;
        Err(needs_cm("rdma_join_multicast_ex"))
    })
}

pub unsafe extern "C" fn rdma_leave_multicast(id: *mut rdma_cm_id, _addr: *mut sockaddr) -> c_int {
    entry("rdma_leave_multicast", || {
        id_of(id)?;
        Err(needs_cm("rdma_leave_multicast"))
    })
}
