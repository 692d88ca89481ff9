//! Completion queues and receive queues: the bounded queues the engine
//! fills and the application drains or refills.

use crate::types::{Completion, RecvWr};
use std::collections::VecDeque;

/// A completion queue with a fixed capacity. A completion that does not fit
/// is an overrun: the queue keeps what it has and records the overrun, as a
/// verbs CQ does before it raises `IBV_EVENT_CQ_ERR`.
#[derive(Debug)]
pub(crate) struct Cq {
    pub capacity: usize,
    pub entries: VecDeque<Completion>,
    pub overruns: u64,
    /// Armed for the next completion (`ibv_req_notify_cq`); `Some(true)`
    /// means solicited-only.
    pub armed: Option<bool>,
    /// Set when an armed CQ got a completion; the driver turns it into a
    /// completion-channel event.
    pub notified: bool,
}

impl Cq {
    pub fn new(capacity: usize) -> Self {
        Cq {
            capacity,
            entries: VecDeque::new(),
            overruns: 0,
            armed: None,
            notified: false,
        }
    }

    /// Adds a completion; false on overrun.
    pub fn push(&mut self, c: Completion, solicited: bool) -> bool {
        if self.entries.len() >= self.capacity {
            self.overruns += 1;
            return false;
        }
        self.entries.push_back(c);
        if let Some(solicited_only) = self.armed {
            if !solicited_only || solicited || c.status != crate::types::WcStatus::Success {
                self.armed = None;
                self.notified = true;
            }
        }
        true
    }
}

/// A shared receive queue.
#[derive(Debug)]
pub(crate) struct Srq {
    pub pd: super::mem::PdId,
    pub max_wr: usize,
    pub max_sge: usize,
    pub queue: VecDeque<RecvWr>,
    /// Raise `SrqLimitReached` when fewer than this many WQEs remain (0: disarmed).
    pub limit: u32,
}
