//! Round-trip time of an RC QP's requests, and the tail loss probe's
//! timeout derived from it.
//!
//! The transport timer (`timeout` in `ibv_modify_qp`, 4.096 µs × 2^n) is
//! the spec's only loss recovery for a packet that nothing follows: the
//! last packet of a burst, or the ACK for it. At the usual 14 it is 67 ms,
//! a thousand round trips on a host. So the requester also measures the
//! round trip (RFC 6298's smoothed estimate, one sample at a time, none
//! from a packet sent twice: Karn's rule) and, when the flight has been
//! silent for a probe timeout (RFC 8985's PTO: twice the smoothed RTT, at
//! least [`MIN_PTO`]), sends its last packet again asking for an ACK. The
//! responder answers a duplicate with an ACK and a packet past a hole with
//! a sequence NAK, so the answer either completes the flight or starts the
//! usual go-back at once (`completer.rs`, `handle_timeout`).

use crate::psn::Psn;
use std::time::{Duration, Instant};

/// The shortest probe timeout (Linux's TCP has the same floor for its
/// loss probe): a peer on the same host answers in tens of microseconds
/// when it runs, but on a loaded host may not be scheduled for several
/// milliseconds, and a probe sooner than that is mostly a duplicate.
pub const MIN_PTO: Duration = Duration::from_millis(10);

/// The most a probe timeout is doubled for probes that found nothing
/// lost (2^6: 64 ×).
const MAX_BACKOFF: u32 = 6;

/// RFC 6298's estimator, and the one packet being timed.
#[derive(Debug, Default, Clone)]
pub struct Rtt {
    srtt: Option<Duration>,
    rttvar: Duration,
    /// The PSN being timed and when it left (sent once: Karn's rule).
    timing: Option<(Psn, Instant)>,
    /// Probes since the last progress: each doubles the probe timeout, as
    /// TCP backs its timer off.
    backoff: u32,
    /// [`Rtt::pto`], worked out when what it depends on changes (the
    /// requester asks for it on every packet that asks for an ACK).
    pto: Option<Duration>,
}

impl Rtt {
    /// A first transmission of `psn` that asks for an ACK left at `now`:
    /// timed unless another packet is.
    pub fn sent(&mut self, psn: Psn, now: Instant) {
        if self.timing.is_none() {
            self.timing = Some((psn, now));
        }
    }

    /// Every PSN up to `acked` is answered at `now`: the timed packet's
    /// round trip is a sample if it is among them.
    pub fn acked(&mut self, acked: Psn, now: Instant) {
        let Some((psn, at)) = self.timing else { return };
        if psn.is_after(acked) {
            return;
        }
        self.timing = None;
        self.backoff = 0;
        let r = now.saturating_duration_since(at);
        match self.srtt {
            None => {
                self.srtt = Some(r);
                self.rttvar = r / 2;
            }
            Some(s) => {
                let err = s.abs_diff(r);
                self.rttvar = (self.rttvar * 3 + err) / 4;
                self.srtt = Some((s * 7 + r) / 8);
            }
        }
        self.update_pto();
    }

    fn update_pto(&mut self) {
        self.pto = self.srtt.map(|s| {
            let base = (s * 2).max(s + self.rttvar * 4).max(MIN_PTO);
            base * (1 << self.backoff)
        });
    }

    /// Packets are being sent again: no sample can be trusted until a
    /// fresh one is timed.
    pub fn discard(&mut self) {
        self.timing = None;
    }

    /// A probe went: the next probe timeout is twice as long.
    pub fn probed(&mut self) {
        self.backoff = (self.backoff + 1).min(MAX_BACKOFF);
        self.timing = None;
        self.update_pto();
    }

    /// The responder acknowledged something new: the path works, and the
    /// backoff ends.
    pub fn progressed(&mut self) {
        if self.backoff != 0 {
            self.backoff = 0;
            self.update_pto();
        }
    }

    /// The smoothed round trip, once there is a sample.
    #[cfg(test)]
    pub fn srtt(&self) -> Option<Duration> {
        self.srtt
    }

    /// How long a flight may be silent before the probe: twice the
    /// smoothed round trip (and at least four deviations over it), never
    /// less than [`MIN_PTO`], doubled for each probe since the last
    /// sample; `None` before the first sample.
    pub fn pto(&self) -> Option<Duration> {
        self.pto
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_smooth_and_retransmissions_are_not_timed() {
        let t0 = Instant::now();
        let mut r = Rtt::default();
        assert_eq!(r.pto(), None);
        r.sent(Psn::new(10), t0);
        r.sent(Psn::new(11), t0 + Duration::from_micros(5)); // 10 is timed
        r.acked(Psn::new(9), t0 + Duration::from_micros(50));
        assert_eq!(r.srtt(), None, "10 is not answered yet");
        r.acked(Psn::new(11), t0 + Duration::from_micros(100));
        assert_eq!(r.srtt(), Some(Duration::from_micros(100)));
        // 2 × 100 µs, or 100 + 4 × 50: under the floor.
        assert_eq!(r.pto(), Some(MIN_PTO));
        // 10 ms: 7/8 × 100 µs + 1/8 × 10 ms; the deviation 3/4 × 50 µs +
        // 1/4 × 9.9 ms.
        r.sent(Psn::new(12), t0);
        r.acked(Psn::new(12), t0 + Duration::from_millis(10));
        assert_eq!(r.srtt(), Some(Duration::from_nanos(1_337_500)));
        assert_eq!(
            r.pto(),
            Some(Duration::from_nanos(1_337_500 + 4 * 2_512_500))
        );
        // A go-back discards the timing: the ACK that follows is no sample.
        r.sent(Psn::new(13), t0);
        r.discard();
        r.acked(Psn::new(13), t0 + Duration::from_secs(1));
        assert_eq!(r.srtt(), Some(Duration::from_nanos(1_337_500)));
        // Each probe doubles the timeout, up to 64 ×, until a sample.
        let pto = r.pto().unwrap();
        r.probed();
        r.probed();
        assert_eq!(r.pto(), Some(pto * 4));
        (0..10).for_each(|_| r.probed());
        assert_eq!(r.pto(), Some(pto * 64));
        r.sent(Psn::new(14), t0);
        r.acked(Psn::new(14), t0 + Duration::from_nanos(1_337_500));
        // 1.3375 ms + 4 × 1.884375 ms = 8.875 ms, under the floor.
        assert_eq!(r.pto(), Some(MIN_PTO));
    }
}
