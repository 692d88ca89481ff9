//! perftest's out-of-band exchange ("Data ex. method : Ethernet"), byte for
//! byte, so that `rxe perf` can face `ib_write_bw` and friends.
//!
//! What is here was read off perftest's `perftest_communication.c` and
//! checked against the binaries of Debian bookworm's perftest 4.5+0.17
//! (whose `VERSION` is "6.06"):
//!
//! * One TCP connection (port 18515 by default); the client writes first in
//!   every exchange, the server reads first (`ctx_xchg_data`).
//! * `exchange_versions`: 16 bytes each way, the version string NUL-padded.
//!   Peers older than 5.70 are refused ("Current implementation is not
//!   compatible with versions older than 5.70").
//! * `check_sys_data` (peer ≥ 5.32): the cycle buffer (page size) and the
//!   cache-line size, 4 bytes each, big-endian; both sides keep the larger.
//! * `check_mtu` (peer ≥ 5.1): the `ibv_mtu` enum printed with `%d`, 2 bytes
//!   (`"5\0"` for 4096) from 5.31 on; both sides take the smaller.
//! * `ctx_hand_shake`: one `pingpong_dest` each way, as text:
//!   `KEY_PRINT_FMT_GID` = `%04x:%04x:%06x:%06x:%08x:%016llx:` then the 16
//!   GID bytes as `%02x:` each, then the SRQ number `%08x:`; 108 bytes with
//!   the NUL (`KEY_MSG_SIZE_GID`). Without a GID index (InfiniBand only) it
//!   is `KEY_PRINT_FMT` = `%04x:%04x:%06x:%06x:%08x:%016llx:%08x`, 59 bytes.
//!   How many handshakes a test does, and when, differs per test: see
//!   [`Sequence`].
//! * `xchg_bw_reports` (peer ≥ 5.33): message size and iterations as 8-byte
//!   big-endian integers, then peak BW, average BW and message rate as
//!   big-endian doubles, 8 bytes each, each value its own exchange.
//! * `ctx_close_connection`: a last handshake, then each side writes
//!   `"done\0"` (5 bytes, never read) and closes.

use std::io::{self, Read, Write};
use std::net::{Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// The perftest version we announce (Debian bookworm's perftest 4.5+0.17).
pub const VERSION: &str = "6.06";
/// `MAX_VERSION`: the size of the version exchange.
pub const VERSION_LEN: usize = 16;
/// `KEY_MSG_SIZE`: a `pingpong_dest` without GID, with its NUL.
pub const KEY_MSG_SIZE: usize = 59;
/// `KEY_MSG_SIZE_GID`: a `pingpong_dest` with GID, with its NUL.
pub const KEY_MSG_SIZE_GID: usize = 108;
/// The oldest peer perftest accepts.
pub const MIN_VERSION: f64 = 5.70;

/// One side's QP as perftest exchanges it (`struct pingpong_dest`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Dest {
    /// LID (0 on RoCE).
    pub lid: u16,
    /// Outstanding RDMA READs / atomics.
    pub out_reads: u32,
    /// QP number.
    pub qpn: u32,
    /// First PSN.
    pub psn: u32,
    /// Remote key of the buffer.
    pub rkey: u32,
    /// Address of the buffer the peer targets.
    pub vaddr: u64,
    /// Port GID.
    pub gid: [u8; 16],
    /// SRQ number (XRC and DC only; 0 here).
    pub srqn: u32,
}

fn bad(what: &str, text: &[u8]) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "{what}: {:?}",
            String::from_utf8_lossy(text).trim_end_matches('\0')
        ),
    )
}

/// `strtol(s, NULL, 16)` as perftest uses it: leading hex digits, 0 if none.
fn strtol16(s: &[u8]) -> u64 {
    let s = s.iter().skip_while(|b| b.is_ascii_whitespace());
    let mut v: u64 = 0;
    for &b in s {
        match (b as char).to_digit(16) {
            Some(d) => v = v.wrapping_mul(16).wrapping_add(u64::from(d)),
            None => break,
        }
    }
    v
}

