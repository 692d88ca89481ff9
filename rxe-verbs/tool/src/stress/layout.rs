//! Where each QP's buffers sit in a side's one memory region.
//!
//! Both sides register one region of `qps × per_qp` bytes and carve it the
//! same way, so an offset means the same on both; each side uses the parts
//! its role needs.
//!
//! | part | size | server's use | client's use |
//! | --- | --- | --- | --- |
//! | `recv` | `recvs × (slot + GRH)` | SEND and WRITE-with-immediate receives | — |
//! | `local` | `2 × depth × slot` | — | sources, READ destinations, atomic results |
//! | `back` | `2 × depth × slot` | targets of WRITEs read back | — |
//! | `imm` | `2 × depth × slot` | targets of WRITEs with immediate | — |
//! | `fixed` | `slot` | the read-only pattern READs fetch | — |
//! | `atomic` | 8 | the QP's atomic counter | — |
//!
//! A slot is used by operation `seq` as slot `seq % (2 × depth)`. At most
//! `depth` operations of a QP are outstanding, so a slot is reused only when
//! the operation that last used it has completed.

/// The GRH that a UD receive buffer starts with.
pub const GRH: usize = 40;

/// The carving of one QP's share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Largest message.
    pub slot: usize,
    /// Outstanding operations per QP.
    pub depth: usize,
    /// Receives posted per QP.
    pub recvs: usize,
}

impl Layout {
    /// Slots per ring (`local`, `back`, `imm`).
    pub fn ring(&self) -> usize {
        2 * self.depth
    }
    fn recv_stride(&self) -> usize {
        self.slot + GRH
    }
    fn recv_len(&self) -> usize {
        self.recvs * self.recv_stride()
    }
    fn ring_len(&self) -> usize {
        self.ring() * self.slot
    }
    /// Bytes per QP, a multiple of 64.
    pub fn per_qp(&self) -> usize {
        (self.recv_len() + 3 * self.ring_len() + self.slot + 8).div_ceil(64) * 64
    }
    fn base(&self, qp: usize) -> usize {
        qp * self.per_qp()
    }
    /// Receive buffer `j` of QP `qp` (GRH room included).
    pub fn recv(&self, qp: usize, j: usize) -> std::ops::Range<usize> {
        let s = self.base(qp) + j * self.recv_stride();
        s..s + self.recv_stride()
    }
    /// The client's local slot of operation `seq`.
    pub fn local(&self, qp: usize, seq: u64) -> usize {
        self.base(qp) + self.recv_len() + (seq as usize % self.ring()) * self.slot
    }
    /// The server's WRITE-back target of operation `seq`.
    pub fn back(&self, qp: usize, seq: u64) -> usize {
        self.base(qp) + self.recv_len() + self.ring_len() + (seq as usize % self.ring()) * self.slot
    }
    /// The server's WRITE-with-immediate target of immediate `no`.
    pub fn imm(&self, qp: usize, no: u64) -> usize {
        self.base(qp)
            + self.recv_len()
            + 2 * self.ring_len()
            + (no as usize % self.ring()) * self.slot
    }
    /// The server's read-only pattern.
    pub fn fixed(&self, qp: usize) -> usize {
        self.base(qp) + self.recv_len() + 3 * self.ring_len()
    }
    /// The server's 8-byte atomic counter (8-aligned: everything before it
    /// is a multiple of 8 when `slot` is).
    pub fn atomic(&self, qp: usize) -> usize {
        self.fixed(qp) + self.slot
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_do_not_overlap_and_fit() {
        let l = Layout {
            slot: 4096,
            depth: 4,
            recvs: 8,
        };
        for qp in 0..3 {
            let mut parts: Vec<(usize, usize)> = Vec::new();
            for j in 0..l.recvs {
                let r = l.recv(qp, j);
                parts.push((r.start, r.end));
            }
            for s in 0..l.ring() as u64 {
                parts.push((l.local(qp, s), l.local(qp, s) + l.slot));
                parts.push((l.back(qp, s), l.back(qp, s) + l.slot));
                parts.push((l.imm(qp, s), l.imm(qp, s) + l.slot));
            }
            parts.push((l.fixed(qp), l.fixed(qp) + l.slot));
            parts.push((l.atomic(qp), l.atomic(qp) + 8));
            parts.sort_unstable();
            assert!(parts.windows(2).all(|w| w[0].1 <= w[1].0), "{parts:?}");
            assert!(parts[0].0 >= qp * l.per_qp());
            assert!(parts.last().unwrap().1 <= (qp + 1) * l.per_qp());
            assert_eq!(l.atomic(qp) % 8, 0);
        }
        // Slots wrap every 2 × depth operations.
        assert_eq!(l.local(1, 3), l.local(1, 3 + 8));
    }
}
