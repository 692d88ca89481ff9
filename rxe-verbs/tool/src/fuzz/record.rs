//! What a campaign sent: kept for the findings' pcaps, the replay sidecar
//! (`FILE.pcap.meta`) and the hash that shows a seed reproduces a campaign;
//! and the `sanity` oracle, which re-parses every packet we meant to be
//! well formed.
//!
//! The pcap holds raw IP frames (LINKTYPE_RAW) from our address to the
//! peer's, UDP port 4791 to 4791, exactly as sent, so that Wireshark,
//! tshark, `rxe dump` or a driver developer's own tools read it without
//! rxe-rs. The sidecar says, per packet, how the packet relates to its
//! connection (which of its fields name the peer's QP, whether its PSN
//! counts from the peer's PSN, whether its ICRC was right), so that
//! `--replay` can rewrite it for a new connection.

use super::config::Res;
use rxe_core::psn::Psn;
use rxe_core::wire::LinkType;
use rxe_core::wire::{Opcode, Packet, PacketRepr};
use rxe_net::capture::{CaptureReader, CaptureWriter};
use std::fmt::Write as _;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// Which QP a packet is sent to, relative to the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum QpnChoice {
    /// The peer's QP.
    Peer,
    /// The peer's QP number XOR this.
    PeerXor(u32),
    /// This QP number, whatever the connection.
    Abs(u32),
    /// Too short to carry one: leave the bytes as they are.
    Keep,
}

/// The ICRC a packet carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IcrcChoice {
    /// Computed over the packet as sent.
    Right,
    /// The right one XOR this (nonzero).
    Flip(u32),
    /// Left as the bytes say (a packet too short for one).
    Keep,
}

/// What a packet's PSN counts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PsnBase {
    /// Our own PSN space (chosen by us for each connection: kept as is).
    Ours,
    /// The peer's requester PSN (its next PSN, as we expected it) plus this.
    Peer(i32),
}

/// Where a packet's RETH or AtomicETH points, relative to the peer's
/// region (a perftest server's buffer, learnt from the exchange), so that a
/// replay aims it at the new connection's region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RegionRef {
    /// The VA is the region's plus this (`None`: as sent).
    pub va: Option<i64>,
    /// The R_Key is the region's XOR this (`Some(0)`: the right key; `None`:
    /// as sent, e.g. a stale key of an earlier connection).
    pub key: Option<u32>,
}

impl RegionRef {
    /// The sidecar's `region=VA/KEY`: `+N`/`-N` or `abs`; `xM` or `abs`.
    fn to_meta(self) -> String {
        let va = self.va.map_or("abs".to_string(), |o| format!("{o:+}"));
        let key = self.key.map_or("abs".to_string(), |x| format!("x{x:x}"));
        format!("region={va}/{key}")
    }

    fn from_meta(s: &str) -> Option<RegionRef> {
        let (va, key) = s.strip_prefix("region=")?.split_once('/')?;
        let va = match va {
            "abs" => None,
            v => Some(v.parse().ok()?),
        };
        let key = match key {
            "abs" => None,
            k => Some(u32::from_str_radix(k.strip_prefix('x')?, 16).ok()?),
        };
        Some(RegionRef { va, key })
    }
}

/// Where the region's fields are in a packet: the offset of the VA (a RETH
/// or AtomicETH; `None` for an IETH, which has none) and of the R_Key.
pub(crate) fn region_fields(b: &[u8]) -> Option<(Option<usize>, usize)> {
    use rxe_core::wire::ExtHeaders as H;
    let h = Opcode(*b.first()?).info()?.headers;
    let at = |x: H| h.offset_of(x).map(|o| 12 + o);
    let (va, key) = match (at(H::RETH).or(at(H::ATOMIC_ETH)), at(H::IETH)) {
        (Some(v), _) => (Some(v), v + 8),
        (None, Some(k)) => (None, k),
        (None, None) => return None,
    };
    (b.len() >= key + 4 + 4).then_some((va, key))
}

/// One packet sent.
#[derive(Debug, Clone)]
pub(crate) struct Sent {
    pub session: u32,
    pub step: u64,
    pub arm: String,
    pub qpn: QpnChoice,
    pub icrc: IcrcChoice,
    pub psn: PsnBase,
    /// How its RETH or AtomicETH relates to the peer's region, if it does.
    pub region: Option<RegionRef>,
    /// The PSN the peer expected from us when the packet's step began (as
    /// far as its answers told), in the same PSN space as the packet's own:
    /// the minimiser renumbers kept steps from it.
    pub expect: Option<Psn>,
    /// The UDP payload as sent.
    pub bytes: Vec<u8>,
    pub time: Duration,
}

