//! The fuzzer's end of an RC connection, kept by hand: a UDP socket, the
//! PSN the peer expects from us, and a minimal responder that ACKs the
//! peer's own SENDs (an `ibv_rc_pingpong` server answers every SEND it
//! receives with one of its own, and would give up on a peer that never
//! ACKs them).
//!
//! The connection is made with the peer's own out-of-band exchange:
//! rdma-core's pingpong one, or perftest's (`rxe perf`'s [`Oob`], as an
//! `ib_read_bw` client does it), which also names the peer's buffer: its
//! address and R_Key ([`Region`]). A perftest server serves one client per
//! run and keeps the TCP connection for the end of the test: the fuzzer
//! ends it perftest's way ([`Link::close_oob`]) before the next one. Or
//! with rdma_cm ([`super::cm`]: the CM's MADs on QP 1 of this same
//! socket), ended with a DREQ; against an rping server the responder here
//! also serves the server's RDMA READs and takes its WRITEs
//! ([`super::local_mem::LocalMem`]).
//!
//! What the peer sends back is sorted into answer [`Kind`]s: ACK, each NAK
//! code, RNR NAK, atomic ACK, READ data, a SEND of its own, anything else,
//! and packets our parser refuses.

use super::bth::{bth_qpn, bth_repr};
use super::cm::{CmConnected, CmLink};
use super::config::{Peer, Res, Target};
use super::local_mem::LocalMem;
use super::record::Recorder;
use super::socket::Socket;
use crate::perf::oob::{self, BwReport, Oob};
use crate::pingpong::{gid_addr, Dest};
use rxe_core::psn::Psn;
use rxe_core::wire::{
    icrc, AethRepr, AethSyndrome, NakCode, Opcode, Operation, Packet, PacketRepr, ROCE_V2_PORT,
};
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv6Addr};
use std::time::{Duration, Instant};

/// What the peer answered, one kind per packet it sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Kind {
    Ack,
    RnrNak,
    NakSeq,
    NakInvalid,
    NakAccess,
    NakOperational,
    NakRd,
    NakReserved,
    AethReserved,
    AtomicAck,
    ReadData,
    /// A request of the peer's own (the pingpong SEND); upkeep, not an answer.
    PeerSend,
    /// Any other opcode from the peer.
    Other,
    /// A datagram our parser refuses.
    Unparsable,
}

impl Kind {
    pub(crate) const ALL: [Kind; 14] = [
        Kind::Ack,
        Kind::RnrNak,
        Kind::NakSeq,
        Kind::NakInvalid,
        Kind::NakAccess,
        Kind::NakOperational,
        Kind::NakRd,
        Kind::NakReserved,
        Kind::AethReserved,
        Kind::AtomicAck,
        Kind::ReadData,
        Kind::PeerSend,
        Kind::Other,
        Kind::Unparsable,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Ack => "ACK",
            Kind::RnrNak => "RNR NAK",
            Kind::NakSeq => "NAK PSN sequence error",
            Kind::NakInvalid => "NAK invalid request",
            Kind::NakAccess => "NAK remote access error",
            Kind::NakOperational => "NAK remote operational error",
            Kind::NakRd => "NAK invalid RD request",
            Kind::NakReserved => "NAK reserved code",
            Kind::AethReserved => "AETH reserved syndrome",
            Kind::AtomicAck => "ATOMIC ACK",
            Kind::ReadData => "READ data",
            Kind::PeerSend => "SEND from the peer (upkeep)",
            Kind::Other => "other opcode",
            Kind::Unparsable => "unparsable",
        }
    }

    /// NAKs after which the peer's QP is in the error state (IBTA 9.9.3.1
    /// class B/C/D responder errors).
    pub(crate) fn is_fatal(self) -> bool {
        matches!(
            self,
            Kind::NakInvalid | Kind::NakAccess | Kind::NakOperational | Kind::NakRd
        )
    }

    fn bit(self) -> u32 {
        1 << (self as u32)
    }
}

/// The answers to one step: a set of kinds (without the peer's own SENDs),
/// as a bit set so that it can be a coverage key.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Signature(pub u32);

