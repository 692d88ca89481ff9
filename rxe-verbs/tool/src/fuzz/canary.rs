//! The canary and data oracles, against a peer whose exchange names a
//! buffer it lets us READ and not WRITE (perftest's `ib_read_bw` server:
//! its `ctx_init` registers the buffer with local write and remote read
//! only, and gives its QP remote read only).
//!
//! * **canary**: the whole region (`--size` bytes from the address the
//!   exchange names) is read with a legitimate READ when a connection is
//!   made: that is its baseline. It is read again every `--check-every`
//!   steps, after a run of silent steps, after every step the peer ACKed
//!   (a WRITE or an atomic it executed is ACKed), after every step of the
//!   `region` arm the peer did not refuse, and at the end; any byte that
//!   differs from the baseline is a finding: the peer let a request change
//!   memory it registered without remote write or atomic access. Each
//!   connection has its own baseline (a perftest server fills its buffer
//!   with random bytes every run).
//! * **data**: right after a whole-region READ that completed, a READ of a
//!   random part of the region (one byte to a few packets, anywhere) must
//!   complete and return the bytes the whole-region READ returned; and on
//!   a connection in a clean state (just made, or right after a READ that
//!   completed), no legitimate READ may be refused or answered short. A
//!   READ that goes unanswered is left to the liveness oracle (the QP may
//!   be gone for reasons of its own).
//!
//! Both READs are recorded with the campaign (arms `canary` and `data`),
//! their RETH relative to the region, so that a finding (the packets from
//! the last READ that found the region unchanged to the one that did not)
//! replays on a new connection, against a new buffer: the replay takes the
//! first `canary` READ as its baseline and judges the others the same way.
//!
//! Both oracles are one [`Canary`], the [`Oracle`] that checks a perftest
//! peer's connections in place of the liveness probe.

use super::bth::bth_repr;
use super::driver::Driver;
use super::mutate::Gen;
use super::oracle::{Check, Finding, Oracle};
use super::record::{self, IcrcChoice, PsnBase, QpnChoice, RegionRef, Sent};
use super::session::{Capture, Kind, Region, Session, Signature};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rxe_core::psn::Psn;
use rxe_core::wire::{Opcode, PacketRepr, RethRepr};
use std::time::Duration;

/// The arm name of a READ of the whole region.
pub(crate) const CANARY: &str = "canary";
/// The arm name of a READ of part of it.
pub(crate) const DATA: &str = "data";

/// Whether `arm` is one of the legitimate READs.
pub(crate) fn is_read_arm(arm: &str) -> bool {
    arm == CANARY || arm == DATA
}

/// One connection's view of the region.
#[derive(Debug, Clone)]
struct View {
    region: Region,
    /// The region as the first READ on this connection returned it.
    baseline: Option<Vec<u8>>,
    /// Index in `rec.sent` of the last whole-region READ that found the
    /// region unchanged (where a finding starts).
    good_at: Option<usize>,
}

/// A finding of the canary or data oracle.
#[derive(Debug, Clone)]
pub(crate) struct RegionFinding {
    pub oracle: &'static str,
    pub why: String,
    /// `rec.sent[from..to]` is the finding.
    pub from: usize,
    pub to: usize,
    /// The connection it happened on.
    pub session: u32,
}

/// What a legitimate READ got.
#[derive(Debug, Clone)]
pub(crate) enum ReadOutcome {
    /// Every response, in order.
    Data(Vec<u8>),
    /// The peer said the PSN was wrong (ours, after fuzzing): try again.
    Sequence,
    /// Refused (a NAK), or answered with part of the data.
    Refused(Signature, usize),
    /// Nothing came back.
    Silence,
}

/// A READ request of `len` bytes at `off` in the region.
fn read_packet(psn: Psn, reg: Region, off: u64, len: u32) -> Vec<u8> {
    let mut r = PacketRepr::new(bth_repr(Opcode::RC_RDMA_READ_REQUEST, 0, psn, true));
    r.reth = Some(RethRepr {
        va: reg.va.wrapping_add(off),
        rkey: reg.rkey,
        dma_len: len,
    });
    let mut b = vec![0u8; r.buffer_len()];
    let n = r.emit(&mut b).unwrap_or(0);
    b.truncate(n);
    b
}

