//! `rxe rping`: librdmacm's `rping` over rxe-rs's rdma_cm
//! (`rxe_verbs::cm`), with its flags, its output and its exchange on the
//! QPs, so that either side can face the real `rping` (on a host running
//! the kernel's rxe, or over the drop-in libraries).
//!
//! The connection is made with the CM (port 7174 by default, TCP port
//! space). Then, `count` times (or until interrupted), as rping.c does:
//!
//! 1. the client fills its *start* buffer with `rdma-ping-N: ` and a
//!    rolling run of letters, and SENDs its address, rkey and size (a
//!    16-byte `struct rping_rdma_info`, big-endian);
//! 2. the server RDMA READs the start buffer into its own buffer and SENDs
//!    "go ahead" (its buffer's info);
//! 3. the client SENDs the info of its *rdma* buffer;
//! 4. the server RDMA WRITEs what it read into it (up to and including the
//!    string's NUL) and SENDs again;
//! 5. the client checks, with `-V`, that the rdma buffer equals the start
//!    buffer, and with `-v` prints `ping data: ...`.
//!
//! The client then disconnects; the server answers and ends (or, with
//! `-P`, waits for the next client).

use clap::Args as ClapArgs;
use rxe_verbs::cm::{CmId, ConnParam, Event, EventChannel, EventKind, PortSpace};
use rxe_verbs::*;
use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Arguments of `rxe rping`.
#[derive(Debug, ClapArgs)]
pub struct Args {
    /// Be the server.
    #[arg(short = 's', conflicts_with = "client")]
    server: bool,
    /// Be the client.
    #[arg(short = 'c')]
    client: bool,
    /// Server: the address to listen on (a soft device's); client: the
    /// server's address.
    #[arg(short = 'a')]
    addr: IpAddr,
    /// Client: the local address (the soft device to use); default: the
    /// server's address with its last byte plus one.
    #[arg(short = 'I')]
    src: Option<IpAddr>,
    /// Port.
    #[arg(short = 'p', default_value_t = 7174)]
    port: u16,
    /// Pings to do (0: until stopped).
    #[arg(short = 'C', default_value_t = 0)]
    count: u64,
    /// Size of the ping buffer (at least 16, as rping's minimum).
    #[arg(short = 'S', default_value_t = 64)]
    size: usize,
    /// Print the ping data.
    #[arg(short = 'v')]
    verbose: bool,
    /// Check the data that came back (client).
    #[arg(short = 'V')]
    validate: bool,
    /// Server: keep serving clients, one after another.
    #[arg(short = 'P')]
    persistent: bool,
    /// Debug output.
    #[arg(short = 'd')]
    debug: bool,
    /// Give up on any one wait after this many seconds.
    #[arg(long, default_value_t = 30)]
    timeout: u64,
    /// Client: the CM's response timeout for the REQ (5-bit exponent of
    /// 4.096 µs; rdma_cm's is 20, about 4.3 s).
    #[arg(long = "cm-timeout")]
    cm_timeout: Option<u8>,
    /// Client: how often the REQ is sent again before the server is
    /// reported unreachable (rdma_cm's: 15).
    #[arg(long = "cm-retries")]
    cm_retries: Option<u8>,
}

/// rping's format of the ping text, and its minimum buffer.
const MIN_SIZE: usize = 16;
/// `struct rping_rdma_info`: buf (be64), rkey (be32), size (be32).
const INFO_LEN: usize = 16;

