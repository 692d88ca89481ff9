//! A peer's server for `rxe fuzz` tests, started again whenever it ends
//! (a fuzzer's users run `ibv_rc_pingpong`, `rping -s` or perftest in a
//! shell loop: most refused packets end the server's connection, and the
//! program with it), until the loop is dropped. Optionally broken on
//! purpose with `RXE_TEST_FAULT` (docs/fuzz-peers.md). Keeps what every
//! run printed on stderr and counts the runs.

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub struct ServerLoop {
    stop: Arc<AtomicBool>,
    stderr: Arc<Mutex<String>>,
    runs: Arc<Mutex<u64>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ServerLoop {
    /// `program args`, run again whenever it ends, with
    /// `RXE_TEST_FAULT=fault` in its environment (none for `None`).
    pub fn start(program: PathBuf, args: &[&str], fault: Option<&str>) -> ServerLoop {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let fault = fault.map(str::to_string);
        let stop = Arc::new(AtomicBool::new(false));
        let stderr = Arc::new(Mutex::new(String::new()));
        let runs = Arc::new(Mutex::new(0));
        let (st, se, ru) = (stop.clone(), stderr.clone(), runs.clone());
        let thread = std::thread::spawn(move || {
            while !st.load(Ordering::Relaxed) {
                let mut cmd = Command::new(&program);
                match &fault {
                    Some(f) => cmd.env("RXE_TEST_FAULT", f),
                    None => cmd.env_remove("RXE_TEST_FAULT"),
                };
                let Ok(mut child) = cmd
                    .args(&args)
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                else {
                    se.lock()
                        .unwrap()
                        .push_str(&format!("cannot start {}\n", program.display()));
                    return;
                };
                *ru.lock().unwrap() += 1;
                // Read stderr as it comes, so that a chatty run cannot
                // fill the pipe and stall.
                let mut pipe = child.stderr.take();
                let reader = std::thread::spawn(move || {
                    let mut s = String::new();
                    if let Some(p) = pipe.as_mut() {
                        let _ = p.read_to_string(&mut s);
                    }
                    s
                });
                while child.try_wait().ok().flatten().is_none() {
                    if st.load(Ordering::Relaxed) {
                        let _ = child.kill();
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                let _ = child.wait();
                let err = reader.join().unwrap_or_default();
                se.lock().unwrap().push_str(&err);
            }
        });
        ServerLoop {
            stop,
            stderr,
            runs,
            thread: Some(thread),
        }
    }

    /// What the runs so far printed on stderr.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// How many times the server was started.
    pub fn runs(&self) -> u64 {
        *self.runs.lock().unwrap()
    }
}

impl Drop for ServerLoop {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
