//! Model tests of the verbs layer's threading, under loom: every
//! interleaving of the threads (up to a bound on preemptions, 3 unless
//! `LOOM_MAX_PREEMPTIONS` says otherwise; `tests/loom.sh` runs them with
//! no bound these small models reach, about 2.5 minutes of CPU), with
//! every lock, wait, notify and atomic access a scheduling point.
//!
//! The modules whose correctness is a matter of threads only are compiled
//! here as they are, against a `sync` module that maps their primitives to
//! loom's (`model/sync.rs`): the completion channel's queue (also the
//! rdma_cm event channel's) and the async events' queue (`src/events.rs`),
//! the receiver token (`src/soft/progress/receiver.rs`), and the C library's
//! event counts (`ibverbs/src/event_count.rs`) and event descriptors
//! (`ibverbs/src/event_queue.rs`, on a modelled pipe, [`ModelFd`]). Where
//! a protocol is spread over code that also talks to the socket, the
//! engine or other objects (`Shared::collect`, `CompletionQueue::wait` and
//! `poll_progress`, `ibv_get_cq_event` and `ibv_destroy_cq`, the rdma_cm
//! bridge against `rdma_destroy_id`), the test repeats its steps in the
//! same order around the real modules, the engine reduced to a CQ under a
//! lock; each such test names the code it follows, which must be kept in
//! step with it.
//!
//! docs/reliability.md ("Concurrency") lists what each test checks and the
//! bug put in on purpose that showed it can fail.

#![allow(dead_code)]

#[path = "model/sync.rs"]
mod sync;

#[path = "../src/events.rs"]
mod events;

/// What `src/soft/progress/receiver.rs` takes from its parent module.
mod soft {
    pub mod progress {
        pub const HANDOFF: std::time::Duration = std::time::Duration::from_micros(500);
    }
}

#[path = "../src/soft/progress/receiver.rs"]
mod receiver;

#[path = "../ibverbs/src/event_count.rs"]
mod event_count;

#[path = "../ibverbs/src/event_queue.rs"]
mod event_queue;

use event_count::EventCount;
use event_queue::{EventFd, EventQueue};
use events::Events;
use loom::cell::UnsafeCell;
use loom::sync::atomic::AtomicUsize;
use loom::sync::Arc;
use loom::thread;
use receiver::Receiver;
use std::collections::VecDeque;
use std::time::{Duration, Instant};
use sync::{AtomicBool, AtomicU64, Condvar, Mutex, Ordering};

/// Runs `f` under loom, every interleaving up to the preemption bound.
fn check(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(3);
    }
    b.check(f);
}

/// A deadline loom never reaches: a wait for it ends only when notified.
fn never() -> Instant {
    Instant::now() + Duration::from_secs(3600)
}

/// A completion channel (or an rdma_cm event channel, the same queue):
/// events pushed by two threads reach a thread blocked in `pop`, each
/// once; no wake-up is lost (loom reports a thread that waits for ever as
/// a deadlock).
#[test]
fn channel_event_wakes_the_waiter() {
    check(|| {
        let ch = Arc::new(Events::<u32>::new());
        let producers: Vec<_> = [1, 2]
            .into_iter()
            .map(|e| {
                let ch = ch.clone();
                thread::spawn(move || ch.push(e))
            })
            .collect();
        let mut got = vec![ch.pop(never()).unwrap(), ch.pop(never()).unwrap()];
        producers.into_iter().for_each(|p| p.join().unwrap());
        got.sort();
        assert_eq!(got, [1, 2]);
        assert_eq!(ch.len(), 0);
    });
}

/// Events raised while the C library sets a channel's sink
/// (`CompletionChannel::set_notify` against `Shared::collect`): the sink
/// gets every event, in order, each once, and none stays queued.
#[test]
fn channel_sink_misses_no_event() {
    check(|| {
        let ch = Arc::new(Events::<u32>::new());
        ch.push(0);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let raiser = {
            let ch = ch.clone();
            thread::spawn(move || {
                ch.push(1);
                ch.push(2);
            })
        };
        let s = seen.clone();
        assert!(ch.set_sink(Box::new(move |e| s.lock().push(e))));
        raiser.join().unwrap();
        assert_eq!(*seen.lock(), [0, 1, 2]);
        assert_eq!(ch.len(), 0);
    });
}

