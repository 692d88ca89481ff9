//! The part of the libibverbs ABI this backend uses, transcribed from
//! rdma-core's `libibverbs/verbs.h` (v44.0, Debian bookworm; the layouts
//! below have been stable since rdma-core v17 and are what v44+ ship) for
//! x86_64 Linux (LP64, glibc: `pthread_mutex_t` is 40 bytes, `pthread_cond_t`
//! 48).
//!
//! Every struct is `#[repr(C)]` with the header's field order and types;
//! the sizes and the offsets that matter are checked at compile time below
//! (numbers computed from the header by hand), and the unit test
//! `native::tests::layout_matches_the_c_header` compiles a C program against
//! the installed `<infiniband/verbs.h>` (when `cc` and the header are there)
//! and compares every size and offset with these definitions.
//!
//! Only fields this crate reads or writes are named precisely; the rest are
//! kept for layout. Nothing here is called directly: the function pointers
//! come from `dlsym` (see `loader.rs`) or from a context's `ops` table.
#![allow(non_camel_case_types, dead_code)]

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::mem::{offset_of, size_of};

/// glibc x86_64 `pthread_mutex_t` (40 bytes, 8-aligned); never touched here.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct pthread_mutex_t {
    _opaque: [u64; 5],
}

/// glibc x86_64 `pthread_cond_t` (48 bytes, 8-aligned); never touched here.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct pthread_cond_t {
    _opaque: [u64; 6],
}

/// `union ibv_gid`: 16 raw bytes (the union's other member, two `__be64`,
/// makes it 8-aligned).
#[repr(C, align(8))]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct ibv_gid {
    pub raw: [u8; 16],
}

/// `enum ibv_gid_type`.
pub const IBV_GID_TYPE_IB: u32 = 0;
pub const IBV_GID_TYPE_ROCE_V1: u32 = 1;
pub const IBV_GID_TYPE_ROCE_V2: u32 = 2;

/// `struct ibv_gid_entry` (`_ibv_query_gid_ex`, `_ibv_query_gid_table`).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_gid_entry {
    pub gid: ibv_gid,
    pub gid_index: u32,
    pub port_num: u32,
    pub gid_type: u32,
    pub ndev_ifindex: u32,
}

/// `struct _ibv_device_ops` (obsolete, kept for layout).
#[repr(C)]
pub struct _ibv_device_ops {
    pub _dummy1: *mut c_void,
    pub _dummy2: *mut c_void,
}

/// `struct ibv_device`.
#[repr(C)]
pub struct ibv_device {
    pub _ops: _ibv_device_ops,
    pub node_type: c_int,
    pub transport_type: c_int,
    pub name: [c_char; 64],
    pub dev_name: [c_char; 64],
    pub dev_path: [c_char; 256],
    pub ibdev_path: [c_char; 256],
}

