//! `rxe demo`: two processes move real RDMA traffic over loopback.
//!
//! The command starts a second copy of itself as the server on 127.0.0.3
//! and plays the client on 127.0.0.2. They swap their QP endpoints and
//! memory-region keys as one JSON line each over the child's stdin/stdout,
//! then: SEND/RECV, RDMA WRITE (announced by a SEND with immediate), RDMA
//! READ, fetch-and-add and compare-and-swap. Each side prints what moved.
//! The server's lines travel on its stdout after its hello, and the client
//! prints them, so that every line reaches the terminal whole (two
//! processes writing to one terminal cut each other's lines) and in the
//! order the client received them.

use clap::Args as ClapArgs;
use rxe_verbs::*;
use std::io::{BufRead, BufReader, Write};
use std::net::IpAddr;
use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;

/// Arguments of `rxe demo`.
#[derive(Debug, ClapArgs)]
pub struct Args {
    /// Client address.
    #[arg(long, default_value = "127.0.0.2")]
    client: IpAddr,
    /// Server address.
    #[arg(long, default_value = "127.0.0.3")]
    server: IpAddr,
    /// Run only the server side, talking to the client on stdin/stdout.
    #[arg(long, hide = true)]
    serve: bool,
}

const REGION: usize = 64 * 1024;
const TIMEOUT: Duration = Duration::from_secs(5);

/// What each side tells the other.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Hello {
    qpn: u32,
    psn: u32,
    gid: String,
    addr: u64,
    len: u64,
    rkey: u32,
}

/// Fields drop in declaration order: the QP before the MR, the PD and the
/// device it uses.
struct Side {
    qp: QueuePair,
    cq: CompletionQueue,
    mr: MemoryRegion,
    _pd: ProtectionDomain,
    _ctx: Context,
}

fn open(addr: IpAddr) -> Result<Side, Error> {
    let ctx = Device::soft(addr).open()?;
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(256, None)?;
    let access =
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
    let mr = pd.alloc_mr(REGION, access)?;
    let qp = ctx.create_qp(&pd, &QpInitAttr::new(QpType::Rc, &cq, &cq))?;
    Ok(Side {
        _ctx: ctx,
        _pd: pd,
        cq,
        mr,
        qp,
    })
}

fn hello(s: &Side) -> Hello {
    let ep = s.qp.endpoint();
    let r = s.mr.remote();
    Hello {
        qpn: ep.qpn,
        psn: ep.psn,
        gid: ep.gid.to_string(),
        addr: r.addr,
        len: r.len,
        rkey: r.rkey,
    }
}

fn connect(s: &Side, peer: &Hello) -> Result<(), Error> {
    let gid = peer.gid.parse().map_err(|_| Error::InvalidArgument {
        name: "gid",
        reason: peer.gid.clone(),
    })?;
    let remote = Endpoint {
        lid: 0,
        qpn: peer.qpn,
        psn: peer.psn,
        gid,
    };
    s.qp.connect(
        &remote,
        &ConnectOptions {
            mtu: Mtu::Mtu4096,
            ..ConnectOptions::default()
        },
    )
}

fn one(cq: &CompletionQueue) -> Result<Completion, Error> {
    let wc = cq.wait(1, TIMEOUT)?.remove(0);
    if wc.status != WcStatus::Success {
        return Err(Error::InvalidArgument {
            name: "completion",
            reason: format!("{:?} failed: {}", wc.opcode, wc.status),
        });
    }
    Ok(wc)
}

