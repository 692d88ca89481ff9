//! Minimising a finding: delta debugging (Zeller's ddmin) over what was
//! sent, judged by replaying each candidate against the live peer.
//!
//! A finding is every packet since the last good liveness check; most of
//! them have nothing to do with what broke the peer. The minimiser looks
//! for a small subset that still makes the finding's oracle fire: a
//! candidate is replayed exactly as `--replay` would (each recorded
//! connection it keeps on a new connection, fields rewritten for it, then
//! the final liveness check), and it *reproduces* when the same oracle
//! fires. ddmin runs three times, each on what the one before kept: over
//! whole connections, over steps (the packets one step sent together), and
//! over single packets. The first attempt replays the whole finding: one
//! that does not reproduce is left alone.
//!
//! Kept packets are renumbered: a step whose predecessors are taken away is
//! sent at the PSN the peer now expects, not the one it was recorded at
//! (where the peer would answer a sequence NAK and execute nothing). The
//! sidecar gives every packet the PSN the peer expected when its step
//! began (`expect=`); a kept step is moved to the PSN its kept
//! predecessors on the connection lead to (each advancing it by what it
//! advanced it in the recording, less the PSNs of its own packets that
//! were taken away), its packets keeping their distance from it. The first
//! attempt replays the finding as recorded; when renumbering changes it
//! (a finding that starts in the middle of a connection), a second replays
//! it renumbered, and the search renumbers only if that reproduces too.
//!
//! Each attempt waits for the peer to take a connection first (a peer that
//! has just been broken must come back: a server with a timeout, run in a
//! loop), and the whole search is bounded by a time budget and a number of
//! attempts; when either runs out, the smallest candidate that reproduced
//! so far is the result. It is written as `NAME.min.pcap` (+ `.meta`) next
//! to `NAME.pcap`.

use super::config::{Config, Res};
use super::oracle::Finding;
use super::record::{self, Loaded, PsnBase, Sent};
use super::replay;
use rxe_core::psn::Psn;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The oracles whose findings are replayable, hence minimisable.
const ORACLES: [&str; 5] = ["liveness", "peer-wire", "canary", "data", "rkey"];

/// Minimises the replayable findings of a campaign, within the budget
/// (shared between them). Prints what it did; a failure is reported, not
/// returned: the campaign's verdicts stand either way.
pub(crate) fn after_campaign(cfg: &Config, found: &[Finding]) {
    if cfg.minimise_budget.is_zero() {
        return;
    }
    let start = Instant::now();
    for f in found.iter().filter(|f| f.replayable) {
        let left = cfg.minimise_budget.saturating_sub(start.elapsed());
        if left.is_zero() {
            println!(
                "minimise: no budget left for {} (rxe fuzz --minimise {} -d {} --to {})",
                f.path.display(),
                f.path.display(),
                cfg.local,
                cfg.target
            );
            continue;
        }
        if let Err(e) = run(cfg, &f.path, Some(f.oracle), left) {
            println!("minimise: {}: {e}", f.path.display());
        }
    }
}

/// `NAME.pcap` -> `NAME.min.pcap`.
pub(crate) fn min_path(file: &Path) -> PathBuf {
    let stem = file
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "finding".into());
    file.with_file_name(format!("{stem}.min.pcap"))
}

