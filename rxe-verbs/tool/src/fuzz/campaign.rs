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

use super::canary::{self, Canary, Check, RegionFinding};
use super::config::{Config, Peer, Res};
use super::mutate::{self, Arm, Ctx, Gen, ARMS, REGION_ARMS};
use super::record::{self, IcrcChoice, PsnBase, QpnChoice, Recorder, Sent, SessionInfo};
use super::session::{Answers, Kind, Link, Session, Signature};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rxe_core::psn::Psn;
use rxe_core::wire::{Opcode, Packet, PacketRepr, RethRepr};
use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// What both a campaign and a replay drive: the socket, the record, the
/// histogram and the liveness bookkeeping.
pub(crate) struct Driver {
    pub cfg: Config,
    pub link: Link,
    pub rec: Recorder,
    /// Steps by answer kind (a step counts once per kind it got; silence
    /// when it got none).
    pub hist: BTreeMap<&'static str, u64>,
    pub steps: u64,
    /// Index in `rec.sent` of the first packet after the last good
    /// liveness check.
    pub last_good: usize,
    pub sessions: u32,
    /// Datagrams the socket refused (larger than the route takes).
    pub refused: u64,
    /// `rec.sent[from..to]`: the packets since the last good liveness
    /// check up to the step that brought the first packet of the peer's
    /// that our parser refused (the peer-wire oracle's finding).
    pub peer_wire_at: Option<(usize, usize)>,
    /// Session parameters come from here (seeded).
    srng: StdRng,
    /// Where the data oracle's READs go (seeded).
    pub vrng: StdRng,
    /// The current connection's region and its baseline (perftest).
    pub canary: Option<Canary>,
    /// The current connection is in a clean state: just made, or right
    /// after a legitimate READ that completed.
    pub clean: bool,
    /// An earlier connection's R_Key (for the `region` arm).
    pub stale_rkey: Option<u32>,
    /// The canary or data oracle's finding.
    pub region_finding: Option<RegionFinding>,
    /// The rkey oracle's bookkeeping and finding.
    pub keys: super::rkey::KeyWatch,
}

/// Packets to send for a probe: a valid SEND ONLY of a fixed pattern.
pub(crate) fn probe_packet(psn: Psn) -> Vec<u8> {
    let data = *b"rxe fuzz liveness probe.";
    let mut r = PacketRepr::new(super::bth::bth_repr(Opcode::RC_SEND_ONLY, 0, psn, true));
    r.payload = &data;
    let mut b = vec![0u8; r.buffer_len()];
    let n = r.emit(&mut b).unwrap_or(0);
    b.truncate(n);
    b
}

/// A WRITE with R_Key 0: refused by a QP without remote write access (the
/// pingpong servers'), which ends the QP.
fn kill_packet(psn: Psn) -> Vec<u8> {
    let data = [0u8; 8];
    let mut r = PacketRepr::new(super::bth::bth_repr(
        Opcode::RC_RDMA_WRITE_ONLY,
        0,
        psn,
        true,
    ));
    r.reth = Some(RethRepr {
        va: 0,
        rkey: 0,
        dma_len: 8,
    });
    r.payload = &data;
    let mut b = vec![0u8; r.buffer_len()];
    let n = r.emit(&mut b).unwrap_or(0);
    b.truncate(n);
    b
}

impl Driver {
    pub(crate) fn new(cfg: &Config, seed: u64) -> Res<Driver> {
        Ok(Driver {
            cfg: cfg.clone(),
            link: {
                let mut l = Link::bind(cfg.local)?;
                l.verbose = cfg.verbose;
                l
            },
            rec: {
                let mut r = Recorder::new();
                r.peer = cfg.peer_meta();
                r
            },
            hist: BTreeMap::new(),
            steps: 0,
            last_good: 0,
            sessions: 0,
            refused: 0,
            peer_wire_at: None,
            srng: StdRng::seed_from_u64(seed ^ 0x005e_ed0f_5e55_1075),
            vrng: StdRng::seed_from_u64(seed ^ 0x00da_7a0f_ca7a_5eed),
            canary: None,
            clean: false,
            stale_rkey: None,
            region_finding: None,
            keys: Default::default(),
        })
    }

