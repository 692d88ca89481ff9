//! The soft backend's queue pairs and shared receive queues: engine calls
//! under the device's lock, and the IP multicast groups a UD QP's
//! attachments join on the device's socket.

use super::Inner;
use crate::attr::{gid_of, Endpoint, QpInitAttr};
use crate::error::Error;
use rxe_core::engine::mcast::{group_of_gid, Attached, Detached};
use rxe_core::engine::{CqId, EngineError, PdId, QpInit, SrqId};
use rxe_core::psn::Psn;
use rxe_core::types::{MwBind, QpAttr, QpAttrMask, QpCap, QpState, RecvWr, SendWr};
use std::sync::Arc;

/// Posts `wrs` one by one with `post`, stopping at the first refused and
/// saying which (the ones before it stay posted).
fn post_each<W>(
    wrs: &[W],
    wr_id: impl Fn(&W) -> u64,
    mut post: impl FnMut(&W) -> Result<(), EngineError>,
) -> Result<(), Error> {
    for (index, wr) in wrs.iter().enumerate() {
        post(wr).map_err(|source| Error::BadWorkRequest {
            index,
            wr_id: wr_id(wr),
            source,
        })?;
    }
    Ok(())
}

/// A QP of a soft device: its number in the device's engine.
pub(crate) struct SoftQp {
    ctx: Arc<Inner>,
    qpn: u32,
}

impl SoftQp {
    /// Creates the QP in RESET in protection domain `pd`.
    pub fn create(ctx: &Arc<Inner>, pd: PdId, attr: &QpInitAttr) -> Result<SoftQp, Error> {
        let init = QpInit {
            qp_type: attr.qp_type,
            pd,
            send_cq: CqId(attr.send_cq),
            recv_cq: CqId(attr.recv_cq),
            srq: attr.srq.map(SrqId),
            cap: attr.cap,
            sq_sig_all: attr.sq_sig_all,
        };
        let qpn = ctx.shared.with_engine(|e| e.create_qp(init))?;
        Ok(SoftQp {
            ctx: ctx.clone(),
            qpn,
        })
    }

    pub fn qpn(&self) -> u32 {
        self.qpn
    }

    /// The device and the QP number (for the CM, which drives the QP's
    /// state on the engine directly).
    pub fn parts(&self) -> (Arc<Inner>, u32) {
        (self.ctx.clone(), self.qpn)
    }

    pub fn query(&self) -> Result<(QpAttr, QpCap), Error> {
        Ok(self.ctx.shared.lock().query_qp(self.qpn)?)
    }

    pub fn modify(&self, attr: &QpAttr, mask: QpAttrMask) -> Result<(), Error> {
        Ok(self
            .ctx
            .shared
            .with_engine(|e| e.modify_qp(self.qpn, attr, mask))?)
    }

    /// LID 0, the QP number, the first send PSN and the device's only GID.
    pub fn endpoint(&self) -> Endpoint {
        let e = self.ctx.shared.lock();
        let psn = e
            .query_qp(self.qpn)
            .map(|(a, _)| a.sq_psn.value())
            .unwrap_or(0);
        Endpoint {
            lid: 0,
            qpn: self.qpn,
            psn,
            gid: gid_of(e.config().gids[0]),
        }
    }

    pub fn first_psn(&self) -> Result<Psn, Error> {
        Ok(self.query()?.0.sq_psn)
    }

    /// A soft device has one port.
    pub fn port(&self) -> u8 {
        1
    }

    /// Posts under one engine lock, as a doorbell: the packets may wait
    /// for the next posts ([`super::doorbell`]).
    pub fn post_send(&self, wrs: &[SendWr]) -> Result<(), Error> {
        self.ctx
            .shared
            .with_engine_post(|e| post_each(wrs, |wr| wr.wr_id, |wr| e.post_send_ref(self.qpn, wr)))
    }

    /// Posts receives; a receive produces no packet, so nothing is sent.
    pub fn post_recv(&self, wrs: &[RecvWr]) -> Result<(), Error> {
        self.ctx.shared.with_engine_quiet(|e| {
            post_each(wrs, |wr| wr.wr_id, |wr| e.post_recv_ref(self.qpn, wr))
        })
    }

    /// Binds a type 1 window at once; returns its new rkey.
    pub fn bind_mw(&self, bind: &MwBind) -> Result<u32, Error> {
        Ok(self.ctx.shared.with_engine(|e| e.bind_mw(self.qpn, bind))?)
    }

