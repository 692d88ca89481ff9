//! `rdma_join_multicast`, `rdma_join_multicast_ex` and
//! `rdma_leave_multicast` on RoCE v2, as the kernel's rdma_cm and
//! rdma-core 44's librdmacm do them together:
//!
//! * the id must be bound to a device (`rdma_bind_addr` to a device's
//!   address, or `rdma_resolve_addr`): EINVAL otherwise, as
//!   `rdma_join_multicast` in cma.c;
//! * an IPv4 group's MGID is the group's IPv4-mapped address
//!   (`cma_iboe_set_mgid`); an IPv6 group on RoCE v2 is refused with the
//!   kernel's ENOTSUPP (524), as `cma_iboe_join_multicast` does;
//! * the event is RDMA_CM_EVENT_MULTICAST_JOIN with `param.ud`: an
//!   address vector to the group (global, hop limit 64), QPN 0xFFFFFF,
//!   Q_Key RDMA_UDP_QKEY, and `private_data` the program's context;
//! * the id's QP, if it has one, is attached to the group
//!   (`ibv_attach_mcast`), unless the join is send-only; librdmacm does
//!   that when the program takes the event, this library when it joins
//!   (the QP must exist by then: a program that creates it after joining
//!   and before taking the event is not attached). A failed attach turns
//!   the event into RDMA_CM_EVENT_MULTICAST_ERROR with its status;
//! * leaving an address never joined is EADDRNOTAVAIL; leaving detaches
//!   the QP.
//!
//! The attach joins the group's IP address on the device's interface
//! (`rxe_verbs::QueuePair::attach_mcast`), which is where the kernel's
//! join sends its IGMP report.

use super::channel::{Param, UdParam};
use super::object::{complete, CmId, Joined, Phase};
use super::{canonical, minus_one, read_sockaddr};
use crate::ffi::{entry, Fail};
use crate::handle;
use crate::sys::*;
use rxe_core::engine::mcast::{gid_of_group, MULTICAST_QPN};
use rxe_core::types::AddressVector;
use std::ffi::{c_int, c_void};
use std::net::SocketAddr;

/// The kernel's ENOTSUPP, which reaches the program as its errno.
const ENOTSUPP: c_int = 524;

fn join(cm: &CmId, addr: SocketAddr, flags: u32, context: *mut c_void) -> Result<(), Fail> {
    {
        let st = cm.lock();
        if st.dev.is_none() || !matches!(st.phase, Phase::AddrBound | Phase::AddrResolved) {
            return Err(Fail::inval(
                "id",
                "not bound to a device (rdma_bind_addr to a device's address, or rdma_resolve_addr, first)",
            ));
        }
        if st.src.is_some_and(|s| s.is_ipv4() != addr.is_ipv4()) {
            return Err(Fail::inval("addr", "not of the id's address family"));
        }
    }
    if addr.ip().is_unspecified() {
        return Err(Fail::inval("addr", "the wildcard address is no group"));
    }
    if addr.is_ipv6() {
        return Err(Fail::new(
            ENOTSUPP,
            "addr: the kernel's rdma_cm joins no IPv6 group on RoCE v2 (ENOTSUPP), and neither does this library",
        ));
    }
    let ip = canonical(addr.ip());
    let gid = gid_of_group(ip);
    // SAFETY: the id is live (handle::get); its qp field, as the program set it.
    let qp = unsafe { (*cm.c()).qp };
    let mut status = 0;
    let attach = !qp.is_null() && flags != RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER;
    if !ip.is_multicast() {
        // The kernel joins it; librdmacm's ibv_attach_mcast then fails.
        status = -libc::EINVAL;
    } else if attach {
        let g = ibv_gid { raw: gid };
        // SAFETY: the id's QP (checked by the call itself) and a GID.
        let rc = unsafe { crate::mcast::ibv_attach_mcast(qp, &g, 0) };
        status = -rc;
    }
    let mut ah = crate::wr::ah_attr_of(&AddressVector::to(ip));
    ah.grh.hop_limit = 64;
    let param = Param::Ud(UdParam {
        ah_attr: ah,
        qp_num: MULTICAST_QPN,
        qkey: RDMA_UDP_QKEY,
        context: Some(context as usize),
        ..UdParam::default()
    });
    let mut st = cm.lock();
    let event = if status == 0 {
        st.mcast.push(Joined {
            addr,
            gid,
            qp: if attach { qp as usize } else { 0 },
        });
        RDMA_CM_EVENT_MULTICAST_JOIN
    } else {
        RDMA_CM_EVENT_MULTICAST_ERROR
    };
    cm.queue(&st, event, status, param);
    drop(st);
    complete(cm)
}

