//! Checks of the native backend that need no RDMA device.

use super::ffi::*;
use rxe_core::types::{Access, QpAttrMask};
use rxe_ibverbs_sys::{ibv_mw, ibv_mw_bind, ibv_mw_bind_info, pthread_cond_t, pthread_mutex_t};
use rxe_ibverbs_sys::{IBV_QPS_RESET, IBV_QPS_RTS};
use std::mem::{offset_of, size_of};
use std::process::Command;

macro_rules! size {
    ($kw:literal $t:ident) => {
        (
            concat!("sizeof(", $kw, " ", stringify!($t), ")").to_string(),
            size_of::<$t>(),
        )
    };
}

macro_rules! offs {
    ($t:ident: $($f:ident),+ $(,)?) => {
        vec![$((
            concat!("offsetof(struct ", stringify!($t), ", ", stringify!($f), ")").to_string(),
            offset_of!($t, $f),
        )),+]
    };
}

/// The offset of C member `$c` of `struct $t`, which bindgen's Rust
/// reaches by the field path `$rust` (through a `__bindgen_anon_N` for an
/// anonymous union, or a field bindgen renamed).
macro_rules! off {
    ($t:ident, $c:literal, $($rust:tt)+) => {
        (
            concat!("offsetof(struct ", stringify!($t), ", ", $c, ")").to_string(),
            offset_of!($t, $($rust)+),
        )
    };
}

