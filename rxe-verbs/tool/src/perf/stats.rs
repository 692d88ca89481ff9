//! Latency statistics as perftest computes and prints them: one table
//! line ([`LatReport`]) from the times of the posts.

use std::time::Duration;

/// perftest drops this many of the largest samples (`LAT_MEASURE_TAIL`).
const LAT_MEASURE_TAIL: usize = 2;

/// One line of a latency table (microseconds).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LatReport {
    pub size: u64,
    pub iters: u64,
    pub t_min: f64,
    pub t_max: f64,
    pub t_typical: f64,
    pub t_avg: f64,
    pub t_stdev: f64,
    pub p99: f64,
    pub p999: f64,
    /// `-D`: only `t_avg` and `tps` mean something.
    pub duration: bool,
    pub tps: f64,
}

/// `print_report_lat` from the times of the posts (ns): consecutive
/// differences divided by `rtt_factor`, sorted, the 2 largest dropped.
pub fn lat_stats(size: u64, tposted: &[u64], rtt_factor: f64) -> LatReport {
    let iters = tposted.len() as u64;
    let mut delta: Vec<f64> = tposted
        .windows(2)
        .map(|w| (w[1].saturating_sub(w[0])) as f64 / 1000.0 / rtt_factor)
        .collect();
    delta.sort_by(|a, b| a.total_cmp(b));
    if delta.len() <= LAT_MEASURE_TAIL {
        return LatReport {
            size,
            iters,
            ..LatReport::default()
        };
    }
    let n = delta.len() - LAT_MEASURE_TAIL;
    let median = if (n - 1) % 2 == 1 {
        (delta[n / 2] + delta[n / 2 - 1]) / 2.0
    } else {
        delta[n / 2]
    };
    let avg = delta[..n].iter().sum::<f64>() / n as f64;
    let var = delta[..n].iter().map(|d| (avg - d).powi(2)).sum::<f64>() / n as f64;
    let at = |q: f64| delta[((n as f64 * q).ceil() as usize).min(delta.len() - 1)];
    LatReport {
        size,
        iters,
        t_min: delta[0],
        t_max: delta[n],
        t_typical: median,
        t_avg: avg,
        t_stdev: var.sqrt(),
        p99: at(0.99),
        p999: at(0.999),
        duration: false,
        tps: 0.0,
    }
}

/// `print_report_lat_duration`.
pub fn duration_stats(size: u64, iters: u64, elapsed: Duration, rtt_factor: f64) -> LatReport {
    let us = elapsed.as_secs_f64() * 1e6;
    LatReport {
        size,
        iters,
        t_avg: if iters > 0 {
            us / rtt_factor / iters as f64
        } else {
            0.0
        },
        tps: iters as f64 / elapsed.as_secs_f64().max(1e-9),
        duration: true,
        ..LatReport::default()
    }
}
