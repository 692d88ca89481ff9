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

    /// Moves the oldest `max` completions (or all there are) to `out`, in
    /// order; returns how many. Completions are `Copy`: they go over as at
    /// most two slices (the ring's halves), and an emptied queue is
    /// cleared rather than drained: `out.extend(entries.drain(..n))` pushed
    /// them one at a time and set a drain up even for an empty queue, on
    /// a path a latency test takes several times a round trip (figures in
    /// docs/performance.md).
    pub fn take(&mut self, max: usize, out: &mut Vec<Completion>) -> usize {
        let n = max.min(self.entries.len());
        if n == 0 {
            return 0;
        }
        let (front, back) = self.entries.as_slices();
        let from_front = n.min(front.len());
        out.extend_from_slice(&front[..from_front]);
        out.extend_from_slice(&back[..n - from_front]);
        if n == self.entries.len() {
            self.entries.clear();
        } else {
            self.entries.drain(..n);
        }
        n
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{WcOpcode, WcStatus};

    fn completion(wr_id: u64) -> Completion {
        Completion {
            wr_id,
            status: WcStatus::Success,
            opcode: WcOpcode::Send,
            qp_num: 1,
            byte_len: 0,
            imm_data: None,
            invalidated_rkey: None,
            src_qp: 0,
            grh: false,
            pkey_index: 0,
        }
    }

    /// `take` hands out what draining the queue from the front would, in
    /// order, whatever `max` and wherever the ring wraps.
    #[test]
    fn take_is_a_drain_from_the_front() {
        let mut cq = Cq::new(64);
        let mut model: VecDeque<u64> = VecDeque::new();
        let mut next = 0;
        // Small pushes and takes of every size walk the ring's head round
        // its buffer, so that the queue is split in two halves at times.
        for round in 0..200usize {
            for _ in 0..(round % 7) {
                assert!(cq.push(completion(next), false));
                model.push_back(next);
                next += 1;
            }
            let max = (round * 3) % 11;
            let mut out = vec![completion(u64::MAX)];
            let n = cq.take(max, &mut out);
            let want: Vec<u64> = model.drain(..max.min(model.len())).collect();
            assert_eq!(n, want.len());
            assert_eq!(out[0].wr_id, u64::MAX, "out is appended to");
            let got: Vec<u64> = out[1..].iter().map(|c| c.wr_id).collect();
            assert_eq!(got, want);
            let left: Vec<u64> = cq.entries.iter().map(|c| c.wr_id).collect();
            assert_eq!(left, Vec::from(model.clone()));
        }
        assert!(next > 300, "the test pushed too little to wrap");
    }
}
