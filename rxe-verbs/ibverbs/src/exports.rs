//! Every symbol of Debian bookworm's libibverbs1 44.0 and librdmacm1 44.0,
//! with its version, bound to the function that implements it
//! (`abi/libibverbs1-44.0.symbols` and `abi/librdmacm1-44.0.symbols` are
//! the lists; `tests/ibverbs_abi.rs` and `tests/rdmacm_abi.rs` compare them
//! with what the built library exports).
//!
//! rustc gives a cdylib a version script of its own, so the versions are
//! set here with `.symver`. A default version (`@@`) must name a symbol
//! defined in the same object file, and rustc may put a function in
//! another one, so each export is a small assembly stub that jumps to the
//! function: the stub's own name stays local (rustc's script hides it),
//! only the versioned name is exported.
//!
//! A verb marked `via KIND` forwards the system library's objects to it
//! (see `native.rs`): its stub first reads the verb's slot in [`FORWARD`],
//! the system library's function of the same name and version. The slot is
//! 0 unless `RXE_PROVIDER` loaded that library, and then the stub jumps
//! straight to ours, as an unmarked stub does (three more instructions).
//! Otherwise [`forward_check`] asks [`crate::native::rxe_is_native`] about
//! the first argument (`dev`: an `ibv_device`, `ctx`: an `ibv_context`,
//! `obj`: an object whose first field is its context) and jumps to ours or
//! to [`forward_call`], which calls the system library's function with
//! `errno` carried across the namespaces. `always` forwards every call once
//! the library is loaded (verbs that name no object).

#[allow(unused_imports)]
use crate::rdmacm::{
    addrinfo as cm_addrinfo, channel as cm_channel, connect as cm_connect, id as cm_id,
    mcast as cm_mcast, qp as cm_qp, rsocket as cm_rsocket,
};
#[allow(unused_imports)]
use crate::*;
use std::sync::atomic::{AtomicUsize, Ordering};

/// `export! { module::function => "name@@VERSION" [via KIND], ... }`: `@@`
/// for the default version a program links against, `@` for an older one
/// kept for binaries built against it; `via` as the module documentation
/// says.
macro_rules! export {
    (@forwards) => { false };
    (@forwards $via:ident) => { true };
    (@kind dev) => { crate::native::ARG_DEVICE };
    (@kind ctx) => { crate::native::ARG_CONTEXT };
    (@kind obj) => { crate::native::ARG_OBJECT };
    (@stub $m:ident $f:ident $name:literal) => {
        std::arch::global_asm!(
            concat!(".globl __rxe_", stringify!($m), "_", stringify!($f)),
            concat!(".type __rxe_", stringify!($m), "_", stringify!($f), ", @function"),
            concat!("__rxe_", stringify!($m), "_", stringify!($f), ":"),
            "jmp {f}",
            concat!(".size __rxe_", stringify!($m), "_", stringify!($f), ", . - __rxe_", stringify!($m), "_", stringify!($f)),
            concat!(".symver __rxe_", stringify!($m), "_", stringify!($f), ", ", $name),
            f = sym $m::$f,
        );
    };
    (@stub $m:ident $f:ident $name:literal always) => {
        std::arch::global_asm!(
            concat!(".globl __rxe_", stringify!($m), "_", stringify!($f)),
            concat!(".type __rxe_", stringify!($m), "_", stringify!($f), ", @function"),
            concat!("__rxe_", stringify!($m), "_", stringify!($f), ":"),
            "mov rax, qword ptr [rip + {tab} + {off}]",
            "test rax, rax",
            "jnz 2f",
            "jmp {f}",
            "2:",
            "jmp {call}",
            concat!(".size __rxe_", stringify!($m), "_", stringify!($f), ", . - __rxe_", stringify!($m), "_", stringify!($f)),
            concat!(".symver __rxe_", stringify!($m), "_", stringify!($f), ", ", $name),
            f = sym $m::$f,
            tab = sym FORWARD,
            off = const Slot::$f as usize * 8,
            call = sym forward_call,
        );
    };
    (@stub $m:ident $f:ident $name:literal $via:ident) => {
        std::arch::global_asm!(
            concat!(".globl __rxe_", stringify!($m), "_", stringify!($f)),
            concat!(".type __rxe_", stringify!($m), "_", stringify!($f), ", @function"),
            concat!("__rxe_", stringify!($m), "_", stringify!($f), ":"),
            "mov rax, qword ptr [rip + {tab} + {off}]",
            "test rax, rax",
            "jnz 2f",
            "jmp {f}",
            "2:",
            "lea r11, [rip + {f}]",
            "mov r10d, {kind}",
            "jmp {check}",
            concat!(".size __rxe_", stringify!($m), "_", stringify!($f), ", . - __rxe_", stringify!($m), "_", stringify!($f)),
            concat!(".symver __rxe_", stringify!($m), "_", stringify!($f), ", ", $name),
            f = sym $m::$f,
            tab = sym FORWARD,
            off = const Slot::$f as usize * 8,
            kind = const export!(@kind $via),
            check = sym forward_check,
        );
    };
    ($($m:ident :: $f:ident => $name:literal $(via $via:ident)?,)*) => {
        /// Each export's index in [`EXPORTS`] and [`FORWARD`].
        #[allow(non_camel_case_types, dead_code, clippy::enum_variant_names)]
        #[repr(usize)]
        enum Slot { $($f,)* }

        /// Every export: `name@VERSION`, and whether it forwards.
        const EXPORTS: &[(&str, bool)] = &[$(($name, export!(@forwards $($via)?)),)*];

        $( export!(@stub $m $f $name $($via)?); )*

        // Each function was written inside `entry!` (`ffi.rs`), which puts
        // a module of its name next to it: one written without it, whose
        // panics would unwind into C, is refused here.
        $( const _: () = $m::$f::GUARDED; )*
    };
}

