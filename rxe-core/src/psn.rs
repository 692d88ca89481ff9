//! 24-bit packet sequence numbers.
//!
//! PSNs count modulo 2^24. Comparison is only meaningful within half the
//! space: IBTA (9.7.1) splits the PSN space around the expected PSN into a
//! "valid" window of 2^23 PSNs ahead and a "duplicate" window of 2^23 behind.
//! [`Psn::diff`] gives the signed distance in that sense, and the ordering
//! helpers build on it.

use core::fmt;

/// Number of distinct PSNs.
pub const PSN_SPACE: u32 = 1 << 24;
/// Mask of the 24 PSN bits.
pub const PSN_MASK: u32 = PSN_SPACE - 1;
/// Half the PSN space: the widest window in which order is defined.
pub const PSN_HALF: u32 = 1 << 23;

/// A 24-bit packet sequence number.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Psn(u32);

impl Psn {
    /// The PSN `value & 0xFFFFFF`.
    pub const fn new(value: u32) -> Psn {
        Psn(value & PSN_MASK)
    }

    /// The PSN as an integer in `0..2^24`.
    pub const fn value(self) -> u32 {
        self.0
    }

    /// `self + n` modulo 2^24.
    #[must_use]
    pub const fn add(self, n: u32) -> Psn {
        Psn(self.0.wrapping_add(n) & PSN_MASK)
    }

    /// `self - n` modulo 2^24.
    #[must_use]
    pub const fn sub(self, n: u32) -> Psn {
        Psn(self.0.wrapping_sub(n) & PSN_MASK)
    }

    /// The next PSN.
    #[must_use]
    pub const fn next(self) -> Psn {
        self.add(1)
    }

    /// Forward distance from `self` to `later`: how many increments take
    /// `self` to `later`, in `0..2^24`.
    pub const fn distance_to(self, later: Psn) -> u32 {
        later.0.wrapping_sub(self.0) & PSN_MASK
    }

    /// Signed distance `self - other` in `-2^23..2^23`: positive when
    /// `self` is after `other`.
    pub const fn diff(self, other: Psn) -> i32 {
        // Shift the 24-bit difference into the top of an i32 and back to
        // sign-extend it.
        ((self.0.wrapping_sub(other.0) << 8) as i32) >> 8
    }

    /// True if `self` comes strictly before `other` (within half the space).
    pub const fn is_before(self, other: Psn) -> bool {
        self.diff(other) < 0
    }

    /// True if `self` comes strictly after `other` (within half the space).
    pub const fn is_after(self, other: Psn) -> bool {
        self.diff(other) > 0
    }

    /// True if `self` lies in the window of `len` PSNs starting at `start`
    /// (`start` included, `start + len` excluded).
    pub const fn in_window(self, start: Psn, len: u32) -> bool {
        start.distance_to(self) < len
    }
}

impl fmt::Debug for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Psn({:#08x})", self.0)
    }
}

impl fmt::Display for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl From<Psn> for u32 {
    fn from(p: Psn) -> u32 {
        p.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn wraps() {
        assert_eq!(Psn::new(0xff_ffff).next(), Psn::new(0));
        assert_eq!(Psn::new(0).sub(1).value(), 0xff_ffff);
        assert_eq!(Psn::new(0x1_000005).value(), 5);
        assert_eq!(Psn::new(0xff_fffe).add(5).value(), 3);
        assert_eq!(Psn::new(0xff_fffe).distance_to(Psn::new(3)), 5);
        assert_eq!(Psn::new(3).diff(Psn::new(0xff_fffe)), 5);
        assert_eq!(Psn::new(0xff_fffe).diff(Psn::new(3)), -5);
        assert!(Psn::new(0xff_fffe).is_before(Psn::new(3)));
        assert!(Psn::new(3).is_after(Psn::new(0xff_fffe)));
        assert!(Psn::new(1).in_window(Psn::new(0xff_ffff), 3));
        assert!(!Psn::new(2).in_window(Psn::new(0xff_ffff), 3));
    }

    #[test]
    fn half_space_boundary() {
        let a = Psn::new(0);
        // Exactly half the space away: diff is -2^23, so `a` counts as after.
        assert_eq!(Psn::new(PSN_HALF).diff(a), -(PSN_HALF as i32));
        assert!(Psn::new(PSN_HALF - 1).is_after(a));
        assert!(Psn::new(PSN_HALF + 1).is_before(a));
    }

    proptest! {
        #[test]
        fn add_then_sub_is_identity(p in 0u32..PSN_SPACE, n in any::<u32>()) {
            let p = Psn::new(p);
            prop_assert_eq!(p.add(n).sub(n), p);
        }

        #[test]
        fn distance_inverts_add(p in 0u32..PSN_SPACE, n in 0u32..PSN_SPACE) {
            let p = Psn::new(p);
            prop_assert_eq!(p.distance_to(p.add(n)), n);
        }

        #[test]
        fn diff_is_antisymmetric_and_bounded(a in 0u32..PSN_SPACE, b in 0u32..PSN_SPACE) {
            let (a, b) = (Psn::new(a), Psn::new(b));
            let d = a.diff(b);
            prop_assert!((-(PSN_HALF as i32)..PSN_HALF as i32).contains(&d));
            prop_assert_eq!(b.add(d as u32), a);
            if d != -(PSN_HALF as i32) {
                prop_assert_eq!(b.diff(a), -d);
            }
        }

        #[test]
        fn order_within_half_window(p in 0u32..PSN_SPACE, n in 1u32..PSN_HALF) {
            let p = Psn::new(p);
            let q = p.add(n);
            prop_assert!(q.is_after(p));
            prop_assert!(p.is_before(q));
            prop_assert!(!p.is_after(q));
            prop_assert!(!p.is_before(p) && !p.is_after(p));
        }

        #[test]
        fn window_membership(start in 0u32..PSN_SPACE, len in 1u32..PSN_SPACE, k in 0u32..PSN_SPACE) {
            let s = Psn::new(start);
            prop_assert_eq!(s.add(k).in_window(s, len), k < len);
        }
    }
}
