//! Completion queues and completion channels: handles over the soft
//! backend ([`crate::soft`]) or a native device.

use crate::context::{Context, CtxImp};
use crate::error::Error;
use crate::native::{NChannel, NCq};
use crate::soft::{SoftChannel, SoftCq};
use rxe_core::types::Completion;
use std::sync::Arc;
use std::time::Duration;

/// Takes a channel's events, the numbers of the CQs that fired, instead of
/// [`CompletionChannel::get_event`] (see [`CompletionChannel::set_notify`]).
pub type Notify = Box<dyn Fn(u32) + Send + Sync>;

/// A completion channel (`ibv_comp_channel`): a CQ armed with
/// [`CompletionQueue::req_notify`] posts one event here when its next
/// (or next solicited) completion arrives; [`CompletionChannel::get_event`]
/// blocks until one does.
#[derive(Clone)]
pub struct CompletionChannel {
    imp: ChanImp,
}

#[derive(Clone)]
enum ChanImp {
    Soft(SoftChannel),
    Native(Arc<NChannel>),
    /// `ibv_create_comp_channel` failed; CQs refuse the channel.
    NativeFailed(Arc<Error>),
}

impl std::fmt::Debug for CompletionChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("CompletionChannel");
        match &self.imp {
            ChanImp::Soft(c) => d.field("pending", &c.pending()),
            ChanImp::Native(_) => d.field("kind", &"native"),
            ChanImp::NativeFailed(e) => d.field("failed", e),
        };
        d.finish()
    }
}

impl CompletionChannel {
    /// Hands every event of the channel to `f` (the number of the CQ that
    /// fired) instead of queueing it for [`CompletionChannel::get_event`]:
    /// those queued already at once, each later one from whichever thread
    /// raises it (with the device's engine locked: the hook must be quick
    /// and must not call the device). This is how the C library queues
    /// events where the program's `channel->fd` shows them. Set once; on a
    /// native device, or when already set, it returns
    /// [`Error::Unsupported`].
    pub fn set_notify(&self, f: Notify) -> Result<(), Error> {
        match &self.imp {
            ChanImp::Soft(c) if c.set_notify(f) => Ok(()),
            ChanImp::Soft(_) => Err(crate::error::unsupported(
                "a second notify hook on a channel",
            )),
            _ => Err(crate::error::unsupported(
                "notify hooks on a native completion channel",
            )),
        }
    }

    /// Drops the events of CQ `cq` still queued (the CQ is being
    /// destroyed, and the kernel drops them too); returns how many.
    pub fn forget(&self, cq: u32) -> usize {
        match &self.imp {
            ChanImp::Soft(c) => c.forget(cq),
            _ => 0,
        }
    }

    /// Waits for the next CQ event; returns the number of the CQ that fired,
    /// or `None` after `timeout`.
    pub fn get_event(&self, timeout: Duration) -> Option<u32> {
        match &self.imp {
            ChanImp::Soft(c) => c.get_event(timeout),
            ChanImp::Native(c) => c.get_event(timeout),
            ChanImp::NativeFailed(_) => {
                std::thread::sleep(timeout);
                None
            }
        }
    }
}

/// A completion queue (`ibv_cq`).
pub struct CompletionQueue {
    imp: CqImp,
}

enum CqImp {
    Soft(SoftCq),
    Native(Arc<NCq>),
}

impl std::fmt::Debug for CompletionQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompletionQueue")
            .field("id", &self.id())
            .field("capacity", &self.capacity())
            .finish()
    }
}

impl Context {
    /// Creates a completion channel. (On a native device whose
    /// `ibv_create_comp_channel` fails, the channel is refused by
    /// [`Context::create_cq`] with that error; [`Context::try_create_comp_channel`]
    /// reports it at once.)
    pub fn create_comp_channel(&self) -> CompletionChannel {
        self.try_create_comp_channel()
            .unwrap_or_else(|e| CompletionChannel {
                imp: ChanImp::NativeFailed(Arc::new(e)),
            })
    }

    /// Creates a completion channel, or says why it cannot.
    pub fn try_create_comp_channel(&self) -> Result<CompletionChannel, Error> {
        let imp = match &self.imp {
            CtxImp::Soft(c) => ChanImp::Soft(SoftChannel::new(c)),
            CtxImp::Native(c) => ChanImp::Native(NChannel::create(c)?),
        };
        Ok(CompletionChannel { imp })
    }

