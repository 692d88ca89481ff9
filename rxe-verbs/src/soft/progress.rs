//! Who feeds the engine: the progress thread, or the application thread
//! that waits for a completion.
//!
//! A soft device has one socket, and received packets must reach the
//! engine promptly: an ACK completes a send, a SEND fills a receive, a READ
//! request wants its answer. Two kinds of thread can take them in:
//!
//! * **The progress thread**, always there. It waits on the socket and on
//!   the engine's next timer, and runs a [round](Shared::round) whenever
//!   either fires.
//! * **An application thread waiting for completions**
//!   ([`crate::CompletionQueue::wait`]). It takes the [`Receiver`] token
//!   (one thread at a time) and blocks on the socket itself, so that the
//!   packet that completes its work wakes the very thread that wants it:
//!   one wake-up per packet, as a plain UDP program has, instead of two
//!   (the progress thread, then a condition variable). Other waiting
//!   threads sleep on the condition variable the receiver signals after
//!   every round, and the first of them takes the token when it is let go.
//!
//! While an application thread holds the token, and for [`HANDOFF`] after
//! it lets go (a program that waits in a loop takes it again at once), the
//! progress thread leaves the socket alone and only runs the timers, waking
//! every [`TIMER_TICK`] at most: the two never race for the same packets and
//! the progress thread never takes the CPU the application needs. When no
//! application thread has waited for longer than that, the progress thread
//! watches the socket again. A packet that arrives while nobody watches
//! (the application is busy between two waits) waits at most about
//! `HANDOFF + TIMER_TICK`, far below any retransmission timeout, unless the
//! application reads a region meanwhile: `MemoryRegion::read` and
//! `with_bytes` take in what waits on the socket when nobody receives
//! ([`Shared::poll_socket`]), so a program polling its memory for a peer's
//! WRITE sees it at once.
//!
//! # Spinning
//!
//! With [`crate::Context::set_poll_spin`] the receiving application thread
//! first polls the socket for that long (non-blocking receives, yielding
//! the core between them) and only then blocks on it. Off by default: the
//! spin saves a wake-up when the answer is quick, but burns CPU the peer or
//! the progress thread may need.
//!
//! # Waiting
//!
//! A thread that receives (the progress thread or an application
//! receiver) sleeps in `ppoll` only after a receive found the socket empty.
//! While a round took datagrams in, the next round receives at once: under
//! a stream of packets the sender is usually a little slower than the
//! receiver, so a `ppoll` before every `recvmmsg` found the next datagram
//! already there, and only added a system call, and put the receiver on the
//! socket's wait queue, where every packet the sender delivered tried to
//! wake it (an inter-processor interrupt on a VM). `write_bw` 64 KiB: the
//! server made a `ppoll` and a `recvmmsg` for every two packets.
//!
//! # Deferred sending
//!
//! When the round that satisfies an application receiver's wait produced
//! packets (typically the ACK of the SEND it just received), they are not
//! sent at once but stay on the device's ordered send queue: the
//! application usually answers right away (the next request of a
//! ping-pong, a READ after a SEND), and its post then puts the ACK and the
//! request on the wire in one `sendmmsg`, which the peer takes in with one
//! wake-up instead of two. Whatever comes first sends them: the
//! application's next post or other call that sends, its next wait before
//! it sleeps, or the progress thread within about [`TIMER_TICK`]. An ACK is
//! thus held for at most about a millisecond, well inside the smallest
//! transport timeout a real RC connection uses (perftest and the pingpong
//! programs set 14, 67 ms); a connection with a transport timeout below
//! 8 (1 ms) may see a spurious retransmission when its peer's application
//! is busy.
//!
//! A program that polls its CQ instead of waiting gets the same: a look
//! at the socket that delivered completions
//! (`Shared::poll_socket_as_receiver`) leaves what it produced queued for
//! the program's next post, the next look sends it otherwise, and so does
//! any other call of the drop-in ([`send_deferred`]): a program that goes
//! on to rdma_cm calls or a blocking wait does not leave its last ACK to
//! the progress thread.
//!
//! Posts that follow each other closely hold their packets the same way,
//! to leave together ([`crate::soft::doorbell`]); the first of them wakes this
//! thread, which sends the burst if the application does not.

use crate::soft::Shared;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long after an application receiver lets go the progress thread
/// still leaves the socket to the application.
pub(crate) const HANDOFF: Duration = Duration::from_micros(500);

/// The longest the progress thread sleeps while an application thread
/// receives (it wakes earlier for a due timer).
pub(crate) const TIMER_TICK: Duration = Duration::from_millis(1);

/// The longest the progress thread waits on an idle socket before it looks
/// at the timers and the stop flag again.
const IDLE_WAIT: Duration = Duration::from_millis(20);

/// How long a datagram may wait on the socket, while the application is
/// the receiver by polling (not blocking in a wait), before the progress
/// thread takes it in itself: a program that polls its CQ takes packets in
/// far sooner, but one that polls *memory* for a peer's WRITE
/// (`ib_write_lat`) never calls the library while it waits.
pub(crate) const ORPHAN: Duration = Duration::from_micros(30);

mod deferred;
mod receiver;
pub use deferred::send_deferred;
pub(crate) use deferred::{list as list_deferred, Listed};
pub(crate) use receiver::Receiver;

/// Before the progress thread sends what posts held for a batch (it was
/// woken by the first of them: see [`crate::soft::doorbell`]), it gives the
/// program a moment to post the rest of its burst.
fn let_the_burst_grow(shared: &Shared) {
    if shared.doorbell.is_held() {
        std::thread::sleep(crate::soft::doorbell::GRACE);
    }
}

/// The progress thread's loop (see the module docs).
pub(crate) fn run(shared: Arc<Shared>) {
    // Datagrams the last round took in: while they keep coming, look again
    // without waiting (see "Waiting").
    let mut got = 0;
    while !shared.stop.load(Ordering::Acquire) {
        let now = Instant::now();
        let engine_timer = shared.engine.lock().next_timeout();
        // The connection manager's timers (REQ retries, timewait...).
        let cm_timer = shared.cm.lock().next_timeout();
        let until_timer = match (engine_timer, cm_timer) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
        .map(|t| t.saturating_duration_since(now));
        if shared.receiver.app_is_receiving(now) {
            // An application thread has the socket: timers only.
            let nap = until_timer.map_or(TIMER_TICK, |d| d.min(TIMER_TICK));
            if shared.receiver.is_poller() {
                // It only polls: watch the socket, and take in what it
                // leaves there for longer than ORPHAN.
                if !nap.is_zero() && shared.waiter.wait(Some(nap)).unwrap_or(false) {
                    std::thread::sleep(ORPHAN);
                    if !shared.receiver.is_taken()
                        && shared.waiter.wait(Some(Duration::ZERO)).unwrap_or(false)
                    {
                        got = shared.round(true, false, true);
                        continue;
                    }
                }
            } else if !nap.is_zero() {
                // Woken early by a post that held its packets.
                let _ = shared.waiter.nap(nap);
            }
            let_the_burst_grow(&shared);
            shared.timers_round();
            got = 0;
        } else {
            let wait = until_timer.map_or(IDLE_WAIT, |d| d.min(IDLE_WAIT));
            // Wait without holding any lock, so application threads can send.
            let readable = got > 0 || shared.waiter.wait(Some(wait)).unwrap_or(false);
            if !readable {
                let_the_burst_grow(&shared);
            }
            // An application thread may have become the receiver while we
            // slept: the packets are its to take.
            got = shared.round(readable && !shared.receiver.is_taken(), false, true);
        }
    }
}
