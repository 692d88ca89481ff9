//! `NQp`, a native queue pair: creation, state changes, queries,
//! multicast, and posting work (`ibv_post_send`, `ibv_post_recv`).

use super::context::NContext;
use super::cq::NCq;
use super::error::{errno, os_error, rc_errno};
use super::ffi::*;
use super::inline::ops;
use super::pd::NPd;
use super::srq::NSrq;
use super::wr::{RecvChain, SendChain};
use crate::attr::{addr_of, Endpoint};
use crate::error::{invalid, unsupported, Error};
use rxe_core::psn::Psn;
use rxe_core::types::*;
use std::ffi::c_int;
use std::net::Ipv6Addr;
use std::ptr;
use std::sync::Arc;

fn from_mtu(m: u32) -> Mtu {
    match m {
        1 => Mtu::Mtu256,
        2 => Mtu::Mtu512,
        3 => Mtu::Mtu1024,
        4 => Mtu::Mtu2048,
        _ => Mtu::Mtu4096,
    }
}

/// A native queue pair.
pub(crate) struct NQp {
    ctx: Arc<NContext>,
    pd: Arc<NPd>,
    _send_cq: Arc<NCq>,
    _recv_cq: Arc<NCq>,
    _srq: Option<Arc<NSrq>>,
    qp: *mut ibv_qp,
    pub qpn: u32,
    pub cap: QpCap,
    /// The first send PSN, chosen at creation (as ibv_rc_pingpong does).
    pub initial_psn: u32,
}

// SAFETY: see NContext (providers lock their queues).
unsafe impl Send for NQp {}
// SAFETY: as above.
unsafe impl Sync for NQp {}

impl Drop for NQp {
    fn drop(&mut self) {
        // As on the soft stack: to ERR first, so posted work is flushed.
        let mut a = ibv_qp_attr {
            qp_state: IBV_QPS_ERR,
            ..Default::default()
        };
        // SAFETY: live QP, valid attributes; then destroyed once (nothing
        // else refers to it: async events are acknowledged when read).
        unsafe {
            (self.ctx.v.modify_qp)(self.qp, &mut a, QpAttrMask::STATE.bits() as c_int);
            (self.ctx.v.destroy_qp)(self.qp);
        }
    }
}

impl NQp {
    pub fn create(
        ctx: &Arc<NContext>,
        pd: &Arc<NPd>,
        attr: &crate::attr::QpInitAttr,
    ) -> Result<NQp, Error> {
        let (qp_type, cap, sq_sig_all) = (attr.qp_type, attr.cap, attr.sq_sig_all);
        let scq = NCq::by_id(ctx, attr.send_cq)?;
        let rcq = NCq::by_id(ctx, attr.recv_cq)?;
        let srq = attr.srq.map(|id| NSrq::by_id(ctx, id)).transpose()?;
        let mut init = ibv_qp_init_attr {
            qp_context: ptr::null_mut(),
            send_cq: scq.cq,
            recv_cq: rcq.cq,
            srq: srq.as_ref().map_or(ptr::null_mut(), |s| s.srq),
            cap: ibv_qp_cap {
                max_send_wr: cap.max_send_wr,
                max_recv_wr: if srq.is_some() { 0 } else { cap.max_recv_wr },
                max_send_sge: cap.max_send_sge,
                max_recv_sge: if srq.is_some() { 0 } else { cap.max_recv_sge },
                max_inline_data: cap.max_inline_data,
            },
            qp_type: match qp_type {
                QpType::Rc => IBV_QPT_RC,
                QpType::Uc => IBV_QPT_UC,
                QpType::Ud => IBV_QPT_UD,
            },
            sq_sig_all: c_int::from(sq_sig_all),
        };
        // SAFETY: live PD; the CQs and SRQ belong to the same context and
        // are kept alive by the QP.
        let qp = unsafe { (ctx.v.create_qp)(pd.pd, &mut init) };
        if qp.is_null() {
            return Err(os_error("ibv_create_qp", ctx.name(), errno()));
        }
        // SAFETY: field of the QP just created.
        let qpn = unsafe { (*qp).qp_num };
        let c = init.cap;
        Ok(NQp {
            ctx: ctx.clone(),
            pd: pd.clone(),
            _send_cq: scq,
            _recv_cq: rcq,
            _srq: srq,
            qp,
            qpn,
            cap: QpCap {
                max_send_wr: c.max_send_wr,
                max_recv_wr: c.max_recv_wr,
                max_send_sge: c.max_send_sge,
                max_recv_sge: c.max_recv_sge,
                max_inline_data: c.max_inline_data,
            },
            initial_psn: rand::random::<u32>() & 0x00ff_ffff,
        })
    }