    /// Creates a CQ of `cqe` entries, optionally tied to a completion channel.
    pub fn create_cq(
        &self,
        cqe: u32,
        channel: Option<&CompletionChannel>,
    ) -> Result<CompletionQueue, Error> {
        let imp = match (&self.imp, channel.map(|c| &c.imp)) {
            (CtxImp::Soft(c), None) => CqImp::Soft(SoftCq::create(c, cqe, None)?),
            (CtxImp::Soft(c), Some(ChanImp::Soft(ch))) => {
                CqImp::Soft(SoftCq::create(c, cqe, Some(ch))?)
            }
            (CtxImp::Native(c), None) => CqImp::Native(NCq::create(c, cqe, None)?),
            (CtxImp::Native(c), Some(ChanImp::Native(ch))) if ch.same_context(c) => {
                CqImp::Native(NCq::create(c, cqe, Some(ch))?)
            }
            (CtxImp::Native(_), Some(ChanImp::NativeFailed(e))) => {
                return Err(Error::InvalidArgument {
                    name: "channel",
                    reason: format!("the channel could not be created: {e}"),
                })
            }
            _ => return Err(Error::WrongDevice("channel")),
        };
        Ok(CompletionQueue { imp })
    }
}

/// The same call on whichever backend serves the CQ.
macro_rules! on_cq {
    ($imp:expr, $c:ident => $call:expr) => {
        match $imp {
            CqImp::Soft($c) => $call,
            CqImp::Native($c) => $call,
        }
    };
}

impl CompletionQueue {
    /// The CQ's number (as async events and channel events name it; on a
    /// native device, the CQ's kernel handle).
    pub fn id(&self) -> u32 {
        match &self.imp {
            CqImp::Soft(c) => c.id(),
            CqImp::Native(c) => c.id,
        }
    }

    /// Capacity in completions (at least what was asked for).
    pub fn capacity(&self) -> u32 {
        on_cq!(&self.imp, c => c.capacity())
    }

    /// Resizes the CQ to hold at least `cqe` completions (`ibv_resize_cq`),
    /// larger or smaller, keeping the completions it holds (never fewer
    /// than those); returns the new capacity.
    pub fn resize(&self, cqe: u32) -> Result<u32, Error> {
        on_cq!(&self.imp, c => c.resize(cqe))
    }

    /// Takes up to `max` completions (`ibv_poll_cq`), oldest first.
    pub fn poll(&self, max: usize) -> Vec<Completion> {
        let mut v = Vec::new();
        self.poll_into(&mut v, max);
        v
    }

    /// Appends up to `max` completions to `out`; returns how many.
    pub fn poll_into(&self, out: &mut Vec<Completion>, max: usize) -> usize {
        on_cq!(&self.imp, c => c.poll_into(out, max))
    }

    /// [`CompletionQueue::poll_into`] for a program that polls in a loop
    /// (the C library's `ibv_poll_cq`): when the CQ is empty and no other
    /// thread is receiving, it first takes in what the socket holds,
    /// without waiting, so the completion a busy poller waits for arrives
    /// on its own thread instead of after the progress thread's next turn.
    ///
    /// An empty poll is made cheap: while no completion has been delivered
    /// anywhere on the device since this CQ was last found empty, the
    /// engine is not locked to look again, and after taking in datagrams
    /// the CQ is looked at again only if that delivered a completion.
    pub fn poll_progress(&self, out: &mut Vec<Completion>, max: usize) -> usize {
        match &self.imp {
            CqImp::Soft(c) => c.poll_progress(out, max),
            CqImp::Native(c) => c.poll_into(out, max),
        }
    }

    /// Waits until `n` completions are there (or `timeout` passes) and
    /// takes them: all `n`, or after the timeout what came (an
    /// [`Error::Timeout`] if nothing did).
    ///
    /// On a soft device the waiting thread receives from the socket itself
    /// when no other thread does (see the crate's "Threads" notes), so the
    /// packet that completes the work wakes this thread directly.
    pub fn wait(&self, n: usize, timeout: Duration) -> Result<Vec<Completion>, Error> {
        let mut out = Vec::with_capacity(n.min(4096));
        self.wait_into(&mut out, n, timeout)?;
        Ok(out)
    }

    /// [`CompletionQueue::wait`] into a vector the caller keeps (no
    /// allocation per call once it has room): appends the completions
    /// and returns how many; [`Error::Timeout`] if none came.
    pub fn wait_into(
        &self,
        out: &mut Vec<Completion>,
        n: usize,
        timeout: Duration,
    ) -> Result<usize, Error> {
        match &self.imp {
            CqImp::Soft(c) => c.wait_into(out, n, timeout),
            CqImp::Native(c) => c.wait_into(out, n, timeout),
        }
    }

    /// Arms the CQ for one channel event (`ibv_req_notify_cq`): on the next
    /// completion, or with `solicited_only` on the next solicited or error one.
    pub fn req_notify(&self, solicited_only: bool) -> Result<(), Error> {
        on_cq!(&self.imp, c => c.req_notify(solicited_only))
    }
}