/// One connection, as far as replaying it needs.
#[derive(Debug, Clone)]
pub(crate) struct SessionInfo {
    pub index: u32,
    pub base_psn: Psn,
    pub peer_qpn: u32,
    pub our_qpn: u32,
    pub local: IpAddr,
    pub peer: IpAddr,
}

/// Everything sent, and the sanity oracle's findings.
#[derive(Debug, Default)]
pub(crate) struct Recorder {
    pub sent: Vec<Sent>,
    pub sessions: Vec<SessionInfo>,
    hash: u64,
    /// Packets that failed the sanity check: what they were and why.
    pub insane: Vec<(String, Vec<u8>)>,
    /// The sidecar's `peer` line (`perftest-read size=N`), when the peer
    /// is not a pingpong server.
    pub peer: Option<String>,
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0100_0000_01b3;

fn fnv(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(FNV_PRIME);
    }
    h
}

impl Recorder {
    pub(crate) fn new() -> Recorder {
        Recorder {
            hash: FNV_OFFSET,
            ..Default::default()
        }
    }

    /// FNV-1a over every packet sent, with what depends on the peer's own
    /// choices (its QP number, its PSNs, and so the ICRC) taken out: the
    /// same seed against a peer that answers the same way gives the same
    /// hash.
    pub(crate) fn hash(&self) -> u64 {
        self.hash
    }

    pub(crate) fn add_session(&mut self, s: SessionInfo) {
        self.sessions.push(s);
    }

    pub(crate) fn add(&mut self, s: Sent) {
        let mut norm = s.bytes.clone();
        if norm.len() >= 8 && s.qpn != QpnChoice::Keep {
            norm[5..8].fill(0);
        }
        if norm.len() >= 12 && matches!(s.psn, PsnBase::Peer(_)) {
            norm[9..12].fill(0);
        }
        if norm.len() >= 16 && s.icrc != IcrcChoice::Keep {
            let n = norm.len();
            norm[n - 4..].fill(0);
        }
        if let (Some(r), Some((va_at, key_at))) = (s.region, region_fields(&norm)) {
            if let (Some(_), Some(at)) = (r.va, va_at) {
                norm[at..at + 8].fill(0);
            }
            if r.key.is_some() {
                norm[key_at..key_at + 4].fill(0);
            }
        }
        let mut h = fnv(self.hash, &s.session.to_le_bytes());
        h = fnv(h, &s.step.to_le_bytes());
        h = fnv(h, s.arm.as_bytes());
        h = fnv(h, meta_fields(&s).as_bytes());
        h = fnv(h, &norm);
        self.hash = h;
        self.sent.push(s);
    }

    /// The `sanity` oracle: a packet we built to be well formed must parse,
    /// with the PSN and QP we put in; a malformed one must be refused
    /// without a panic. Returns whether it passed.
    pub(crate) fn sanity_check(
        &mut self,
        bytes: &[u8],
        what: &str,
        expect: Option<(Psn, u32)>,
    ) -> bool {
        let r = std::panic::catch_unwind(|| -> Result<(), String> {
            let p = Packet::new_checked(bytes).map_err(|e| e.to_string())?;
            let r = PacketRepr::parse(&p).map_err(|e| e.to_string())?;
            if let Some((psn, qpn)) = expect {
                if r.bth.psn != psn || r.bth.dest_qp != qpn {
                    return Err(format!(
                        "re-parsed PSN {} QPN {:#x}, built with PSN {} QPN {qpn:#x}",
                        r.bth.psn.value(),
                        r.bth.dest_qp,
                        psn.value()
                    ));
                }
            }
            Ok(())
        });
        let why = match (r, expect) {
            (Ok(Ok(())), _) => return true,
            (Ok(Err(_)), None) => return true,
            (Ok(Err(e)), Some(_)) => format!("{what}: built well formed, parser says: {e}"),
            (Err(_), _) => format!("{what}: the parser panicked"),
        };
        self.insane.push((why, bytes.to_vec()));
        false
    }

    /// Writes `sent[from..]` as `path` (pcap) and `path.meta`.
    pub(crate) fn write(&self, path: &Path, from: usize) -> Res<()> {
        self.write_range(path, from, self.sent.len(), None)
    }