entry! {
    on_panic = -1;
    pub unsafe extern "C" fn rdma_join_multicast(
        id: *mut rdma_cm_id,
        addr: *mut sockaddr,
        context: *mut c_void,
    ) -> c_int {
        minus_one(VERB, || {
            let cm = handle::get::<CmId>(id, "id")?;
            // SAFETY: the program's address.
            let a = unsafe { read_sockaddr(addr, "addr") }?;
            join(cm, a, RDMA_MC_JOIN_FLAG_FULLMEMBER, context)
        })
    }
}

entry! {
    on_panic = -1;
    pub unsafe extern "C" fn rdma_join_multicast_ex(
        id: *mut rdma_cm_id,
        mc_join_attr: *mut rdma_cm_join_mc_attr_ex,
        context: *mut c_void,
    ) -> c_int {
        minus_one(VERB, || {
            let cm = handle::get::<CmId>(id, "id")?;
            // SAFETY: the program's attributes, or NULL.
            let attr =
                unsafe { mc_join_attr.as_ref() }
                    .ok_or_else(|| Fail::inval("mc_join_attr", "NULL"))?;
            if attr.comp_mask >= RDMA_CM_JOIN_MC_ATTR_RESERVED {
                return Err(Fail::new(
                    libc::EOPNOTSUPP,
                    "mc_join_attr.comp_mask: unknown bits",
                ));
            }
            if attr.comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS == 0 {
                return Err(Fail::inval(
                    "mc_join_attr.comp_mask",
                    "RDMA_CM_JOIN_MC_ATTR_ADDRESS is required",
                ));
            }
            if attr.comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS == 0
                || attr.join_flags >= RDMA_MC_JOIN_FLAG_RESERVED
            {
                return Err(Fail::inval(
                    "mc_join_attr.join_flags",
                    "RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS with FULLMEMBER or SENDONLY_FULLMEMBER is required",
                ));
            }
            // SAFETY: the program's address.
            let a = unsafe { read_sockaddr(attr.addr, "mc_join_attr.addr") }?;
            join(cm, a, attr.join_flags, context)
        })
    }
}

entry! {
    on_panic = -1;
    pub unsafe extern "C" fn rdma_leave_multicast(
        id: *mut rdma_cm_id,
        addr: *mut sockaddr,
    ) -> c_int {
        minus_one(VERB, || {
            let cm = handle::get::<CmId>(id, "id")?;
            // SAFETY: the program's address.
            let a = unsafe { read_sockaddr(addr, "addr") }?;
            let j = {
                let mut st = cm.lock();
                let i = st.mcast.iter().position(|j| j.addr == a).ok_or_else(|| {
                    Fail::new(
                        libc::EADDRNOTAVAIL,
                        format!("addr: {a} was not joined on this id"),
                    )
                })?;
                st.mcast.remove(i)
            };
            if j.qp != 0 {
                let g = ibv_gid { raw: j.gid };
                // SAFETY: a QP pointer the id held (the call checks it is live).
                let _ = unsafe { crate::mcast::ibv_detach_mcast(j.qp as *mut ibv_qp, &g, 0) };
            }
            Ok(())
        })
    }
}