/// Every size and offset the native backend relies on, as a C expression
/// over `<infiniband/verbs.h>` and the number the generated bindings it
/// uses (crate rxe-ibverbs-sys) give. bindgen's own assertions and
/// `tests/ibverbs_abi.rs` check the whole generated file against rdma-core
/// 44's header; this checks the part this backend touches against the
/// header installed here, and runs with rxe-verbs' unit tests.
fn layout_table() -> Vec<(String, usize)> {
    let mut t = vec![
        size!("union" ibv_gid),
        size!("struct" ibv_gid_entry),
        size!("struct" ibv_device),
        size!("struct" ibv_context_ops),
        size!("struct" ibv_context),
        size!("struct" verbs_context),
        size!("struct" ibv_device_attr),
        size!("struct" ibv_port_attr),
        size!("struct" ibv_async_event),
        size!("struct" ibv_wc),
        size!("struct" ibv_mw_bind_info),
        size!("struct" ibv_pd),
        size!("struct" ibv_mr),
        size!("struct" ibv_mw),
        size!("struct" ibv_mw_bind),
        size!("struct" ibv_global_route),
        size!("struct" ibv_ah_attr),
        size!("struct" ibv_srq_attr),
        size!("struct" ibv_srq_init_attr),
        size!("struct" ibv_qp_cap),
        size!("struct" ibv_qp_init_attr),
        size!("struct" ibv_qp_attr),
        size!("struct" ibv_sge),
        size!("struct" ibv_send_wr),
        size!("struct" ibv_recv_wr),
        size!("struct" ibv_srq),
        size!("struct" ibv_qp),
        size!("struct" ibv_comp_channel),
        size!("struct" ibv_cq),
        size!("struct" ibv_ah),
        (
            "sizeof(pthread_mutex_t)".into(),
            size_of::<pthread_mutex_t>(),
        ),
        ("sizeof(pthread_cond_t)".into(), size_of::<pthread_cond_t>()),
    ];
    t.extend(offs!(ibv_gid_entry: gid, gid_index, port_num, gid_type, ndev_ifindex));
    t.extend(offs!(ibv_device: node_type, transport_type, name, dev_name, dev_path, ibdev_path));
    t.extend(
        offs!(ibv_context_ops: alloc_mw, bind_mw, dealloc_mw, poll_cq, req_notify_cq,
        post_srq_recv, post_send, post_recv, _compat_async_event),
    );
    t.extend(
        offs!(ibv_context: device, ops, cmd_fd, async_fd, num_comp_vectors, mutex,
        abi_compat),
    );
    t.extend(offs!(verbs_context: query_port, sz, context));
    t.push(off!(verbs_context, "_ABI_placeholder3", _ABI_placeholder3));
    t.extend(
        offs!(ibv_device_attr: fw_ver, node_guid, sys_image_guid, max_mr_size,
        page_size_cap, vendor_id, vendor_part_id, hw_ver, max_qp, max_qp_wr, device_cap_flags,
        max_sge, max_sge_rd, max_cq, max_cqe, max_mr, max_pd, max_qp_rd_atom, max_ee_rd_atom,
        max_res_rd_atom, max_qp_init_rd_atom, max_ee_init_rd_atom, atomic_cap, max_ee, max_rdd,
        max_mw, max_raw_ipv6_qp, max_raw_ethy_qp, max_mcast_grp, max_mcast_qp_attach,
        max_total_mcast_qp_attach, max_ah, max_fmr, max_map_per_fmr, max_srq, max_srq_wr,
        max_srq_sge, max_pkeys, local_ca_ack_delay, phys_port_cnt),
    );
    t.extend(
        offs!(ibv_port_attr: state, max_mtu, active_mtu, gid_tbl_len, port_cap_flags,
        max_msg_sz, bad_pkey_cntr, qkey_viol_cntr, pkey_tbl_len, lid, sm_lid, lmc, max_vl_num,
        sm_sl, subnet_timeout, init_type_reply, active_width, active_speed, phys_state,
        link_layer, flags, port_cap_flags2),
    );
    t.extend(offs!(ibv_async_event: element, event_type));
    t.extend(
        offs!(ibv_wc: wr_id, status, opcode, vendor_err, byte_len, qp_num,
        src_qp, wc_flags, pkey_index, slid, sl, dlid_path_bits),
    );
    t.push(off!(ibv_wc, "imm_data", __bindgen_anon_1.imm_data));
    t.push(off!(
        ibv_wc,
        "invalidated_rkey",
        __bindgen_anon_1.invalidated_rkey
    ));
    t.extend(offs!(ibv_mw_bind_info: mr, addr, length, mw_access_flags));
    t.extend(offs!(ibv_pd: context, handle));
    t.extend(offs!(ibv_mr: context, pd, addr, length, handle, lkey, rkey));
    t.extend(offs!(ibv_mw: context, pd, rkey, handle));
    t.push(off!(ibv_mw, "type", type_));
    t.extend(offs!(ibv_mw_bind: wr_id, send_flags, bind_info));
    t.extend(offs!(ibv_global_route: dgid, flow_label, sgid_index, hop_limit, traffic_class));
    t.extend(
        offs!(ibv_ah_attr: grh, dlid, sl, src_path_bits, static_rate, is_global,
        port_num),
    );
    t.extend(offs!(ibv_srq_attr: max_wr, max_sge, srq_limit));
    t.extend(offs!(ibv_srq_init_attr: srq_context, attr));
    t.extend(
        offs!(ibv_qp_cap: max_send_wr, max_recv_wr, max_send_sge, max_recv_sge,
        max_inline_data),
    );
    t.extend(
        offs!(ibv_qp_init_attr: qp_context, send_cq, recv_cq, srq, cap, qp_type,
        sq_sig_all),
    );
    t.extend(
        offs!(ibv_qp_attr: qp_state, cur_qp_state, path_mtu, path_mig_state, qkey,
        rq_psn, sq_psn, dest_qp_num, qp_access_flags, cap, ah_attr, alt_ah_attr, pkey_index,
        alt_pkey_index, en_sqd_async_notify, sq_draining, max_rd_atomic, max_dest_rd_atomic,
        min_rnr_timer, port_num, timeout, retry_cnt, rnr_retry, alt_port_num, alt_timeout,
        rate_limit),
    );
    t.extend(offs!(ibv_sge: addr, length, lkey));
    t.extend(offs!(ibv_send_wr: wr_id, next, sg_list, num_sge, opcode, send_flags, wr));
    t.extend([
        off!(ibv_send_wr, "imm_data", __bindgen_anon_1.imm_data),
        off!(
            ibv_send_wr,
            "invalidate_rkey",
            __bindgen_anon_1.invalidate_rkey
        ),
        off!(ibv_send_wr, "wr.rdma.remote_addr", wr.rdma.remote_addr),
        off!(ibv_send_wr, "wr.rdma.rkey", wr.rdma.rkey),
        off!(ibv_send_wr, "wr.atomic.remote_addr", wr.atomic.remote_addr),
        off!(ibv_send_wr, "wr.atomic.compare_add", wr.atomic.compare_add),
        off!(ibv_send_wr, "wr.atomic.swap", wr.atomic.swap),
        off!(ibv_send_wr, "wr.atomic.rkey", wr.atomic.rkey),
        off!(ibv_send_wr, "wr.ud.ah", wr.ud.ah),
        off!(ibv_send_wr, "wr.ud.remote_qpn", wr.ud.remote_qpn),
        off!(ibv_send_wr, "wr.ud.remote_qkey", wr.ud.remote_qkey),
        off!(
            ibv_send_wr,
            "qp_type.xrc.remote_srqn",
            qp_type.xrc.remote_srqn
        ),
        off!(ibv_send_wr, "bind_mw.mw", __bindgen_anon_2.bind_mw.mw),
        off!(ibv_send_wr, "bind_mw.rkey", __bindgen_anon_2.bind_mw.rkey),
        off!(
            ibv_send_wr,
            "bind_mw.bind_info",
            __bindgen_anon_2.bind_mw.bind_info
        ),
        off!(ibv_send_wr, "tso.hdr_sz", __bindgen_anon_2.tso.hdr_sz),
        off!(ibv_send_wr, "tso.mss", __bindgen_anon_2.tso.mss),
    ]);
    t.extend(offs!(ibv_recv_wr: wr_id, next, sg_list, num_sge));
    t.extend(offs!(ibv_srq: context, srq_context, pd, handle, mutex, cond, events_completed));
    t.extend(
        offs!(ibv_qp: context, qp_context, pd, send_cq, recv_cq, srq, handle, qp_num,
        state, qp_type, mutex, cond, events_completed),
    );
    t.extend(offs!(ibv_comp_channel: context, fd, refcnt));
    t.extend(
        offs!(ibv_cq: context, channel, cq_context, handle, cqe, mutex, cond,
        comp_events_completed, async_events_completed),
    );
    t.extend(offs!(ibv_ah: context, pd, handle));
    t
}

