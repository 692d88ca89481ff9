//! One program, either backend: a server and a client exchange SEND/RECV
//! (with immediate data), RDMA WRITE (and WRITE with immediate), RDMA READ
//! and atomics (compare-and-swap, fetch-and-add), in both directions, and
//! check every byte that moved.
//!
//! Each side opens the device for its address as `RXE_PROVIDER` (or
//! `--provider`) says: by default a native device that has the address as a
//! RoCE v2 GID (a NIC, or the kernel's rxe), else the soft stack. So the
//! same binary runs on native verbs in a machine with the kernel's rxe and
//! on the soft stack on its peer, and the two talk RoCE v2 to each other.
//! Endpoints and region keys go over a TCP connection (one JSON line each
//! way), as in `rxe demo`; the TCP connection also paces the steps.
//!
//! ```text
//! backend_exchange server --addr 10.99.0.11 [--port 18600]
//! backend_exchange client --addr 10.99.0.1 --server 10.99.0.11 [--port 18600]
//!     [--provider auto|native|soft] [--mtu 1024] [--timeout 20]
//! ```
//!
//! Prints which backend each side runs on, one line per check, and exits 0
//! when every check passed (1 otherwise, 2 for a bad command line).

use rxe_verbs::*;
use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::process::ExitCode;
use std::time::Duration;

const REGION: usize = 64 * 1024;
// Where things go in each side's region.
const ATOMIC: usize = 0; // the 8-byte target
const ATOMIC_OLD: usize = 16; // 3 × 8 bytes of fetched values
const SEND_AT: usize = 1024;
const SEND_LEN: usize = 5000; // more than one packet at any MTU
const WRITE_AT: usize = 8192;
const WRITE_LEN: usize = 20_000;
const WIMM_AT: usize = 30_000;
const WIMM_LEN: usize = 3000;
const READ_AT: usize = 36_864;
const READ_LEN: usize = 12_000;

struct Opts {
    server: bool,
    addr: IpAddr,
    peer: Option<IpAddr>,
    port: u16,
    provider: Option<Provider>,
    mtu: Mtu,
    timeout: Duration,
}

fn usage() -> String {
    "usage: backend_exchange server --addr IP [--port N] [--provider auto|native|soft] [--mtu N] [--timeout S]\n       backend_exchange client --addr IP --server IP [--port N] [--provider ...] [--mtu N] [--timeout S]".into()
}

fn parse() -> Result<Opts, String> {
    let mut args = std::env::args().skip(1);
    let server = match args.next().as_deref() {
        Some("server") => true,
        Some("client") => false,
        _ => return Err(usage()),
    };
    let mut o = Opts {
        server,
        addr: IpAddr::from([0, 0, 0, 0]),
        peer: None,
        port: 18600,
        provider: None,
        mtu: Mtu::Mtu1024,
        timeout: Duration::from_secs(20),
    };
    let mut have_addr = false;
    while let Some(flag) = args.next() {
        let v = args
            .next()
            .ok_or_else(|| format!("{flag} needs a value\n{}", usage()))?;
        let bad = |e: &dyn std::fmt::Display| format!("{flag} {v}: {e}");
        match flag.as_str() {
            "--addr" => {
                o.addr = v.parse().map_err(|e| bad(&e))?;
                have_addr = true;
            }
            "--server" => o.peer = Some(v.parse().map_err(|e| bad(&e))?),
            "--port" => o.port = v.parse().map_err(|e| bad(&e))?,
            "--provider" => o.provider = Some(v.parse().map_err(|e: Error| bad(&e))?),
            "--mtu" => {
                let n: usize = v.parse().map_err(|e| bad(&e))?;
                o.mtu = Mtu::from_bytes(n).ok_or_else(|| bad(&"256, 512, 1024, 2048 or 4096"))?;
            }
            "--timeout" => o.timeout = Duration::from_secs(v.parse().map_err(|e| bad(&e))?),
            _ => return Err(format!("unknown option {flag}\n{}", usage())),
        }
    }
    if !have_addr || (!server && o.peer.is_none()) {
        return Err(usage());
    }
    Ok(o)
}

/// Deterministic bytes, different for each seed.
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn hex(v: Option<u32>) -> String {
    v.map_or("none".into(), |v| format!("{v:#010x}"))
}

fn fnv(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// What each side tells the other.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Hello {
    backend: String,
    qpn: u32,
    psn: u32,
    gid: String,
    addr: u64,
    len: u64,
    rkey: u32,
}

struct Side {
    ctx: Context,
    _pd: ProtectionDomain,
    cq: CompletionQueue,
    mr: MemoryRegion,
    qp: QueuePair,
    timeout: Duration,
    peer: RemoteRegion,
    tcp: BufReader<TcpStream>,
    checks: usize,
}

type Res<T> = Result<T, String>;