    /// A new connection with our initial PSN `psn` (from the seeded
    /// generator when `None`: a quarter of them close to the 24-bit wrap).
    pub(crate) fn connect(&mut self, psn: Option<Psn>) -> Res<Session> {
        let limit = self.cfg.liveness_timeout;
        self.connect_within(psn, limit)
    }

    /// [`Self::connect`], waiting up to `limit` for the peer's server.
    pub(crate) fn connect_within(&mut self, want: Option<Psn>, limit: Duration) -> Res<Session> {
        let psn = want.unwrap_or_else(|| {
            if self.srng.gen_bool(0.25) {
                Psn::new(0xff_ffff - self.srng.gen_range(0..48))
            } else {
                Psn::new(self.srng.gen())
            }
        });
        let low: u16 = self.srng.gen_range(2..=0xffff);
        let index = self.sessions;
        let mut s = self.link.connect(
            &self.cfg.target,
            self.cfg.peer,
            self.cfg.mtu,
            index,
            psn,
            low,
            limit,
        )?;
        // Over rdma_cm the peer chose our first PSN: a replay (which asked
        // for the recorded one) shifts what it resends by the difference.
        if want.is_some() {
            s.psn_shift = s.sq_psn.value().wrapping_sub(psn.value()) & 0xff_ffff;
        }
        let psn = s.sq_psn;
        self.new_canary(&s);
        self.sessions += 1;
        self.rec.add_session(SessionInfo {
            index,
            base_psn: psn,
            peer_qpn: s.peer_qpn,
            our_qpn: s.our_qpn,
            local: self.link.local,
            peer: self.link.peer.unwrap_or(self.link.local),
        });
        if self.cfg.verbose {
            println!(
                "session {index}: peer QPN {:#08x} PSN {:#08x}; ours QPN {:#08x} PSN {:#08x}",
                s.peer_qpn,
                s.peer_epsn.value(),
                s.our_qpn,
                psn.value()
            );
            if let Some(r) = s.region {
                println!(
                    "  region: {} bytes at {:#x}, rkey {:#x}; path MTU {}",
                    r.len, r.va, r.rkey, s.mtu
                );
            }
        }
        Ok(s)
    }

    /// Finalizes, checks, sends and records the packets of one step.
    /// Returns how many went out.
    pub(crate) fn send(&mut self, s: &Session, arm: &str, gens: &[Gen]) -> usize {
        let mut n = 0;
        for g in gens {
            let mut shifted;
            let mut bytes = &g.bytes;
            if s.psn_shift != 0 && g.psn == PsnBase::Ours && bytes.len() >= 12 {
                shifted = bytes.clone();
                let p = Psn::new(u32::from_be_bytes([0, bytes[9], bytes[10], bytes[11]]));
                shifted[9..12].copy_from_slice(&p.add(s.psn_shift).value().to_be_bytes()[1..]);
                bytes = &shifted;
            }
            let b = mutate::finalize(
                bytes,
                g.qpn,
                g.psn,
                g.icrc,
                g.region.zip(s.region),
                s.peer_qpn,
                s.peer_epsn,
                |b| self.link.icrc(b),
            );
            if g.wellformed {
                let psn = Psn::new(u32::from_be_bytes([0, b[9], b[10], b[11]]));
                let qpn = super::bth::bth_qpn(&b);
                self.rec.sanity_check(&b, arm, Some((psn, qpn)));
            } else {
                self.rec.sanity_check(&b, arm, None);
            }
            if self.cfg.verbose {
                match Packet::new_checked(&b[..])
                    .and_then(|p| PacketRepr::parse(&p).map(|r| r.to_string()))
                {
                    Ok(r) => println!("    > {r}"),
                    Err(e) => println!("    > {} bytes, {e}", b.len()),
                }
            }
            if self.link.send(b.clone()).is_err() {
                self.refused += 1;
                continue;
            }
            n += 1;
            self.rec.add(Sent {
                session: s.index,
                step: self.steps,
                arm: arm.to_string(),
                qpn: g.qpn,
                icrc: g.icrc,
                psn: g.psn,
                region: g.region,
                expect: Some(s.sq_psn),
                bytes: b,
                time: record::now(),
            });
            let idx = self.rec.sent.len() - 1;
            self.keys.sent(s, n - 1, idx, &self.rec.sent[idx]);
        }
        if !canary::is_read_arm(arm) {
            self.clean = false;
        }
        n
    }

