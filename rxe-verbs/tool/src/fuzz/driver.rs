//! The driver of a campaign or a replay: the socket, the record of what
//! was sent, the answer histogram, the liveness bookkeeping, and the
//! oracles the run checks ([`Oracle`]), shown every connection, step and
//! answer as they happen.
//!
//! Liveness is the driver's own: a live connection is checked with a valid
//! SEND that must be ACKed (or by the oracle that checks connections its
//! own way, see [`Oracle::checks`]); a fresh connection must be accepted and
//! pass its first check within `--liveness-timeout`. The sanity and
//! peer-wire oracles read what the record and the socket kept
//! ([`Driver::other_oracles`]).

use super::bth::{bth_qpn, bth_repr};
use super::config::{Config, Peer, Res};
use super::mutate::{self, Gen};
use super::oracle::{Check, Finding, Oracle};
use super::record::{self, IcrcChoice, PsnBase, QpnChoice, Recorder, Sent, SessionInfo};
use super::session::{Answers, Kind, Link, Region, Session, Signature};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rxe_core::psn::Psn;
use rxe_core::wire::{Opcode, Packet, PacketRepr, RethRepr};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// What both a campaign and a replay drive: the socket, the record, the
/// histogram, the liveness bookkeeping and the oracles.
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
    /// The last connection's region (perftest), and an earlier
    /// connection's R_Key (for the `region` arm).
    last_region: Option<Region>,
    pub stale_rkey: Option<u32>,
    /// The oracles this run checks, in the order of their verdicts.
    oracles: Vec<Box<dyn Oracle<Driver>>>,
}

