//! The UDP baseline: plain UDP between the same two addresses, with
//! datagrams of the size of the RoCE packets (one MTU of payload, or the
//! whole message when smaller, plus the 16 bytes of BTH and ICRC), on the
//! `-p` port number (UDP), never 4791.
//!
//! * Bandwidth: a blast. The client sends as fast as `send(2)` lets it, the
//!   server counts what arrives; the figure is the payload the server
//!   received per second between the first and the last datagram (so loss
//!   counts against UDP, as it would against an application). By default
//!   the sender keeps at most 64 KiB of datagrams in flight (15 of 4 KiB,
//!   1 to 64; `--udp-window N` to choose), the receiver returning an 8-byte
//!   credit every half window: an unpaced sender on loopback overruns the receiver's socket buffer and most of the run is
//!   spent making and dropping datagrams (70-80 % lost here), which says
//!   little about what UDP can carry. `--udp-window 0` blasts unpaced.
//! * Latency: a ping-pong. The server echoes every datagram; the figure is
//!   half the round trip, with perftest's statistics. Both sides poll the
//!   socket for the same `--spin_us` as the RoCE run polls for completions
//!   (yielding the core between looks) before they sleep in `recv`, so
//!   that the ratio compares like with like.
//!
//! Both use a plain `std::net::UdpSocket`, one system call per datagram, no
//! batching (the RoCE stack batches with `sendmmsg`/`recvmmsg`), one thread
//! per side: the same two processes and cores as the RoCE run, which has an
//! application thread and a progress thread per side.
//!
//! The two sides agree on the run over a TCP connection to the same port:
//! `UDP_BW <datagram> <count> <ms> <credit>` or `UDP_LAT ...`,
//! `READY`, then `END <sent>` and `RESULT <datagrams> <bytes> <ns>` (or
//! `OK`). With `--baseline` on a RoCE test this follows perftest's exchange
//! on a new connection; `rxe perf udp_bw` / `udp_lat` do only this.