pub type PollCqFn = unsafe extern "C" fn(*mut ibv_cq, c_int, *mut ibv_wc) -> c_int;
pub type ReqNotifyCqFn = unsafe extern "C" fn(*mut ibv_cq, c_int) -> c_int;
pub type PostSrqRecvFn =
    unsafe extern "C" fn(*mut ibv_srq, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int;
pub type PostSendFn =
    unsafe extern "C" fn(*mut ibv_qp, *mut ibv_send_wr, *mut *mut ibv_send_wr) -> c_int;
pub type PostRecvFn =
    unsafe extern "C" fn(*mut ibv_qp, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int;
pub type AllocMwFn = unsafe extern "C" fn(*mut ibv_pd, c_int) -> *mut ibv_mw;
pub type BindMwFn = unsafe extern "C" fn(*mut ibv_qp, *mut ibv_mw, *mut ibv_mw_bind) -> c_int;
pub type DeallocMwFn = unsafe extern "C" fn(*mut ibv_mw) -> c_int;
pub type QueryPortExFn =
    unsafe extern "C" fn(*mut ibv_context, u8, *mut ibv_port_attr, usize) -> c_int;

/// `struct ibv_context_ops`: 32 function pointers. The fast paths libibverbs
/// implements as inline functions (`ibv_post_send`, `ibv_post_recv`,
/// `ibv_poll_cq`, `ibv_req_notify_cq`, `ibv_post_srq_recv`, `ibv_alloc_mw`,
/// `ibv_bind_mw`, `ibv_dealloc_mw`) call through this table.
#[repr(C)]
pub struct ibv_context_ops {
    pub _compat_query_device: *mut c_void,
    pub _compat_query_port: *mut c_void,
    pub _compat_alloc_pd: *mut c_void,
    pub _compat_dealloc_pd: *mut c_void,
    pub _compat_reg_mr: *mut c_void,
    pub _compat_rereg_mr: *mut c_void,
    pub _compat_dereg_mr: *mut c_void,
    pub alloc_mw: Option<AllocMwFn>,
    pub bind_mw: Option<BindMwFn>,
    pub dealloc_mw: Option<DeallocMwFn>,
    pub _compat_create_cq: *mut c_void,
    pub poll_cq: Option<PollCqFn>,
    pub req_notify_cq: Option<ReqNotifyCqFn>,
    pub _compat_cq_event: *mut c_void,
    pub _compat_resize_cq: *mut c_void,
    pub _compat_destroy_cq: *mut c_void,
    pub _compat_create_srq: *mut c_void,
    pub _compat_modify_srq: *mut c_void,
    pub _compat_query_srq: *mut c_void,
    pub _compat_destroy_srq: *mut c_void,
    pub post_srq_recv: Option<PostSrqRecvFn>,
    pub _compat_create_qp: *mut c_void,
    pub _compat_query_qp: *mut c_void,
    pub _compat_modify_qp: *mut c_void,
    pub _compat_destroy_qp: *mut c_void,
    pub post_send: Option<PostSendFn>,
    pub post_recv: Option<PostRecvFn>,
    pub _compat_create_ah: *mut c_void,
    pub _compat_destroy_ah: *mut c_void,
    pub _compat_attach_mcast: *mut c_void,
    pub _compat_detach_mcast: *mut c_void,
    pub _compat_async_event: *mut c_void,
}

/// `struct ibv_context`.
#[repr(C)]
pub struct ibv_context {
    pub device: *mut ibv_device,
    pub ops: ibv_context_ops,
    pub cmd_fd: c_int,
    pub async_fd: c_int,
    pub num_comp_vectors: c_int,
    pub mutex: pthread_mutex_t,
    pub abi_compat: *mut c_void,
}

/// `__VERBS_ABI_IS_EXTENDED`: `ibv_context.abi_compat` of a context that
/// sits at the end of a `struct verbs_context`.
pub const VERBS_ABI_IS_EXTENDED: usize = usize::MAX;

/// `struct verbs_context` up to and including its `context` member: the
/// extended ops "grow up" (new members are added at the top), so what
/// matters is the distance from each member to `context`, which never
/// changes. `sz` (just before `context`) says how much of the struct the
/// provider filled in; `verbs_get_ctx_op` checks it (see `query_port_ex`).
#[repr(C)]
pub struct verbs_context {
    pub query_port: Option<QueryPortExFn>,
    /// The 37 members between `query_port` and `_ABI_placeholder3`
    /// (`advise_mr` ... `close_xrcd`), unused here.
    pub _unused: [*mut c_void; 37],
    pub _abi_placeholder3: u64,
    pub sz: usize,
    pub context: ibv_context,
}

/// `struct ibv_device_attr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_device_attr {
    pub fw_ver: [c_char; 64],
    pub node_guid: u64,
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: c_int,
    pub max_qp_wr: c_int,
    pub device_cap_flags: c_uint,
    pub max_sge: c_int,
    pub max_sge_rd: c_int,
    pub max_cq: c_int,
    pub max_cqe: c_int,
    pub max_mr: c_int,
    pub max_pd: c_int,
    pub max_qp_rd_atom: c_int,
    pub max_ee_rd_atom: c_int,
    pub max_res_rd_atom: c_int,
    pub max_qp_init_rd_atom: c_int,
    pub max_ee_init_rd_atom: c_int,
    pub atomic_cap: c_int,
    pub max_ee: c_int,
    pub max_rdd: c_int,
    pub max_mw: c_int,
    pub max_raw_ipv6_qp: c_int,
    pub max_raw_ethy_qp: c_int,
    pub max_mcast_grp: c_int,
    pub max_mcast_qp_attach: c_int,
    pub max_total_mcast_qp_attach: c_int,
    pub max_ah: c_int,
    pub max_fmr: c_int,
    pub max_map_per_fmr: c_int,
    pub max_srq: c_int,
    pub max_srq_wr: c_int,
    pub max_srq_sge: c_int,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
}

/// `enum ibv_port_state` / link layer values.
pub const IBV_PORT_ACTIVE: u32 = 4;
pub const IBV_LINK_LAYER_UNSPECIFIED: u8 = 0;
pub const IBV_LINK_LAYER_INFINIBAND: u8 = 1;
pub const IBV_LINK_LAYER_ETHERNET: u8 = 2;

/// `struct ibv_port_attr` (the full, current one; the exported
/// `ibv_query_port` symbol fills only its `_compat_ibv_port_attr` prefix).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_port_attr {
    pub state: u32,
    pub max_mtu: u32,
    pub active_mtu: u32,
    pub gid_tbl_len: c_int,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
    pub flags: u8,
    pub port_cap_flags2: u16,
}