/// The constants the conversions rely on, as C expressions, and the value
/// the Rust code uses: the generated constant, or for the bits the API
/// passes through unchanged (`QpAttrMask`, `Access`) the API's own bit.
fn constant_table() -> Vec<(String, usize)> {
    let c = |e: &str, v: u32| (e.to_string(), v as usize);
    vec![
        c("IBV_WC_SUCCESS", IBV_WC_SUCCESS),
        c("IBV_WC_LOC_LEN_ERR", IBV_WC_LOC_LEN_ERR),
        c("IBV_WC_LOC_PROT_ERR", IBV_WC_LOC_PROT_ERR),
        c("IBV_WC_WR_FLUSH_ERR", IBV_WC_WR_FLUSH_ERR),
        c("IBV_WC_MW_BIND_ERR", IBV_WC_MW_BIND_ERR),
        c("IBV_WC_LOC_ACCESS_ERR", IBV_WC_LOC_ACCESS_ERR),
        c("IBV_WC_REM_INV_REQ_ERR", IBV_WC_REM_INV_REQ_ERR),
        c("IBV_WC_REM_ACCESS_ERR", IBV_WC_REM_ACCESS_ERR),
        c("IBV_WC_REM_OP_ERR", IBV_WC_REM_OP_ERR),
        c("IBV_WC_RETRY_EXC_ERR", IBV_WC_RETRY_EXC_ERR),
        c("IBV_WC_RNR_RETRY_EXC_ERR", IBV_WC_RNR_RETRY_EXC_ERR),
        c("IBV_WC_REM_INV_RD_REQ_ERR", IBV_WC_REM_INV_RD_REQ_ERR),
        c("IBV_WC_REM_ABORT_ERR", IBV_WC_REM_ABORT_ERR),
        c("IBV_WC_GENERAL_ERR", rxe_ibverbs_sys::IBV_WC_GENERAL_ERR),
        c("IBV_WC_SEND", IBV_WC_SEND),
        c("IBV_WC_RDMA_WRITE", IBV_WC_RDMA_WRITE),
        c("IBV_WC_RDMA_READ", IBV_WC_RDMA_READ),
        c("IBV_WC_COMP_SWAP", IBV_WC_COMP_SWAP),
        c("IBV_WC_FETCH_ADD", IBV_WC_FETCH_ADD),
        c("IBV_WC_BIND_MW", IBV_WC_BIND_MW),
        c("IBV_WC_LOCAL_INV", IBV_WC_LOCAL_INV),
        c("IBV_WC_ATOMIC_WRITE", IBV_WC_ATOMIC_WRITE),
        c("IBV_WC_RECV", IBV_WC_RECV),
        c("IBV_WC_RECV_RDMA_WITH_IMM", IBV_WC_RECV_RDMA_WITH_IMM),
        c("IBV_WC_GRH", IBV_WC_GRH),
        c("IBV_WC_WITH_IMM", IBV_WC_WITH_IMM),
        c("IBV_WC_WITH_INV", IBV_WC_WITH_INV),
        c("IBV_WR_RDMA_WRITE", IBV_WR_RDMA_WRITE),
        c("IBV_WR_RDMA_WRITE_WITH_IMM", IBV_WR_RDMA_WRITE_WITH_IMM),
        c("IBV_WR_SEND", IBV_WR_SEND),
        c("IBV_WR_SEND_WITH_IMM", IBV_WR_SEND_WITH_IMM),
        c("IBV_WR_RDMA_READ", IBV_WR_RDMA_READ),
        c("IBV_WR_ATOMIC_CMP_AND_SWP", IBV_WR_ATOMIC_CMP_AND_SWP),
        c("IBV_WR_ATOMIC_FETCH_AND_ADD", IBV_WR_ATOMIC_FETCH_AND_ADD),
        c("IBV_WR_LOCAL_INV", IBV_WR_LOCAL_INV),
        c("IBV_WR_BIND_MW", IBV_WR_BIND_MW),
        c("IBV_WR_SEND_WITH_INV", IBV_WR_SEND_WITH_INV),
        c("IBV_WR_ATOMIC_WRITE", IBV_WR_ATOMIC_WRITE),
        c("IBV_SEND_FENCE", IBV_SEND_FENCE),
        c("IBV_SEND_SIGNALED", IBV_SEND_SIGNALED),
        c("IBV_SEND_SOLICITED", IBV_SEND_SOLICITED),
        c("IBV_SEND_INLINE", IBV_SEND_INLINE),
        c("IBV_QPT_RC", IBV_QPT_RC),
        c("IBV_QPT_UC", IBV_QPT_UC),
        c("IBV_QPT_UD", IBV_QPT_UD),
        c("IBV_QPS_RESET", IBV_QPS_RESET),
        c("IBV_QPS_RTS", IBV_QPS_RTS),
        c("IBV_QPS_ERR", IBV_QPS_ERR),
        c("IBV_QP_STATE", QpAttrMask::STATE.bits()),
        c("IBV_QP_ACCESS_FLAGS", QpAttrMask::ACCESS_FLAGS.bits()),
        c("IBV_QP_AV", QpAttrMask::AV.bits()),
        c("IBV_QP_SQ_PSN", QpAttrMask::SQ_PSN.bits()),
        c("IBV_QP_DEST_QPN", QpAttrMask::DEST_QPN.bits()),
        c("IBV_ACCESS_LOCAL_WRITE", Access::LOCAL_WRITE.bits()),
        c("IBV_ACCESS_REMOTE_ATOMIC", Access::REMOTE_ATOMIC.bits()),
        c("IBV_ACCESS_ZERO_BASED", Access::ZERO_BASED.bits()),
        c("IBV_SRQ_LIMIT", IBV_SRQ_LIMIT),
        c("IBV_EVENT_CQ_ERR", IBV_EVENT_CQ_ERR),
        c("IBV_EVENT_QP_FATAL", IBV_EVENT_QP_FATAL),
        c("IBV_EVENT_QP_REQ_ERR", IBV_EVENT_QP_REQ_ERR),
        c("IBV_EVENT_QP_ACCESS_ERR", IBV_EVENT_QP_ACCESS_ERR),
        c("IBV_EVENT_COMM_EST", IBV_EVENT_COMM_EST),
        c("IBV_EVENT_SQ_DRAINED", IBV_EVENT_SQ_DRAINED),
        c("IBV_EVENT_PORT_ACTIVE", IBV_EVENT_PORT_ACTIVE),
        c("IBV_EVENT_SRQ_LIMIT_REACHED", IBV_EVENT_SRQ_LIMIT_REACHED),
        c("IBV_GID_TYPE_ROCE_V2", IBV_GID_TYPE_ROCE_V2),
        c("IBV_PORT_ACTIVE", IBV_PORT_ACTIVE),
        c("IBV_LINK_LAYER_ETHERNET", IBV_LINK_LAYER_ETHERNET),
        (
            "(size_t)__VERBS_ABI_IS_EXTENDED".into(),
            VERBS_ABI_IS_EXTENDED,
        ),
    ]
}

