//! The soft backend's driver: the engine, its UDP socket and the
//! progress thread of one open device, and how packets move between them.
//!
//! Locking: one `parking_lot::Mutex` guards the engine. Every call takes it
//! briefly, does its work, collects the packets the engine wants to send and
//! the events it raised, drops the lock, and only then sends, so no socket
//! call happens under the lock. Receiving threads do the same for received
//! packets and timers. A condition variable on the engine lock wakes threads
//! waiting for completions. Who receives is [`super::progress`]'s business.

use super::capture::Capture;
use super::cq::ChannelInner;
use super::doorbell::Doorbell;
use super::progress::Receiver;
use crate::attr::AsyncEventKind;
use crate::device::Device;
use crate::error::Error;
use crate::events::Events;
use parking_lot::{Condvar, Mutex, MutexGuard};
use rxe_core::engine::{CqId, Engine, EngineConfig, IcrcStatus, SendRefusal, Transmit};
use rxe_net::faults::FaultInjector;
use rxe_net::udp::{RecvMode, SentAs, UdpTransport, Waiter, BATCH};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// State shared by the application's handles and the progress thread.
pub(crate) struct Shared {
    pub engine: Mutex<Engine>,
    /// Wakes threads waiting for completions: notified after every batch.
    pub progress: Condvar,
    /// The socket. Lock order: `link` before `engine`, never the reverse.
    pub link: Mutex<UdpTransport>,
    /// How the socket receives (fixed at open).
    pub recv_mode: RecvMode,
    /// Waits for the socket to have something, without holding `link`.
    pub waiter: Waiter,
    /// Which application thread, if any, receives from the socket.
    pub receiver: Receiver,
    /// `Engine::completions_delivered` when last collected.
    pub delivered: AtomicU64,
    /// Async events, for [`crate::Context::get_async_event`] or the hook
    /// [`crate::Context::set_async_notify`] sets.
    pub events: Events<AsyncEventKind>,
    pub channels: Mutex<HashMap<CqId, Arc<ChannelInner>>>,
    pub stop: AtomicBool,
    pub device: Device,
    /// Where sent and received packets are written, if anywhere.
    pub capture: Option<Capture>,
    /// Faults injected into what is sent ([`crate::Device::with_faults`],
    /// `RXE_FAULTS`). Innermost lock, taken under `link`.
    pub faults: Option<Mutex<FaultInjector>>,
    /// Packets the engine produced, in order, waiting for the socket.
    /// Innermost lock: taken under `engine` or `link`, never the reverse.
    pub outq: Mutex<Vec<Transmit>>,
    /// Packets sent, whose buffers go back to the engine at the next
    /// collect (`Engine::recycle`). Innermost lock, like `outq`.
    pub spent: Mutex<Vec<Transmit>>,
    /// rdma_cm: the device's CM agent and ids. Lock order: after `engine`.
    pub cm: Mutex<super::cm::CmPort>,
    /// Ids that went, for the next pump of `cm` (innermost lock).
    pub cm_gone: Mutex<Vec<super::cm::Gone>>,
    /// How long, in nanoseconds, a thread waiting for completions keeps
    /// looking at the socket before it sleeps ([`crate::Context::set_poll_spin`]).
    pub spin_ns: AtomicU64,
    /// Posts in quick succession leave together ([`super::doorbell`]).
    pub doorbell: Doorbell,
    /// Listed for [`super::progress::send_deferred`].
    pub deferred: super::progress::Listed,
}

impl Shared {
    /// Collects what the engine produced after a call: packets to send
    /// (onto the ordered send queue), async events, completion-channel
    /// notifications, and wakes an application thread receiving on the
    /// socket (see [`super::progress`]) if the call delivered completions
    /// and was made by another thread (`by_receiver` false). Call with the
    /// engine locked, then [`Shared::flush`] after unlocking. True if it
    /// queued packets to send.
    pub fn collect(&self, engine: &mut Engine, by_receiver: bool) -> bool {
        self.collect_at(engine, by_receiver, Instant::now())
    }