    /// The sessions, with the initial PSN of session `index` replaced by
    /// `psn`: a finding that starts in the middle of a connection (the
    /// canary and data oracles') is replayed on a connection whose first
    /// PSN is the one its first packet was sent at.
    pub(crate) fn sessions_from(&self, index: u32, psn: Psn) -> Vec<SessionInfo> {
        self.sessions
            .iter()
            .map(|s| {
                let mut s = s.clone();
                if s.index == index {
                    s.base_psn = psn;
                }
                s
            })
            .collect()
    }

    /// Writes `sent[from..to]` as `path` (pcap) and `path.meta`, naming
    /// the oracle it is a finding of, if any.
    pub(crate) fn write_range(
        &self,
        path: &Path,
        from: usize,
        to: usize,
        oracle: Option<&str>,
    ) -> Res<()> {
        let to = to.min(self.sent.len());
        write_packets(
            path,
            &self.sent[from.min(to)..to],
            &self.sessions,
            oracle,
            self.peer.as_deref(),
        )
    }
}

/// Writes `pkts` as `path` (pcap) and `path.meta`, with the sessions they
/// belong to (`sessions` may hold more) and the oracle they are a finding
/// of, if any.
pub(crate) fn write_packets(
    path: &Path,
    pkts: &[Sent],
    sessions: &[SessionInfo],
    oracle: Option<&str>,
    peer: Option<&str>,
) -> Res<()> {
    let session = |i: u32| sessions.iter().find(|s| s.index == i);
    write_pcap(
        path,
        pkts.iter().filter_map(|p| {
            let s = session(p.session)?;
            Some((p.time, s.local, s.peer, p.bytes.as_slice()))
        }),
    )?;
    let mut meta = String::from(
        "rxe-fuzz-meta 1\n# sessions: our initial PSN, the peer's QPN and ours then;\n\
         # packets, one per pcap frame: session, step, arm, how its QPN, ICRC and PSN\n\
         # relate to the connection (rxe fuzz --replay rewrites them for a new one),\n\
         # where it points in the peer's region, and the PSN the peer expected from us\n\
         # when its step began (expect=, hex: a packet sent at it was in sequence)\n",
    );
    if let Some(o) = oracle {
        let _ = writeln!(meta, "oracle {o}");
    }
    if let Some(p) = peer {
        let _ = writeln!(meta, "peer {p}");
    }
    let mut used: Vec<u32> = pkts.iter().map(|p| p.session).collect();
    used.dedup();
    for s in sessions.iter().filter(|s| used.contains(&s.index)) {
        let _ = writeln!(
            meta,
            "session {} psn={:06x} peer_qpn={:06x} our_qpn={:06x}",
            s.index,
            s.base_psn.value(),
            s.peer_qpn,
            s.our_qpn
        );
    }
    for p in pkts {
        let expect = p
            .expect
            .map_or(String::new(), |e| format!(" expect={:06x}", e.value()));
        let _ = writeln!(
            meta,
            "packet {} {} {} {}{expect}",
            p.session,
            p.step,
            p.arm,
            meta_fields(p)
        );
    }
    std::fs::write(meta_path(path), meta)
        .map_err(|e| format!("write {}: {e}", meta_path(path).display()))
}

fn meta_fields(p: &Sent) -> String {
    let q = match p.qpn {
        QpnChoice::Peer => "peer".to_string(),
        QpnChoice::PeerXor(x) => format!("xor:{x:x}"),
        QpnChoice::Abs(v) => format!("abs:{v:x}"),
        QpnChoice::Keep => "keep".into(),
    };
    let i = match p.icrc {
        IcrcChoice::Right => "right".to_string(),
        IcrcChoice::Flip(x) => format!("flip:{x:x}"),
        IcrcChoice::Keep => "keep".into(),
    };
    let s = match p.psn {
        PsnBase::Ours => "ours".to_string(),
        PsnBase::Peer(d) => format!("peer:{d}"),
    };
    match p.region {
        Some(r) => format!("qpn={q} icrc={i} psn={s} {}", r.to_meta()),
        None => format!("qpn={q} icrc={i} psn={s}"),
    }
}

/// `FILE.pcap.meta`.
pub(crate) fn meta_path(pcap: &Path) -> PathBuf {
    let mut s = pcap.as_os_str().to_owned();
    s.push(".meta");
    PathBuf::from(s)
}

