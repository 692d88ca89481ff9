//! `rdma_getaddrinfo`, `rdma_freeaddrinfo`, `rdma_create_ep` and
//! `rdma_destroy_ep`, as librdmacm's `addrinfo.c` and `cma.c` have them.
//!
//! `rdma_getaddrinfo` asks the C library's `getaddrinfo` (so names,
//! numeric addresses and `RAI_NUMERICHOST`, `RAI_PASSIVE` and the service
//! as a port behave as there) and turns its first answer into one
//! `rdma_addrinfo`: the QP type from the socket type (RC for streams, UD
//! for datagrams) or the hints, the port space from the protocol (TCP or
//! UDP) or the hints, the address as the source (passive) or destination.
//! A failure of `getaddrinfo` is returned as it returns it (an `EAI_*`
//! value). RoCE has no path records to look up, so `ai_route` stays empty.
//! Everything is allocated with `malloc`, and `rdma_freeaddrinfo` frees it.

use super::id;
use super::object::{CmId, SavedQpAttr};
use super::{init, minus_one};
use crate::ffi::{entry, note, Fail};
use crate::handle;
use crate::sys::*;
use std::ffi::{c_char, c_int};

/// A `malloc`ed copy of `len` bytes at `src`.
fn copy_addr(src: *const libc::sockaddr, len: u32) -> Result<*mut sockaddr, Fail> {
    // SAFETY: a fresh allocation of len bytes (at least one).
    let p = unsafe { libc::malloc((len as usize).max(1)) };
    if p.is_null() {
        return Err(Fail::new(libc::ENOMEM, "out of memory"));
    }
    // SAFETY: src holds len bytes (getaddrinfo's answer or the hints).
    unsafe { std::ptr::copy_nonoverlapping(src.cast::<u8>(), p.cast::<u8>(), len as usize) };
    Ok(p.cast())
}

fn strdup(s: *const c_char) -> *mut c_char {
    if s.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: a NUL-terminated string of getaddrinfo's.
    unsafe { libc::strdup(s) }
}

/// What `rdma_getaddrinfo` returns besides 0: -1 with errno, or the
/// `EAI_*` value of `getaddrinfo`.
enum GaiError {
    Errno(Fail),
    Gai(c_int),
}

impl From<Fail> for GaiError {
    fn from(f: Fail) -> Self {
        GaiError::Errno(f)
    }
}

/// librdmacm's `ucma_getaddrinfo` + `ucma_convert_to_rai`.
fn from_getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: Option<&rdma_addrinfo>,
    rai: &mut rdma_addrinfo,
) -> Result<(), GaiError> {
    // SAFETY: addrinfo is plain data; all zeroes is valid.
    let mut h: libc::addrinfo = unsafe { std::mem::zeroed() };
    if let Some(hi) = hints {
        let flags = hi.ai_flags as u32;
        if flags & RAI_PASSIVE != 0 {
            h.ai_flags = libc::AI_PASSIVE;
        }
        if flags & RAI_NUMERICHOST != 0 {
            h.ai_flags |= libc::AI_NUMERICHOST;
        }
        if hi.ai_family != 27 {
            h.ai_family = hi.ai_family;
        }
        h.ai_socktype = match hi.ai_qp_type as u32 {
            IBV_QPT_RC | IBV_QPT_UC | IBV_QPT_XRC_SEND | IBV_QPT_XRC_RECV => libc::SOCK_STREAM,
            IBV_QPT_UD => libc::SOCK_DGRAM,
            _ => 0,
        };
        h.ai_protocol = match hi.ai_port_space as u32 {
            RDMA_PS_TCP => libc::IPPROTO_TCP,
            RDMA_PS_IPOIB | RDMA_PS_UDP => libc::IPPROTO_UDP,
            RDMA_PS_IB if h.ai_socktype == libc::SOCK_STREAM => libc::IPPROTO_TCP,
            RDMA_PS_IB if h.ai_socktype == libc::SOCK_DGRAM => libc::IPPROTO_UDP,
            _ => 0,
        };
    }
    let mut ai: *mut libc::addrinfo = std::ptr::null_mut();
    // SAFETY: the program's strings (or NULL), our hints and output.
    let r = unsafe {
        libc::getaddrinfo(
            node,
            service,
            if hints.is_some() {
                &h
            } else {
                std::ptr::null()
            },
            &mut ai,
        )
    };
    if r != 0 {
        return Err(GaiError::Gai(r));
    }
    // SAFETY: getaddrinfo succeeded: ai is its first answer.
    let a = unsafe { &*ai };
    let r = (|| {
        let hq = hints.map_or(0, |h| h.ai_qp_type);
        rai.ai_qp_type = if hq != 0 {
            hq
        } else {
            match a.ai_socktype {
                libc::SOCK_STREAM => IBV_QPT_RC as c_int,
                libc::SOCK_DGRAM => IBV_QPT_UD as c_int,
                _ => 0,
            }
        };
        let hp = hints.map_or(0, |h| h.ai_port_space);
        rai.ai_port_space = if hp != 0 {
            hp
        } else {
            match a.ai_protocol {
                libc::IPPROTO_TCP => RDMA_PS_TCP as c_int,
                libc::IPPROTO_UDP => RDMA_PS_UDP as c_int,
                _ => 0,
            }
        };
        rai.ai_family = a.ai_family;
        if a.ai_flags & libc::AI_PASSIVE != 0 {
            rai.ai_flags = RAI_PASSIVE as c_int;
            rai.ai_src_canonname = strdup(a.ai_canonname);
            rai.ai_src_addr = copy_addr(a.ai_addr, a.ai_addrlen)?;
            rai.ai_src_len = a.ai_addrlen;
        } else {
            rai.ai_dst_canonname = strdup(a.ai_canonname);
            rai.ai_dst_addr = copy_addr(a.ai_addr, a.ai_addrlen)?;
            rai.ai_dst_len = a.ai_addrlen;
        }
        Ok(())
    })();
    // SAFETY: getaddrinfo's list.
    unsafe { libc::freeaddrinfo(ai) };
    r.map_err(GaiError::Errno)
}