/// The system library's function behind each forwarding export (0: none,
/// the stub jumps to ours). Written once, by [`resolve_forwards`] when
/// `native.rs` loads the library and before any of its objects reaches
/// the program.
static FORWARD: [AtomicUsize; EXPORTS.len()] = [const { AtomicUsize::new(0) }; EXPORTS.len()];

/// Fills [`FORWARD`] from the system library just loaded (`lib.rs` hands
/// this function to `native.rs`, which calls it): each forwarding
/// export's `name` at its `VERSION` (or unversioned, for a library built
/// without versions). A verb the library lacks stays with ours.
pub fn resolve_forwards(lib: &crate::native::Lib) {
    for (i, (spec, forwards)) in EXPORTS.iter().enumerate() {
        if !forwards {
            continue;
        }
        let Some((name, version)) = spec.split_once('@') else {
            continue;
        };
        let addr = lib.sym(name, version.trim_start_matches('@'));
        FORWARD[i].store(addr, Ordering::Release);
    }
}

/// The forwarding decision, reached from a `via dev|ctx|obj` stub with
/// the verb's arguments in place, the system library's function in `rax`,
/// ours in `r11` and the kind of the first argument in `r10d`. No verb
/// forwarded this way has a stack argument, a vector argument or variable
/// arguments, so the six argument registers are all there is to keep.
#[unsafe(naked)]
unsafe extern "C" fn forward_check() {
    std::arch::naked_asm!(
        "push rdi",
        "push rsi",
        "push rdx",
        "push rcx",
        "push r8",
        "push r9",
        "push rax",
        "push r11",
        // 8 pushes on the caller's return address: realign to 16.
        "sub rsp, 8",
        "mov esi, r10d",
        "call {is_native}",
        "add rsp, 8",
        "mov r10d, eax",
        "pop r11",
        "pop rax",
        "pop r9",
        "pop r8",
        "pop rcx",
        "pop rdx",
        "pop rsi",
        "pop rdi",
        "test r10d, r10d",
        "jnz {call}",
        "jmp r11",
        is_native = sym crate::native::rxe_is_native,
        call = sym forward_call,
    )
}

/// Calls the system library's function in `rax` with the verb's arguments
/// and returns its result, with the program's `errno` copied into the
/// library's namespace before and back after (each namespace has its own
/// C library).
#[unsafe(naked)]
unsafe extern "C" fn forward_call() {
    std::arch::naked_asm!(
        "push rbx",
        "mov rbx, rax",
        "push rdi",
        "push rsi",
        "push rdx",
        "push rcx",
        "push r8",
        "push r9",
        "call {errno_in}",
        "pop r9",
        "pop r8",
        "pop rcx",
        "pop rdx",
        "pop rsi",
        "pop rdi",
        "call rbx",
        "push rax",
        "push rdx",
        "call {errno_out}",
        "pop rdx",
        "pop rax",
        "pop rbx",
        "ret",
        errno_in = sym crate::native::rxe_errno_in,
        errno_out = sym crate::native::rxe_errno_out,
    )
}

/// `version_nodes!("IBVERBS_1.0", ...)`: the absolute symbol that names each
/// version node (`IBVERBS_1.1@@IBVERBS_1.1`), which GNU ld puts in every
/// versioned library and rdma-core's has; rust-lld does not, so they are
/// defined here (an object at address 0, like GNU ld's).
macro_rules! version_nodes {
    ($($v:literal),* $(,)?) => {
        $(
            std::arch::global_asm!(
                concat!(".globl \"__rxe_node_", $v, "\""),
                concat!(".type \"__rxe_node_", $v, "\", @object"),
                concat!(".set \"__rxe_node_", $v, "\", 0"),
                concat!(".symver \"__rxe_node_", $v, "\", ", $v, "@@", $v),
            );
        )*
    };
}

