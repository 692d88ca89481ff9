//! The latency tests, as perftest runs them: `run_iter_lat_write` (both
//! sides WRITE to each other and poll the last byte of their buffer for the
//! peer's counter; the server writes first), `run_iter_lat` (the client
//! READs, the server idles) and `run_iter_lat_send` (SEND ping-pong; the
//! client sends first). Latency is the time between consecutive posts,
//! halved for the ping-pongs, with perftest's statistics.

use super::args::{AtomicType, Config, Conn};
use super::oob::{Dest, Oob};
use super::report::{print_lat_header, print_lat_line, RESULT_LINE};
use super::stats::{duration_stats, lat_stats, LatReport};
use super::{check_wc, Measured, Res, Resources, GRH};
use rxe_verbs::*;
use std::time::{Duration, Instant};

const DEF_QKEY: u32 = 0x1111_1111;

/// Spins on a byte of the region until it holds `want`, yielding the core
/// between looks (the progress threads need it on a small machine).
fn wait_byte(res: &Resources, off: usize, want: u8, give_up: Instant) -> Res<bool> {
    let mut b = [0u8; 1];
    let mut spins = 0u32;
    loop {
        res.mr.read(off, &mut b).map_err(|e| e.to_string())?;
        if b[0] == want {
            return Ok(true);
        }
        spins += 1;
        if spins > 16 {
            std::thread::yield_now();
        }
        if spins.is_multiple_of(1024) && Instant::now() >= give_up {
            return Ok(false);
        }
    }
}

/// Waits for one completion on `cq` (into `wcs`, a vector the caller keeps
/// from one call to the next) and checks it.
fn one_completion(
    res: &Resources,
    cq: &CompletionQueue,
    wcs: &mut Vec<Completion>,
    cfg: &Config,
    what: &str,
) -> Res<()> {
    wcs.clear();
    let deadline = Instant::now() + cfg.timeout;
    while wcs.is_empty() {
        if res.wait(cq, wcs, 1, Duration::from_millis(200))? == 0 && Instant::now() >= deadline {
            return Err(format!("no {what} completion for {:?}", cfg.timeout));
        }
    }
    check_wc(&wcs[0], what)
}

fn remote(theirs: &[Dest], size: u64) -> RemoteRegion {
    RemoteRegion {
        addr: theirs[0].vaddr,
        len: size,
        rkey: theirs[0].rkey,
    }
}

/// write_lat: both sides measure and print; perftest 6.06 ends it without
/// a closing exchange.
pub fn write_lat(
    cfg: &Config,
    res: &Resources,
    theirs: &[Dest],
    sizes: &[u64],
) -> Res<Vec<Measured>> {
    print_lat_header(cfg);
    let mut out = Vec::new();
    for &size in sizes {
        let r = write_lat_one(cfg, res, theirs, size)?;
        print_lat_line(&r);
        out.push(Measured::Lat(r));
    }
    println!("{RESULT_LINE}");
    Ok(out)
}

fn write_lat_one(cfg: &Config, res: &Resources, theirs: &[Dest], size: u64) -> Res<LatReport> {
    let s = size as usize;
    let post_off = s - 1;
    let poll_off = res.target_off(0) + s - 1;
    let wr = SendWr::write(0, &[res.mr.sge(0..s)], remote(theirs, size));
    let server = !cfg.is_client();
    let iters = if cfg.duration.is_some() {
        u64::MAX
    } else {
        cfg.iters
    };
    let mut tposted = Vec::with_capacity(cfg.iters.min(1 << 24) as usize);
    let (mut scnt, mut rcnt, mut ccnt) = (0u64, 0u64, 0u64);
    let t0 = Instant::now();
    let end = cfg.duration.map(|d| t0 + d);
    let mut swcs = Vec::with_capacity(1);
    while scnt < iters || ccnt < iters || rcnt < iters {
        if end.is_some_and(|e| Instant::now() >= e) {
            break;
        }
        if rcnt < iters && !(scnt < 1 && server) {
            rcnt += 1;
            let give_up = end.map_or(Instant::now() + cfg.timeout, |e| e + Duration::from_secs(1));
            if !wait_byte(res, poll_off, rcnt as u8, give_up)? {
                if end.is_some() {
                    break;
                }
                return Err(format!(
                    "the peer's WRITE {rcnt} did not arrive within {:?}",
                    cfg.timeout
                ));
            }
        }
        if scnt < iters {
            if end.is_none() {
                tposted.push(t0.elapsed().as_nanos() as u64);
            }
            scnt += 1;
            res.mr
                .write(post_off, &[scnt as u8])
                .map_err(|e| e.to_string())?;
            res.qps[0]
                .post_send(std::slice::from_ref(&wr))
                .map_err(|e| format!("Couldn't post send: scnt={scnt}: {e}"))?;
        }
        if ccnt < iters {
            one_completion(res, &res.send_cq, &mut swcs, cfg, "send")?;
            ccnt += 1;
        }
    }
    Ok(match cfg.duration {
        Some(_) => duration_stats(size, scnt, t0.elapsed(), 2.0),
        None => lat_stats(size, &tposted, 2.0),
    })
}