impl Dest {
    /// `KEY_PRINT_FMT_GID` with its NUL: 108 bytes.
    pub fn to_wire_gid(self) -> [u8; KEY_MSG_SIZE_GID] {
        let mut text = format!(
            "{:04x}:{:04x}:{:06x}:{:06x}:{:08x}:{:016x}:",
            self.lid, self.out_reads, self.qpn, self.psn, self.rkey, self.vaddr
        );
        for b in self.gid {
            text.push_str(&format!("{b:02x}:"));
        }
        text.push_str(&format!("{:08x}:", self.srqn));
        let mut msg = [0u8; KEY_MSG_SIZE_GID];
        let n = text.len().min(KEY_MSG_SIZE_GID - 1);
        msg[..n].copy_from_slice(&text.as_bytes()[..n]);
        msg
    }

    /// `KEY_PRINT_FMT` with its NUL: 59 bytes (no GID: InfiniBand peers).
    pub fn to_wire(self) -> [u8; KEY_MSG_SIZE] {
        let text = format!(
            "{:04x}:{:04x}:{:06x}:{:06x}:{:08x}:{:016x}:{:08x}",
            self.lid, self.out_reads, self.qpn, self.psn, self.rkey, self.vaddr, self.srqn
        );
        let mut msg = [0u8; KEY_MSG_SIZE];
        let n = text.len().min(KEY_MSG_SIZE - 1);
        msg[..n].copy_from_slice(&text.as_bytes()[..n]);
        msg
    }

    /// Parses a `KEY_PRINT_FMT_GID` message the way `ethernet_read_keys`
    /// does: fields split at `:`, each read with `strtol(.., 16)`.
    pub fn from_wire_gid(msg: &[u8]) -> io::Result<Dest> {
        let end = msg.iter().position(|&b| b == 0).unwrap_or(msg.len());
        let text = &msg[..end];
        let fields: Vec<&[u8]> = text.split(|&b| b == b':').collect();
        // 6 numbers, 16 GID bytes, the SRQ number, and what follows its ':'.
        if fields.len() < 23 {
            return Err(bad("bad remote address", msg));
        }
        let num = |i: usize| -> io::Result<u64> {
            let f = fields[i];
            if f.is_empty() || !f.iter().all(u8::is_ascii_hexdigit) {
                return Err(bad("bad remote address", msg));
            }
            Ok(strtol16(f))
        };
        let mut gid = [0u8; 16];
        for (i, g) in gid.iter_mut().enumerate() {
            *g = num(6 + i)? as u8;
        }
        Ok(Dest {
            lid: num(0)? as u16,
            out_reads: num(1)? as u32,
            qpn: num(2)? as u32,
            psn: num(3)? as u32,
            rkey: num(4)? as u32,
            vaddr: num(5)?,
            gid,
            srqn: num(22)? as u32,
        })
    }

    /// Parses a `KEY_PRINT_FMT` message (`sscanf` with 7 conversions).
    pub fn from_wire(msg: &[u8]) -> io::Result<Dest> {
        let end = msg.iter().position(|&b| b == 0).unwrap_or(msg.len());
        let fields: Vec<&[u8]> = msg[..end].split(|&b| b == b':').collect();
        if fields.len() != 7
            || fields
                .iter()
                .any(|f| f.is_empty() || !f.iter().all(u8::is_ascii_hexdigit))
        {
            return Err(bad("Couldn't parse line", msg));
        }
        let n = |i: usize| strtol16(fields[i]);
        Ok(Dest {
            lid: n(0) as u16,
            out_reads: n(1) as u32,
            qpn: n(2) as u32,
            psn: n(3) as u32,
            rkey: n(4) as u32,
            vaddr: n(5),
            gid: [0; 16],
            srqn: n(6) as u32,
        })
    }

    /// The GID as an address.
    pub fn gid_addr(&self) -> Ipv6Addr {
        Ipv6Addr::from(self.gid)
    }
}

/// What `print_report_bw` leaves in `struct bw_report_data`, as
/// `xchg_bw_reports` sends it.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct BwReport {
    /// Message size.
    pub size: u64,
    /// Iterations (all QPs).
    pub iters: u64,
    /// Peak bandwidth (MB/s or Gb/s).
    pub bw_peak: f64,
    /// Average bandwidth.
    pub bw_avg: f64,
    /// Message rate (Mpps).
    pub msg_rate: f64,
}

/// The 16-byte version message.
pub fn version_msg(v: &str) -> [u8; VERSION_LEN] {
    let mut m = [0u8; VERSION_LEN];
    let n = v.len().min(VERSION_LEN - 1);
    m[..n].copy_from_slice(&v.as_bytes()[..n]);
    m
}

