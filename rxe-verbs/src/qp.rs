//! Queue pairs, shared receive queues and address handles.

use crate::attr::{addr_of, gid_of, QpInitAttr};
use crate::context::{Context, CtxImp};
use crate::cq::CompletionQueue;
use crate::error::{invalid, unsupported, Error};
use crate::mr::{MemoryRegion, MemoryWindow, PdImp, ProtectionDomain};
use crate::native::{NQp, NSrq};
use crate::soft::Inner;
pub use rxe_core::engine::mcast::MULTICAST_QPN;
use rxe_core::engine::mcast::{group_of_gid, Attached, Detached};
use rxe_core::engine::state::Connect;
use rxe_core::engine::{QpInit, SrqId};
use rxe_core::psn::Psn;
use rxe_core::types::*;
use std::net::Ipv6Addr;
use std::ops::Range;
use std::sync::Arc;

impl QpInitAttr {
    /// Attributes with the default capacities.
    pub fn new(qp_type: QpType, send_cq: &CompletionQueue, recv_cq: &CompletionQueue) -> Self {
        QpInitAttr {
            qp_type,
            send_cq: send_cq.id(),
            recv_cq: recv_cq.id(),
            srq: None,
            cap: QpCap::default(),
            sq_sig_all: false,
        }
    }
    /// Uses a shared receive queue.
    pub fn with_srq(mut self, srq: &SharedReceiveQueue) -> Self {
        self.srq = Some(srq.id());
        self
    }
    /// Sets the capacities.
    pub fn with_cap(mut self, cap: QpCap) -> Self {
        self.cap = cap;
        self
    }
}

/// What a peer needs to connect to a QP: what `ibv_rc_pingpong` exchanges
/// (`LID:QPN:PSN:GID`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Endpoint {
    /// Local identifier (0 on RoCE).
    pub lid: u16,
    /// QP number.
    pub qpn: u32,
    /// The first PSN the QP sends with.
    pub psn: u32,
    /// The port GID.
    pub gid: Ipv6Addr,
}

/// Connection parameters for [`QueuePair::connect`].
#[derive(Debug, Clone, Copy)]
pub struct ConnectOptions {
    /// Path MTU.
    pub mtu: Mtu,
    /// Local ACK timeout code (4.096 µs × 2^timeout).
    pub timeout: u8,
    /// Retries on timeout or sequence error.
    pub retry_cnt: u8,
    /// Retries on RNR NAK (7 = infinite).
    pub rnr_retry: u8,
    /// RNR timer code asked of senders.
    pub min_rnr_timer: u8,
    /// Outstanding READ/atomic as requester and as responder.
    pub max_rd_atomic: u8,
    /// Remote access granted.
    pub access: Access,
    /// Q_Key (UD).
    pub qkey: u32,
    /// Source GID index. 0 is the device's own GID on both backends: the
    /// soft device's only entry, or on a native device the RoCE v2 entry of
    /// the address it was opened for ([`Context::gid_index`]); other values
    /// are literal indices of the port's GID table. (The same holds for
    /// `AddressVector::sgid_index`.)
    pub sgid_index: u8,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            mtu: Mtu::Mtu1024,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: 16,
            access: Access::LOCAL_WRITE
                | Access::REMOTE_WRITE
                | Access::REMOTE_READ
                | Access::REMOTE_ATOMIC,
            qkey: 0x1111_1111,
            sgid_index: 0,
        }
    }
}

/// A queue pair (`ibv_qp`).
pub struct QueuePair {
    imp: QpImp,
    qp_type: QpType,
}

enum QpImp {
    Soft(SoftQp),
    Native(NQp),
}

struct SoftQp {
    ctx: Arc<Inner>,
    qpn: u32,
}

impl std::fmt::Debug for QueuePair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueuePair")
            .field("qpn", &format_args!("{:#08x}", self.qp_num()))
            .field("type", &self.qp_type)
            .finish()
    }
}