    /// [`Shared::collect`] with the time the caller read for its round
    /// (one clock read a round, not two).
    fn collect_at(&self, engine: &mut Engine, by_receiver: bool, now: Instant) -> bool {
        super::cm::CmPort::pump(self, engine, now);
        for t in self.spent.lock().drain(..) {
            engine.recycle(t);
        }
        let delivered = engine.completions_delivered();
        if self.delivered.swap(delivered, Ordering::AcqRel) != delivered
            && !by_receiver
            && self.receiver.is_taken()
        {
            self.waiter.wake_receiver();
        }
        let queued = {
            let mut q = self.outq.lock();
            let before = q.len();
            while let Some(t) = engine.poll_transmit(now) {
                q.push(t);
            }
            q.len() > before
        };
        let mut new_events = Vec::new();
        while let Some(e) = engine.poll_event() {
            new_events.push(AsyncEventKind::from(e));
        }
        self.events.push_all(new_events);
        let channels = self.channels.lock();
        for (cq, ch) in channels.iter() {
            if engine.take_cq_notification(*cq) {
                ch.push(*cq);
            }
        }
        drop(channels);
        self.progress.notify_all();
        queued
    }

    /// Sends everything on the send queue, in the order the engine produced
    /// it. Packets are queued under the engine lock and sent by whichever
    /// thread next holds the socket, so two threads never put their batches
    /// on the wire out of order (which the peer would see as a sequence
    /// error and answer with a NAK and a go-back).
    pub fn flush(&self) {
        let mut link = self.link.lock();
        self.flush_locked(&mut link);
    }

    fn flush_locked(&self, link: &mut UdpTransport) {
        loop {
            let mut batch = {
                let mut q = self.outq.lock();
                if q.is_empty() {
                    // (Left in place, with its capacity.)
                    return;
                }
                self.doorbell.released();
                std::mem::take(&mut *q)
            };
            if let Some(f) = &self.faults {
                // Before the capture, so that it shows what went out.
                f.lock().apply(&mut batch);
            }
            // With a capture, what the kernel took is written as it went
            // out (IPv4 IDs and ICRCs of GSO segments).
            let send = |link: &mut UdpTransport, pkts: &[Transmit]| match &self.capture {
                Some(c) => {
                    link.send_batch_with(pkts, &mut |t: &Transmit, how: SentAs| c.sent(t, how))
                }
                None => link.send_batch(pkts),
            };
            let mut rest = &batch[..];
            while !rest.is_empty() {
                match send(link, rest) {
                    Ok(0) => {
                        // The socket buffer is full: wait a little for room.
                        let _ = link.wait_writable(Some(Duration::from_millis(1)));
                        match send(link, rest) {
                            Ok(n) if n > 0 => rest = &rest[n..],
                            // Still full: what is left is lost; the protocol retries.
                            _ => break,
                        }
                    }
                    Ok(n) => rest = &rest[n..],
                    // A packet the kernel refuses is a lost packet: skip it,
                    // but count it, and say so once per reason.
                    Err(e) => {
                        self.refused(&rest[0], &e);
                        rest = &rest[1..];
                    }
                }
            }
            self.spent.lock().append(&mut batch);
            // The emptied vector, with its capacity, becomes the queue
            // again if nothing was queued meanwhile: no allocation and
            // free per flush.
            let mut q = self.outq.lock();
            if q.is_empty() && q.capacity() < batch.capacity() {
                std::mem::swap(&mut *q, &mut batch);
            }
        }
    }

    /// Counts a packet the socket refused (called under `link`, which may
    /// take `engine`) and reports the first of each reason on standard
    /// error: a refused packet is otherwise only a retransmission and, in
    /// the end, a `RETRY_EXC_ERR` with no hint why.
    fn refused(&self, t: &Transmit, e: &std::io::Error) {
        let why = match rxe_net::udp::os_error_of(e) {
            Some(libc::EMSGSIZE) => SendRefusal::TooLong,
            Some(libc::ENETUNREACH | libc::EHOSTUNREACH | libc::EADDRNOTAVAIL) => {
                SendRefusal::Unreachable
            }
            _ => SendRefusal::Other,
        };
        if self.engine.lock().note_send_refused(why) == 1 {
            let hint = match why {
                SendRefusal::TooLong => match rxe_net::route::link_mtu(self.device.addr(), t.dst) {
                    Ok(link) => format!(
                        ": the link's MTU is {link} bytes; use a path MTU it carries (at \
                             most {})",
                        rxe_net::route::roce_mtu(link).map_or(0, |m| m.bytes())
                    ),
                    Err(_) => String::new(),
                },
                _ => String::new(),
            };
            eprintln!(
                "rxe-rs: device {} ({}): the host refused a {}-byte RoCE datagram to {} ({e}){hint}; \
                 counted as send_refused {why:?}, reported once",
                self.device.name(),
                self.device.addr(),
                t.payload.len(),
                t.dst,
            );
        }
    }

