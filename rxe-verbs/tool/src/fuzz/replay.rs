//! `rxe fuzz --replay FILE.pcap`: resends what a campaign recorded, step
//! by step, on new connections to the peer.
//!
//! Each recorded connection gets a new one, made with the same initial PSN
//! of ours (so the PSNs we sent need no rewriting); in every packet, the
//! fields that named the old connection's peer QP name the new one, PSNs
//! counted from the peer's own PSN are counted from its new one, and a
//! right ICRC is recomputed (a wrong one stays wrong by the same bits), as
//! the `.meta` sidecar says. Then the liveness check of a campaign runs.

use super::campaign::Driver;
use super::mutate::Gen;
use super::record;
use super::session::Session;
use super::{Config, Res};
use std::path::Path;

/// Replays a recording. `Ok(true)` when an oracle fired.
pub(crate) fn run(cfg: &Config, file: &Path) -> Res<bool> {
    let rec = record::load(file)?;
    let mut d = Driver::new(cfg, 0)?;
    let sessions: Vec<u32> = {
        let mut v: Vec<u32> = rec.packets.iter().map(|p| p.session).collect();
        v.dedup();
        v
    };
    println!(
        "rxe fuzz: replaying {} packets of {} connections from {} at {} (pingpong exchange), from {}",
        rec.packets.len(),
        sessions.len(),
        file.display(),
        cfg.target,
        cfg.local
    );
    let mut cur: Option<(u32, Session)> = None;
    let mut liveness = None;
    let mut replayed = 0usize;
    let mut last_fatal = false;
    let mut i = 0;
    let pkts = &rec.packets;
    while i < pkts.len() {
        let p = &pkts[i];
        if cur.as_ref().map(|c| c.0) != Some(p.session) {
            let psn = rec
                .sessions
                .iter()
                .find(|s| s.index == p.session)
                .map(|s| s.base_psn);
            match d.connect(psn) {
                Ok(s) => cur = Some((p.session, s)),
                Err(e) => {
                    liveness = Some(format!(
                        "no connection for recorded connection {}: {e}",
                        p.session
                    ));
                    break;
                }
            }
        }
        let Some((_, s)) = cur.as_mut() else { break };
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
            })
            .collect();
        replayed += d.send(s, &p.arm, &gens);
        // The campaign's windows: a probe right after a NAK that ends the
        // peer's QP waits briefly, other probes long.
        let window = match p.arm.as_str() {
            "probe" if last_fatal => cfg.window * 2,
            "probe" | "kill" => (cfg.window * 10).max(std::time::Duration::from_millis(300)),
            _ => cfg.window,
        };
        let a = d.answers(s, window);
        last_fatal = a.sig.fatal();
        if cfg.verbose {
            println!("step {} {}: {}", p.step, p.arm, a.sig.describe());
        }
        i = j;
    }
    if liveness.is_none() {
        liveness = d.final_check(cur.map(|c| c.1));
    }
    println!(
        "replayed {replayed} packets over {} connections ({} ACKs for the peer's own SENDs, {} refused by the socket)",
        d.sessions, d.link.upkeep, d.refused
    );
    d.print_histogram();
    let mut found = false;
    match &liveness {
        None => println!("oracle liveness: ok"),
        Some(why) => {
            let path = d.write_finding("liveness-replay", why);
            println!("oracle liveness: FINDING {}", path.display());
            found = true;
        }
    }
    found |= d.other_oracles("replay");
    Ok(found)
}
