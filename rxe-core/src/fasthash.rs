//! A fast hash for the engine's per-packet lookups (QP numbers, memory
//! keys).
//!
//! The standard library's `HashMap` hashes with SipHash-1-3 under a random
//! key, which guards a table against keys chosen to collide. Here every key
//! stored is one this side chose (QP numbers and memory keys are drawn at
//! random), and a peer only looks keys up, so that guard buys nothing,
//! while a 64-byte SEND makes several lookups on each side and SipHash was
//! a large share of rxe-rs's user-space work per message (the figures are
//! in docs/performance.md, "The round before (2026-11-28)"). [`FastHasher`] is one folded 64×64→128-bit multiply per
//! integer written: both halves of the product feed the result, so the low
//! bits (the bucket) and the high bits (hashbrown's tag) both depend on
//! every bit of the key.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// A `HashMap` keyed by small integers chosen by this side. Never for keys
/// a peer can choose (rxe-net's GSO ID-delta cache, keyed by received
/// lengths, keeps std's seeded hasher).
pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

/// A `HashSet` of small integers chosen by this side.
pub type FastSet<K> = HashSet<K, BuildHasherDefault<FastHasher>>;

/// See the module docs.
#[derive(Debug, Default, Clone, Copy)]
pub struct FastHasher {
    state: u64,
}

/// The 64-bit golden ratio, odd: multiplying by it spreads every input bit.
const K: u64 = 0x9E37_79B9_7F4A_7C15;

#[inline]
fn fold(a: u64) -> u64 {
    let p = u128::from(a) * u128::from(K);
    (p as u64) ^ ((p >> 64) as u64)
}

impl Hasher for FastHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.state
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(b));
        }
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.write_u64(u64::from(i));
    }

    #[inline]
    fn write_u16(&mut self, i: u16) {
        self.write_u64(u64::from(i));
    }

    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.write_u64(u64::from(i));
    }

    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.state = fold(self.state ^ i);
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    fn h(x: u32) -> u64 {
        BuildHasherDefault::<FastHasher>::default().hash_one(x)
    }

    #[test]
    fn neighbouring_keys_differ_in_low_and_high_bits() {
        // Sequential keys (lengths, PD numbers) must not share buckets or
        // hashbrown's 7-bit tags (the top bits).
        let mut low = HashSet::new();
        let mut top = HashSet::new();
        for x in 0..128u32 {
            low.insert(h(x) & 0x7f);
            top.insert(h(x) >> 57);
        }
        assert!(low.len() > 64, "low bits: {} of 128 distinct", low.len());
        assert!(top.len() > 64, "top bits: {} of 128 distinct", top.len());
    }

    #[test]
    fn a_map_keeps_what_it_is_given() {
        let mut m: FastMap<u32, u32> = FastMap::default();
        for x in 0..10_000u32 {
            m.insert(x.wrapping_mul(0x01000193), x);
        }
        for x in 0..10_000u32 {
            assert_eq!(m.get(&x.wrapping_mul(0x01000193)), Some(&x));
        }
        assert_eq!(m.get(&0xdead_beef), None);
    }
}
