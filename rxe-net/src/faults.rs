//! Faults injected into real traffic: [`FaultSpec`] and [`FaultInjector`].
//!
//! The simulator ([`crate::sim`]) injects loss, duplication, reordering and
//! corruption on a virtual clock. This module does the same to the packets a
//! real device sends over its UDP socket, so that a program (an `rxe` tool,
//! a Rust program on `rxe-verbs`, or an unmodified C program on the drop-in
//! libibverbs) can be tried on loopback under a lossy network, without root
//! and without `tc netem`. `rxe-verbs` reads a spec from the `RXE_FAULTS`
//! environment variable (or `Device::with_faults`) and runs every batch the
//! engine hands to the socket through an injector just before `sendmmsg`.
//!
//! The injector is sans-IO: it takes the batch about to be sent and changes
//! it in place.
//!
//! * **loss**: the packet is removed.
//! * **duplicate**: a copy follows it.
//! * **reorder**: the packet is held back and sent right after the next one
//!   of the same batch (the last packet of a batch is never held: nothing
//!   could be sure to follow it, and a held packet must not get stuck).
//! * **corrupt**: one random bit of the UDP payload (BTH through ICRC) is
//!   flipped, which the receiver's ICRC check is there to catch.
//!
//! Each packet meets the faults in that order, each with its own
//! probability; a packet that is lost meets no other. The same seed and the
//! same sequence of batches give the same faults.
//!
//! ```
//! use rxe_net::faults::FaultSpec;
//! let spec: FaultSpec = "loss=5%,dup=0.01,reorder=1%,corrupt=0.001,seed=7".parse().unwrap();
//! assert_eq!(spec.loss, 0.05);
//! assert_eq!(spec.seed, Some(7));
//! assert!("loss=2".parse::<FaultSpec>().is_err());
//! ```

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rxe_core::engine::Transmit;
use std::fmt;
use std::str::FromStr;

/// Which faults to inject, each a probability per packet in `0.0..=1.0`.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct FaultSpec {
    /// Drop the packet.
    pub loss: f64,
    /// Send it twice.
    pub duplicate: f64,
    /// Send it after the next packet.
    pub reorder: f64,
    /// Flip one bit of its UDP payload.
    pub corrupt: f64,
    /// The random generator's seed; `None` draws one.
    pub seed: Option<u64>,
}

impl FaultSpec {
    /// True if no fault can happen.
    pub fn is_none(&self) -> bool {
        self.loss == 0.0 && self.duplicate == 0.0 && self.reorder == 0.0 && self.corrupt == 0.0
    }
}

/// A spec that does not parse: which item and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("fault spec {item:?}: {why} (expected e.g. \"loss=5%,dup=0.01,reorder=1%,corrupt=0.1%,seed=7\")")]
pub struct FaultSpecError {
    /// The `key=value` item at fault.
    pub item: String,
    /// What is wrong with it.
    pub why: &'static str,
}

impl FromStr for FaultSpec {
    type Err = FaultSpecError;

    /// Parses `key=value` items separated by commas. Keys: `loss`, `dup`
    /// (or `duplicate`), `reorder`, `corrupt`, `seed`. A probability is a
    /// fraction (`0.05`) or a percentage (`5%`). An empty string is no fault.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut spec = FaultSpec::default();
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let err = |why| FaultSpecError {
                item: item.to_string(),
                why,
            };
            let (key, value) = item.split_once('=').ok_or_else(|| err("no '='"))?;
            let value = value.trim();
            if key.trim() == "seed" {
                spec.seed = Some(value.parse().map_err(|_| err("the seed is not a u64"))?);
                continue;
            }
            let p = match value.strip_suffix('%') {
                Some(pct) => pct.trim().parse::<f64>().map(|v| v / 100.0),
                None => value.parse::<f64>(),
            }
            .map_err(|_| err("not a number"))?;
            if !(0.0..=1.0).contains(&p) {
                return Err(err("a probability must be between 0 and 1 (0% and 100%)"));
            }
            match key.trim() {
                "loss" => spec.loss = p,
                "dup" | "duplicate" => spec.duplicate = p,
                "reorder" => spec.reorder = p,
                "corrupt" => spec.corrupt = p,
                _ => return Err(err("unknown fault (loss, dup, reorder, corrupt, seed)")),
            }
        }
        Ok(spec)
    }
}

impl fmt::Display for FaultSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "loss={},dup={},reorder={},corrupt={}",
            self.loss, self.duplicate, self.reorder, self.corrupt
        )?;
        if let Some(s) = self.seed {
            write!(f, ",seed={s}")?;
        }
        Ok(())
    }
}

/// What an injector did so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultCounters {
    /// Packets handed to the injector.
    pub packets: u64,
    /// Packets removed.
    pub dropped: u64,
    /// Copies added.
    pub duplicated: u64,
    /// Packets sent after the one that followed them.
    pub reordered: u64,
    /// Packets with one bit flipped.
    pub corrupted: u64,
}

/// Applies a [`FaultSpec`] to batches of packets about to be sent.
#[derive(Debug)]
pub struct FaultInjector {
    spec: FaultSpec,
    rng: SmallRng,
    /// A packet waiting to follow the next one of the batch.
    held: Option<Transmit>,
    counters: FaultCounters,
}

impl FaultInjector {
    /// An injector for `spec`, seeded with `spec.seed` or a random seed.
    pub fn new(spec: FaultSpec) -> Self {
        let seed = spec.seed.unwrap_or_else(rand::random);
        FaultInjector {
            spec,
            rng: SmallRng::seed_from_u64(seed),
            held: None,
            counters: FaultCounters::default(),
        }
    }

    /// The spec this injector applies.
    pub fn spec(&self) -> &FaultSpec {
        &self.spec
    }