use super::args::{Config, Kind, Test};
use super::oob::{BwReport, Oob};
use super::report::{print_bw_header, print_bw_line, print_lat_line, RESULT_FMT_LAT, RESULT_LINE};
use super::stats::{lat_stats, LatReport};
use super::{Measured, Res};
use serde_json::{json, Value};
use std::io;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `recv_from` that first polls for up to `spin` (non-blocking looks,
/// yielding the core between them), as the RoCE side polls for completions
/// (`--spin_us`), then sleeps until a datagram comes or `timeout` passes
/// (an error then). With a zero spin, a plain `recv_from` on a blocking
/// socket; otherwise the socket must be non-blocking.
fn recv_spinning(
    sock: &UdpSocket,
    buf: &mut [u8],
    spin: Duration,
    timeout: Duration,
) -> io::Result<(usize, SocketAddr)> {
    if spin.is_zero() {
        return sock.recv_from(buf);
    }
    let start = Instant::now();
    loop {
        match sock.recv_from(buf) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            r => return r,
        }
        let waited = start.elapsed();
        if waited >= timeout {
            return Err(io::ErrorKind::TimedOut.into());
        }
        if waited < spin {
            std::thread::yield_now();
            continue;
        }
        let ms = (timeout - waited).as_millis().clamp(1, 60_000) as i32;
        let mut p = libc::pollfd {
            fd: sock.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, for the duration of the call.
        unsafe { libc::poll(&mut p, 1, ms) };
    }
}

/// The `--udp-acks` datagram: 20 bytes (BTH, AETH and ICRC: an RC ACK),
/// all 0xff, which no ping's sequence number starts with.
const ACK: [u8; 20] = [0xff; 20];

/// Sends `data` on a connected socket, after an [`ACK`]-sized datagram in
/// the same `sendmmsg` if `acks` (as rxe-rs sends an RC ACK together with
/// the answer that follows it).
fn send_pair(sock: &UdpSocket, data: &[u8], acks: bool) -> io::Result<()> {
    if !acks {
        return sock.send(data).map(|_| ());
    }
    let mut iov = [
        libc::iovec {
            iov_base: ACK.as_ptr() as *mut libc::c_void,
            iov_len: ACK.len(),
        },
        libc::iovec {
            iov_base: data.as_ptr() as *mut libc::c_void,
            iov_len: data.len(),
        },
    ];
    // SAFETY: an all-zero mmsghdr is valid (no name, no control data).
    let mut msgs: [libc::mmsghdr; 2] = unsafe { std::mem::zeroed() };
    for (m, v) in msgs.iter_mut().zip(iov.iter_mut()) {
        m.msg_hdr.msg_iov = v;
        m.msg_hdr.msg_iovlen = 1;
    }
    let mut sent = 0;
    while sent < 2 {
        // SAFETY: the headers point at `iov`, which points at `ACK` and
        // `data`; all outlive the call, and the kernel only reads them.
        let n = unsafe {
            libc::sendmmsg(
                sock.as_raw_fd(),
                msgs[sent..].as_mut_ptr(),
                (2 - sent) as libc::c_uint,
                0,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        sent += n as usize;
    }
    Ok(())
}

/// BTH (12) and ICRC (4): what every RoCE packet adds to its payload.
const ROCE_OVERHEAD: usize = 16;
/// The blast's default window: this many bytes of datagrams in flight (a
/// quarter of Linux's default 208 KiB receive buffer, which also pays for
/// each datagram's bookkeeping), 1 to 64 datagrams.
const WINDOW_BYTES: usize = 64 << 10;
/// The largest UDP payload.
const MAX_UDP: usize = 65507;

/// What the baseline measured, and how RoCE compares.
#[derive(Debug, Clone)]
pub struct Baseline {
    pub kind: Kind,
    /// Payload bytes per datagram (what counts as goodput).
    pub payload: usize,
    /// Datagram size (payload + RoCE's 16 header bytes).
    pub datagram: usize,
    pub sent: u64,
    pub received: u64,
    pub bw: Option<BwReport>,
    pub lat: Option<LatReport>,
    /// RoCE / UDP: bandwidth (higher is better for RoCE) or t_typical
    /// (lower is better for RoCE).
    pub ratio: Option<f64>,
}

impl Baseline {
    pub fn to_json(&self) -> Value {
        let mut v = json!({
            "transport": "UDP",
            "kind": if self.kind == Kind::Bw { "blast" } else { "ping-pong" },
            "payload": self.payload,
            "datagram": self.datagram,
            "sent": self.sent,
            "received": self.received,
        });
        if let Some(b) = &self.bw {
            v["BW_average"] = json!(b.bw_avg);
            v["MsgRate"] = json!(b.msg_rate);
        }
        if let Some(l) = &self.lat {
            v["t_typical"] = json!(l.t_typical);
            v["t_avg"] = json!(l.t_avg);
            v["t_min"] = json!(l.t_min);
            v["percentile_99"] = json!(l.p99);
        }
        if let Some(r) = self.ratio {
            v["ratio"] = json!(r);
        }
        v
    }
}

fn io(what: &'static str) -> impl Fn(std::io::Error) -> String {
    move |e| format!("UDP baseline: {what}: {e}")
}

/// Runs the baseline (as client or server), for `roce` when it follows a
/// RoCE measurement.
pub fn run(cfg: &Config, roce: Option<&Measured>) -> Res<Baseline> {
    let kind = cfg.test.kind();
    let mtu = cfg.mtu.bytes();
    // The datagrams: RoCE's packet payload plus its headers, or for the
    // baseline alone, -s bytes of payload.
    let (payload, count) = match roce {
        Some(Measured::Bw(r)) => {
            let chunk = (r.size as usize).min(mtu);
            let per_msg = (r.size as usize).div_ceil(mtu) as u64;
            (chunk, r.iters.max(1) * per_msg)
        }
        Some(Measured::Lat(r)) => ((r.size as usize).min(mtu), cfg.iters),
        None if matches!(cfg.test, Test::UdpBw | Test::UdpLat) => {
            let p = cfg.size as usize;
            (p.min(MAX_UDP - ROCE_OVERHEAD), cfg.iters)
        }
        None => ((cfg.size as usize).min(mtu), cfg.iters),
    };
    let datagram = payload + ROCE_OVERHEAD;
    if cfg.is_client() {
        client(cfg, kind, payload, datagram, count, roce)
    } else {
        server(cfg, kind, payload, datagram)
    }
}

fn server_addr(cfg: &Config) -> Res<IpAddr> {
    let host = cfg.server.as_deref().unwrap_or_default();
    (host, cfg.port)
        .to_socket_addrs()
        .map_err(|e| format!("{e} for {host}"))?
        .map(|a| a.ip())
        .find(|a| a.is_ipv4() == cfg.device.addr().is_ipv4())
        .ok_or(format!("{host} has no address of the device's family"))
}

fn client(
    cfg: &Config,
    kind: Kind,
    payload: usize,
    datagram: usize,
    count: u64,
    roce: Option<&Measured>,
) -> Res<Baseline> {
    let server = cfg.server.clone().unwrap_or_default();
    let mut ctl = Oob::connect(&server, cfg.port, Duration::from_secs(10))
        .map_err(io("connect to the server's control port"))?;
    ctl.set_timeout(Some(cfg.timeout)).map_err(io("timeout"))?;
    let ms = cfg.duration.map_or(0, |d| d.as_millis() as u64);
    let verb = if kind == Kind::Bw {
        "UDP_BW"
    } else {
        "UDP_LAT"
    };
    let window = match cfg.udp_window {
        Some(w) => w,
        None => (WINDOW_BYTES / datagram).clamp(1, 64) as u64,
    };
    let credit_every = (window / 2).max(1);
    ctl.write_line(&format!("{verb} {datagram} {count} {ms} {credit_every}"))
        .map_err(io("send the parameters"))?;
    let ready = ctl.read_line().map_err(io("wait for the server"))?;
    if ready.trim() != "READY" {
        return Err(format!("UDP baseline: the server said {ready:?}"));
    }
    let dst = SocketAddr::new(server_addr(cfg)?, cfg.port);
    let sock = UdpSocket::bind(SocketAddr::new(cfg.device.addr(), 0)).map_err(io("bind"))?;
    sock.connect(dst).map_err(io("connect"))?;
    let mut buf = vec![0x5au8; datagram];
    println!("{RESULT_LINE}");
    let mut b = Baseline {
        kind,
        payload,
        datagram,
        sent: 0,
        received: 0,
        bw: None,
        lat: None,
        ratio: None,
    };
    match kind {
        Kind::Bw => {
            println!(
                " UDP baseline: blast of {datagram}-byte datagrams ({payload} bytes of payload + {ROCE_OVERHEAD}), {} -> {dst}, {}",
                cfg.device.addr(),
                if window > 0 {
                    format!("at most {window} in flight (a credit every {credit_every})")
                } else {
                    "unpaced".to_string()
                }
            );
            if window > 0 {
                // Credits come back on the same socket; wait at most this
                // long for one before taking the missing datagrams as lost.
                sock.set_read_timeout(Some(Duration::from_millis(50)))
                    .map_err(io("timeout"))?;
            }
            let mut credit = [0u8; 16];
            let t0 = Instant::now();
            let end = cfg.duration.map(|d| t0 + d);
            let (mut sent, mut acked) = (0u64, 0u64);
            while end.map_or(sent < count, |e| Instant::now() < e) {
                while window > 0 && sent - acked >= window {
                    match sock.recv(&mut credit) {
                        Ok(8) => {
                            let upto =
                                u64::from_be_bytes(credit[..8].try_into().unwrap_or_default());
                            acked = acked.max(upto.min(sent));
                        }
                        Ok(_) => {}
                        Err(_) => acked = sent,
                    }
                }
                buf[..8].copy_from_slice(&sent.to_be_bytes());
                match sock.send(&buf) {
                    Ok(_) => sent += 1,
                    // The socket buffer is full (ENOBUFS): give the receiver a moment.
                    Err(_) => std::thread::yield_now(),
                }
            }
            ctl.write_line(&format!("END {sent}"))
                .map_err(io("end the blast"))?;
            let line = ctl.read_line().map_err(io("read the result"))?;
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() != 4 || f[0] != "RESULT" {
                return Err(format!("UDP baseline: bad result {line:?}"));
            }
            let got: u64 = f[1].parse().unwrap_or(0);
            let ns: f64 = f[3].parse().unwrap_or(0.0);
            let rep = bw_report(cfg, payload, got, ns);
            print_bw_header(cfg);
            print_bw_line(cfg, &rep);
            println!(
                " received {got} of {sent} datagrams ({:.1}% lost)",
                if sent > 0 {
                    100.0 * (sent - got.min(sent)) as f64 / sent as f64
                } else {
                    0.0
                }
            );
            b.sent = sent;
            b.received = got;
            if let Some(Measured::Bw(r)) = roce {
                if rep.bw_avg > 0.0 {
                    b.ratio = Some(r.bw_avg / rep.bw_avg);
                }
            }
            b.bw = Some(rep);
        }
        Kind::Lat => {
            println!(
                " UDP baseline: ping-pong of {datagram}-byte datagrams ({payload} bytes of payload + {ROCE_OVERHEAD}){}, {} <-> {dst}",
                if cfg.udp_acks {
                    ", each with a 20-byte datagram before it in one sendmmsg"
                } else {
                    ""
                },
                cfg.device.addr()
            );
            sock.set_read_timeout(Some(Duration::from_secs(1)))
                .map_err(io("timeout"))?;
            let spin = cfg.spin.unwrap_or_default();
            sock.set_nonblocking(!spin.is_zero())
                .map_err(io("non-blocking"))?;
            let mut back = vec![0u8; datagram + 1];
            let mut tposted = Vec::with_capacity(count as usize + 1);
            let t0 = Instant::now();
            let end = cfg.duration.map(|d| t0 + d);
            let mut n = 0u64;
            while end.map_or(n < count, |e| Instant::now() < e) {
                tposted.push(t0.elapsed().as_nanos() as u64);
                buf[..8].copy_from_slice(&n.to_be_bytes());
                send_pair(&sock, &buf, cfg.udp_acks).map_err(io("send"))?;
                loop {
                    let (k, _) = recv_spinning(&sock, &mut back, spin, Duration::from_secs(1))
                        .map_err(io("no echo within 1 s"))?;
                    if k >= 8 && back[..8] == buf[..8] {
                        break;
                    }
                }
                n += 1;
            }
            tposted.push(t0.elapsed().as_nanos() as u64);
            ctl.write_line(&format!("END {n}"))
                .map_err(io("end the ping-pong"))?;
            let _ = ctl.read_line();
            // Each entry is one round trip: half of it, like write/send_lat.
            let rep = lat_stats(payload as u64, &tposted, 2.0);
            let rep = LatReport { iters: n, ..rep };
            println!("{RESULT_FMT_LAT}");
            print_lat_line(&rep);
            b.sent = n;
            b.received = n;
            if let Some(Measured::Lat(r)) = roce {
                if rep.t_typical > 0.0 {
                    b.ratio = Some(r.t_typical / rep.t_typical);
                }
            }
            b.lat = Some(rep);
        }
    }
    println!("{RESULT_LINE}");
    if let Some(r) = b.ratio {
        match kind {
            Kind::Bw => println!(" RoCE/UDP bandwidth ratio: {r:.2}"),
            Kind::Lat => println!(" RoCE/UDP latency ratio: {r:.2} (t_typical, half round trip)"),
        }
    }
    Ok(b)
}

fn bw_report(cfg: &Config, payload: usize, got: u64, ns: f64) -> BwReport {
    let bytes = payload as f64 * got as f64;
    let per_sec = if ns > 0.0 { bytes * 1e9 / ns } else { 0.0 };
    BwReport {
        size: payload as u64,
        iters: got,
        bw_peak: 0.0,
        bw_avg: if cfg.report_gbits {
            per_sec / 125e6
        } else {
            per_sec / 1_048_576.0
        },
        msg_rate: if ns > 0.0 { got as f64 * 1e3 / ns } else { 0.0 },
    }
}

fn server(cfg: &Config, kind: Kind, payload: usize, datagram: usize) -> Res<Baseline> {
    let s = super::oob::accept_one(cfg.port, cfg.timeout).map_err(io("accept"))?;
    let mut ctl = Oob::from_stream(s);
    ctl.set_timeout(Some(cfg.timeout)).map_err(io("timeout"))?;
    let line = ctl.read_line().map_err(io("read the parameters"))?;
    let f: Vec<&str> = line.split_whitespace().collect();
    if f.len() != 5 || !(f[0] == "UDP_BW" || f[0] == "UDP_LAT") {
        return Err(format!("UDP baseline: bad request {line:?}"));
    }
    let datagram = f[1].parse::<usize>().unwrap_or(datagram).clamp(8, MAX_UDP);
    let payload = datagram
        .saturating_sub(ROCE_OVERHEAD)
        .max(payload.min(datagram));
    let bw = f[0] == "UDP_BW";
    let credit_every: u64 = f[4].parse().unwrap_or(8).max(1);
    let sock = UdpSocket::bind(SocketAddr::new(cfg.device.addr(), cfg.port)).map_err(io("bind"))?;
    sock.set_read_timeout(Some(Duration::from_millis(20)))
        .map_err(io("timeout"))?;
    // The echo polls as the client does (`--spin_us`); the blast blocks.
    let spin = if bw {
        Duration::ZERO
    } else {
        cfg.spin.unwrap_or_default()
    };
    sock.set_nonblocking(!spin.is_zero())
        .map_err(io("non-blocking"))?;
    let stop = Arc::new(AtomicBool::new(false));
    let acks = cfg.udp_acks;
    let worker = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut connected = false;
            let mut buf = vec![0u8; MAX_UDP + 1];
            let (mut n, mut bytes) = (0u64, 0u64);
            let (mut first, mut last) = (None::<Instant>, Instant::now());
            loop {
                match recv_spinning(&sock, &mut buf, spin, Duration::from_millis(20)) {
                    Ok((k, from)) => {
                        let now = Instant::now();
                        first.get_or_insert(now);
                        last = now;
                        n += 1;
                        bytes += k as u64;
                        if !bw && acks {
                            // The echo goes back with an ACK before it; the
                            // client's ACKs are not echoed.
                            if buf[..k] != ACK {
                                if !connected {
                                    connected = sock.connect(from).is_ok();
                                }
                                let _ = send_pair(&sock, &buf[..k], true);
                            }
                        } else if !bw {
                            let _ = sock.send_to(&buf[..k], from);
                        } else if n % credit_every == 0 && k >= 8 {
                            // A credit: everything up to this sequence number is in.
                            let seq = u64::from_be_bytes(buf[..8].try_into().unwrap_or_default());
                            let _ = sock.send_to(&(seq + 1).to_be_bytes(), from);
                        }
                    }
                    Err(_) => {
                        if stop.load(Ordering::Acquire) {
                            break;
                        }
                    }
                }
            }
            let ns = first.map_or(0, |f| (last - f).as_nanos() as u64);
            (n, bytes, ns)
        })
    };
    ctl.write_line("READY").map_err(io("answer"))?;
    let end = ctl.read_line().map_err(io("wait for the end"))?;
    stop.store(true, Ordering::Release);
    let (n, bytes, ns) = worker
        .join()
        .map_err(|_| "UDP baseline: the receiver panicked".to_string())?;
    let sent: u64 = end
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    if bw {
        ctl.write_line(&format!("RESULT {n} {bytes} {ns}"))
            .map_err(io("send the result"))?;
    } else {
        ctl.write_line("OK").map_err(io("answer"))?;
    }
    println!("{RESULT_LINE}");
    println!(
        " UDP baseline ({}): {n} of {sent} datagrams of {datagram} bytes received on {}:{}",
        if bw { "blast" } else { "ping-pong echo" },
        cfg.device.addr(),
        cfg.port
    );
    let rep = bw_report(cfg, payload, n, ns as f64);
    if bw {
        print_bw_header(cfg);
        print_bw_line(cfg, &rep);
    }
    println!("{RESULT_LINE}");
    Ok(Baseline {
        kind,
        payload,
        datagram,
        sent,
        received: n,
        bw: bw.then_some(rep),
        lat: None,
        ratio: None,
    })
}
