//! Doorbell batching: posts that follow each other closely leave together.
//!
//! A program that posts one work request per call (perftest's
//! `ib_send_bw` posts 100 SENDs one by one, then polls) made one
//! `sendmmsg` per post: a 64-byte SEND cost a system call and the peer one
//! wake-up for each. A NIC batches such posts by itself (its doorbell only
//! says "look at the queue"; it fetches what piled up), and the kernel's
//! rxe hands them to a work queue.
//!
//! Here a post that starts within the batching window (default
//! [`DEFAULT_WINDOW`]) of the end of the previous post on the device leaves
//! its packets on the device's ordered send queue ("held"), to go out with
//! the packets of the posts after it, in one `sendmmsg` and as GSO sends.
//! The first post after a pause goes at once, so a ping-pong, whose posts
//! are a round trip apart, never waits. Held packets go out:
//!
//! * when a post finds [`GSO_MAX_SEGMENTS`] packets or [`MAX_HELD_BYTES`]
//!   queued (one full GSO send);
//! * at the program's next call that polls or waits for completions, or
//!   that sends anything itself (`Shared::flush_held`);
//! * otherwise from the progress thread, which the first holding post
//!   wakes: it gives the burst [`GRACE`] to grow, then sends what is
//!   queued. A program that posts a few requests and then stops calling
//!   the library (it polls its memory, say) thus sees them leave within
//!   a wake-up of the progress thread and `GRACE`, far inside any
//!   transport timeout.
//!
//! `Context::set_post_batching` (or `RXE_POST_BATCH_US`) sets the window;
//! zero turns batching off.
//!
//! # Loopback only, by default
//!
//! Unless `RXE_POST_BATCH_US` says otherwise, only a device on a loopback
//! address batches, as only loopback destinations get GSO sends by
//! default. Against the kernel's rxe in a TCG guest (the interop suite), a
//! burst of 64 packets from 16 posts (`ibv_srq_pingpong`, 16 QPs × 4 KiB)
//! lost 14 packets in the guest, which the posts one by one never did, and
//! perftest `-R`'s second connection was rejected three times of three
//! (its race with the guest's listener, docs/interop.md). A peer on the
//! same host takes bursts as fast as they come; what a slow remote peer
//! takes has not been measured.