impl Context {
    /// Creates a queue pair in RESET (`ibv_create_qp`).
    pub fn create_qp(&self, pd: &ProtectionDomain, attr: &QpInitAttr) -> Result<QueuePair, Error> {
        let (inner, pdid) = match (&self.imp, &pd.imp) {
            (CtxImp::Soft(inner), PdImp::Soft { ctx, pd }) if Arc::ptr_eq(ctx, inner) => {
                (inner, *pd)
            }
            (CtxImp::Native(n), PdImp::Native(p)) if Arc::ptr_eq(&p.ctx, n) => {
                let q = NQp::create(n, p, attr)?;
                return Ok(QueuePair {
                    imp: QpImp::Native(q),
                    qp_type: attr.qp_type,
                });
            }
            _ => return Err(Error::WrongDevice("pd")),
        };
        let init = QpInit {
            qp_type: attr.qp_type,
            pd: pdid,
            send_cq: rxe_core::engine::CqId(attr.send_cq),
            recv_cq: rxe_core::engine::CqId(attr.recv_cq),
            srq: attr.srq.map(SrqId),
            cap: attr.cap,
            sq_sig_all: attr.sq_sig_all,
        };
        let qpn = inner.shared.with_engine(|e| e.create_qp(init))?;
        Ok(QueuePair {
            imp: QpImp::Soft(SoftQp {
                ctx: inner.clone(),
                qpn,
            }),
            qp_type: attr.qp_type,
        })
    }

    /// Creates a shared receive queue (`ibv_create_srq`).
    pub fn create_srq(
        &self,
        pd: &ProtectionDomain,
        max_wr: u32,
        max_sge: u32,
    ) -> Result<SharedReceiveQueue, Error> {
        self.create_srq_with_limit(pd, max_wr, max_sge, 0)
    }

    /// Creates an SRQ whose limit event is armed at `limit` from the start
    /// (`ibv_srq_init_attr.attr.srq_limit`, as the kernel's rxe takes it; a
    /// native device gets it with `ibv_modify_srq` after creation).
    pub fn create_srq_with_limit(
        &self,
        pd: &ProtectionDomain,
        max_wr: u32,
        max_sge: u32,
        limit: u32,
    ) -> Result<SharedReceiveQueue, Error> {
        let imp = match (&self.imp, &pd.imp) {
            (CtxImp::Soft(inner), PdImp::Soft { pd, .. }) => {
                let id = inner
                    .shared
                    .with_engine(|e| e.create_srq(*pd, max_wr, max_sge, limit))?;
                SrqImp::Soft(SoftSrq {
                    ctx: inner.clone(),
                    id,
                })
            }
            (CtxImp::Native(n), PdImp::Native(p)) if Arc::ptr_eq(&p.ctx, n) => {
                let s = NSrq::create(p, max_wr, max_sge)?;
                if limit > 0 {
                    s.set_limit(limit)?;
                }
                SrqImp::Native(s)
            }
            _ => return Err(Error::WrongDevice("pd")),
        };
        Ok(SharedReceiveQueue { imp })
    }
}

impl QueuePair {
    /// The QP number.
    pub fn qp_num(&self) -> u32 {
        match &self.imp {
            QpImp::Soft(q) => q.qpn,
            QpImp::Native(n) => n.qpn,
        }
    }

    /// The transport.
    /// The soft device and QP number behind this QP (`None` on a native
    /// device).
    pub(crate) fn soft_parts(&self) -> Option<(Arc<Inner>, u32)> {
        match &self.imp {
            QpImp::Soft(q) => Some((q.ctx.clone(), q.qpn)),
            QpImp::Native(_) => None,
        }
    }

    pub fn qp_type(&self) -> QpType {
        self.qp_type
    }

    /// Current attributes and capacities (`ibv_query_qp`).
    pub fn query(&self) -> Result<(QpAttr, QpCap), Error> {
        match &self.imp {
            QpImp::Soft(q) => Ok(q.ctx.shared.lock().query_qp(q.qpn)?),
            QpImp::Native(n) => n.query(),
        }
    }