/// A completion channel with a CQ destroyed while its events are taken:
/// every event is taken once, or withdrawn once, or still queued; none is
/// both taken and withdrawn.
#[test]
fn channel_forget_and_pop_take_each_event_once() {
    check(|| {
        let ch = Arc::new(Events::<u32>::new());
        let producer = {
            let ch = ch.clone();
            thread::spawn(move || {
                ch.push(1);
                ch.push(2);
            })
        };
        let destroyer = {
            let ch = ch.clone();
            thread::spawn(move || ch.forget(|e| *e == 1))
        };
        let now = Instant::now();
        let taken: Vec<u32> = std::iter::from_fn(|| ch.pop(now)).collect();
        producer.join().unwrap();
        let forgotten = destroyer.join().unwrap();
        let left: Vec<u32> = std::iter::from_fn(|| ch.pop(now)).collect();
        let ones = taken.iter().chain(&left).filter(|e| **e == 1).count() + forgotten;
        let twos = taken.iter().chain(&left).filter(|e| **e == 2).count();
        assert_eq!(
            (ones, twos),
            (1, 1),
            "taken {taken:?} left {left:?} forgotten {forgotten}"
        );
    });
}

/// Async events raised while the C library sets its hook
/// (`Context::set_async_notify` against `Shared::collect`): the hook gets
/// every event, the one queued at open first, each once, in order, and
/// none stays behind in the queue.
#[test]
fn async_hook_misses_no_event() {
    check(|| {
        let ev = Arc::new(Events::<u32>::with([0]));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let raiser = {
            let ev = ev.clone();
            thread::spawn(move || {
                ev.push_all([1]);
                ev.push_all([2]);
            })
        };
        let s = seen.clone();
        assert!(ev.set_sink(Box::new(move |e| s.lock().push(e))));
        raiser.join().unwrap();
        assert_eq!(*seen.lock(), [0, 1, 2]);
        assert_eq!(ev.pop(Instant::now()), None);
    });
}

/// The receiver token: two threads try to take it (as
/// `CompletionQueue::wait` and `poll_socket_as_receiver` do); at most one
/// holds it at a time, and what one holder did is visible to the next (the
/// socket it receives on is modelled as a cell loom checks for unordered
/// access).
#[test]
fn receiver_token_is_exclusive() {
    check(|| {
        let r = Arc::new(Receiver::new());
        let socket = Arc::new(UnsafeCell::new(0u32));
        let holders = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let (r, socket, holders) = (r.clone(), socket.clone(), holders.clone());
                thread::spawn(move || {
                    let Some(token) = r.try_take() else {
                        return false;
                    };
                    assert_eq!(holders.fetch_add(1, Ordering::Relaxed), 0, "two holders");
                    // SAFETY: loom checks that no other thread touches the
                    // cell at the same time (that is what the test asserts).
                    socket.with_mut(|s| unsafe { *s += 1 });
                    assert!(r.is_taken());
                    holders.fetch_sub(1, Ordering::Relaxed);
                    drop(token);
                    true
                })
            })
            .collect();
        let took = threads
            .into_iter()
            .filter_map(|t| t.join().unwrap().then_some(()))
            .count();
        assert!(took >= 1);
        // SAFETY: both threads are joined.
        assert_eq!(socket.with(|s| unsafe { *s }), took as u32);
        assert!(!r.is_taken());
        assert!(r.try_take().is_some());
    });
}

/// The CQ and the counts `Shared::collect` keeps, reduced to what the
/// protocols below need.
struct Engine {
    /// Completions in the CQ.
    cq: VecDeque<u64>,
    /// `Engine::completions_delivered`.
    delivered: u64,
    /// The CQ is armed for a channel event (`req_notify`).
    armed: bool,
}

/// A soft device reduced to its threading: the engine lock and its
/// condition variable, `Shared::delivered`, the receiver token, the
/// socket waiter's wake-up (an eventfd: a wake-up is kept until a wait
/// uses it) and one CQ's channel.
struct Device {
    engine: Mutex<Engine>,
    progress: Condvar,
    delivered: AtomicU64,
    receiver: Receiver,
    wake: Mutex<bool>,
    wake_cond: Condvar,
    channel: Events<u32>,
    /// The CQ's `empty_at` (`CompletionQueue::poll_progress`).
    empty_at: AtomicU64,
}

impl Device {
    fn new(armed: bool) -> Self {
        Device {
            engine: Mutex::new(Engine {
                cq: VecDeque::new(),
                delivered: 0,
                armed,
            }),
            progress: Condvar::new(),
            delivered: AtomicU64::new(0),
            receiver: Receiver::new(),
            wake: Mutex::new(false),
            wake_cond: Condvar::new(),
            channel: Events::new(),
            empty_at: AtomicU64::new(u64::MAX),
        }
    }