/// An IPv4 or IPv6 + UDP header around `payload`, as a UDP socket bound to
/// `src:4791` sends it (IPv4: ID 0, DF, TTL 64; UDP checksum 0).
pub(crate) fn ip_frame(src: IpAddr, dst: IpAddr, payload: &[u8]) -> Vec<u8> {
    let udp_len = 8 + payload.len();
    let mut f = Vec::with_capacity(48 + payload.len());
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let mut ip = [0u8; 20];
            ip[0] = 0x45;
            ip[2..4].copy_from_slice(&((20 + udp_len) as u16).to_be_bytes());
            ip[6] = 0x40;
            ip[8] = 64;
            ip[9] = 17;
            ip[12..16].copy_from_slice(&s.octets());
            ip[16..20].copy_from_slice(&d.octets());
            let mut sum: u32 = ip
                .chunks(2)
                .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
                .sum();
            while sum > 0xffff {
                sum = (sum & 0xffff) + (sum >> 16);
            }
            ip[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
            f.extend_from_slice(&ip);
        }
        _ => {
            let (s, d) = (v6(src), v6(dst));
            let mut ip = [0u8; 40];
            ip[0] = 0x60;
            ip[4..6].copy_from_slice(&(udp_len as u16).to_be_bytes());
            ip[6] = 17;
            ip[7] = 64;
            ip[8..24].copy_from_slice(&s.octets());
            ip[24..40].copy_from_slice(&d.octets());
            f.extend_from_slice(&ip);
        }
    }
    f.extend_from_slice(&4791u16.to_be_bytes());
    f.extend_from_slice(&4791u16.to_be_bytes());
    f.extend_from_slice(&(udp_len as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(payload);
    f
}

fn v6(a: IpAddr) -> std::net::Ipv6Addr {
    match a {
        IpAddr::V4(a) => a.to_ipv6_mapped(),
        IpAddr::V6(a) => a,
    }
}

/// Writes raw IP frames to a pcap file.
pub(crate) fn write_pcap<'a>(
    path: &Path,
    frames: impl Iterator<Item = (Duration, IpAddr, IpAddr, &'a [u8])>,
) -> Res<()> {
    if let Some(dir) = path.parent() {
        if !dir.as_os_str().is_empty() {
            std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
        }
    }
    let err = |e: rxe_net::capture::CaptureError| format!("write {}: {e}", path.display());
    let mut w = CaptureWriter::create(path, LinkType::RawIp).map_err(err)?;
    for (t, src, dst, payload) in frames {
        w.write(t, &ip_frame(src, dst, payload)).map_err(err)?;
    }
    w.finish().map_err(err)?;
    Ok(())
}

/// Now, for a capture's timestamps.
pub(crate) fn now() -> Duration {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
}

/// A packet read back for a replay.
#[derive(Debug, Clone)]
pub(crate) struct Loaded {
    pub sessions: Vec<SessionInfo>,
    pub packets: Vec<Sent>,
    /// The oracle the recording is a finding of (the sidecar's `oracle`
    /// line), if it says.
    pub oracle: Option<String>,
    /// The sidecar's `peer` line, if any (`perftest-read size=N`).
    pub peer: Option<String>,
}

/// Reads a pcap written by [`Recorder::write`] and its sidecar. Without a
/// sidecar, the pcap is taken as one connection: the QP number most
/// packets go to is the peer's, the first packet's PSN our initial PSN,
/// and a right ICRC stays right.
pub(crate) fn load(pcap: &Path) -> Res<Loaded> {
    let mut rd = CaptureReader::open(pcap).map_err(|e| format!("open {}: {e}", pcap.display()))?;
    let mut frames = Vec::new();
    while let Some(r) = rd.next_record() {
        let r = r.map_err(|e| format!("read {}: {e}", pcap.display()))?;
        let d = &r.data;
        let (ihl, src, dst) = match d.first().map(|b| b >> 4) {
            Some(4) if d.len() >= 20 => {
                let s: [u8; 4] = d[12..16].try_into().unwrap_or_default();
                let t: [u8; 4] = d[16..20].try_into().unwrap_or_default();
                (usize::from(d[0] & 15) * 4, IpAddr::from(s), IpAddr::from(t))
            }
            Some(6) if d.len() >= 40 => {
                let s: [u8; 16] = d[8..24].try_into().unwrap_or_default();
                let t: [u8; 16] = d[24..40].try_into().unwrap_or_default();
                (40, IpAddr::from(s), IpAddr::from(t))
            }
            _ => {
                return Err(format!(
                    "{}: frame {} is not raw IP",
                    pcap.display(),
                    r.number
                ))
            }
        };
        if d.len() < ihl + 8 {
            return Err(format!(
                "{}: frame {} is too short",
                pcap.display(),
                r.number
            ));
        }
        frames.push((r.timestamp, src, dst, d[ihl + 8..].to_vec()));
    }
    let meta = std::fs::read_to_string(meta_path(pcap)).ok();
    let Some(meta) = meta else {
        return Ok(guess(frames));
    };
    let mut sessions = Vec::new();
    let mut packets = Vec::new();
    let mut oracle = None;
    let mut peer = None;
    let bad = |l: &str| format!("{}: bad line {l:?}", meta_path(pcap).display());
    let hex = |s: &str, l: &str| u32::from_str_radix(s, 16).map_err(|_| bad(l));
    let mut it = frames.into_iter();
    for l in meta.lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        match w.first().copied() {
            Some("oracle") if w.len() == 2 => oracle = Some(w[1].to_string()),
            Some("peer") if w.len() >= 2 => peer = Some(w[1..].join(" ")),
            Some("session") if w.len() == 5 => {
                let field = |i: usize, k: &str| -> Res<u32> {
                    hex(w[i].strip_prefix(k).ok_or_else(|| bad(l))?, l)
                };
                sessions.push(SessionInfo {
                    index: w[1].parse().map_err(|_| bad(l))?,
                    base_psn: Psn::new(field(2, "psn=")?),
                    peer_qpn: field(3, "peer_qpn=")?,
                    our_qpn: field(4, "our_qpn=")?,
                    local: IpAddr::from([0, 0, 0, 0]),
                    peer: IpAddr::from([0, 0, 0, 0]),
                });
            }
            Some("packet") if (7..=9).contains(&w.len()) => {
                let (time, src, dst, bytes) = it.next().ok_or_else(|| {
                    format!("{}: fewer frames than the sidecar lists", pcap.display())
                })?;
                let session: u32 = w[1].parse().map_err(|_| bad(l))?;
                if let Some(s) = sessions.iter_mut().find(|s| s.index == session) {
                    s.local = src;
                    s.peer = dst;
                }
                let v = |i: usize, k: &str| w[i].strip_prefix(k).ok_or_else(|| bad(l));
                let qpn = match v(4, "qpn=")? {
                    "peer" => QpnChoice::Peer,
                    "keep" => QpnChoice::Keep,
                    q if q.starts_with("xor:") => QpnChoice::PeerXor(hex(&q[4..], l)?),
                    q if q.starts_with("abs:") => QpnChoice::Abs(hex(&q[4..], l)?),
                    _ => return Err(bad(l)),
                };
                let icrc = match v(5, "icrc=")? {
                    "right" => IcrcChoice::Right,
                    "keep" => IcrcChoice::Keep,
                    q if q.starts_with("flip:") => IcrcChoice::Flip(hex(&q[5..], l)?),
                    _ => return Err(bad(l)),
                };
                let psn = match v(6, "psn=")? {
                    "ours" => PsnBase::Ours,
                    q if q.starts_with("peer:") => {
                        PsnBase::Peer(q[5..].parse().map_err(|_| bad(l))?)
                    }
                    _ => return Err(bad(l)),
                };
                // Then, each optional: region=VA/KEY, expect=PSN.
                let mut region = None;
                let mut expect = None;
                for t in &w[7..] {
                    if let Some(e) = t.strip_prefix("expect=") {
                        expect = Some(Psn::new(hex(e, l)?));
                    } else {
                        region = Some(RegionRef::from_meta(t).ok_or_else(|| bad(l))?);
                    }
                }
                packets.push(Sent {
                    session,
                    step: w[2].parse().map_err(|_| bad(l))?,
                    arm: w[3].to_string(),
                    qpn,
                    icrc,
                    psn,
                    region,
                    expect,
                    bytes,
                    time,
                });
            }
            _ => {}
        }
    }
    if it.next().is_some() {
        return Err(format!(
            "{}: more frames than the sidecar lists",
            pcap.display()
        ));
    }
    Ok(Loaded {
        sessions,
        packets,
        oracle,
        peer,
    })
}