/// `atof` of a version message: the leading number, 0 if none.
pub fn atof(msg: &[u8]) -> f64 {
    let end = msg.iter().position(|&b| b == 0).unwrap_or(msg.len());
    let s = String::from_utf8_lossy(&msg[..end]);
    let s = s.trim_start();
    let mut len = 0;
    let mut dot = false;
    for (i, c) in s.char_indices() {
        if c.is_ascii_digit() || (c == '.' && !dot) || (i == 0 && (c == '-' || c == '+')) {
            dot |= c == '.';
            len = i + 1;
        } else {
            break;
        }
    }
    s[..len].parse().unwrap_or(0.0)
}

/// The `check_mtu` message: the `ibv_mtu` enum (1 = 256 ... 5 = 4096) with
/// `%d`, in `size` bytes (2 from perftest 5.31 on, else `sizeof(int)`).
pub fn mtu_msg(mtu_enum: u8, size: usize) -> Vec<u8> {
    let mut m = vec![0u8; size];
    let s = mtu_enum.to_string();
    let n = s.len().min(size);
    m[..n].copy_from_slice(&s.as_bytes()[..n]);
    m
}

/// Reads a `check_mtu` message (`strtol(rem, NULL, 10)`).
pub fn parse_mtu_msg(m: &[u8]) -> u8 {
    let digits: String = m
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .map(|&b| b as char)
        .collect();
    digits.parse().unwrap_or(0)
}

/// The bytes of a report exchange: five values, each its own exchange, in
/// this order (the 8-byte `iters` is for peers ≥ 5.33).
pub fn report_fields(r: &BwReport) -> [[u8; 8]; 5] {
    [
        r.size.to_be_bytes(),
        r.iters.to_be_bytes(),
        r.bw_peak.to_bits().to_be_bytes(),
        r.bw_avg.to_bits().to_be_bytes(),
        r.msg_rate.to_bits().to_be_bytes(),
    ]
}

/// The report a peer sent, from its five fields.
pub fn report_from_fields(f: &[[u8; 8]; 5]) -> BwReport {
    BwReport {
        size: u64::from_be_bytes(f[0]),
        iters: u64::from_be_bytes(f[1]),
        bw_peak: f64::from_bits(u64::from_be_bytes(f[2])),
        bw_avg: f64::from_bits(u64::from_be_bytes(f[3])),
        msg_rate: f64::from_bits(u64::from_be_bytes(f[4])),
    }
}

/// When the handshakes of a test happen, relative to bringing the QPs up
/// (`ctx_connect`), as each of perftest 6.06's `main`s does them. Every
/// handshake is one `pingpong_dest` each way; both sides must do the same
/// number, or one of them waits forever.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sequence {
    /// Single handshakes before the per-QP round (`*_lat` except send_lat).
    pub before: usize,
    /// Single handshakes right after `ctx_connect` (send_bw, send_lat).
    pub after_connect: usize,
    /// Single handshakes after the second per-QP round (the "additional
    /// handshake after moving QP to RTR"; not in send_bw/send_lat).
    pub after_rtr: usize,
}

impl Sequence {
    /// write_bw, read_bw, atomic_bw.
    pub const RDMA_BW: Sequence = Sequence {
        before: 0,
        after_connect: 0,
        after_rtr: 1,
    };
    /// send_bw.
    pub const SEND_BW: Sequence = Sequence {
        before: 0,
        after_connect: 1,
        after_rtr: 0,
    };
    /// write_lat, read_lat, atomic_lat.
    pub const RDMA_LAT: Sequence = Sequence {
        before: 1,
        after_connect: 0,
        after_rtr: 1,
    };
    /// send_lat.
    pub const SEND_LAT: Sequence = Sequence {
        before: 0,
        after_connect: 1,
        after_rtr: 0,
    };

    /// Handshakes up to the start of the test with `qps` QPs.
    #[cfg(test)]
    pub fn count(&self, qps: usize) -> usize {
        self.before + qps + self.after_connect + qps + self.after_rtr
    }
}

/// The TCP connection to the peer.
#[derive(Debug)]
pub struct Oob {
    sock: TcpStream,
    client: bool,
    /// The peer's version string.
    pub rem_version: String,
    /// `atof` of it.
    pub rem_vers: f64,
    /// Whether destinations carry a GID (always on RoCE).
    pub with_gid: bool,
}