/// `enum ibv_event_type` (the values this crate maps).
pub const IBV_EVENT_CQ_ERR: u32 = 0;
pub const IBV_EVENT_QP_FATAL: u32 = 1;
pub const IBV_EVENT_QP_REQ_ERR: u32 = 2;
pub const IBV_EVENT_QP_ACCESS_ERR: u32 = 3;
pub const IBV_EVENT_COMM_EST: u32 = 4;
pub const IBV_EVENT_SQ_DRAINED: u32 = 5;
pub const IBV_EVENT_PORT_ACTIVE: u32 = 9;
pub const IBV_EVENT_SRQ_LIMIT_REACHED: u32 = 15;

/// `struct ibv_async_event`: a union of object pointers / port number, then
/// the type.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_async_event {
    pub element: *mut c_void,
    pub event_type: u32,
}

/// `enum ibv_wc_status`.
pub mod wc_status {
    pub const SUCCESS: u32 = 0;
    pub const LOC_LEN_ERR: u32 = 1;
    pub const LOC_QP_OP_ERR: u32 = 2;
    pub const LOC_EEC_OP_ERR: u32 = 3;
    pub const LOC_PROT_ERR: u32 = 4;
    pub const WR_FLUSH_ERR: u32 = 5;
    pub const MW_BIND_ERR: u32 = 6;
    pub const BAD_RESP_ERR: u32 = 7;
    pub const LOC_ACCESS_ERR: u32 = 8;
    pub const REM_INV_REQ_ERR: u32 = 9;
    pub const REM_ACCESS_ERR: u32 = 10;
    pub const REM_OP_ERR: u32 = 11;
    pub const RETRY_EXC_ERR: u32 = 12;
    pub const RNR_RETRY_EXC_ERR: u32 = 13;
    pub const LOC_RDD_VIOL_ERR: u32 = 14;
    pub const REM_INV_RD_REQ_ERR: u32 = 15;
    pub const REM_ABORT_ERR: u32 = 16;
    pub const INV_EECN_ERR: u32 = 17;
    pub const INV_EEC_STATE_ERR: u32 = 18;
    pub const FATAL_ERR: u32 = 19;
    pub const RESP_TIMEOUT_ERR: u32 = 20;
    pub const GENERAL_ERR: u32 = 21;
}

