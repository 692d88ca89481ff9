//! The IBTA timers: the local ACK timeout and the RNR NAK timer table.

use std::time::Duration;

/// Local ACK timeout for a QP's `timeout` attribute: 4.096 µs × 2^timeout
/// (IBTA 9.7.6.1.3). 0 means "infinite": no retransmission timer at all.
pub fn ack_timeout(code: u8) -> Option<Duration> {
    match code {
        0 => None,
        c => Some(Duration::from_nanos(4096u64 << u32::from(c.min(31)))),
    }
}

/// Minimum RNR NAK timer values in microseconds, IBTA table 45, indexed by
/// the 5-bit code carried in an RNR NAK. Code 0 is the longest (655.36 ms).
///
/// The kernel's rxe has a typo at code 25 (61410 µs instead of 61440 µs);
/// we follow the spec (see docs/divergences.md).
pub const RNR_TIMER_US: [u32; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560, 3_840,
    5_120, 7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840,
    245_760, 327_680, 491_520,
];

/// How long a requester waits after an RNR NAK with timer `code`.
pub fn rnr_delay(code: u8) -> Duration {
    Duration::from_micros(u64::from(RNR_TIMER_US[usize::from(code & 0x1f)]))
}

/// `rnr_retry` (and `retry_cnt` in the kernel's rxe, not here) value that
/// means "retry forever".
pub const RNR_RETRY_INFINITE: u8 = 7;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ack_timeout_values() {
        assert_eq!(ack_timeout(0), None);
        assert_eq!(ack_timeout(1), Some(Duration::from_nanos(8192)));
        // 14 is the usual default: about 67 ms.
        assert_eq!(ack_timeout(14), Some(Duration::from_nanos(67_108_864)));
        assert_eq!(ack_timeout(31), Some(Duration::from_nanos(4096 << 31)));
    }

    #[test]
    fn rnr_table_is_monotonic_after_code_0() {
        assert!(RNR_TIMER_US[1..].windows(2).all(|w| w[0] < w[1]));
        assert_eq!(rnr_delay(31), Duration::from_micros(491_520));
        assert_eq!(rnr_delay(25), Duration::from_micros(61_440));
        assert_eq!(rnr_delay(0), Duration::from_micros(655_360));
    }
}