/// The offset and length a recorded READ of the region asks for.
fn recorded_range(p: &Sent) -> Option<(u64, u32)> {
    let off = p.region?.va?;
    let b = &p.bytes;
    // BTH (12), RETH: VA (8), R_Key (4), DMA length (4).
    let len = u32::from_be_bytes(b.get(24..28)?.try_into().ok()?);
    Some((u64::try_from(off).ok()?, len))
}

/// Where two byte strings first differ, and in how many bytes.
fn diff(a: &[u8], b: &[u8]) -> Option<(usize, usize)> {
    let first = a.iter().zip(b).position(|(x, y)| x != y)?;
    let n = a.iter().zip(b).filter(|(x, y)| x != y).count();
    Some((first, n))
}

/// Sends one legitimate READ of `len` bytes at `off` in the region (or
/// the recorded one, aimed at this connection's region) through the
/// driver and gathers its responses for `window`. Returns what came back
/// and the index of the request in `rec.sent`.
fn legit_read(
    d: &mut Driver,
    s: &mut Session,
    arm: &'static str,
    off: u64,
    len: u32,
    recorded: Option<&Sent>,
    window: Duration,
) -> (ReadOutcome, usize) {
    let idx = d.rec.sent.len();
    let Some(reg) = s.region else {
        return (ReadOutcome::Silence, idx);
    };
    let g = match recorded {
        Some(p) => Gen {
            bytes: p.bytes.clone(),
            qpn: p.qpn,
            icrc: p.icrc,
            psn: p.psn,
            wellformed: true,
            region: p.region,
        },
        None => Gen {
            bytes: read_packet(s.sq_psn, reg, off, len),
            qpn: QpnChoice::Peer,
            icrc: IcrcChoice::Right,
            psn: PsnBase::Ours,
            wellformed: true,
            region: Some(RegionRef {
                va: Some(off as i64),
                key: Some(0),
            }),
        },
    };
    let psn = match recorded {
        // (Shifted as `send` shifts it over rdma_cm, where the peer
        // chose our first PSN.)
        Some(p) if p.bytes.len() >= 12 => Psn::new(u32::from_be_bytes([
            0,
            p.bytes[9],
            p.bytes[10],
            p.bytes[11],
        ]))
        .add(if p.psn == PsnBase::Ours {
            s.psn_shift
        } else {
            0
        }),
        _ => s.sq_psn,
    };
    let npkts = (len as usize).div_ceil(s.mtu.max(1)).max(1) as u32;
    d.link.capture = Some(Capture::new(psn, npkts));
    if d.send(s, arm, &[g]) == 0 {
        d.link.capture = None;
        return (ReadOutcome::Silence, idx);
    }
    let a = d.answers(s, window);
    let cap = d.link.capture.take();
    let out = match cap.as_ref().and_then(Capture::data) {
        Some(d) if d.len() == len as usize => ReadOutcome::Data(d),
        _ => {
            let got = cap.as_ref().map_or(0, Capture::bytes);
            if a.sig.has(Kind::NakSeq) && !a.sig.fatal() && got == 0 {
                ReadOutcome::Sequence
            } else if a.sig.fatal() || got > 0 || a.sig.has(Kind::ReadData) {
                ReadOutcome::Refused(a.sig, got)
            } else if a.sig.is_silence() {
                ReadOutcome::Silence
            } else {
                // An RNR NAK, an ACK, something else: not a READ's
                // answer, not a refusal either.
                ReadOutcome::Refused(a.sig, got)
            }
        }
    };
    (out, idx)
}

/// The canary and data oracles' state.
pub(crate) struct Canary {
    /// The current connection's region and its baseline.
    view: Option<View>,
    /// The current connection is in a clean state: just made, or right
    /// after a legitimate READ that completed.
    clean: bool,
    /// The canary or data oracle's finding (the first).
    pub finding: Option<RegionFinding>,
    /// Where the data oracle's READs go (seeded).
    rng: StdRng,
}

impl Canary {
    /// The oracles of a run with seed `seed`.
    pub(crate) fn new(seed: u64) -> Canary {
        Canary {
            view: None,
            clean: false,
            finding: None,
            rng: StdRng::seed_from_u64(seed ^ 0x00da_7a0f_ca7a_5eed),
        }
    }

    /// Whether the current connection's whole-region READ completed (its
    /// baseline is taken): a finding after it is the peer's, not a setup
    /// error (a `--size` larger than the server's buffer).
    fn baseline_taken(&self) -> bool {
        self.view.as_ref().is_some_and(|c| c.baseline.is_some())
    }

