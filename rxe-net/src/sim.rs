//! A simulated network of engines, driven in one thread on a virtual clock.
//!
//! [`SimNet`] owns several [`Engine`]s, moves the packets they send to the
//! engine that owns the destination address, and injects faults on the way,
//! each adjustable and all drawn from one seeded random generator: loss,
//! duplication, reordering (extra delay for some packets), bit corruption
//! (which the receiver's ICRC check catches) and a base delay with jitter.
//! The same seed gives the same run, packet for packet, so a failing case
//! replays exactly.
//!
//! Time only moves when nothing else can happen: the network delivers the
//! next packet or fires the next engine timer, whichever is due first.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rxe_core::engine::{Engine, Transmit};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

/// Fault knobs. Probabilities are per packet, in `0.0..=1.0`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Faults {
    /// Drop the packet.
    pub loss: f64,
    /// Deliver it twice.
    pub duplicate: f64,
    /// Hold it back by up to `reorder_window` so later packets overtake it.
    pub reorder: f64,
    /// Flip one random bit of the UDP payload.
    pub corrupt: f64,
    /// Base one-way delay.
    pub delay: Duration,
    /// Uniform extra delay in `0..jitter`.
    pub jitter: Duration,
    /// Largest extra delay of a reordered packet.
    pub reorder_window: Duration,
}

impl Faults {
    /// A perfect link with 10 µs delay.
    pub fn none() -> Self {
        Faults {
            loss: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            corrupt: 0.0,
            delay: Duration::from_micros(10),
            jitter: Duration::ZERO,
            reorder_window: Duration::from_micros(100),
        }
    }
}

impl Default for Faults {
    fn default() -> Self {
        Self::none()
    }
}

/// What the network did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SimStats {
    /// Packets the engines sent.
    pub sent: u64,
    /// Packets delivered (duplicates included).
    pub delivered: u64,
    /// Packets dropped by the loss knob.
    pub lost: u64,
    /// Extra copies made.
    pub duplicated: u64,
    /// Packets held back.
    pub reordered: u64,
    /// Packets with a flipped bit.
    pub corrupted: u64,
    /// Packets to an address no engine owns.
    pub unroutable: u64,
}

#[derive(Debug)]
struct InFlight {
    at: Instant,
    seq: u64,
    to: usize,
    t: Transmit,
}

impl PartialEq for InFlight {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for InFlight {}
impl PartialOrd for InFlight {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for InFlight {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(o.at, o.seq))
    }
}

/// A hook that sees every packet sent, with the virtual time since the start.
pub type Tap = Box<dyn FnMut(Duration, &Transmit) + Send>;

/// What a [`PacketRule`] does with a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// On to the link's random faults, as without the rule.
    Pass,
    /// Lost.
    Lose,
    /// Delivered this much later than the link's delay (and not otherwise
    /// faulted): later packets overtake it.
    Delay(Duration),
}

/// A scenario's chosen faults, on top of the random ones of [`Faults`]:
/// what happens to each packet sent.
pub type PacketRule = Box<dyn FnMut(&Transmit) -> Fate + Send>;

/// Engines joined by a faulty network, on a virtual clock.
pub struct SimNet {
    /// The engines, in the order they were added.
    pub engines: Vec<Engine>,
    /// Current fault settings (change them at any time).
    pub faults: Faults,
    /// What happened so far.
    pub stats: SimStats,
    now: Instant,
    start: Instant,
    rng: SmallRng,
    queue: BinaryHeap<Reverse<InFlight>>,
    seq: u64,
    /// If set, every packet handed to the network is also given to this hook.
    tap: Option<Tap>,
    /// If set, says what happens to each packet ([`SimNet::set_rule`]).
    rule: Option<PacketRule>,
}

impl std::fmt::Debug for SimNet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimNet")
            .field("engines", &self.engines.len())
            .field("faults", &self.faults)
            .field("stats", &self.stats)
            .field("elapsed", &self.elapsed())
            .field("in_flight", &self.queue.len())
            .finish()
    }
}

impl SimNet {
    /// An empty network with a seed for its faults.
    pub fn new(seed: u64, faults: Faults) -> Self {
        let now = Instant::now();
        SimNet {
            engines: Vec::new(),
            faults,
            stats: SimStats::default(),
            now,
            start: now,
            rng: SmallRng::seed_from_u64(seed),
            queue: BinaryHeap::new(),
            seq: 0,
            tap: None,
            rule: None,
        }
    }

    /// Adds an engine; returns its index.
    pub fn add(&mut self, engine: Engine) -> usize {
        self.engines.push(engine);
        self.engines.len() - 1
    }

    /// The virtual time now.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// Virtual time since the start.
    pub fn elapsed(&self) -> Duration {
        self.now - self.start
    }

    /// Sees every packet sent (for captures and packet-level assertions).
    pub fn set_tap(&mut self, tap: impl FnMut(Duration, &Transmit) + Send + 'static) {
        self.tap = Some(Box::new(tap));
    }

