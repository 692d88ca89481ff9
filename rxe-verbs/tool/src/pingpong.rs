//! `rxe pingpong`: rdma-core's `ibv_rc_pingpong`, `ibv_uc_pingpong`,
//! `ibv_ud_pingpong` and `ibv_srq_pingpong` in one command, with their flags,
//! their output and their out-of-band exchange, so that either side can face
//! the real programs on a host running the kernel's rxe.
//!
//! The exchange is the one of rdma-core's `pingpong.c`: the client connects
//! over TCP (port 18515 by default) and writes its address as a 52-byte
//! NUL-terminated line `LLLL:QQQQQQ:PPPPPP:GGGG...` (LID, QPN and PSN in
//! hex, then the 16 raw GID bytes as 32 hex digits); the server reads it,
//! brings its QP to RTS, answers with its own line, and the client ends with
//! `done` (5 bytes with the NUL). `--mode srq` sends 256 lines each way, one
//! per possible QP, the unused ones zero, as `ibv_srq_pingpong` does.
//!
//! Then client and server take turns to SEND `size` bytes, `iters` times
//! each, with `rx_depth` receives kept posted. Differences from rdma-core:
//! soft devices have no default unless `RXE_DEVICES` names one, the GID is
//! always sent (index 0 unless `-g` says otherwise: RoCE cannot do without
//! it), polling waits on the device's progress rather than spinning (the
//! progress thread needs the core), and `--timeout` bounds every wait.

use clap::{Args as ClapArgs, ValueEnum};
use rxe_core::psn::Psn;
use rxe_verbs::*;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Which rdma-core program to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// `ibv_rc_pingpong`: one RC QP.
    Rc,
    /// `ibv_uc_pingpong`: one UC QP.
    Uc,
    /// `ibv_ud_pingpong`: one UD QP and an address handle (Q_Key 0x11111111).
    Ud,
    /// `ibv_srq_pingpong`: `--num-qp` RC QPs sharing one receive queue.
    Srq,
}

/// Arguments of `rxe pingpong`.
#[derive(Debug, ClapArgs)]
pub struct Args {
    /// Server to connect to (TCP, for the address exchange); without it,
    /// wait for a client.
    servername: Option<String>,
    /// Listen on / connect to this TCP port.
    #[arg(short = 'p', long, default_value_t = 18515)]
    port: u16,
    /// Soft device: an IP address to bind (UDP port 4791), or a name from
    /// RXE_DEVICES (default: its first device).
    #[arg(short = 'd', long = "ib-dev")]
    ib_dev: Option<String>,
    /// Port of the device (soft devices have port 1 only).
    #[arg(short = 'i', long = "ib-port", default_value_t = 1)]
    ib_port: u8,
    /// Size of message to exchange (default 4096; 2048 with --mode ud).
    #[arg(short = 's', long)]
    size: Option<u32>,
    /// Path MTU: 256, 512, 1024, 2048 or 4096 (RC, UC, SRQ).
    #[arg(short = 'm', long, default_value_t = 1024)]
    mtu: u32,
    /// The device's active MTU, as the kernel's rxe derives it from the link
    /// (1500-byte Ethernet: 1024; 9000: 4096). Limits UD messages.
    #[arg(long = "port-mtu", default_value_t = 4096)]
    port_mtu: u32,
    /// Number of receives to post at a time.
    #[arg(short = 'r', long = "rx-depth", default_value_t = 500)]
    rx_depth: u32,
    /// Number of exchanges (with --mode srq: in all, over all QPs).
    #[arg(short = 'n', long, default_value_t = 1000)]
    iters: u32,
    /// Service level (accepted for compatibility; RoCE v2 without VLANs has no use for it).
    #[arg(short = 'l', long, default_value_t = 0)]
    sl: u8,
    /// Sleep on CQ events (a completion channel) instead of polling.
    #[arg(short = 'e', long)]
    events: bool,
    /// Local port GID index.
    #[arg(short = 'g', long = "gid-idx", default_value_t = 0)]
    gid_idx: u8,
    /// Validate received buffers: the client sends rdma-core's `--chk`
    /// pattern, and each side checks every message it receives.
    #[arg(short = 'c', long)]
    chk: bool,
    /// Number of QPs to use (--mode srq).
    #[arg(short = 'q', long = "num-qp", default_value_t = 16)]
    num_qp: u32,
    /// Which rdma-core program to be.
    #[arg(long, value_enum, default_value_t = Mode::Rc)]
    mode: Mode,
    /// Give up after this many seconds without progress (0: wait forever, as rdma-core does).
    #[arg(long, default_value_t = 0)]
    timeout: u64,
}

