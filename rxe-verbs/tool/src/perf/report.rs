//! perftest's output: the test header (`ctx_print_test_info`), the address
//! lines (`ctx_print_pingpong_data`), the result tables (`print_report_bw`,
//! `print_report_lat`) with perftest's `printf` formats, and `--out_json`.

use super::args::{Config, Conn, Kind, Test};
use super::oob::{BwReport, Dest};
use super::stats::LatReport;
use super::{Measured, Res};
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;

/// `RESULT_LINE`.
pub const RESULT_LINE: &str =
    "---------------------------------------------------------------------------------------";
/// `RESULT_FMT` / `RESULT_FMT_G`.
pub const RESULT_FMT: &str =
    " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]";
pub const RESULT_FMT_G: &str =
    " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]";
/// `RESULT_FMT_LAT` / `RESULT_FMT_LAT_DUR`.
pub const RESULT_FMT_LAT: &str = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ";
pub const RESULT_FMT_LAT_DUR: &str = " #bytes        #iterations       t_avg[usec]    tps average";

/// C's `%#0Nx`: `0x` and at least N-2 digits, but a zero is N zeros.
pub fn alt_hex(v: u64, width: usize) -> String {
    if v == 0 {
        format!("{:0width$}", 0)
    } else {
        format!("0x{:0w$x}", v, w = width.saturating_sub(2))
    }
}

/// C's `%-W.Pf`.
fn left(v: f64, prec: usize, width: usize) -> String {
    format!("{:<width$}", format!("{v:.prec$}"))
}

/// `ctx_print_test_info`.
pub fn print_test_info(cfg: &Config) {
    let mut t = String::new();
    t.push_str(RESULT_LINE);
    t.push('\n');
    t.push_str("                    ");
    t.push_str(cfg.test.verb());
    t.push(' ');
    if cfg.test.is_atomic() {
        t.push_str(cfg.atomic_type.name());
        t.push(' ');
    }
    t.push_str(match cfg.test.kind() {
        Kind::Bw => "BW ",
        Kind::Lat => "Latency ",
    });
    t.push_str("Test\n");
    if cfg.events {
        t.push_str(&format!(
            " Test with events. Using {}_comp0\n",
            cfg.dev_name
        ));
    }
    t.push_str(&format!(
        " Dual-port       : OFF\t\tDevice         : {}\n",
        cfg.dev_name
    ));
    t.push_str(&format!(
        " Number of qps   : {}\t\tTransport type : IB\n",
        cfg.qps
    ));
    t.push_str(&format!(
        " Connection type : {}\t\tUsing SRQ      : OFF\n",
        cfg.conn.name()
    ));
    t.push_str(" PCIe relax order: OFF\n");
    t.push_str(" ibv_wr* API     : OFF\n");
    let send = matches!(cfg.test, Test::SendBw | Test::SendLat);
    if cfg.is_client() || cfg.test.kind() == Kind::Lat {
        t.push_str(&format!(" TX depth        : {}\n", cfg.tx_depth));
    }
    if send && (!cfg.is_client() || cfg.test.kind() == Kind::Lat) {
        t.push_str(&format!(" RX depth        : {}\n", cfg.rx_depth));
    }
    if cfg.test.kind() == Kind::Bw {
        t.push_str(&format!(" CQ Moderation   : {}\n", cfg.cq_mod));
    }
    t.push_str(&format!(" Mtu             : {}[B]\n", cfg.mtu.bytes()));
    t.push_str(" Link type       : Ethernet\n");
    t.push_str(&format!(" GID index       : {}\n", cfg.gid_index));
    if matches!(
        cfg.test,
        Test::ReadBw | Test::ReadLat | Test::AtomicBw | Test::AtomicLat
    ) {
        t.push_str(&format!(" Outstand reads  : {}\n", cfg.out_reads));
    } else {
        t.push_str(" Max inline data : 0[B]\n");
    }
    t.push_str(" rdma_cm QPs\t : OFF\n");
    t.push_str(" Data ex. method : Ethernet\n");
    t.push_str(RESULT_LINE);
    println!("{t}");
}

/// `ctx_print_pingpong_data`: the address line and the GID line.
pub fn print_dest(cfg: &Config, d: &Dest, side: &str) {
    let mut l = format!(
        " {side} address: LID {} QPN {} PSN {}",
        alt_hex(u64::from(d.lid), 4),
        alt_hex(u64::from(d.qpn), 6),
        alt_hex(u64::from(d.psn), 6)
    );
    match cfg.test {
        Test::ReadBw | Test::ReadLat => {
            l.push_str(&format!(" OUT {}", alt_hex(u64::from(d.out_reads), 4)));
            l.push_str(&format!(
                " RKey {} VAddr {}",
                alt_hex(u64::from(d.rkey), 8),
                alt_hex(d.vaddr, 16)
            ));
        }
        Test::WriteBw | Test::WriteLat => l.push_str(&format!(
            " RKey {} VAddr {}",
            alt_hex(u64::from(d.rkey), 8),
            alt_hex(d.vaddr, 16)
        )),
        _ => {}
    }
    let gid: Vec<String> = d.gid.iter().map(|b| format!("{b:02}")).collect();
    println!("{l}\n GID: {}", gid.join(":"));
}