    /// The QP's state.
    pub fn state(&self) -> Result<QpState, Error> {
        Ok(self.query()?.0.state)
    }

    /// Attaches this UD QP to multicast group `gid` (`ibv_attach_mcast`;
    /// `lid` is ignored, as on every RoCE device). UD sends to the group
    /// (an address vector to the group's address, remote QPN
    /// [`MULTICAST_QPN`]) then reach it. A soft device's first QP in a
    /// group joins the group's IP address on the device's interface.
    /// Attaching twice does nothing.
    pub fn attach_mcast(&self, gid: [u8; 16], lid: u16) -> Result<(), Error> {
        match &self.imp {
            QpImp::Soft(q) => q.attach_mcast(gid),
            QpImp::Native(n) => n.mcast(gid, lid, true),
        }
    }

    /// Detaches this QP from multicast group `gid` (`ibv_detach_mcast`):
    /// EINVAL if it was not attached. Dropping a QP detaches it from every
    /// group.
    pub fn detach_mcast(&self, gid: [u8; 16], lid: u16) -> Result<(), Error> {
        match &self.imp {
            QpImp::Soft(q) => q.detach_mcast(gid),
            QpImp::Native(n) => n.mcast(gid, lid, false),
        }
    }

    /// Modifies attributes and state (`ibv_modify_qp`).
    pub fn modify(&self, attr: &QpAttr, mask: QpAttrMask) -> Result<(), Error> {
        match &self.imp {
            QpImp::Soft(q) => Ok(q
                .ctx
                .shared
                .with_engine(|e| e.modify_qp(q.qpn, attr, mask))?),
            QpImp::Native(n) => n.modify(attr, mask),
        }
    }

    /// What to tell the peer: LID 0, QPN, first send PSN, the device's own
    /// GID (source GID index 0).
    pub fn endpoint(&self) -> Endpoint {
        match &self.imp {
            QpImp::Soft(q) => {
                let e = q.ctx.shared.lock();
                let psn = e
                    .query_qp(q.qpn)
                    .map(|(a, _)| a.sq_psn.value())
                    .unwrap_or(0);
                let gid = gid_of(e.config().gids[0]);
                Endpoint {
                    lid: 0,
                    qpn: q.qpn,
                    psn,
                    gid,
                }
            }
            QpImp::Native(n) => Endpoint {
                lid: 0,
                qpn: n.qpn,
                psn: n.initial_psn,
                gid: n.gid(),
            },
        }
    }

    /// The PSN the QP sends first with (what [`QueuePair::endpoint`] tells).
    fn first_psn(&self) -> Result<Psn, Error> {
        match &self.imp {
            QpImp::Soft(_) => Ok(self.query()?.0.sq_psn),
            QpImp::Native(n) => Ok(Psn::new(n.initial_psn)),
        }
    }

    /// The port the QP is bound to by [`QueuePair::connect`].
    fn port(&self) -> u8 {
        match &self.imp {
            QpImp::Soft(_) => 1,
            QpImp::Native(n) => n.port(),
        }
    }

    /// RESET → INIT → RTR → RTS towards `remote` with the usual attributes
    /// (for UD, `remote` is ignored but for nothing: UD QPs need no peer).
    pub fn connect(&self, remote: &Endpoint, o: &ConnectOptions) -> Result<(), Error> {
        let c = Connect {
            qp_type: self.qp_type,
            access: o.access,
            qkey: o.qkey,
            remote: addr_of(remote.gid),
            dest_qpn: remote.qpn,
            rq_psn: Psn::new(remote.psn),
            sq_psn: self.first_psn()?,
            mtu: o.mtu,
            rd_atomic: o.max_rd_atomic,
            min_rnr_timer: o.min_rnr_timer,
            timeout: o.timeout,
            retry_cnt: o.retry_cnt,
            rnr_retry: o.rnr_retry,
            port: self.port(),
            sgid_index: o.sgid_index,
        };
        for (a, m) in c.steps() {
            self.modify(&a, m)?;
        }
        Ok(())
    }

