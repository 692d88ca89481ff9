//! The verbs vocabulary the engine speaks: QP types and states, attributes
//! and their mask, access flags, work requests and completions. Names follow
//! libibverbs (`ibv_qp_attr`, `ibv_wc_status`, ...) so that RDMA programmers
//! find what they know.

use crate::psn::Psn;
use bitflags::bitflags;
use core::fmt;
use std::net::IpAddr;

/// Queue pair transport type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpType {
    /// Reliable Connected.
    Rc,
    /// Unreliable Connected.
    Uc,
    /// Unreliable Datagram.
    Ud,
}

/// Queue pair states (IBTA 10.3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpState {
    /// Reset: nothing posted, nothing processed.
    Reset,
    /// Initialized: receives may be posted.
    Init,
    /// Ready to receive.
    Rtr,
    /// Ready to send.
    Rts,
    /// Send queue drained.
    Sqd,
    /// Send queue error (UC/UD only).
    Sqe,
    /// Error: everything posted completes with a flush error.
    Err,
}

impl QpState {
    /// The libibverbs value (`enum ibv_qp_state`: `IBV_QPS_RESET` = 0 to
    /// `IBV_QPS_ERR` = 6).
    pub const fn ibv_value(self) -> u32 {
        match self {
            QpState::Reset => 0,
            QpState::Init => 1,
            QpState::Rtr => 2,
            QpState::Rts => 3,
            QpState::Sqd => 4,
            QpState::Sqe => 5,
            QpState::Err => 6,
        }
    }

    /// The state of a libibverbs value, if it names one.
    pub const fn from_ibv_value(v: u32) -> Option<QpState> {
        Some(match v {
            0 => QpState::Reset,
            1 => QpState::Init,
            2 => QpState::Rtr,
            3 => QpState::Rts,
            4 => QpState::Sqd,
            5 => QpState::Sqe,
            6 => QpState::Err,
            _ => return None,
        })
    }
}

impl fmt::Display for QpState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            QpState::Reset => "RESET",
            QpState::Init => "INIT",
            QpState::Rtr => "RTR",
            QpState::Rts => "RTS",
            QpState::Sqd => "SQD",
            QpState::Sqe => "SQE",
            QpState::Err => "ERR",
        })
    }
}

/// Path MTU: the largest payload of one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mtu {
    /// 256 bytes.
    Mtu256 = 1,
    /// 512 bytes.
    Mtu512 = 2,
    /// 1024 bytes.
    Mtu1024 = 3,
    /// 2048 bytes.
    Mtu2048 = 4,
    /// 4096 bytes.
    Mtu4096 = 5,
}

impl Mtu {
    /// Payload bytes per packet.
    pub const fn bytes(self) -> usize {
        128 << (self as usize)
    }
    /// The MTU for a byte count, if it is one of the five.
    pub const fn from_bytes(n: usize) -> Option<Mtu> {
        match n {
            256 => Some(Mtu::Mtu256),
            512 => Some(Mtu::Mtu512),
            1024 => Some(Mtu::Mtu1024),
            2048 => Some(Mtu::Mtu2048),
            4096 => Some(Mtu::Mtu4096),
            _ => None,
        }
    }
    /// The largest MTU whose packets fit an Ethernet/IP MTU of `link_mtu`
    /// bytes with RoCE v2 headers (as the kernel's rxe computes `active_mtu`).
    pub fn for_link_mtu(link_mtu: usize, ipv6: bool) -> Mtu {
        // IP + UDP + BTH + largest extension headers + ICRC.
        let overhead = if ipv6 { 40 } else { 20 } + 8 + 12 + 28 + 4;
        [Mtu::Mtu4096, Mtu::Mtu2048, Mtu::Mtu1024, Mtu::Mtu512]
            .into_iter()
            .find(|m| m.bytes() + overhead <= link_mtu)
            .unwrap_or(Mtu::Mtu256)
    }
}

