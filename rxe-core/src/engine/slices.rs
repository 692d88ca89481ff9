//! [`Slices`]: the memory a work request's scatter/gather list resolved
//! to, without an allocation for the usual list of one entry, and moving
//! bytes in and out of such a list ([`scatter`], [`gather`]).
//!
//! Every SEND a responder receives and every request a requester starts
//! resolves its SGEs to [`MemSlice`]s. As a `Vec` that was an allocation
//! and a free per message on each side (what that cost is in
//! docs/performance.md, "The round before (2026-11-28)"); nearly every
//! work request has a single SGE, which is kept inline here.

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
    /// the whole enum out and putting it back would move it twice for
    /// every work request.
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

/// Why [`scatter`] wrote nothing (or stopped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ScatterError {
    /// The data does not fit: the buffers end before it does.
    TooLong,
    /// A buffer's key went away (its MR was deregistered or its window
    /// unbound) while the message was in progress.
    Revoked,
}

/// Writes `data` at byte `offset` of the concatenation of `slices`.
/// Writes nothing if it does not fit; stops at a revoked slice.
pub(crate) fn scatter(slices: &[MemSlice], offset: u64, data: &[u8]) -> Result<(), ScatterError> {
    let total: u64 = slices.iter().map(|s| s.len() as u64).sum();
    if offset
        .checked_add(data.len() as u64)
        .is_none_or(|end| end > total)
    {
        return Err(ScatterError::TooLong);
    }
    let (mut off, mut data) = (offset, data);
    for s in slices {
        if data.is_empty() {
            break;
        }
        let len = s.len() as u64;
        if off >= len {
            off -= len;
            continue;
        }
        let n = ((len - off) as usize).min(data.len());
        if s.write(off as usize, &data[..n]).is_err() {
            return Err(ScatterError::Revoked);
        }
        data = &data[n..];
        off = 0;
    }
    Ok(())
}

/// Fills `out` from byte `offset` of the concatenation of `slices`; false
/// if they end before it is full or a read fails.
pub(crate) fn gather(slices: &[MemSlice], offset: u64, out: &mut [u8]) -> bool {
    let len = out.len();
    let mut off = offset;
    let mut done = 0;
    for s in slices {
        if done == len {
            break;
        }
        let slen = s.len() as u64;
        if off >= slen {
            off -= slen;
            continue;
        }
        let n = ((slen - off) as usize).min(len - done);
        if s.read(off as usize, &mut out[done..done + n]).is_err() {
            return false;
        }
        done += n;
        off = 0;
    }
    done == len
}
