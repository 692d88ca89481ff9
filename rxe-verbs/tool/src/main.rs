//! `rxe`: the rxe-rs command-line tool.
//!
//! Each subcommand is a module of its own holding a clap `Args` struct and a
//! `run(&Args) -> ExitCode` function; adding one (`demo`, `devinfo`,
//! `pingpong`, `perf`, ...) means adding the module and one variant of
//! [`Command`].
//!
//! Exit status: 0 on success, 1 when a subcommand's check fails (e.g.
//! `rxe dump --check` found bad packets), 2 when a file cannot be read or the
//! command line is wrong (clap's own choice for usage errors).

use clap::{Parser, Subcommand};
use std::process::ExitCode;

mod churn;
mod demo;
mod devinfo;
mod dump;
mod exec;
mod explain;
mod fuzz;
mod ladder;
mod lesson;
mod perf;
mod pingpong;
mod rping;
mod stress;

/// rxe-rs: a userspace RoCE v2 stack.
#[derive(Debug, Parser)]
#[command(name = "rxe", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print the RoCE v2 packets of a pcap or pcapng file, one line each
    /// (like tshark's summary), with their ICRC checked.
    Dump(dump::Args),
    /// Two processes on 127.0.0.2 and 127.0.0.3 do SEND/RECV, RDMA WRITE,
    /// READ and atomics over UDP port 4791, and print what moved.
    Demo(demo::Args),
    /// Show soft devices and their attributes, like `ibv_devinfo`.
    Devinfo(devinfo::Args),
    /// Ping-pong SENDs with a peer, like rdma-core's ibv_rc_pingpong,
    /// ibv_uc_pingpong, ibv_ud_pingpong and ibv_srq_pingpong (--mode).
    Pingpong(pingpong::Args),
    /// Measure bandwidth and latency like perftest's ib_write_bw, ib_read_bw,
    /// ib_send_bw, ib_atomic_bw, ib_write_lat, ib_read_lat and ib_send_lat
    /// (and face them), with a plain-UDP baseline for comparison.
    Perf(perf::Args),
    /// Run an unmodified libibverbs program (ibv_rc_pingpong, perftest,
    /// your own) over rxe-rs, with soft devices rxe0, rxe1, ... on the
    /// given addresses.
    Exec(exec::Args),
    /// librdmacm's rping over rxe-rs's rdma_cm: connect with the CM, then
    /// ping-pong RDMA READs and WRITEs (-s server, -c client).
    Rping(rping::Args),
    /// Fuzz a live RoCE peer (an ibv_rc_pingpong server): mutated packets
    /// on a real connection, steered by its answers, checked by oracles.
    Fuzz(fuzz::Args),
    /// Many QPs of every transport between two processes, a random mix of
    /// SEND, WRITE, READ and atomics, every byte checked (-d ADDR on the
    /// server; -d ADDR SERVER on the client).
    Stress(stress::Args),
    /// Create and destroy PDs, CQs, MRs, QPs, connections and devices in a
    /// loop; report memory, descriptors, threads and time per lifetime.
    Churn(churn::Args),
    /// Run a small seeded RoCE scenario (a SEND, a READ, a loss and
    /// go-back-N, an RNR NAK, ...) between two engines on the simulated
    /// network and write its packets to a pcap file (--list shows them).
    Lesson(lesson::Args),
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Dump(args) => dump::run(&args),
        Command::Demo(args) => demo::run(&args),
        Command::Devinfo(args) => devinfo::run(&args),
        Command::Pingpong(args) => pingpong::run(&args),
        Command::Perf(args) => perf::run(&args),
        Command::Exec(args) => exec::run(&args),
        Command::Rping(args) => rping::run(&args),
        Command::Fuzz(args) => fuzz::run(&args),
        Command::Stress(args) => stress::run(&args),
        Command::Churn(args) => churn::run(&args),
        Command::Lesson(args) => lesson::run(&args),
    }
}
