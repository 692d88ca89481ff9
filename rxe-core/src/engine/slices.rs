//! [`Slices`]: the memory a work request's scatter/gather list resolved
//! to, without an allocation for the usual list of one entry.
//!
//! Every SEND a responder receives and every request a requester starts
//! resolves its SGEs to [`MemSlice`]s. As a `Vec` that was an allocation
//! and a free per message on each side, about 150 instructions of a
//! 64-byte SEND's 4,000 (see docs/performance.md, "The round before
//! (2026-11-28)"); nearly every work request has a single SGE, which is
//! kept inline here.

use super::mem::MemSlice;
use std::ops::Deref;

/// A resolved scatter/gather list (see the module docs). Derefs to
/// `[MemSlice]`.
#[derive(Debug, Default)]
pub(crate) enum Slices {
    /// No entries.
    #[default]
    Empty,
    /// One entry, inline.
    One(MemSlice),
    /// Two or more.
    Many(Vec<MemSlice>),
}

impl Slices {
    /// Appends an entry. The usual first entry is written in place: taking
    /// the whole enum out and putting it back (as this did) moved it twice
    /// and cost about 35 instructions a work request.
    pub fn push(&mut self, s: MemSlice) {
        match self {
            Slices::Empty => *self = Slices::One(s),
            Slices::One(_) => {
                let Slices::One(a) = std::mem::take(self) else {
                    unreachable!("matched One above")
                };
                *self = Slices::Many(vec![a, s]);
            }
            Slices::Many(v) => v.push(s),
        }
    }
}

impl Deref for Slices {
    type Target = [MemSlice];

    fn deref(&self) -> &[MemSlice] {
        match self {
            Slices::Empty => &[],
            Slices::One(s) => std::slice::from_ref(s),
            Slices::Many(v) => v,
        }
    }
}

impl FromIterator<MemSlice> for Slices {
    fn from_iter<I: IntoIterator<Item = MemSlice>>(iter: I) -> Self {
        let mut out = Slices::Empty;
        for s in iter {
            out.push(s);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::mem::VecMemory;
    use std::sync::Arc;

    fn slice(len: usize) -> MemSlice {
        MemSlice::new(Arc::new(VecMemory::new(len)), 0, len).unwrap()
    }

    #[test]
    fn keeps_every_entry_in_order() {
        for n in 0..5 {
            let s: Slices = (1..=n).map(slice).collect();
            let lens: Vec<usize> = s.iter().map(|m| m.len()).collect();
            assert_eq!(lens, (1..=n).collect::<Vec<_>>());
            assert_eq!(matches!(s, Slices::One(_)), n == 1);
        }
    }
}
