//! The server side of `rxe stress`: hosts the memory, takes the receives,
//! checks every SEND and WRITE with immediate it gets.

use super::layout::{Layout, GRH};
use super::pattern::{self, Class};
use super::wire::{Channel, Done, Hello, Qp, Tally, Welcome};
use super::{footprint, mtu_of, wait_limit, Args, Side, Transport, QKEY};
use rxe_verbs::{gid_of, Completion, ConnectOptions, Endpoint, RecvWr, WcOpcode, WcStatus};
use std::net::{SocketAddr, TcpListener};
use std::time::{Duration, Instant};

/// What the server knows of one QP.
#[derive(Debug, Default)]
struct QpState {
    /// The number the next SEND must carry (RC) or one past the highest
    /// seen (UC, UD).
    sends: u64,
    /// SENDs that arrived, checked or not.
    arrived: u64,
    /// WRITEs with immediate received.
    write_imms: u64,
}

struct Server {
    side: Side,
    layout: Layout,
    transports: Vec<Transport>,
    qps: Vec<QpState>,
    tally: Tally,
    /// Data errors described on stderr so far (the first few only).
    told: u32,
}

/// Runs the server; true if nothing went wrong.
pub fn run(args: &Args) -> Result<bool, String> {
    let listener = TcpListener::bind(SocketAddr::new(args.addr, args.port))
        .map_err(|e| format!("listen on {}:{}: {e}", args.addr, args.port))?;
    eprintln!(
        "rxe stress: server on {} waiting on TCP port {}",
        args.addr, args.port
    );
    let (stream, peer) = accept(&listener, wait_limit(args))?;
    let mut ch = Channel::new(stream, wait_limit(args)).map_err(|e| e.to_string())?;
    let hello: Hello = ch.recv("plan")?;
    if hello.qps.len() != hello.transports.len()
        || !hello.slot.is_multiple_of(8)
        || hello.depth == 0
    {
        return Err(format!("the client's plan from {peer} is inconsistent"));
    }
    let layout = Layout {
        slot: hello.slot,
        depth: hello.depth,
        recvs: hello.recvs,
    };
    let side = Side::open(args.addr, args.faults, &hello.transports, &layout)?;
    let client_gid: std::net::Ipv6Addr = hello
        .gid
        .parse()
        .map_err(|_| format!("the client's GID {:?} does not parse", hello.gid))?;
    let o = ConnectOptions {
        mtu: mtu_of(hello.mtu)?,
        qkey: QKEY,
        ..ConnectOptions::default()
    };
    let mut me = Vec::new();
    for (i, qp) in side.qps.iter().enumerate() {
        let remote = Endpoint {
            lid: 0,
            qpn: hello.qps[i].qpn,
            psn: hello.qps[i].psn,
            gid: client_gid,
        };
        qp.connect(&remote, &o)
            .map_err(|e| format!("connect QP {i}: {e}"))?;
        let ep = qp.endpoint();
        me.push(Qp {
            qpn: ep.qpn,
            psn: ep.psn,
        });
    }
    let mut s = Server {
        layout,
        transports: hello.transports.clone(),
        qps: (0..side.qps.len()).map(|_| QpState::default()).collect(),
        tally: Tally::default(),
        told: 0,
        side,
    };
    s.prepare()?;
    if args.sabotage {
        let at = s.layout.fixed(0);
        s.side
            .mr
            .write(at, &vec![0x5a; s.layout.slot])
            .map_err(|e| e.to_string())?;
    }
    ch.send(&Welcome {
        gid: gid_of(args.addr).to_string(),
        qps: me,
        addr: s.side.mr.addr(),
        rkey: s.side.mr.rkey(),
    })?;
    let start = footprint();
    let mut wcs = Vec::with_capacity(256);
    // Traffic until the client says it is done, or until it has been
    // silent (no completion, no word) for --wait: a client that died or
    // lost its address leaves nothing else to wait for.
    let mut heard = Instant::now();
    let done: Option<Done> = loop {
        wcs.clear();
        if s.side.cq.poll_into(&mut wcs, 256) == 0 {
            if let Ok(v) = s.side.cq.wait(1, Duration::from_millis(5)) {
                wcs.extend(v);
            }
        }
        if !wcs.is_empty() {
            heard = Instant::now();
        }
        for wc in std::mem::take(&mut wcs) {
            s.complete(&wc)?;
        }
        if ch.ready()? {
            match ch.recv::<Done>("tally of what it sent") {
                Ok(d) if d.sends.len() == s.qps.len() && d.write_imms.len() == s.qps.len() => {
                    break Some(d)
                }
                Ok(_) => return Err("the client's tally does not match its QPs".into()),
                Err(e) => {
                    eprintln!("rxe stress: the client is gone: {e}");
                    break None;
                }
            }
        }
        if heard.elapsed() > wait_limit(args) {
            eprintln!(
                "rxe stress: nothing from the client for {:?}: it is gone",
                wait_limit(args)
            );
            break None;
        }
    };
    let Some(done) = done else {
        let end = footprint();
        let t = &s.tally;
        println!(
            "stress: role=server received={} bytes_checked={} data_errors={} errors={} \
             mem_kib={}->{} fds={}->{} peer=gone",
            t.checked, t.bytes_checked, t.data_errors, t.errors, start.0, end.0, start.1, end.1
        );
        return Ok(false);
    };
    // Stragglers: what was in flight when the client stopped.
    let mut quiet = Instant::now();
    let limit = Instant::now() + Duration::from_secs(5);
    while quiet.elapsed() < Duration::from_millis(200) && Instant::now() < limit {
        if let Ok(v) = s.side.cq.wait(1, Duration::from_millis(20)) {
            quiet = Instant::now();
            for wc in v {
                s.complete(&wc)?;
            }
        }
        if s.all_reliable_arrived(&done) {
            break;
        }
    }
    let end = footprint();
    s.settle(&done);
    s.tally.retransmissions = s.side.ctx.counters().retransmitted_pkts;
    s.tally.mem_kib = (start.0, end.0);
    s.tally.fds = (start.1, end.1);
    let t = &s.tally;
    println!(
        "stress: role=server received={} bytes_checked={} data_errors={} rc_missing={} lost={} \
         overtaken={} errors={} retransmissions={} mem_kib={}->{} fds={}->{}",
        t.checked,
        t.bytes_checked,
        t.data_errors,
        t.rc_missing,
        t.lost,
        t.overtaken,
        t.errors,
        t.retransmissions,
        t.mem_kib.0,
        t.mem_kib.1,
        t.fds.0,
        t.fds.1
    );
    ch.send(&s.tally)?;
    Ok(t.data_errors == 0 && t.errors == 0 && t.rc_missing == 0)
}

