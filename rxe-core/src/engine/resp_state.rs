//! The responder's state in a QP: the expected PSN and MSN, the message
//! being received, the READ and atomic resources, and the responses
//! waiting to be sent. What the responder does with it is in
//! [`super::responder`].

use super::mem::MemSlice;
use super::slices::Slices;
use crate::psn::Psn;
use crate::types::*;
use crate::wire::aeth::CREDITS_INVALID;
use crate::wire::AethSyndrome;
use std::collections::VecDeque;

/// A message being received.
#[derive(Debug)]
pub(crate) enum InMsg {
    Send {
        wr: RecvWr,
        from_srq: bool,
        slices: Slices,
        written: u64,
    },
    Write {
        slice: MemSlice,
        written: u64,
        dma_len: u64,
    },
}

/// What the responder remembers of a READ or atomic, to answer duplicates.
#[derive(Debug)]
pub(crate) enum Resource {
    Read {
        psn: Psn,
        npkts: u32,
        va: u64,
        len: u64,
        slice: MemSlice,
    },
    Atomic {
        psn: Psn,
        orig: u64,
    },
    /// An ATOMIC WRITE done: a duplicate is answered, not stored again.
    AtomicWrite {
        psn: Psn,
    },
}

/// A READ response in progress.
#[derive(Debug)]
pub(crate) struct ReadJob {
    pub(super) slice: MemSlice,
    /// Offset in the slice of the first byte of this response.
    pub(super) start: u64,
    pub(super) len: u64,
    pub(super) psn: Psn,
    pub(super) npkts: u32,
    pub(super) sent: u32,
    pub(super) msn: u32,
}

/// Something the responder has to send.
#[derive(Debug)]
pub(crate) enum RespOut {
    Ack {
        psn: Psn,
        syndrome: AethSyndrome,
        msn: u32,
    },
    Read(ReadJob),
    AtomicAck {
        psn: Psn,
        orig: u64,
        msn: u32,
    },
    /// The answer to an ATOMIC WRITE or a FLUSH: an RDMA READ response
    /// only without payload, as the kernel's rxe sends both.
    EmptyReadResponse {
        psn: Psn,
        msn: u32,
    },
}

impl RespOut {
    pub fn is_nak(&self) -> bool {
        matches!(self, RespOut::Ack { syndrome, .. } if !syndrome.is_ack())
    }
}

#[derive(Debug)]
pub(crate) struct Responder {
    pub epsn: Psn,
    pub msn: u32,
    /// A sequence NAK for `epsn` went out already.
    pub nak_sent: bool,
    pub cur: Option<InMsg>,
    pub resources: VecDeque<Resource>,
    pub out: VecDeque<RespOut>,
}

impl Responder {
    pub fn new() -> Self {
        Responder {
            epsn: Psn::new(0),
            msn: 0,
            nak_sent: false,
            cur: None,
            resources: VecDeque::new(),
            out: VecDeque::new(),
        }
    }

    pub fn take_current_recv(&mut self) -> Option<RecvWr> {
        match self.cur.take() {
            Some(InMsg::Send { wr, .. }) => Some(wr),
            other => {
                self.cur = other;
                None
            }
        }
    }

    /// Queues an ACK, replacing one that has not gone out yet (ACK
    /// coalescing). True if it replaced one.
    pub(super) fn push_ack(&mut self, psn: Psn) -> bool {
        let ack = RespOut::Ack {
            psn,
            syndrome: AethSyndrome::Ack {
                credits: CREDITS_INVALID,
            },
            msn: self.msn,
        };
        if let Some(
            last @ RespOut::Ack {
                syndrome: AethSyndrome::Ack { .. },
                ..
            },
        ) = self.out.back_mut()
        {
            *last = ack;
            true
        } else {
            self.out.push_back(ack);
            false
        }
    }

    pub(super) fn push_nak(&mut self, psn: Psn, syndrome: AethSyndrome) {
        // A peer that keeps asking without reading the answers gets no more.
        if self.out.len() >= 2 * RESP_OUT_LIMIT {
            return;
        }
        self.out.push_back(RespOut::Ack {
            psn,
            syndrome,
            msn: self.msn,
        });
    }
}

/// How many responses may wait to be sent before the responder refuses
/// more READ/atomic work or duplicate replays. A correct peer never comes
/// near it (it waits for answers); a hostile one cannot make memory grow.
pub(super) const RESP_OUT_LIMIT: usize = 512;