impl Signature {
    pub(crate) fn kinds(self) -> impl Iterator<Item = Kind> {
        Kind::ALL.into_iter().filter(move |k| self.0 & k.bit() != 0)
    }
    pub(crate) fn has(self, k: Kind) -> bool {
        self.0 & k.bit() != 0
    }
    pub(crate) fn is_silence(self) -> bool {
        self.0 == 0
    }
    pub(crate) fn fatal(self) -> bool {
        self.kinds().any(Kind::is_fatal)
    }
    pub(crate) fn describe(self) -> String {
        if self.is_silence() {
            return "silence".into();
        }
        self.kinds().map(Kind::name).collect::<Vec<_>>().join(" + ")
    }
}

/// The peer's buffer as its exchange names it (a perftest server's: where
/// the client's READs go), and how long we take it to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Region {
    pub va: u64,
    pub rkey: u32,
    pub len: u32,
}

/// The READ responses to one READ request, gathered by PSN.
#[derive(Debug, Clone)]
pub(crate) struct Capture {
    /// The READ request's PSN: the first response's.
    pub first: Psn,
    /// Responses the READ takes.
    pub npkts: u32,
    /// Payloads by PSN offset.
    pub parts: BTreeMap<u32, Vec<u8>>,
    /// The PSN offset of the response that said it was the last.
    pub last: Option<u32>,
}

impl Capture {
    pub(crate) fn new(first: Psn, npkts: u32) -> Capture {
        Capture {
            first,
            npkts,
            parts: BTreeMap::new(),
            last: None,
        }
    }

    /// The whole READ's data, when every response came, in order, and the
    /// last said so.
    pub(crate) fn data(&self) -> Option<Vec<u8>> {
        if self.last != Some(self.npkts - 1) || self.parts.len() != self.npkts as usize {
            return None;
        }
        Some(self.parts.values().flatten().copied().collect())
    }

    /// Bytes that came.
    pub(crate) fn bytes(&self) -> usize {
        self.parts.values().map(Vec::len).sum()
    }
}

/// One connection's state.
#[derive(Debug, Clone)]
pub(crate) struct Session {
    /// Counts sessions from 0 within a run.
    pub index: u32,
    pub our_qpn: u32,
    pub peer_qpn: u32,
    /// The PSN the peer expects next from us, as far as its answers tell.
    pub sq_psn: Psn,
    /// The next PSN we expect from the peer's requester.
    pub peer_epsn: Psn,
    peer_msn: u32,
    nak_sent: bool,
    /// Messages the peer sent us (its pingpong SENDs).
    pub peer_messages: u64,
    /// The peer's buffer, if its exchange named one.
    pub region: Option<Region>,
    /// The path MTU both sides agreed on (perftest), or `--mtu`.
    pub mtu: usize,
    /// Added to the PSN of every packet we resend in our own PSN space: a
    /// replay over rdma_cm gets our first PSN from the peer (the REP), not
    /// the recorded one. 0 for the TCP exchanges (we choose it).
    pub psn_shift: u32,
    /// Our buffers for the peer's READs and WRITEs (an rping server's).
    pub local: Option<LocalMem>,
    /// rping rounds completed on this connection.
    pub rounds: u64,
    /// The payload of the peer's last SEND ONLY (perftest's exchange over
    /// rdma_cm).
    pub last_recv: Option<Vec<u8>>,
}

impl Session {
    /// A connection to `peer_qpn`, whose responder expects `sq_psn` and
    /// whose requester starts at `peer_epsn`.
    pub(crate) fn new(
        index: u32,
        our_qpn: u32,
        peer_qpn: u32,
        sq_psn: Psn,
        peer_epsn: Psn,
        mtu: usize,
    ) -> Session {
        Session {
            index,
            our_qpn,
            peer_qpn,
            sq_psn,
            peer_epsn,
            peer_msn: 0,
            nak_sent: false,
            peer_messages: 0,
            region: None,
            mtu,
            psn_shift: 0,
            local: None,
            rounds: 0,
            last_recv: None,
        }
    }
}