const RECV_WRID: u64 = 1;
const SEND_WRID: u64 = 2;
/// `ibv_srq_pingpong` exchanges this many addresses, whatever `--num-qp`.
const MAX_QP: usize = 256;
/// `sizeof "0000:000000:000000:00000000000000000000000000000000"`.
const MSG_LEN: usize = 52;
/// The GRH area at the start of every UD receive buffer.
const GRH: usize = 40;
const UD_QKEY: u32 = 0x1111_1111;
const PAGE: usize = 4096;
/// How long a client keeps trying to reach a server that is not listening yet.
const CONNECT_RETRY: Duration = Duration::from_secs(5);

type Res<T> = Result<T, String>;

/// One side's address, as exchanged (`struct pingpong_dest`). Shared with
/// `rxe fuzz`, which connects to rdma-core's pingpong servers the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Dest {
    pub(crate) lid: u16,
    pub(crate) qpn: u32,
    pub(crate) psn: u32,
    pub(crate) gid: Ipv6Addr,
}

impl Dest {
    const ZERO: Dest = Dest {
        lid: 0,
        qpn: 0,
        psn: 0,
        gid: Ipv6Addr::UNSPECIFIED,
    };

    /// The 52-byte wire form: `%04x:%06x:%06x:%s` and a NUL.
    pub(crate) fn to_wire(self) -> [u8; MSG_LEN] {
        let gid: String = self
            .gid
            .octets()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let text = format!("{:04x}:{:06x}:{:06x}:{gid}", self.lid, self.qpn, self.psn);
        let mut msg = [0u8; MSG_LEN];
        msg[..text.len()].copy_from_slice(text.as_bytes());
        msg
    }

    /// Parses what `to_wire` (or rdma-core's `sprintf`) wrote.
    pub(crate) fn from_wire(msg: &[u8]) -> Res<Dest> {
        let end = msg.iter().position(|&b| b == 0).unwrap_or(msg.len());
        let text = std::str::from_utf8(&msg[..end]).map_err(|_| "remote address is not text")?;
        let bad = || format!("bad remote address {text:?}");
        let mut parts = text.splitn(4, ':');
        let mut field = |max: u32| -> Res<u32> {
            let f = parts.next().ok_or_else(bad)?;
            u32::from_str_radix(f, 16)
                .ok()
                .filter(|v| *v <= max)
                .ok_or_else(bad)
        };
        let lid = field(0xffff)? as u16;
        let qpn = field(0xff_ffff)?;
        let psn = field(0xff_ffff)?;
        let g = parts.next().ok_or_else(bad)?;
        if g.len() != 32 || !g.is_ascii() {
            return Err(bad());
        }
        let mut raw = [0u8; 16];
        for (i, b) in raw.iter_mut().enumerate() {
            *b = u8::from_str_radix(&g[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
        }
        Ok(Dest {
            lid,
            qpn,
            psn,
            gid: Ipv6Addr::from(raw),
        })
    }

    fn print(&self, which: &str, ud: bool) {
        // ibv_ud_pingpong's local line has ": GID" where the others have ", GID".
        let sep = if ud && which == "local" { ":" } else { "," };
        let pad = if which == "local" { " " } else { "" };
        println!(
            "  {which} address: {pad}LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}{sep} GID {}",
            self.lid, self.qpn, self.psn, self.gid
        );
    }
}

/// The IP address a GID routes to.
pub(crate) fn gid_addr(gid: Ipv6Addr) -> IpAddr {
    match gid.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(gid),
    }
}

fn io(what: &str) -> impl Fn(std::io::Error) -> String + '_ {
    move |e| format!("{what}: {e}")
}