fn fnv(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn server(args: &Args) -> Result<(), Error> {
    // (Each line one write to the pipe: the client relays lines whole.)
    let say = |m: String| {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "  [server {}] {m}", args.server);
        let _ = out.flush();
    };
    let s = open(args.server)?;
    // Counter for the atomics, and a block for the client to READ.
    s.mr.write(0, &40u64.to_ne_bytes())?;
    s.mr.write(8192, &pattern(7, 4096))?;
    let mut line = String::new();
    BufReader::new(std::io::stdin())
        .read_line(&mut line)
        .map_err(|e| Error::Io {
            what: "read the client's hello".into(),
            source: e,
        })?;
    let peer: Hello = serde_json::from_str(&line).map_err(|e| Error::InvalidArgument {
        name: "hello",
        reason: e.to_string(),
    })?;
    // Connect and post the receives, then tell the client we are ready.
    connect(&s, &peer)?;
    s.qp.post_recv(&[RecvWr {
        wr_id: 1,
        sg_list: vec![s.mr.sge(16384..16384 + 256)],
    }])?;
    s.qp.post_recv(&[RecvWr {
        wr_id: 2,
        sg_list: vec![s.mr.sge(16640..16640 + 256)],
    }])?;
    s.qp.post_recv(&[RecvWr {
        wr_id: 3,
        sg_list: vec![s.mr.sge(16896..16896 + 256)],
    }])?;
    println!(
        "{}",
        serde_json::to_string(&hello(&s)).expect("serializable")
    );
    std::io::stdout().flush().ok();
    say(format!(
        "QP {:#08x} is RTS, connected to {} QP {:#08x}",
        s.qp.qp_num(),
        peer.gid,
        peer.qpn
    ));

    let wc = one(&s.cq)?;
    let mut msg = vec![0u8; wc.byte_len as usize];
    s.mr.read(16384, &mut msg)?;
    say(format!(
        "RECV   {} bytes: {:?}",
        wc.byte_len,
        String::from_utf8_lossy(&msg)
    ));

    let wc = one(&s.cq)?;
    let mut written = vec![0u8; 4096];
    s.mr.read(4096, &mut written)?;
    say(format!(
        "RECV   SEND with immediate {:#x}: the client's RDMA WRITE put 4096 bytes at offset 4096, fnv {:016x} ({})",
        wc.imm_data.unwrap_or(0),
        fnv(&written),
        if written == pattern(3, 4096) { "as sent" } else { "DIFFERENT" }
    ));

    let wc = one(&s.cq)?;
    let mut counter = [0u8; 8];
    s.mr.read(0, &mut counter)?;
    say(format!(
        "RECV   {} bytes: the counter now holds {} after the client's atomics",
        wc.byte_len,
        u64::from_ne_bytes(counter)
    ));
    let c = s._ctx.counters();
    say(format!(
        "packets sent {} received {} retransmitted {} dropped {}",
        c.sent_pkts,
        c.rcvd_pkts,
        c.retransmitted_pkts,
        c.dropped()
    ));
    Ok(())
}

