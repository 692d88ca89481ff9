//! `rxe exec -d ADDR [-d ADDR ...] -- PROGRAM [ARGS...]`: runs an
//! unmodified libibverbs or librdmacm program over rxe-rs.
//!
//! It puts the drop-in library (`libibverbs.so`, built by the workspace's
//! `cargo build`, next to this executable) first in the dynamic loader's
//! path under the names programs link against, `libibverbs.so.1` and
//! `librdmacm.so.1` (the one file is both libraries: the loader maps it
//! once), names the soft devices `rxe0`, `rxe1`, ... on the given
//! addresses, and replaces itself with the program. The environment it
//! sets, for doing the same without it (docs/drop-in.md):
//!
//! * `LD_LIBRARY_PATH=DIR` where `DIR/libibverbs.so.1` and
//!   `DIR/librdmacm.so.1` are symbolic links to the drop-in
//!   (`rxe exec --print-env` prints the exact lines);
//! * `RXE_DEVICES=rxe0=ADDR,rxe1=ADDR,...`;
//! * the device view (unless `--no-device-view`): `LD_PRELOAD` gains
//!   `librxe_devview.so` (beside the drop-in), and `RXE_DEVVIEW=DIR` names
//!   a tree of what the kernel would show of each device under
//!   `/sys/class/infiniband`, `/sys/class/infiniband_verbs` and
//!   `/dev/infiniband` ([`view`]), which middleware such as UCX and Open
//!   MPI reads before it uses a device. Programs the program starts
//!   (mpirun's ranks, a shell's children) inherit all of it.

mod view;

use clap::Parser;
use std::ffi::OsString;
use std::hash::BuildHasher;
use std::net::IpAddr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

#[derive(Debug, Parser)]
pub struct Args {
    /// A soft device on this local IP address (repeat for rxe1, rxe2, ...).
    #[arg(short = 'd', long = "dev", value_name = "ADDR", required = true)]
    devices: Vec<IpAddr>,
    /// The drop-in library to use instead of the one next to `rxe`
    /// (also `RXE_IBVERBS_LIB`).
    #[arg(long, value_name = "PATH")]
    lib: Option<PathBuf>,
    /// Print the environment the program would get, as shell lines, and
    /// run nothing.
    #[arg(long)]
    print_env: bool,
    /// No device view: leave LD_PRELOAD alone, so that paths under
    /// /sys/class/infiniband and /dev/infiniband are the system's.
    #[arg(long)]
    no_device_view: bool,
    /// The program and its arguments.
    #[arg(last = true, value_name = "PROGRAM [ARGS]...")]
    command: Vec<OsString>,
}

/// The drop-in library: `--lib`, or `libibverbs.so` beside this executable.
fn library(args: &Args) -> Result<PathBuf, String> {
    if let Some(p) = args
        .lib
        .clone()
        .or_else(|| std::env::var_os("RXE_IBVERBS_LIB").map(PathBuf::from))
    {
        return Ok(p);
    }
    let exe =
        std::env::current_exe().map_err(|e| format!("cannot find the rxe executable: {e}"))?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    let lib = dir.join("libibverbs.so");
    if lib.exists() {
        Ok(lib)
    } else {
        Err(format!(
            "{} does not exist: build the drop-in library with \
             `cargo build --release` (or `cargo build -p rxe-ibverbs` for a debug build), \
             or name it with --lib",
            lib.display()
        ))
    }
}

/// The names the drop-in stands in for, each a symbolic link to it.
const SONAMES: [&str; 2] = ["libibverbs.so.1", "librdmacm.so.1"];

/// A directory holding `libibverbs.so.1` and `librdmacm.so.1` -> `lib`:
/// `rxe-lib/` beside the library when it can be made there, else one in
/// the temporary directory.
fn loader_dir(lib: &Path) -> Result<PathBuf, String> {
    let lib = lib
        .canonicalize()
        .map_err(|e| format!("{}: {e}", lib.display()))?;
    let beside = lib.parent().map(|p| p.join("rxe-lib"));
    // One directory per library, so two builds never share one.
    let tag = std::hash::BuildHasherDefault::<std::hash::DefaultHasher>::default().hash_one(&lib);
    let tmp = std::env::temp_dir().join(format!("rxe-lib-{tag:016x}"));
    let mut last = String::new();
    for dir in beside.into_iter().chain([tmp]) {
        match link_in(&dir, &lib) {
            Ok(()) => return Ok(dir),
            Err(e) => last = format!("{}: {e}", dir.display()),
        }
    }
    Err(format!(
        "cannot make a directory for libibverbs.so.1 and librdmacm.so.1 ({last})"
    ))
}

fn link_in(dir: &Path, lib: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    for name in SONAMES {
        let link = dir.join(name);
        if std::fs::read_link(&link).is_ok_and(|t| t == lib) {
            continue;
        }
        // Replace whatever is there (another build's link) atomically.
        let tmp = dir.join(format!(".{name}.{}", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(lib, &tmp)?;
        std::fs::rename(&tmp, &link)?;
    }
    Ok(())
}

/// `name`, prepended to the colon-separated list in environment variable `var`.
fn prepend(var: &str, name: &OsString) -> OsString {
    let mut v = name.clone();
    if let Some(old) = std::env::var_os(var).filter(|p| !p.is_empty()) {
        v.push(":");
        v.push(old);
    }
    v
}

/// The environment the program gets.
fn environment(args: &Args, dir: &Path, lib: &Path) -> Result<Vec<(String, OsString)>, String> {
    let named: Vec<(String, IpAddr)> = args
        .devices
        .iter()
        .enumerate()
        .map(|(i, a)| (format!("rxe{i}"), *a))
        .collect();
    let devices = named
        .iter()
        .map(|(n, a)| format!("{n}={a}"))
        .collect::<Vec<_>>()
        .join(",");
    let mut env = vec![
        (
            "LD_LIBRARY_PATH".to_string(),
            prepend("LD_LIBRARY_PATH", &dir.into()),
        ),
        ("RXE_DEVICES".to_string(), devices.into()),
    ];
    if !args.no_device_view {
        let shim = lib.with_file_name("librxe_devview.so");
        if !shim.exists() {
            return Err(format!(
                "{} does not exist: build it with `cargo build --release` (or run \
                 with --no-device-view)",
                shim.display()
            ));
        }
        let tree = view::tree(&named)?;
        env.push((
            "LD_PRELOAD".to_string(),
            prepend("LD_PRELOAD", &shim.into()),
        ));
        env.push(("RXE_DEVVIEW".to_string(), tree.into()));
    }
    Ok(env)
}

pub fn run(args: &Args) -> ExitCode {
    let env = match library(args)
        .and_then(|l| Ok((loader_dir(&l)?, l)))
        .and_then(|(dir, lib)| environment(args, &dir, &lib))
    {
        Ok(e) => e,
        Err(e) => {
            eprintln!("rxe exec: {e}");
            return ExitCode::from(2);
        }
    };
    if args.print_env {
        for (k, v) in &env {
            println!("export {k}='{}'", v.to_string_lossy());
        }
        return ExitCode::SUCCESS;
    }
    let Some((program, rest)) = args.command.split_first() else {
        eprintln!("rxe exec: no program given (rxe exec -d ADDR -- PROGRAM [ARGS...])");
        return ExitCode::from(2);
    };
    let err = Command::new(program).args(rest).envs(env).exec();
    eprintln!("rxe exec: cannot run {}: {err}", program.to_string_lossy());
    ExitCode::from(127)
}