/// Minimises the finding `file` of oracle `oracle` (from its sidecar, or
/// its name, or whichever replayable oracle fires on it when `None`).
/// Returns the path of the minimised finding, or `None` when it did not
/// reproduce or the peer could not be reached.
pub(crate) fn run(
    cfg: &Config,
    file: &Path,
    oracle: Option<&str>,
    budget: Duration,
) -> Res<Option<PathBuf>> {
    let rec = record::load(file)?;
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut oracle: Option<String> = oracle
        .map(str::to_string)
        .or_else(|| rec.oracle.clone())
        .or_else(|| {
            ORACLES
                .iter()
                .find(|o| name.starts_with(&format!("{o}-")))
                .map(|o| o.to_string())
        });
    let all: Vec<usize> = (0..rec.packets.len()).collect();
    println!(
        "minimise: {} ({} packets, {} steps, {} connections), oracle {}, budget {} s / {} attempts",
        file.display(),
        all.len(),
        steps(&rec, &all),
        connections(&rec, &all),
        oracle.as_deref().unwrap_or("(whichever fires)"),
        budget.as_secs(),
        cfg.minimise_attempts
    );
    let mut m = Minimiser {
        cfg,
        rec: &rec,
        renumber: false,
        oracle: oracle.clone(),
        deadline: Instant::now() + budget,
        attempts: 0,
        tried: HashMap::new(),
        stopped: None,
    };
    match m.test(&all) {
        Some(true) => {}
        Some(false) => {
            println!(
                "minimise: the whole finding does not reproduce ({} did not fire): not minimised",
                oracle.as_deref().unwrap_or("no oracle")
            );
            return Ok(None);
        }
        None => {
            return Err(format!(
                "not minimised: {}",
                m.stopped.as_deref().unwrap_or("stopped")
            ))
        }
    }
    // Renumbered, unless that changes the whole finding (one that starts
    // in the middle of a connection) and it no longer reproduces.
    m.renumber = true;
    if renumber(&rec, &all)
        .iter()
        .zip(&rec.packets)
        .any(|(a, b)| a.bytes != b.bytes)
    {
        match m.test(&all) {
            Some(true) => {}
            Some(false) => {
                m.renumber = false;
                println!(
                    "minimise: renumbered, the finding does not reproduce: PSNs kept as recorded"
                );
            }
            None => m.renumber = false,
        }
        m.tried.clear();
    }
    oracle = m.oracle.clone();
    let start = Instant::now();
    let mut keep = all.clone();
    // Connections, then steps, then packets.
    for level in [Level::Connection, Level::Step, Level::Packet] {
        if m.stopped.is_some() {
            break;
        }
        let units = level.units(&rec, &keep);
        if units.len() < 2 {
            continue;
        }
        keep = ddmin(units, &mut |c| m.test(c));
    }
    let out = min_path(file);
    let pkts: Vec<Sent> = if m.renumber {
        renumber(&rec, &keep)
    } else {
        keep.iter().map(|&i| rec.packets[i].clone()).collect()
    };
    record::write_packets(
        &out,
        &pkts,
        &rec.sessions,
        oracle.as_deref(),
        rec.peer.as_deref(),
    )?;
    println!(
        "minimised {}: {} packets ({} steps, {} connections) -> {} packets ({} steps, {} connections) in {} attempts, {:.1} s{}",
        name,
        all.len(),
        steps(&rec, &all),
        connections(&rec, &all),
        keep.len(),
        steps(&rec, &keep),
        connections(&rec, &keep),
        m.attempts,
        start.elapsed().as_secs_f64(),
        match &m.stopped {
            Some(why) => format!(" (stopped early: {why})"),
            None => String::new(),
        }
    );
    for p in &pkts {
        println!(
            "  connection {} step {} {}: {}",
            p.session,
            p.step,
            p.arm,
            describe(&p.bytes)
        );
    }
    println!("  {}", out.display());
    println!(
        "  replay: rxe fuzz --replay {} -d {} --to {}",
        out.display(),
        cfg.local,
        cfg.target
    );
    Ok(Some(out))
}

/// A packet as `rxe dump` would name it.
fn describe(b: &[u8]) -> String {
    match rxe_core::wire::Packet::new_checked(b)
        .and_then(|p| rxe_core::wire::PacketRepr::parse(&p).map(|r| r.to_string()))
    {
        Ok(r) => r,
        Err(e) => format!("{} bytes, {e}", b.len()),
    }
}

fn steps(rec: &Loaded, keep: &[usize]) -> usize {
    let mut v: Vec<(u32, u64)> = keep
        .iter()
        .map(|&i| (rec.packets[i].session, rec.packets[i].step))
        .collect();
    v.dedup();
    v.len()
}