/// Compiles a C program printing every entry of the tables against the
/// installed `<infiniband/verbs.h>` and compares. Skipped (with a note)
/// where there is no C compiler or no header (`apt-get install gcc
/// libibverbs-dev`); the default build never needs either.
#[test]
fn layout_matches_the_c_header() {
    let header = std::path::Path::new("/usr/include/infiniband/verbs.h");
    if !header.exists() {
        eprintln!(
            "skipped: no {} (apt-get install libibverbs-dev)",
            header.display()
        );
        return;
    }
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let mut table = layout_table();
    table.extend(constant_table());
    let mut src = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include <pthread.h>\n\
         #include <infiniband/verbs.h>\nint main(void) {\n",
    );
    for (expr, _) in &table {
        src.push_str(&format!("  printf(\"%zu\\n\", (size_t)({expr}));\n"));
    }
    src.push_str("  return 0;\n}\n");
    let dir = std::env::temp_dir().join(format!("rxe-verbs-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let c = dir.join("layout.c");
    let exe = dir.join("layout");
    std::fs::write(&c, src).unwrap();
    let out = match Command::new(&cc).arg("-o").arg(&exe).arg(&c).output() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("skipped: no C compiler ({cc}: {e})");
            return;
        }
    };
    assert!(
        out.status.success(),
        "compiling the layout check failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().unwrap();
    assert!(run.status.success());
    let _ = std::fs::remove_dir_all(&dir);
    let got: Vec<usize> = String::from_utf8(run.stdout)
        .unwrap()
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert_eq!(got.len(), table.len());
    let wrong: Vec<String> = table
        .iter()
        .zip(&got)
        .filter(|((_, rust), c)| *rust != **c)
        .map(|((e, rust), c)| format!("{e}: C says {c}, Rust says {rust}"))
        .collect();
    assert!(wrong.is_empty(), "layout mismatches:\n{}", wrong.join("\n"));
    eprintln!("{} sizes, offsets and constants match verbs.h", table.len());
}

