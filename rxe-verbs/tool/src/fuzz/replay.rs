//! `rxe fuzz --replay FILE.pcap`: resends what a campaign recorded, step
//! by step, on new connections to the peer.
//!
//! Each recorded connection gets a new one, made with the same initial PSN
//! of ours (so the PSNs we sent need no rewriting); in every packet, the
//! fields that named the old connection's peer QP name the new one, PSNs
//! counted from the peer's own PSN are counted from its new one, and a
//! right ICRC is recomputed (a wrong one stays wrong by the same bits), as
//! the `.meta` sidecar says. Before the next recorded connection is made,
//! one that may still be up (no answer on it ended the peer's QP) is ended
//! with a WRITE with R_Key 0, as the pingpong server serves one connection
//! at a time. Then the liveness check of a campaign runs.
//!
//! Against a perftest server the recorded READs of its buffer (arms
//! `canary` and `data`) are judged as the campaign judged them: the first
//! on a connection is the new buffer's baseline, and the canary and data
//! oracles fire the same way (see [`super::canary`]); every RETH, AtomicETH
//! and IETH that pointed into the old buffer points into the new one.
//!
//! [`execute`] is also what the minimiser runs for every candidate.

use super::campaign;
use super::config::{Config, Res};
use super::driver::Driver;
use super::mutate::Gen;
use super::oracle::{Check, Finding};
use super::record::{self, Sent, SessionInfo};
use super::session::Session;
use std::path::Path;
use std::time::Duration;

/// What a replay did and which oracles fired.
pub(crate) struct Outcome {
    pub d: Driver,
    /// Packets of the recording sent.
    pub replayed: usize,
    /// Why the liveness oracle fired, if it did.
    pub liveness: Option<String>,
}

impl Outcome {
    /// Whether the oracle named `oracle` fired.
    pub(crate) fn fired(&self, oracle: &str) -> bool {
        match oracle {
            "liveness" => self.liveness.is_some(),
            "peer-wire" => !self.d.link.unparsable.is_empty(),
            "sanity" => !self.d.rec.insane.is_empty(),
            // The oracles of the driver's list: canary, data, rkey.
            _ => self.d.has_fired(oracle),
        }
    }
}

/// Replays `pkts` (in order; the sessions they name are in `sessions`),
/// each recorded connection on a new one, then runs the final liveness
/// check. The first connection may take `ready` to be accepted (the peer
/// may still be recovering from an earlier run); without it nothing was
/// sent and the result is an error, not a finding.
pub(crate) fn execute(
    cfg: &Config,
    sessions: &[SessionInfo],
    pkts: &[&Sent],
    ready: Duration,
) -> Res<Outcome> {
    let mut d = Driver::new(cfg, 0, campaign::oracles(cfg, 0))?;
    let mut cur: Option<(u32, Session)> = None;
    // An answer on the current connection ended the peer's QP.
    let mut ended = false;
    let mut liveness = None;
    let mut replayed = 0usize;
    let mut last_fatal = false;
    let mut i = 0;
    while i < pkts.len() {
        let p = pkts[i];
        if cur.as_ref().map(|c| c.0) != Some(p.session) {
            let psn = sessions
                .iter()
                .find(|s| s.index == p.session)
                .map(|s| s.base_psn);
            let first = cur.is_none();
            if let Some((_, s)) = cur.as_mut() {
                if !ended {
                    d.end_quietly(s);
                }
            }
            let limit = if first { ready } else { cfg.liveness_timeout };
            match d.connect_within(psn, limit) {
                Ok(s) => cur = Some((p.session, s)),
                Err(e) if first => return Err(format!("setup: {e}")),
                Err(e) => {
                    liveness = Some(format!(
                        "no connection for recorded connection {}: {e}",
                        p.session
                    ));
                    break;
                }
            }
            ended = false;
        }
        let Some((_, s)) = cur.as_mut() else { break };
        // A legitimate READ of the region, judged by the canary and data
        // oracles as in the campaign.
        if let Some(c) = d.replay_own(s, p) {
            replayed += 1;
            last_fatal = c == Check::Dead;
            ended |= last_fatal;
            if cfg.verbose {
                println!("step {} {}: {c:?}", p.step, p.arm);
            }
            i += 1;
            if c == Check::Found {
                break;
            }
            continue;
        }
        let mut j = i;
        while j < pkts.len() && pkts[j].session == p.session && pkts[j].step == p.step {
            j += 1;
        }
        let gens: Vec<Gen> = pkts[i..j]
            .iter()
            .map(|p| Gen {
                bytes: p.bytes.clone(),
                qpn: p.qpn,
                icrc: p.icrc,
                psn: p.psn,
                wellformed: false,
                region: p.region,
            })
            .collect();
        replayed += d.send(s, &p.arm, &gens);
        // The campaign's windows: a probe right after a NAK that ends the
        // peer's QP waits briefly, other probes long.
        let window = match p.arm.as_str() {
            "probe" if last_fatal => cfg.window * 2,
            "probe" | "kill" => (cfg.window * 10).max(Duration::from_millis(300)),
            _ => cfg.window,
        };
        let a = d.answers(s, window);
        last_fatal = a.sig.fatal();
        ended |= last_fatal;
        if cfg.verbose {
            println!("step {} {}: {}", p.step, p.arm, a.sig.describe());
        }
        i = j;
        // An oracle fired on the step's answers (the rkey oracle: the
        // canary and data oracles fire on their READs, above).
        if d.fired().is_some() {
            break;
        }
    }
    if liveness.is_none() {
        liveness = d.final_check(cur.map(|c| c.1));
    }
    Ok(Outcome {
        d,
        replayed,
        liveness,
    })
}

/// Replays a recording. `Ok(true)` when an oracle fired.
pub(crate) fn run(cfg: &Config, file: &Path) -> Res<bool> {
    let rec = record::load(file)?;
    let sessions: Vec<u32> = {
        let mut v: Vec<u32> = rec.packets.iter().map(|p| p.session).collect();
        v.dedup();
        v
    };
    println!(
        "rxe fuzz: replaying {} packets of {} connections from {} at {} ({} exchange), from {}",
        rec.packets.len(),
        sessions.len(),
        file.display(),
        cfg.target,
        cfg.exchange(),
        cfg.local
    );
    let pkts: Vec<&Sent> = rec.packets.iter().collect();
    let Outcome {
        mut d,
        replayed,
        liveness,
    } = execute(cfg, &rec.sessions, &pkts, cfg.liveness_timeout)?;
    println!(
        "replayed {replayed} packets over {} connections ({} ACKs for the peer's own SENDs, {} refused by the socket)",
        d.sessions, d.link.upkeep, d.refused
    );
    d.print_histogram();
    let mut found: Vec<Finding> = Vec::new();
    match &liveness {
        None => println!("oracle liveness: ok"),
        Some(why) => {
            let path = d.write_finding("liveness-replay", why);
            println!("oracle liveness: FINDING {}", path.display());
            found.push(Finding {
                oracle: "liveness",
                path,
                replayable: true,
            });
        }
    }
    found.extend(d.verdicts("replay"));
    found.extend(d.other_oracles("replay"));
    if let Some(o) = &rec.oracle {
        let again = found.iter().any(|f| f.oracle == o);
        println!(
            "the recording is a finding of oracle {o}: {}",
            if again {
                "it fired again"
            } else {
                "it did not fire this time"
            }
        );
    }
    Ok(!found.is_empty())
}