fn connections(rec: &Loaded, keep: &[usize]) -> usize {
    let mut v: Vec<u32> = keep.iter().map(|&i| rec.packets[i].session).collect();
    v.dedup();
    v.len()
}

/// The packets `keep` (indices into `rec.packets`, in order) renumbered
/// so that each kept step arrives at the PSN the peer expects once the
/// steps before it on its connection that were taken away are gone.
///
/// Per connection, from its initial PSN: a kept step is moved from the PSN
/// the peer expected when it began in the recording (`expect`) to the one
/// reached so far; its packets sent in sequence (at distances `0..A` from
/// it, where `A` is how far the recording's next step on the connection
/// began from it) close up over the PSNs of the packets taken away (each
/// spans the PSNs up to the next distance sent: a READ request as many as
/// its responses), the others (duplicates behind, PSNs far ahead) keep
/// theirs; and the PSN reached moves on by `A` less those gaps. Only PSNs in our own
/// space (`psn=ours`) are rewritten; a packet without `expect` (a pcap
/// without its sidecar) stays as it is. The ICRC is recomputed by the
/// replay, as for any packet.
pub(crate) fn renumber(rec: &Loaded, keep: &[usize]) -> Vec<Sent> {
    let psn_of = |b: &[u8]| Psn::new(u32::from_be_bytes([0, b[9], b[10], b[11]]));
    let ours = |p: &Sent| p.psn == PsnBase::Ours && p.bytes.len() >= 12;
    // The recording's steps, in order: (session, step) -> packet indices.
    let mut steps: Vec<((u32, u64), Vec<usize>)> = Vec::new();
    for (i, p) in rec.packets.iter().enumerate() {
        match steps.last_mut() {
            Some((k, v)) if *k == (p.session, p.step) => v.push(i),
            _ => steps.push(((p.session, p.step), vec![i])),
        }
    }
    let expect = |v: &[usize]| v.iter().find_map(|&i| rec.packets[i].expect);
    let kept: std::collections::HashSet<usize> = keep.iter().copied().collect();
    let mut out: Vec<Sent> = keep.iter().map(|&i| rec.packets[i].clone()).collect();
    let at: HashMap<usize, usize> = keep.iter().enumerate().map(|(j, &i)| (i, j)).collect();
    // The PSN reached on each connection.
    let mut reached: HashMap<u32, Psn> = HashMap::new();
    for (n, ((session, _), v)) in steps.iter().enumerate() {
        if !v.iter().any(|i| kept.contains(i)) {
            continue;
        }
        let Some(e) = expect(v) else { continue };
        let next = steps[n + 1..]
            .iter()
            .find(|((s, _), _)| s == session)
            .and_then(|(_, w)| expect(w));
        let adv = next.map_or(0, |x| x.diff(e).max(0) as u32);
        let base = rec
            .sessions
            .iter()
            .find(|s| s.index == *session)
            .map_or(e, |s| s.base_psn);
        let to = *reached.entry(*session).or_insert(base);
        // Distances in 0..adv no kept packet covers any more.
        let dist = |i: usize| psn_of(&rec.packets[i].bytes).diff(e);
        let in_seq = |d: i32| d >= 0 && (d as u32) < adv;
        let covered: std::collections::BTreeSet<i32> = v
            .iter()
            .filter(|&&i| ours(&rec.packets[i]) && in_seq(dist(i)))
            .map(|&i| dist(i))
            .collect();
        let still: std::collections::BTreeSet<i32> = v
            .iter()
            .filter(|&&i| kept.contains(&i) && ours(&rec.packets[i]) && in_seq(dist(i)))
            .map(|&i| dist(i))
            .collect();
        // Each distance sent in sequence spans the PSNs up to the next one
        // (a READ request spans as many as it has responses); those of the
        // distances no kept packet covers any more are taken out.
        let bounds: Vec<i32> = covered.iter().copied().chain([adv as i32]).collect();
        let gaps: Vec<(i32, i32)> = bounds
            .windows(2)
            .filter(|w| !still.contains(&w[0]))
            .map(|w| (w[0], w[1] - w[0]))
            .collect();
        let gone = |d: i32| -> i32 { gaps.iter().filter(|g| g.0 < d).map(|g| g.1).sum() };
        for &i in v.iter().filter(|i| kept.contains(i)) {
            let p = &mut out[at[&i]];
            p.expect = Some(to);
            if !ours(p) {
                continue;
            }
            let d = dist(i);
            let d = if in_seq(d) { d - gone(d) } else { d };
            let psn = to.add(d as u32);
            p.bytes[9..12].copy_from_slice(&psn.value().to_be_bytes()[1..]);
        }
        reached.insert(*session, to.add(adv - gone(adv as i32) as u32));
    }
    out
}