impl Session {
    /// A session as a connection to a perftest server would make it, for
    /// the oracles' unit tests.
    #[cfg(test)]
    pub(crate) fn for_test(index: u32, region: Region) -> Session {
        Session {
            index,
            our_qpn: 0x11,
            peer_qpn: 0x22,
            sq_psn: Psn::new(0),
            peer_epsn: Psn::new(0),
            peer_msn: 0,
            nak_sent: false,
            peer_messages: 0,
            region: Some(region),
            mtu: 1024,
            psn_shift: 0,
            local: None,
            rounds: 0,
            last_recv: None,
        }
    }
}

/// The socket and what it has seen.
pub(crate) struct Link {
    sock: Socket,
    pub peer: Option<IpAddr>,
    /// Largest UDP payload the route to the peer carries.
    pub max_datagram: usize,
    /// Upkeep ACKs sent.
    pub upkeep: u64,
    /// Datagrams from the peer our parser refused (for the peer-wire oracle).
    pub unparsable: Vec<Vec<u8>>,
    /// Datagrams from elsewhere, or for an earlier session's QP (ignored).
    pub stray: u64,
    /// Kinds seen in total, including upkeep (for the histogram).
    pub seen_total: std::collections::BTreeMap<Kind, u64>,
    /// Print every packet.
    pub verbose: bool,
    /// The perftest exchange of the current connection, kept open for its
    /// end, with what we told the peer.
    oob: Option<(Oob, oob::Dest)>,
    /// Where READ responses go while a READ of ours is out.
    pub capture: Option<Capture>,
    /// Our rdma_cm end, once a connection was made with it.
    cm: Option<CmLink>,
    /// A perftest -R server's communication connection, kept while its
    /// test QP is fuzzed.
    pub(super) comm: Option<Session>,
}

/// The answers gathered after one step.
#[derive(Debug, Default, Clone)]
pub(crate) struct Answers {
    pub sig: Signature,
    pub peer_sends: u64,
    /// Every answer with its PSN, in the order it came (for the rkey
    /// oracle: which request an ACK or a READ response answers).
    pub at: Vec<(Kind, Psn)>,
}

impl Link {
    pub(crate) fn bind(local: IpAddr) -> Res<Link> {
        Ok(Link {
            sock: Socket::bind(local)?,
            peer: None,
            max_datagram: 1500 - 28,
            upkeep: 0,
            unparsable: Vec::new(),
            stray: 0,
            seen_total: Default::default(),
            verbose: false,
            oob: None,
            capture: None,
            cm: None,
            comm: None,
        })
    }

    /// Our address.
    pub(crate) fn local(&self) -> IpAddr {
        self.sock.local
    }

    /// Ends the current perftest exchange as a client does at the end of
    /// read_bw (a handshake, the reports, `done`), so that the server ends
    /// its run; a server that is gone is no error.
    /// An rdma_cm connection is ended with a DREQ.
    pub(crate) fn close_oob(&mut self) {
        self.finish_perftest_cm(Duration::from_secs(1));
        self.close_cm(Duration::from_millis(300));
        if let Some((mut o, mine)) = self.oob.take() {
            let _ = o.set_timeout(Some(Duration::from_secs(2)));
            let _ = o.finish_rdma_bw(&mine, &BwReport::default());
        }
    }

    /// Fills in the ICRC of a transport packet as the peer will check it.
    pub(crate) fn icrc(&self, bytes: &[u8]) -> Option<u32> {
        if bytes.len() < 16 {
            return None;
        }
        let peer = self.peer?;
        icrc::compute_udp(
            self.sock.local,
            peer,
            ROCE_V2_PORT,
            &bytes[..bytes.len() - 4],
        )
        .ok()
    }

    /// Sends one datagram to the peer. `Err` for a datagram the socket
    /// refuses (larger than the route takes).
    pub(crate) fn send(&mut self, payload: Vec<u8>) -> Res<()> {
        let dst = self.peer.ok_or("not connected")?;
        self.sock.send_to(dst, payload, 0)
    }