entry! {
    on_panic = -1;
    pub unsafe extern "C" fn rdma_getaddrinfo(
        node: *const c_char,
        service: *const c_char,
        hints: *const rdma_addrinfo,
        res: *mut *mut rdma_addrinfo,
    ) -> c_int {
        let fail = |f: Fail| super::ret(VERB, Err(f));
        if node.is_null() && service.is_null() && hints.is_null() {
            return fail(Fail::inval("node, service, hints", "all NULL"));
        }
        if res.is_null() {
            return fail(Fail::inval("res", "NULL"));
        }
        if let Err(f) = init() {
            return fail(f);
        }
        // SAFETY: the program's hints (or NULL).
        let hints = unsafe { hints.as_ref() };
        // SAFETY: a zeroed rdma_addrinfo, freed by rdma_freeaddrinfo.
        let rai = unsafe { libc::calloc(1, std::mem::size_of::<rdma_addrinfo>()) }
            .cast::<rdma_addrinfo>();
        if rai.is_null() {
            return fail(Fail::new(libc::ENOMEM, "out of memory"));
        }
        // SAFETY: just allocated and zeroed.
        let r = unsafe { &mut *rai };
        let got = (|| -> Result<(), GaiError> {
            if !node.is_null() || !service.is_null() {
                from_getaddrinfo(node, service, hints, r)?;
            } else if let Some(h) = hints {
                r.ai_flags = h.ai_flags;
                r.ai_family = h.ai_family;
                r.ai_qp_type = h.ai_qp_type;
                r.ai_port_space = h.ai_port_space;
                if h.ai_dst_len != 0 {
                    r.ai_dst_addr = copy_addr(h.ai_dst_addr.cast(), h.ai_dst_len)?;
                    r.ai_dst_len = h.ai_dst_len;
                }
            }
            if let Some(h) = hints {
                if r.ai_src_len == 0 && h.ai_src_len != 0 {
                    r.ai_src_addr = copy_addr(h.ai_src_addr.cast(), h.ai_src_len)?;
                    r.ai_src_len = h.ai_src_len;
                }
            }
            Ok(())
        })();
        match got {
            Ok(()) => {
                // SAFETY: checked non-NULL; the program's output.
                unsafe { res.write(rai) };
                0
            }
            Err(e) => {
                free_list(rai);
                match e {
                    GaiError::Errno(f) => fail(f),
                    GaiError::Gai(code) => {
                        // SAFETY: gai_strerror returns a static string.
                        let why = unsafe { std::ffi::CStr::from_ptr(libc::gai_strerror(code)) };
                        note(
                            VERB,
                            format!("getaddrinfo: {}", why.to_string_lossy()),
                        );
                        code
                    }
                }
            }
        }
    }
}

fn free_list(mut res: *mut rdma_addrinfo) {
    while !res.is_null() {
        // SAFETY: a list of rdma_getaddrinfo: malloc'ed nodes and fields.
        unsafe {
            let r = &*res;
            let next = r.ai_next;
            libc::free(r.ai_connect);
            libc::free(r.ai_route);
            libc::free(r.ai_src_canonname.cast());
            libc::free(r.ai_dst_canonname.cast());
            libc::free(r.ai_src_addr.cast());
            libc::free(r.ai_dst_addr.cast());
            libc::free(res.cast());
            res = next;
        }
    }
}