fn fail<T>(what: impl Into<String>) -> Res<T> {
    Err(what.into())
}

impl Side {
    /// Says `tag` to the peer and waits for it to say the same.
    fn sync(&mut self, tag: &str) -> Res<()> {
        let s = self.tcp.get_mut();
        writeln!(s, "{tag}").map_err(|e| format!("tcp: {e}"))?;
        s.flush().map_err(|e| format!("tcp: {e}"))?;
        let mut line = String::new();
        self.tcp
            .read_line(&mut line)
            .map_err(|e| format!("tcp: {e}"))?;
        if line.trim() != tag {
            return fail(format!(
                "out of step: expected {tag:?}, the peer said {:?}",
                line.trim()
            ));
        }
        Ok(())
    }

    /// The next completion, which must be a success of `op`.
    fn expect(&self, op: WcOpcode) -> Res<Completion> {
        let wc = self
            .cq
            .wait(1, self.timeout)
            .map_err(|e| format!("waiting for {op:?}: {e}"))?
            .remove(0);
        if wc.status != WcStatus::Success || wc.opcode != op {
            return fail(format!(
                "expected a successful {op:?}, got {:?} {} (wr_id {})",
                wc.opcode, wc.status, wc.wr_id
            ));
        }
        Ok(wc)
    }

    fn check(&mut self, what: &str, ok: bool, detail: String) -> Res<()> {
        if !ok {
            return fail(format!("FAILED {what}: {detail}"));
        }
        self.checks += 1;
        println!("ok   {what}: {detail}");
        Ok(())
    }

    fn bytes(&self, at: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.mr.read(at, &mut v).expect("inside the region");
        v
    }

    fn u64_at(&self, at: usize) -> u64 {
        u64::from_ne_bytes(self.bytes(at, 8).try_into().unwrap())
    }

    fn post(&self, wrs: &[SendWr]) -> Res<()> {
        self.qp
            .post_send(wrs)
            .map_err(|e| format!("post_send: {e}"))
    }

    fn post_recv(&self, wr_id: u64, at: usize, len: usize) -> Res<()> {
        let sg_list = if len == 0 {
            vec![]
        } else {
            vec![self.mr.sge(at..at + len)]
        };
        self.qp
            .post_recv(&[RecvWr { wr_id, sg_list }])
            .map_err(|e| format!("post_recv: {e}"))
    }