/// `enum ibv_wc_opcode`.
pub mod wc_opcode {
    pub const SEND: u32 = 0;
    pub const RDMA_WRITE: u32 = 1;
    pub const RDMA_READ: u32 = 2;
    pub const COMP_SWAP: u32 = 3;
    pub const FETCH_ADD: u32 = 4;
    pub const BIND_MW: u32 = 5;
    pub const LOCAL_INV: u32 = 6;
    pub const ATOMIC_WRITE: u32 = 9;
    pub const RECV: u32 = 1 << 7;
    pub const RECV_RDMA_WITH_IMM: u32 = RECV + 1;
}

/// `enum ibv_wc_flags`.
pub const IBV_WC_GRH: c_uint = 1 << 0;
pub const IBV_WC_WITH_IMM: c_uint = 1 << 1;
pub const IBV_WC_WITH_INV: c_uint = 1 << 3;

/// `struct ibv_wc`. `imm_data` is the union of `__be32 imm_data` and
/// `uint32_t invalidated_rkey`, told apart by `wc_flags`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_wc {
    pub wr_id: u64,
    pub status: u32,
    pub opcode: u32,
    pub vendor_err: u32,
    pub byte_len: u32,
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: c_uint,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

/// `struct ibv_mw_bind_info`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_mw_bind_info {
    pub mr: *mut ibv_mr,
    pub addr: u64,
    pub length: u64,
    pub mw_access_flags: c_uint,
}

/// `struct ibv_pd`.
#[repr(C)]
pub struct ibv_pd {
    pub context: *mut ibv_context,
    pub handle: u32,
}

/// `struct ibv_mr`.
#[repr(C)]
pub struct ibv_mr {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub addr: *mut c_void,
    pub length: usize,
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

/// `struct ibv_mw`.
#[repr(C)]
pub struct ibv_mw {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub rkey: u32,
    pub handle: u32,
    pub type_: c_int,
}

/// `struct ibv_mw_bind` (type 1 binds through `ops.bind_mw`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_mw_bind {
    pub wr_id: u64,
    pub send_flags: c_uint,
    pub bind_info: ibv_mw_bind_info,
}

/// `struct ibv_global_route`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_global_route {
    pub dgid: ibv_gid,
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

/// `struct ibv_ah_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_ah_attr {
    pub grh: ibv_global_route,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

/// `struct ibv_srq_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_srq_attr {
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
}

/// `enum ibv_srq_attr_mask`.
pub const IBV_SRQ_MAX_WR: c_int = 1 << 0;
pub const IBV_SRQ_LIMIT: c_int = 1 << 1;

/// `struct ibv_srq_init_attr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_srq_init_attr {
    pub srq_context: *mut c_void,
    pub attr: ibv_srq_attr,
}

/// `enum ibv_qp_type`.
pub const IBV_QPT_RC: u32 = 2;
pub const IBV_QPT_UC: u32 = 3;
pub const IBV_QPT_UD: u32 = 4;

/// `struct ibv_qp_cap`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_qp_cap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

/// `struct ibv_qp_init_attr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_qp_init_attr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub cap: ibv_qp_cap,
    pub qp_type: u32,
    pub sq_sig_all: c_int,
}

/// `enum ibv_qp_state`.
pub const IBV_QPS_RESET: u32 = 0;
pub const IBV_QPS_INIT: u32 = 1;
pub const IBV_QPS_RTR: u32 = 2;
pub const IBV_QPS_RTS: u32 = 3;
pub const IBV_QPS_SQD: u32 = 4;
pub const IBV_QPS_SQE: u32 = 5;
pub const IBV_QPS_ERR: u32 = 6;

/// `struct ibv_qp_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_qp_attr {
    pub qp_state: u32,
    pub cur_qp_state: u32,
    pub path_mtu: u32,
    pub path_mig_state: u32,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: c_uint,
    pub cap: ibv_qp_cap,
    pub ah_attr: ibv_ah_attr,
    pub alt_ah_attr: ibv_ah_attr,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub rate_limit: u32,
}