/// The work request of read_lat (a READ of `size` bytes) or atomic_lat
/// (one 8-byte atomic, perftest's operands: add 1, or compare 0 swap 0).
fn read_or_atomic_wr(cfg: &Config, res: &Resources, theirs: &[Dest], size: u64) -> SendWr {
    let sge = [res.mr.sge(0..size as usize)];
    if !cfg.test.is_atomic() {
        return SendWr::read(0, &sge, remote(theirs, size));
    }
    let op = match cfg.atomic_type {
        AtomicType::FetchAndAdd => SendOpcode::AtomicFetchAdd,
        AtomicType::CmpAndSwap => SendOpcode::AtomicCmpSwap,
    };
    let mut wr = SendWr::new(0, op);
    wr.sg_list = sge.to_vec();
    wr.remote_addr = theirs[0].vaddr;
    wr.rkey = theirs[0].rkey;
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

/// read_lat and atomic_lat: the client READs (or does atomics) and
/// reports; the server only closes.
pub fn read_lat(
    cfg: &Config,
    oob: &mut Oob,
    res: &Resources,
    mine: &[Dest],
    theirs: &[Dest],
    sizes: &[u64],
) -> Res<Vec<Measured>> {
    let close_err =
        |e: std::io::Error| format!("Failed to close connection between server and client: {e}");
    if !cfg.is_client() {
        oob.close(&mine[0]).map_err(close_err)?;
        println!("{RESULT_LINE}");
        return Ok(Vec::new());
    }
    print_lat_header(cfg);
    let wr_name = if cfg.test.is_atomic() {
        "atomic"
    } else {
        "READ"
    };
    let mut out = Vec::new();
    for &size in sizes {
        let wr = read_or_atomic_wr(cfg, res, theirs, size);
        let mut tposted = Vec::with_capacity(cfg.iters as usize);
        let t0 = Instant::now();
        let end = cfg.duration.map(|d| t0 + d);
        let mut n = 0u64;
        let mut swcs = Vec::with_capacity(1);
        while end.map_or(n < cfg.iters, |e| Instant::now() < e) {
            if end.is_none() {
                tposted.push(t0.elapsed().as_nanos() as u64);
            }
            res.qps[0]
                .post_send(std::slice::from_ref(&wr))
                .map_err(|e| format!("Couldn't post send: scnt={n}: {e}"))?;
            one_completion(res, &res.send_cq, &mut swcs, cfg, wr_name)?;
            n += 1;
        }
        let r = match cfg.duration {
            Some(_) => duration_stats(size, n, t0.elapsed(), 1.0),
            None => lat_stats(size, &tposted, 1.0),
        };
        print_lat_line(&r);
        out.push(Measured::Lat(r));
    }
    oob.close(&mine[0]).map_err(close_err)?;
    println!("{RESULT_LINE}");
    Ok(out)
}

/// send_lat: receives posted, a handshake, then the ping-pong; both sides
/// print their own line.
pub fn send_lat(
    cfg: &Config,
    oob: &mut Oob,
    res: &Resources,
    mine: &[Dest],
    theirs: &[Dest],
    sizes: &[u64],
) -> Res<Vec<Measured>> {
    print_lat_header(cfg);
    let mut out = Vec::new();
    for &size in sizes {
        let posted = post_receives(cfg, res, size)?;
        oob.hand_shake(&mine[0])
            .map_err(|e| format!("Failed to exchange data between server and clients: {e}"))?;
        let r = send_lat_one(cfg, res, theirs, size, posted)?;
        print_lat_line(&r);
        out.push(Measured::Lat(r));
    }
    println!("{RESULT_LINE}");
    oob.close(&mine[0])
        .map_err(|e| format!("Failed to close connection between server and client: {e}"))?;
    Ok(out)
}

fn recv_wr(cfg: &Config, res: &Resources, size: u64) -> RecvWr {
    let off = res.target_off(0);
    let len = size as usize + if cfg.conn == Conn::Ud { GRH } else { 0 };
    RecvWr {
        wr_id: 0,
        sg_list: vec![res.mr.sge(off..off + len)],
    }
}

fn post_receives(cfg: &Config, res: &Resources, size: u64) -> Res<u64> {
    let n = if cfg.duration.is_some() {
        u64::from(cfg.rx_depth)
    } else {
        u64::from(cfg.rx_depth).min(cfg.iters)
    };
    res.qps[0]
        .post_recv(&vec![recv_wr(cfg, res, size); n as usize])
        .map_err(|e| format!("Couldn't post recv: {e}"))?;
    Ok(n)
}

fn send_lat_one(
    cfg: &Config,
    res: &Resources,
    theirs: &[Dest],
    size: u64,
    posted: u64,
) -> Res<LatReport> {
    let sge = [res.mr.sge(0..size as usize)];
    let mut wr = match &res.ah {
        Some(ah) => ah.send(0, &sge, theirs[0].qpn, DEF_QKEY),
        None => SendWr::send(0, &sge),
    };
    let client = cfg.is_client();
    let iters = if cfg.duration.is_some() {
        u64::MAX
    } else {
        cfg.iters
    };
    let cq_mod = u64::from(cfg.cq_mod.max(1));
    let mut tposted = Vec::with_capacity(cfg.iters.min(1 << 24) as usize);
    let (mut scnt, mut rcnt) = (0u64, 0u64);
    let mut wcs = Vec::with_capacity(4);
    // Built once and posted by reference, as perftest reuses its own.
    let rwr = recv_wr(cfg, res, size);
    let t0 = Instant::now();
    let end = cfg.duration.map(|d| t0 + d);
    let mut swcs = Vec::with_capacity(1);
    while scnt < iters || rcnt < iters {
        if end.is_some_and(|e| Instant::now() >= e) {
            break;
        }
        if rcnt < iters && !(scnt < 1 && client) {
            let give_up = end.map_or(Instant::now() + cfg.timeout, |e| e + Duration::from_secs(1));
            wcs.clear();
            while wcs.is_empty() {
                res.wait(&res.recv_cq, &mut wcs, 1, Duration::from_millis(200))?;
                if wcs.is_empty() && Instant::now() >= give_up {
                    if end.is_some() {
                        break;
                    }
                    return Err(format!(
                        "SEND {} did not arrive within {:?}",
                        rcnt + 1,
                        cfg.timeout
                    ));
                }
            }
            if wcs.is_empty() {
                break;
            }
            check_wc(&wcs[0], "receive")?;
            rcnt += 1;
            if end.is_some() || rcnt + posted <= iters {
                res.qps[0]
                    .post_recv(std::slice::from_ref(&rwr))
                    .map_err(|e| format!("Couldn't post recv: rcnt={rcnt}: {e}"))?;
            }
        }
        if scnt < iters {
            if end.is_none() {
                tposted.push(t0.elapsed().as_nanos() as u64);
            }
            scnt += 1;
            let signaled = scnt.is_multiple_of(cq_mod) || scnt == iters;
            wr.flags = if signaled {
                SendFlags::SIGNALED
            } else {
                SendFlags::empty()
            };
            res.qps[0]
                .post_send(std::slice::from_ref(&wr))
                .map_err(|e| format!("Couldn't post send: scnt={scnt}: {e}"))?;
            if signaled {
                one_completion(res, &res.send_cq, &mut swcs, cfg, "send")?;
            }
        }
    }
    Ok(match cfg.duration {
        Some(_) => duration_stats(size, scnt, t0.elapsed(), 2.0),
        None => lat_stats(size, &tposted, 2.0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perftest_statistics() {
        // Posts 10 µs apart, except two slow ones that the tail drops.
        let mut t = vec![0u64];
        for i in 1..=12u64 {
            let step = if i == 5 || i == 9 { 100_000 } else { 10_000 };
            t.push(t[i as usize - 1] + step);
        }
        let r = lat_stats(64, &t, 2.0);
        assert_eq!(r.iters, 13);
        assert_eq!(r.t_min, 5.0);
        assert_eq!(r.t_typical, 5.0);
        assert_eq!(r.t_avg, 5.0);
        assert_eq!(r.t_stdev, 0.0);
        // t_max is the first dropped sample, as in perftest.
        assert_eq!(r.t_max, 50.0);
    }
}