    /// What it did so far.
    pub fn counters(&self) -> FaultCounters {
        self.counters
    }

    /// Changes `batch` in place: drops, duplicates, reorders and corrupts
    /// its packets as the spec draws.
    pub fn apply(&mut self, batch: &mut Vec<Transmit>) {
        let input = std::mem::take(batch);
        let n = input.len();
        self.counters.packets += n as u64;
        for (i, mut t) in input.into_iter().enumerate() {
            if self.draw(self.spec.loss) {
                self.counters.dropped += 1;
                continue;
            }
            if self.draw(self.spec.corrupt) && !t.payload.is_empty() {
                let bit = self.rng.gen_range(0..t.payload.len() * 8);
                t.payload[bit / 8] ^= 1 << (bit % 8);
                self.counters.corrupted += 1;
            }
            let copy = self.draw(self.spec.duplicate).then(|| t.clone());
            if self.held.is_none() && i + 1 < n && self.draw(self.spec.reorder) {
                self.counters.reordered += 1;
                self.held = Some(t);
            } else {
                batch.push(t);
                if let Some(h) = self.held.take() {
                    batch.push(h);
                }
            }
            if let Some(c) = copy {
                self.counters.duplicated += 1;
                batch.push(c);
            }
        }
        // Held behind packets that were all lost: it goes last.
        batch.extend(self.held.take());
    }

    fn draw(&mut self, p: f64) -> bool {
        p > 0.0 && self.rng.gen_bool(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};

    fn pkt(i: u32) -> Transmit {
        let a = IpAddr::V4(Ipv4Addr::LOCALHOST);
        Transmit {
            src: a,
            dst: a,
            src_port: 4791,
            traffic_class: 0,
            hop_limit: 64,
            payload: i.to_be_bytes().repeat(4),
        }
    }

    fn ids(batch: &[Transmit]) -> Vec<u32> {
        batch
            .iter()
            .map(|t| u32::from_be_bytes(t.payload[..4].try_into().unwrap()))
            .collect()
    }

    #[test]
    fn parses_fractions_percentages_and_refuses_nonsense() {
        let s: FaultSpec = "loss=5%, dup=0.01,reorder=1%,corrupt=0.001,seed=9"
            .parse()
            .unwrap();
        assert_eq!(
            (s.loss, s.duplicate, s.reorder, s.corrupt, s.seed),
            (0.05, 0.01, 0.01, 0.001, Some(9))
        );
        assert!("".parse::<FaultSpec>().unwrap().is_none());
        for bad in [
            "loss", "loss=x", "loss=1.5", "loss=-1%", "jitter=1", "seed=-3",
        ] {
            let e = bad.parse::<FaultSpec>().unwrap_err();
            assert_eq!(e.item, bad, "{e}");
        }
        let round: FaultSpec = s.to_string().parse().unwrap();
        assert_eq!(round, s);
    }

    #[test]
    fn no_fault_leaves_batches_alone() {
        let mut f = FaultInjector::new(FaultSpec::default());
        let mut b: Vec<_> = (0..100).map(pkt).collect();
        let before = b.clone();
        f.apply(&mut b);
        assert_eq!(b, before);
        assert_eq!(f.counters().packets, 100);
    }

    #[test]
    fn loss_rate_is_near_the_spec_and_seeded() {
        let spec = FaultSpec {
            loss: 0.1,
            seed: Some(3),
            ..FaultSpec::default()
        };
        let run = || {
            let mut f = FaultInjector::new(spec);
            let mut b: Vec<_> = (0..10_000).map(pkt).collect();
            f.apply(&mut b);
            (ids(&b), f.counters())
        };
        let (kept, c) = run();
        assert_eq!(kept.len() as u64, 10_000 - c.dropped);
        assert!((800..1200).contains(&c.dropped), "{c:?}");
        // Survivors keep their order; the same seed drops the same packets.
        assert!(kept.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(run().0, kept);
    }

    #[test]
    fn every_packet_arrives_once_or_more_under_dup_and_reorder() {
        let spec = FaultSpec {
            duplicate: 0.2,
            reorder: 0.2,
            seed: Some(5),
            ..FaultSpec::default()
        };
        let mut f = FaultInjector::new(spec);
        let mut out = Vec::new();
        for chunk in 0..50u32 {
            let mut b: Vec<_> = (chunk * 20..chunk * 20 + 20).map(pkt).collect();
            f.apply(&mut b);
            out.extend(ids(&b));
        }
        let c = f.counters();
        assert_eq!(out.len() as u64, 1000 + c.duplicated);
        let mut uniq = out.clone();
        uniq.sort_unstable();
        uniq.dedup();
        assert_eq!(uniq, (0..1000).collect::<Vec<_>>());
        assert!(c.reordered > 100 && c.duplicated > 100, "{c:?}");
        // A reordered packet is overtaken by exactly one other packet.
        let inversions = out.windows(2).filter(|w| w[0] > w[1]).count() as u64;
        assert!(
            inversions > 0 && inversions <= c.reordered,
            "{inversions} {c:?}"
        );
    }

    #[test]
    fn corruption_flips_exactly_one_bit() {
        let spec = FaultSpec {
            corrupt: 1.0,
            seed: Some(1),
            ..FaultSpec::default()
        };
        let mut f = FaultInjector::new(spec);
        let mut b: Vec<_> = (0..100).map(pkt).collect();
        let before = b.clone();
        f.apply(&mut b);
        for (x, y) in before.iter().zip(&b) {
            let flipped: u32 = x
                .payload
                .iter()
                .zip(&y.payload)
                .map(|(p, q)| (p ^ q).count_ones())
                .sum();
            assert_eq!(flipped, 1);
        }
        assert_eq!(f.counters().corrupted, 100);
    }
}