pub fn run(a: &Args) -> ExitCode {
    if a.server == a.client {
        eprintln!("rping: say -s (server) or -c (client)");
        return ExitCode::from(2);
    }
    if a.size < MIN_SIZE {
        eprintln!("rping: invalid size {} (min {MIN_SIZE})", a.size);
        return ExitCode::from(2);
    }
    let r = if a.server { server(a) } else { client(a) };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rping: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The verbs objects of one connection.
struct Res {
    qp: QueuePair,
    cq: CompletionQueue,
    /// Client: what the server reads. Server: unused.
    start: MemoryRegion,
    /// Client: where the server writes back. Server: what it reads into
    /// and writes from.
    rdma: MemoryRegion,
    send: MemoryRegion,
    recv: MemoryRegion,
    /// Completions taken while waiting for another kind.
    held: std::cell::RefCell<Vec<Completion>>,
    _pd: ProtectionDomain,
}

impl Res {
    fn new(ctx: &Context, size: usize) -> Result<Res, Error> {
        let pd = ctx.alloc_pd()?;
        let cq = ctx.create_cq(32, None)?;
        let mut init = QpInitAttr::new(QpType::Rc, &cq, &cq);
        init.cap.max_send_wr = 16;
        init.cap.max_recv_wr = 2;
        let qp = ctx.create_qp(&pd, &init)?;
        Ok(Res {
            start: pd.alloc_mr(size, Access::LOCAL_WRITE | Access::REMOTE_READ)?,
            rdma: pd.alloc_mr(size, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?,
            send: pd.alloc_mr(INFO_LEN, Access::LOCAL_WRITE)?,
            recv: pd.alloc_mr(INFO_LEN, Access::LOCAL_WRITE)?,
            qp,
            cq,
            held: std::cell::RefCell::new(Vec::new()),
            _pd: pd,
        })
    }

    fn post_recv(&self) -> Result<(), Error> {
        self.qp.post_recv(&[RecvWr {
            wr_id: 1,
            sg_list: vec![self.recv.sge(0..INFO_LEN)],
        }])
    }

    /// SENDs the info of `mr`'s first `len` bytes.
    fn send_info(&self, mr: &MemoryRegion, len: usize) -> Result<(), Error> {
        let mut info = [0u8; INFO_LEN];
        info[..8].copy_from_slice(&mr.addr().to_be_bytes());
        info[8..12].copy_from_slice(&mr.rkey().to_be_bytes());
        info[12..].copy_from_slice(&(len as u32).to_be_bytes());
        self.send.write(0, &info)?;
        self.qp
            .post_send(&[SendWr::send(2, &[self.send.sge(0..INFO_LEN)])])
    }

    /// The peer's info from the receive buffer: address, rkey, length.
    fn peer_info(&self) -> Result<(u64, u32, usize), Error> {
        let mut b = [0u8; INFO_LEN];
        self.recv.read(0, &mut b)?;
        let addr = u64::from_be_bytes(b[..8].try_into().expect("8 bytes"));
        let rkey = u32::from_be_bytes(b[8..12].try_into().expect("4 bytes"));
        let len = u32::from_be_bytes(b[12..].try_into().expect("4 bytes")) as usize;
        Ok((addr, rkey, len))
    }
}

/// Waits for one completion of `want` (and checks it succeeded); others
/// that come first are kept for later (a receive may complete before the
/// SEND that went out first is acknowledged).
fn wait_wc(res: &Res, want: WcOpcode, t: Duration) -> Result<Completion, String> {
    let deadline = Instant::now() + t;
    loop {
        let mut held = res.held.borrow_mut();
        if let Some(i) = held.iter().position(|w| w.opcode == want) {
            return Ok(held.remove(i));
        }
        drop(held);
        let left = deadline.saturating_duration_since(Instant::now());
        let wc = res
            .cq
            .wait(1, left.max(Duration::from_millis(1)))
            .map_err(|e| format!("waiting for a {want:?} completion: {e}"))?
            .remove(0);
        if wc.status != WcStatus::Success {
            return Err(format!("{:?} completion status {:?}", wc.opcode, wc.status));
        }
        res.held.borrow_mut().push(wc);
    }
}

fn wait_event(ch: &EventChannel, want: EventKind, t: Duration) -> Result<Event, String> {
    let e = ch
        .get_event(t)
        .ok_or_else(|| format!("no {want:?} event in {t:?}"))?;
    if e.kind != want {
        return Err(format!(
            "cma event {:?}, error {} (waiting for {want:?})",
            e.kind, e.status
        ));
    }
    Ok(e)
}

fn wait_event_any(ch: &EventChannel, t: Duration) -> Result<Event, String> {
    ch.get_event(t)
        .ok_or_else(|| format!("no cma event in {t:?}"))
}

/// rping's ping text for round `ping`, starting the letters at `start`.
fn ping_text(ping: u64, start: u8, size: usize) -> Vec<u8> {
    let mut b = format!("rdma-ping-{ping}: ").into_bytes();
    b.truncate(size);
    let mut c = start;
    while b.len() < size {
        b.push(c);
        c = if c >= 122 { 65 } else { c + 1 };
    }
    b[size - 1] = 0;
    b
}

fn client(a: &Args) -> Result<(), String> {
    let t = Duration::from_secs(a.timeout);
    let src = a.src.unwrap_or(match a.addr {
        IpAddr::V4(v) => {
            let mut o = v.octets();
            o[3] = o[3].wrapping_add(1);
            IpAddr::from(o)
        }
        v6 => v6,
    });
    let ctx = Device::soft(src)
        .open()
        .map_err(|e| format!("open the soft device on {src}: {e}"))?;
    let res = Res::new(&ctx, a.size).map_err(|e| e.to_string())?;
    let ch = EventChannel::new();
    let id = CmId::new(&ch, PortSpace::TCP).map_err(|e| e.to_string())?;
    if a.cm_timeout.is_some() || a.cm_retries.is_some() {
        id.set_cm_timeout(a.cm_timeout.unwrap_or(20), a.cm_retries.unwrap_or(15))
            .map_err(|e| e.to_string())?;
    }
    id.connect(
        &ctx,
        SocketAddr::new(a.addr, a.port),
        &res.qp,
        &ConnParam::new(),
    )
    .map_err(|e| format!("rdma_connect: {e}"))?;
    // The QP is in INIT now: receives may be posted.
    res.post_recv().map_err(|e| e.to_string())?;
    wait_event(&ch, EventKind::Established, t)?;
    if a.debug {
        eprintln!("rdma_connect successful");
    }
    let mut start = 65u8;
    let mut ping = 0u64;
    let began = Instant::now();
    while a.count == 0 || ping < a.count {
        let text = ping_text(ping, start, a.size);
        start = if start >= 122 { 65 } else { start + 1 };
        res.start.write(0, &text).map_err(|e| e.to_string())?;
        res.send_info(&res.start, a.size)
            .map_err(|e| e.to_string())?;
        wait_wc(&res, WcOpcode::Send, t)?;
        // The server read our start buffer: "go ahead".
        wait_wc(&res, WcOpcode::Recv, t)?;
        res.post_recv().map_err(|e| e.to_string())?;
        res.send_info(&res.rdma, a.size)
            .map_err(|e| e.to_string())?;
        wait_wc(&res, WcOpcode::Send, t)?;
        // The server wrote it back.
        wait_wc(&res, WcOpcode::Recv, t)?;
        res.post_recv().map_err(|e| e.to_string())?;
        let back = res.rdma.to_vec();
        if a.validate && back != text {
            return Err(format!("data mismatch in ping {ping}"));
        }
        if a.verbose {
            let end = back.iter().position(|&b| b == 0).unwrap_or(back.len());
            println!("ping data: {}", String::from_utf8_lossy(&back[..end]));
        }
        ping += 1;
    }
    id.disconnect()
        .map_err(|e| format!("rdma_disconnect: {e}"))?;
    wait_event(&ch, EventKind::Disconnected, t)?;
    if a.debug {
        eprintln!(
            "{ping} pings in {:.3} s; rping client done",
            began.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

fn server(a: &Args) -> Result<(), String> {
    let t = Duration::from_secs(a.timeout);
    let ctx = Device::soft(a.addr)
        .open()
        .map_err(|e| format!("open the soft device on {}: {e}", a.addr))?;
    let ch = EventChannel::new();
    let listener = CmId::new(&ch, PortSpace::TCP).map_err(|e| e.to_string())?;
    listener
        .bind(&ctx, a.port)
        .map_err(|e| format!("rdma_bind_addr: {e}"))?;
    listener.listen().map_err(|e| format!("rdma_listen: {e}"))?;
    if a.debug {
        eprintln!("rdma_listen on {}:{}", a.addr, a.port);
    }
    // Requests that came while a client was being served (-P serves one
    // after another; the CM tells a client kept waiting to wait longer).
    let mut pending = std::collections::VecDeque::new();
    loop {
        let req = match pending.pop_front() {
            Some(e) => e,
            None => wait_event(&ch, EventKind::ConnectRequest, Duration::from_secs(3600))?,
        };
        let res = Res::new(&ctx, a.size).map_err(|e| e.to_string())?;
        let id = req.id;
        id.accept(Some(&res.qp), &ConnParam::new())
            .map_err(|e| format!("rdma_accept: {e}"))?;
        // The QP is in RTS now: post the receive (a SEND that comes first
        // gets an RNR NAK and is retried).
        res.post_recv().map_err(|e| e.to_string())?;
        loop {
            let e = wait_event_any(&ch, t)?;
            match e.kind {
                EventKind::Established if e.id == id => break,
                EventKind::ConnectRequest => pending.push_back(e),
                k => {
                    return Err(format!(
                        "cma event {k:?}, error {} (waiting for Established)",
                        e.status
                    ))
                }
            }
        }
        if a.debug {
            eprintln!("accepted a connection from {:?}", id.peer_addr());
        }
        serve(a, &ch, &id, &res, t, &mut pending)?;
        id.disconnect()
            .map_err(|e| format!("rdma_disconnect: {e}"))?;
        if !a.persistent {
            return Ok(());
        }
    }
}

/// One client's pings, until it disconnects.
fn serve(
    a: &Args,
    ch: &EventChannel,
    id: &CmId,
    res: &Res,
    t: Duration,
    pending: &mut std::collections::VecDeque<Event>,
) -> Result<(), String> {
    loop {
        // The client's start buffer, or its goodbye.
        if !wait_recv_or_disconnect(ch, id, res, t, pending)? {
            return Ok(());
        }
        let (addr, rkey, len) = res.peer_info().map_err(|e| e.to_string())?;
        if len > a.size {
            return Err(format!(
                "the client's buffer ({len} bytes) is larger than ours"
            ));
        }
        res.post_recv().map_err(|e| e.to_string())?;
        let mut wr = SendWr::new(3, SendOpcode::RdmaRead);
        wr.sg_list = vec![res.rdma.sge(0..len)];
        wr.remote_addr = addr;
        wr.rkey = rkey;
        res.qp.post_send(&[wr]).map_err(|e| e.to_string())?;
        wait_wc(res, WcOpcode::RdmaRead, t)?;
        let data = res.rdma.to_vec();
        let end = data.iter().position(|&b| b == 0).unwrap_or(len);
        if a.verbose {
            println!(
                "server ping data: {}",
                String::from_utf8_lossy(&data[..end])
            );
        }
        res.send_info(&res.rdma, a.size)
            .map_err(|e| e.to_string())?;
        wait_wc(res, WcOpcode::Send, t)?;
        // Where to write it back.
        if !wait_recv_or_disconnect(ch, id, res, t, pending)? {
            return Ok(());
        }
        let (addr, rkey, rlen) = res.peer_info().map_err(|e| e.to_string())?;
        res.post_recv().map_err(|e| e.to_string())?;
        let n = (end + 1).min(len).min(rlen);
        let mut wr = SendWr::new(4, SendOpcode::RdmaWrite);
        wr.sg_list = vec![res.rdma.sge(0..n)];
        wr.remote_addr = addr;
        wr.rkey = rkey;
        res.qp.post_send(&[wr]).map_err(|e| e.to_string())?;
        wait_wc(res, WcOpcode::RdmaWrite, t)?;
        res.send_info(&res.rdma, a.size)
            .map_err(|e| e.to_string())?;
        wait_wc(res, WcOpcode::Send, t)?;
    }
}

/// Waits for a receive completion (true) or the client's disconnect
/// (false).
fn wait_recv_or_disconnect(
    ch: &EventChannel,
    id: &CmId,
    res: &Res,
    t: Duration,
    pending: &mut std::collections::VecDeque<Event>,
) -> Result<bool, String> {
    let deadline = Instant::now() + t;
    loop {
        {
            let mut held = res.held.borrow_mut();
            if let Some(i) = held.iter().position(|w| w.opcode == WcOpcode::Recv) {
                held.remove(i);
                return Ok(true);
            }
        }
        if let Ok(mut wcs) = res.cq.wait(1, Duration::from_millis(20)) {
            let wc = wcs.remove(0);
            if wc.status != WcStatus::Success {
                return Err(format!("{:?} completion status {:?}", wc.opcode, wc.status));
            }
            res.held.borrow_mut().push(wc);
            continue;
        }
        if let Some(e) = ch.get_event(Duration::ZERO) {
            match e.kind {
                EventKind::Disconnected if e.id == *id => return Ok(false),
                EventKind::ConnectRequest => pending.push_back(e),
                // What the ids of clients gone before have to say.
                EventKind::TimewaitExit | EventKind::Disconnected => {}
                k => return Err(format!("unexpected cma event {k:?}, error {}", e.status)),
            }
        }
        if Instant::now() > deadline {
            return Err(format!("no word from the client in {t:?}"));
        }
    }
}
