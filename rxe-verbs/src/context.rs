//! [`Context`], an open device (`ibv_context`), and the asynchronous
//! events it reports: a handle over the soft backend ([`crate::soft`]) or
//! a native device ([`crate::native`]).

use crate::attr::{AsyncEventKind, AsyncNotify, DeviceAttr, DeviceKind, PortAttr};
use crate::device::Device;
use crate::error::{unsupported, Error};
use crate::native::NContext;
use crate::soft::Inner;
use rxe_net::faults::FaultCounters;
use rxe_net::udp::RecvMode;
use std::net::Ipv6Addr;
use std::sync::Arc;
use std::time::Duration;

/// An open RDMA device (`ibv_context`): the soft engine, or a native device.
#[derive(Clone)]
pub struct Context {
    pub(crate) imp: CtxImp,
}

/// The backend behind a context.
#[derive(Clone)]
pub(crate) enum CtxImp {
    Soft(Arc<Inner>),
    Native(Arc<NContext>),
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("kind", &self.kind())
            .field("device", self.device())
            .finish()
    }
}

impl Context {
    pub(crate) fn open(device: Device) -> Result<Context, Error> {
        Ok(Context {
            imp: CtxImp::Soft(crate::soft::open(device)?),
        })
    }

    pub(crate) fn open_native(device: Device) -> Result<Context, Error> {
        if device.explicit_capture() {
            return Err(unsupported(format!(
                "packet capture of native device {} (capture its traffic with tcpdump)",
                device.name()
            )));
        }
        if device.explicit_faults() {
            return Err(unsupported(format!(
                "fault injection on native device {} (use tc netem on its interface)",
                device.name()
            )));
        }
        Ok(Context {
            imp: CtxImp::Native(NContext::open(device)?),
        })
    }

    /// Which backend serves this context.
    pub fn kind(&self) -> DeviceKind {
        match &self.imp {
            CtxImp::Soft(_) => DeviceKind::Soft,
            CtxImp::Native(_) => DeviceKind::Native,
        }
    }

    /// The GID table index of this context's own GID: what a source GID
    /// index of 0 stands for in this API (0 on the soft stack; on a native
    /// device the RoCE v2 entry of the address it was opened for).
    pub fn gid_index(&self) -> u8 {
        match &self.imp {
            CtxImp::Soft(_) => 0,
            CtxImp::Native(n) => n.gid_index,
        }
    }

    /// This context's own GID (what [`crate::QueuePair::endpoint`] tells peers).
    pub fn gid(&self) -> Ipv6Addr {
        match &self.imp {
            CtxImp::Soft(c) => c.gid(),
            CtxImp::Native(n) => n.gid,
        }
    }

    /// How long a thread in [`crate::CompletionQueue::wait`] keeps polling
    /// the socket (yielding the core between looks) before it sleeps, on a
    /// soft device; at most 10 ms. 0, the default unless `RXE_SPIN_US` says
    /// otherwise, sleeps at once.
    ///
    /// A spin saves the wake-up when the answer comes within it, which on
    /// loopback makes a ping-pong's round trip much shorter when the two
    /// processes run on cores of their own, and no worse when they share
    /// one (the yield lets the peer run). It costs CPU the rest of the
    /// machine may want: on a small machine the bandwidth tests lose a
    /// good part of their throughput with it, which is why it is off
    /// unless asked for (figures in docs/performance.md). A native device ignores it:
    /// its waits poll the CQ.
    pub fn set_poll_spin(&self, spin: Duration) {
        if let CtxImp::Soft(c) = &self.imp {
            c.set_poll_spin(spin);
        }
    }

    /// Posts that start within `window` of the end of the previous post on
    /// this device leave their packets queued, to go out with the next
    /// posts' in one system call (and as GSO sends), on a soft device; at
    /// most 1 s. Zero sends every post's packets at once. The default,
    /// unless `RXE_POST_BATCH_US` says otherwise, is 2 µs on a loopback
    /// device (a loop that posts one request per call is batched, a
    /// ping-pong never waits) and zero on others.
    /// Held packets go out at the program's next poll or wait for
    /// completions, when a full GSO send's worth is queued, or from the
    /// progress thread within about 20 µs of its wake-up (see the
    /// `doorbell` notes in docs/verbs.md). A native device ignores it.
    pub fn set_post_batching(&self, window: Duration) {
        if let CtxImp::Soft(c) = &self.imp {
            c.set_post_batching(window);
        }
    }