/// A pcap without a sidecar: one connection, guessed.
fn guess(frames: Vec<(Duration, IpAddr, IpAddr, Vec<u8>)>) -> Loaded {
    let mut counts = std::collections::BTreeMap::<u32, usize>::new();
    for f in frames.iter().filter(|f| f.3.len() >= 8) {
        *counts.entry(super::bth::bth_qpn(&f.3)).or_default() += 1;
    }
    let peer_qpn = counts
        .iter()
        .max_by_key(|(_, n)| **n)
        .map(|(q, _)| *q)
        .unwrap_or(0);
    let first = frames.first();
    let base = first
        .filter(|f| f.3.len() >= 12)
        .map(|f| Psn::new(u32::from_be_bytes([0, f.3[9], f.3[10], f.3[11]])))
        .unwrap_or_default();
    let (local, peer) = first
        .map(|f| (f.1, f.2))
        .unwrap_or((IpAddr::from([0, 0, 0, 0]), IpAddr::from([0, 0, 0, 0])));
    let packets = frames
        .into_iter()
        .enumerate()
        .map(|(i, (time, src, dst, bytes))| {
            let qpn = if bytes.len() >= 8 && super::bth::bth_qpn(&bytes) == peer_qpn {
                QpnChoice::Peer
            } else {
                QpnChoice::Keep
            };
            let right = bytes.len() >= 16
                && rxe_core::wire::icrc::compute_udp(src, dst, 4791, &bytes[..bytes.len() - 4])
                    .ok()
                    .map(|c| c.to_le_bytes())
                    == bytes[bytes.len() - 4..].try_into().ok();
            Sent {
                session: 0,
                step: i as u64,
                arm: "pcap".into(),
                qpn,
                icrc: if right {
                    IcrcChoice::Right
                } else {
                    IcrcChoice::Keep
                },
                psn: PsnBase::Ours,
                region: None,
                expect: None,
                bytes,
                time,
            }
        })
        .collect();
    Loaded {
        sessions: vec![SessionInfo {
            index: 0,
            base_psn: base,
            peer_qpn,
            our_qpn: 0,
            local,
            peer,
        }],
        packets,
        oracle: None,
        peer: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ip_frames_parse_and_carry_the_icrc_a_socket_would() {
        let src: IpAddr = "127.0.5.3".parse().unwrap();
        let dst: IpAddr = "127.0.5.2".parse().unwrap();
        let mut p = vec![0u8; 12 + 4];
        p[0] = 0x04;
        p[2] = 0xff;
        p[3] = 0xff;
        let c = rxe_core::wire::icrc::compute_udp(src, dst, 4791, &p[..12]).unwrap();
        p[12..].copy_from_slice(&c.to_le_bytes());
        let f = ip_frame(src, dst, &p);
        assert_eq!(rxe_core::wire::icrc::verify(&f), Ok(true));
        let fr = rxe_core::wire::RoceFrame::parse(LinkType::RawIp, &f).unwrap();
        assert!(fr.icrc_ok());
    }

    #[test]
    fn region_refs_round_trip_through_the_sidecar() {
        for r in [
            RegionRef {
                va: Some(0),
                key: Some(0),
            },
            RegionRef {
                va: Some(-8),
                key: Some(0x100),
            },
            RegionRef {
                va: None,
                key: None,
            },
            RegionRef {
                va: Some(4095),
                key: None,
            },
        ] {
            assert_eq!(
                RegionRef::from_meta(&r.to_meta()),
                Some(r),
                "{}",
                r.to_meta()
            );
        }
        assert_eq!(RegionRef::from_meta("region=+1"), None);
        assert_eq!(RegionRef::from_meta("region=x/x1"), None);
    }

    #[test]
    fn the_sanity_oracle_fires_on_a_packet_built_wrong() {
        let mut rec = Recorder::new();
        // A SEND ONLY (opcode 4) meant to be well formed, cut inside its BTH.
        let mut p = vec![0u8; 12 + 4];
        p[0] = 0x04;
        p[7] = 0x11;
        assert!(rec.sanity_check(&p, "valid", Some((Psn::new(0), 0x11))));
        assert!(!rec.sanity_check(&p[..10], "valid", Some((Psn::new(0), 0x11))));
        // The same bytes, re-parsed with another QPN than we meant.
        assert!(!rec.sanity_check(&p, "valid", Some((Psn::new(0), 0x12))));
        // Malformed on purpose: refused without a panic is what we want.
        assert!(rec.sanity_check(&p[..10], "truncated", None));
        assert_eq!(rec.insane.len(), 2, "{:?}", rec.insane);
    }
}