    /// Connects to the peer's server: the TCP exchange, retried until
    /// `limit` (the server may be restarting after its last QP failed).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn connect(
        &mut self,
        target: &Target,
        peer_kind: Peer,
        mtu: usize,
        index: u32,
        base_psn: Psn,
        qpn_low: u16,
        limit: Duration,
    ) -> Res<Session> {
        // A perftest server serves one client a run: end the last one.
        self.close_oob();
        let our_qpn = u32::from(self.sock.qpn_prefix()) << 16 | u32::from(qpn_low);
        let gid = match self.sock.local {
            IpAddr::V4(a) => a.to_ipv6_mapped(),
            IpAddr::V6(a) => a,
        };
        let mine = Dest {
            lid: 0,
            qpn: our_qpn,
            psn: base_psn.value(),
            gid,
        };
        let deadline = Instant::now() + limit;
        if let Peer::Rping { size } = peer_kind {
            let c = self.cm_connect(target, our_qpn, base_psn, mtu, deadline)?;
            self.set_peer(c.peer);
            let mut s = Session::new(
                index,
                our_qpn,
                c.peer_qpn,
                c.sq_psn,
                base_psn,
                c.mtu.min(mtu),
            );
            s.local = Some(LocalMem::new(size as usize));
            return Ok(s);
        }
        if let (Peer::PerftestRead { size }, true) = (peer_kind, target.cm) {
            return self.perftest_cm_connect(target, size, mtu, index, base_psn, our_qpn, deadline);
        }
        let mut region = None;
        let mut mtu = mtu;
        let theirs = loop {
            let r = match peer_kind {
                Peer::Pingpong | Peer::Rping { .. } => exchange(target, mine, deadline),
                Peer::PerftestRead { size } => {
                    perftest_exchange(target, mine, mtu, deadline).map(|(o, me, t, m)| {
                        region = Some(Region {
                            va: t.vaddr,
                            rkey: t.rkey,
                            len: size,
                        });
                        mtu = m;
                        self.oob = Some((o, me));
                        Dest {
                            lid: t.lid,
                            qpn: t.qpn & 0xff_ffff,
                            psn: t.psn & 0xff_ffff,
                            gid: t.gid_addr(),
                        }
                    })
                }
            };
            match r {
                Ok(t) => break t,
                Err(e) if Instant::now() >= deadline => {
                    let what = match peer_kind {
                        Peer::PerftestRead { .. } => "perftest",
                        _ => "pingpong",
                    };
                    return Err(format!("no {what} exchange with {target}: {e}"));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        if theirs.gid.octets()[8..].iter().all(|&b| b == 0) || theirs.gid == Ipv6Addr::UNSPECIFIED {
            return Err(format!(
                "the peer's GID {} is empty: run it with -g (a RoCE GID index)",
                theirs.gid
            ));
        }
        let peer = gid_addr(theirs.gid);
        if peer.is_ipv4() != self.sock.local.is_ipv4() {
            return Err(format!(
                "the peer's GID {} is {} but -d {} is not: give the peer the GID index of the other family",
                theirs.gid,
                if peer.is_ipv4() { "IPv4" } else { "IPv6" },
                self.sock.local
            ));
        }
        if peer.is_multicast() || peer.is_unspecified() {
            return Err(format!(
                "the peer's GID {} is not a unicast address",
                theirs.gid
            ));
        }
        self.set_peer(peer);
        Ok(Session {
            index,
            our_qpn,
            peer_qpn: theirs.qpn,
            sq_psn: base_psn,
            peer_epsn: Psn::new(theirs.psn),
            peer_msn: 0,
            nak_sent: false,
            peer_messages: 0,
            region,
            mtu,
            psn_shift: 0,
            local: None,
            rounds: 0,
            last_recv: None,
        })
    }

    /// The peer's address for the packets to come (the route's MTU taken
    /// when it changes), and whatever an earlier session's QP still had in
    /// flight dropped.
    pub(super) fn set_peer(&mut self, peer: IpAddr) {
        if self.peer != Some(peer) {
            self.max_datagram = rxe_net::route::link_mtu(self.sock.local, peer)
                .map(|m| m as usize - if peer.is_ipv4() { 28 } else { 48 })
                .unwrap_or(1500 - 28)
                .min(rxe_net::udp::MAX_DATAGRAM);
        }
        self.peer = Some(peer);
        let mut got = Vec::new();
        let _ = self.sock.recv_into(Some(Duration::ZERO), &mut got);
        for d in got {
            // A MAD is the CM's business still (a DREP, a DREQ).
            if d.data.len() >= 8 && bth_qpn(&d.data) == rxe_core::mad::GSI_QPN {
                self.cm_received(d.meta.src, &d.data);
            }
        }
    }

    /// Gathers what the peer sends for up to `window`, stopping `grace`
    /// after the last datagram once something came. Answers to our
    /// requests move `s.sq_psn` to where the peer says it is; the peer's
    /// own requests are ACKed.
    pub(crate) fn collect(
        &mut self,
        s: &mut Session,
        window: Duration,
        grace: Duration,
        rec: &mut Recorder,
    ) -> Answers {
        let start = Instant::now();
        let mut end = start + window;
        let mut got = Vec::new();
        let mut out = Answers::default();
        loop {
            let now = Instant::now();
            if now >= end {
                break;
            }
            got.clear();
            match self.sock.recv_into(Some(end - now), &mut got) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            let mut any = false;
            for d in std::mem::take(&mut got) {
                if Some(d.meta.src) != self.peer {
                    self.stray += 1;
                    continue;
                }
                if self.cm.is_some()
                    && d.data.len() >= 8
                    && bth_qpn(&d.data) == rxe_core::mad::GSI_QPN
                {
                    self.cm_received(d.meta.src, &d.data);
                    continue;
                }
                if let Some(k) = self.classify(s, &d.data, rec) {
                    any = true;
                    *self.seen_total.entry(k).or_default() += 1;
                    if k == Kind::PeerSend {
                        out.peer_sends += 1;
                    } else {
                        out.sig.0 |= k.bit();
                        if let Some(p) = d.data.get(9..12) {
                            out.at
                                .push((k, Psn::new(u32::from_be_bytes([0, p[0], p[1], p[2]]))));
                        }
                    }
                }
            }
            // A READ whose responses are still coming (every answer so far
            // is READ data, not all of it yet) gets the whole window: a
            // slow peer (a guest under TCG on a busy host) can leave more
            // than the grace between two responses of one READ.
            let read_open = self.capture.as_ref().is_some_and(|c| c.data().is_none())
                && out.sig.kinds().all(|k| k == Kind::ReadData);
            if any && !read_open {
                end = (Instant::now() + grace).min(start + window);
            }
        }
        self.cm_pump();
        out
    }

    /// [`Self::collect`] for upkeep of our own (perftest's exchange): what
    /// we send is not recorded.
    pub(crate) fn collect_quiet(&mut self, s: &mut Session, window: Duration) -> Answers {
        let mut rec = Recorder::new();
        self.collect(s, window, Duration::from_millis(2), &mut rec)
    }

    /// Sorts one datagram from the peer and does what it calls for.
    fn classify(&mut self, s: &mut Session, data: &[u8], rec: &mut Recorder) -> Option<Kind> {
        let pkt = match Packet::new_checked(data) {
            Ok(p) => p,
            Err(_) => {
                if data.len() >= 8 && bth_qpn(data) != s.our_qpn {
                    self.stray += 1;
                    return None;
                }
                self.unparsable.push(data.to_vec());
                return Some(Kind::Unparsable);
            }
        };
        let bth = pkt.bth();
        if bth.dest_qp() != s.our_qpn {
            self.stray += 1;
            return None;
        }
        if self.verbose {
            if let Ok(r) = PacketRepr::parse(&pkt) {
                println!("    < {r}");
            }
        }
        let psn = bth.psn();
        let info = pkt.info();
        let kind = match info.operation {
            Operation::Acknowledge | Operation::AtomicAcknowledge => {
                let syn = pkt.aeth().map(|a| a.syndrome())?;
                let k = match syn {
                    AethSyndrome::Ack { .. } if info.operation == Operation::AtomicAcknowledge => {
                        Kind::AtomicAck
                    }
                    AethSyndrome::Ack { .. } => Kind::Ack,
                    AethSyndrome::RnrNak { .. } => Kind::RnrNak,
                    AethSyndrome::Nak(c) => match c {
                        NakCode::PsnSequenceError => Kind::NakSeq,
                        NakCode::InvalidRequest => Kind::NakInvalid,
                        NakCode::RemoteAccessError => Kind::NakAccess,
                        NakCode::RemoteOperationalError => Kind::NakOperational,
                        NakCode::InvalidRdRequest => Kind::NakRd,
                        NakCode::Reserved(_) => Kind::NakReserved,
                    },
                    AethSyndrome::Reserved(_) => Kind::AethReserved,
                };
                // Where the peer's responder is: an ACK covers `psn` (an
                // ACK of a duplicate may name the duplicate's own PSN, as
                // rxe-rs does, or the last PSN done, as the kernel does:
                // only an ACK ahead moves us on); a NAK (and an RNR NAK)
                // names the PSN it expects.
                if matches!(k, Kind::Ack | Kind::AtomicAck) {
                    if psn.next().is_after(s.sq_psn) {
                        s.sq_psn = psn.next();
                    }
                } else {
                    s.sq_psn = psn;
                }
                k
            }
            Operation::ReadResponse => {
                if let Some(c) = self.capture.as_mut() {
                    let d = psn.diff(c.first);
                    if d >= 0 && (d as u32) < c.npkts {
                        c.parts.insert(d as u32, pkt.payload().to_vec());
                        if info.position.ends() {
                            c.last = Some(d as u32);
                        }
                    }
                }
                if info.position.ends() && psn.next().is_after(s.sq_psn) {
                    s.sq_psn = psn.next();
                }
                Kind::ReadData
            }
            Operation::Send | Operation::RdmaWrite => {
                self.upkeep_request(s, &pkt, rec);
                Kind::PeerSend
            }
            Operation::ReadRequest if s.local.is_some() => {
                self.upkeep_read(s, &pkt, rec);
                Kind::PeerSend
            }
            _ => Kind::Other,
        };
        Some(kind)
    }

    /// Feeds a MAD from `from` to our rdma_cm end, if we have one.
    fn cm_received(&mut self, from: IpAddr, data: &[u8]) {
        if let Some(c) = self.cm.as_mut() {
            c.received(&mut self.sock, from, data);
        }
    }

    /// Runs our rdma_cm end ([`CmLink::pump`]), if we have one.
    fn cm_pump(&mut self) {
        if let Some(c) = self.cm.as_mut() {
            c.pump(&mut self.sock);
        }
    }

    /// An rdma_cm connection to `target` ([`CmLink::connect`]).
    pub(super) fn cm_connect(
        &mut self,
        target: &Target,
        our_qpn: u32,
        peer_psn: Psn,
        mtu: usize,
        deadline: Instant,
    ) -> Res<CmConnected> {
        CmLink::connect(
            &mut self.cm,
            &mut self.sock,
            &mut self.stray,
            target,
            our_qpn,
            peer_psn,
            mtu,
            deadline,
        )
    }

    /// Ends the rdma_cm connections, waiting up to `wait` for the peer
    /// ([`CmLink::close`]).
    fn close_cm(&mut self, wait: Duration) {
        if let Some(c) = self.cm.as_mut() {
            c.close(&mut self.sock, &mut self.stray, self.peer, wait);
        }
    }

    /// MADs sent and received on our QP 1 so far.
    pub(crate) fn cm_counts(&self) -> Option<(u64, u64)> {
        self.cm.as_ref().map(|c| (c.mads_sent, c.mads_received))
    }

    /// The minimal responder for the peer's own requests: SENDs are
    /// ACKed (and dropped); WRITEs land in our rdma buffer when there is
    /// one and they name it (else, against an rping server, a remote
    /// access NAK), and are ACKed.
    fn upkeep_request(&mut self, s: &mut Session, pkt: &Packet<&[u8]>, rec: &mut Recorder) {
        let bth = pkt.bth();
        let psn = bth.psn();
        let d = psn.diff(s.peer_epsn);
        let info = pkt.info();
        let answer = if d == 0 {
            if info.operation == Operation::RdmaWrite {
                if let Some(m) = s.local.as_mut() {
                    let reth = pkt.reth().map(|r| (r.va(), r.rkey(), r.dma_len()));
                    if !m.write(reth, pkt.payload(), info.position.ends()) {
                        m.refused += 1;
                        self.respond(s, psn, AethSyndrome::Nak(NakCode::RemoteAccessError), rec);
                        return;
                    }
                }
            }
            s.peer_epsn = psn.next();
            s.nak_sent = false;
            if info.position.ends() {
                s.peer_msn = (s.peer_msn + 1) & 0xff_ffff;
                if info.operation == Operation::Send {
                    s.peer_messages += 1;
                    if info.position == rxe_core::wire::Position::Only {
                        s.last_recv = Some(pkt.payload().to_vec());
                    }
                }
            }
            (bth.ack_req() || info.position.ends())
                .then_some((psn, AethSyndrome::Ack { credits: 31 }))
        } else if d < 0 {
            Some((s.peer_epsn.sub(1), AethSyndrome::Ack { credits: 31 }))
        } else if !s.nak_sent {
            s.nak_sent = true;
            Some((s.peer_epsn, AethSyndrome::Nak(NakCode::PsnSequenceError)))
        } else {
            None
        };
        if let Some((psn, syndrome)) = answer {
            self.respond(s, psn, syndrome, rec);
        }
    }

    /// An ACK or NAK to the peer's requester.
    fn respond(&mut self, s: &Session, psn: Psn, syndrome: AethSyndrome, rec: &mut Recorder) {
        let mut r = PacketRepr::new(bth_repr(Opcode::RC_ACKNOWLEDGE, s.peer_qpn, psn, false));
        r.aeth = Some(AethRepr {
            syndrome,
            msn: s.peer_msn,
        });
        self.upkeep_send(r, psn, s.peer_qpn, "upkeep ACK", rec);
    }

    /// Emits an upkeep packet with its ICRC, checks it and sends it.
    fn upkeep_send(
        &mut self,
        r: PacketRepr<'_>,
        psn: Psn,
        qpn: u32,
        what: &str,
        rec: &mut Recorder,
    ) {
        let mut b = vec![0u8; r.buffer_len()];
        if r.emit(&mut b).is_ok() {
            if let Some(c) = self.icrc(&b) {
                let n = b.len();
                b[n - 4..].copy_from_slice(&c.to_le_bytes());
            }
            rec.sanity_check(&b, what, Some((psn, qpn)));
            if self.send(b).is_ok() {
                self.upkeep += 1;
            }
        }
    }

    /// The minimal responder for the peer's RDMA READs (an rping server
    /// reads the buffer whose info we sent): READ responses from our
    /// memory, as many as the path MTU makes them, or a remote access NAK
    /// for a READ that names none of it. A duplicate is answered again at
    /// its own PSN, as a responder re-executes a READ.
    fn upkeep_read(&mut self, s: &mut Session, pkt: &Packet<&[u8]>, rec: &mut Recorder) {
        let psn = pkt.bth().psn();
        let d = psn.diff(s.peer_epsn);
        if d > 0 {
            if !s.nak_sent {
                s.nak_sent = true;
                let e = s.peer_epsn;
                self.respond(s, e, AethSyndrome::Nak(NakCode::PsnSequenceError), rec);
            }
            return;
        }
        let Some(reth) = pkt.reth() else { return };
        let len = reth.dma_len();
        let data = s
            .local
            .as_ref()
            .and_then(|m| m.read(reth.va(), reth.rkey(), len))
            .map(<[u8]>::to_vec);
        let Some(data) = data else {
            if let Some(m) = s.local.as_mut() {
                m.refused += 1;
            }
            if d == 0 {
                self.respond(s, psn, AethSyndrome::Nak(NakCode::RemoteAccessError), rec);
            }
            return;
        };
        let mtu = s.mtu.max(256);
        let npkts = data.len().div_ceil(mtu).max(1) as u32;
        if d == 0 {
            s.peer_epsn = psn.add(npkts);
            s.peer_msn = (s.peer_msn + 1) & 0xff_ffff;
            s.nak_sent = false;
            if let Some(m) = s.local.as_mut() {
                m.reads += 1;
            }
        }
        for i in 0..npkts {
            let op = match (npkts, i) {
                (1, _) => Opcode::RC_RDMA_READ_RESPONSE_ONLY,
                (_, 0) => Opcode::RC_RDMA_READ_RESPONSE_FIRST,
                (n, i) if i == n - 1 => Opcode::RC_RDMA_READ_RESPONSE_LAST,
                _ => Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
            };
            let at = i as usize * mtu;
            let part = &data[at.min(data.len())..(at + mtu).min(data.len())];
            let p = psn.add(i);
            let mut r = PacketRepr::new(bth_repr(op, s.peer_qpn, p, false));
            if op != Opcode::RC_RDMA_READ_RESPONSE_MIDDLE {
                r.aeth = Some(AethRepr {
                    syndrome: AethSyndrome::Ack { credits: 31 },
                    msn: s.peer_msn,
                });
            }
            r.payload = part;
            self.upkeep_send(r, p, s.peer_qpn, "upkeep READ response", rec);
        }
    }
}

/// One try at the client side of rdma-core's pingpong exchange (as
/// `pingpong::client_exchange`, which retries its TCP connect for seconds
/// of its own), bounded by `deadline`: the liveness timeout must be what
/// the user gave.
fn exchange(target: &Target, mine: Dest, deadline: Instant) -> Res<Dest> {
    use std::io::{Read, Write};
    use std::net::{TcpStream, ToSocketAddrs};
    let left = || {
        deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1))
    };
    let addrs: Vec<_> = (target.host.as_str(), target.port)
        .to_socket_addrs()
        .map_err(|e| format!("{e} for {target}"))?
        .collect();
    let mut sock = addrs
        .iter()
        .find_map(|a| TcpStream::connect_timeout(a, left()).ok())
        .ok_or_else(|| format!("Couldn't connect to {target}"))?;
    sock.set_read_timeout(Some(left()))
        .and_then(|()| sock.set_write_timeout(Some(left())))
        .map_err(|e| format!("set a TCP timeout: {e}"))?;
    let msg = mine.to_wire();
    sock.write_all(&msg)
        .map_err(|e| format!("Couldn't send local address: {e}"))?;
    let mut theirs = msg;
    sock.read_exact(&mut theirs)
        .map_err(|e| format!("Couldn't read remote address: {e}"))?;
    let d = Dest::from_wire(&theirs)?;
    sock.write_all(b"done\0")
        .map_err(|e| format!("Couldn't write done: {e}"))?;
    Ok(d)
}