bitflags! {
    /// Memory and QP access rights (`ibv_access_flags`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct Access: u32 {
        /// The local HCA may write (receives, READ responses, atomics results).
        const LOCAL_WRITE = 1 << 0;
        /// Remote peers may RDMA WRITE.
        const REMOTE_WRITE = 1 << 1;
        /// Remote peers may RDMA READ.
        const REMOTE_READ = 1 << 2;
        /// Remote peers may perform atomics.
        const REMOTE_ATOMIC = 1 << 3;
        /// Memory windows may be bound to the region.
        const MW_BIND = 1 << 4;
        /// The region is addressed from 0 rather than by virtual address.
        const ZERO_BASED = 1 << 5;
        /// Remote peers may FLUSH for global visibility
        /// (`IBV_ACCESS_FLUSH_GLOBAL`, IBTA 1.5).
        const FLUSH_GLOBAL = 1 << 8;
        /// Remote peers may FLUSH for persistence
        /// (`IBV_ACCESS_FLUSH_PERSISTENT`, IBTA 1.5).
        const FLUSH_PERSISTENT = 1 << 9;
    }
}

bitflags! {
    /// Which fields of a [`QpAttr`] a modify call sets (`ibv_qp_attr_mask`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct QpAttrMask: u32 {
        /// `state`.
        const STATE = 1 << 0;
        /// `cur_state`.
        const CUR_STATE = 1 << 1;
        /// `en_sqd_async_notify`.
        const EN_SQD_ASYNC_NOTIFY = 1 << 2;
        /// `access`.
        const ACCESS_FLAGS = 1 << 3;
        /// `pkey_index`.
        const PKEY_INDEX = 1 << 4;
        /// `port`.
        const PORT = 1 << 5;
        /// `qkey`.
        const QKEY = 1 << 6;
        /// `av`.
        const AV = 1 << 7;
        /// `path_mtu`.
        const PATH_MTU = 1 << 8;
        /// `timeout`.
        const TIMEOUT = 1 << 9;
        /// `retry_cnt`.
        const RETRY_CNT = 1 << 10;
        /// `rnr_retry`.
        const RNR_RETRY = 1 << 11;
        /// `rq_psn`.
        const RQ_PSN = 1 << 12;
        /// `max_rd_atomic`.
        const MAX_QP_RD_ATOMIC = 1 << 13;
        /// Alternate path (not supported by RoCE soft devices).
        const ALT_PATH = 1 << 14;
        /// `min_rnr_timer`.
        const MIN_RNR_TIMER = 1 << 15;
        /// `sq_psn`.
        const SQ_PSN = 1 << 16;
        /// `max_dest_rd_atomic`.
        const MAX_DEST_RD_ATOMIC = 1 << 17;
        /// Path migration state (not supported).
        const PATH_MIG_STATE = 1 << 18;
        /// `cap` (not modifiable here).
        const CAP = 1 << 19;
        /// `dest_qp_num`.
        const DEST_QPN = 1 << 20;
    }
}

/// Where packets of a connected QP go, and how (`ibv_ah_attr` for RoCE v2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AddressVector {
    /// Destination IP address (from the destination GID: an IPv4-mapped GID
    /// gives IPv4).
    pub dest: IpAddr,
    /// Source GID index on the local port.
    pub sgid_index: u8,
    /// Hop limit / TTL.
    pub hop_limit: u8,
    /// Traffic class / DSCP+ECN.
    pub traffic_class: u8,
    /// Flow label (IPv6).
    pub flow_label: u32,
}

impl AddressVector {
    /// An address vector to `dest` with the defaults the kernel's rxe uses.
    pub fn to(dest: IpAddr) -> Self {
        AddressVector {
            dest,
            sgid_index: 0,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
        }
    }
}

