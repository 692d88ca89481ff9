//! The bandwidth tests: `run_iter_bw` (client; WRITE, READ, atomics and
//! SENDs) and `run_iter_bw_server` (the receiving side of send_bw), with
//! perftest's accounting: up to `tx_depth` work requests outstanding per QP,
//! one completion every `cq_mod` of them, peak bandwidth from the posting
//! and completion times, average from the first post to the last completion.

use super::args::{AtomicType, Config, Conn, Test};
use super::oob::{hs_err, BwReport, Dest, Oob};
use super::report::{print_bw_header, print_bw_line, RESULT_LINE};
use super::{check_wc, Measured, Res, Resources, GRH};
use rxe_verbs::*;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// The Q_Key perftest gives UD QPs (`DEF_QKEY`).
const DEF_QKEY: u32 = 0x1111_1111;

/// bytes/ns → the report's unit (MB/s = 2^20 B/s, Gb/s = 10^9 bit/s).
fn bw_units(cfg: &Config, bytes: f64, ns: f64) -> f64 {
    if ns <= 0.0 {
        return 0.0;
    }
    let per_sec = bytes * 1e9 / ns;
    if cfg.report_gbits {
        per_sec / 125_000_000.0
    } else {
        per_sec / 1_048_576.0
    }
}

/// write_bw, read_bw, atomic_bw: the client measures, the server waits for
/// the client's report and prints it.
pub fn rdma_bw(
    cfg: &Config,
    oob: &mut Oob,
    res: &Resources,
    mine: &[Dest],
    theirs: &[Dest],
    sizes: &[u64],
) -> Res<Vec<Measured>> {
    print_bw_header(cfg);
    if !cfg.is_client() {
        let rep = oob.finish_rdma_bw(&mine[0], &BwReport::default())?;
        print_bw_line(cfg, &rep);
        println!("{RESULT_LINE}");
        return Ok(vec![Measured::Bw(rep)]);
    }
    let mut out = Vec::new();
    let mut last = BwReport::default();
    for &size in sizes {
        last = post_loop(cfg, res, theirs, size)?;
        print_bw_line(cfg, &last);
        out.push(Measured::Bw(last));
    }
    println!("{RESULT_LINE}");
    oob.finish_rdma_bw(&mine[0], &last)?;
    Ok(out)
}

/// send_bw: the client sends, the server receives; each prints its own line.
pub fn send_bw(
    cfg: &Config,
    oob: &mut Oob,
    res: &Resources,
    mine: &[Dest],
    theirs: &[Dest],
    sizes: &[u64],
) -> Res<Vec<Measured>> {
    print_bw_header(cfg);
    let mut out = Vec::new();
    for &size in sizes {
        let rep = if cfg.is_client() {
            oob.hand_shake(&mine[0]).map_err(hs_err)?;
            post_loop(cfg, res, theirs, size)?
        } else {
            let posted = post_receives(cfg, res, size)?;
            oob.hand_shake(&mine[0]).map_err(hs_err)?;
            // The client starts sending when it has read our half of the
            // handshake: time from there.
            receive_loop(cfg, res, size, posted, Instant::now())?
        };
        print_bw_line(cfg, &rep);
        out.push(Measured::Bw(rep));
        if cfg.all {
            oob.hand_shake(&mine[0]).map_err(hs_err)?;
        }
    }
    println!("{RESULT_LINE}");
    oob.close(&mine[0])
        .map_err(|e| format!("Failed to close connection between server and client: {e}"))?;
    Ok(out)
}