    /// Gathers the answers to a step and counts them.
    pub(crate) fn answers(&mut self, s: &mut Session, window: Duration) -> Answers {
        let before = self.link.unparsable.len();
        let a = self.link.collect(s, window, self.cfg.grace, &mut self.rec);
        if before == 0 && !self.link.unparsable.is_empty() && self.peer_wire_at.is_none() {
            let to = self.rec.sent.len();
            self.peer_wire_at = Some((self.last_good.min(to), to));
        }
        if a.sig.is_silence() {
            *self.hist.entry("silence").or_default() += 1;
        }
        for k in a.sig.kinds() {
            *self.hist.entry(k.name()).or_default() += 1;
        }
        self.steps += 1;
        self.judge_keys(s, &a);
        a
    }

    pub(crate) fn probe_window(&self) -> Duration {
        (self.cfg.window * 10).max(Duration::from_millis(300))
    }

    /// Whether the peer ACKs a valid SEND on this connection (three tries,
    /// following the PSN its NAKs name). A good probe is a good liveness
    /// check.
    pub(crate) fn probe(&mut self, s: &mut Session) -> bool {
        self.probe_with(s, 3, self.probe_window())
    }

    /// [`Self::probe`] with `tries` tries of `window` each.
    pub(crate) fn probe_with(&mut self, s: &mut Session, tries: u32, window: Duration) -> bool {
        for _ in 0..tries {
            let g = Gen {
                bytes: probe_packet(s.sq_psn),
                qpn: QpnChoice::Peer,
                icrc: IcrcChoice::Right,
                psn: PsnBase::Ours,
                wellformed: true,
                region: None,
            };
            if self.send(s, "probe", &[g]) == 0 {
                return false;
            }
            let a = self.answers(s, window);
            if a.sig.fatal() {
                return false;
            }
            if a.sig.has(Kind::Ack) || a.sig.has(Kind::RnrNak) {
                self.last_good = self.rec.sent.len();
                return true;
            }
        }
        false
    }

    /// Checks the connection: a valid SEND must be ACKed (a pingpong
    /// server), or the region READ back (perftest: the canary and data
    /// oracles). `tries` tries of `window` each.
    pub(crate) fn check(&mut self, s: &mut Session, tries: u32, window: Duration) -> Check {
        if self.cfg.peer == Peer::Pingpong {
            return if self.probe_with(s, tries, window) {
                Check::Ok
            } else {
                Check::Dead
            };
        }
        if let Peer::Rping { .. } = self.cfg.peer {
            return self.rping_check(s, tries, window);
        }
        let c = self.region_check(s, tries, window);
        if c == Check::Ok {
            self.last_good = self.rec.sent.len();
        }
        c
    }

    /// A fresh connection that ACKs its first SEND (or reads its region
    /// back), or why not. A canary or data finding on it is kept in
    /// `region_finding`.
    pub(crate) fn fresh(&mut self, psn: Option<Psn>) -> Res<Session> {
        let mut s = self.connect(psn)?;
        if self.cfg.peer != Peer::Pingpong {
            let w = self.probe_window();
            return match self.check(&mut s, 3, w) {
                Check::Ok | Check::Found => Ok(s),
                Check::Dead => Err(format!(
                    "connection {} was accepted, but its first {} got no answer",
                    s.index,
                    match self.cfg.peer {
                        Peer::Rping { .. } => "rping round",
                        _ => "READ of the region",
                    }
                )),
            };
        }
        if self.probe(&mut s) {
            Ok(s)
        } else {
            Err(format!(
                "connection {} was accepted, but its first SEND got no ACK",
                s.index
            ))
        }
    }