    /// Judges what a legitimate READ got: the canary and data oracles.
    /// `idx`: the index of its request in `rec.sent`; `to`: how many
    /// packets are recorded now; `was_clean`: the connection was in a
    /// clean state when it was sent.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn judge_read(
        &mut self,
        s: &Session,
        arm: &'static str,
        off: u64,
        len: u32,
        out: ReadOutcome,
        idx: usize,
        to: usize,
        was_clean: bool,
    ) -> Check {
        let Some(c) = self.view.as_mut() else {
            return Check::Dead;
        };
        let what = if arm == CANARY {
            format!("the whole region ({len} bytes at {:#x})", c.region.va)
        } else {
            format!("{len} bytes at offset {off} of the region")
        };
        let found = |oracle: &'static str, why: String, from: usize| RegionFinding {
            oracle,
            why,
            from,
            to,
            session: s.index,
        };
        let finding = match out {
            ReadOutcome::Data(d) => {
                let Some(base) = c.baseline.as_ref() else {
                    c.baseline = Some(d);
                    c.good_at = Some(idx);
                    self.clean = true;
                    return Check::Ok;
                };
                let start = off as usize;
                let expect = base.get(start..start + d.len());
                match expect.map(|e| diff(e, &d)) {
                    Some(None) => {
                        if arm == CANARY {
                            c.good_at = Some(idx);
                        }
                        self.clean = true;
                        return Check::Ok;
                    }
                    Some(Some((first, n))) if arm == CANARY => found(
                        "canary",
                        format!(
                            "the region the peer registered without remote write changed: \
                             {n} of its {} bytes differ, the first at offset {first} \
                             ({:#04x} -> {:#04x}), READ back with rkey {:#x}",
                            d.len(),
                            base[first],
                            d[first],
                            c.region.rkey
                        ),
                        c.good_at.unwrap_or(idx),
                    ),
                    Some(Some((first, n))) => found(
                        "data",
                        format!(
                            "a legitimate READ of {what} returned other bytes than the \
                             whole-region READ before it: {n} differ, the first at offset {} \
                             ({:#04x} instead of {:#04x})",
                            start + first,
                            d[first],
                            base[start + first]
                        ),
                        c.good_at.unwrap_or(idx),
                    ),
                    None => found(
                        "data",
                        format!("a READ of {what} lies outside the region read before it"),
                        c.good_at.unwrap_or(idx),
                    ),
                }
            }
            ReadOutcome::Refused(sig, got) if was_clean => found(
                "data",
                format!(
                    "a legitimate READ of {what} on a connection in a clean state was answered \
                     with {} and {got} of its {len} bytes",
                    sig.describe()
                ),
                c.good_at.unwrap_or(idx),
            ),
            ReadOutcome::Sequence | ReadOutcome::Refused(..) | ReadOutcome::Silence => {
                return Check::Dead
            }
        };
        if self.finding.is_none() {
            self.finding = Some(finding);
        }
        Check::Found
    }

    /// Checks the region on a live connection: a READ of all of it (the
    /// canary), then, when it completed unchanged, a READ of a random part
    /// (data). `tries` READs at most for the first, following the PSN the
    /// peer's sequence NAKs name; each waits `window`.
    fn region_check(
        &mut self,
        d: &mut Driver,
        s: &mut Session,
        tries: u32,
        window: Duration,
    ) -> Check {
        let Some(reg) = s.region else {
            return Check::Dead;
        };
        let mut c = Check::Dead;
        for _ in 0..tries.max(1) {
            let was_clean = self.clean;
            let (out, idx) = legit_read(d, s, CANARY, 0, reg.len, None, window);
            if matches!(out, ReadOutcome::Sequence) {
                continue;
            }
            let to = d.rec.sent.len();
            c = self.judge_read(s, CANARY, 0, reg.len, out, idx, to, was_clean);
            break;
        }
        if c != Check::Ok {
            return c;
        }
        // A part of it, right after: the connection is in a clean state.
        let mtu = s.mtu as u32;
        let len = match self.rng.gen_range(0..6) {
            0 => 1,
            1 => 8,
            2 => mtu,
            3 => mtu + 1,
            4 => 2 * mtu + 3,
            _ => self.rng.gen_range(1..=reg.len),
        }
        .min(reg.len);
        let off = self.rng.gen_range(0..=u64::from(reg.len - len));
        let was_clean = self.clean;
        let window = window.max(d.cfg.window);
        let (out, idx) = legit_read(d, s, DATA, off, len, None, window);
        let to = d.rec.sent.len();
        self.judge_read(s, DATA, off, len, out, idx, to, was_clean)
    }

    /// Replays a recorded legitimate READ and judges it as the campaign
    /// did. `None` when the packet is not one.
    fn replay_read(&mut self, d: &mut Driver, s: &mut Session, p: &Sent) -> Option<Check> {
        let arm = match p.arm.as_str() {
            CANARY => CANARY,
            DATA => DATA,
            _ => return None,
        };
        let (off, len) = recorded_range(p)?;
        s.region?;
        let was_clean = self.clean;
        let window = (d.cfg.window * 10).max(Duration::from_millis(300));
        let (out, idx) = legit_read(d, s, arm, off, len, Some(p), window);
        let to = d.rec.sent.len();
        Some(self.judge_read(s, arm, off, len, out, idx, to, was_clean))
    }
}

