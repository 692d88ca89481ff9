//! Queue pairs, shared receive queues and address handles: handles over
//! the soft backend ([`crate::soft`]) or a native device.

use crate::attr::{addr_of, QpInitAttr};
pub use crate::attr::{ConnectOptions, Endpoint};
use crate::context::{Context, CtxImp};
use crate::cq::CompletionQueue;
use crate::error::{invalid, unsupported, Error};
use crate::mr::{MemoryRegion, MemoryWindow, PdImp, ProtectionDomain};
use crate::native::{NQp, NSrq};
use crate::soft::{SoftQp, SoftSrq};
pub use rxe_core::engine::mcast::MULTICAST_QPN;
use rxe_core::engine::state::Connect;
use rxe_core::psn::Psn;
use rxe_core::types::*;
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

/// A queue pair (`ibv_qp`).
pub struct QueuePair {
    imp: QpImp,
    qp_type: QpType,
}

enum QpImp {
    Soft(SoftQp),
    Native(NQp),
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
        let imp = match (&self.imp, &pd.imp) {
            (CtxImp::Soft(c), PdImp::Soft(p)) if p.is_of(c) => {
                QpImp::Soft(SoftQp::create(c, p.id(), attr)?)
            }
            (CtxImp::Native(c), PdImp::Native(p)) if Arc::ptr_eq(&p.ctx, c) => {
                QpImp::Native(NQp::create(c, p, attr)?)
            }
            _ => return Err(Error::WrongDevice("pd")),
        };
        Ok(QueuePair {
            imp,
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
            (CtxImp::Soft(c), PdImp::Soft(p)) => {
                SrqImp::Soft(SoftSrq::create(c, p.id(), max_wr, max_sge, limit)?)
            }
            (CtxImp::Native(c), PdImp::Native(p)) if Arc::ptr_eq(&p.ctx, c) => {
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

/// The same call on whichever backend serves the QP.
macro_rules! on_qp {
    ($imp:expr, $q:ident => $call:expr) => {
        match $imp {
            QpImp::Soft($q) => $call,
            QpImp::Native($q) => $call,
        }
    };
}

impl QueuePair {
    /// The QP number.
    pub fn qp_num(&self) -> u32 {
        on_qp!(&self.imp, q => q.qpn())
    }

    /// The soft device and QP number behind this QP (`None` on a native
    /// device).
    pub(crate) fn soft_parts(&self) -> Option<(Arc<crate::soft::Inner>, u32)> {
        match &self.imp {
            QpImp::Soft(q) => Some(q.parts()),
            QpImp::Native(_) => None,
        }
    }

    /// The transport.
    pub fn qp_type(&self) -> QpType {
        self.qp_type
    }

    /// Current attributes and capacities (`ibv_query_qp`).
    pub fn query(&self) -> Result<(QpAttr, QpCap), Error> {
        on_qp!(&self.imp, q => q.query())
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
        on_qp!(&self.imp, q => q.attach_mcast(gid, lid))
    }

    /// Detaches this QP from multicast group `gid` (`ibv_detach_mcast`):
    /// EINVAL if it was not attached. Dropping a QP detaches it from every
    /// group.
    pub fn detach_mcast(&self, gid: [u8; 16], lid: u16) -> Result<(), Error> {
        on_qp!(&self.imp, q => q.detach_mcast(gid, lid))
    }

    /// Modifies attributes and state (`ibv_modify_qp`).
    pub fn modify(&self, attr: &QpAttr, mask: QpAttrMask) -> Result<(), Error> {
        on_qp!(&self.imp, q => q.modify(attr, mask))
    }

    /// What to tell the peer: LID 0, QPN, first send PSN, the device's own
    /// GID (source GID index 0).
    pub fn endpoint(&self) -> Endpoint {
        on_qp!(&self.imp, q => q.endpoint())
    }

    /// The PSN the QP sends first with (what [`QueuePair::endpoint`] tells).
    fn first_psn(&self) -> Result<Psn, Error> {
        on_qp!(&self.imp, q => q.first_psn())
    }

    /// The port the QP is bound to by [`QueuePair::connect`].
    fn port(&self) -> u8 {
        on_qp!(&self.imp, q => q.port())
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
        on_qp!(&self.imp, q => q.post_send(wrs))
    }

    /// Posts receive work requests (`ibv_post_recv`), stopping at the first refused.
    pub fn post_recv(&self, wrs: &[RecvWr]) -> Result<(), Error> {
        on_qp!(&self.imp, q => q.post_recv(wrs))
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
        let bind = MwBind {
            mw_rkey: mw.rkey(),
            new_rkey: inc_rkey(mw.rkey()),
            ..bind_of(mr, r, access)?
        };
        let rkey = match &self.imp {
            QpImp::Soft(q) => q.bind_mw(&bind)?,
            QpImp::Native(_) => return Err(unsupported("memory windows on a native device")),
        };
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
        let old = mw.rkey();
        let new_rkey = inc_rkey(old);
        let mut wr = SendWr::new(wr_id, SendOpcode::BindMw);
        wr.bind = Some(MwBind {
            mw_rkey: old,
            new_rkey,
            ..bind_of(mr, r, access)?
        });
        self.post_send(&[wr])?;
        mw.set_rkey(new_rkey);
        Ok(new_rkey)
    }
}

/// A bind of `r` of `mr` with `access` (keys still to be filled in), or
/// EINVAL if `r` is not inside the region.
fn bind_of(mr: &MemoryRegion, r: Range<usize>, access: Access) -> Result<MwBind, Error> {
    if r.end > mr.len() || r.start > r.end {
        return Err(invalid(
            "range",
            format!("{r:?} is outside the {}-byte region", mr.len()),
        ));
    }
    Ok(MwBind {
        mw_rkey: 0,
        new_rkey: 0,
        mr_lkey: mr.lkey(),
        addr: mr.addr() + r.start as u64,
        length: (r.end - r.start) as u64,
        access,
    })
}

/// The rkey a window gets on its next bind: the low byte plus one
/// (libibverbs' `ibv_inc_rkey`).
pub fn inc_rkey(rkey: u32) -> u32 {
    (rkey & !0xff) | (rkey.wrapping_add(1) & 0xff)
}

/// A shared receive queue (`ibv_srq`).
pub struct SharedReceiveQueue {
    imp: SrqImp,
}

enum SrqImp {
    Soft(SoftSrq),
    Native(Arc<NSrq>),
}

impl std::fmt::Debug for SharedReceiveQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedReceiveQueue")
            .field("id", &self.id())
            .finish()
    }
}

/// The same call on whichever backend serves the SRQ.
macro_rules! on_srq {
    ($imp:expr, $s:ident => $call:expr) => {
        match $imp {
            SrqImp::Soft($s) => $call,
            SrqImp::Native($s) => $call,
        }
    };
}

impl SharedReceiveQueue {
    /// The SRQ's number (as async events name it).
    pub fn id(&self) -> u32 {
        on_srq!(&self.imp, s => s.id())
    }
    /// Posts receives, stopping at the first refused.
    pub fn post_recv(&self, wrs: &[RecvWr]) -> Result<(), Error> {
        on_srq!(&self.imp, s => s.post_recv(wrs))
    }
    /// Arms the limit event: raised once when fewer than `limit` receives remain.
    pub fn set_limit(&self, limit: u32) -> Result<(), Error> {
        on_srq!(&self.imp, s => s.set_limit(limit))
    }

    /// [`Self::resize`] and [`Self::set_limit`] in one `ibv_modify_srq`,
    /// as the kernel does it: the limit is checked against the queue as it
    /// is before the resize. Returns the new size.
    pub fn resize_and_set_limit(&self, max_wr: u32, limit: u32) -> Result<u32, Error> {
        on_srq!(&self.imp, s => s.resize_and_set_limit(max_wr, limit))
    }

    /// Resizes the SRQ to hold at least `max_wr` receives (`ibv_modify_srq`
    /// with `IBV_SRQ_MAX_WR`), keeping those posted; returns the new size.
    pub fn resize(&self, max_wr: u32) -> Result<u32, Error> {
        on_srq!(&self.imp, s => s.resize(max_wr))
    }

    /// Receives it holds and scatter entries per receive, as created (or
    /// resized); for a native SRQ what was asked for.
    pub fn size(&self) -> Option<(u32, u32)> {
        match &self.imp {
            SrqImp::Soft(s) => s.size(),
            SrqImp::Native(_) => None,
        }
    }
}