/// Completions convert with the meaning the soft stack gives them.
#[test]
fn completion_conversion() {
    let w = ibv_wc {
        wr_id: 7,
        status: IBV_WC_SUCCESS,
        opcode: IBV_WC_RECV_RDMA_WITH_IMM,
        byte_len: 12,
        __bindgen_anon_1: wc_imm {
            imm_data: 0x1234_5678u32.to_be(),
        },
        qp_num: 0x11,
        wc_flags: IBV_WC_WITH_IMM,
        ..Default::default()
    };
    let c = super::cq::completion(&w);
    assert_eq!(c.imm_data, Some(0x1234_5678));
    assert_eq!(c.opcode, rxe_core::types::WcOpcode::RecvRdmaWithImm);
    let w = ibv_wc {
        status: IBV_WC_WR_FLUSH_ERR,
        opcode: IBV_WC_RECV | 0x20,
        ..Default::default()
    };
    let c = super::cq::completion(&w);
    assert_eq!(c.status, rxe_core::types::WcStatus::WrFlushErr);
    assert_eq!(c.opcode, rxe_core::types::WcOpcode::Recv);
    assert_eq!(c.imm_data, None);
    let w = ibv_wc {
        status: rxe_ibverbs_sys::IBV_WC_FATAL_ERR,
        wc_flags: IBV_WC_WITH_INV,
        __bindgen_anon_1: wc_imm {
            invalidated_rkey: 0xabcd,
        },
        ..Default::default()
    };
    let c = super::cq::completion(&w);
    assert_eq!(c.status, rxe_core::types::WcStatus::GeneralErr);
    assert_eq!(c.invalidated_rkey, Some(0xabcd));
}

/// Loading a library that is not there is an error that names it, not a
/// crash.
#[test]
fn loading_a_missing_library_fails_cleanly() {
    let e = super::loader::load("/nonexistent/libibverbs.so.1").unwrap_err();
    assert!(e.contains("nonexistent"), "{e}");
}