/// Queue pair attributes (`ibv_qp_attr`). Only the fields named in the mask
/// of a modify call are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpAttr {
    /// Next state.
    pub state: QpState,
    /// Current state, as the caller believes it to be.
    pub cur_state: QpState,
    /// Remote access rights granted to incoming requests.
    pub access: Access,
    /// P_Key table index.
    pub pkey_index: u16,
    /// Port number (1).
    pub port: u8,
    /// Queue key (UD).
    pub qkey: u32,
    /// Destination address (RC/UC).
    pub av: Option<AddressVector>,
    /// Path MTU.
    pub path_mtu: Mtu,
    /// Local ACK timeout code: 4.096 µs × 2^timeout, 0 = infinite.
    pub timeout: u8,
    /// Retries after a timeout or sequence error (0..=7).
    pub retry_cnt: u8,
    /// Retries after an RNR NAK (0..=6, 7 = infinite).
    pub rnr_retry: u8,
    /// Expected PSN of the first incoming request.
    pub rq_psn: Psn,
    /// PSN of the first outgoing request.
    pub sq_psn: Psn,
    /// Outstanding READ/atomic requests this QP may have as initiator.
    pub max_rd_atomic: u8,
    /// Incoming READ/atomic requests this QP keeps responder resources for.
    pub max_dest_rd_atomic: u8,
    /// RNR timer code this QP asks senders to wait (0..=31).
    pub min_rnr_timer: u8,
    /// Destination QP number (RC/UC).
    pub dest_qpn: u32,
    /// Request an async event when the SQ drains (SQD).
    pub en_sqd_async_notify: bool,
}

impl Default for QpAttr {
    fn default() -> Self {
        QpAttr {
            state: QpState::Reset,
            cur_state: QpState::Reset,
            access: Access::empty(),
            pkey_index: 0,
            port: 1,
            qkey: 0,
            av: None,
            path_mtu: Mtu::Mtu1024,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            rq_psn: Psn::new(0),
            sq_psn: Psn::new(0),
            max_rd_atomic: 1,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
            dest_qpn: 0,
            en_sqd_async_notify: false,
        }
    }
}

/// QP capacities (`ibv_qp_cap`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpCap {
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// Gather entries per send WR.
    pub max_send_sge: u32,
    /// Scatter entries per receive WR.
    pub max_recv_sge: u32,
    /// Bytes of inline data per send WR.
    pub max_inline_data: u32,
}

impl Default for QpCap {
    fn default() -> Self {
        QpCap {
            max_send_wr: 256,
            max_recv_wr: 256,
            max_send_sge: 16,
            max_recv_sge: 16,
            max_inline_data: 256,
        }
    }
}

/// Slots in a queue asked to hold `n` entries: the kernel's rxe rounds a
/// ring up to a power of two and keeps one slot empty (`rxe_queue_init`),
/// so 0 stays 0, 1 is 1, 2 and 3 are 3, 16 is 31.
pub fn queue_slots(n: u32) -> u32 {
    if n == 0 {
        0
    } else {
        (u64::from(n) + 1)
            .next_power_of_two()
            .saturating_sub(1)
            .min(u64::from(u32::MAX)) as u32
    }
}

impl QpCap {
    /// What a QP created with these (checked) capacities holds, as the
    /// kernel's rxe sizes it: each queue rounded by [`queue_slots`], and a
    /// send WQE as large as the larger of its SGEs (16 bytes each) and its
    /// inline data, which sets both (`rxe_qp_init_req`). With an SRQ the
    /// QP has no receive queue of its own.
    pub fn granted(self, srq: bool) -> QpCap {
        let wqe = (self.max_send_sge * 16).max(self.max_inline_data);
        QpCap {
            max_send_wr: queue_slots(self.max_send_wr),
            max_recv_wr: if srq {
                0
            } else {
                queue_slots(self.max_recv_wr)
            },
            max_send_sge: wqe / 16,
            max_recv_sge: if srq { 0 } else { self.max_recv_sge },
            max_inline_data: wqe,
        }
    }
}

