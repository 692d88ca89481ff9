//! The `static inline` functions of `verbs.h` this backend needs, as the
//! header writes them: a context's ops table, `verbs_get_ctx`, and
//! `___ibv_query_port`. The fast paths (`ibv_post_send`, `ibv_poll_cq`, ...)
//! are one call through `ops` each, at their callers (`cq.rs`, `qp.rs`,
//! `srq.rs`).

use super::error::rc_errno;
use super::ffi::*;
use super::loader::Verbs;

/// The context's ops table (the inline fast paths call through it).
///
/// # Safety
/// `ctx` must be a live context from `ibv_open_device`.
pub(super) unsafe fn ops<'a>(ctx: *mut ibv_context) -> &'a ibv_context_ops {
    // SAFETY: the caller guarantees `ctx` is live; `ops` is part of it.
    unsafe { &(*ctx).ops }
}

/// `verbs_get_ctx(ctx)`: the extended context around `ctx`, if it is one.
///
/// # Safety
/// `ctx` must be a live context.
pub(super) unsafe fn verbs_get_ctx(ctx: *mut ibv_context) -> Option<*mut verbs_context> {
    // SAFETY: reading a field of a live context.
    if unsafe { (*ctx).abi_compat } as usize != VERBS_ABI_IS_EXTENDED {
        return None;
    }
    // SAFETY: an extended context is the last member of a `verbs_context`
    // (that is what abi_compat says), so stepping back to its start stays
    // inside the provider's allocation.
    Some(
        unsafe { (ctx as *mut u8).sub(std::mem::offset_of!(verbs_context, context)) }
            as *mut verbs_context,
    )
}

/// `ibv_query_port`, as the inline `___ibv_query_port` of verbs.h does it.
///
/// # Safety
/// `ctx` must be a live context.
pub(super) unsafe fn query_port(
    v: &Verbs,
    ctx: *mut ibv_context,
    port: u8,
) -> Result<ibv_port_attr, i32> {
    // SAFETY: all-zero is a valid ibv_port_attr (plain integers).
    let mut attr: ibv_port_attr = unsafe { std::mem::zeroed() };
    // SAFETY: ctx is live (caller); see verbs_get_ctx.
    if let Some(vctx) = unsafe { verbs_get_ctx(ctx) } {
        // verbs_get_ctx_op(ctx, query_port): the provider filled in at least
        // sizeof(*vctx) - offsetof(struct verbs_context, query_port) bytes
        // and set the pointer.
        let need =
            std::mem::size_of::<verbs_context>() - std::mem::offset_of!(verbs_context, query_port);
        // SAFETY: vctx points at the provider's verbs_context; `sz` and
        // `query_port` are at fixed distances before `context`.
        let (sz, f) = unsafe { ((*vctx).sz, (*vctx).query_port) };
        if sz >= need {
            if let Some(f) = f {
                // SAFETY: the provider's query_port with the full struct size.
                let rc = unsafe { f(ctx, port, &mut attr, std::mem::size_of::<ibv_port_attr>()) };
                return if rc == 0 { Ok(attr) } else { Err(rc_errno(rc)) };
            }
        }
    }
    // SAFETY: the compat symbol fills the `_compat_ibv_port_attr` prefix of
    // the zeroed struct.
    let rc = unsafe { (v.query_port_compat)(ctx, port, &mut attr) };
    if rc == 0 {
        Ok(attr)
    } else {
        Err(rc_errno(rc))
    }
}