    /// Gives every packet sent from now on (after the tap sees it) the
    /// [`Fate`] `rule` picks, until [`SimNet::clear_rule`].
    pub fn set_rule(&mut self, rule: impl FnMut(&Transmit) -> Fate + Send + 'static) {
        self.rule = Some(Box::new(rule));
    }

    /// Ends [`SimNet::set_rule`].
    pub fn clear_rule(&mut self) {
        self.rule = None;
    }

    fn route(&self, t: &Transmit) -> Option<usize> {
        self.engines.iter().position(|e| e.is_local(t.dst))
    }

    fn schedule(&mut self, to: usize, t: Transmit, extra: Duration) {
        let f = self.faults;
        let jitter = if f.jitter.is_zero() {
            Duration::ZERO
        } else {
            f.jitter.mul_f64(self.rng.gen::<f64>())
        };
        self.seq += 1;
        let at = self.now + f.delay + jitter + extra;
        self.queue.push(Reverse(InFlight {
            at,
            seq: self.seq,
            to,
            t,
        }));
    }

    /// Collects what every engine wants to send and puts it on the wire.
    pub fn flush(&mut self) {
        for i in 0..self.engines.len() {
            while let Some(t) = self.engines[i].poll_transmit(self.now) {
                self.stats.sent += 1;
                if let Some(tap) = self.tap.as_mut() {
                    tap(self.now - self.start, &t);
                }
                match self.rule.as_mut().map_or(Fate::Pass, |rule| rule(&t)) {
                    Fate::Pass => {}
                    Fate::Lose => {
                        self.stats.lost += 1;
                        continue;
                    }
                    Fate::Delay(d) => {
                        if let Some(to) = self.route(&t) {
                            self.stats.reordered += 1;
                            self.schedule(to, t, d);
                        } else {
                            self.stats.unroutable += 1;
                        }
                        continue;
                    }
                }
                if t.dst.is_multicast() {
                    // IP multicast: a copy to every engine, the sender's
                    // own included (as with IP_MULTICAST_LOOP); each
                    // engine's groups decide who takes it.
                    for to in 0..self.engines.len() {
                        self.put_on_wire(to, t.clone());
                    }
                    continue;
                }
                let Some(to) = self.route(&t) else {
                    self.stats.unroutable += 1;
                    continue;
                };
                self.put_on_wire(to, t);
            }
        }
    }

    /// Sends one packet to engine `to`, through the link's faults.
    fn put_on_wire(&mut self, to: usize, mut t: Transmit) {
        let f = self.faults;
        if self.rng.gen_bool(f.loss.clamp(0.0, 1.0)) {
            self.stats.lost += 1;
            return;
        }
        if self.rng.gen_bool(f.corrupt.clamp(0.0, 1.0)) && !t.payload.is_empty() {
            let bit = self.rng.gen_range(0..t.payload.len() * 8);
            t.payload[bit / 8] ^= 1 << (bit % 8);
            self.stats.corrupted += 1;
        }
        let mut extra = Duration::ZERO;
        if self.rng.gen_bool(f.reorder.clamp(0.0, 1.0)) {
            extra = f.reorder_window.mul_f64(self.rng.gen::<f64>());
            self.stats.reordered += 1;
        }
        if self.rng.gen_bool(f.duplicate.clamp(0.0, 1.0)) {
            self.stats.duplicated += 1;
            self.schedule(to, t.clone(), Duration::ZERO);
        }
        self.schedule(to, t, extra);
    }

    fn deliver(&mut self, p: InFlight) {
        self.stats.delivered += 1;
        let t = p.t;
        let meta = t.received();
        self.engines[p.to].handle_datagram(self.now, meta, &t.payload);
    }

    /// Does the next thing: flushes sends, then delivers the next packet or
    /// fires the next timer, moving the clock forward. Returns false when
    /// nothing is left to do at all.
    pub fn step(&mut self) -> bool {
        self.flush();
        let next_packet = self.queue.peek().map(|Reverse(p)| p.at);
        let next_timer = self.engines.iter().filter_map(|e| e.next_timeout()).min();
        match (next_packet, next_timer) {
            (None, None) => false,
            (Some(p), t) if t.is_none_or(|t| p <= t) => {
                self.now = self.now.max(p);
                let Reverse(pkt) = self.queue.pop().expect("peeked");
                self.deliver(pkt);
                true
            }
            (_, Some(t)) => {
                self.now = self.now.max(t);
                for e in &mut self.engines {
                    if e.next_timeout().is_some_and(|x| x <= self.now) {
                        e.handle_timeout(self.now);
                    }
                }
                true
            }
            (Some(_), None) => unreachable!("covered by the guard"),
        }
    }

    /// Steps until `done` holds, nothing is left to do, or `limit` of
    /// virtual time passes. Returns whether `done` held.
    pub fn run_until(
        &mut self,
        limit: Duration,
        mut done: impl FnMut(&mut SimNet) -> bool,
    ) -> bool {
        let deadline = self.now + limit;
        loop {
            if done(self) {
                return true;
            }
            if self.now > deadline || !self.step() {
                return done(self);
            }
        }
    }

    /// Steps until nothing is left to do or `limit` passes.
    pub fn run(&mut self, limit: Duration) {
        self.run_until(limit, |_| false);
    }
}
