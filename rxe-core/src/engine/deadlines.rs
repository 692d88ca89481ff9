//! Which QP's timer is due next, without looking at every QP.
//!
//! A QP has at most one deadline at a time ([`Qp::next_timeout`]: its
//! transport timer or the end of an RNR wait). Finding the earliest by
//! visiting every QP costs in proportion to the QPs, and the progress loop
//! asks for it every round (a measurable share of a `write_bw` client's
//! CPU with a thousand QPs; docs/performance.md). Instead the engine files
//! each QP's deadline in a min-heap whenever the QP's code has run
//! ([`Deadlines::file`]), and superseded entries are dropped lazily: an
//! entry `(t, qpn)` is current while QP `qpn` exists and its filed deadline
//! ([`Qp::filed`]) is `t`.
//!
//! Invariant, between any two engine calls: every QP's `filed` equals its
//! `next_timeout()`, and the top of the heap is current (or the heap is
//! empty). So the next deadline is a peek, and the QPs due at `now` are
//! popped from the top. Debug builds check the invariant against a scan of
//! every QP each time the next deadline is asked for.

use super::qp::Qp;
use crate::fasthash::FastMap;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Instant;

/// What [`Deadlines::file`] left to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Filed {
    /// The QP's deadline did not change.
    Unchanged,
    /// It changed and the top of the heap is current: only
    /// [`Deadlines::compact`] is left.
    Changed,
    /// It changed and the top is another QP's entry, uncovered by popping:
    /// [`Deadlines::tidy`] must look at it.
    CheckTop,
}

#[derive(Debug, Default)]
pub(crate) struct Deadlines {
    heap: BinaryHeap<Reverse<(Instant, u32)>>,
}

fn is_current(qps: &FastMap<u32, Qp>, t: Instant, qpn: u32) -> bool {
    qps.get(&qpn).is_some_and(|q| q.filed == Some(t))
}

impl Deadlines {
    /// Files QP `qpn`'s deadline after its code ran, and says what the
    /// caller must still do about the heap (see [`Filed`]).
    ///
    /// Only this QP's entries can have been superseded by the change, and
    /// the top was current before it. So a new entry pushed keeps the top
    /// current, and a superseded top is one of this QP's: those are popped
    /// here. Only when that uncovers another QP's entry, which may be
    /// superseded too, does the caller have to look it up
    /// ([`Self::tidy`]). (Looking the top up after every change cost a
    /// hash lookup twice a message on a latency test, where each SEND sets
    /// the transport timer and its ACK stops it.)
    pub fn file(&mut self, qpn: u32, q: &mut Qp) -> Filed {
        let t = q.next_timeout();
        if t == q.filed {
            return Filed::Unchanged;
        }
        q.filed = t;
        if let Some(t) = t {
            self.heap.push(Reverse((t, qpn)));
        }
        let mut popped = false;
        while let Some(&Reverse((top, n))) = self.heap.peek() {
            if n != qpn {
                return if popped {
                    Filed::CheckTop
                } else {
                    Filed::Changed
                };
            }
            if Some(top) == t {
                break;
            }
            self.heap.pop();
            popped = true;
        }
        Filed::Changed
    }

    /// Rebuilds the heap when superseded entries below the top outnumber
    /// the QPs; true if it did (the top is then current).
    pub fn compact(&mut self, qps: &FastMap<u32, Qp>) -> bool {
        if self.heap.len() <= 2 * qps.len() + 64 {
            return false;
        }
        self.heap = qps
            .iter()
            .filter_map(|(&n, q)| q.filed.map(|t| Reverse((t, n))))
            .collect();
        true
    }

    /// Drops superseded entries from the top (any QP's), and rebuilds the
    /// heap when superseded entries below the top outnumber the QPs.
    pub fn tidy(&mut self, qps: &FastMap<u32, Qp>) {
        if self.compact(qps) {
            return;
        }
        while let Some(&Reverse((t, qpn))) = self.heap.peek() {
            if is_current(qps, t, qpn) {
                break;
            }
            self.heap.pop();
        }
    }

    /// The earliest deadline of any QP.
    pub fn next(&self) -> Option<Instant> {
        self.heap.peek().map(|&Reverse((t, _))| t)
    }

    /// Takes the QPs whose deadline is at or before `now` off the heap (and
    /// clears their `filed`, so that the next [`Self::file`] files them
    /// again, whatever their timer code then leaves).
    pub fn take_due(&mut self, now: Instant, qps: &mut FastMap<u32, Qp>) -> Vec<u32> {
        let mut due = Vec::new();
        while let Some(&Reverse((t, qpn))) = self.heap.peek() {
            if t > now {
                break;
            }
            self.heap.pop();
            if let Some(q) = qps.get_mut(&qpn) {
                if q.filed == Some(t) {
                    q.filed = None;
                    due.push(qpn);
                }
            }
        }
        self.tidy(qps);
        due
    }
}
