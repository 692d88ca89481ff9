//! The bytes every stress message carries, and how they are checked.
//!
//! Every byte is a function of a 64-bit *key* (which QP, which kind of
//! operation, which message) and its offset in the message, so the side
//! that checks needs nothing but the key: no copy of what was sent. Two
//! messages with different keys differ in (nearly) every 8-byte word, so a
//! byte from the wrong message, a stale one, a shifted one or a flipped bit
//! all show.

/// What a key stands for, in its bits 40..48.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Class {
    /// A SEND's payload (key number: the QP's SEND count).
    Send = 1,
    /// An RDMA WRITE read back with an RDMA READ (key number: the op's sequence).
    WriteBack = 2,
    /// An RDMA WRITE with immediate (key number: the immediate).
    WriteImm = 3,
    /// The server's read-only region that RDMA READs fetch (number 0).
    Static = 4,
}

/// The key of message `no` of `class` on QP `qp`.
pub fn key(qp: usize, class: Class, no: u64) -> u64 {
    ((qp as u64) << 48) ^ ((class as u64) << 40) ^ (no & 0xff_ffff_ffff)
}

/// SplitMix64's finaliser: a bijective scramble of one word.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The 8-byte word at word index `w` of the message keyed `key`.
fn word(key: u64, w: u64) -> [u8; 8] {
    mix(key.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ w).to_le_bytes()
}

/// Fills `buf` with the bytes at offsets `start..start + buf.len()` of the
/// message keyed `key`.
pub fn fill(key: u64, start: usize, buf: &mut [u8]) {
    for (i, b) in buf.iter_mut().enumerate() {
        let off = start + i;
        *b = word(key, (off / 8) as u64)[off % 8];
    }
}

/// The offset (from `start`) of the first byte of `buf` that is not what
/// the message keyed `key` holds at offsets `start..`; `None` if all are.
pub fn first_wrong(key: u64, start: usize, buf: &[u8]) -> Option<usize> {
    let mut w = u64::MAX;
    let mut cur = [0u8; 8];
    for (i, &b) in buf.iter().enumerate() {
        let off = start + i;
        if (off / 8) as u64 != w {
            w = (off / 8) as u64;
            cur = word(key, w);
        }
        if cur[off % 8] != b {
            return Some(i);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_and_check_agree_at_any_offset() {
        let k = key(3, Class::Send, 77);
        let mut whole = vec![0u8; 1000];
        fill(k, 0, &mut whole);
        assert_eq!(first_wrong(k, 0, &whole), None);
        let mut part = vec![0u8; 333];
        fill(k, 101, &mut part);
        assert_eq!(part, whole[101..434]);
        assert_eq!(first_wrong(k, 101, &part), None);
    }

    #[test]
    fn any_flip_or_wrong_key_is_caught() {
        let k = key(0, Class::WriteImm, 5);
        let mut buf = vec![0u8; 64];
        fill(k, 0, &mut buf);
        for i in 0..buf.len() {
            let mut bad = buf.clone();
            bad[i] ^= 0x10;
            assert_eq!(first_wrong(k, 0, &bad), Some(i));
        }
        // The neighbours' keys (next message, next QP, other class) differ
        // in the first word already.
        for other in [
            key(0, Class::WriteImm, 6),
            key(1, Class::WriteImm, 5),
            key(0, Class::Send, 5),
        ] {
            assert_eq!(first_wrong(other, 0, &buf[..8]).map(|i| i < 8), Some(true));
        }
        // Shifted by one byte: caught.
        assert!(first_wrong(k, 1, &buf[..63]).is_some());
    }
}