    /// Attaches to `gid` (`lid` means nothing on RoCE); the device's first
    /// QP in the group joins its IP address on the device's interface.
    pub fn attach_mcast(&self, gid: [u8; 16], _lid: u16) -> Result<(), Error> {
        let sh = &self.ctx.shared;
        // Lock order: link before engine.
        let mut link = sh.link.lock();
        let mut e = sh.lock();
        if e.attach_mcast(self.qpn, gid)? != Attached::First {
            return Ok(());
        }
        // A group of the other address family can be attached to (the
        // kernel allows it) but never receives anything here.
        let Some(g) = group_of_gid(gid).filter(|g| g.is_ipv4() == link.addr().is_ipv4()) else {
            return Ok(());
        };
        link.join_group(g).map_err(|source| {
            let _ = e.detach_mcast(self.qpn, gid);
            Error::Io {
                what: format!("join IP multicast group {g} on {}", link.addr()),
                source,
            }
        })
    }

    /// Detaches from `gid`; the last QP of the device to leave leaves the
    /// IP group.
    pub fn detach_mcast(&self, gid: [u8; 16], _lid: u16) -> Result<(), Error> {
        let sh = &self.ctx.shared;
        let mut link = sh.link.lock();
        let mut e = sh.lock();
        if e.detach_mcast(self.qpn, gid)? == Detached::Last {
            if let Some(g) = group_of_gid(gid) {
                link.leave_group(g);
            }
        }
        Ok(())
    }
}

impl Drop for SoftQp {
    /// Destroying a QP first detaches it from its multicast groups and
    /// moves it to ERR, so that whatever was posted completes with a flush
    /// error, then removes it.
    fn drop(&mut self) {
        let qpn = self.qpn;
        {
            let sh = &self.ctx.shared;
            let mut link = sh.link.lock();
            let mut e = sh.lock();
            for gid in e.detach_all_mcast(qpn) {
                if let Some(g) = group_of_gid(gid) {
                    link.leave_group(g);
                }
            }
        }
        self.ctx.shared.with_engine(|e| {
            let to_err = QpAttr {
                state: QpState::Err,
                ..QpAttr::default()
            };
            let _ = e.modify_qp(qpn, &to_err, QpAttrMask::STATE);
            let _ = e.destroy_qp(qpn);
        });
    }
}

/// An SRQ of a soft device.
pub(crate) struct SoftSrq {
    ctx: Arc<Inner>,
    id: SrqId,
}

impl SoftSrq {
    /// Creates the SRQ with its limit event armed at `limit` (0: not armed).
    pub fn create(
        ctx: &Arc<Inner>,
        pd: PdId,
        max_wr: u32,
        max_sge: u32,
        limit: u32,
    ) -> Result<SoftSrq, Error> {
        let id = ctx
            .shared
            .with_engine(|e| e.create_srq(pd, max_wr, max_sge, limit))?;
        Ok(SoftSrq {
            ctx: ctx.clone(),
            id,
        })
    }

    pub fn id(&self) -> u32 {
        self.id.0
    }

    pub fn post_recv(&self, wrs: &[RecvWr]) -> Result<(), Error> {
        self.ctx.shared.with_engine(|e| {
            post_each(
                wrs,
                |wr| wr.wr_id,
                |wr| e.post_srq_recv(self.id, wr.clone()),
            )
        })
    }

    pub fn set_limit(&self, limit: u32) -> Result<(), Error> {
        Ok(self
            .ctx
            .shared
            .with_engine(|e| e.modify_srq(self.id, limit))?)
    }

    pub fn resize_and_set_limit(&self, max_wr: u32, limit: u32) -> Result<u32, Error> {
        Ok(self
            .ctx
            .shared
            .with_engine(|e| e.resize_srq_and_limit(self.id, max_wr, limit))?)
    }

    pub fn resize(&self, max_wr: u32) -> Result<u32, Error> {
        Ok(self
            .ctx
            .shared
            .with_engine(|e| e.resize_srq(self.id, max_wr))?)
    }

    pub fn size(&self) -> Option<(u32, u32)> {
        self.ctx.shared.with_engine(|e| e.srq_size(self.id)).ok()
    }
}

impl Drop for SoftSrq {
    fn drop(&mut self) {
        let _ = self.ctx.shared.with_engine(|e| e.destroy_srq(self.id));
    }
}