fn accept(l: &TcpListener, limit: Duration) -> Result<(std::net::TcpStream, SocketAddr), String> {
    l.set_nonblocking(true).map_err(|e| e.to_string())?;
    let until = Instant::now() + limit;
    loop {
        match l.accept() {
            Ok((s, a)) => {
                s.set_nonblocking(false).map_err(|e| e.to_string())?;
                return Ok((s, a));
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() > until {
                    return Err(format!("no client within {limit:?}"));
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(format!("accept: {e}")),
        }
    }
}

impl Server {
    /// Fills the read-only patterns and posts every receive.
    fn prepare(&mut self) -> Result<(), String> {
        let l = self.layout;
        for qi in 0..self.side.qps.len() {
            let mut fixed = vec![0u8; l.slot];
            pattern::fill(pattern::key(qi, Class::Static, 0), 0, &mut fixed);
            self.side
                .mr
                .write(l.fixed(qi), &fixed)
                .map_err(|e| e.to_string())?;
            for j in 0..l.recvs {
                self.post_recv(qi, j)?;
            }
        }
        Ok(())
    }

    fn post_recv(&self, qi: usize, j: usize) -> Result<(), String> {
        let wr = RecvWr {
            wr_id: ((qi as u64) << 32) | j as u64,
            sg_list: vec![self.side.mr.sge(self.layout.recv(qi, j))],
        };
        self.side.qps[qi]
            .post_recv(&[wr])
            .map_err(|e| format!("post_recv on QP {qi}: {e}"))
    }

    fn data_error(&mut self, what: String) {
        self.tally.data_errors += 1;
        if self.told < 10 {
            self.told += 1;
            eprintln!("rxe stress: data error: {what}");
        }
    }

    fn complete(&mut self, wc: &Completion) -> Result<(), String> {
        let qi = (wc.wr_id >> 32) as usize;
        let j = (wc.wr_id & 0xffff_ffff) as usize;
        if qi >= self.qps.len() || j >= self.layout.recvs {
            return Err(format!(
                "a completion with an unknown wr_id {:#x}",
                wc.wr_id
            ));
        }
        if wc.status != WcStatus::Success {
            self.tally.errors += 1;
            if self.tally.errors <= 10 {
                eprintln!(
                    "rxe stress: QP {qi} ({:?}) receive failed: {:?}",
                    self.transports[qi], wc.status
                );
            }
            return Ok(());
        }
        match wc.opcode {
            WcOpcode::Recv => {
                self.qps[qi].arrived += 1;
                self.check_send(qi, j, wc)
            }
            WcOpcode::RecvRdmaWithImm => self.check_write_imm(qi, wc),
            other => self.data_error(format!("QP {qi}: unexpected completion {other:?}")),
        }
        self.post_recv(qi, j)
    }

    /// A SEND: `[number u64][length u64]` then the pattern of its number
    /// from byte 16; shorter SENDs (RC only) are all pattern.
    fn check_send(&mut self, qi: usize, j: usize, wc: &Completion) {
        let t = self.transports[qi];
        let off = if t == Transport::Ud { GRH } else { 0 };
        let r = self.layout.recv(qi, j);
        let Some(len) = (wc.byte_len as usize).checked_sub(off) else {
            return self.data_error(format!("QP {qi}: UD receive of {} bytes", wc.byte_len));
        };
        if len > r.len() - off {
            return self.data_error(format!("QP {qi}: {len} bytes in a smaller buffer"));
        }
        let mut buf = vec![0u8; len];
        if let Err(e) = self.side.mr.read(r.start + off, &mut buf) {
            return self.data_error(format!("QP {qi}: read the receive buffer: {e}"));
        }
        let expect = self.qps[qi].sends;
        let no = if len >= 16 {
            let no = u64::from_le_bytes(buf[0..8].try_into().unwrap());
            let hlen = u64::from_le_bytes(buf[8..16].try_into().unwrap());
            if hlen != len as u64 {
                return self.data_error(format!(
                    "QP {qi} ({t:?}) SEND: {len} bytes arrived, its header says {hlen}"
                ));
            }
            no
        } else if t == Transport::Rc {
            expect
        } else {
            return self.data_error(format!("QP {qi} ({t:?}): a {len}-byte SEND"));
        };
        if t == Transport::Rc && no != expect {
            return self.data_error(format!(
                "QP {qi} (Rc): SEND number {no} arrived where {expect} was due"
            ));
        }
        if let Some(imm) = wc.imm_data {
            if imm != no as u32 {
                return self.data_error(format!("QP {qi}: SEND {no} with immediate {imm}"));
            }
        }
        let (start, body) = if len >= 16 {
            (16, &buf[16..])
        } else {
            (0, &buf[..])
        };
        if let Some(i) = pattern::first_wrong(pattern::key(qi, Class::Send, no), start, body) {
            return self.data_error(format!(
                "QP {qi} ({t:?}) SEND {no} of {len} bytes: byte {} is wrong",
                start + i
            ));
        }
        self.qps[qi].sends = self.qps[qi].sends.max(no + 1);
        self.tally.checked += 1;
        self.tally.bytes_checked += len as u64;
    }

    /// A WRITE with immediate `no` into slot `no % ring`: `[no][length]`
    /// then the pattern of `no`. Read header, body, header again: a slot a
    /// later WRITE overwrote meanwhile is skipped as overtaken.
    fn check_write_imm(&mut self, qi: usize, wc: &Completion) {
        let Some(no) = wc.imm_data.map(u64::from) else {
            return self.data_error(format!("QP {qi}: WRITE with immediate without one"));
        };
        self.qps[qi].write_imms += 1;
        let at = self.layout.imm(qi, no);
        let header = |mr: &rxe_verbs::MemoryRegion| {
            let mut h = [0u8; 16];
            mr.read(at, &mut h).map(|()| {
                (
                    u64::from_le_bytes(h[0..8].try_into().unwrap()),
                    u64::from_le_bytes(h[8..16].try_into().unwrap()),
                )
            })
        };
        let Ok((hno, hlen)) = header(&self.side.mr) else {
            return self.data_error(format!("QP {qi}: read slot of WRITE {no}"));
        };
        if hno as u32 != no as u32 {
            self.tally.overtaken += 1;
            return;
        }
        if hlen < 16 || hlen as usize > self.layout.slot {
            return self.data_error(format!("QP {qi} WRITE {no}: header length {hlen}"));
        }
        let mut body = vec![0u8; hlen as usize - 16];
        if self.side.mr.read(at + 16, &mut body).is_err() {
            return self.data_error(format!("QP {qi}: read slot of WRITE {no}"));
        }
        if header(&self.side.mr).ok() != Some((hno, hlen)) {
            self.tally.overtaken += 1;
            return;
        }
        let key = pattern::key(qi, Class::WriteImm, hno);
        if let Some(i) = pattern::first_wrong(key, 16, &body) {
            return self.data_error(format!(
                "QP {qi} ({:?}) WRITE with immediate {no} of {hlen} bytes: byte {} is wrong",
                self.transports[qi],
                16 + i
            ));
        }
        self.tally.checked += 1;
        self.tally.bytes_checked += hlen;
    }

    fn all_reliable_arrived(&self, done: &Done) -> bool {
        self.qps.iter().enumerate().all(|(qi, q)| {
            self.transports[qi] != Transport::Rc
                || q.arrived + q.write_imms >= done.sends[qi] + done.write_imms[qi]
        })
    }

    /// Compares what arrived with what the client says it sent.
    fn settle(&mut self, done: &Done) {
        for (qi, q) in self.qps.iter().enumerate() {
            let sent = done.sends.get(qi).copied().unwrap_or(0)
                + done.write_imms.get(qi).copied().unwrap_or(0);
            let got = q.arrived + q.write_imms;
            let missing = sent.saturating_sub(got);
            if self.transports[qi] == Transport::Rc {
                self.tally.rc_missing += missing;
            } else {
                self.tally.lost += missing;
            }
        }
    }
}