    /// How many posts held their packets for a later batch (0 on a native
    /// device).
    pub fn held_posts(&self) -> u64 {
        match &self.imp {
            CtxImp::Soft(c) => c.held_posts(),
            CtxImp::Native(_) => 0,
        }
    }

    /// The spin [`Context::set_poll_spin`] set (zero on a native device).
    pub fn poll_spin(&self) -> Duration {
        match &self.imp {
            CtxImp::Soft(c) => c.poll_spin(),
            CtxImp::Native(_) => Duration::ZERO,
        }
    }

    /// The device this context was opened on.
    pub fn device(&self) -> &Device {
        match &self.imp {
            CtxImp::Soft(c) => c.device(),
            CtxImp::Native(n) => &n.device,
        }
    }

    /// Device attributes (`ibv_query_device`).
    pub fn query_device(&self) -> DeviceAttr {
        match &self.imp {
            CtxImp::Soft(c) => c.query_device(),
            CtxImp::Native(n) => n.attr.clone(),
        }
    }

    /// Port attributes (`ibv_query_port`): port 1 of a soft device, the
    /// context's port of a native one. (Should a native query fail, the
    /// port is reported down.)
    pub fn query_port(&self) -> PortAttr {
        match &self.imp {
            CtxImp::Soft(c) => c.query_port(),
            CtxImp::Native(n) => n.port_attr(),
        }
    }

    /// How the device receives: whether every incoming ICRC can be checked
    /// (a raw socket sees the IPv4 header) or IPv4 ICRCs from senders with
    /// nonzero IP IDs go unverified (a plain UDP socket). A native device
    /// checks every ICRC itself: `Raw`.
    pub fn recv_mode(&self) -> RecvMode {
        match &self.imp {
            CtxImp::Soft(c) => c.recv_mode(),
            CtxImp::Native(_) => RecvMode::Raw,
        }
    }

    /// The next asynchronous event, waiting up to `timeout`.
    pub fn get_async_event(&self, timeout: Duration) -> Option<AsyncEventKind> {
        match &self.imp {
            CtxImp::Soft(c) => c.get_async_event(timeout),
            CtxImp::Native(c) => c.get_async_event(timeout),
        }
    }

    /// Hands every asynchronous event from now on to `f` instead of the
    /// queue [`Context::get_async_event`] reads; events already queued go
    /// to `f` at once. `f` runs on whichever thread raised the event, with
    /// the engine locked: it must be quick and must not call the device.
    /// This is how the C library routes events to the `async_fd` of the
    /// context that owns the object. Set once; soft devices only.
    pub fn set_async_notify(&self, f: AsyncNotify) -> Result<(), Error> {
        match &self.imp {
            CtxImp::Soft(c) => c.set_async_notify(f),
            CtxImp::Native(_) => Err(unsupported("async notify hooks on a native device")),
        }
    }

    /// Engine counters (like `rdma statistic show`). A native device's
    /// counters are the kernel's (`rdma statistic`); here they are all zero.
    pub fn counters(&self) -> rxe_core::engine::Counters {
        match &self.imp {
            CtxImp::Soft(c) => c.counters(),
            CtxImp::Native(_) => rxe_core::engine::Counters::default(),
        }
    }

    /// What this device's socket sent and received so far (datagrams,
    /// bytes, send batches, ICRC verdicts); `None` on a native device.
    pub fn transport_stats(&self) -> Option<rxe_net::udp::UdpStats> {
        match &self.imp {
            CtxImp::Soft(c) => Some(c.transport_stats()),
            CtxImp::Native(_) => None,
        }
    }

    /// What the fault injector did to this device's packets so far
    /// ([`Device::with_faults`], `RXE_FAULTS`); `None` if it injects none.
    pub fn fault_counters(&self) -> Option<FaultCounters> {
        match &self.imp {
            CtxImp::Soft(c) => c.fault_counters(),
            CtxImp::Native(_) => None,
        }
    }
}
