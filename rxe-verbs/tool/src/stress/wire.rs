//! The out-of-band exchange: JSON lines over one TCP connection.
//!
//! 1. client → server: [`Hello`] (the plan and the client's QPs);
//! 2. server → client: [`Welcome`] (the server's QPs and region);
//! 3. client → server: [`Done`] (what the client sent) when it stops;
//! 4. server → client: [`Tally`] (what the server received and checked).

use super::Transport;
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;

/// A QP as the peer needs it.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Qp {
    pub qpn: u32,
    pub psn: u32,
}

/// The client's plan.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Hello {
    pub transports: Vec<Transport>,
    pub slot: usize,
    pub depth: usize,
    pub recvs: usize,
    pub mtu: u32,
    pub gid: String,
    pub qps: Vec<Qp>,
}

/// The server's answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Welcome {
    pub gid: String,
    pub qps: Vec<Qp>,
    pub addr: u64,
    pub rkey: u32,
}

/// What the client sent, per QP.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Done {
    pub sends: Vec<u64>,
    pub write_imms: Vec<u64>,
}

/// What the server saw.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Tally {
    /// Messages received and checked whole.
    pub checked: u64,
    pub bytes_checked: u64,
    pub data_errors: u64,
    /// RC messages sent that never arrived (must be 0).
    pub rc_missing: u64,
    /// UC/UD messages sent that never arrived (allowed).
    pub lost: u64,
    /// WRITE-with-immediate slots overwritten before they were checked.
    pub overtaken: u64,
    /// Receive completions with an error status.
    pub errors: u64,
    pub retransmissions: u64,
    pub mem_kib: (u64, u64),
    pub fds: (usize, usize),
}

/// One connection, line by line.
pub struct Channel {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

impl Channel {
    pub fn new(s: TcpStream, timeout: Duration) -> std::io::Result<Channel> {
        s.set_read_timeout(Some(timeout))?;
        s.set_nodelay(true)?;
        Ok(Channel {
            w: s.try_clone()?,
            r: BufReader::new(s),
        })
    }

    pub fn send<T: Serialize>(&mut self, m: &T) -> Result<(), String> {
        let mut line = serde_json::to_string(m).map_err(|e| e.to_string())?;
        line.push('\n');
        self.w
            .write_all(line.as_bytes())
            .map_err(|e| format!("send to the peer: {e}"))
    }

    pub fn recv<T: DeserializeOwned>(&mut self, what: &str) -> Result<T, String> {
        let mut line = String::new();
        match self.r.read_line(&mut line) {
            Ok(0) => Err(format!("the peer closed the connection before its {what}")),
            Ok(_) => serde_json::from_str(line.trim())
                .map_err(|e| format!("the peer's {what} does not parse: {e}")),
            Err(e) => Err(format!("waiting for the peer's {what}: {e}")),
        }
    }

    /// Whether a line is waiting, without blocking.
    pub fn ready(&mut self) -> Result<bool, String> {
        if !self.r.buffer().is_empty() {
            return Ok(true);
        }
        let s = self.r.get_ref();
        s.set_nonblocking(true).map_err(|e| e.to_string())?;
        let mut b = [0u8; 1];
        let r = s.peek(&mut b);
        s.set_nonblocking(false).map_err(|e| e.to_string())?;
        match r {
            Ok(_) => Ok(true), // data, or 0 at EOF: recv tells which
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(false),
            Err(e) => Err(format!("the peer's connection: {e}")),
        }
    }
}