fn client(args: &Args) -> Result<(), Error> {
    let say = |m: String| println!("  [client {}] {m}", args.client);
    let exe = std::env::current_exe().map_err(|e| Error::Io {
        what: "find this program".into(),
        source: e,
    })?;
    let mut child = Command::new(exe)
        .args([
            "demo",
            "--serve",
            "--server",
            &args.server.to_string(),
            "--client",
            &args.client.to_string(),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| Error::Io {
            what: "start the server process".into(),
            source: e,
        })?;
    let mut relay = None;
    let result = (|| -> Result<(), Error> {
        let s = open(args.client)?;
        s.mr.write(0, &pattern(3, 4096))?;
        let greeting = format!("hello over RoCE v2 from {}", args.client);
        s.mr.write(4096, greeting.as_bytes())?;
        let mut to_server = child.stdin.take().expect("piped");
        writeln!(
            to_server,
            "{}",
            serde_json::to_string(&hello(&s)).expect("serializable")
        )
        .map_err(|e| Error::Io {
            what: "send the hello".into(),
            source: e,
        })?;
        let mut line = String::new();
        let mut from_server = BufReader::new(child.stdout.take().expect("piped"));
        from_server.read_line(&mut line).map_err(|e| Error::Io {
            what: "read the server's hello".into(),
            source: e,
        })?;
        // What the server says from now on, printed whole.
        relay = Some(std::thread::spawn(move || {
            for l in from_server.lines().map_while(Result::ok) {
                println!("{l}");
            }
        }));
        let peer: Hello = serde_json::from_str(&line).map_err(|e| Error::InvalidArgument {
            name: "server hello",
            reason: format!("{e}: {line:?}"),
        })?;
        connect(&s, &peer)?;
        say(format!(
            "QP {:#08x} is RTS, connected to {} QP {:#08x}",
            s.qp.qp_num(),
            peer.gid,
            peer.qpn
        ));
        let remote = RemoteRegion {
            addr: peer.addr,
            len: peer.len,
            rkey: peer.rkey,
        };

        let msg_len = greeting.len();
        s.qp.post_send(&[SendWr::send(1, &[s.mr.sge(4096..4096 + msg_len)])])?;
        one(&s.cq)?;
        say(format!("SEND   {msg_len} bytes"));

        s.qp.post_send(&[SendWr::write(
            2,
            &[s.mr.sge(0..4096)],
            remote.slice(4096..8192),
        )])?;
        one(&s.cq)?;
        say(format!(
            "WRITE  4096 bytes to {:#x} rkey {:#010x}, fnv {:016x}",
            remote.addr + 4096,
            remote.rkey,
            fnv(&pattern(3, 4096))
        ));
        let mut note = SendWr::new(3, SendOpcode::SendWithImm);
        note.imm_data = 0x600d;
        s.qp.post_send(&[note])?;
        one(&s.cq)?;

        s.qp.post_send(&[SendWr::read(
            4,
            &[s.mr.sge(8192..12288)],
            remote.slice(8192..12288),
        )])?;
        one(&s.cq)?;
        let mut got = vec![0u8; 4096];
        s.mr.read(8192, &mut got)?;
        say(format!(
            "READ   4096 bytes from {:#x}, fnv {:016x} ({})",
            remote.addr + 8192,
            fnv(&got),
            if got == pattern(7, 4096) {
                "matches the server's"
            } else {
                "DIFFERENT"
            }
        ));

        let mut faa = SendWr::new(5, SendOpcode::AtomicFetchAdd);
        faa.sg_list = vec![s.mr.sge(12288..12296)];
        faa.remote_addr = remote.addr;
        faa.rkey = remote.rkey;
        faa.compare_add = 2;
        s.qp.post_send(&[faa])?;
        one(&s.cq)?;
        let mut v = [0u8; 8];
        s.mr.read(12288, &mut v)?;
        say(format!(
            "FETCH_AND_ADD +2: the counter was {}",
            u64::from_ne_bytes(v)
        ));
        let mut cas = SendWr::new(6, SendOpcode::AtomicCmpSwap);
        cas.sg_list = vec![s.mr.sge(12296..12304)];
        cas.remote_addr = remote.addr;
        cas.rkey = remote.rkey;
        cas.compare_add = 42;
        cas.swap = 1000;
        s.qp.post_send(&[cas])?;
        one(&s.cq)?;
        s.mr.read(12296, &mut v)?;
        say(format!(
            "CMP_AND_SWAP 42 -> 1000: the counter was {}",
            u64::from_ne_bytes(v)
        ));

        s.qp.post_send(&[SendWr::send(7, &[s.mr.sge(4096..4096 + 5)])])?;
        one(&s.cq)?;
        let c = s._ctx.counters();
        say(format!(
            "packets sent {} received {} retransmitted {} dropped {}",
            c.sent_pkts,
            c.rcvd_pkts,
            c.retransmitted_pkts,
            c.dropped()
        ));
        Ok(())
    })();
    let status = child.wait().map_err(|e| Error::Io {
        what: "wait for the server".into(),
        source: e,
    })?;
    if let Some(r) = relay {
        // (Its pipe closed with the server: the last lines are printed.)
        let _ = r.join();
    }
    result?;
    if !status.success() {
        return Err(Error::InvalidArgument {
            name: "server",
            reason: format!("exited with {status}"),
        });
    }
    Ok(())
}

/// Runs `rxe demo`.
pub fn run(args: &Args) -> ExitCode {
    let r = if args.serve {
        server(args)
    } else {
        println!(
            "rxe demo: RC between two processes, {} (client) and {} (server), UDP port 4791",
            args.client, args.server
        );
        client(args)
    };
    match r {
        Ok(()) => {
            if !args.serve {
                println!("rxe demo: done");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!(
                "rxe demo ({}): {e}",
                if args.serve { "server" } else { "client" }
            );
            ExitCode::FAILURE
        }
    }
}