    /// Ends a connection on purpose so that the peer's server can take a
    /// new one: a WRITE with R_Key 0 (a few tries).
    pub(crate) fn kill(&mut self, s: &mut Session) -> bool {
        if self.cfg.peer != Peer::Pingpong {
            // perftest: the end of the TCP exchange ends the server's run.
            self.link.close_oob();
            return true;
        }
        for _ in 0..3 {
            let g = Gen {
                bytes: kill_packet(s.sq_psn),
                qpn: QpnChoice::Peer,
                icrc: IcrcChoice::Right,
                psn: PsnBase::Ours,
                wellformed: true,
                region: None,
            };
            self.send(s, "kill", &[g]);
            let w = self.probe_window();
            let a = self.answers(s, w);
            if a.sig.fatal() || a.sig.is_silence() {
                return true;
            }
        }
        false
    }

    /// Ends a connection that may still be up before the next one is
    /// made, without waiting long: a WRITE with R_Key 0 and one window for
    /// its NAK. (The peer's server serves one connection at a time.)
    pub(crate) fn end_quietly(&mut self, s: &mut Session) {
        if self.cfg.peer != Peer::Pingpong {
            self.link.close_oob();
            return;
        }
        let g = Gen {
            bytes: kill_packet(s.sq_psn),
            qpn: QpnChoice::Peer,
            icrc: IcrcChoice::Right,
            psn: PsnBase::Ours,
            wellformed: true,
            region: None,
        };
        self.send(s, "kill", &[g]);
        let w = self.cfg.window;
        self.answers(s, w);
    }

    /// The final liveness check: end the connection, then a fresh one must
    /// work. `Ok(None)` when it does.
    pub(crate) fn final_check(&mut self, s: Option<Session>) -> Option<String> {
        if self.cfg.peer != Peer::Pingpong {
            // The region once more on the live connection (unless an
            // oracle fired already), then a fresh one must read its own.
            if let Some(mut s) = s {
                if self.region_finding.is_none() {
                    let w = self.probe_window();
                    let _ = self.check(&mut s, 3, w);
                }
            }
            self.link.close_oob();
            let r = self.fresh(None).err();
            self.link.close_oob();
            return r;
        }
        if let Some(mut s) = s {
            if self.probe(&mut s) && !self.kill(&mut s) {
                // The peer keeps its QP whatever we send: a fresh
                // connection cannot be had, the live one answers.
                println!("liveness: the peer's QP would not end; checked on the live connection");
                return None;
            }
        }
        match self.fresh(None) {
            Ok(mut s) => {
                // Leave the peer's server ready for the next user.
                let _ = self.kill(&mut s);
                None
            }
            Err(e) => Some(e),
        }
    }

    /// Writes the packets since the last good liveness check as a finding
    /// of the liveness oracle.
    pub(crate) fn write_finding(&mut self, name: &str, why: &str) -> PathBuf {
        let path = self.cfg.out.join(format!("{name}.pcap"));
        let end = self.rec.sent.len();
        match self
            .rec
            .write_range(&path, self.last_good, end, Some("liveness"))
        {
            Ok(()) => {
                let n = self.rec.sent.len() - self.last_good.min(self.rec.sent.len());
                println!("finding {name}: {why}");
                println!(
                    "  {} ({n} packets since the last good liveness check)",
                    path.display()
                );
                println!(
                    "  replay: rxe fuzz --replay {} -d {} --to {}",
                    path.display(),
                    self.cfg.local,
                    self.cfg.target
                );
            }
            Err(e) => eprintln!("rxe fuzz: {e}"),
        }
        path
    }

    /// Prints the answer histogram.
    pub(crate) fn print_histogram(&self) {
        println!("answers (steps by what the peer answered):");
        for (k, n) in &self.hist {
            println!("  {k:<32} {n}");
        }
        for (k, n) in &self.link.seen_total {
            if *k == Kind::PeerSend {
                println!("  ({} packets of the peer's own SENDs, ACKed)", n);
            }
        }
    }