/// The BW table's header.
pub fn print_bw_header(cfg: &Config) {
    println!("{RESULT_LINE}");
    println!(
        "{}",
        if cfg.report_gbits {
            RESULT_FMT_G
        } else {
            RESULT_FMT
        }
    );
}

/// `print_full_bw_report`: one line (`REPORT_FMT`, or `REPORT_FMT_EXT` for
/// small Gb/s figures).
pub fn print_bw_line(cfg: &Config, r: &BwReport) {
    if r.bw_avg < 0.1 && cfg.report_gbits {
        println!(
            " {:<7}    {}           {}            {}            {}",
            r.size,
            r.iters,
            left(r.bw_peak, 6, 7),
            left(r.bw_avg, 6, 7),
            left(r.msg_rate, 6, 7)
        );
    } else {
        println!(
            " {:<7}    {:<10}       {}            {}\t\t   {}",
            r.size,
            r.iters,
            left(r.bw_peak, 2, 7),
            left(r.bw_avg, 2, 7),
            left(r.msg_rate, 6, 7)
        );
    }
}

/// The latency table's header.
pub fn print_lat_header(cfg: &Config) {
    println!("{RESULT_LINE}");
    println!(
        "{}",
        if cfg.duration.is_some() {
            RESULT_FMT_LAT_DUR
        } else {
            RESULT_FMT_LAT
        }
    );
}

/// `print_report_lat` / `print_report_lat_duration`.
pub fn print_lat_line(r: &LatReport) {
    if r.duration {
        println!(
            " {:<7}       {}            {}        {}",
            r.size,
            r.iters,
            left(r.t_avg, 2, 7),
            left(r.tps, 2, 7)
        );
    } else {
        println!(
            " {:<7} {}          {}        {}      {}  \t       {}     \t{}\t\t{} \t\t{}",
            r.size,
            r.iters,
            left(r.t_min, 2, 7),
            left(r.t_max, 2, 7),
            left(r.t_typical, 2, 7),
            left(r.t_avg, 2, 7),
            left(r.t_stdev, 2, 7),
            left(r.p99, 2, 7),
            left(r.p999, 2, 7)
        );
    }
}

fn bw_json(r: &BwReport) -> Value {
    json!({
        "MsgSize": r.size,
        "n_iterations": r.iters,
        "BW_peak": r.bw_peak,
        "BW_average": r.bw_avg,
        "MsgRate": r.msg_rate,
    })
}

fn lat_json(r: &LatReport) -> Value {
    if r.duration {
        return json!({
            "MsgSize": r.size,
            "n_iterations": r.iters,
            "t_avg": r.t_avg,
            "tps_average": r.tps,
        });
    }
    json!({
        "MsgSize": r.size,
        "n_iterations": r.iters,
        "t_min": r.t_min,
        "t_max": r.t_max,
        "t_typical": r.t_typical,
        "t_avg": r.t_avg,
        "t_stdev": r.t_stdev,
        "percentile_99": r.p99,
        "percentile_99.9": r.p999,
    })
}

/// `--out_json`: the test's parameters and results (perftest's key names),
/// and the baseline's JSON (`Baseline::to_json`, with the ratio) when
/// there is one.
pub fn write_json(
    path: &Path,
    cfg: &Config,
    measured: &[Measured],
    baseline: Option<Value>,
    elapsed: Duration,
) -> Res<()> {
    let results: Vec<Value> = measured
        .iter()
        .map(|m| match m {
            Measured::Bw(r) => bw_json(r),
            Measured::Lat(r) => lat_json(r),
        })
        .collect();
    let mut v = json!({
        "test": cfg.test.name(),
        "side": if cfg.is_client() { "client" } else { "server" },
        "Device": cfg.dev_name,
        "Number_of_qps": cfg.qps,
        "Connection_type": cfg.conn.name(),
        "Mtu": cfg.mtu.bytes(),
        "Link_type": "Ethernet",
        "TX_depth": cfg.tx_depth,
        "GID_index": cfg.gid_index,
        "rdma_cm_QPs": "OFF",
        "Data_ex_method": "Ethernet",
        "units": if cfg.test.kind() == Kind::Lat { "usec" } else if cfg.report_gbits { "Gb/sec" } else { "MB/sec" },
        "results": results,
        "elapsed_sec": elapsed.as_secs_f64(),
    });
    if cfg.conn == Conn::Ud {
        v["UD"] = json!(true);
    }
    if let Some(b) = baseline {
        v["baseline"] = b;
    }
    let text = serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?;
    std::fs::write(path, text + "\n").map_err(|e| format!("failed to open {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c_alternate_hex() {
        // printf("%#04x", 0) is "0000"; printf("%#06x", 0x11) is "0x0011".
        assert_eq!(alt_hex(0, 4), "0000");
        assert_eq!(alt_hex(0x11, 6), "0x0011");
        assert_eq!(alt_hex(0x7b5b0e, 6), "0x7b5b0e");
        assert_eq!(alt_hex(0x209, 8), "0x000209");
        assert_eq!(alt_hex(0x7f0f6ee4f000, 16), "0x007f0f6ee4f000");
    }

    #[test]
    fn left_aligned_floats() {
        assert_eq!(left(1103.849, 2, 7), "1103.85");
        assert_eq!(left(1.5, 2, 7), "1.50   ");
        assert_eq!(left(0.017659, 6, 7), "0.017659");
    }
}