    /// `Shared::collect`, in its order: the delivered count, the
    /// receiver's wake-up, channel notifications, the condition variable.
    fn collect(&self, e: &mut Engine, by_receiver: bool) {
        if self.delivered.swap(e.delivered, Ordering::AcqRel) != e.delivered
            && !by_receiver
            && self.receiver.is_taken()
        {
            *self.wake.lock() = true;
            self.wake_cond.notify_all();
        }
        if e.armed && !e.cq.is_empty() {
            e.armed = false;
            self.channel.push(1);
        }
        self.progress.notify_all();
    }

    /// Another thread's call that delivers a completion (a post to a QP
    /// in error, a modify to the error state, a timer): `with_engine`.
    fn deliver(&self, wr_id: u64) {
        let mut e = self.engine.lock();
        e.cq.push_back(wr_id);
        e.delivered += 1;
        self.collect(&mut e, false);
    }

    /// `Waiter::wait` on a socket that receives nothing: returns when
    /// woken, using the wake-up up.
    fn sleep_on_socket(&self) {
        let mut w = self.wake.lock();
        while !*w {
            self.wake_cond.wait(&mut w);
        }
        *w = false;
    }

    fn poll(&self) -> Option<u64> {
        self.engine.lock().cq.pop_front()
    }

    /// `CompletionQueue::wait` for one completion, with no timeout.
    fn wait(&self) -> u64 {
        loop {
            if let Some(c) = self.poll() {
                return c;
            }
            if let Some(token) = self.receiver.try_take() {
                self.receiver.set_poller(false);
                let c = loop {
                    // The look before sleeping.
                    if let Some(c) = self.poll() {
                        break c;
                    }
                    self.sleep_on_socket();
                    // `Shared::round(false, true, false)`: nothing
                    // received; timers and collect.
                    let mut e = self.engine.lock();
                    self.collect(&mut e, true);
                };
                drop(token);
                self.progress.notify_all();
                return c;
            }
            let mut e = self.engine.lock();
            if let Some(c) = e.cq.pop_front() {
                return c;
            }
            self.progress.wait(&mut e);
        }
    }

    /// `Shared::poll_socket_as_receiver` on a socket with nothing.
    fn poll_socket_as_receiver(&self) {
        let Some(_token) = self.receiver.try_take() else {
            return;
        };
        self.receiver.set_poller(true);
        let mut e = self.engine.lock();
        self.collect(&mut e, true);
    }

    /// `CompletionQueue::poll_progress` for one completion, on a socket
    /// with nothing.
    fn poll_progress(&self) -> Option<u64> {
        let seen = self.delivered.load(Ordering::Acquire);
        if self.empty_at.load(Ordering::Relaxed) != seen {
            if let Some(c) = self.poll() {
                return Some(c);
            }
            self.empty_at.store(seen, Ordering::Relaxed);
        }
        None
    }
}

/// A thread waiting for a completion (`CompletionQueue::wait`) while
/// another thread delivers it and a third polls the socket as receiver:
/// the waiter always gets it. Before the look between taking the token
/// and sleeping, a completion delivered in between woke nobody and the
/// waiter slept until the next packet or its timeout (loom: deadlock).
#[test]
fn wait_wakes_for_a_completion_another_thread_delivers() {
    check(|| {
        let d = Arc::new(Device::new(false));
        let deliverer = {
            let d = d.clone();
            thread::spawn(move || d.deliver(7))
        };
        let poller = {
            let d = d.clone();
            thread::spawn(move || d.poll_socket_as_receiver())
        };
        assert_eq!(d.wait(), 7);
        deliverer.join().unwrap();
        poller.join().unwrap();
    });
}

/// A thread that learns from the completion channel that its CQ has a
/// completion, then polls it the cheap way (`poll_progress`, which skips
/// the engine lock while `Shared::delivered` has not moved), while
/// another thread polls the same CQ: one of the two gets the completion.
#[test]
fn channel_event_then_cheap_poll_finds_the_completion() {
    check(|| {
        let d = Arc::new(Device::new(true));
        let deliverer = {
            let d = d.clone();
            thread::spawn(move || d.deliver(7))
        };
        let other = {
            let d = d.clone();
            thread::spawn(move || d.poll_progress())
        };
        assert_eq!(d.channel.pop(never()), Some(1));
        let mine = d.poll_progress();
        let theirs = other.join().unwrap();
        deliverer.join().unwrap();
        assert_eq!(
            mine.into_iter().chain(theirs).collect::<Vec<_>>(),
            [7],
            "mine {mine:?} theirs {theirs:?}"
        );
    });
}