version_nodes!(
    "IBVERBS_1.0",
    "IBVERBS_1.1",
    "IBVERBS_1.5",
    "IBVERBS_1.6",
    "IBVERBS_1.7",
    "IBVERBS_1.8",
    "IBVERBS_1.9",
    "IBVERBS_1.10",
    "IBVERBS_1.11",
    "IBVERBS_1.12",
    "IBVERBS_1.13",
    "IBVERBS_1.14",
    "IBVERBS_PRIVATE_34",
    "RDMACM_1.0",
    "RDMACM_1.1",
    "RDMACM_1.2",
    "RDMACM_1.3",
);

// The one data object: rdma-core's `bool verbs_allow_disassociate_destroy`,
// which no code of this library reads.
std::arch::global_asm!(
    ".pushsection .bss.__rxe_verbs_allow_disassociate_destroy,\"aw\",@nobits",
    ".globl __rxe_verbs_allow_disassociate_destroy",
    ".type __rxe_verbs_allow_disassociate_destroy, @object",
    ".size __rxe_verbs_allow_disassociate_destroy, 1",
    "__rxe_verbs_allow_disassociate_destroy:",
    ".zero 1",
    ".popsection",
    ".symver __rxe_verbs_allow_disassociate_destroy, verbs_allow_disassociate_destroy@@IBVERBS_PRIVATE_34",
);