entry! {
    pub unsafe extern "C" fn rdma_freeaddrinfo(res: *mut rdma_addrinfo) {
        free_list(res)
    }
}

/// librdmacm's `rdma_create_ep`: a synchronous id for `res`, bound (passive)
/// or with its address and route resolved and a QP (active).
fn create_ep(
    out: *mut *mut rdma_cm_id,
    res: *mut rdma_addrinfo,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> Result<(), Fail> {
    if out.is_null() {
        return Err(Fail::inval("id", "NULL"));
    }
    // SAFETY: the program's addrinfo.
    let r = unsafe { res.as_ref() }.ok_or_else(|| Fail::inval("res", "NULL"))?;
    let cid = id::create(
        std::ptr::null_mut(),
        std::ptr::null_mut(),
        r.ai_port_space as rdma_port_space,
        r.ai_qp_type as ibv_qp_type,
    )?;
    let fail = |e: Fail| {
        destroy_ep(cid);
        Err(e)
    };
    let errno = || {
        std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EINVAL)
    };
    if r.ai_flags as u32 & RAI_PASSIVE != 0 {
        // SAFETY: the new id and the program's address.
        if unsafe { id::rdma_bind_addr(cid, r.ai_src_addr) } != 0 {
            return fail(Fail::new(errno(), "rdma_bind_addr"));
        }
        if !pd.is_null() {
            // SAFETY: the new id.
            unsafe { (*cid).pd = pd };
        }
        // SAFETY: the program's attributes (or NULL).
        if let Some(a) = unsafe { qp_init_attr.as_ref() } {
            let mut a = *a;
            a.qp_type = r.ai_qp_type as ibv_qp_type;
            handle::get::<CmId>(cid, "id")?.lock().qp_init_attr = Some(SavedQpAttr(a));
        }
    } else {
        // SAFETY: the new id and the program's addresses.
        if unsafe { id::rdma_resolve_addr(cid, r.ai_src_addr, r.ai_dst_addr, 2000) } != 0 {
            return fail(Fail::new(errno(), "rdma_resolve_addr"));
        }
        // SAFETY: the new id.
        if unsafe { id::rdma_resolve_route(cid, 2000) } != 0 {
            return fail(Fail::new(errno(), "rdma_resolve_route"));
        }
        // SAFETY: the program's attributes (or NULL).
        if let Some(a) = unsafe { qp_init_attr.as_mut() } {
            a.qp_type = r.ai_qp_type as ibv_qp_type;
            // SAFETY: the new id, the program's PD and attributes.
            if unsafe { super::qp::rdma_create_qp(cid, pd, a) } != 0 {
                return fail(Fail::new(errno(), "rdma_create_qp"));
            }
        }
        if r.ai_connect_len != 0 && !r.ai_connect.is_null() {
            // SAFETY: the program's ai_connect_len bytes.
            let data =
                unsafe { std::slice::from_raw_parts(r.ai_connect.cast::<u8>(), r.ai_connect_len) };
            handle::get::<CmId>(cid, "id")?.lock().connect = data.to_vec();
        }
    }
    // SAFETY: checked non-NULL; the program's output.
    unsafe { out.write(cid) };
    Ok(())
}

entry! {
    on_panic = -1;
    pub unsafe extern "C" fn rdma_create_ep(
        id: *mut *mut rdma_cm_id,
        res: *mut rdma_addrinfo,
        pd: *mut ibv_pd,
        qp_init_attr: *mut ibv_qp_init_attr,
    ) -> c_int {
        minus_one(VERB, || create_ep(id, res, pd, qp_init_attr))
    }
}

fn destroy_ep(id: *mut rdma_cm_id) {
    if handle::get::<CmId>(id, "id").is_err() {
        note("rdma_destroy_ep", "id: NULL or not an rdma_cm_id");
        return;
    }
    // SAFETY: a live id; its QP and SRQ fields.
    let (qp, srq) = unsafe { ((*id).qp, (*id).srq) };
    if !qp.is_null() {
        // SAFETY: a live id.
        unsafe { super::qp::rdma_destroy_qp(id) };
    }
    if !srq.is_null() {
        // SAFETY: a live id.
        unsafe { super::qp::rdma_destroy_srq(id) };
    }
    if let Err(f) = id::destroy(id) {
        note("rdma_destroy_ep", &f.why);
    }
}

entry! {
    pub unsafe extern "C" fn rdma_destroy_ep(id: *mut rdma_cm_id) {
        destroy_ep(id)
    }
}