/// A scatter/gather element: `length` bytes at `addr` in the region of `lkey`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Sge {
    /// Address (virtual address of the region, or offset for zero-based regions).
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// Local key of the region.
    pub lkey: u32,
}

/// Send work request opcodes (`ibv_wr_opcode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SendOpcode {
    /// SEND.
    Send,
    /// SEND with immediate data.
    SendWithImm,
    /// SEND that invalidates a remote key at the responder.
    SendWithInv,
    /// RDMA WRITE.
    RdmaWrite,
    /// RDMA WRITE with immediate data (consumes a receive at the responder).
    RdmaWriteWithImm,
    /// RDMA READ.
    RdmaRead,
    /// Atomic compare-and-swap on 8 bytes.
    AtomicCmpSwap,
    /// Atomic fetch-and-add on 8 bytes.
    AtomicFetchAdd,
    /// RDMA ATOMIC WRITE (IBTA 1.5, the kernel's rxe since 6.2): the
    /// 8 bytes of the gather list (or inline data) stored at
    /// `remote_addr` in one indivisible write, after every earlier
    /// request of the QP. RC only.
    AtomicWrite,
    /// RDMA FLUSH (IBTA 1.5, the kernel's rxe since 6.2): makes what
    /// earlier WRITEs placed in `flush`'s range (or the whole region) of
    /// `remote_addr`/`rkey` visible or persistent, and completes when the
    /// responder says it is. No data travels. RC only.
    Flush,
    /// Invalidate a local key (memory window or region).
    LocalInv,
    /// Bind a type 2 memory window.
    BindMw,
}

bitflags! {
    /// Send work request flags (`ibv_send_flags`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct SendFlags: u32 {
        /// Wait for earlier READ/atomic operations to complete first.
        const FENCE = 1 << 0;
        /// Produce a completion even when the QP is not `sq_sig_all`.
        const SIGNALED = 1 << 1;
        /// Set the solicited event bit on the last packet.
        const SOLICITED = 1 << 2;
        /// The gather list is copied at post time.
        const INLINE = 1 << 3;
    }
}

/// Parameters of a memory-window bind (`ibv_mw_bind_info`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MwBind {
    /// The window's current rkey.
    pub mw_rkey: u32,
    /// The new rkey (the low 8 bits may change on each bind).
    pub new_rkey: u32,
    /// The region the window is bound to.
    pub mr_lkey: u32,
    /// Start address within the region.
    pub addr: u64,
    /// Length.
    pub length: u64,
    /// Remote access rights through the window.
    pub access: Access,
}

/// What a FLUSH asks (`ibv_wr_flush`'s `len`, `type` and `level`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FlushParams {
    /// Bytes from `remote_addr` (ignored with `whole_region`).
    pub len: u32,
    /// Placement type (FETH bits 3:0): bit 0 global visibility
    /// (`IBV_FLUSH_GLOBAL`), bit 1 persistence (`IBV_FLUSH_PERSISTENT`).
    pub placement: u8,
    /// The whole region the key names rather than a range of it
    /// (`IBV_FLUSH_MR`, selectivity level 1).
    pub whole_region: bool,
}

impl FlushParams {
    /// The access rights a FLUSH with this placement type needs, of the
    /// responder's QP and of the region.
    pub fn rights(&self) -> Access {
        let mut a = Access::empty();
        if self.placement & 1 != 0 {
            a |= Access::FLUSH_GLOBAL;
        }
        if self.placement & 2 != 0 {
            a |= Access::FLUSH_PERSISTENT;
        }
        a
    }
}