/// What ddmin takes away or keeps as one.
#[derive(Debug, Clone, Copy)]
enum Level {
    Connection,
    Step,
    Packet,
}

impl Level {
    /// `keep` (indices of packets, in order) cut into units.
    fn units(self, rec: &Loaded, keep: &[usize]) -> Vec<Vec<usize>> {
        let key = |i: usize| {
            let p = &rec.packets[i];
            match self {
                Level::Connection => (p.session, 0, 0),
                Level::Step => (p.session, p.step, 0),
                Level::Packet => (p.session, p.step, i),
            }
        };
        let mut units: Vec<Vec<usize>> = Vec::new();
        let mut last = None;
        for &i in keep {
            let k = key(i);
            if last != Some(k) {
                units.push(Vec::new());
                last = Some(k);
            }
            if let Some(u) = units.last_mut() {
                u.push(i);
            }
        }
        units
    }
}

/// Zeller's ddmin over `units`: a smallest (1-minimal as far as the tests
/// went) set of units whose packets, in order, still make `test` true.
/// `test` answers `None` when the search must stop: what is kept then is
/// the smallest set that passed. Returns the packets kept, in order.
fn ddmin(mut units: Vec<Vec<usize>>, test: &mut dyn FnMut(&[usize]) -> Option<bool>) -> Vec<usize> {
    let flat = |us: &[Vec<usize>]| {
        let mut v: Vec<usize> = us.iter().flatten().copied().collect();
        v.sort_unstable();
        v
    };
    let mut n = 2usize;
    'search: while units.len() >= 2 {
        let n_ = n.min(units.len());
        let len = units.len();
        let bounds: Vec<(usize, usize)> = (0..n_)
            .map(|k| (k * len / n_, (k + 1) * len / n_))
            .collect();
        // Reduce to a subset.
        for &(a, b) in &bounds {
            let c = units[a..b].to_vec();
            match test(&flat(&c)) {
                None => break 'search,
                Some(true) => {
                    units = c;
                    n = 2;
                    continue 'search;
                }
                Some(false) => {}
            }
        }
        // Reduce to a complement (with two parts, the complements are the
        // subsets just tried).
        if n_ > 2 {
            for &(a, b) in &bounds {
                let c: Vec<Vec<usize>> = units[..a].iter().chain(&units[b..]).cloned().collect();
                match test(&flat(&c)) {
                    None => break 'search,
                    Some(true) => {
                        units = c;
                        n = (n_ - 1).max(2);
                        continue 'search;
                    }
                    Some(false) => {}
                }
            }
        }
        if n_ >= units.len() {
            break;
        }
        n = (2 * n_).min(units.len());
    }
    flat(&units)
}

/// Runs candidates against the peer and remembers their verdicts.
struct Minimiser<'a> {
    cfg: &'a Config,
    rec: &'a Loaded,
    /// Candidates are renumbered ([`renumber`]).
    renumber: bool,
    /// The oracle that must fire; `None` until the first attempt names it.
    oracle: Option<String>,
    deadline: Instant,
    attempts: u32,
    tried: HashMap<Vec<usize>, bool>,
    /// Why the search stopped early.
    stopped: Option<String>,
}

