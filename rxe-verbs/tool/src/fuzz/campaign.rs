//! A campaign: steps of mutated packets at a live peer, steered by what
//! it answers, with the oracles checked along the way and at the end.
//!
//! Steering is an energy scheme: every arm starts with energy 1; a step
//! whose answers (the set of [`Kind`]s) are new for its arm doubles the
//! arm's energy (up to 16), any other step wears it down a little (to no
//! less than 1/4); the next arm is drawn with probability proportional to
//! energy, from the seeded generator.
//!
//! Liveness: the connection is probed (a valid SEND at the PSN the peer
//! expects must be ACKed) every `--check-every` steps, after a NAK that
//! ends the peer's QP, and after a run of silent steps. A probe that goes
//! unanswered means the peer's QP is gone (as the spec wants after most
//! NAKs); the fuzzer then makes a fresh connection, which must be accepted
//! and must ACK its first SEND within `--liveness-timeout`, or the oracle
//! fires. At the end the connection is ended on purpose (a WRITE with R_Key
//! 0, which the pingpong servers' QPs refuse) and a last fresh connection
//! is checked the same way.
//!
//! Against a perftest server the check is a READ of its whole buffer and
//! one of a part of it instead of the SEND (see [`super::canary`]), a
//! connection is ended perftest's way (the end of the TCP exchange) and the
//! `region` arm joins the others.
//!
//! The probes, checks and connections are the driver's
//! ([`super::driver`]); which oracles a run checks is [`oracles`]. The
//! campaign returns its findings: minimising them is up to its caller.

use super::canary::Canary;
use super::config::{Config, Peer, Res};
use super::driver::Driver;
use super::mutate::{self, Arm, Ctx, ARMS, REGION_ARMS};
use super::oracle::{Check, Finding, Oracle};
use super::rkey::Rkey;
use super::rping::Rping;
use super::session::{Kind, Signature};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::HashSet;
use std::time::{Duration, Instant};

/// The oracles a run against `cfg.peer` checks, in the order their
/// verdicts are printed: the canary and data oracles against a perftest
/// server (`seed` steers the data oracle's READs), the data oracle against
/// an rping server, and the rkey oracle (which judges only the peers whose
/// grants it knows). The campaign and the replay check the same ones.
pub(crate) fn oracles(cfg: &Config, seed: u64) -> Vec<Box<dyn Oracle<Driver>>> {
    let mut v: Vec<Box<dyn Oracle<Driver>>> = Vec::new();
    match cfg.peer {
        Peer::PerftestRead { .. } => v.push(Box::new(Canary::new(seed))),
        Peer::Rping { .. } => v.push(Box::new(Rping::default())),
        Peer::Pingpong => {}
    }
    v.push(Box::new(Rkey::new(cfg.peer)));
    v
}

/// The energy scheme over the arms.
struct Bandit {
    energy: Vec<f64>,
    seen: HashSet<(usize, Signature)>,
}

impl Bandit {
    /// Every arm starts with energy 1, but the `region` arm, what a peer
    /// with a region is fuzzed for, with 4, and the `rkey` arm with 2.
    fn new(arms: &[Arm]) -> Bandit {
        Bandit {
            energy: arms
                .iter()
                .map(|&a| match a {
                    Arm::Region => 4.0,
                    Arm::Rkey => 2.0,
                    _ => 1.0,
                })
                .collect(),
            seen: HashSet::new(),
        }
    }

    fn pick(&self, rng: &mut StdRng) -> usize {
        let total: f64 = self.energy.iter().sum();
        let mut x = rng.gen::<f64>() * total;
        for (i, e) in self.energy.iter().enumerate() {
            if x < *e {
                return i;
            }
            x -= e;
        }
        self.energy.len() - 1
    }

    /// Returns whether the answer was new for the arm.
    fn update(&mut self, arm: usize, sig: Signature) -> bool {
        if self.seen.insert((arm, sig)) {
            self.energy[arm] = (self.energy[arm] * 2.0).min(16.0);
            true
        } else {
            self.energy[arm] = (self.energy[arm] * 0.98).max(0.25);
            false
        }
    }
}