/// A send work request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendWr {
    /// Caller's identifier, returned in the completion.
    pub wr_id: u64,
    /// Operation.
    pub opcode: SendOpcode,
    /// Flags.
    pub flags: SendFlags,
    /// Gather list (ignored when `inline_data` is set).
    pub sg_list: Vec<Sge>,
    /// Data copied at post time (`IBV_SEND_INLINE`).
    pub inline_data: Option<Vec<u8>>,
    /// Immediate data (network byte order value as in `ibv_send_wr.imm_data`).
    pub imm_data: u32,
    /// R_Key to invalidate (SEND with invalidate, LOCAL_INV).
    pub invalidate_rkey: u32,
    /// Remote address (WRITE, READ, atomics).
    pub remote_addr: u64,
    /// Remote key (WRITE, READ, atomics).
    pub rkey: u32,
    /// Compare value (compare-and-swap).
    pub compare_add: u64,
    /// Swap value (compare-and-swap); the addend is `compare_add` for fetch-and-add, as in verbs.
    pub swap: u64,
    /// UD destination.
    pub ud: Option<UdDest>,
    /// Memory-window bind (BIND_MW).
    pub bind: Option<MwBind>,
    /// What a FLUSH asks (FLUSH only).
    pub flush: FlushParams,
}

impl SendWr {
    /// A work request with everything but the opcode and id zero.
    pub fn new(wr_id: u64, opcode: SendOpcode) -> Self {
        SendWr {
            wr_id,
            opcode,
            flags: SendFlags::SIGNALED,
            sg_list: Vec::new(),
            inline_data: None,
            imm_data: 0,
            invalidate_rkey: 0,
            remote_addr: 0,
            rkey: 0,
            compare_add: 0,
            swap: 0,
            ud: None,
            bind: None,
            flush: FlushParams::default(),
        }
    }
}

/// Where a UD send goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdDest {
    /// Address vector of the address handle.
    pub av: AddressVector,
    /// Remote QP number.
    pub remote_qpn: u32,
    /// Remote Q_Key; a value with the high bit set means "use the QP's Q_Key".
    pub remote_qkey: u32,
}

/// A receive work request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecvWr {
    /// Caller's identifier, returned in the completion.
    pub wr_id: u64,
    /// Scatter list.
    pub sg_list: Vec<Sge>,
}

/// Completion status (`ibv_wc_status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WcStatus {
    /// The work request completed.
    Success,
    /// A receive buffer was too small, or a gather exceeded limits.
    LocLenErr,
    /// Internal QP consistency error.
    LocQpOpErr,
    /// A local key, address or access right was wrong.
    LocProtErr,
    /// The QP moved to error; this request was not performed.
    WrFlushErr,
    /// A memory-window bind failed.
    MwBindErr,
    /// The responder reported an invalid request.
    RemInvReqErr,
    /// The responder reported a key, address or access error.
    RemAccessErr,
    /// The responder could not complete the operation.
    RemOpErr,
    /// No ACK within the timeout after `retry_cnt` retries.
    RetryExcErr,
    /// RNR NAKs after `rnr_retry` retries.
    RnrRetryExcErr,
    /// The responder reported an invalid RD request.
    RemInvalidRdReqErr,
    /// A general error.
    GeneralErr,
}

impl WcStatus {
    /// The libibverbs name (`IBV_WC_SUCCESS`, ...).
    pub const fn ibv_name(self) -> &'static str {
        match self {
            WcStatus::Success => "IBV_WC_SUCCESS",
            WcStatus::LocLenErr => "IBV_WC_LOC_LEN_ERR",
            WcStatus::LocQpOpErr => "IBV_WC_LOC_QP_OP_ERR",
            WcStatus::LocProtErr => "IBV_WC_LOC_PROT_ERR",
            WcStatus::WrFlushErr => "IBV_WC_WR_FLUSH_ERR",
            WcStatus::MwBindErr => "IBV_WC_MW_BIND_ERR",
            WcStatus::RemInvReqErr => "IBV_WC_REM_INV_REQ_ERR",
            WcStatus::RemAccessErr => "IBV_WC_REM_ACCESS_ERR",
            WcStatus::RemOpErr => "IBV_WC_REM_OP_ERR",
            WcStatus::RetryExcErr => "IBV_WC_RETRY_EXC_ERR",
            WcStatus::RnrRetryExcErr => "IBV_WC_RNR_RETRY_EXC_ERR",
            WcStatus::RemInvalidRdReqErr => "IBV_WC_REM_INV_RD_REQ_ERR",
            WcStatus::GeneralErr => "IBV_WC_GENERAL_ERR",
        }
    }
}