impl Minimiser<'_> {
    /// Whether replaying the packets `keep` (indices, in order) makes the
    /// oracle fire; `None` when the budget is spent or the peer is gone.
    fn test(&mut self, keep: &[usize]) -> Option<bool> {
        if self.stopped.is_some() {
            return None;
        }
        if let Some(&r) = self.tried.get(keep) {
            return Some(r);
        }
        let now = Instant::now();
        if now >= self.deadline {
            self.stopped = Some("time budget spent".into());
            return None;
        }
        if self.attempts >= self.cfg.minimise_attempts {
            self.stopped = Some("attempt budget spent".into());
            return None;
        }
        self.attempts += 1;
        let owned = if self.renumber {
            renumber(self.rec, keep)
        } else {
            keep.iter().map(|&i| self.rec.packets[i].clone()).collect()
        };
        let pkts: Vec<&Sent> = owned.iter().collect();
        let t = Instant::now();
        // Quiet: a candidate's steps are not news.
        let mut cfg = self.cfg.clone();
        cfg.verbose = false;
        let o = match replay::execute(&cfg, &self.rec.sessions, &pkts, self.deadline - now) {
            Ok(o) => o,
            Err(e) => {
                self.stopped = Some(format!("the peer is not reachable ({e})"));
                return None;
            }
        };
        let oracle = match &self.oracle {
            Some(x) => x.clone(),
            None => {
                let Some(x) = ORACLES.iter().find(|x| o.fired(x)) else {
                    self.tried.insert(keep.to_vec(), false);
                    println!(
                        "  attempt {}: {} packets: no oracle fired ({:.1} s)",
                        self.attempts,
                        keep.len(),
                        t.elapsed().as_secs_f64()
                    );
                    return Some(false);
                };
                self.oracle = Some(x.to_string());
                x.to_string()
            }
        };
        let r = o.fired(&oracle);
        drop(o);
        println!(
            "  attempt {}: {} packets in {} steps: {} ({:.1} s)",
            self.attempts,
            keep.len(),
            steps(self.rec, keep),
            if r {
                format!("{oracle} fired")
            } else {
                "no".to_string()
            },
            t.elapsed().as_secs_f64()
        );
        self.tried.insert(keep.to_vec(), r);
        Some(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ddmin over single packets with a predicate that needs `need`.
    fn shrink(n: usize, need: &[usize]) -> (Vec<usize>, usize) {
        let units: Vec<Vec<usize>> = (0..n).map(|i| vec![i]).collect();
        let mut tests = 0;
        let kept = ddmin(units, &mut |c| {
            tests += 1;
            Some(need.iter().all(|x| c.contains(x)))
        });
        (kept, tests)
    }

    #[test]
    fn ddmin_finds_the_packets_that_matter() {
        assert_eq!(shrink(34, &[26]).0, vec![26]);
        assert_eq!(shrink(34, &[3, 30]).0, vec![3, 30]);
        assert_eq!(shrink(100, &[0, 50, 99]).0, vec![0, 50, 99]);
        // One packet out of 34 takes about 2 log2(34) tests, not 34.
        assert!(shrink(34, &[26]).1 <= 12, "{}", shrink(34, &[26]).1);
    }

    #[test]
    fn ddmin_keeps_the_best_so_far_when_stopped() {
        let units: Vec<Vec<usize>> = (0..16).map(|i| vec![i]).collect();
        let mut left = 2;
        let kept = ddmin(units, &mut |c| {
            if left == 0 {
                return None;
            }
            left -= 1;
            Some(c.contains(&13))
        });
        // First half fails, second half (8..16) passes, then the budget ends.
        assert_eq!(kept, (8..16).collect::<Vec<_>>());
    }

    /// Renumbering: kept steps move to the PSN their kept predecessors
    /// lead to; packets out of sequence keep their distance.
    #[test]
    fn kept_packets_are_renumbered_into_sequence() {
        let pkt = |step: u64, psn: u32, expect: u32| {
            let mut bytes = vec![0u8; 16];
            bytes[9..12].copy_from_slice(&psn.to_be_bytes()[1..]);
            Sent {
                session: 0,
                step,
                arm: "x".into(),
                qpn: record::QpnChoice::Peer,
                icrc: record::IcrcChoice::Right,
                psn: record::PsnBase::Ours,
                region: None,
                expect: Some(Psn::new(expect)),
                bytes,
                time: Duration::ZERO,
            }
        };
        let base = 0xff_fffe;
        let p = |i: u32| (base + i) & 0xff_ffff;
        let rec = Loaded {
            sessions: vec![record::SessionInfo {
                index: 0,
                base_psn: Psn::new(base),
                peer_qpn: 1,
                our_qpn: 2,
                local: "127.0.0.1".parse().unwrap(),
                peer: "127.0.0.1".parse().unwrap(),
            }],
            packets: vec![
                pkt(0, p(0), p(0)),             // 0: READ, executed
                pkt(1, p(1), p(1)),             // 1: FIRST \
                pkt(1, p(2), p(1)),             // 2: MIDDLE | executed
                pkt(1, p(3), p(1)),             // 3: LAST  /
                pkt(2, p(4) + (1 << 22), p(4)), // 4: far ahead, ignored
                pkt(3, p(4), p(4)),             // 5: WRITE, executed
                pkt(4, p(5), p(5)),             // 6: READ of 4 PSNs
                pkt(5, p(9), p(9)),             // 7: WRITE
            ],
            oracle: None,
            peer: None,
        };
        let psns = |v: &[Sent]| {
            v.iter()
                .map(|s| u32::from_be_bytes([0, s.bytes[9], s.bytes[10], s.bytes[11]]))
                .collect::<Vec<_>>()
        };
        let all: Vec<usize> = (0..8).collect();
        // Everything kept: as recorded.
        let r = renumber(&rec, &all);
        assert_eq!(psns(&r), psns(&rec.packets));
        // The READ, the WRITE, the READ: in sequence from the base.
        let r = renumber(&rec, &[0, 5, 6]);
        assert_eq!(psns(&r), vec![p(0), p(1), p(2)]);
        assert_eq!(r[1].expect, Some(Psn::new(p(1))));
        // The MIDDLE taken away: the LAST closes up; the far packet keeps
        // its distance from its step.
        let r = renumber(&rec, &[0, 1, 3, 4, 5]);
        assert_eq!(
            psns(&r),
            vec![p(0), p(1), p(2), (p(3) + (1 << 22)) & 0xff_ffff, p(3)]
        );
        // Without the first step the next one starts at the base.
        let r = renumber(&rec, &[5]);
        assert_eq!(psns(&r), vec![p(0)]);
        // A READ taken away takes its four PSNs with it.
        let r = renumber(&rec, &[0, 5, 7]);
        assert_eq!(psns(&r), vec![p(0), p(1), p(2)]);
        let r = renumber(&rec, &[6, 7]);
        assert_eq!(psns(&r), vec![p(0), p(4)]);
    }

    #[test]
    fn units_follow_connections_and_steps() {
        let p = |session, step| Sent {
            session,
            step,
            arm: "valid".into(),
            qpn: record::QpnChoice::Peer,
            icrc: record::IcrcChoice::Right,
            psn: record::PsnBase::Ours,
            region: None,
            expect: None,
            bytes: vec![],
            time: Duration::ZERO,
        };
        let rec = Loaded {
            sessions: vec![],
            packets: vec![p(0, 1), p(0, 1), p(0, 2), p(1, 3), p(1, 3)],
            oracle: None,
            peer: None,
        };
        let all: Vec<usize> = (0..5).collect();
        assert_eq!(
            Level::Connection.units(&rec, &all),
            vec![vec![0, 1, 2], vec![3, 4]]
        );
        assert_eq!(
            Level::Step.units(&rec, &all),
            vec![vec![0, 1], vec![2], vec![3, 4]]
        );
        assert_eq!(Level::Packet.units(&rec, &all).len(), 5);
        assert_eq!(
            min_path(Path::new("out/liveness-seed3.pcap")),
            PathBuf::from("out/liveness-seed3.min.pcap")
        );
    }
}