impl Oob {
    /// Connects to a server (`ethernet_client_connect`), retrying while it is
    /// not listening yet, for at most `retry`.
    pub fn connect(server: &str, port: u16, retry: Duration) -> io::Result<Oob> {
        let addrs: Vec<SocketAddr> = (server, port).to_socket_addrs()?.collect();
        let deadline = Instant::now() + retry;
        loop {
            // Each try bounded by what is left (a host that drops SYNs).
            let left = deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(1));
            if let Some(s) = addrs
                .iter()
                .find_map(|a| TcpStream::connect_timeout(a, left).ok())
            {
                s.set_nodelay(true)?;
                return Ok(Oob::new(s, true));
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::ConnectionRefused,
                    format!("Couldn't connect to {server}:{port}"),
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits for one client (`ethernet_server_connect`: every address, the
    /// listener closed once a client is in), at most `limit`.
    pub fn accept(port: u16, limit: Duration) -> io::Result<Oob> {
        let s = accept_one(port, limit)?;
        s.set_nodelay(true)?;
        Ok(Oob::new(s, false))
    }

    /// The server end of an accepted connection.
    pub fn from_stream(sock: TcpStream) -> Oob {
        let _ = sock.set_nodelay(true);
        Oob::new(sock, false)
    }

    fn new(sock: TcpStream, client: bool) -> Oob {
        Oob {
            sock,
            client,
            rem_version: String::new(),
            rem_vers: 0.0,
            with_gid: true,
        }
    }

    /// Bounds every read and write.
    pub fn set_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.sock.set_read_timeout(t)?;
        self.sock.set_write_timeout(t)
    }

    /// `ctx_xchg_data`: the client writes then reads, the server reads then
    /// writes.
    pub fn xchg(&mut self, mine: &[u8], theirs: &mut [u8]) -> io::Result<()> {
        if self.client {
            self.sock.write_all(mine)?;
            self.sock.read_exact(theirs)
        } else {
            self.sock.read_exact(theirs)?;
            self.sock.write_all(mine)
        }
    }

    /// `exchange_versions` + `check_version_compatibility`.
    pub fn exchange_versions(&mut self) -> io::Result<()> {
        let mut theirs = [0u8; VERSION_LEN];
        self.xchg(&version_msg(VERSION), &mut theirs)?;
        let end = theirs.iter().position(|&b| b == 0).unwrap_or(VERSION_LEN);
        self.rem_version = String::from_utf8_lossy(&theirs[..end]).into_owned();
        self.rem_vers = atof(&theirs);
        if self.rem_vers < MIN_VERSION {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "Current implementation is not compatible with versions older than 5.70 (peer: {:?})",
                    self.rem_version
                ),
            ));
        }
        Ok(())
    }

    /// `check_sys_data`: returns the larger cycle buffer and cache line.
    pub fn check_sys_data(&mut self, cycle: i32, cache_line: i32) -> io::Result<(i32, i32)> {
        if self.rem_vers < 5.32 {
            return Ok((cycle, cache_line));
        }
        let mut c = [0u8; 4];
        self.xchg(&cycle.to_be_bytes(), &mut c)?;
        let mut l = [0u8; 4];
        self.xchg(&cache_line.to_be_bytes(), &mut l)?;
        Ok((
            cycle.max(i32::from_be_bytes(c)),
            cache_line.max(i32::from_be_bytes(l)),
        ))
    }

    /// `check_mtu`: returns the MTU enum both sides use (the smaller one, if
    /// the peer's is valid).
    pub fn check_mtu(&mut self, mine: u8) -> io::Result<u8> {
        if self.rem_vers < 5.1 {
            return Ok(mine);
        }
        let size = if self.rem_vers >= 5.31 { 2 } else { 4 };
        let mut theirs = vec![0u8; size];
        self.xchg(&mtu_msg(mine, size), &mut theirs)?;
        let rem = parse_mtu_msg(&theirs);
        Ok(if (1..=5).contains(&rem) && mine > rem {
            rem
        } else {
            mine
        })
    }

    /// `ctx_hand_shake`: our destination for theirs.
    pub fn hand_shake(&mut self, mine: &Dest) -> io::Result<Dest> {
        if self.with_gid {
            let mut theirs = [0u8; KEY_MSG_SIZE_GID];
            self.xchg(&mine.to_wire_gid(), &mut theirs)?;
            Dest::from_wire_gid(&theirs)
        } else {
            let mut theirs = [0u8; KEY_MSG_SIZE];
            self.xchg(&mine.to_wire(), &mut theirs)?;
            Dest::from_wire(&theirs)
        }
    }

    /// `xchg_bw_reports`.
    pub fn xchg_bw_reports(&mut self, mine: &BwReport) -> io::Result<BwReport> {
        let fields = report_fields(mine);
        let mut theirs = [[0u8; 8]; 5];
        for (i, f) in fields.iter().enumerate() {
            if i == 1 && self.rem_vers < 5.33 {
                let mut t = [0u8; 4];
                self.xchg(&(mine.iters as i32).to_be_bytes(), &mut t)?;
                theirs[1] = (i32::from_be_bytes(t) as i64 as u64).to_be_bytes();
                continue;
            }
            self.xchg(f, &mut theirs[i])?;
        }
        Ok(report_from_fields(&theirs))
    }

    /// `ctx_close_connection`: a last handshake, then `"done\0"` and close.
    pub fn close(&mut self, mine: &Dest) -> io::Result<()> {
        self.hand_shake(mine)?;
        self.sock.write_all(b"done\0")?;
        let _ = self.sock.shutdown(std::net::Shutdown::Write);
        Ok(())
    }

    /// The opening of every test, in perftest's order (`exchange_versions`,
    /// `check_sys_data`, `check_mtu`), with perftest's words for a failure:
    /// the cycle buffer and cache line both sides use and the MTU enum.
    pub fn open(&mut self, cycle: i32, cache_line: i32, mtu_enum: u8) -> Result<Opening, String> {
        self.exchange_versions().map_err(hs_err)?;
        let (cycle, cache_line) = self.check_sys_data(cycle, cache_line).map_err(|e| {
            format!(" Failed to exchange Page Size data between server and client: {e}")
        })?;
        let mtu_enum = self.check_mtu(mtu_enum).map_err(hs_err)?;
        Ok(Opening {
            cycle,
            cache_line,
            mtu_enum,
        })
    }

    /// The handshakes of `seq` around bringing the QPs up, one destination
    /// of `mine` per QP: `connect` gets the peer's destinations where
    /// perftest calls `ctx_connect`, `show_local` runs before the second
    /// per-QP round and `show_remote` on each destination of that round.
    /// Returns the peer's destinations.
    pub fn handshakes(
        &mut self,
        seq: Sequence,
        mine: &[Dest],
        connect: impl FnOnce(&[Dest]) -> Result<(), String>,
        show_local: impl FnOnce(),
        mut show_remote: impl FnMut(&Dest),
    ) -> Result<Vec<Dest>, String> {
        let first = mine.first().ok_or("no QP to exchange")?;
        let mut theirs = vec![Dest::default(); mine.len()];
        for _ in 0..seq.before {
            theirs[0] = self.hand_shake(first).map_err(hs_err)?;
        }
        for (i, d) in mine.iter().enumerate() {
            theirs[i] = self.hand_shake(d).map_err(hs_err)?;
        }
        connect(&theirs)?;
        for _ in 0..seq.after_connect {
            theirs[0] = self.hand_shake(first).map_err(hs_err)?;
        }
        show_local();
        for (i, d) in mine.iter().enumerate() {
            theirs[i] = self.hand_shake(d).map_err(hs_err)?;
            show_remote(&theirs[i]);
        }
        for _ in 0..seq.after_rtr {
            theirs[0] = self.hand_shake(first).map_err(hs_err)?;
        }
        Ok(theirs)
    }

    /// The end of write_bw, read_bw and atomic_bw on either side: a
    /// handshake, the reports (ours for the peer's), `ctx_close_connection`.
    pub fn finish_rdma_bw(&mut self, mine: &Dest, report: &BwReport) -> Result<BwReport, String> {
        self.hand_shake(mine).map_err(hs_err)?;
        let theirs = self.xchg_bw_reports(report).map_err(hs_err)?;
        self.close(mine)
            .map_err(|e| format!("Failed to close connection between server and client: {e}"))?;
        Ok(theirs)
    }

    /// Reads a line (the baseline's own control protocol).
    pub fn read_line(&mut self) -> io::Result<String> {
        let mut line = Vec::new();
        let mut b = [0u8; 1];
        loop {
            let n = self.sock.read(&mut b)?;
            if n == 0 || b[0] == b'\n' {
                break;
            }
            line.push(b[0]);
            if line.len() > 4096 {
                return Err(bad("line too long", &line));
            }
        }
        Ok(String::from_utf8_lossy(&line).into_owned())
    }

    /// Writes a line.
    pub fn write_line(&mut self, l: &str) -> io::Result<()> {
        self.sock.write_all(format!("{l}\n").as_bytes())
    }
}