    pub fn qpn(&self) -> u32 {
        self.qpn
    }

    /// LID 0, the QP number, the PSN it was created to send first and the
    /// context's GID.
    pub fn endpoint(&self) -> Endpoint {
        Endpoint {
            lid: 0,
            qpn: self.qpn,
            psn: self.initial_psn,
            gid: self.gid(),
        }
    }

    pub fn first_psn(&self) -> Result<Psn, Error> {
        Ok(Psn::new(self.initial_psn))
    }

    pub fn attach_mcast(&self, gid: [u8; 16], lid: u16) -> Result<(), Error> {
        self.mcast(gid, lid, true)
    }

    pub fn detach_mcast(&self, gid: [u8; 16], lid: u16) -> Result<(), Error> {
        self.mcast(gid, lid, false)
    }

    pub fn gid(&self) -> Ipv6Addr {
        self.ctx.gid
    }

    pub fn port(&self) -> u8 {
        self.ctx.port
    }

    pub fn modify(&self, attr: &QpAttr, mask: QpAttrMask) -> Result<(), Error> {
        let mut a = ibv_qp_attr {
            qp_state: attr.state.ibv_value(),
            cur_qp_state: attr.cur_state.ibv_value(),
            path_mtu: attr.path_mtu as u32,
            qkey: attr.qkey,
            rq_psn: attr.rq_psn.value(),
            sq_psn: attr.sq_psn.value(),
            dest_qp_num: attr.dest_qpn,
            qp_access_flags: attr.access.bits(),
            pkey_index: attr.pkey_index,
            en_sqd_async_notify: u8::from(attr.en_sqd_async_notify),
            max_rd_atomic: attr.max_rd_atomic,
            max_dest_rd_atomic: attr.max_dest_rd_atomic,
            min_rnr_timer: attr.min_rnr_timer,
            port_num: if mask.contains(QpAttrMask::PORT) && attr.port != 0 {
                attr.port
            } else {
                self.ctx.port
            },
            timeout: attr.timeout,
            retry_cnt: attr.retry_cnt,
            rnr_retry: attr.rnr_retry,
            ..Default::default()
        };
        if let Some(av) = &attr.av {
            a.ah_attr = self.pd.ah_attr(av);
        } else if mask.contains(QpAttrMask::AV) {
            return Err(invalid("av", "QpAttrMask::AV without an address vector"));
        }
        // The API's mask bits are ibv_qp_attr_mask's, bit for bit.
        let m = mask.bits() as c_int;
        // SAFETY: live QP, valid attributes.
        let rc = unsafe { (self.ctx.v.modify_qp)(self.qp, &mut a, m) };
        if rc == 0 {
            Ok(())
        } else {
            Err(os_error("ibv_modify_qp", self.ctx.name(), rc_errno(rc)))
        }
    }

    /// `ibv_attach_mcast` (`attach` true) or `ibv_detach_mcast`.
    pub fn mcast(&self, gid: [u8; 16], lid: u16, attach: bool) -> Result<(), Error> {
        let (f, name) = match attach {
            true => (self.ctx.v.attach_mcast, "ibv_attach_mcast"),
            false => (self.ctx.v.detach_mcast, "ibv_detach_mcast"),
        };
        let f =
            f.ok_or_else(|| unsupported(format!("{name} (the system's libibverbs lacks it)")))?;
        let g = ibv_gid { raw: gid };
        // SAFETY: live QP; the GID outlives the call.
        let rc = unsafe { f(self.qp, &g, lid) };
        if rc == 0 {
            Ok(())
        } else {
            Err(os_error(name, self.ctx.name(), rc_errno(rc)))
        }
    }