impl fmt::Display for WcStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.ibv_name())
    }
}

/// Completion opcodes (`ibv_wc_opcode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WcOpcode {
    /// A SEND completed.
    Send,
    /// An RDMA WRITE completed.
    RdmaWrite,
    /// An RDMA READ completed.
    RdmaRead,
    /// A compare-and-swap completed.
    CompSwap,
    /// A fetch-and-add completed.
    FetchAdd,
    /// An ATOMIC WRITE completed (`IBV_WC_ATOMIC_WRITE`).
    AtomicWrite,
    /// A FLUSH completed (`IBV_WC_FLUSH`).
    Flush,
    /// A memory-window bind completed.
    BindMw,
    /// A local invalidate completed.
    LocalInv,
    /// A SEND was received.
    Recv,
    /// An RDMA WRITE with immediate was received.
    RecvRdmaWithImm,
}

/// A work completion (`ibv_wc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// The work request's id.
    pub wr_id: u64,
    /// Status.
    pub status: WcStatus,
    /// What completed.
    pub opcode: WcOpcode,
    /// The local QP.
    pub qp_num: u32,
    /// Bytes received (receives) or transferred.
    pub byte_len: u32,
    /// Immediate data, if the message carried it.
    pub imm_data: Option<u32>,
    /// The R_Key invalidated by a SEND with invalidate.
    pub invalidated_rkey: Option<u32>,
    /// Source QP (UD receives).
    pub src_qp: u32,
    /// Whether the first 40 bytes of the buffer hold a GRH (UD receives).
    pub grh: bool,
    /// P_Key index.
    pub pkey_index: u16,
}

/// What a device supports, as `ibv_query_device` reports it. The engine
/// checks attributes and work requests against these limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceCaps {
    /// Largest registrable region in bytes.
    pub max_mr_size: u64,
    /// Queue pairs.
    pub max_qp: u32,
    /// Work requests per queue.
    pub max_qp_wr: u32,
    /// Scatter/gather entries per work request.
    pub max_sge: u32,
    /// Completion queue entries.
    pub max_cqe: u32,
    /// Incoming READ/atomic requests per QP (`max_dest_rd_atomic` limit).
    pub max_qp_rd_atom: u8,
    /// Outgoing READ/atomic requests per QP (`max_rd_atomic` limit).
    pub max_qp_init_rd_atom: u8,
    /// Inline data per send work request.
    pub max_inline_data: u32,
    /// P_Key table entries (index 0 is 0xFFFF).
    pub max_pkeys: u16,
    /// Largest message in bytes.
    pub max_msg_size: u32,
    /// Shared receive queues.
    pub max_srq: u32,
    /// Scatter entries per SRQ receive (the kernel's rxe: 27, what fits its
    /// receive WQE).
    pub max_srq_sge: u32,
    /// Memory windows.
    pub max_mw: u32,
}

impl Default for DeviceCaps {
    fn default() -> Self {
        // The kernel's rxe defaults (rxe_param.h), where they make sense.
        DeviceCaps {
            max_mr_size: u64::MAX,
            max_qp: 1 << 16,
            max_qp_wr: 1 << 20,
            max_sge: 32,
            max_cqe: (1 << 15) - 1,
            max_qp_rd_atom: 128,
            max_qp_init_rd_atom: 128,
            max_inline_data: 512,
            max_pkeys: 64,
            max_msg_size: 1 << 31,
            max_srq: 0xdffff,
            max_srq_sge: 27,
            max_mw: 0x7ffff,
        }
    }
}