/// The work request QP `i` posts over and over.
fn template(cfg: &Config, res: &Resources, theirs: &[Dest], i: usize, size: u64) -> SendWr {
    let off = res.send_off(i);
    let sge = [res.mr.sge(off..off + size as usize)];
    let d = &theirs[i];
    let remote = RemoteRegion {
        addr: d.vaddr,
        len: size,
        rkey: d.rkey,
    };
    match cfg.test {
        Test::WriteBw => SendWr::write(0, &sge, remote),
        Test::ReadBw => SendWr::read(0, &sge, remote),
        Test::AtomicBw => {
            let op = match cfg.atomic_type {
                AtomicType::FetchAndAdd => SendOpcode::AtomicFetchAdd,
                AtomicType::CmpAndSwap => SendOpcode::AtomicCmpSwap,
            };
            let mut wr = SendWr::new(0, op);
            wr.sg_list = sge.to_vec();
            wr.remote_addr = d.vaddr;
            wr.rkey = d.rkey;
            wr.compare_add = match cfg.atomic_type {
                AtomicType::FetchAndAdd => 1,
                AtomicType::CmpAndSwap => 0,
            };
            // perftest's compare-and-swap compares with 0 and swaps in 0
            // (seen on the wire from ib_atomic_bw/_lat 6.06): against its random
            // buffer it never matches and leaves memory as it was.
            wr.swap = 0;
            wr
        }
        _ => match &res.ah {
            Some(ah) => ah.send(0, &sge, d.qpn, DEF_QKEY),
            None => SendWr::send(0, &sge),
        },
    }
}

/// `run_iter_bw`: posts `iters` work requests per QP (or for `-D` seconds)
/// and reports.
fn post_loop(cfg: &Config, res: &Resources, theirs: &[Dest], size: u64) -> Res<BwReport> {
    let nq = res.qps.len();
    let templates: Vec<SendWr> = (0..nq)
        .map(|i| template(cfg, res, theirs, i, size))
        .collect();
    let iters = cfg.iters;
    let duration = cfg.duration;
    let total = iters * nq as u64;
    let cq_mod = u64::from(cfg.cq_mod);
    let tx_depth = u64::from(cfg.tx_depth);
    let record = duration.is_none();
    let mut tposted = vec![0u64; if record { total as usize } else { 0 }];
    let mut tcompleted = vec![0u64; if record { total as usize } else { 0 }];
    let (mut scnt, mut ccnt) = (vec![0u64; nq], vec![0u64; nq]);
    // Per QP, the count each signaled work request completes up to.
    let mut signals: Vec<VecDeque<u64>> = vec![VecDeque::new(); nq];
    let mut last_signaled = vec![0u64; nq];
    let (mut tot_scnt, mut tot_ccnt) = (0u64, 0u64);
    let mut wcs: Vec<Completion> = Vec::with_capacity(256);
    // The work requests posted, built once and refilled in place (as
    // perftest reuses its `ibv_send_wr` array): a clone per request was an
    // allocation and a free per message.
    let mut batch: Vec<SendWr> = vec![templates[0].clone(); tx_depth.max(1) as usize];
    let t0 = Instant::now();
    let deadline = duration.map(|d| t0 + d);
    let mut last_progress = Instant::now();
    let mut t_end = t0;
    loop {
        let stop_posting = deadline.is_some_and(|d| Instant::now() >= d);
        for q in 0..nq {
            let mut k = 0;
            if stop_posting {
                // End on a signaled request so that everything completes.
                if scnt[q] > last_signaled[q] {
                    refill(&mut batch[0], &templates[q], q, SendFlags::SIGNALED);
                    k = 1;
                }
            } else {
                // Post what the window allows in one call.
                while scnt[q] - ccnt[q] + (k as u64) < tx_depth {
                    let n = scnt[q] + k as u64;
                    if record && n >= iters {
                        break;
                    }
                    let last = record && n + 1 == iters;
                    let flags = if (n + 1).is_multiple_of(cq_mod) || last {
                        SendFlags::SIGNALED
                    } else {
                        SendFlags::empty()
                    };
                    refill(&mut batch[k], &templates[q], q, flags);
                    k += 1;
                }
            }
            if k == 0 {
                continue;
            }
            let batch = &batch[..k];
            if record {
                let now = t0.elapsed().as_nanos() as u64;
                for k in 0..batch.len() {
                    tposted[tot_scnt as usize + k] = now;
                }
            }
            res.qps[q]
                .post_send(batch)
                .map_err(|e| format!("Couldn't post send: qp {q} scnt={}: {e}", scnt[q]))?;
            for wr in batch {
                scnt[q] += 1;
                if wr.flags.contains(SendFlags::SIGNALED) {
                    signals[q].push_back(scnt[q]);
                    last_signaled[q] = scnt[q];
                }
            }
            tot_scnt += batch.len() as u64;
        }
        let outstanding: u64 = (0..nq).map(|q| scnt[q] - ccnt[q]).sum();
        if record && tot_ccnt >= total {
            break;
        }
        if !record && stop_posting && outstanding == 0 {
            break;
        }
        wcs.clear();
        let got = res.wait(&res.send_cq, &mut wcs, 256, Duration::from_millis(100))?;
        if got == 0 {
            if last_progress.elapsed() > cfg.timeout {
                return Err(format!(
                    "no completion for {:?} (posted {tot_scnt}, completed {tot_ccnt})",
                    cfg.timeout
                ));
            }
            continue;
        }
        last_progress = Instant::now();
        let now = t0.elapsed().as_nanos() as u64;
        for wc in &wcs {
            check_wc(wc, "client")?;
            let q = wc.wr_id as usize;
            let upto = signals
                .get_mut(q)
                .and_then(|s| s.pop_front())
                .ok_or(format!("unexpected completion (wr_id {})", wc.wr_id))?;
            // A signaled completion stands for every request before it.
            tot_ccnt += upto - ccnt[q];
            ccnt[q] = upto;
            if record && tot_ccnt > 0 {
                tcompleted[(tot_ccnt - 1) as usize] = now;
            }
        }
        t_end = Instant::now();
    }
    let done = tot_ccnt;
    let elapsed = if record {
        (tcompleted[(total - 1) as usize] - tposted[0]) as f64
    } else {
        (t_end - t0).as_nanos() as f64
    };
    let bw_avg = bw_units(cfg, size as f64 * done as f64, elapsed);
    let msg_rate = if elapsed > 0.0 {
        done as f64 * 1e3 / elapsed
    } else {
        0.0
    };
    let bw_peak = if record {
        let opt = peak_delta(&tposted, &tcompleted, cq_mod as usize);
        bw_units(cfg, size as f64, opt)
    } else {
        0.0
    };
    Ok(BwReport {
        size,
        iters: done,
        bw_peak,
        bw_avg,
        msg_rate,
    })
}