/// The out-of-band exchange, client side (`pp_client_exch_dest`).
pub(crate) fn client_exchange(
    server: &str,
    port: u16,
    mine: &[Dest],
    timeout: Option<Duration>,
) -> Res<Vec<Dest>> {
    let addrs: Vec<SocketAddr> = (server, port)
        .to_socket_addrs()
        .map_err(|e| format!("{e} for {server}:{port}"))?
        .collect();
    let deadline = Instant::now() + CONNECT_RETRY;
    let mut sock = loop {
        if let Some(s) = addrs.iter().find_map(|a| TcpStream::connect(a).ok()) {
            break s;
        }
        if Instant::now() >= deadline {
            return Err(format!("Couldn't connect to {server}:{port}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    sock.set_read_timeout(timeout)
        .map_err(io("set a TCP timeout"))?;
    for d in mine {
        sock.write_all(&d.to_wire())
            .map_err(io("Couldn't send local address"))?;
    }
    let mut theirs = Vec::with_capacity(mine.len());
    let mut msg = [0u8; MSG_LEN];
    for _ in mine {
        sock.read_exact(&mut msg)
            .map_err(io("Couldn't read remote address"))?;
        theirs.push(Dest::from_wire(&msg)?);
    }
    sock.write_all(b"done\0")
        .map_err(io("Couldn't write done"))?;
    Ok(theirs)
}

/// Accepts one client, waiting at most `timeout`.
fn accept_one(port: u16, timeout: Option<Duration>) -> Res<TcpStream> {
    // Like getaddrinfo(NULL, AI_PASSIVE): every address, IPv6 (dual stack) first.
    let listener = TcpListener::bind((Ipv6Addr::UNSPECIFIED, port))
        .or_else(|_| TcpListener::bind(("0.0.0.0", port)))
        .map_err(|e| format!("Couldn't listen to port {port}: {e}"))?;
    let Some(limit) = timeout else {
        return listener
            .accept()
            .map(|(s, _)| s)
            .map_err(io("accept() failed"));
    };
    listener
        .set_nonblocking(true)
        .map_err(io("accept() failed"))?;
    let deadline = Instant::now() + limit;
    loop {
        match listener.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false).map_err(io("accept() failed"))?;
                return Ok(s);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    return Err(format!(
                        "no client connected to port {port} within {limit:?}"
                    ));
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(format!("accept() failed: {e}")),
        }
    }
}

/// The pingpong state: device, buffer, queues (`struct pingpong_context`).
///
/// The fields drop in the order they are declared, which is the order
/// rdma-core's `pp_close_ctx` destroys them: QPs first, the buffer's MR
/// only after them. (Deregistering the MR first once made a message still
/// arriving on a live QP fail mid-way with a NAK, which the peer's
/// `ibv_srq_pingpong` reported as an error.)
struct Pingpong {
    qps: Vec<QueuePair>,
    ah: Option<AddressHandle>,
    srq: Option<SharedReceiveQueue>,
    cq: CompletionQueue,
    channel: Option<CompletionChannel>,
    mr: MemoryRegion,
    pd: ProtectionDomain,
    ctx: Context,
    mode: Mode,
    size: usize,
    /// Where message data starts in the buffer (past the GRH area for UD).
    data_off: usize,
    remote_qpn: u32,
}

/// The `--chk` pattern: what the rdma-core program of this mode sends.
/// rc/uc/ud_pingpong fill their buffer with 0x7b and, with `--chk`, put a 0
/// at the start of each page; srq_pingpong sends its buffer as it was
/// allocated, all zeros.
fn chk_pattern(mode: Mode, size: usize) -> Vec<u8> {
    match mode {
        Mode::Srq => vec![0; size],
        _ => (0..size)
            .map(|i| if i % PAGE == 0 { 0 } else { 0x7b })
            .collect(),
    }
}

impl Pingpong {
    fn init(a: &Args, dev: &Device, size: usize, num_qp: usize) -> Res<Pingpong> {
        let ctx = dev
            .open()
            .map_err(|e| format!("Couldn't get context for {}: {e}", dev.name()))?;
        let ud = a.mode == Mode::Ud;
        if ud {
            let mtu = ctx.query_port().active_mtu.bytes();
            if size > mtu {
                return Err(format!("Requested size larger than port MTU ({mtu})"));
            }
        }
        let channel = a.events.then(|| ctx.create_comp_channel());
        let pd = ctx
            .alloc_pd()
            .map_err(|e| format!("Couldn't allocate PD: {e}"))?;
        let data_off = if ud { GRH } else { 0 };
        // rdma-core fills the buffer with 0x7b (srq_pingpong with zeros). With
        // --chk the server starts from something else, so that a message that
        // never arrived cannot pass for one that did.
        let fill = match (a.mode, a.chk && a.servername.is_none()) {
            (_, true) => 0xa5,
            (Mode::Srq, false) => 0,
            _ => 0x7b,
        };
        let mr = pd
            .register(vec![fill; size + data_off], Access::LOCAL_WRITE)
            .map_err(|e| format!("Couldn't register MR: {e}"))?;
        if a.chk && a.servername.is_some() {
            mr.write(data_off, &chk_pattern(a.mode, size))
                .map_err(|e| e.to_string())?;
        }
        let cqe = a.rx_depth
            + if a.mode == Mode::Srq {
                num_qp as u32
            } else {
                1
            };
        let cq = ctx
            .create_cq(cqe, channel.as_ref())
            .map_err(|e| format!("Couldn't create CQ: {e}"))?;
        let srq = if a.mode == Mode::Srq {
            Some(
                ctx.create_srq(&pd, a.rx_depth, 1)
                    .map_err(|e| format!("Couldn't create SRQ: {e}"))?,
            )
        } else {
            None
        };
        let qp_type = match a.mode {
            Mode::Uc => QpType::Uc,
            Mode::Ud => QpType::Ud,
            Mode::Rc | Mode::Srq => QpType::Rc,
        };
        let cap = QpCap {
            max_send_wr: 1,
            max_recv_wr: if srq.is_some() { 0 } else { a.rx_depth },
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let mut qps = Vec::with_capacity(num_qp);
        for i in 0..num_qp {
            let mut attr = QpInitAttr::new(qp_type, &cq, &cq).with_cap(cap);
            if let Some(s) = &srq {
                attr = attr.with_srq(s);
            }
            let qp = ctx.create_qp(&pd, &attr).map_err(|e| match a.mode {
                Mode::Srq => format!("Couldn't create QP[{i}]: {e}"),
                _ => format!("Couldn't create QP: {e}"),
            })?;
            // RESET -> INIT, as pp_init_ctx does, so that receives can be posted.
            let mut init = QpAttr {
                state: QpState::Init,
                pkey_index: 0,
                port: a.ib_port,
                ..QpAttr::default()
            };
            let mut mask = QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT;
            if ud {
                init.qkey = UD_QKEY;
                mask |= QpAttrMask::QKEY;
            } else {
                init.access = Access::empty();
                mask |= QpAttrMask::ACCESS_FLAGS;
            }
            qp.modify(&init, mask)
                .map_err(|e| format!("Failed to modify QP to INIT: {e}"))?;
            qps.push(qp);
        }
        Ok(Pingpong {
            mode: a.mode,
            size,
            data_off,
            ctx,
            channel,
            pd,
            mr,
            cq,
            srq,
            qps,
            ah: None,
            remote_qpn: 0,
        })
    }

    /// Posts up to `n` receives; returns how many were posted (`pp_post_recv`).
    fn post_recv(&self, n: u32) -> u32 {
        let wr = RecvWr {
            wr_id: RECV_WRID,
            sg_list: vec![self.mr.sge(0..self.size + self.data_off)],
        };
        let wrs = vec![wr; n as usize];
        let r = match &self.srq {
            Some(srq) => srq.post_recv(&wrs),
            None => self.qps[0].post_recv(&wrs),
        };
        match r {
            Ok(()) => n,
            Err(Error::BadWorkRequest { index, .. }) => index as u32,
            Err(_) => 0,
        }
    }

    /// Posts one SEND of the buffer on QP `i` (`pp_post_send`).
    fn post_send(&self, i: usize) -> Res<()> {
        let sge = self.mr.sge(self.data_off..self.data_off + self.size);
        let wr = match &self.ah {
            Some(ah) => ah.send(SEND_WRID, &[sge], self.remote_qpn, UD_QKEY),
            None => SendWr::send(SEND_WRID, &[sge]),
        };
        self.qps[i]
            .post_send(&[wr])
            .map_err(|e| format!("Couldn't post send: {e}"))
    }

    /// RTR and RTS towards the peer (`pp_connect_ctx`).
    fn connect(&mut self, a: &Args, mtu: Mtu, mine: &[Dest], theirs: &[Dest]) -> Res<()> {
        // rdma-core takes the GID of the first remote QP for all of them.
        let rgid = theirs[0].gid;
        if rgid.octets()[8..].iter().all(|&b| b == 0) {
            return Err(format!(
                "the remote GID {rgid} is empty: RoCE needs one (run an rdma-core peer with -g)"
            ));
        }
        let mut av = AddressVector::to(gid_addr(rgid));
        av.hop_limit = 1;
        av.sgid_index = a.gid_idx;
        if self.mode == Mode::Ud {
            let qp = &self.qps[0];
            let rtr = QpAttr {
                state: QpState::Rtr,
                ..QpAttr::default()
            };
            qp.modify(&rtr, QpAttrMask::STATE)
                .map_err(|e| format!("Failed to modify QP to RTR: {e}"))?;
            let rts = QpAttr {
                state: QpState::Rts,
                sq_psn: Psn::new(mine[0].psn),
                ..QpAttr::default()
            };
            qp.modify(&rts, QpAttrMask::STATE | QpAttrMask::SQ_PSN)
                .map_err(|e| format!("Failed to modify QP to RTS: {e}"))?;
            self.ah = Some(
                self.pd
                    .create_ah(av)
                    .map_err(|e| format!("Failed to create AH: {e}"))?,
            );
            self.remote_qpn = theirs[0].qpn;
            return Ok(());
        }
        let rc = self.mode != Mode::Uc;
        let name = |i: usize| {
            if self.mode == Mode::Srq {
                format!("QP[{i}]")
            } else {
                "QP".into()
            }
        };
        for (i, qp) in self.qps.iter().enumerate() {
            let rtr = QpAttr {
                state: QpState::Rtr,
                path_mtu: mtu,
                dest_qpn: theirs[i].qpn,
                rq_psn: Psn::new(theirs[i].psn),
                max_dest_rd_atomic: 1,
                min_rnr_timer: 12,
                av: Some(av),
                ..QpAttr::default()
            };
            let mut mask = QpAttrMask::STATE
                | QpAttrMask::AV
                | QpAttrMask::PATH_MTU
                | QpAttrMask::DEST_QPN
                | QpAttrMask::RQ_PSN;
            if rc {
                mask |= QpAttrMask::MAX_DEST_RD_ATOMIC | QpAttrMask::MIN_RNR_TIMER;
            }
            qp.modify(&rtr, mask)
                .map_err(|e| format!("Failed to modify {} to RTR: {e}", name(i)))?;
            let rts = QpAttr {
                state: QpState::Rts,
                timeout: 14,
                retry_cnt: 7,
                rnr_retry: 7,
                sq_psn: Psn::new(mine[i].psn),
                max_rd_atomic: 1,
                ..QpAttr::default()
            };
            let mut mask = QpAttrMask::STATE | QpAttrMask::SQ_PSN;
            if rc {
                mask |= QpAttrMask::TIMEOUT
                    | QpAttrMask::RETRY_CNT
                    | QpAttrMask::RNR_RETRY
                    | QpAttrMask::MAX_QP_RD_ATOMIC;
            }
            qp.modify(&rts, mask)
                .map_err(|e| format!("Failed to modify {} to RTS: {e}", name(i)))?;
        }
        Ok(())
    }

    /// Waits for the next completions: on the channel with `--events`, else
    /// on the device's progress. `Ok(false)` when `limit` passed without any.
    fn next_completions(
        &self,
        out: &mut Vec<Completion>,
        max: usize,
        limit: Option<Duration>,
    ) -> Res<bool> {
        let deadline = limit.map(|l| Instant::now() + l);
        let slice = |deadline: Option<Instant>| match deadline {
            Some(d) => d
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(1)),
            None => Duration::from_secs(1),
        };
        out.clear();
        loop {
            if let Some(ch) = &self.channel {
                if let Some(cq) = ch.get_event(slice(deadline)) {
                    if cq != self.cq.id() {
                        return Err(format!("CQ event for unknown CQ {cq}"));
                    }
                    self.cq
                        .req_notify(false)
                        .map_err(|e| format!("Couldn't request CQ notification: {e}"))?;
                    self.cq.poll_into(out, max);
                    return Ok(true);
                }
            } else {
                match self.cq.wait(1, slice(deadline)) {
                    Ok(first) => {
                        out.extend(first);
                        self.cq.poll_into(out, max.saturating_sub(out.len()));
                        return Ok(true);
                    }
                    Err(Error::Timeout(_)) => {}
                    Err(e) => return Err(format!("poll CQ failed: {e}")),
                }
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(false);
            }
        }
    }

    /// Checks a received message against the `--chk` pattern; returns the
    /// pages that differ.
    fn bad_pages(&self) -> Vec<usize> {
        let want = chk_pattern(self.mode, self.size);
        self.mr.with_bytes(|b| {
            let got = &b[self.data_off..self.data_off + self.size];
            (0..self.size.div_ceil(PAGE))
                .filter(|p| {
                    let r = p * PAGE..((p + 1) * PAGE).min(self.size);
                    got[r.clone()] != want[r]
                })
                .collect()
        })
    }
}

fn run_inner(a: &Args) -> Res<()> {
    let dev = match &a.ib_dev {
        Some(name) => {
            Device::find(name).map_err(|e| format!("IB device {name} not found ({e})"))?
        }
        None => Device::list().into_iter().next().ok_or(
            "No IB devices found: soft devices have no default; give -d <local IP address> \
             (e.g. -d 127.0.0.2) or name one in RXE_DEVICES=name=address",
        )?,
    };
    if a.ib_port != 1 {
        return Err(format!("soft devices have port 1 only, not {}", a.ib_port));
    }
    let port_mtu = Mtu::from_bytes(a.port_mtu as usize).ok_or(format!(
        "invalid --port-mtu {} (256, 512, 1024, 2048 or 4096)",
        a.port_mtu
    ))?;
    let dev = dev.with_mtu(port_mtu);
    let mtu = Mtu::from_bytes(a.mtu as usize).ok_or(format!(
        "invalid MTU {} (256, 512, 1024, 2048 or 4096)",
        a.mtu
    ))?;
    let size = a
        .size
        .unwrap_or(if a.mode == Mode::Ud { 2048 } else { 4096 }) as usize;
    let srq = a.mode == Mode::Srq;
    let num_qp = if srq { a.num_qp as usize } else { 1 };
    if srq {
        if size < 1 {
            return Err("size must be at least 1".into());
        }
        if num_qp == 0 || num_qp > MAX_QP {
            return Err(format!("num-qp must be 1..={MAX_QP}"));
        }
        if num_qp as u32 > a.rx_depth {
            return Err(format!(
                "rx_depth {} is too small for {num_qp} QPs -- must have at least one receive per QP.",
                a.rx_depth
            ));
        }
    }
    if a.rx_depth == 0 {
        return Err("rx-depth must be at least 1".into());
    }
    let timeout = (a.timeout > 0).then(|| Duration::from_secs(a.timeout));
    let ud = a.mode == Mode::Ud;
    let client = a.servername.is_some();

    let mut pp = Pingpong::init(a, &dev, size, num_qp)?;
    let mut routs = pp.post_recv(a.rx_depth);
    if routs < a.rx_depth {
        return Err(format!("Couldn't post receive ({routs})"));
    }
    if a.events {
        pp.cq
            .req_notify(false)
            .map_err(|e| format!("Couldn't request CQ notification: {e}"))?;
    }
    let port = pp.ctx.query_port();
    let gid = *port
        .gids
        .get(usize::from(a.gid_idx))
        .ok_or(format!("can't read sgid of index {}", a.gid_idx))?;
    let mine: Vec<Dest> = pp
        .qps
        .iter()
        .map(|qp| Dest {
            lid: 0,
            qpn: qp.qp_num(),
            psn: rand::random::<u32>() & 0xff_ffff,
            gid,
        })
        .collect();
    for d in &mine {
        d.print("local", ud);
    }
    // srq_pingpong sends MAX_QP addresses, the unused ones zero.
    let mut wire_mine = mine.clone();
    if srq {
        wire_mine.resize(MAX_QP, Dest::ZERO);
    }

    let theirs = match &a.servername {
        Some(server) => client_exchange(server, a.port, &wire_mine, timeout)?,
        None => {
            let mut sock = accept_one(a.port, timeout)?;
            sock.set_read_timeout(timeout)
                .map_err(io("set a TCP timeout"))?;
            let mut theirs = Vec::with_capacity(wire_mine.len());
            let mut msg = [0u8; MSG_LEN];
            for _ in 0..wire_mine.len() {
                sock.read_exact(&mut msg)
                    .map_err(io("Couldn't read remote address"))?;
                theirs.push(Dest::from_wire(&msg)?);
            }
            pp.connect(a, mtu, &mine, &theirs)
                .map_err(|e| format!("{e}\nCouldn't connect to remote QP"))?;
            for d in &wire_mine {
                sock.write_all(&d.to_wire())
                    .map_err(io("Couldn't send local address"))?;
            }
            let mut done = [0u8; 5];
            sock.read_exact(&mut done)
                .map_err(io("Couldn't read done"))?;
            if &done != b"done\0" {
                return Err(format!("expected done from the client, got {done:?}"));
            }
            theirs
        }
    };
    for d in &theirs[..num_qp] {
        d.print("remote", ud);
    }
    if client {
        pp.connect(a, mtu, &mine, &theirs)?;
    }

    // pending[i]: what QP i still waits for before its next SEND.
    let mut pending = vec![RECV_WRID; num_qp];
    if client {
        for (i, p) in pending.iter_mut().enumerate() {
            pp.post_send(i)?;
            *p |= SEND_WRID;
        }
    }
    let refill_at = if srq { num_qp as u32 } else { 1 };
    let max_wc = if srq { num_qp + a.rx_depth as usize } else { 2 };
    let iters = a.iters;
    let mut bad_pages = 0usize;
    let (mut rcnt, mut scnt) = (0u32, 0u32);
    let mut wcs = Vec::with_capacity(max_wc);
    let start = Instant::now();
    while rcnt < iters || scnt < iters {
        if !pp.next_completions(&mut wcs, max_wc, timeout)? {
            return Err(format!(
                "no completion for {}s ({scnt} sent, {rcnt} received of {iters})",
                a.timeout
            ));
        }
        for wc in &wcs {
            if wc.status != WcStatus::Success {
                return Err(format!(
                    "Failed status {} ({}) for wr_id {}",
                    wc.status, wc.status as u32, wc.wr_id
                ));
            }
            let qi = pp
                .qps
                .iter()
                .position(|q| q.qp_num() == wc.qp_num)
                .ok_or(format!("Couldn't find QPN {:06x}", wc.qp_num))?;
            match wc.wr_id {
                SEND_WRID => scnt += 1,
                RECV_WRID => {
                    routs -= 1;
                    if routs <= refill_at {
                        routs += pp.post_recv(a.rx_depth - routs);
                        if routs < a.rx_depth {
                            return Err(format!("Couldn't post receive ({routs})"));
                        }
                    }
                    rcnt += 1;
                    if a.chk {
                        let expected = (size + pp.data_off) as u32;
                        if wc.byte_len != expected {
                            eprintln!("received {} bytes, expected {expected}", wc.byte_len);
                            bad_pages += 1;
                        }
                        for p in pp.bad_pages() {
                            println!("invalid data in page {p}");
                            bad_pages += 1;
                        }
                    }
                }
                other => return Err(format!("Completion for unknown wr_id {other}")),
            }
            pending[qi] &= !wc.wr_id;
            if scnt < iters && pending[qi] == 0 {
                pp.post_send(qi)?;
                pending[qi] = RECV_WRID | SEND_WRID;
            }
        }
    }
    let usec = start.elapsed().as_secs_f64() * 1e6;
    let bytes = size as u64 * u64::from(iters) * 2;
    println!(
        "{bytes} bytes in {:.2} seconds = {:.2} Mbit/sec",
        usec / 1e6,
        bytes as f64 * 8.0 / usec
    );
    println!(
        "{iters} iters in {:.2} seconds = {:.2} usec/iter",
        usec / 1e6,
        usec / f64::from(iters.max(1))
    );
    if bad_pages > 0 {
        return Err(format!("--chk: {bad_pages} bad pages or lengths received"));
    }
    // Let the last ACKs leave before the QPs go (a peer still waiting for
    // one would retransmit to a QP that no longer exists).
    if client || a.mode != Mode::Rc {
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(pp);
    Ok(())
}

/// Runs `rxe pingpong`.
pub fn run(args: &Args) -> ExitCode {
    match run_inner(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_roundtrip() {
        let d = Dest {
            lid: 0,
            qpn: 0x12ab,
            psn: 0xfedcba,
            gid: "::ffff:127.0.0.2".parse().unwrap(),
        };
        let w = d.to_wire();
        assert_eq!(
            &w[..],
            &b"0000:0012ab:fedcba:00000000000000000000ffff7f000002\0"[..]
        );
        assert_eq!(Dest::from_wire(&w).unwrap(), d);
        assert_eq!(Dest::ZERO.to_wire().len(), MSG_LEN);
        assert!(Dest::from_wire(b"0000:zz:000000:00").is_err());
    }
}
