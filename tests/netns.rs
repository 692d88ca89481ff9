//! Network namespaces a test makes and removes itself: the only place,
//! besides loopback, a test may send traffic to. Creating one needs root;
//! [`Netns::new`] says `None` where it cannot, and the test skips.

use crate::rxe_bin;
use std::process::{Command, Stdio};

/// A network namespace this test owns, removed when dropped.
#[derive(Debug)]
pub struct Netns(String);

impl Netns {
    /// A namespace whose loopback is up and holds `addrs` (/32 each), or
    /// `None` when this machine cannot make one (not root).
    pub fn new(tag: &str, addrs: &[&str]) -> Option<Netns> {
        let name = format!("rxe-{tag}-{}", std::process::id());
        let ok = |args: &[&str]| {
            Command::new("ip")
                .args(args)
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        if !ok(&["netns", "add", &name]) {
            return None;
        }
        let ns = Netns(name);
        let n = ns.0.as_str();
        assert!(ok(&["-n", n, "link", "set", "lo", "up"]));
        for a in addrs {
            assert!(ok(&[
                "-n",
                n,
                "addr",
                "add",
                &format!("{a}/32"),
                "dev",
                "lo"
            ]));
        }
        Some(ns)
    }

    /// The namespace's name (for `ip netns exec NAME` and `ip link set ... netns NAME`).
    pub fn name(&self) -> &str {
        &self.0
    }

    /// `ip -n NS ARGS...`, which must succeed.
    pub fn ip(&self, args: &[&str]) {
        let st = Command::new("ip")
            .arg("-n")
            .arg(&self.0)
            .args(args)
            .status()
            .unwrap();
        assert!(st.success(), "ip -n {} {args:?}", self.0);
    }

    /// `rxe ARGS...` inside the namespace, its output piped.
    pub fn rxe(&self, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.0]).arg(rxe_bin()).args(args);
        c.stdout(Stdio::piped()).stderr(Stdio::piped());
        c
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}