    /// Runs `f` on the locked engine, then sends what it produced, with
    /// whatever was queued before it (a call that produces no packets,
    /// such as a post_recv, leaves deferred packets queued: see "Deferred
    /// sending" in [`super::progress`]).
    pub fn with_engine<R>(&self, f: impl FnOnce(&mut Engine) -> R) -> R {
        let (r, to_send) = self.run_collected(f);
        if to_send {
            self.flush();
        }
        r
    }

    /// Runs `f` on the locked engine and collects what it produced; true
    /// if the send queue then holds packets this call should see sent
    /// (its own, or held posts').
    fn run_collected<R>(&self, f: impl FnOnce(&mut Engine) -> R) -> (R, bool) {
        let mut e = self.engine.lock();
        let r = f(&mut e);
        let queued = self.collect(&mut e, false);
        drop(e);
        (r, queued || self.doorbell.is_held())
    }

    /// [`Shared::with_engine`] for a post: its packets stay queued when it
    /// follows the previous post closely, to leave with the next posts'
    /// ([`super::doorbell`]).
    pub fn with_engine_post<R>(&self, f: impl FnOnce(&mut Engine) -> R) -> R {
        let since_last = self.doorbell.since_last(Instant::now());
        let (r, to_send) = self.run_collected(f);
        if to_send {
            let (n, bytes) = {
                let q = self.outq.lock();
                (q.len(), q.iter().map(|t| t.payload.len()).sum())
            };
            if super::doorbell::holds(self.doorbell.window(), since_last, n, bytes) {
                if self.doorbell.hold() {
                    // The progress thread sends the burst if the program
                    // does not call again.
                    self.waiter.wake();
                }
            } else {
                self.flush();
            }
        }
        self.doorbell.posted(Instant::now());
        r
    }

    /// Sends what held posts left queued ([`super::doorbell`]); the calls
    /// that poll or wait for completions make it first.
    pub fn flush_held(&self) {
        if self.doorbell.is_held() {
            self.flush();
        }
    }

    /// [`Shared::with_engine`] for a call that produces no packets
    /// (posting receives): it collects only if the call delivered a
    /// completion or raised an event (a receive posted to a QP in error
    /// completes at once). A collect after every receive posted (the CM's
    /// pump, the send queue's and the channels' locks, a wake-up of the
    /// waiters, nothing to find) was a clear share of a 64-byte SEND's
    /// receiving side (docs/performance.md). Packets deferred before it stay queued, as `with_engine`
    /// leaves them for a call that produces none.
    pub fn with_engine_quiet<R>(&self, f: impl FnOnce(&mut Engine) -> R) -> R {
        let mut e = self.engine.lock();
        let before = e.completions_delivered();
        let r = f(&mut e);
        if e.completions_delivered() != before || e.has_events() {
            let queued = self.collect(&mut e, false);
            drop(e);
            if queued {
                self.flush();
            }
        }
        r
    }

    /// One round of progress in the calling thread: takes what the socket
    /// holds (if `receive`), runs due timers, and wakes whoever waits for
    /// what that produced. `by_receiver`: the caller holds the [`Receiver`]
    /// token. `send_now`: send the packets the round produced before
    /// returning; otherwise they stay on the send queue for the next flush
    /// (see "Deferred sending" in [`super::progress`]). Returns how many
    /// datagrams it took in: a caller that took some looks again before it
    /// sleeps (see "Waiting" in [`super::progress`]).
    pub fn round(&self, receive: bool, by_receiver: bool, send_now: bool) -> usize {
        let mut link = self.link.lock();
        let now = Instant::now();
        let mut e = self.engine.lock();
        let got = if receive {
            self.receive(&mut link, &mut e, now)
        } else {
            0
        };
        if receive && got == 0 && by_receiver {
            // An application receiver's look at an empty socket (a spin
            // iteration) changed nothing; the progress thread keeps its
            // timers meanwhile.
            return 0;
        }
        run_due_timers(&mut e, now);
        self.collect_at(&mut e, by_receiver, now);
        drop(e);
        if send_now {
            self.flush_locked(&mut link);
        }
        got
    }