    /// One round: the active side sends, writes, reads and does atomics on
    /// the passive side's region; the passive side checks what arrived.
    fn round(&mut self, active: bool, dir: &str, seed: u64) -> Res<()> {
        let t = |s: &str| format!("{dir} {s}");

        // SEND with immediate, 5000 bytes (several packets).
        let data = pattern(seed, SEND_LEN);
        if !active {
            self.mr.write(SEND_AT, &vec![0; SEND_LEN]).unwrap();
            self.post_recv(10, SEND_AT, SEND_LEN)?;
        }
        self.sync(&t("send-ready"))?;
        if active {
            self.mr.write(SEND_AT, &data).unwrap();
            let mut wr = SendWr::send(1, &[self.mr.sge(SEND_AT..SEND_AT + SEND_LEN)]);
            wr.opcode = SendOpcode::SendWithImm;
            wr.imm_data = 0xC0DE_0000 | seed as u32;
            self.post(&[wr])?;
            let wc = self.expect(WcOpcode::Send)?;
            self.check(
                &t("SEND completion"),
                wc.wr_id == 1,
                format!("wr_id {}", wc.wr_id),
            )?;
        } else {
            let wc = self.expect(WcOpcode::Recv)?;
            let got = self.bytes(SEND_AT, SEND_LEN);
            self.check(
                &t("RECV"),
                wc.byte_len as usize == SEND_LEN
                    && wc.imm_data == Some(0xC0DE_0000 | seed as u32)
                    && got == data,
                format!(
                    "{} bytes, imm {}, fnv {:016x} (expected {:016x})",
                    wc.byte_len,
                    hex(wc.imm_data),
                    fnv(&got),
                    fnv(&data)
                ),
            )?;
        }
        self.sync(&t("send-done"))?;

        // RDMA WRITE, then WRITE with immediate (which consumes a receive).
        let w1 = pattern(seed + 100, WRITE_LEN);
        let w2 = pattern(seed + 200, WIMM_LEN);
        if !active {
            self.mr.write(WRITE_AT, &vec![0; WRITE_LEN]).unwrap();
            self.mr.write(WIMM_AT, &vec![0; WIMM_LEN]).unwrap();
            self.post_recv(11, 0, 0)?;
        }
        self.sync(&t("write-ready"))?;
        if active {
            self.mr.write(WRITE_AT, &w1).unwrap();
            self.mr.write(WIMM_AT, &w2).unwrap();
            let p = self.peer;
            let mut wimm = SendWr::write(
                3,
                &[self.mr.sge(WIMM_AT..WIMM_AT + WIMM_LEN)],
                p.slice(WIMM_AT as u64..(WIMM_AT + WIMM_LEN) as u64),
            );
            wimm.opcode = SendOpcode::RdmaWriteWithImm;
            wimm.imm_data = 0x5EED_0000 | seed as u32;
            self.post(&[
                SendWr::write(
                    2,
                    &[self.mr.sge(WRITE_AT..WRITE_AT + WRITE_LEN)],
                    p.slice(WRITE_AT as u64..(WRITE_AT + WRITE_LEN) as u64),
                ),
                wimm,
            ])?;
            self.expect(WcOpcode::RdmaWrite)?;
            let wc = self.expect(WcOpcode::RdmaWrite)?;
            self.check(&t("WRITE completions"), wc.wr_id == 3, "2 of 2".into())?;
        } else {
            let wc = self.expect(WcOpcode::RecvRdmaWithImm)?;
            let g1 = self.bytes(WRITE_AT, WRITE_LEN);
            let g2 = self.bytes(WIMM_AT, WIMM_LEN);
            self.check(
                &t("RDMA WRITE"),
                g1 == w1,
                format!(
                    "{WRITE_LEN} bytes, fnv {:016x} (expected {:016x})",
                    fnv(&g1),
                    fnv(&w1)
                ),
            )?;
            self.check(
                &t("RDMA WRITE with immediate"),
                g2 == w2
                    && wc.byte_len as usize == WIMM_LEN
                    && wc.imm_data == Some(0x5EED_0000 | seed as u32),
                format!(
                    "{} bytes, imm {}, fnv {:016x} (expected {:016x})",
                    wc.byte_len,
                    hex(wc.imm_data),
                    fnv(&g2),
                    fnv(&w2)
                ),
            )?;
        }
        self.sync(&t("write-done"))?;

        // RDMA READ of what the passive side put in its region.
        let r = pattern(seed + 300, READ_LEN);
        if !active {
            self.mr.write(READ_AT, &r).unwrap();
        } else {
            self.mr.write(READ_AT, &vec![0; READ_LEN]).unwrap();
        }
        self.sync(&t("read-ready"))?;
        if active {
            let p = self.peer;
            self.post(&[SendWr::read(
                4,
                &[
                    self.mr.sge(READ_AT..READ_AT + 5000),
                    self.mr.sge(READ_AT + 5000..READ_AT + READ_LEN),
                ],
                p.slice(READ_AT as u64..(READ_AT + READ_LEN) as u64),
            )])?;
            let wc = self.expect(WcOpcode::RdmaRead)?;
            let got = self.bytes(READ_AT, READ_LEN);
            self.check(
                &t("RDMA READ"),
                got == r && wc.byte_len as usize == READ_LEN,
                format!(
                    "{} bytes into 2 SGEs, fnv {:016x} (expected {:016x})",
                    wc.byte_len,
                    fnv(&got),
                    fnv(&r)
                ),
            )?;
        }
        self.sync(&t("read-done"))?;

        // Atomics on the passive side's 8-byte target.
        let start = 0x0123_4567_89ab_0000u64 | seed;
        if !active {
            self.mr.write(ATOMIC, &start.to_ne_bytes()).unwrap();
        }
        self.sync(&t("atomic-ready"))?;
        if active {
            let p = self.peer.slice(ATOMIC as u64..ATOMIC as u64 + 8);
            let atomic = |id: u64, op: SendOpcode, at: usize, cmp: u64, swap: u64| {
                let mut w = SendWr::new(id, op);
                w.sg_list = vec![self.mr.sge(at..at + 8)];
                w.remote_addr = p.addr;
                w.rkey = p.rkey;
                w.compare_add = cmp;
                w.swap = swap;
                w
            };
            self.post(&[
                atomic(5, SendOpcode::AtomicCmpSwap, ATOMIC_OLD, start, 1000),
                atomic(6, SendOpcode::AtomicFetchAdd, ATOMIC_OLD + 8, 234, 0),
                // Compares with the wrong value: fetches, swaps nothing.
                atomic(7, SendOpcode::AtomicCmpSwap, ATOMIC_OLD + 16, start, 9),
            ])?;
            self.expect(WcOpcode::CompSwap)?;
            self.expect(WcOpcode::FetchAdd)?;
            self.expect(WcOpcode::CompSwap)?;
            let old = [
                self.u64_at(ATOMIC_OLD),
                self.u64_at(ATOMIC_OLD + 8),
                self.u64_at(ATOMIC_OLD + 16),
            ];
            self.check(
                &t("atomics (CAS, FAA, failing CAS)"),
                old == [start, 1000, 1234],
                format!(
                    "fetched [{:#x}, {}, {}], expected [{start:#x}, 1000, 1234]",
                    old[0], old[1], old[2]
                ),
            )?;
        }
        self.sync(&t("atomic-done"))?;
        if !active {
            let v = self.u64_at(ATOMIC);
            self.check(
                &t("atomic target"),
                v == 1234,
                format!("{v} (expected 1234)"),
            )?;
        }
        self.sync(&t("round-done"))
    }
}