/// `enum ibv_wr_opcode`.
pub mod wr_opcode {
    pub const RDMA_WRITE: u32 = 0;
    pub const RDMA_WRITE_WITH_IMM: u32 = 1;
    pub const SEND: u32 = 2;
    pub const SEND_WITH_IMM: u32 = 3;
    pub const RDMA_READ: u32 = 4;
    pub const ATOMIC_CMP_AND_SWP: u32 = 5;
    pub const ATOMIC_FETCH_AND_ADD: u32 = 6;
    pub const LOCAL_INV: u32 = 7;
    pub const BIND_MW: u32 = 8;
    pub const SEND_WITH_INV: u32 = 9;
    pub const ATOMIC_WRITE: u32 = 15;
}

/// `enum ibv_send_flags`.
pub const IBV_SEND_FENCE: c_uint = 1 << 0;
pub const IBV_SEND_SIGNALED: c_uint = 1 << 1;
pub const IBV_SEND_SOLICITED: c_uint = 1 << 2;
pub const IBV_SEND_INLINE: c_uint = 1 << 3;

/// `struct ibv_sge`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct ibv_sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// `wr.rdma` of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct wr_rdma {
    pub remote_addr: u64,
    pub rkey: u32,
}

/// `wr.atomic` of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct wr_atomic {
    pub remote_addr: u64,
    pub compare_add: u64,
    pub swap: u64,
    pub rkey: u32,
}

/// `wr.ud` of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct wr_ud {
    pub ah: *mut ibv_ah,
    pub remote_qpn: u32,
    pub remote_qkey: u32,
}

/// The `wr` union of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union wr_union {
    pub rdma: wr_rdma,
    pub atomic: wr_atomic,
    pub ud: wr_ud,
}

/// `bind_mw` of the last union of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct wr_bind_mw {
    pub mw: *mut ibv_mw,
    pub rkey: u32,
    pub bind_info: ibv_mw_bind_info,
}

/// `tso` of the last union of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct wr_tso {
    pub hdr: *mut c_void,
    pub hdr_sz: u16,
    pub mss: u16,
}

/// The anonymous `bind_mw` / `tso` union at the end of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union wr_bind_tso {
    pub bind_mw: wr_bind_mw,
    pub tso: wr_tso,
}

/// `struct ibv_send_wr`. `imm_data` is the anonymous union of `__be32
/// imm_data` and `uint32_t invalidate_rkey`; `qp_type` is the union whose
/// one member is `xrc.remote_srqn`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr {
    pub wr_id: u64,
    pub next: *mut ibv_send_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
    pub opcode: u32,
    pub send_flags: c_uint,
    pub imm_data: u32,
    pub wr: wr_union,
    pub qp_type_xrc_remote_srqn: u32,
    pub bind_tso: wr_bind_tso,
}

/// `struct ibv_recv_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_recv_wr {
    pub wr_id: u64,
    pub next: *mut ibv_recv_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
}

/// `struct ibv_srq`.
#[repr(C)]
pub struct ibv_srq {
    pub context: *mut ibv_context,
    pub srq_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub handle: u32,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub events_completed: u32,
}

/// `struct ibv_qp`.
#[repr(C)]
pub struct ibv_qp {
    pub context: *mut ibv_context,
    pub qp_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub handle: u32,
    pub qp_num: u32,
    pub state: u32,
    pub qp_type: u32,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub events_completed: u32,
}

/// `struct ibv_comp_channel`.
#[repr(C)]
pub struct ibv_comp_channel {
    pub context: *mut ibv_context,
    pub fd: c_int,
    pub refcnt: c_int,
}

/// `struct ibv_cq`.
#[repr(C)]
pub struct ibv_cq {
    pub context: *mut ibv_context,
    pub channel: *mut ibv_comp_channel,
    pub cq_context: *mut c_void,
    pub handle: u32,
    pub cqe: c_int,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub comp_events_completed: u32,
    pub async_events_completed: u32,
}

/// `struct ibv_ah`.
#[repr(C)]
pub struct ibv_ah {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub handle: u32,
}