/// Runs a campaign. Returns the oracles' findings (none when no oracle
/// fired); the driver, and its socket, are gone by then.
pub(crate) fn run(
    cfg: &Config,
    seed: u64,
    packets: Option<u64>,
    seconds: Option<Duration>,
    save: bool,
) -> Res<Vec<Finding>> {
    let mut d = Driver::new(cfg, seed, oracles(cfg, seed))?;
    let mut rng = StdRng::seed_from_u64(seed);
    println!(
        "rxe fuzz: seed {seed}, peer {} ({} exchange), from {}",
        cfg.target,
        cfg.exchange(),
        cfg.local
    );
    let mut s = d.connect(None).map_err(|e| format!("setup: {e}"))?;
    if let Peer::PerftestRead { size } = cfg.peer {
        let w = d.probe_window();
        match d.check(&mut s, 3, w) {
            Check::Ok => {
                if let Some(r) = s.region {
                    println!(
                        "region: {} bytes at {:#x}, rkey {:#x} (path MTU {}): the canary",
                        r.len, r.va, r.rkey, s.mtu
                    );
                }
            }
            Check::Dead => {
                d.link.close_oob();
                return Err("setup: the peer accepted the connection but did not answer a READ of its buffer".into());
            }
            // The whole buffer came back and a part of it did not: the
            // data oracle's finding, reported at the end like any other.
            // The first READ of the whole buffer refused: the setup's.
            Check::Found => {
                if let Some(why) = d.setup_fault() {
                    d.link.close_oob();
                    return Err(format!(
                        "setup: {why} (is --size {size} at most the server's -s?)"
                    ));
                }
            }
        }
    } else if let Peer::Rping { size } = cfg.peer {
        let w = d.probe_window();
        match d.check(&mut s, 3, w) {
            Check::Ok => println!(
                "rdma_cm: connected to QP {:#08x}; an rping round of {size} bytes came back whole",
                s.peer_qpn
            ),
            // Reported with the other oracles.
            Check::Found => {}
            Check::Dead => {
                d.link.close_oob();
                return Err(format!(
                    "setup: the peer accepted the rdma_cm connection but did not complete an rping round \
                     (is it an rping server with -S {size} or more, path MTU {}?)",
                    cfg.mtu
                ));
            }
        }
    } else if !d.probe(&mut s) {
        return Err(format!(
            "setup: the peer accepted the connection but did not ACK a valid SEND \
             (is it an RC pingpong server with -g, path MTU {}?)",
            cfg.mtu
        ));
    }
    let arms: &[Arm] = match cfg.peer {
        Peer::PerftestRead { .. } => &REGION_ARMS,
        _ => &ARMS,
    };
    let start = Instant::now();
    let budget_left = |d: &Driver| {
        packets.is_none_or(|n| (d.rec.sent.len() as u64) < n)
            && seconds.is_none_or(|t| start.elapsed() < t)
    };
    let mut bandit = Bandit::new(arms);
    let mut arm_steps = vec![0u64; arms.len()];
    let mut since_check = 0u64;
    let mut silent_run = 0u32;
    let mut need_check = false;
    let mut need_region = false;
    let mut liveness: Option<String> = None;
    let mut session = Some(s);
    while budget_left(&d) {
        let s = match session.as_mut() {
            Some(s) => s,
            None => break,
        };
        if d.fired().is_some() {
            break;
        }
        if need_check || need_region || since_check >= cfg.check_every || silent_run >= 4 {
            // After a NAK that ends the peer's QP one short probe will do:
            // the QP is gone unless the peer ignores the spec.
            let c = if need_check && !need_region {
                d.check(s, 1, cfg.window * 2)
            } else {
                let w = d.probe_window();
                d.check(s, 3, w)
            };
            need_check = false;
            need_region = false;
            since_check = 0;
            silent_run = 0;
            match c {
                Check::Ok => {}
                Check::Found => break,
                Check::Dead => match d.fresh(None) {
                    Ok(n) => *s = n,
                    Err(e) => {
                        liveness = Some(e);
                        session = None;
                        break;
                    }
                },
            }
            continue;
        }
        let i = bandit.pick(&mut rng);
        let arm: Arm = arms[i];
        let ctx = Ctx {
            sq_psn: s.sq_psn,
            mtu: s.mtu,
            recv_size: cfg.recv_size,
            max_datagram: d.link.max_datagram,
            region: s.region,
            stale_rkey: d.stale_rkey,
        };
        let gens = mutate::generate(arm, &mut rng, &ctx);
        d.send(s, arm.name(), &gens);
        let a = d.answers(s, cfg.window);
        arm_steps[i] += 1;
        let new = bandit.update(i, a.sig);
        if cfg.verbose {
            println!(
                "step {} {}: {}{}",
                d.steps,
                arm.name(),
                a.sig.describe(),
                if new { "  (new)" } else { "" }
            );
        }
        since_check += 1;
        silent_run = if a.sig.is_silence() {
            silent_run + 1
        } else {
            0
        };
        if a.sig.fatal() {
            need_check = true;
        }
        // Against a region: whatever the peer ACKed may have written it,
        // and a region step it did not refuse may have too.
        if s.region.is_some()
            && (a.sig.has(Kind::Ack)
                || a.sig.has(Kind::AtomicAck)
                || (arm == Arm::Region && !a.sig.fatal()))
        {
            need_region = true;
        }
    }
    if liveness.is_none() {
        liveness = d.final_check(session.take());
    }
    let tag = format!("seed{seed}");
    println!(
        "sent {} packets in {} steps over {} connections ({} ACKs for the peer's own SENDs, {} refused by the socket, {} stray datagrams)",
        d.rec.sent.len(),
        d.steps,
        d.sessions,
        d.link.upkeep,
        d.refused,
        d.link.stray
    );
    println!("sent hash {:016x}", d.rec.hash());
    if let Some((out, got)) = d.link.cm_counts() {
        println!("rdma_cm: {out} MADs sent, {got} received");
    }
    d.print_histogram();
    println!("coverage: {} (arm, answer) pairs", bandit.seen.len());
    let mut per_arm: Vec<String> = arms
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let answers = bandit.seen.iter().filter(|(j, _)| *j == i).count();
            format!("{}={}/{}", a.name(), arm_steps[i], answers)
        })
        .collect();
    per_arm.sort();
    println!("arms (steps/distinct answers): {}", per_arm.join(" "));
    if save {
        let path = cfg.out.join("sent.pcap");
        d.rec.write(&path, 0)?;
        println!("saved {} packets to {}", d.rec.sent.len(), path.display());
    }
    let mut found = Vec::new();
    match &liveness {
        None => println!("oracle liveness: ok"),
        Some(why) => {
            let path = d.write_finding(&format!("liveness-{tag}"), why);
            println!("oracle liveness: FINDING {}", path.display());
            found.push(Finding {
                oracle: "liveness",
                path,
                replayable: true,
            });
        }
    }
    found.extend(d.verdicts(&tag));
    found.extend(d.other_oracles(&tag));
    Ok(found)
}