    /// Posts send work requests (`ibv_post_send`). Stops at the first one
    /// refused and says which; the ones before it are posted. (On a native
    /// device, memory-window binds are refused as unsupported before
    /// anything is posted.)
    pub fn post_send(&self, wrs: &[SendWr]) -> Result<(), Error> {
        let q = match &self.imp {
            QpImp::Soft(q) => q,
            QpImp::Native(n) => return n.post_send(wrs),
        };
        q.ctx.shared.with_engine_post(|e| {
            for (index, wr) in wrs.iter().enumerate() {
                e.post_send_ref(q.qpn, wr)
                    .map_err(|source| Error::BadWorkRequest {
                        index,
                        wr_id: wr.wr_id,
                        source,
                    })?;
            }
            Ok(())
        })
    }

    /// Posts receive work requests (`ibv_post_recv`), stopping at the first refused.
    pub fn post_recv(&self, wrs: &[RecvWr]) -> Result<(), Error> {
        let q = match &self.imp {
            QpImp::Soft(q) => q,
            QpImp::Native(n) => return n.post_recv(wrs),
        };
        q.ctx.shared.with_engine_quiet(|e| {
            for (index, wr) in wrs.iter().enumerate() {
                e.post_recv_ref(q.qpn, wr)
                    .map_err(|source| Error::BadWorkRequest {
                        index,
                        wr_id: wr.wr_id,
                        source,
                    })?;
            }
            Ok(())
        })
    }

    /// Binds a type 1 window to `range` of `mr` with `access` (`ibv_bind_mw`);
    /// the window's rkey changes (its low byte plus one, as libibverbs'
    /// `ibv_inc_rkey` and the kernel's rxe make it). The bind is done when
    /// this returns; it produces no completion.
    pub fn bind_mw(
        &self,
        mw: &mut MemoryWindow,
        mr: &MemoryRegion,
        r: Range<usize>,
        access: Access,
    ) -> Result<u32, Error> {
        if r.end > mr.len() || r.start > r.end {
            return Err(invalid(
                "range",
                format!("{r:?} is outside the {}-byte region", mr.len()),
            ));
        }
        let bind = MwBind {
            mw_rkey: mw.rkey(),
            new_rkey: inc_rkey(mw.rkey()),
            mr_lkey: mr.lkey(),
            addr: mr.addr() + r.start as u64,
            length: (r.end - r.start) as u64,
            access,
        };
        let q = match &self.imp {
            QpImp::Soft(q) => q,
            QpImp::Native(_) => return Err(unsupported("memory windows on a native device")),
        };
        let rkey = q.ctx.shared.with_engine(|e| e.bind_mw(q.qpn, &bind))?;
        mw.set_rkey(rkey);
        Ok(rkey)
    }

    /// Posts a BIND_MW work request binding a type 2 window to `range` of
    /// `mr` through this QP, and returns the window's new rkey (the old one's
    /// low byte plus one, as `ibv_inc_rkey` makes it). The bind takes effect
    /// in send-queue order and completes on the send CQ; the window object
    /// follows the new key at once.
    pub fn post_bind_mw(
        &self,
        wr_id: u64,
        mw: &mut MemoryWindow,
        mr: &MemoryRegion,
        r: Range<usize>,
        access: Access,
    ) -> Result<u32, Error> {
        if r.end > mr.len() || r.start > r.end {
            return Err(invalid(
                "range",
                format!("{r:?} is outside the {}-byte region", mr.len()),
            ));
        }
        let old = mw.rkey();
        let new_rkey = inc_rkey(old);
        let mut wr = SendWr::new(wr_id, SendOpcode::BindMw);
        wr.bind = Some(MwBind {
            mw_rkey: old,
            new_rkey,
            mr_lkey: mr.lkey(),
            addr: mr.addr() + r.start as u64,
            length: (r.end - r.start) as u64,
            access,
        });
        self.post_send(&[wr])?;
        mw.set_rkey(new_rkey);
        Ok(new_rkey)
    }
}