/// Makes `wr` QP `q`'s request from its template, with `flags`, reusing
/// `wr`'s gather list.
fn refill(wr: &mut SendWr, template: &SendWr, q: usize, flags: SendFlags) {
    wr.sg_list.clear();
    wr.sg_list.extend_from_slice(&template.sg_list);
    wr.wr_id = q as u64;
    wr.opcode = template.opcode;
    wr.flags = flags;
    wr.remote_addr = template.remote_addr;
    wr.rkey = template.rkey;
    wr.compare_add = template.compare_add;
    wr.swap = template.swap;
    wr.ud = template.ud;
}

/// perftest's peak: the smallest time per message over every run from a
/// post to a later completion (completions are stamped every `cq_mod`).
/// Not inlined, so that a profile of the measured loop can leave it out
/// (it runs after the loop and costs O(n²/cq_mod), sampled).
#[inline(never)]
fn peak_delta(tposted: &[u64], tcompleted: &[u64], cq_mod: usize) -> f64 {
    let n = tposted.len();
    let mut opt = (tcompleted[n - 1] - tposted[0]) as f64;
    // Bound the work for long runs: sample the starting points.
    let work = (n as u64 * n as u64) / (2 * cq_mod as u64).max(1);
    let step = (work / 5_000_000).max(1) as usize;
    for i in (0..n).step_by(step) {
        let mut j = (i + 1).div_ceil(cq_mod) * cq_mod - 1;
        let mut consider = |j: usize| {
            let c = tcompleted[j];
            if c > tposted[i] {
                let t = (c - tposted[i]) as f64 / (j - i + 1) as f64;
                if t < opt {
                    opt = t;
                }
            }
        };
        while j < n {
            consider(j);
            j += cq_mod;
        }
        if !n.is_multiple_of(cq_mod) {
            consider(n - 1);
        }
    }
    opt
}

/// Posts the receives of send_bw's server; returns how many per QP.
fn post_receives(cfg: &Config, res: &Resources, size: u64) -> Res<u64> {
    let per_qp = if cfg.duration.is_some() {
        u64::from(cfg.rx_depth)
    } else {
        u64::from(cfg.rx_depth).min(cfg.iters)
    };
    for (i, qp) in res.qps.iter().enumerate() {
        let wrs = vec![recv_wr(cfg, res, i, size); per_qp as usize];
        qp.post_recv(&wrs)
            .map_err(|e| format!("Couldn't post recv Qp = {i}: {e}"))?;
    }
    Ok(per_qp)
}