    /// A round of timers only, for the progress thread while an application
    /// thread receives: runs due timers and collects, without waiting for
    /// the socket. What is queued is sent only if the socket is free: a
    /// thread that holds it sends the whole queue before it lets go or
    /// sleeps (an application receiver flushes before it sleeps), so a
    /// timer round never stalls behind a long `sendmmsg` nor makes the
    /// application's next send wait behind its own.
    pub fn timers_round(&self) {
        let now = Instant::now();
        let mut e = self.engine.lock();
        run_due_timers(&mut e, now);
        self.collect_at(&mut e, false, now);
        drop(e);
        if !self.outq.lock().is_empty() {
            if let Some(mut link) = self.link.try_lock() {
                self.flush_locked(&mut link);
            }
        }
    }

    /// Takes in what the socket holds, without waiting, if no other thread
    /// is receiving or busy with the socket (see `MemoryRegion::read`).
    /// Returns how many datagrams it took in.
    pub fn poll_socket(&self) -> usize {
        if self.receiver.is_taken() {
            return 0;
        }
        let Some(mut link) = self.link.try_lock() else {
            return 0;
        };
        let now = Instant::now();
        let mut e = self.engine.lock();
        let got = self.receive(&mut link, &mut e, now);
        self.collect_at(&mut e, false, now);
        drop(e);
        self.flush_locked(&mut link);
        got
    }

    /// Feeds every datagram the socket holds to the engine; returns how many.
    fn receive(&self, link: &mut UdpTransport, e: &mut Engine, now: Instant) -> usize {
        let mut got = 0;
        loop {
            let n = link
                .recv_with(Some(Duration::ZERO), |d| {
                    if let Some(c) = &self.capture {
                        c.received(&d.meta, d.payload, d.ip_packet);
                    }
                    if rxe_core::mad::is_gsi_packet(d.payload) {
                        // QP 1: the connection manager's (crate::cm).
                        if d.meta.icrc != IcrcStatus::Bad {
                            self.cm.lock().received(d.meta.src, d.payload);
                        }
                        return;
                    }
                    e.handle_datagram(now, d.meta, d.payload)
                })
                .unwrap_or(0);
            got += n;
            if n < BATCH {
                return got;
            }
        }
    }

    /// [`Shared::poll_socket`] for a thread that polls a CQ in a loop: it
    /// takes the [`super::progress::Receiver`] token for the look (none if
    /// another thread holds it), so that while the application keeps
    /// polling, the progress thread leaves the socket to it and only runs
    /// the timers, as it does for a thread blocked in
    /// `CompletionQueue::wait`: on a machine with few cores, a busy poller
    /// and a progress thread woken by every packet would otherwise take the
    /// CPU from each other. Returns how many datagrams it took in.
    ///
    /// Sending is deferred as for a wait that ends ("Deferred sending" in
    /// [`super::progress`]): when the look delivered completions, what it
    /// produced (the ACK of a SEND it took in, typically) stays queued for
    /// the application's answer, which a polling program posts right after
    /// (UCX polls its receive CQ, then posts the reply); the next post, the
    /// next look, or the progress thread within about a millisecond sends
    /// it. A look that delivered nothing sends at once, and every look first
    /// sends what the one before it deferred, so at most one look's packets
    /// ever wait; the drop-in's other calls send them too
    /// ([`super::progress::send_deferred`]).
    pub fn poll_socket_as_receiver(self: &Arc<Self>) -> usize {
        let Some(_token) = self.receiver.try_take() else {
            return 0;
        };
        self.receiver.set_poller(true);
        let mut link = self.link.lock();
        self.flush_locked(&mut link);
        let now = Instant::now();
        let mut e = self.engine.lock();
        let before = e.completions_delivered();
        let got = self.receive(&mut link, &mut e, now);
        run_due_timers(&mut e, now);
        self.collect_at(&mut e, true, now);
        let delivered = e.completions_delivered() != before;
        drop(e);
        if !delivered {
            self.flush_locked(&mut link);
        } else if !self.outq.lock().is_empty() {
            super::progress::list_deferred(self);
        }
        got
    }

    /// Locks the engine (for waits on `progress`).
    pub fn lock(&self) -> MutexGuard<'_, Engine> {
        self.engine.lock()
    }
}