// ---- Layout checks: sizes and offsets computed from verbs.h by hand -------
// (x86_64: pointers and size_t 8 bytes, int and enums 4, `union ibv_gid`
// 8-aligned). The unit test `layout_matches_the_c_header` checks the same
// numbers against the C compiler when one is installed.

const _: () = assert!(size_of::<ibv_gid>() == 16);
const _: () = assert!(size_of::<ibv_gid_entry>() == 32);
const _: () = assert!(size_of::<ibv_device>() == 664);
const _: () = assert!(offset_of!(ibv_device, name) == 24);
const _: () = assert!(offset_of!(ibv_device, ibdev_path) == 408);
const _: () = assert!(size_of::<ibv_context_ops>() == 256);
const _: () = assert!(offset_of!(ibv_context_ops, alloc_mw) == 56);
const _: () = assert!(offset_of!(ibv_context_ops, bind_mw) == 64);
const _: () = assert!(offset_of!(ibv_context_ops, dealloc_mw) == 72);
const _: () = assert!(offset_of!(ibv_context_ops, poll_cq) == 88);
const _: () = assert!(offset_of!(ibv_context_ops, req_notify_cq) == 96);
const _: () = assert!(offset_of!(ibv_context_ops, post_srq_recv) == 160);
const _: () = assert!(offset_of!(ibv_context_ops, post_send) == 200);
const _: () = assert!(offset_of!(ibv_context_ops, post_recv) == 208);
const _: () = assert!(size_of::<ibv_context>() == 328);
const _: () = assert!(offset_of!(ibv_context, ops) == 8);
const _: () = assert!(offset_of!(ibv_context, async_fd) == 268);
const _: () = assert!(offset_of!(ibv_context, abi_compat) == 320);
const _: () = assert!(size_of::<verbs_context>() == 320 + 328);
const _: () = assert!(offset_of!(verbs_context, sz) == 312);
const _: () = assert!(offset_of!(verbs_context, context) == 320);
const _: () = assert!(size_of::<ibv_device_attr>() == 232);
const _: () = assert!(offset_of!(ibv_device_attr, node_guid) == 64);
const _: () = assert!(offset_of!(ibv_device_attr, max_qp) == 108);
const _: () = assert!(offset_of!(ibv_device_attr, atomic_cap) == 164);
const _: () = assert!(offset_of!(ibv_device_attr, max_srq_sge) == 220);
const _: () = assert!(offset_of!(ibv_device_attr, max_pkeys) == 224);
const _: () = assert!(offset_of!(ibv_device_attr, phys_port_cnt) == 227);
const _: () = assert!(size_of::<ibv_port_attr>() == 52);
const _: () = assert!(offset_of!(ibv_port_attr, pkey_tbl_len) == 32);
const _: () = assert!(offset_of!(ibv_port_attr, link_layer) == 46);
const _: () = assert!(offset_of!(ibv_port_attr, port_cap_flags2) == 48);
const _: () = assert!(size_of::<ibv_async_event>() == 16);
const _: () = assert!(size_of::<ibv_wc>() == 48);
const _: () = assert!(offset_of!(ibv_wc, status) == 8);
const _: () = assert!(offset_of!(ibv_wc, byte_len) == 20);
const _: () = assert!(offset_of!(ibv_wc, imm_data) == 24);
const _: () = assert!(offset_of!(ibv_wc, wc_flags) == 36);
const _: () = assert!(offset_of!(ibv_wc, pkey_index) == 40);
const _: () = assert!(offset_of!(ibv_wc, dlid_path_bits) == 45);
const _: () = assert!(size_of::<ibv_mw_bind_info>() == 32);
const _: () = assert!(size_of::<ibv_pd>() == 16);
const _: () = assert!(size_of::<ibv_mr>() == 48);
const _: () = assert!(offset_of!(ibv_mr, lkey) == 36);
const _: () = assert!(offset_of!(ibv_mr, rkey) == 40);
const _: () = assert!(size_of::<ibv_mw>() == 32);
const _: () = assert!(size_of::<ibv_mw_bind>() == 48);
const _: () = assert!(size_of::<ibv_global_route>() == 24);
const _: () = assert!(offset_of!(ibv_global_route, sgid_index) == 20);
const _: () = assert!(size_of::<ibv_ah_attr>() == 32);
const _: () = assert!(offset_of!(ibv_ah_attr, dlid) == 24);
const _: () = assert!(offset_of!(ibv_ah_attr, is_global) == 29);
const _: () = assert!(offset_of!(ibv_ah_attr, port_num) == 30);
const _: () = assert!(size_of::<ibv_srq_attr>() == 12);
const _: () = assert!(size_of::<ibv_srq_init_attr>() == 24);
const _: () = assert!(size_of::<ibv_qp_cap>() == 20);
const _: () = assert!(size_of::<ibv_qp_init_attr>() == 64);
const _: () = assert!(offset_of!(ibv_qp_init_attr, cap) == 32);
const _: () = assert!(offset_of!(ibv_qp_init_attr, qp_type) == 52);
const _: () = assert!(offset_of!(ibv_qp_init_attr, sq_sig_all) == 56);
const _: () = assert!(size_of::<ibv_qp_attr>() == 144);
const _: () = assert!(offset_of!(ibv_qp_attr, qp_access_flags) == 32);
const _: () = assert!(offset_of!(ibv_qp_attr, cap) == 36);
const _: () = assert!(offset_of!(ibv_qp_attr, ah_attr) == 56);
const _: () = assert!(offset_of!(ibv_qp_attr, alt_ah_attr) == 88);
const _: () = assert!(offset_of!(ibv_qp_attr, pkey_index) == 120);
const _: () = assert!(offset_of!(ibv_qp_attr, max_rd_atomic) == 126);
const _: () = assert!(offset_of!(ibv_qp_attr, min_rnr_timer) == 128);
const _: () = assert!(offset_of!(ibv_qp_attr, rnr_retry) == 132);
const _: () = assert!(offset_of!(ibv_qp_attr, rate_limit) == 136);
const _: () = assert!(size_of::<ibv_sge>() == 16);
const _: () = assert!(size_of::<wr_union>() == 32);
const _: () = assert!(size_of::<wr_bind_tso>() == 48);
const _: () = assert!(size_of::<ibv_send_wr>() == 128);
const _: () = assert!(offset_of!(ibv_send_wr, num_sge) == 24);
const _: () = assert!(offset_of!(ibv_send_wr, opcode) == 28);
const _: () = assert!(offset_of!(ibv_send_wr, send_flags) == 32);
const _: () = assert!(offset_of!(ibv_send_wr, imm_data) == 36);
const _: () = assert!(offset_of!(ibv_send_wr, wr) == 40);
const _: () = assert!(offset_of!(ibv_send_wr, qp_type_xrc_remote_srqn) == 72);
const _: () = assert!(offset_of!(ibv_send_wr, bind_tso) == 80);
const _: () = assert!(offset_of!(wr_atomic, rkey) == 24);
const _: () = assert!(offset_of!(wr_ud, remote_qpn) == 8);
const _: () = assert!(offset_of!(wr_bind_mw, bind_info) == 16);
const _: () = assert!(size_of::<ibv_recv_wr>() == 32);
const _: () = assert!(size_of::<ibv_srq>() == 128);
const _: () = assert!(offset_of!(ibv_srq, handle) == 24);
const _: () = assert!(offset_of!(ibv_srq, events_completed) == 120);
const _: () = assert!(size_of::<ibv_qp>() == 160);
const _: () = assert!(offset_of!(ibv_qp, qp_num) == 52);
const _: () = assert!(offset_of!(ibv_qp, state) == 56);
const _: () = assert!(offset_of!(ibv_qp, events_completed) == 152);
const _: () = assert!(size_of::<ibv_comp_channel>() == 16);
const _: () = assert!(size_of::<ibv_cq>() == 128);
const _: () = assert!(offset_of!(ibv_cq, handle) == 24);
const _: () = assert!(offset_of!(ibv_cq, cqe) == 28);
const _: () = assert!(size_of::<ibv_ah>() == 24);