impl Oracle<Driver> for Canary {
    /// A new connection's view of its region.
    fn connected(&mut self, s: &Session, _next: usize) {
        self.clean = true;
        self.view = s.region.map(|region| View {
            region,
            baseline: None,
            good_at: None,
        });
    }

    /// Any step but a legitimate READ leaves the connection in a state
    /// that is not clean.
    fn sent(&mut self, _s: &Session, arm: &str, _first: usize, _step: &[Sent]) {
        if !is_read_arm(arm) {
            self.clean = false;
        }
    }

    fn checks(&self) -> bool {
        true
    }

    fn check(&mut self, d: &mut Driver, s: &mut Session, tries: u32, window: Duration) -> Check {
        self.region_check(d, s, tries, window)
    }

    fn replay(&mut self, d: &mut Driver, s: &mut Session, p: &Sent) -> Option<Check> {
        self.replay_read(d, s, p)
    }

    /// A finding before the baseline was taken: the first READ of the
    /// whole region was refused, most likely for asking for more than
    /// the server's buffer.
    fn setup_fault(&self) -> Option<String> {
        if self.baseline_taken() {
            return None;
        }
        Some(
            self.finding
                .as_ref()
                .map(|f| f.why.clone())
                .unwrap_or_default(),
        )
    }

    fn fired(&self) -> Option<&'static str> {
        self.finding.as_ref().map(|f| f.oracle)
    }

    /// Prints the canary and data verdicts and writes the finding, if any.
    fn verdict(&self, d: &Driver, tag: &str) -> Vec<Finding> {
        let mut found = Vec::new();
        for o in [CANARY, DATA] {
            match &self.finding {
                Some(f) if f.oracle == o => found.extend(write_region_finding(d, f, tag)),
                _ => println!("oracle {o}: ok"),
            }
        }
        found
    }
}

