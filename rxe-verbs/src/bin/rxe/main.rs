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

mod dump;

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
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Dump(args) => dump::run(&args),
    }
}