/// Packets to send for a probe: a valid SEND ONLY of a fixed pattern.
pub(crate) fn probe_packet(psn: Psn) -> Vec<u8> {
    let data = *b"rxe fuzz liveness probe.";
    let mut r = PacketRepr::new(bth_repr(Opcode::RC_SEND_ONLY, 0, psn, true));
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
    let mut r = PacketRepr::new(bth_repr(Opcode::RC_RDMA_WRITE_ONLY, 0, psn, true));
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
    /// A driver for `cfg` whose connections' parameters come from `seed`,
    /// checking `oracles`.
    pub(crate) fn new(
        cfg: &Config,
        seed: u64,
        oracles: Vec<Box<dyn Oracle<Driver>>>,
    ) -> Res<Driver> {
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
            last_region: None,
            stale_rkey: None,
            oracles,
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
        if let (Some(old), Some(new)) = (self.last_region, s.region) {
            if old.rkey != new.rkey {
                self.stale_rkey = Some(old.rkey);
            }
        }
        self.last_region = s.region;
        let next = self.rec.sent.len();
        for o in &mut self.oracles {
            o.connected(&s, next);
        }
        self.sessions += 1;
        self.rec.add_session(SessionInfo {
            index,
            base_psn: psn,
            peer_qpn: s.peer_qpn,
            our_qpn: s.our_qpn,
            local: self.link.local(),
            peer: self.link.peer.unwrap_or(self.link.local()),
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
        let first = self.rec.sent.len();
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
                let qpn = bth_qpn(&b);
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
        }
        for o in &mut self.oracles {
            o.sent(s, arm, first, &self.rec.sent[first..]);
        }
        n
    }

    /// Gathers the answers to a step, counts them and shows them to the
    /// oracles.
    pub(crate) fn answers(&mut self, s: &mut Session, window: Duration) -> Answers {
        let before = self.link.unparsable.len();
        let a = self.collect(s, window);
        self.count_step(before, a.sig);
        for o in &mut self.oracles {
            o.answered(s, &a, self.last_good, self.rec.sent.len());
        }
        a
    }

    /// Gathers what the peer sends for up to `window` (see
    /// [`Link::collect`]), without counting it as a step.
    pub(crate) fn collect(&mut self, s: &mut Session, window: Duration) -> Answers {
        self.link.collect(s, window, self.cfg.grace, &mut self.rec)
    }

    /// Counts one step whose answers were `sig`, the socket having held
    /// `before` unparsable datagrams when it began: the histogram, and
    /// where the peer-wire oracle's finding ends if the step brought the
    /// first.
    pub(crate) fn count_step(&mut self, before: usize, sig: Signature) {
        if before == 0 && !self.link.unparsable.is_empty() && self.peer_wire_at.is_none() {
            let to = self.rec.sent.len();
            self.peer_wire_at = Some((self.last_good.min(to), to));
        }
        if sig.is_silence() {
            *self.hist.entry("silence").or_default() += 1;
        }
        for k in sig.kinds() {
            *self.hist.entry(k.name()).or_default() += 1;
        }
        self.steps += 1;
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
    /// server), or the oracle that checks connections checks it (perftest:
    /// the region READ back, the canary and data oracles; rping: a round).
    /// `tries` tries of `window` each. A good check is a good liveness
    /// check.
    pub(crate) fn check(&mut self, s: &mut Session, tries: u32, window: Duration) -> Check {
        let Some(i) = self.checker() else {
            return if self.probe_with(s, tries, window) {
                Check::Ok
            } else {
                Check::Dead
            };
        };
        let c = self.with_oracle(i, |o, d| o.check(d, s, tries, window));
        if c == Check::Ok {
            self.last_good = self.rec.sent.len();
        }
        c
    }

    /// The index of the oracle that checks connections, if one does.
    fn checker(&self) -> Option<usize> {
        self.oracles.iter().position(|o| o.checks())
    }

    /// Runs `f` on oracle `i` and the driver. The oracle is out of the
    /// list meanwhile (the others still see what it sends).
    fn with_oracle<R>(
        &mut self,
        i: usize,
        f: impl FnOnce(&mut dyn Oracle<Driver>, &mut Driver) -> R,
    ) -> R {
        let mut o = self.oracles.remove(i);
        let r = f(o.as_mut(), self);
        self.oracles.insert(i, o);
        r
    }

    /// Replays the recorded packet `p` through the oracle it belongs to
    /// (a legitimate READ of the region), judged as in the campaign;
    /// `None` when it belongs to none.
    pub(crate) fn replay_own(&mut self, s: &mut Session, p: &Sent) -> Option<Check> {
        (0..self.oracles.len()).find_map(|i| self.with_oracle(i, |o, d| o.replay(d, s, p)))
    }

    /// Whether an oracle fired, and which: the first oracle's name.
    pub(crate) fn fired(&self) -> Option<&'static str> {
        self.oracles.iter().find_map(|o| o.fired())
    }

    /// Whether the oracle named `name` fired.
    pub(crate) fn has_fired(&self, name: &str) -> bool {
        self.oracles.iter().any(|o| o.fired() == Some(name))
    }

    /// Why the first check's finding is the setup's fault, if an oracle
    /// says it is (see [`Oracle::setup_fault`]).
    pub(crate) fn setup_fault(&self) -> Option<String> {
        self.oracles.iter().find_map(|o| o.setup_fault())
    }

    /// The oracles' verdicts, in the order of the list, and their findings.
    pub(crate) fn verdicts(&self, tag: &str) -> Vec<Finding> {
        self.oracles
            .iter()
            .flat_map(|o| o.verdict(self, tag))
            .collect()
    }

    /// A fresh connection that ACKs its first SEND (or reads its region
    /// back), or why not. A canary or data finding on it is kept by its
    /// oracle.
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
            // The region once more on the live connection (unless the
            // oracle that checks fired already), then a fresh one must
            // read its own.
            if let Some(mut s) = s {
                if self
                    .checker()
                    .is_none_or(|i| self.oracles[i].fired().is_none())
                {
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
        let peer = self.link.peer.unwrap_or(self.link.local());
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
                .map(|(_, b)| (record::now(), self.link.local(), peer, b.as_slice()));
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
                .map(|b| (record::now(), peer, self.link.local(), b.as_slice()));
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
