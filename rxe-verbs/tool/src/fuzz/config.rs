//! What a run is told: the peer's server and what kind it is, and the
//! settings every part of the fuzzer reads ([`Config`]); and the error
//! type that ends a run ([`Res`]). Plain types, below everything else, so
//! that the modules that use them need nothing of `mod.rs`.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

/// The peer's pingpong server.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub host: String,
    pub port: u16,
    /// A perftest server run with -R: connect through rdma_cm.
    pub cm: bool,
}

impl Target {
    #[cfg(test)]
    pub(crate) fn parse(s: &str) -> Result<Target, String> {
        Target::parse_or(s, 18515)
    }

    /// SERVER[:PORT], `default` when no port is given.
    pub(crate) fn parse_or(s: &str, default: u16) -> Result<Target, String> {
        // SERVER, SERVER:PORT, [V6]:PORT or a bare IPv6 address.
        if let Some(rest) = s.strip_prefix('[') {
            let (h, p) = rest.split_once(']').ok_or(format!("bad target {s:?}"))?;
            let port = match p.strip_prefix(':') {
                Some(p) => p.parse().map_err(|_| format!("bad port in {s:?}"))?,
                None => default,
            };
            return Ok(Target {
                host: h.into(),
                port,
                cm: false,
            });
        }
        match s.rsplit_once(':') {
            Some((h, p)) if !h.contains(':') => Ok(Target {
                host: h.into(),
                port: p.parse().map_err(|_| format!("bad port in {s:?}"))?,
                cm: false,
            }),
            _ => Ok(Target {
                host: s.into(),
                port: default,
                cm: false,
            }),
        }
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// What kind of server the peer runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Peer {
    /// An rdma-core pingpong server (posted receives, no remote access).
    Pingpong,
    /// A perftest `ib_read_bw` server: its buffer (`size` bytes from the
    /// address its exchange names) is readable and must stay unwritten.
    PerftestRead { size: u32 },
    /// An rping server, connected through rdma_cm: it READs `size` bytes
    /// of ours and WRITEs them back.
    Rping { size: u32 },
}

impl Peer {
    /// The sidecar's `peer` line (none for a pingpong server).
    pub(crate) fn meta(self) -> Option<String> {
        match self {
            Peer::Pingpong => None,
            Peer::PerftestRead { size } => Some(format!("perftest-read size={size}")),
            Peer::Rping { size } => Some(format!("rping size={size}")),
        }
    }

    /// From a sidecar's `peer` line, and whether it was reached through
    /// rdma_cm (a perftest server run with -R).
    pub(crate) fn from_meta_cm(s: &str) -> Option<(Peer, bool)> {
        match s.strip_prefix("perftest-read-cm size=") {
            Some(size) => Some((
                Peer::PerftestRead {
                    size: size.parse().ok()?,
                },
                true,
            )),
            None => Peer::from_meta(s).map(|p| (p, false)),
        }
    }

    /// From a sidecar's `peer` line.
    pub(crate) fn from_meta(s: &str) -> Option<Peer> {
        if let Some(size) = s.strip_prefix("perftest-read-cm size=") {
            return Some(Peer::PerftestRead {
                size: size.parse().ok()?,
            });
        }
        if let Some(size) = s.strip_prefix("rping size=") {
            return Some(Peer::Rping {
                size: size.parse().ok()?,
            });
        }
        let size = s.strip_prefix("perftest-read size=")?.parse().ok()?;
        Some(Peer::PerftestRead { size })
    }

    /// The server's port when the target names none.
    pub(crate) fn default_port(self) -> u16 {
        match self {
            Peer::Rping { .. } => 7174,
            _ => 18515,
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Peer::Pingpong => "pingpong",
            Peer::PerftestRead { .. } => "perftest read_bw",
            Peer::Rping { .. } => "rping over rdma_cm",
        }
    }
}

/// What a campaign or replay is told.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub local: IpAddr,
    pub target: Target,
    pub peer: Peer,
    pub mtu: usize,
    pub recv_size: usize,
    pub window: Duration,
    pub grace: Duration,
    pub check_every: u64,
    pub liveness_timeout: Duration,
    pub out: PathBuf,
    pub verbose: bool,
    /// Time the minimiser may spend on a campaign's findings (0: none).
    pub minimise_budget: Duration,
    /// Candidates the minimiser may replay.
    pub minimise_attempts: u32,
}

impl Config {
    /// How the peer is reached, for the first line of a run.
    pub(crate) fn exchange(&self) -> &'static str {
        match self.peer {
            Peer::PerftestRead { .. } if self.target.cm => "perftest read_bw over rdma_cm",
            p => p.name(),
        }
    }

    /// The sidecar's `peer` line.
    pub(crate) fn peer_meta(&self) -> Option<String> {
        match self.peer {
            Peer::PerftestRead { size } if self.target.cm => {
                Some(format!("perftest-read-cm size={size}"))
            }
            p => p.meta(),
        }
    }
}

/// An error that ends the run: `Usage` exits 2, `Setup` exits 2.
pub(crate) type Res<T> = Result<T, String>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets() {
        let t = Target::parse("10.0.0.1").unwrap();
        assert_eq!((t.host.as_str(), t.port), ("10.0.0.1", 18515));
        let t = Target::parse("10.0.0.1:19700").unwrap();
        assert_eq!((t.host.as_str(), t.port), ("10.0.0.1", 19700));
        let t = Target::parse("[::1]:5").unwrap();
        assert_eq!((t.host.as_str(), t.port), ("::1", 5));
        let t = Target::parse("fe80::1").unwrap();
        assert_eq!((t.host.as_str(), t.port), ("fe80::1", 18515));
        assert!(Target::parse("h:x").is_err());
    }
}