    /// The sanity and peer-wire oracles: their findings.
    pub(crate) fn other_oracles(&mut self, tag: &str) -> Vec<Finding> {
        let mut found = Vec::new();
        let peer = self.link.peer.unwrap_or(self.link.local);
        if self.rec.insane.is_empty() {
            println!("oracle sanity: ok");
        } else {
            let path = self.cfg.out.join(format!("sanity-{tag}.pcap"));
            for (why, _) in self.rec.insane.iter().take(5) {
                println!("  sanity: {why}");
            }
            let frames = self
                .rec
                .insane
                .iter()
                .map(|(_, b)| (record::now(), self.link.local, peer, b.as_slice()));
            match record::write_pcap(&path, frames) {
                Ok(()) => println!("oracle sanity: FINDING {}", path.display()),
                Err(e) => println!("oracle sanity: FINDING ({e})"),
            }
            found.push(Finding {
                oracle: "sanity",
                path,
                replayable: false,
            });
        }
        if self.link.unparsable.is_empty() {
            println!("oracle peer-wire: ok");
        } else {
            // What we sent up to the first refused packet (replayable),
            // and what the peer sent that our parser refused.
            let path = self.cfg.out.join(format!("peer-wire-{tag}.pcap"));
            let theirs = self.cfg.out.join(format!("peer-wire-{tag}.peer.pcap"));
            let (from, to) = self.peer_wire_at.unwrap_or((0, 0));
            let ours = self.rec.write_range(&path, from, to, Some("peer-wire"));
            let frames = self
                .link
                .unparsable
                .iter()
                .map(|b| (record::now(), peer, self.link.local, b.as_slice()));
            let r = ours.and(record::write_pcap(&theirs, frames));
            match r {
                Ok(()) => {
                    let b = &self.link.unparsable[0];
                    println!(
                        "finding peer-wire-{tag}: the peer sent {} packets our parser refuses, the first {} bytes: {}",
                        self.link.unparsable.len(),
                        b.len(),
                        rxe_core::wire::Packet::new_checked(&b[..])
                            .err()
                            .map_or("parses now".into(), |e| e.to_string())
                    );
                    println!(
                        "  {} ({} packets we sent up to the first of them); theirs: {}",
                        path.display(),
                        to - from,
                        theirs.display()
                    );
                    println!(
                        "  replay: rxe fuzz --replay {} -d {} --to {}",
                        path.display(),
                        self.cfg.local,
                        self.cfg.target
                    );
                    println!("oracle peer-wire: FINDING {}", path.display());
                }
                Err(e) => println!("oracle peer-wire: FINDING ({e})"),
            }
            found.push(Finding {
                oracle: "peer-wire",
                path,
                replayable: true,
            });
        }
        found
    }
}

/// An oracle's finding.
#[derive(Debug, Clone)]
pub(crate) struct Finding {
    pub oracle: &'static str,
    pub path: PathBuf,
    /// What we sent (with its sidecar), so `--replay` and `--minimise`
    /// take it.
    pub replayable: bool,
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

/// Runs a campaign. `Ok(true)` when an oracle fired.
pub(crate) fn run(
    cfg: &Config,
    seed: u64,
    packets: Option<u64>,
    seconds: Option<Duration>,
    save: bool,
) -> Res<bool> {
    let mut d = Driver::new(cfg, seed)?;
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
            Check::Found if d.baseline_taken() => {}
            Check::Found => {
                d.link.close_oob();
                let why = d.region_finding.map(|f| f.why).unwrap_or_default();
                return Err(format!(
                    "setup: {why} (is --size {size} at most the server's -s?)"
                ));
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
        if d.region_finding.is_some() || d.keys.finding.is_some() {
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
    found.extend(d.region_oracles(&tag));
    found.extend(d.key_oracle(&tag));
    found.extend(d.other_oracles(&tag));
    // The socket is the minimiser's now.
    drop(d);
    super::minimise::after_campaign(cfg, &found);
    Ok(!found.is_empty())
}