/// A descriptor of the C library ([`EventFd`]): a pipe's byte count.
/// Reads and writes of a pipe are atomic, so one lock stands for the
/// kernel's.
struct ModelFd {
    bytes: Mutex<usize>,
    cond: Condvar,
    /// The program set O_NONBLOCK: a read with no byte fails (EAGAIN).
    nonblocking: bool,
}

const EAGAIN: i32 = 11;

impl ModelFd {
    fn new(nonblocking: bool) -> Self {
        ModelFd {
            bytes: Mutex::new(0),
            cond: Condvar::new(),
            nonblocking,
        }
    }
    fn bytes(&self) -> usize {
        *self.bytes.lock()
    }
}

impl EventFd for ModelFd {
    fn signal(&self) {
        *self.bytes.lock() += 1;
        self.cond.notify_all();
    }
    fn drain(&self, n: usize) -> usize {
        let mut b = self.bytes.lock();
        let d = n.min(*b);
        *b -= d;
        d
    }
    fn take(&self) -> Result<(), i32> {
        let mut b = self.bytes.lock();
        while *b == 0 {
            if self.nonblocking {
                return Err(EAGAIN);
            }
            self.cond.wait(&mut b);
        }
        *b -= 1;
        Ok(())
    }
}

/// The C library's event descriptors (`ibverbs/src/event_queue.rs`: a
/// completion channel's fd, `async_fd`, an rdma_cm channel's fd): events
/// for two objects pushed while a thread reads the descriptor
/// (`ibv_get_cq_event`; blocking until an event comes, and once more with
/// the descriptor non-blocking, taking an event only if there is one) and
/// another withdraws the first object's events (its destroy). Each event
/// is taken, withdrawn or left exactly once, and at the end the
/// descriptor holds exactly one byte per event left: `poll` never says
/// readable with nothing queued (the read that followed would block).
#[test]
fn event_fd_shows_exactly_the_queued_events() {
    for nonblocking in [false, true] {
        check(move || {
            let q = Arc::new(EventQueue::<u32, ModelFd>::new(ModelFd::new(nonblocking)));
            let producer = {
                let q = q.clone();
                thread::spawn(move || {
                    q.push(1);
                    q.push(2);
                })
            };
            let destroyer = {
                let q = q.clone();
                thread::spawn(move || q.withdraw(|e| *e == 1).len())
            };
            // Blocking, it waits until an event is there: 2 is never
            // withdrawn.
            let taken = q.take(Some).ok();
            assert!(nonblocking || taken.is_some());
            producer.join().unwrap();
            let withdrawn = destroyer.join().unwrap();
            let left = q.len();
            assert_eq!(
                q.fd().bytes(),
                left,
                "bytes on the descriptor for {left} events left \
                 (took {taken:?}, {withdrawn} withdrawn)"
            );
            assert_eq!(
                usize::from(taken.is_some()) + withdrawn + left,
                2,
                "took {taken:?}, {withdrawn} withdrawn, {left} left"
            );
        });
    }
}

/// `ibv_get_cq_event` against `ibv_destroy_cq` (rxe-verbs/ibverbs/src/cq.rs):
/// a CQ with an event queued on its channel is destroyed while another
/// thread takes the event and acknowledges it. Destroy must not free the
/// CQ while an event it handed out is not acknowledged, and the taker must
/// never count an event on a freed CQ (in C, a use after free); the
/// channel's descriptor ends with no byte for an event not there.
#[test]
fn destroy_cq_waits_for_the_event_taken() {
    struct Cq {
        comp_events: EventCount,
        freed: AtomicBool,
    }
    check(|| {
        // The program set the channel's fd non-blocking.
        let ch = Arc::new(EventQueue::<u32, ModelFd>::new(ModelFd::new(true)));
        ch.push(1);
        let cq = Arc::new(Cq {
            comp_events: EventCount::default(),
            freed: AtomicBool::new(false),
        });
        // The channel's CQs by number (`Channel::cqs`).
        let cqs = Arc::new(Mutex::new(Some(cq.clone())));
        let taker = {
            let (ch, cqs) = (ch.clone(), cqs.clone());
            thread::spawn(move || {
                // ibv_get_cq_event: the byte and the CQ's number.
                let Ok(1) = ch.take(Some) else {
                    return;
                };
                let on_channel = cqs.lock();
                let Some(c) = on_channel.clone() else {
                    return;
                };
                assert!(
                    !c.freed.load(Ordering::SeqCst),
                    "event counted on a freed CQ"
                );
                c.comp_events.reported(1);
                drop(on_channel);
                // The program looks at its CQ, then acknowledges.
                assert!(!c.freed.load(Ordering::SeqCst), "CQ freed before the ack");
                c.comp_events.acked(1);
            })
        };
        // ibv_destroy_cq.
        let c = cqs.lock().take().unwrap();
        c.comp_events.wait_all_acked();
        c.freed.store(true, Ordering::SeqCst);
        ch.withdraw(|e| *e == 1);
        taker.join().unwrap();
        assert_eq!(ch.fd().bytes(), ch.len(), "a byte with no event behind it");
    });
}