    pub fn query(&self) -> Result<(QpAttr, QpCap), Error> {
        let mut a = ibv_qp_attr::default();
        // SAFETY: zeroed plain struct with null pointers as out-parameter.
        let mut init: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        let mask = (1 << 21) - 1;
        // SAFETY: live QP, valid out-parameters.
        let rc = unsafe { (self.ctx.v.query_qp)(self.qp, &mut a, mask, &mut init) };
        if rc != 0 {
            return Err(os_error("ibv_query_qp", self.ctx.name(), rc_errno(rc)));
        }
        let g = &a.ah_attr.grh;
        let av = (a.ah_attr.is_global != 0).then(|| AddressVector {
            // SAFETY: either member of `union ibv_gid` is plain bytes.
            dest: addr_of(Ipv6Addr::from(unsafe { g.dgid.raw })),
            sgid_index: g.sgid_index,
            hop_limit: g.hop_limit,
            traffic_class: g.traffic_class,
            flow_label: g.flow_label,
        });
        let attr = QpAttr {
            state: QpState::from_ibv_value(a.qp_state).unwrap_or(QpState::Err),
            cur_state: QpState::from_ibv_value(a.cur_qp_state).unwrap_or(QpState::Err),
            access: Access::from_bits_truncate(a.qp_access_flags),
            pkey_index: a.pkey_index,
            port: a.port_num,
            qkey: a.qkey,
            av,
            path_mtu: from_mtu(a.path_mtu),
            timeout: a.timeout,
            retry_cnt: a.retry_cnt,
            rnr_retry: a.rnr_retry,
            rq_psn: Psn::new(a.rq_psn),
            sq_psn: Psn::new(a.sq_psn),
            max_rd_atomic: a.max_rd_atomic,
            max_dest_rd_atomic: a.max_dest_rd_atomic,
            min_rnr_timer: a.min_rnr_timer,
            dest_qpn: a.dest_qp_num,
            en_sqd_async_notify: a.en_sqd_async_notify != 0,
        };
        let c = a.cap;
        Ok((
            attr,
            QpCap {
                max_send_wr: c.max_send_wr,
                max_recv_wr: c.max_recv_wr,
                max_send_sge: c.max_send_sge,
                max_recv_sge: c.max_recv_sge,
                max_inline_data: c.max_inline_data,
            },
        ))
    }

    /// `ibv_post_send`: `qp->context->ops.post_send(qp, wr, bad_wr)`.
    pub fn post_send(&self, list: &[SendWr]) -> Result<(), Error> {
        // What this backend cannot express is refused before anything is posted.
        for (index, w) in list.iter().enumerate() {
            if w.opcode == SendOpcode::BindMw || w.bind.is_some() {
                return Err(unsupported(format!(
                    "work request {index} (wr_id {}): memory windows on a native device",
                    w.wr_id
                )));
            }
            if w.opcode == SendOpcode::Flush {
                // rdma-core 44's ibv_post_send has no FLUSH to hand on.
                return Err(unsupported(format!(
                    "work request {index} (wr_id {}): FLUSH on a native device",
                    w.wr_id
                )));
            }
        }
        // Address handles for UD sends (kept alive for the call).
        let mut ahs = Vec::new();
        for w in list {
            if let Some(ud) = &w.ud {
                ahs.push(Some(self.pd.ah(&ud.av)?));
            } else {
                ahs.push(None);
            }
        }
        let mut chain = SendChain::new(list, &ahs);
        if chain.is_empty() {
            return Ok(());
        }
        let mut bad: *mut ibv_send_wr = ptr::null_mut();
        // SAFETY: live QP; the chain, its SGEs, the inline bytes (borrowed
        // from `list`) and the address handles stay alive for the call.
        let rc = unsafe {
            match ops((*self.qp).context).post_send {
                Some(f) => f(self.qp, chain.head(), &mut bad),
                None => libc::EOPNOTSUPP,
            }
        };
        chain.result(rc, bad, list, "send queue", self.cap.max_send_wr)
    }

    /// `ibv_post_recv`: `qp->context->ops.post_recv(qp, wr, bad_wr)`.
    pub fn post_recv(&self, list: &[RecvWr]) -> Result<(), Error> {
        if list.is_empty() {
            return Ok(());
        }
        let mut chain = RecvChain::new(list);
        let mut bad: *mut ibv_recv_wr = ptr::null_mut();
        // SAFETY: live QP; the chain stays valid for the call.
        let rc = unsafe {
            match ops((*self.qp).context).post_recv {
                Some(f) => f(self.qp, chain.head(), &mut bad),
                None => libc::EOPNOTSUPP,
            }
        };
        chain.result(rc, bad, list, "receive queue", self.cap.max_recv_wr)
    }
}