/// What [`Oob::open`] settles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Opening {
    /// The cycle buffer (page size) both sides use.
    pub cycle: i32,
    /// The cache line both sides use.
    pub cache_line: i32,
    /// The `ibv_mtu` enum both sides use (1 = 256 ... 5 = 4096).
    pub mtu_enum: u8,
}

/// perftest's words for a failed exchange.
pub fn hs_err(e: io::Error) -> String {
    format!(" Failed to exchange data between server and clients: {e}")
}

/// Accepts one connection on `port` (all addresses, IPv6 dual stack first).
pub fn accept_one(port: u16, limit: Duration) -> io::Result<TcpStream> {
    let listener = TcpListener::bind((Ipv6Addr::UNSPECIFIED, port))
        .or_else(|_| TcpListener::bind(("0.0.0.0", port)))
        .map_err(|e| io::Error::new(e.kind(), format!("Couldn't listen to port {port}: {e}")))?;
    listener.set_nonblocking(true)?;
    let deadline = Instant::now() + limit;
    loop {
        match listener.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false)?;
                return Ok(s);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("no client connected to port {port} within {limit:?}"),
                    ));
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::thread;

    /// `sprintf(KEY_PRINT_FMT_GID, ...)` for the kernel rxe's IPv4 GID.
    const GID_MSG: &[u8] = b"0000:0010:000011:7b5b0e:00000209:00007f0f6ee4f000:\
00:00:00:00:00:00:00:00:00:00:ff:ff:7f:00:00:02:00000000:\0";

    fn dest() -> Dest {
        Dest {
            lid: 0,
            out_reads: 0x10,
            qpn: 0x11,
            psn: 0x7b5b0e,
            rkey: 0x209,
            vaddr: 0x7f0f_6ee4_f000,
            gid: "::ffff:127.0.0.2".parse::<Ipv6Addr>().unwrap().octets(),
            srqn: 0,
        }
    }

    #[test]
    fn gid_message_is_perftests() {
        assert_eq!(GID_MSG.len(), KEY_MSG_SIZE_GID);
        let w = dest().to_wire_gid();
        assert_eq!(&w[..], GID_MSG);
        assert_eq!(Dest::from_wire_gid(GID_MSG).unwrap(), dest());
    }

    #[test]
    fn plain_message_is_perftests() {
        let want: &[u8] = b"0000:0010:000011:7b5b0e:00000209:00007f0f6ee4f000:00000000\0";
        assert_eq!(want.len(), KEY_MSG_SIZE);
        let mut d = dest();
        d.gid = [0; 16];
        assert_eq!(&d.to_wire()[..], want);
        assert_eq!(Dest::from_wire(want).unwrap(), d);
    }

    #[test]
    fn wide_fields_and_bad_messages() {
        // A 24-bit QPN/PSN and a 64-bit address keep their widths.
        let d = Dest {
            lid: 0xffff,
            out_reads: 0x80,
            qpn: 0xff_ffff,
            psn: 0xab_cdef,
            rkey: 0xdead_beef,
            vaddr: u64::MAX,
            gid: [0xfe; 16],
            srqn: 0x1234_5678,
        };
        let w = d.to_wire_gid();
        assert_eq!(w[KEY_MSG_SIZE_GID - 1], 0);
        assert_eq!(Dest::from_wire_gid(&w).unwrap(), d);
        assert!(Dest::from_wire_gid(b"0000:zz:000011\0").is_err());
        assert!(Dest::from_wire_gid(&[0u8; KEY_MSG_SIZE_GID]).is_err());
        assert!(Dest::from_wire(b"0000:0010\0").is_err());
    }

    #[test]
    fn version_mtu_and_report_bytes() {
        assert_eq!(&version_msg("6.06"), b"6.06\0\0\0\0\0\0\0\0\0\0\0\0");
        assert_eq!(atof(b"6.06\0\0"), 6.06);
        assert_eq!(atof(b"5.70"), 5.70);
        assert_eq!(atof(b"x"), 0.0);
        // IBV_MTU_4096 is 5, IBV_MTU_1024 3; two bytes with the NUL.
        assert_eq!(mtu_msg(5, 2), b"5\0");
        assert_eq!(mtu_msg(3, 4), b"3\0\0\0");
        assert_eq!(parse_mtu_msg(b"3\0"), 3);
        let r = BwReport {
            size: 65536,
            iters: 5000,
            bw_peak: 1103.85,
            bw_avg: 1103.68,
            msg_rate: 0.017659,
        };
        let f = report_fields(&r);
        assert_eq!(f[0], [0, 0, 0, 0, 0, 1, 0, 0]);
        assert_eq!(f[1], [0, 0, 0, 0, 0, 0, 0x13, 0x88]);
        // 1103.85 as a big-endian IEEE double.
        assert_eq!(f[2], 1103.85f64.to_bits().to_be_bytes());
        assert_eq!(f[2][0], 0x40);
        assert_eq!(report_from_fields(&f), r);
    }

    #[test]
    fn handshake_counts() {
        assert_eq!(Sequence::RDMA_BW.count(1), 3);
        assert_eq!(Sequence::RDMA_BW.count(4), 9);
        assert_eq!(Sequence::SEND_BW.count(1), 3);
        assert_eq!(Sequence::RDMA_LAT.count(1), 4);
        assert_eq!(Sequence::SEND_LAT.count(1), 3);
    }

    /// A scripted perftest server talks to `Oob` as a client: the bytes the
    /// client sends must be exactly perftest's, in perftest's order.
    #[test]
    fn client_against_scripted_perftest_server() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let server = thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut got = Vec::new();
            let mut exchange = |s: &mut TcpStream, n: usize, reply: &[u8]| {
                let mut b = vec![0u8; n];
                s.read_exact(&mut b).unwrap();
                got.push(b);
                s.write_all(reply).unwrap();
            };
            exchange(&mut s, 16, &version_msg("6.06"));
            exchange(&mut s, 4, &4096i32.to_be_bytes());
            exchange(&mut s, 4, &128i32.to_be_bytes());
            exchange(&mut s, 2, b"3\0");
            exchange(&mut s, 108, GID_MSG);
            let mut done = [0u8; 5];
            s.read_exact(&mut done).unwrap();
            got.push(done.to_vec());
            got
        });
        let mut c = Oob::connect("127.0.0.1", port, Duration::from_secs(5)).unwrap();
        c.exchange_versions().unwrap();
        assert_eq!(c.rem_version, "6.06");
        assert_eq!(c.check_sys_data(4096, 64).unwrap(), (4096, 128));
        assert_eq!(c.check_mtu(5).unwrap(), 3);
        c.close(&dest()).unwrap();
        let got = server.join().unwrap();
        assert_eq!(got[0], b"6.06\0\0\0\0\0\0\0\0\0\0\0\0");
        assert_eq!(got[1], vec![0, 0, 0x10, 0]);
        assert_eq!(got[2], vec![0, 0, 0, 64]);
        assert_eq!(got[3], b"5\0");
        assert_eq!(got[4], GID_MSG);
        assert_eq!(got[5], b"done\0");
    }

    #[test]
    fn old_peer_is_refused() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let server = thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut b = [0u8; 16];
            s.read_exact(&mut b).unwrap();
            s.write_all(&version_msg("5.60")).unwrap();
        });
        let mut c = Oob::connect("127.0.0.1", port, Duration::from_secs(5)).unwrap();
        let e = c.exchange_versions().unwrap_err();
        assert!(e.to_string().contains("older than 5.70"), "{e}");
        server.join().unwrap();
    }

    #[test]
    fn two_oobs_exchange_reports() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let server = thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            let mut o = Oob::new(s, false);
            o.exchange_versions().unwrap();
            o.xchg_bw_reports(&BwReport::default()).unwrap()
        });
        let mut c = Oob::connect("127.0.0.1", port, Duration::from_secs(5)).unwrap();
        c.exchange_versions().unwrap();
        let r = BwReport {
            size: 4096,
            iters: 50,
            bw_peak: 1.5,
            bw_avg: 1.25,
            msg_rate: 0.5,
        };
        assert_eq!(c.xchg_bw_reports(&r).unwrap(), BwReport::default());
        assert_eq!(server.join().unwrap(), r);
    }
}
