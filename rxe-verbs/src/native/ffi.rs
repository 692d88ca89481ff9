//! The part of `verbs.h` this backend uses: names from the generated
//! bindings of crate rxe-ibverbs-sys (rdma-core 44, the same file the
//! drop-in uses as its `sys`), and the one value bindgen cannot translate.
//!
//! The layouts are bindgen's, so this file has none of its own: the
//! generated file asserts every size and offset at compile time,
//! `tests/ibverbs_abi.rs` compares them with Debian's headers, and the unit
//! test `native::tests::layout_matches_the_c_header` compares the ones this
//! backend relies on with the installed `<infiniband/verbs.h>`.
//!
//! The layouts of the structs used here have been stable since rdma-core
//! v17; the functions are the exported ones, resolved by `dlsym`
//! (`loader.rs`), or a context's `ops` table.
//!
//! bindgen names the header's anonymous unions after where they sit; the
//! `as` names below say what they are.

pub(super) use rxe_ibverbs_sys::{
    ibv_ah, ibv_ah_attr, ibv_async_event, ibv_comp_channel, ibv_context, ibv_context_ops, ibv_cq,
    ibv_device, ibv_device_attr, ibv_gid, ibv_gid_entry, ibv_global_route, ibv_mr, ibv_pd,
    ibv_port_attr, ibv_qp, ibv_qp_attr, ibv_qp_cap, ibv_qp_init_attr, ibv_recv_wr, ibv_send_wr,
    ibv_sge, ibv_srq, ibv_srq_attr, ibv_srq_init_attr, ibv_wc, verbs_context,
};

/// `ibv_send_wr`'s anonymous union of `__be32 imm_data` and
/// `uint32_t invalidate_rkey`.
pub(super) use rxe_ibverbs_sys::ibv_send_wr__bindgen_ty_1 as send_wr_imm;
/// `ibv_send_wr.wr`: the union of `rdma`, `atomic` and `ud`.
pub(super) use rxe_ibverbs_sys::ibv_send_wr__bindgen_ty_2 as wr_union;
/// `ibv_send_wr.wr.rdma`.
pub(super) use rxe_ibverbs_sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 as wr_rdma;
/// `ibv_send_wr.wr.atomic`.
pub(super) use rxe_ibverbs_sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_2 as wr_atomic;
/// `ibv_send_wr.wr.ud`.
pub(super) use rxe_ibverbs_sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_3 as wr_ud;
/// `ibv_wc`'s anonymous union of `__be32 imm_data` and
/// `uint32_t invalidated_rkey`, told apart by `wc_flags`.
#[cfg(test)]
pub(super) use rxe_ibverbs_sys::ibv_wc__bindgen_ty_1 as wc_imm;

// enum ibv_gid_type, ibv_port_state, the link layers, ibv_event_type.
pub(super) use rxe_ibverbs_sys::{
    IBV_EVENT_COMM_EST, IBV_EVENT_CQ_ERR, IBV_EVENT_PORT_ACTIVE, IBV_EVENT_QP_ACCESS_ERR,
    IBV_EVENT_QP_FATAL, IBV_EVENT_QP_REQ_ERR, IBV_EVENT_SQ_DRAINED, IBV_EVENT_SRQ_LIMIT_REACHED,
    IBV_GID_TYPE_IB, IBV_GID_TYPE_ROCE_V1, IBV_GID_TYPE_ROCE_V2, IBV_LINK_LAYER_ETHERNET,
    IBV_LINK_LAYER_INFINIBAND, IBV_PORT_ACTIVE,
};
// enum ibv_wc_status, ibv_wc_opcode, ibv_wc_flags.
pub(super) use rxe_ibverbs_sys::{
    IBV_WC_ATOMIC_WRITE, IBV_WC_BIND_MW, IBV_WC_COMP_SWAP, IBV_WC_FETCH_ADD, IBV_WC_GRH,
    IBV_WC_LOCAL_INV, IBV_WC_LOC_ACCESS_ERR, IBV_WC_LOC_LEN_ERR, IBV_WC_LOC_PROT_ERR,
    IBV_WC_LOC_QP_OP_ERR, IBV_WC_MW_BIND_ERR, IBV_WC_RDMA_READ, IBV_WC_RDMA_WRITE, IBV_WC_RECV,
    IBV_WC_RECV_RDMA_WITH_IMM, IBV_WC_REM_ABORT_ERR, IBV_WC_REM_ACCESS_ERR,
    IBV_WC_REM_INV_RD_REQ_ERR, IBV_WC_REM_INV_REQ_ERR, IBV_WC_REM_OP_ERR, IBV_WC_RETRY_EXC_ERR,
    IBV_WC_RNR_RETRY_EXC_ERR, IBV_WC_SEND, IBV_WC_SUCCESS, IBV_WC_WITH_IMM, IBV_WC_WITH_INV,
    IBV_WC_WR_FLUSH_ERR,
};
// enum ibv_wr_opcode, ibv_send_flags, ibv_srq_attr_mask, ibv_qp_type,
// ibv_qp_state.
pub(super) use rxe_ibverbs_sys::{
    IBV_QPS_ERR, IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD, IBV_SEND_FENCE, IBV_SEND_INLINE,
    IBV_SEND_SIGNALED, IBV_SEND_SOLICITED, IBV_SRQ_LIMIT, IBV_SRQ_MAX_WR,
    IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_WR_ATOMIC_WRITE, IBV_WR_BIND_MW,
    IBV_WR_LOCAL_INV, IBV_WR_RDMA_READ, IBV_WR_RDMA_WRITE, IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_SEND,
    IBV_WR_SEND_WITH_IMM, IBV_WR_SEND_WITH_INV,
};

/// `__VERBS_ABI_IS_EXTENDED`, `((void *)UINTPTR_MAX)`: the `abi_compat` of
/// an `ibv_context` that is the last member of a `struct verbs_context`.
/// A pointer-valued macro, which bindgen leaves out.
pub(super) const VERBS_ABI_IS_EXTENDED: usize = usize::MAX;