/// One try at the client side of perftest's exchange as `ib_read_bw`
/// does it (versions, system data, MTU, the handshakes of the RDMA
/// bandwidth tests, with `rxe perf`'s [`Oob`]), bounded by `deadline`.
/// Returns the connection (kept open: the server waits on it for the end
/// of the test), our destination, the server's, and the path MTU agreed.
fn perftest_exchange(
    target: &Target,
    mine: Dest,
    mtu: usize,
    deadline: Instant,
) -> Res<(Oob, oob::Dest, oob::Dest, usize)> {
    let left = || {
        deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1))
    };
    let mut o = Oob::connect(&target.host, target.port, left()).map_err(|e| e.to_string())?;
    o.set_timeout(Some(left()))
        .map_err(|e| format!("set a TCP timeout: {e}"))?;
    let mtu_enum = rxe_core::types::Mtu::from_bytes(mtu).map_or(3, |m| m as u8);
    let opening = o.open(4096, 64, mtu_enum)?;
    let me = oob::Dest {
        lid: 0,
        out_reads: 16,
        qpn: mine.qpn,
        psn: mine.psn,
        rkey: 0,
        vaddr: 0,
        gid: mine.gid.octets(),
        srqn: 0,
    };
    let theirs = o.handshakes(oob::Sequence::RDMA_BW, &[me], |_| Ok(()), || {}, |_| {})?;
    let mtu = rxe_core::types::Mtu::from_bytes(128usize << opening.mtu_enum.min(5))
        .map_or(mtu, |m| m.bytes());
    Ok((o, me, theirs[0], mtu))
}
