//! The helpers that only translate: status and event names, and static
//! rate conversions (the same tables as libibverbs).

use crate::ffi::entry;
use crate::sys::*;
use std::ffi::{c_char, c_int, CStr};

entry! {
    data;
    pub unsafe extern "C" fn ibv_wc_status_str(status: ibv_wc_status) -> *const c_char {
        let s: &CStr = match status {
            IBV_WC_SUCCESS => c"success",
            IBV_WC_LOC_LEN_ERR => c"local length error",
            IBV_WC_LOC_QP_OP_ERR => c"local QP operation error",
            IBV_WC_LOC_EEC_OP_ERR => c"local EE context operation error",
            IBV_WC_LOC_PROT_ERR => c"local protection error",
            IBV_WC_WR_FLUSH_ERR => c"Work Request Flushed Error",
            IBV_WC_MW_BIND_ERR => c"memory management operation error",
            IBV_WC_BAD_RESP_ERR => c"bad response error",
            IBV_WC_LOC_ACCESS_ERR => c"local access error",
            IBV_WC_REM_INV_REQ_ERR => c"remote invalid request error",
            IBV_WC_REM_ACCESS_ERR => c"remote access error",
            IBV_WC_REM_OP_ERR => c"remote operation error",
            IBV_WC_RETRY_EXC_ERR => c"transport retry counter exceeded",
            IBV_WC_RNR_RETRY_EXC_ERR => c"RNR retry counter exceeded",
            IBV_WC_LOC_RDD_VIOL_ERR => c"local RDD violation error",
            IBV_WC_REM_INV_RD_REQ_ERR => c"remote invalid RD request",
            IBV_WC_REM_ABORT_ERR => c"aborted error",
            IBV_WC_INV_EECN_ERR => c"invalid EE context number",
            IBV_WC_INV_EEC_STATE_ERR => c"invalid EE context state",
            IBV_WC_FATAL_ERR => c"fatal error",
            IBV_WC_RESP_TIMEOUT_ERR => c"response timeout error",
            IBV_WC_GENERAL_ERR => c"general error",
            IBV_WC_TM_ERR => c"TM error",
            IBV_WC_TM_RNDV_INCOMPLETE => c"TM software rendezvous",
            _ => c"unknown",
        };
        s.as_ptr()
    }
}

entry! {
    data;
    pub unsafe extern "C" fn ibv_event_type_str(event: ibv_event_type) -> *const c_char {
        let s: &CStr = match event {
            IBV_EVENT_CQ_ERR => c"CQ error",
            IBV_EVENT_QP_FATAL => c"local work queue catastrophic error",
            IBV_EVENT_QP_REQ_ERR => c"invalid request local work queue error",
            IBV_EVENT_QP_ACCESS_ERR => c"local access violation work queue error",
            IBV_EVENT_COMM_EST => c"communication established",
            IBV_EVENT_SQ_DRAINED => c"send queue drained",
            IBV_EVENT_PATH_MIG => c"path migrated",
            IBV_EVENT_PATH_MIG_ERR => c"path migration request error",
            IBV_EVENT_DEVICE_FATAL => c"local catastrophic error",
            IBV_EVENT_PORT_ACTIVE => c"port active",
            IBV_EVENT_PORT_ERR => c"port error",
            IBV_EVENT_LID_CHANGE => c"LID change",
            IBV_EVENT_PKEY_CHANGE => c"P_Key change",
            IBV_EVENT_SM_CHANGE => c"SM change",
            IBV_EVENT_SRQ_ERR => c"SRQ catastrophic error",
            IBV_EVENT_SRQ_LIMIT_REACHED => c"SRQ limit reached",
            IBV_EVENT_QP_LAST_WQE_REACHED => c"last WQE reached",
            IBV_EVENT_CLIENT_REREGISTER => c"client reregistration",
            IBV_EVENT_GID_CHANGE => c"GID table change",
            IBV_EVENT_WQ_FATAL => c"WQ fatal",
            _ => c"unknown",
        };
        s.as_ptr()
    }
}

/// (rate, multiple of 2.5 Gb/s or -1 where libibverbs defines none, Mb/s),
/// as libibverbs tabulates them.
const RATES: &[(ibv_rate, c_int, c_int)] = &[
    (IBV_RATE_2_5_GBPS, 1, 2500),
    (IBV_RATE_5_GBPS, 2, 5000),
    (IBV_RATE_10_GBPS, 4, 10000),
    (IBV_RATE_20_GBPS, 8, 20000),
    (IBV_RATE_30_GBPS, 12, 30000),
    (IBV_RATE_40_GBPS, 16, 40000),
    (IBV_RATE_60_GBPS, 24, 60000),
    (IBV_RATE_80_GBPS, 32, 80000),
    (IBV_RATE_120_GBPS, 48, 120000),
    (IBV_RATE_14_GBPS, -1, 14062),
    (IBV_RATE_56_GBPS, -1, 56250),
    (IBV_RATE_112_GBPS, -1, 112500),
    (IBV_RATE_168_GBPS, -1, 168750),
    (IBV_RATE_25_GBPS, -1, 25781),
    (IBV_RATE_100_GBPS, -1, 103125),
    (IBV_RATE_200_GBPS, -1, 206250),
    (IBV_RATE_300_GBPS, -1, 309375),
    (IBV_RATE_28_GBPS, 11, 28125),
    (IBV_RATE_50_GBPS, 20, 53125),
    (IBV_RATE_400_GBPS, 160, 425000),
    (IBV_RATE_600_GBPS, 240, 637500),
    (IBV_RATE_800_GBPS, 320, 850000),
    (IBV_RATE_1200_GBPS, 480, 1275000),
];

entry! {
    data;
    on_panic = -1;
    pub unsafe extern "C" fn ibv_rate_to_mult(rate: ibv_rate) -> c_int {
        RATES.iter().find(|r| r.0 == rate).map_or(-1, |r| r.1)
    }
}

entry! {
    data;
    pub unsafe extern "C" fn mult_to_ibv_rate(mult: c_int) -> ibv_rate {
        RATES
            .iter()
            .find(|r| r.1 == mult)
            .map_or(IBV_RATE_MAX, |r| r.0)
    }
}

entry! {
    data;
    on_panic = -1;
    pub unsafe extern "C" fn ibv_rate_to_mbps(rate: ibv_rate) -> c_int {
        RATES.iter().find(|r| r.0 == rate).map_or(-1, |r| r.2)
    }
}

entry! {
    data;
    pub unsafe extern "C" fn mbps_to_ibv_rate(mbps: c_int) -> ibv_rate {
        RATES
            .iter()
            .find(|r| r.2 == mbps)
            .map_or(IBV_RATE_MAX, |r| r.0)
    }
}