fn describe(ctx: &Context) -> String {
    let d = ctx.device();
    match ctx.kind() {
        DeviceKind::Native => format!(
            "native (libibverbs device {}, port {}, GID index {} = {})",
            d.name(),
            d.port(),
            ctx.gid_index(),
            ctx.gid()
        ),
        DeviceKind::Soft => format!("soft (rxe-rs engine on {}, UDP port 4791)", d.addr()),
    }
}

fn run(o: &Opts) -> Res<usize> {
    let addr = o.addr.to_string();
    let device = match o.provider {
        Some(p) => Device::find_with(&addr, p),
        None => Device::find(&addr),
    }
    .map_err(|e| format!("device for {addr}: {e}"))?;
    let ctx = device
        .open()
        .map_err(|e| format!("open {}: {e}", device.name()))?;
    let backend = describe(&ctx);
    println!("backend: {backend}");
    let pd = ctx.alloc_pd().map_err(|e| e.to_string())?;
    let cq = ctx.create_cq(256, None).map_err(|e| e.to_string())?;
    let access =
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
    let mr = pd.alloc_mr(REGION, access).map_err(|e| e.to_string())?;
    let qp = ctx
        .create_qp(&pd, &QpInitAttr::new(QpType::Rc, &cq, &cq))
        .map_err(|e| e.to_string())?;

    // The out-of-band exchange.
    let stream = if o.server {
        let l = TcpListener::bind(SocketAddr::new(o.addr, o.port))
            .map_err(|e| format!("listen on {}:{}: {e}", o.addr, o.port))?;
        println!("waiting for the client on tcp {}:{}", o.addr, o.port);
        l.accept().map_err(|e| format!("accept: {e}"))?.0
    } else {
        let to = SocketAddr::new(o.peer.expect("checked"), o.port);
        let mut last = None;
        let mut s = None;
        for _ in 0..(o.timeout.as_millis() / 200).max(1) {
            match TcpStream::connect(to) {
                Ok(c) => {
                    s = Some(c);
                    break;
                }
                Err(e) => last = Some(e),
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        s.ok_or_else(|| {
            format!(
                "connect to {to}: {}",
                last.map_or("?".into(), |e| e.to_string())
            )
        })?
    };
    stream.set_read_timeout(Some(o.timeout * 2)).ok();
    let ep = qp.endpoint();
    let r = mr.remote();
    let me = Hello {
        backend: backend.clone(),
        qpn: ep.qpn,
        psn: ep.psn,
        gid: ep.gid.to_string(),
        addr: r.addr,
        len: r.len,
        rkey: r.rkey,
    };
    let mut tcp = BufReader::new(stream);
    let line = serde_json::to_string(&me).unwrap();
    writeln!(tcp.get_mut(), "{line}").map_err(|e| format!("tcp: {e}"))?;
    let mut peer = String::new();
    tcp.read_line(&mut peer).map_err(|e| format!("tcp: {e}"))?;
    let peer: Hello =
        serde_json::from_str(peer.trim()).map_err(|e| format!("the peer's hello: {e}"))?;
    println!(
        "peer:    {} (QPN {:#x}, GID {})",
        peer.backend, peer.qpn, peer.gid
    );
    let remote = Endpoint {
        lid: 0,
        qpn: peer.qpn,
        psn: peer.psn,
        gid: peer
            .gid
            .parse()
            .map_err(|_| format!("bad GID {}", peer.gid))?,
    };
    qp.connect(
        &remote,
        &ConnectOptions {
            mtu: o.mtu,
            ..ConnectOptions::default()
        },
    )
    .map_err(|e| format!("connect: {e}"))?;
    let mut side = Side {
        ctx,
        _pd: pd,
        cq,
        mr,
        qp,
        timeout: o.timeout,
        peer: RemoteRegion {
            addr: peer.addr,
            len: peer.len,
            rkey: peer.rkey,
        },
        tcp,
        checks: 0,
    };
    side.sync("connected")?;
    // The client acts first (client → server), then the server.
    side.round(!o.server, "client->server", 1)?;
    side.round(o.server, "server->client", 2)?;
    let kind = side.ctx.kind();
    println!(
        "backend_exchange: all {} checks passed on the {kind} backend ({})",
        side.checks,
        if o.server { "server" } else { "client" }
    );
    Ok(side.checks)
}

fn main() -> ExitCode {
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    match run(&o) {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("backend_exchange: {e}");
            ExitCode::FAILURE
        }
    }
}