use rxe_net::udp::GSO_MAX_SEGMENTS;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The default batching window: far below any round trip (a ping-pong's
/// posts are at least one apart), far above the gap between two posts of
/// a loop that posts (well under a microsecond here).
pub(crate) const DEFAULT_WINDOW: Duration = Duration::from_micros(2);

/// The longest window [`Doorbell::set_window`] takes.
pub(crate) const MAX_WINDOW: Duration = Duration::from_secs(1);

/// How long the progress thread lets a held burst grow before it sends it.
pub(crate) const GRACE: Duration = Duration::from_micros(20);

/// The device's batching state.
pub(crate) struct Doorbell {
    epoch: Instant,
    window_ns: AtomicU64,
    /// The end of the previous post, in ns since `epoch` plus one (0: none).
    last_post: AtomicU64,
    /// The send queue holds packets of held posts.
    held: AtomicBool,
    /// Posts whose packets were held (`Context::held_posts`, printed by
    /// `rxe perf --counters`).
    held_posts: AtomicU64,
}

/// The most bytes held: one GSO send's worth. A post of a large message
/// (a 64 KiB WRITE is 16 packets of 4 KiB) already leaves in one GSO send
/// of its own; holding it gains nothing and put four messages' bytes into
/// the peer's socket at once (`ib_write_bw` 64 KiB halved its average
/// bandwidth).
pub(crate) const MAX_HELD_BYTES: usize = 64 * 1024;

/// Whether a post that starts `since_last` after the previous post ended
/// holds its packets, with `queued` packets of `bytes` bytes in all on
/// the send queue.
pub(crate) fn holds(
    window: Duration,
    since_last: Option<Duration>,
    queued: usize,
    bytes: usize,
) -> bool {
    match since_last {
        Some(gap) => {
            !window.is_zero() && gap < window && queued < GSO_MAX_SEGMENTS && bytes < MAX_HELD_BYTES
        }
        None => false,
    }
}

impl Doorbell {
    pub fn new(window: Duration) -> Doorbell {
        Doorbell {
            epoch: Instant::now(),
            window_ns: AtomicU64::new(window.min(MAX_WINDOW).as_nanos() as u64),
            last_post: AtomicU64::new(0),
            held: AtomicBool::new(false),
            held_posts: AtomicU64::new(0),
        }
    }

    pub fn window(&self) -> Duration {
        Duration::from_nanos(self.window_ns.load(Ordering::Relaxed))
    }

    pub fn set_window(&self, window: Duration) {
        let ns = window.min(MAX_WINDOW).as_nanos() as u64;
        self.window_ns.store(ns, Ordering::Relaxed);
    }

    /// How long before `now` the previous post ended (`None`: no post yet,
    /// or batching is off).
    pub fn since_last(&self, now: Instant) -> Option<Duration> {
        if self.window_ns.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let last = self.last_post.load(Ordering::Relaxed);
        let at = self.epoch + Duration::from_nanos(last.checked_sub(1)?);
        Some(now.saturating_duration_since(at))
    }

    /// A post ended at `now`.
    pub fn posted(&self, now: Instant) {
        if self.window_ns.load(Ordering::Relaxed) != 0 {
            let ns = now.saturating_duration_since(self.epoch).as_nanos() as u64;
            self.last_post.store(ns + 1, Ordering::Relaxed);
        }
    }

    /// A post left its packets queued. True if nothing was held before
    /// (the caller wakes the progress thread).
    pub fn hold(&self) -> bool {
        self.held_posts.fetch_add(1, Ordering::Relaxed);
        !self.held.swap(true, Ordering::AcqRel)
    }

    pub fn is_held(&self) -> bool {
        self.held.load(Ordering::Acquire)
    }

    /// The send queue was taken to be sent (call under its lock).
    pub fn released(&self) {
        self.held.store(false, Ordering::Release);
    }

    pub fn held_posts(&self) -> u64 {
        self.held_posts.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);

    #[test]
    fn a_post_right_after_another_holds_its_packets() {
        assert!(holds(2 * US, Some(Duration::from_nanos(300)), 1, 92));
        assert!(holds(
            2 * US,
            Some(Duration::ZERO),
            GSO_MAX_SEGMENTS - 1,
            63 * 92
        ));
    }

    #[test]
    fn the_first_post_after_a_pause_goes_at_once() {
        // A ping-pong: the next post comes a round trip later.
        assert!(!holds(2 * US, Some(8 * US), 1, 92));
        assert!(!holds(2 * US, Some(2 * US), 1, 92));
        // The very first post.
        assert!(!holds(2 * US, None, 1, 92));
    }

    #[test]
    fn a_full_gso_send_goes_at_once() {
        assert!(!holds(
            2 * US,
            Some(Duration::ZERO),
            GSO_MAX_SEGMENTS,
            64 * 92
        ));
        // 16 packets of a 64 KiB WRITE.
        assert!(!holds(2 * US, Some(Duration::ZERO), 16, 16 * 4136));
        assert!(holds(2 * US, Some(Duration::ZERO), 15, 15 * 4136));
    }

    #[test]
    fn a_zero_window_never_holds() {
        assert!(!holds(Duration::ZERO, Some(Duration::ZERO), 1, 92));
        let d = Doorbell::new(Duration::ZERO);
        d.posted(Instant::now());
        assert_eq!(d.since_last(Instant::now()), None);
    }

    #[test]
    fn since_last_measures_from_the_end_of_the_previous_post() {
        let d = Doorbell::new(2 * US);
        let t = Instant::now();
        assert_eq!(d.since_last(t), None);
        d.posted(t);
        assert_eq!(d.since_last(t + 5 * US), Some(5 * US));
        // A clock read before the post ended (another thread) is no gap.
        assert_eq!(d.since_last(t), Some(Duration::ZERO));
    }

    #[test]
    fn only_the_first_hold_asks_for_the_progress_thread() {
        let d = Doorbell::new(2 * US);
        assert!(d.hold());
        assert!(!d.hold());
        assert!(d.is_held());
        d.released();
        assert!(!d.is_held());
        assert!(d.hold());
        assert_eq!(d.held_posts(), 3);
    }

    #[test]
    fn the_window_is_capped() {
        let d = Doorbell::new(Duration::from_secs(60));
        assert_eq!(d.window(), MAX_WINDOW);
        d.set_window(3 * US);
        assert_eq!(d.window(), 3 * US);
    }
}