fn recv_wr(cfg: &Config, res: &Resources, i: usize, size: u64) -> RecvWr {
    let off = res.target_off(i);
    let len = size as usize + if cfg.conn == Conn::Ud { GRH } else { 0 };
    RecvWr {
        wr_id: i as u64,
        sg_list: vec![res.mr.sge(off..off + len)],
    }
}

/// `run_iter_bw_server`: counts the SENDs that arrive, keeping receives
/// posted, from `start` (the end of the handshake that lets the client go)
/// to the last arrival. Like perftest's server it has no peak (0.00).
fn receive_loop(
    cfg: &Config,
    res: &Resources,
    size: u64,
    posted: u64,
    start: Instant,
) -> Res<BwReport> {
    let nq = res.qps.len();
    let iters = cfg.iters;
    let total = iters * nq as u64;
    let mut rcnt = vec![0u64; nq];
    let mut outstanding = vec![posted; nq];
    let mut tot = 0u64;
    let mut wcs: Vec<Completion> = Vec::with_capacity(256);
    // One receive per QP, built once and posted again and again.
    let rwrs: Vec<RecvWr> = (0..nq).map(|q| recv_wr(cfg, res, q, size)).collect();
    let mut first: Option<Instant> = None;
    let mut last = Instant::now();
    let mut last_progress = Instant::now();
    loop {
        if cfg.duration.is_none() && tot >= total {
            break;
        }
        if let (Some(d), Some(f)) = (cfg.duration, first) {
            if f.elapsed() >= d && last.elapsed() > Duration::from_millis(300) {
                break;
            }
        }
        // UD has no retransmission: what was dropped never comes. Stop when
        // the SENDs have stopped coming, and say how many were lost.
        if cfg.conn == Conn::Ud && first.is_some() && last.elapsed() > Duration::from_millis(500) {
            if cfg.duration.is_none() {
                eprintln!(
                    " UD: {} of {total} SENDs received ({} lost)",
                    tot,
                    total - tot
                );
            }
            break;
        }
        wcs.clear();
        let got = res.wait(&res.recv_cq, &mut wcs, 256, Duration::from_millis(100))?;
        if got == 0 {
            if last_progress.elapsed() > cfg.timeout {
                return Err(format!(
                    "no SEND arrived for {:?} ({tot} of {total} received)",
                    cfg.timeout
                ));
            }
            continue;
        }
        let now = Instant::now();
        last_progress = now;
        first.get_or_insert(now);
        last = now;
        for wc in &wcs {
            check_wc(wc, "server")?;
            let q = wc.wr_id as usize;
            if q >= nq {
                return Err(format!("completion for unknown wr_id {}", wc.wr_id));
            }
            rcnt[q] += 1;
            outstanding[q] -= 1;
            tot += 1;
            if cfg.duration.is_some() || rcnt[q] + outstanding[q] < iters {
                res.qps[q]
                    .post_recv(std::slice::from_ref(&rwrs[q]))
                    .map_err(|e| format!("Couldn't post recv Qp={q} rcnt={}: {e}", rcnt[q]))?;
                outstanding[q] += 1;
            }
        }
    }
    let ns = first.map_or(0.0, |_| (last - start).as_nanos() as f64);
    Ok(BwReport {
        size,
        iters: tot,
        bw_peak: 0.0,
        bw_avg: bw_units(cfg, size as f64 * tot as f64, ns),
        msg_rate: if ns > 0.0 { tot as f64 * 1e3 / ns } else { 0.0 },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peak_is_the_best_window() {
        // 4 messages, a completion stamped every 2: posted at 0,0,10,10;
        // completions at 20 (index 1) and 30 (index 3).
        let tp = [0, 0, 10, 10];
        let tc = [0, 20, 0, 30];
        // From i=2 to j=3: (30-10)/2 = 10 per message; from 0 to 3: 30/4.
        assert_eq!(peak_delta(&tp, &tc, 2), 7.5);
    }
}