export! {
    compat::ibv_ack_async_event_1_0 => "ibv_ack_async_event@IBVERBS_1.0",
    compat::ibv_ack_cq_events_1_0 => "ibv_ack_cq_events@IBVERBS_1.0",
    compat::ibv_alloc_pd_1_0 => "ibv_alloc_pd@IBVERBS_1.0",
    compat::ibv_attach_mcast_1_0 => "ibv_attach_mcast@IBVERBS_1.0",
    compat::ibv_close_device_1_0 => "ibv_close_device@IBVERBS_1.0",
    kern::ibv_copy_path_rec_from_kern => "ibv_copy_path_rec_from_kern@@IBVERBS_1.0",
    kern::ibv_copy_path_rec_to_kern => "ibv_copy_path_rec_to_kern@@IBVERBS_1.0",
    kern::ibv_copy_qp_attr_from_kern => "ibv_copy_qp_attr_from_kern@@IBVERBS_1.0",
    compat::ibv_create_ah_1_0 => "ibv_create_ah@IBVERBS_1.0",
    cq::ibv_create_comp_channel => "ibv_create_comp_channel@@IBVERBS_1.0" via ctx,
    compat::ibv_create_cq_1_0 => "ibv_create_cq@IBVERBS_1.0",
    compat::ibv_create_qp_1_0 => "ibv_create_qp@IBVERBS_1.0",
    compat::ibv_create_srq_1_0 => "ibv_create_srq@IBVERBS_1.0",
    compat::ibv_dealloc_pd_1_0 => "ibv_dealloc_pd@IBVERBS_1.0",
    compat::ibv_dereg_mr_1_0 => "ibv_dereg_mr@IBVERBS_1.0",
    compat::ibv_destroy_ah_1_0 => "ibv_destroy_ah@IBVERBS_1.0",
    cq::ibv_destroy_comp_channel => "ibv_destroy_comp_channel@@IBVERBS_1.0" via obj,
    compat::ibv_destroy_cq_1_0 => "ibv_destroy_cq@IBVERBS_1.0",
    compat::ibv_destroy_qp_1_0 => "ibv_destroy_qp@IBVERBS_1.0",
    compat::ibv_destroy_srq_1_0 => "ibv_destroy_srq@IBVERBS_1.0",
    compat::ibv_detach_mcast_1_0 => "ibv_detach_mcast@IBVERBS_1.0",
    compat::ibv_free_device_list_1_0 => "ibv_free_device_list@IBVERBS_1.0",
    compat::ibv_get_async_event_1_0 => "ibv_get_async_event@IBVERBS_1.0",
    compat::ibv_get_cq_event_1_0 => "ibv_get_cq_event@IBVERBS_1.0",
    compat::ibv_get_device_guid_1_0 => "ibv_get_device_guid@IBVERBS_1.0",
    compat::ibv_get_device_list_1_0 => "ibv_get_device_list@IBVERBS_1.0",
    compat::ibv_get_device_name_1_0 => "ibv_get_device_name@IBVERBS_1.0",
    device::ibv_get_sysfs_path => "ibv_get_sysfs_path@@IBVERBS_1.0" via always,
    compat::ibv_modify_qp_1_0 => "ibv_modify_qp@IBVERBS_1.0",
    compat::ibv_modify_srq_1_0 => "ibv_modify_srq@IBVERBS_1.0",
    compat::ibv_open_device_1_0 => "ibv_open_device@IBVERBS_1.0",
    compat::ibv_query_device_1_0 => "ibv_query_device@IBVERBS_1.0",
    compat::ibv_query_gid_1_0 => "ibv_query_gid@IBVERBS_1.0",
    compat::ibv_query_pkey_1_0 => "ibv_query_pkey@IBVERBS_1.0",
    compat::ibv_query_port_1_0 => "ibv_query_port@IBVERBS_1.0",
    compat::ibv_query_qp_1_0 => "ibv_query_qp@IBVERBS_1.0",
    compat::ibv_query_srq_1_0 => "ibv_query_srq@IBVERBS_1.0",
    strings::ibv_rate_to_mult => "ibv_rate_to_mult@@IBVERBS_1.0",
    device::ibv_read_sysfs_file => "ibv_read_sysfs_file@@IBVERBS_1.0" via always,
    compat::ibv_reg_mr_1_0 => "ibv_reg_mr@IBVERBS_1.0",
    compat::ibv_resize_cq_1_0 => "ibv_resize_cq@IBVERBS_1.0",
    strings::mult_to_ibv_rate => "mult_to_ibv_rate@@IBVERBS_1.0",
    context::ibv_ack_async_event => "ibv_ack_async_event@@IBVERBS_1.1",
    cq::ibv_ack_cq_events => "ibv_ack_cq_events@@IBVERBS_1.1" via obj,
    mem::ibv_alloc_pd => "ibv_alloc_pd@@IBVERBS_1.1" via ctx,
    mcast::ibv_attach_mcast => "ibv_attach_mcast@@IBVERBS_1.1" via obj,
    context::ibv_close_device => "ibv_close_device@@IBVERBS_1.1" via ctx,
    kern::ibv_copy_ah_attr_from_kern => "ibv_copy_ah_attr_from_kern@@IBVERBS_1.1",
    qp::ibv_create_ah => "ibv_create_ah@@IBVERBS_1.1" via obj,
    qp::ibv_create_ah_from_wc => "ibv_create_ah_from_wc@@IBVERBS_1.1" via obj,
    cq::ibv_create_cq => "ibv_create_cq@@IBVERBS_1.1" via ctx,
    qp::ibv_create_qp => "ibv_create_qp@@IBVERBS_1.1" via obj,
    qp::ibv_create_srq => "ibv_create_srq@@IBVERBS_1.1" via obj,
    mem::ibv_dealloc_pd => "ibv_dealloc_pd@@IBVERBS_1.1" via obj,
    mem::ibv_dereg_mr => "ibv_dereg_mr@@IBVERBS_1.1" via obj,
    qp::ibv_destroy_ah => "ibv_destroy_ah@@IBVERBS_1.1" via obj,
    cq::ibv_destroy_cq => "ibv_destroy_cq@@IBVERBS_1.1" via obj,
    qp::ibv_destroy_qp => "ibv_destroy_qp@@IBVERBS_1.1" via obj,
    qp::ibv_destroy_srq => "ibv_destroy_srq@@IBVERBS_1.1" via obj,
    mcast::ibv_detach_mcast => "ibv_detach_mcast@@IBVERBS_1.1" via obj,
    device::ibv_dofork_range => "ibv_dofork_range@@IBVERBS_1.1" via always,
    device::ibv_dontfork_range => "ibv_dontfork_range@@IBVERBS_1.1" via always,
    strings::ibv_event_type_str => "ibv_event_type_str@@IBVERBS_1.1",
    device::ibv_fork_init => "ibv_fork_init@@IBVERBS_1.1",
    device::ibv_free_device_list => "ibv_free_device_list@@IBVERBS_1.1",
    context::ibv_get_async_event => "ibv_get_async_event@@IBVERBS_1.1" via ctx,
    cq::ibv_get_cq_event => "ibv_get_cq_event@@IBVERBS_1.1" via obj,
    device::ibv_get_device_guid => "ibv_get_device_guid@@IBVERBS_1.1" via dev,
    device::ibv_get_device_list => "ibv_get_device_list@@IBVERBS_1.1",
    device::ibv_get_device_name => "ibv_get_device_name@@IBVERBS_1.1" via dev,
    qp::ibv_init_ah_from_wc => "ibv_init_ah_from_wc@@IBVERBS_1.1" via ctx,
    qp::ibv_modify_qp => "ibv_modify_qp@@IBVERBS_1.1" via obj,
    qp::ibv_modify_srq => "ibv_modify_srq@@IBVERBS_1.1" via obj,
    device::ibv_node_type_str => "ibv_node_type_str@@IBVERBS_1.1",
    context::ibv_open_device => "ibv_open_device@@IBVERBS_1.1" via dev,
    device::ibv_port_state_str => "ibv_port_state_str@@IBVERBS_1.1",
    context::ibv_query_device => "ibv_query_device@@IBVERBS_1.1" via ctx,
    context::ibv_query_gid => "ibv_query_gid@@IBVERBS_1.1" via ctx,
    context::ibv_query_pkey => "ibv_query_pkey@@IBVERBS_1.1" via ctx,
    context::ibv_query_port => "ibv_query_port@@IBVERBS_1.1" via ctx,
    qp::ibv_query_qp => "ibv_query_qp@@IBVERBS_1.1" via obj,
    qp::ibv_query_srq => "ibv_query_srq@@IBVERBS_1.1" via obj,
    strings::ibv_rate_to_mbps => "ibv_rate_to_mbps@@IBVERBS_1.1",
    mem::ibv_reg_mr => "ibv_reg_mr@@IBVERBS_1.1" via obj,
    compat::ibv_register_driver_1_1 => "ibv_register_driver@IBVERBS_1.1",
    mem::ibv_rereg_mr => "ibv_rereg_mr@@IBVERBS_1.1" via obj,
    cq::ibv_resize_cq => "ibv_resize_cq@@IBVERBS_1.1" via obj,
    unsupported::ibv_resolve_eth_l2_from_gid => "ibv_resolve_eth_l2_from_gid@@IBVERBS_1.1" via ctx,
    strings::ibv_wc_status_str => "ibv_wc_status_str@@IBVERBS_1.1",
    strings::mbps_to_ibv_rate => "mbps_to_ibv_rate@@IBVERBS_1.1",
    device::ibv_get_pkey_index => "ibv_get_pkey_index@@IBVERBS_1.5" via ctx,
    qp::ibv_qp_to_qp_ex => "ibv_qp_to_qp_ex@@IBVERBS_1.6" via obj,
    mem::ibv_reg_mr_iova => "ibv_reg_mr_iova@@IBVERBS_1.7" via obj,
    mem::ibv_reg_mr_iova2 => "ibv_reg_mr_iova2@@IBVERBS_1.8" via obj,
    device::ibv_get_device_index => "ibv_get_device_index@@IBVERBS_1.9" via dev,
    import::ibv_import_device => "ibv_import_device@@IBVERBS_1.10",
    unsupported::ibv_import_mr => "ibv_import_mr@@IBVERBS_1.10" via obj,
    unsupported::ibv_import_pd => "ibv_import_pd@@IBVERBS_1.10" via ctx,
    unsupported::ibv_query_ece => "ibv_query_ece@@IBVERBS_1.10" via obj,
    unsupported::ibv_set_ece => "ibv_set_ece@@IBVERBS_1.10" via obj,
    unsupported::ibv_unimport_mr => "ibv_unimport_mr@@IBVERBS_1.10" via obj,
    unsupported::ibv_unimport_pd => "ibv_unimport_pd@@IBVERBS_1.10" via obj,
    context::_ibv_query_gid_ex => "_ibv_query_gid_ex@@IBVERBS_1.11" via ctx,
    context::_ibv_query_gid_table => "_ibv_query_gid_table@@IBVERBS_1.11" via ctx,
    unsupported::ibv_reg_dmabuf_mr => "ibv_reg_dmabuf_mr@@IBVERBS_1.12" via obj,
    unsupported::ibv_import_dm => "ibv_import_dm@@IBVERBS_1.13" via ctx,
    device::ibv_is_fork_initialized => "ibv_is_fork_initialized@@IBVERBS_1.13",
    unsupported::ibv_unimport_dm => "ibv_unimport_dm@@IBVERBS_1.13" via obj,
    unsupported::ibv_query_qp_data_in_order => "ibv_query_qp_data_in_order@@IBVERBS_1.14" via obj,
    unsupported::__ioctl_final_num_attrs => "__ioctl_final_num_attrs@@IBVERBS_PRIVATE_34",
    unsupported::__verbs_log => "__verbs_log@@IBVERBS_PRIVATE_34",
    unsupported::_verbs_init_and_alloc_context => "_verbs_init_and_alloc_context@@IBVERBS_PRIVATE_34",
    unsupported::execute_ioctl => "execute_ioctl@@IBVERBS_PRIVATE_34",
    unsupported::ibv_cmd_advise_mr => "ibv_cmd_advise_mr@@IBVERBS_PRIVATE_34",
    unsupported::ibv_cmd_alloc_dm => "ibv_cmd_alloc_dm@@IBVERBS_PRIVATE_34",
    unsupported::ibv_cmd_alloc_mw => "ibv_cmd_alloc_mw@@IBVERBS_PRIVATE_34",
    unsupported::ibv_cmd_alloc_pd => "ibv_cmd_alloc_pd@@IBVERBS_PRIVATE_34",
    unsupported::ibv_cmd_attach_mcast => "ibv_cmd_attach_mcast@@IBVERBS_PRIVATE_34",
    unsupported::ibv_cmd_close_xrcd => "ibv_cmd_close_xrcd@@IBVERBS_PRIVATE_34",
    unsupported::ibv_cmd_create_ah => "ibv_cmd_create_ah@@IBVERBS_PRIVATE_34",
    unsupported::ibv_cmd_create_counters => "ibv_cmd_create_counters@@IBVERBS_PRIVATE_34",
    unsupported::ibv_cmd_create_cq => "ibv_cmd_create_cq@@IBVERBS_PRIVATE_34",
    unsupported::ibv_cmd_create_cq_ex => "ibv_cmd_create_cq_ex@@IBVERBS_PRIVATE_34",
    unsupported::ibv_cmd_create_flow => "ibv_cmd_create_flow@@IBVERBS_PRIVATE_34",
    unsupported::ibv_cmd_create_flow_action_esp => "ibv_cmd_create_flow_action_esp@@IBVERBS_PRIVATE_34",
    unsupported::ibv_cmd_create_qp => "ibv_cmd_create_qp@@IBVERBS_PRIVATE_34",
    unsupported::ibv_cmd_create_qp_ex => "ibv_cmd_create_qp_ex@@IBVERBS_PRIVATE_34",
    unsupported::ibv_cmd_create_qp_ex2 => "ibv_cmd_create_qp_ex2@@IBVERBS_PRIVATE_34",
    unsupported::ibv_cmd_create_rwq_ind_table => "ibv_cmd_create_rwq_ind_table@@IBVERBS_PRIVATE_34",
    unsupported::ibv_cmd_create_srq => "ibv_cmd_create_srq@@IBVERBS_PRIVATE_34",
    unsupported::ibv_cmd_create_srq_ex => "ibv_cmd_create_srq_ex@@IBVERBS_PRIVATE_34",
    unsupported::ibv_cmd_create_wq => "ibv_cmd_create_wq@@IBVERBS_PRIVATE_34",
    unsupported::ibv_cmd_dealloc_mw => "ibv_cmd_dealloc_mw@@IBVERBS_PRIVATE_34",
    unsupported::ibv_cmd_dealloc_pd => "ibv_cmd_dealloc_pd@@IBVERBS_PRIVATE_34",
    unsupported::ibv_cmd_dereg_mr => "ibv_cmd_dereg_mr@@IBVERBS_PRIVATE_34",
    unsupported::ibv_cmd_destroy_ah => "ibv_cmd_destroy_ah@@IBVERBS_PRIVATE_34",
    unsupported::ibv_cmd_destroy_counters => "ibv_cmd_destroy_counters@@IBVERBS_PRIVATE_34",
    unsupported::ibv_cmd_destroy_cq => "ibv_cmd_destroy_cq@@IBVERBS_PRIVATE_34",
    unsupported::ibv_cmd_destroy_flow => "ibv_cmd_destroy_flow@@IBVERBS_PRIVATE_34",
    unsupported::ibv_cmd_destroy_flow_action => "ibv_cmd_destroy_flow_action@@IBVERBS_PRIVATE_34",
    unsupported::ibv_cmd_destroy_qp => "ibv_cmd_destroy_qp@@IBVERBS_PRIVATE_34",
    unsupported::ibv_cmd_destroy_rwq_ind_table => "ibv_cmd_destroy_rwq_ind_table@@IBVERBS_PRIVATE_34",
    unsupported::ibv_cmd_destroy_srq => "ibv_cmd_destroy_srq@@IBVERBS_PRIVATE_34",
    unsupported::ibv_cmd_destroy_wq => "ibv_cmd_destroy_wq@@IBVERBS_PRIVATE_34",
    unsupported::ibv_cmd_detach_mcast => "ibv_cmd_detach_mcast@@IBVERBS_PRIVATE_34",
    unsupported::ibv_cmd_free_dm => "ibv_cmd_free_dm@@IBVERBS_PRIVATE_34",
    unsupported::ibv_cmd_get_context => "ibv_cmd_get_context@@IBVERBS_PRIVATE_34",
    unsupported::ibv_cmd_modify_cq => "ibv_cmd_modify_cq@@IBVERBS_PRIVATE_34",
    unsupported::ibv_cmd_modify_flow_action_esp => "ibv_cmd_modify_flow_action_esp@@IBVERBS_PRIVATE_34",
    unsupported::ibv_cmd_modify_qp => "ibv_cmd_modify_qp@@IBVERBS_PRIVATE_34",
    unsupported::ibv_cmd_modify_qp_ex => "ibv_cmd_modify_qp_ex@@IBVERBS_PRIVATE_34",
    unsupported::ibv_cmd_modify_srq => "ibv_cmd_modify_srq@@IBVERBS_PRIVATE_34",
    unsupported::ibv_cmd_modify_wq => "ibv_cmd_modify_wq@@IBVERBS_PRIVATE_34",
    unsupported::ibv_cmd_open_qp => "ibv_cmd_open_qp@@IBVERBS_PRIVATE_34",
    unsupported::ibv_cmd_open_xrcd => "ibv_cmd_open_xrcd@@IBVERBS_PRIVATE_34",
    unsupported::ibv_cmd_poll_cq => "ibv_cmd_poll_cq@@IBVERBS_PRIVATE_34",
    unsupported::ibv_cmd_post_recv => "ibv_cmd_post_recv@@IBVERBS_PRIVATE_34",
    unsupported::ibv_cmd_post_send => "ibv_cmd_post_send@@IBVERBS_PRIVATE_34",
    unsupported::ibv_cmd_post_srq_recv => "ibv_cmd_post_srq_recv@@IBVERBS_PRIVATE_34",
    unsupported::ibv_cmd_query_context => "ibv_cmd_query_context@@IBVERBS_PRIVATE_34",
    unsupported::ibv_cmd_query_device_any => "ibv_cmd_query_device_any@@IBVERBS_PRIVATE_34",
    unsupported::ibv_cmd_query_mr => "ibv_cmd_query_mr@@IBVERBS_PRIVATE_34",
    unsupported::ibv_cmd_query_port => "ibv_cmd_query_port@@IBVERBS_PRIVATE_34",
    unsupported::ibv_cmd_query_qp => "ibv_cmd_query_qp@@IBVERBS_PRIVATE_34",
    unsupported::ibv_cmd_query_srq => "ibv_cmd_query_srq@@IBVERBS_PRIVATE_34",
    unsupported::ibv_cmd_read_counters => "ibv_cmd_read_counters@@IBVERBS_PRIVATE_34",
    unsupported::ibv_cmd_reg_dm_mr => "ibv_cmd_reg_dm_mr@@IBVERBS_PRIVATE_34",
    unsupported::ibv_cmd_reg_dmabuf_mr => "ibv_cmd_reg_dmabuf_mr@@IBVERBS_PRIVATE_34",
    unsupported::ibv_cmd_reg_mr => "ibv_cmd_reg_mr@@IBVERBS_PRIVATE_34",
    unsupported::ibv_cmd_req_notify_cq => "ibv_cmd_req_notify_cq@@IBVERBS_PRIVATE_34",
    unsupported::ibv_cmd_rereg_mr => "ibv_cmd_rereg_mr@@IBVERBS_PRIVATE_34",
    unsupported::ibv_cmd_resize_cq => "ibv_cmd_resize_cq@@IBVERBS_PRIVATE_34",
    context::ibv_query_gid_type => "ibv_query_gid_type@@IBVERBS_PRIVATE_34" via ctx,
    device::ibv_read_ibdev_sysfs_file => "ibv_read_ibdev_sysfs_file@@IBVERBS_PRIVATE_34",
    unsupported::verbs_init_cq => "verbs_init_cq@@IBVERBS_PRIVATE_34",
    unsupported::verbs_open_device => "verbs_open_device@@IBVERBS_PRIVATE_34",
    unsupported::verbs_register_driver_34 => "verbs_register_driver_34@@IBVERBS_PRIVATE_34",
    unsupported::verbs_set_ops => "verbs_set_ops@@IBVERBS_PRIVATE_34",
    unsupported::verbs_uninit_context => "verbs_uninit_context@@IBVERBS_PRIVATE_34",
    // librdmacm (`rdmacm/`): the same object is librdmacm.so.1 too.
    cm_rsocket::raccept => "raccept@@RDMACM_1.0",
    cm_rsocket::rbind => "rbind@@RDMACM_1.0",
    cm_rsocket::rclose => "rclose@@RDMACM_1.0",
    cm_rsocket::rconnect => "rconnect@@RDMACM_1.0",
    cm_connect::rdma_accept => "rdma_accept@@RDMACM_1.0",
    cm_channel::rdma_ack_cm_event => "rdma_ack_cm_event@@RDMACM_1.0",
    cm_id::rdma_bind_addr => "rdma_bind_addr@@RDMACM_1.0",
    cm_connect::rdma_connect => "rdma_connect@@RDMACM_1.0",
    cm_addrinfo::rdma_create_ep => "rdma_create_ep@@RDMACM_1.0",
    cm_channel::rdma_create_event_channel => "rdma_create_event_channel@@RDMACM_1.0",
    cm_id::rdma_create_id => "rdma_create_id@@RDMACM_1.0",
    cm_qp::rdma_create_qp => "rdma_create_qp@@RDMACM_1.0",
    cm_qp::rdma_create_qp_ex => "rdma_create_qp_ex@@RDMACM_1.0",
    cm_qp::rdma_create_srq => "rdma_create_srq@@RDMACM_1.0",
    cm_qp::rdma_create_srq_ex => "rdma_create_srq_ex@@RDMACM_1.0",
    cm_addrinfo::rdma_destroy_ep => "rdma_destroy_ep@@RDMACM_1.0",
    cm_channel::rdma_destroy_event_channel => "rdma_destroy_event_channel@@RDMACM_1.0",
    cm_id::rdma_destroy_id => "rdma_destroy_id@@RDMACM_1.0",
    cm_qp::rdma_destroy_qp => "rdma_destroy_qp@@RDMACM_1.0",
    cm_qp::rdma_destroy_srq => "rdma_destroy_srq@@RDMACM_1.0",
    cm_connect::rdma_disconnect => "rdma_disconnect@@RDMACM_1.0",
    cm_channel::rdma_event_str => "rdma_event_str@@RDMACM_1.0",
    cm_id::rdma_free_devices => "rdma_free_devices@@RDMACM_1.0",
    cm_addrinfo::rdma_freeaddrinfo => "rdma_freeaddrinfo@@RDMACM_1.0",
    cm_channel::rdma_get_cm_event => "rdma_get_cm_event@@RDMACM_1.0",
    cm_id::rdma_get_devices => "rdma_get_devices@@RDMACM_1.0",
    cm_id::rdma_get_dst_port => "rdma_get_dst_port@@RDMACM_1.0",
    cm_connect::rdma_get_request => "rdma_get_request@@RDMACM_1.0",
    cm_id::rdma_get_src_port => "rdma_get_src_port@@RDMACM_1.0",
    cm_addrinfo::rdma_getaddrinfo => "rdma_getaddrinfo@@RDMACM_1.0",
    cm_mcast::rdma_join_multicast => "rdma_join_multicast@@RDMACM_1.0",
    cm_mcast::rdma_leave_multicast => "rdma_leave_multicast@@RDMACM_1.0",
    cm_connect::rdma_listen => "rdma_listen@@RDMACM_1.0",
    cm_id::rdma_migrate_id => "rdma_migrate_id@@RDMACM_1.0",
    cm_connect::rdma_notify => "rdma_notify@@RDMACM_1.0",
    cm_connect::rdma_reject => "rdma_reject@@RDMACM_1.0",
    cm_id::rdma_resolve_addr => "rdma_resolve_addr@@RDMACM_1.0",
    cm_id::rdma_resolve_route => "rdma_resolve_route@@RDMACM_1.0",
    cm_id::rdma_set_option => "rdma_set_option@@RDMACM_1.0",
    cm_rsocket::rfcntl => "rfcntl@@RDMACM_1.0",
    cm_rsocket::rgetpeername => "rgetpeername@@RDMACM_1.0",
    cm_rsocket::rgetsockname => "rgetsockname@@RDMACM_1.0",
    cm_rsocket::rgetsockopt => "rgetsockopt@@RDMACM_1.0",
    cm_rsocket::riomap => "riomap@@RDMACM_1.0",
    cm_rsocket::riounmap => "riounmap@@RDMACM_1.0",
    cm_rsocket::riowrite => "riowrite@@RDMACM_1.0",
    cm_rsocket::rlisten => "rlisten@@RDMACM_1.0",
    cm_rsocket::rpoll => "rpoll@@RDMACM_1.0",
    cm_rsocket::rread => "rread@@RDMACM_1.0",
    cm_rsocket::rreadv => "rreadv@@RDMACM_1.0",
    cm_rsocket::rrecv => "rrecv@@RDMACM_1.0",
    cm_rsocket::rrecvfrom => "rrecvfrom@@RDMACM_1.0",
    cm_rsocket::rrecvmsg => "rrecvmsg@@RDMACM_1.0",
    cm_rsocket::rselect => "rselect@@RDMACM_1.0",
    cm_rsocket::rsend => "rsend@@RDMACM_1.0",
    cm_rsocket::rsendmsg => "rsendmsg@@RDMACM_1.0",
    cm_rsocket::rsendto => "rsendto@@RDMACM_1.0",
    cm_rsocket::rsetsockopt => "rsetsockopt@@RDMACM_1.0",
    cm_rsocket::rshutdown => "rshutdown@@RDMACM_1.0",
    cm_rsocket::rsocket => "rsocket@@RDMACM_1.0",
    cm_rsocket::rwrite => "rwrite@@RDMACM_1.0",
    cm_rsocket::rwritev => "rwritev@@RDMACM_1.0",
    cm_mcast::rdma_join_multicast_ex => "rdma_join_multicast_ex@@RDMACM_1.1",
    cm_connect::rdma_establish => "rdma_establish@@RDMACM_1.2",
    cm_id::rdma_init_qp_attr => "rdma_init_qp_attr@@RDMACM_1.2",
    cm_id::rdma_get_remote_ece => "rdma_get_remote_ece@@RDMACM_1.3",
    cm_connect::rdma_reject_ece => "rdma_reject_ece@@RDMACM_1.3",
    cm_id::rdma_set_local_ece => "rdma_set_local_ece@@RDMACM_1.3",
}