/// An rdma_cm listener destroyed (`rdma_destroy_id`, ibverbs/src/rdmacm/id.rs)
/// while the library's bridge thread turns a connection request for it
/// into a CONNECT_REQUEST event (`dispatch` and `connect_request`,
/// ibverbs/src/rdmacm/connect.rs) and a program thread takes events from
/// the channel (`rdma_get_cm_event`, non-blocking) and acknowledges them.
/// The bridge never uses a freed listener; no event naming the listener
/// is handed out after it is freed or left queued; the new id of the
/// request is either handed to the program or destroyed (its connection
/// rejected), never both nor lost; the descriptor shows what is queued.
#[test]
fn cm_destroy_listener_during_a_connect_request() {
    /// A CONNECT_REQUEST: the new id, the listener.
    #[derive(Debug)]
    struct Ev {
        id: u32,
        listen: u32,
    }
    struct Listener {
        /// Events about it taken and not acknowledged (`CmId::events`).
        events: EventCount,
        /// Its state's lock (`CmId::st`).
        st: Mutex<()>,
        freed: AtomicBool,
    }
    check(|| {
        let ch = Arc::new(EventQueue::<Ev, ModelFd>::new(ModelFd::new(true)));
        let l = Arc::new(Listener {
            events: EventCount::default(),
            st: Mutex::new(()),
            freed: AtomicBool::new(false),
        });
        // `live::is(Kind::CmId, listener)`.
        let live = Arc::new(Mutex::new(true));
        // The bridge's table of ids (`Bridge::ids`).
        let ids = Arc::new(Mutex::new(()));
        // The new id: made by the bridge, then handed to the program or
        // destroyed.
        let made = Arc::new(AtomicUsize::new(0));
        let rejected = Arc::new(AtomicUsize::new(0));
        let bridge = {
            let (ch, l, live, ids, made, rejected) = (
                ch.clone(),
                l.clone(),
                live.clone(),
                ids.clone(),
                made.clone(),
                rejected.clone(),
            );
            thread::spawn(move || {
                // dispatch: the listener found live under the table's lock,
                // and held (counted) before that lock is let go.
                let table = ids.lock();
                if !*live.lock() {
                    return;
                }
                l.events.reported(1);
                drop(table);
                // connect_request.
                assert!(
                    !l.freed.load(Ordering::SeqCst),
                    "the bridge uses a freed listener"
                );
                made.fetch_add(1, Ordering::SeqCst);
                let st = l.st.lock();
                if *live.lock() {
                    ch.push(Ev { id: 2, listen: 1 });
                } else {
                    rejected.fetch_add(1, Ordering::SeqCst);
                }
                drop(st);
                l.events.acked(1);
            })
        };
        let program = {
            let (ch, l) = (ch.clone(), l.clone());
            thread::spawn(move || {
                // rdma_get_cm_event: counted on the listener under the
                // queue's lock.
                let Ok(e) = ch.take(|e| {
                    l.events.reported(1);
                    Some(e)
                }) else {
                    return 0;
                };
                assert!(
                    !l.freed.load(Ordering::SeqCst),
                    "an event about a freed listener handed out"
                );
                assert_eq!((e.id, e.listen), (2, 1));
                // The program reads event->listen_id, then acknowledges.
                assert!(
                    !l.freed.load(Ordering::SeqCst),
                    "listener freed before the ack"
                );
                l.events.acked(1);
                1
            })
        };
        // rdma_destroy_id(listener).
        *live.lock() = false;
        drop(ids.lock());
        drop(l.st.lock());
        for e in ch.withdraw(|e| e.id == 1 || e.listen == 1) {
            if e.listen == 1 {
                rejected.fetch_add(1, Ordering::SeqCst);
            }
        }
        l.events.wait_all_acked();
        l.freed.store(true, Ordering::SeqCst);
        bridge.join().unwrap();
        let took = program.join().unwrap();
        let (made, rejected) = (made.load(Ordering::SeqCst), rejected.load(Ordering::SeqCst));
        assert_eq!(
            made,
            took + rejected,
            "new ids {made}, taken {took}, destroyed {rejected}"
        );
        assert_eq!(ch.len(), 0, "an event left about a freed listener");
        assert_eq!(ch.fd().bytes(), 0, "a byte with no event behind it");
    });
}