/// The device handle every object keeps alive; stops the progress thread
/// when the last one goes.
pub(crate) struct Inner {
    pub shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Packets whose sending was deferred (the last ACKs, typically)
        // go out before the device closes.
        self.shared.flush();
        self.shared.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// How many packets the device's RC QPs may have in flight together
/// (`EngineConfig::max_in_flight`): what half the receive buffer the kernel
/// granted holds at the port MTU, assuming the peer's is as large (on
/// loopback it is the same kernel). A root process gets 4 MiB (about 500
/// packets of 4 KiB); an unprivileged one `net.core.rmem_max` (208 KiB on
/// most distributions: about 50).
fn in_flight_budget(link: &UdpTransport, mtu: usize) -> u32 {
    // The kernel reports twice the size it grants, counting its bookkeeping.
    let granted = link.buffer_sizes().map_or(0, |(rcv, _)| rcv / 2);
    let per_packet = mtu + 128;
    ((granted / 2 / per_packet) as u32).clamp(16, 4096)
}

/// Runs the engine's timers that are due at `now`.
fn run_due_timers(e: &mut Engine, now: Instant) {
    if e.next_timeout().is_some_and(|t| t <= now) {
        e.handle_timeout(now);
    }
}

/// The longest [`crate::Context::set_poll_spin`] takes.
pub(crate) const MAX_SPIN: Duration = Duration::from_millis(10);

/// `RXE_SPIN_US=N`: the initial [`crate::Context::set_poll_spin`], in microseconds.
fn spin_from_env() -> Duration {
    crate::config::spin_us().map_or(Duration::ZERO, |us| Duration::from_micros(us).min(MAX_SPIN))
}

/// `RXE_POST_BATCH_US=N`: the initial [`crate::Context::set_post_batching`], in
/// microseconds. Unset: [`super::doorbell::DEFAULT_WINDOW`] on a loopback
/// device, none on others (see [`super::doorbell`], "Loopback only").
fn batch_from_env(addr: std::net::IpAddr) -> Duration {
    crate::config::post_batch_us().map_or(
        if addr.is_loopback() {
            super::doorbell::DEFAULT_WINDOW
        } else {
            Duration::ZERO
        },
        Duration::from_micros,
    )
}

/// Opens a soft device: binds its socket, builds its engine and CM port,
/// and starts its progress thread.
pub(crate) fn open(device: Device) -> Result<Arc<Inner>, Error> {
    let link =
        UdpTransport::bind_with(device.addr(), crate::config::recv_mode()).map_err(|source| {
            Error::Io {
                what: format!("open {}: bind {}:4791", device.name(), device.addr()),
                source,
            }
        })?;
    let capture = match device.capture_path() {
        Some(p) => Some(Capture::create(&p).map_err(|source| Error::Io {
            what: format!("create the capture file {}", p.display()),
            source,
        })?),
        None => None,
    };
    let faults = device.faults()?.map(|f| Mutex::new(FaultInjector::new(f)));
    let mut config = EngineConfig::new(device.addr(), rand::random());
    config.udp_src_port = Some(link.src_port());
    config.qpn_prefix = Some(link.qpn_prefix());
    // For testing fuzzers only: off unless the build has the
    // `test-fault` feature and RXE_TEST_FAULT is set.
    config.test_fault = crate::config::test_fault();
    let recv_mode = link.recv_mode();
    let waiter = link.waiter().map_err(|source| Error::Io {
        what: "duplicate the socket".into(),
        source,
    })?;
    config.port_mtu = device.active_mtu();
    config.max_in_flight = in_flight_budget(&link, config.port_mtu.bytes());
    let cm = super::cm::CmPort::new(
        device.addr(),
        link.src_port(),
        link.qpn_prefix(),
        device.node_guid(),
    );
    let shared = Arc::new(Shared {
        cm: Mutex::new(cm),
        cm_gone: Mutex::new(Vec::new()),
        engine: Mutex::new(Engine::new(config)),
        progress: Condvar::new(),
        link: Mutex::new(link),
        recv_mode,
        waiter,
        receiver: Receiver::new(),
        delivered: AtomicU64::new(0),
        events: Events::with([AsyncEventKind::PortActive]),
        channels: Mutex::new(HashMap::new()),
        stop: AtomicBool::new(false),
        capture,
        faults,
        outq: Mutex::new(Vec::new()),
        spent: Mutex::new(Vec::new()),
        spin_ns: AtomicU64::new(spin_from_env().as_nanos() as u64),
        doorbell: Doorbell::new(batch_from_env(device.addr())),
        deferred: Default::default(),
        device,
    });
    let s = shared.clone();
    let thread = std::thread::Builder::new()
        .name(format!("rxe-progress-{}", shared.device.name()))
        .spawn(move || super::progress::run(s))
        .map_err(|source| Error::Io {
            what: "spawn the progress thread".into(),
            source,
        })?;
    let inner = Arc::new(Inner {
        shared,
        thread: Some(thread),
    });
    inner.shared.cm.lock().set_device(Arc::downgrade(&inner));
    Ok(inner)
}