/// Writes the canary or data oracle's finding `f` (the rping peer's data
/// oracle's too). Its first packet is a READ (or an rping SEND) in the
/// middle of a connection, so the sidecar gives that connection the first
/// PSN it was sent at.
pub(crate) fn write_region_finding(d: &Driver, f: &RegionFinding, tag: &str) -> Option<Finding> {
    let path = d.cfg.out.join(format!("{}-{tag}.pcap", f.oracle));
    let first = d.rec.sent.get(f.from)?;
    let b = &first.bytes;
    let psn = Psn::new(u32::from_be_bytes([0, b[9], b[10], b[11]]));
    let sessions = d.rec.sessions_from(f.session, psn);
    let to = f.to.min(d.rec.sent.len());
    let r = record::write_packets(
        &path,
        &d.rec.sent[f.from.min(to)..to],
        &sessions,
        Some(f.oracle),
        d.rec.peer.as_deref(),
    );
    match r {
        Ok(()) => {
            println!("finding {}-{tag}: {}", f.oracle, f.why);
            println!(
                "  {} ({} packets from the last READ that found the region unchanged)",
                path.display(),
                to - f.from.min(to)
            );
            println!(
                "  replay: rxe fuzz --replay {} -d {} --to {}",
                path.display(),
                d.cfg.local,
                d.cfg.target
            );
            println!("oracle {}: FINDING {}", f.oracle, path.display());
        }
        Err(e) => println!("oracle {}: FINDING ({e})", f.oracle),
    }
    Some(Finding {
        oracle: f.oracle,
        path,
        replayable: true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diffs_and_recorded_ranges() {
        assert_eq!(diff(b"abcd", b"abcd"), None);
        assert_eq!(diff(b"abcd", b"abXY"), Some((2, 2)));
        let reg = Region {
            va: 0x1000,
            rkey: 0x55,
            len: 4096,
        };
        let b = read_packet(Psn::new(7), reg, 100, 33);
        let p = Sent {
            session: 0,
            step: 0,
            arm: DATA.into(),
            qpn: QpnChoice::Peer,
            icrc: IcrcChoice::Right,
            psn: PsnBase::Ours,
            region: Some(RegionRef {
                va: Some(100),
                key: Some(0),
            }),
            expect: None,
            bytes: b,
            time: Duration::ZERO,
        };
        assert_eq!(recorded_range(&p), Some((100, 33)));
        assert!(is_read_arm("canary") && is_read_arm("data") && !is_read_arm("reth"));
    }

    /// The oracles with a connection to a 64-byte region whose baseline is
    /// taken.
    fn canary() -> (Canary, Session) {
        let mut d = Canary::new(1);
        let s = Session::for_test(
            0,
            Region {
                va: 0x1000,
                rkey: 0x55,
                len: 64,
            },
        );
        d.connected(&s, 0);
        let base: Vec<u8> = (0..64).collect();
        assert_eq!(
            d.judge_read(&s, CANARY, 0, 64, ReadOutcome::Data(base), 0, 0, true),
            Check::Ok
        );
        (d, s)
    }

    /// Each oracle fires on what it is there for, and only on that.
    #[test]
    fn the_canary_and_data_oracles_fire() {
        let base: Vec<u8> = (0..64).collect();
        // The same bytes again: nothing; a part of them: nothing.
        let (mut d, s) = canary();
        let ok = ReadOutcome::Data(base.clone());
        assert_eq!(d.judge_read(&s, CANARY, 0, 64, ok, 3, 0, false), Check::Ok);
        let part = ReadOutcome::Data(base[10..20].to_vec());
        assert_eq!(d.judge_read(&s, DATA, 10, 10, part, 4, 0, true), Check::Ok);
        assert!(d.finding.is_none());
        // No answer, or a refusal after fuzzing: the QP is gone, no finding.
        assert_eq!(
            d.judge_read(&s, CANARY, 0, 64, ReadOutcome::Silence, 5, 0, true),
            Check::Dead
        );
        let refused = ReadOutcome::Refused(Signature(1 << Kind::NakAccess as u32), 0);
        assert_eq!(
            d.judge_read(&s, CANARY, 0, 64, refused.clone(), 5, 0, false),
            Check::Dead
        );
        assert!(d.finding.is_none());
        // The region changed: canary, from the last READ that found it whole.
        let mut changed = base.clone();
        changed[40] ^= 0xff;
        let r = d.judge_read(&s, CANARY, 0, 64, ReadOutcome::Data(changed), 6, 0, false);
        assert_eq!(r, Check::Found);
        let f = d.finding.take().unwrap();
        assert_eq!((f.oracle, f.from), ("canary", 3), "{}", f.why);
        assert!(f
            .why
            .contains("1 of its 64 bytes differ, the first at offset 40"));

        // A part that does not match the whole: data.
        let (mut d, s) = canary();
        let mut wrong = base[8..24].to_vec();
        wrong[0] ^= 1;
        let r = d.judge_read(&s, DATA, 8, 16, ReadOutcome::Data(wrong), 1, 0, true);
        assert_eq!(r, Check::Found);
        let f = d.finding.take().unwrap();
        assert_eq!(f.oracle, "data");
        assert!(f.why.contains("first at offset 8"), "{}", f.why);
        // A legitimate READ refused, or answered short, on a clean
        // connection: data.
        let r = d.judge_read(&s, DATA, 0, 64, refused, 2, 0, true);
        assert_eq!(r, Check::Found);
        assert_eq!(d.finding.take().unwrap().oracle, "data");
        let short = ReadOutcome::Refused(Signature(1 << Kind::ReadData as u32), 32);
        assert_eq!(
            d.judge_read(&s, CANARY, 0, 64, short, 3, 0, true),
            Check::Found
        );
        let f = d.finding.take().unwrap();
        assert!(f.why.contains("32 of its 64 bytes"), "{}", f.why);
    }
}