/// The rkey a window gets on its next bind: the low byte plus one
/// (libibverbs' `ibv_inc_rkey`).
pub fn inc_rkey(rkey: u32) -> u32 {
    (rkey & !0xff) | (rkey.wrapping_add(1) & 0xff)
}

impl SoftQp {
    fn attach_mcast(&self, gid: [u8; 16]) -> Result<(), Error> {
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

    fn detach_mcast(&self, gid: [u8; 16]) -> Result<(), Error> {
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

/// A shared receive queue (`ibv_srq`).
pub struct SharedReceiveQueue {
    imp: SrqImp,
}

enum SrqImp {
    Soft(SoftSrq),
    Native(Arc<NSrq>),
}

struct SoftSrq {
    ctx: Arc<Inner>,
    id: SrqId,
}

impl std::fmt::Debug for SharedReceiveQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedReceiveQueue")
            .field("id", &self.id())
            .finish()
    }
}

impl SharedReceiveQueue {
    /// The SRQ's number (as async events name it).
    pub fn id(&self) -> u32 {
        match &self.imp {
            SrqImp::Soft(s) => s.id.0,
            SrqImp::Native(n) => n.id,
        }
    }
    /// Posts receives, stopping at the first refused.
    pub fn post_recv(&self, wrs: &[RecvWr]) -> Result<(), Error> {
        let s = match &self.imp {
            SrqImp::Soft(s) => s,
            SrqImp::Native(n) => return n.post_recv(wrs),
        };
        s.ctx.shared.with_engine(|e| {
            for (index, wr) in wrs.iter().enumerate() {
                e.post_srq_recv(s.id, wr.clone())
                    .map_err(|source| Error::BadWorkRequest {
                        index,
                        wr_id: wr.wr_id,
                        source,
                    })?;
            }
            Ok(())
        })
    }
    /// Arms the limit event: raised once when fewer than `limit` receives remain.
    pub fn set_limit(&self, limit: u32) -> Result<(), Error> {
        match &self.imp {
            SrqImp::Soft(s) => Ok(s.ctx.shared.with_engine(|e| e.modify_srq(s.id, limit))?),
            SrqImp::Native(n) => n.set_limit(limit),
        }
    }

    /// [`Self::resize`] and [`Self::set_limit`] in one `ibv_modify_srq`,
    /// as the kernel does it: the limit is checked against the queue as it
    /// is before the resize. Returns the new size.
    pub fn resize_and_set_limit(&self, max_wr: u32, limit: u32) -> Result<u32, Error> {
        match &self.imp {
            SrqImp::Soft(s) => Ok(s
                .ctx
                .shared
                .with_engine(|e| e.resize_srq_and_limit(s.id, max_wr, limit))?),
            SrqImp::Native(n) => {
                let got = n.resize(max_wr)?;
                n.set_limit(limit)?;
                Ok(got)
            }
        }
    }

    /// Resizes the SRQ to hold at least `max_wr` receives (`ibv_modify_srq`
    /// with `IBV_SRQ_MAX_WR`), keeping those posted; returns the new size.
    pub fn resize(&self, max_wr: u32) -> Result<u32, Error> {
        match &self.imp {
            SrqImp::Soft(s) => Ok(s.ctx.shared.with_engine(|e| e.resize_srq(s.id, max_wr))?),
            SrqImp::Native(n) => n.resize(max_wr),
        }
    }

    /// Receives it holds and scatter entries per receive, as created (or
    /// resized); for a native SRQ what was asked for.
    pub fn size(&self) -> Option<(u32, u32)> {
        match &self.imp {
            SrqImp::Soft(s) => s.ctx.shared.with_engine(|e| e.srq_size(s.id)).ok(),
            SrqImp::Native(_) => None,
        }
    }
}

impl Drop for SoftSrq {
    fn drop(&mut self) {
        let _ = self.ctx.shared.with_engine(|e| e.destroy_srq(self.id));
    }
}
