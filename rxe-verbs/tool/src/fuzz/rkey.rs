//! The `rkey` oracle: the peer executes no request whose R_Key it did not
//! grant.
//!
//! What the fuzzer knows is granted: the one key a perftest server's
//! exchange names for its buffer, and nothing at all on a pingpong server
//! (rdma-core's `ibv_rc_pingpong` registers its buffer for local access
//! only and gives its QP no remote access). Every other key the arms send
//! (the `region` arm's neighbours of the granted key, a stale key of an
//! earlier run's buffer, edge keys; the `reth` and `atomic` arms' edge
//! keys) is one the peer did not grant. A peer that executes a READ,
//! WRITE, atomic or ATOMIC WRITE of nonzero length with such a key has a
//! protection bug, whether or not the canary changed (a READ changes
//! nothing, and a neighbouring key may reach memory the fuzzer does not
//! watch). The assumption: the peer grants nothing else to this QP's
//! protection domain (perftest's servers register one buffer). It does not
//! hold for an rping server, which registers its own buffer for remote
//! READ and WRITE and keeps the key to itself: any key might be its own,
//! so against rping the oracle does not judge (and prints no verdict).
//!
//! Executed means answered as only an executed request is: READ data, or
//! for an ATOMIC WRITE READ data or an ACK, at the request's PSN; an
//! atomic ACK at its PSN; for a WRITE, an ACK of its PSN or of a later
//! packet of the same step (ACKs are cumulative). Zero-length READs and
//! WRITEs are left out (IBTA: their R_Key is not checked).
//!
//! An ACK proves execution only of a request that was *new* to the peer: a
//! duplicate (a PSN it already executed) is ACKed again without any check,
//! as the spec wants. So a request is judged only when it is the first
//! packet of its step, sent at the PSN the peer expects, and the fuzzer
//! knows the peer's expected PSN exactly: every packet the peer may have
//! executed on this connection (sent at a PSN it could have reached) has
//! been answered up to the highest one. Packets sent without an ACK
//! request, or dropped, leave that unknown until an ACK or a READ response
//! covers them; until then nothing is judged, never a guess.
//!
//! The finding is what was sent on the connection since the last good
//! check, up to the step that was executed; its sidecar starts the
//! connection at the PSN the peer expected at its first packet.
//!
//! [`Rkey`] is the oracle; it only watches ([`KeyWatch`] is its
//! bookkeeping), against every peer, and judges those whose grants it
//! knows.

use super::config::Peer;
use super::driver::Driver;
use super::oracle::{Finding, Oracle};
use super::record::{self, PsnBase, Sent};
use super::session::{Answers, Kind, Session};
use rxe_core::psn::Psn;
use rxe_core::wire::{Operation, Packet};

/// A request whose R_Key the responder must check, and what shows it was
/// executed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyedOp {
    Read,
    Write,
    Atomic,
    AtomicWrite,
}

impl KeyedOp {
    fn name(self) -> &'static str {
        match self {
            KeyedOp::Read => "an RDMA READ",
            KeyedOp::Write => "an RDMA WRITE",
            KeyedOp::Atomic => "an atomic",
            KeyedOp::AtomicWrite => "an ATOMIC WRITE",
        }
    }
}

/// A keyed request, as sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Keyed {
    pub op: KeyedOp,
    pub rkey: u32,
    pub va: u64,
    pub len: u32,
}

/// The keyed request `b` is, if it is a well-formed RC request that starts
/// a READ, WRITE, atomic or ATOMIC WRITE of nonzero length.
pub(crate) fn keyed(b: &[u8]) -> Option<Keyed> {
    let p = Packet::new_checked(b).ok()?;
    let info = p.info();
    if info.transport != rxe_core::wire::Transport::Rc || !info.position.starts() {
        return None;
    }
    let (op, rkey, va, len) = match info.operation {
        Operation::ReadRequest | Operation::RdmaWrite | Operation::AtomicWrite => {
            let r = p.reth()?;
            let op = match info.operation {
                Operation::ReadRequest => KeyedOp::Read,
                Operation::RdmaWrite => KeyedOp::Write,
                _ => KeyedOp::AtomicWrite,
            };
            (op, r.rkey(), r.va(), r.dma_len())
        }
        Operation::CompareSwap | Operation::FetchAdd => {
            let a = p.atomic_eth()?;
            (KeyedOp::Atomic, a.rkey(), a.va(), 8)
        }
        _ => return None,
    };
    (len > 0).then_some(Keyed { op, rkey, va, len })
}

/// Whether `answers` (with their PSNs) show that `k`, sent at `psn` as
/// the first of `n` packets of a step, was executed; what showed it.
pub(crate) fn executed(k: &Keyed, psn: Psn, n: u32, answers: &[(Kind, Psn)]) -> Option<String> {
    answers.iter().find_map(|&(kind, p)| {
        let at = p == psn;
        let covers = p.diff(psn) >= 0 && (p.diff(psn) as u32) < n.max(1);
        let shown = match k.op {
            KeyedOp::Read => kind == Kind::ReadData && at,
            KeyedOp::Atomic => kind == Kind::AtomicAck && at,
            KeyedOp::AtomicWrite => (kind == Kind::ReadData || kind == Kind::Ack) && at,
            KeyedOp::Write => kind == Kind::Ack && covers,
        };
        shown.then(|| format!("{} at PSN {:#08x}", kind.name(), p.value()))
    })
}

/// Whether the oracle judges requests to a peer of this kind: one whose
/// grants the fuzzer knows (all of them).
pub(crate) fn judges(peer: Peer) -> bool {
    matches!(peer, Peer::Pingpong | Peer::PerftestRead { .. })
}

/// One step's first packet, when it is a request to judge.
#[derive(Debug, Clone, Copy)]
struct Judged {
    /// Its index in `rec.sent`.
    idx: usize,
    psn: Psn,
    k: Keyed,
    /// The key granted on the connection, if any.
    granted: Option<u32>,
}

/// The step under way.
#[derive(Debug, Clone, Copy)]
struct StepWatch {
    /// The PSN the peer expected when it began (as far as we knew).
    start: Psn,
    /// Packets sent in it.
    n: u32,
    judged: Option<Judged>,
}

/// A finding of the rkey oracle.
#[derive(Debug, Clone)]
pub(crate) struct KeyFinding {
    pub why: String,
    /// `rec.sent[from..to]` is the finding.
    pub from: usize,
    pub to: usize,
    pub session: u32,
    /// The PSN the peer expected at `rec.sent[from]`.
    pub base: Psn,
}

/// The rkey oracle's bookkeeping for the current connection.
#[derive(Debug, Default)]
pub(crate) struct KeyWatch {
    /// One past the highest PSN the peer may have executed on this
    /// connection (`None` before the first connection).
    reach: Option<Psn>,
    /// Index in `rec.sent` of the connection's first packet.
    conn_from: usize,
    /// Each step of this connection: the index of its first packet in
    /// `rec.sent` and the PSN the peer expected then.
    steps: Vec<(usize, Psn)>,
    cur: Option<StepWatch>,
    /// Requests judged (with a key not granted, known to be new to the
    /// peer), over every connection.
    pub judged: u64,
    pub finding: Option<KeyFinding>,
}

impl KeyWatch {
    /// A new connection to a peer of kind `peer`: it expects its initial
    /// PSN.
    pub(crate) fn connection(&mut self, s: &Session, next: usize, peer: Peer) {
        self.reach = Some(s.sq_psn).filter(|_| judges(peer));
        self.conn_from = next;
        self.steps.clear();
        self.cur = None;
    }

    /// Packet `i` of a step went out as `rec.sent[idx]` (bytes `b`).
    /// `granted`: the key the connection granted.
    pub(crate) fn sent(&mut self, s: &Session, i: usize, idx: usize, p: &Sent) {
        let Some(reach) = self.reach else { return };
        if i == 0 {
            self.steps.push((idx, s.sq_psn));
            self.cur = Some(StepWatch {
                start: s.sq_psn,
                n: 0,
                judged: None,
            });
        }
        let Some(cur) = self.cur.as_mut() else { return };
        cur.n += 1;
        let b = &p.bytes;
        if p.psn != PsnBase::Ours || b.len() < 12 {
            return;
        }
        let psn = Psn::new(u32::from_be_bytes([0, b[9], b[10], b[11]]));
        // In sync: every packet the peer may have executed was answered.
        let synced = i == 0 && s.sq_psn.diff(reach) >= 0;
        let reach = if synced { s.sq_psn } else { reach };
        if synced && psn == cur.start {
            let granted = s.region.map(|r| r.rkey);
            cur.judged = keyed(b)
                .filter(|k| Some(k.rkey) != granted)
                .map(|k| Judged {
                    idx,
                    psn,
                    k,
                    granted,
                });
        }
        // A packet the peer may execute: at a PSN it may have reached.
        let d = psn.diff(cur.start);
        let far = reach.diff(cur.start).max(0);
        self.reach = Some(if d >= 0 && d <= far && psn.next().diff(reach) > 0 {
            psn.next()
        } else {
            reach
        });
    }
}

/// The rkey oracle against a peer of kind `peer`.
#[derive(Debug)]
pub(crate) struct Rkey {
    peer: Peer,
    keys: KeyWatch,
}

impl Rkey {
    pub(crate) fn new(peer: Peer) -> Rkey {
        Rkey {
            peer,
            keys: KeyWatch::default(),
        }
    }
}

impl Oracle<Driver> for Rkey {
    /// The view starts again: the peer expects the connection's initial
    /// PSN.
    fn connected(&mut self, s: &Session, next: usize) {
        self.keys.connection(s, next, self.peer);
    }

    fn sent(&mut self, s: &Session, _arm: &str, first: usize, step: &[Sent]) {
        for (i, p) in step.iter().enumerate() {
            self.keys.sent(s, i, first + i, p);
        }
    }

    /// Judges the step's first request on its answers.
    fn answered(&mut self, s: &Session, a: &Answers, last_good: usize, sent: usize) {
        let Some(cur) = self.keys.cur.take() else {
            return;
        };
        let Some(j) = cur.judged else { return };
        self.keys.judged += 1;
        let Some(how) = executed(&j.k, j.psn, cur.n, &a.at) else {
            return;
        };
        if self.keys.finding.is_some() {
            return;
        }
        let key = match (j.granted, s.region) {
            (Some(g), Some(r)) => format!(
                "R_Key {:#x} (the granted {g:#x} XOR {:#x}) at {}",
                j.k.rkey,
                j.k.rkey ^ g,
                match j.k.va.wrapping_sub(r.va) as i64 {
                    o if o.unsigned_abs() <= 1 << 32 => format!("offset {o} of the region"),
                    _ => format!("VA {:#x}", j.k.va),
                }
            ),
            _ => format!(
                "R_Key {:#x} at VA {:#x}, on a QP it granted no key to",
                j.k.rkey, j.k.va
            ),
        };
        let why = format!(
            "the peer executed {} of {} bytes with {key}: it answered {how}",
            j.k.op.name(),
            j.k.len
        );
        let from = last_good.max(self.keys.conn_from).min(j.idx);
        let base = self
            .keys
            .steps
            .iter()
            .find(|(i, _)| *i >= from)
            .map_or(j.psn, |(_, p)| *p);
        self.keys.finding = Some(KeyFinding {
            why,
            from,
            to: sent,
            session: s.index,
            base,
        });
    }

    fn fired(&self) -> Option<&'static str> {
        self.keys.finding.as_ref().map(|_| "rkey")
    }

    /// Prints the rkey verdict and writes its finding, if any (nothing
    /// against a peer it does not judge).
    fn verdict(&self, d: &Driver, tag: &str) -> Vec<Finding> {
        if !judges(self.peer) {
            return Vec::new();
        }
        println!(
            "rkey: {} requests with a key the peer did not grant, sent where it had to take them as new",
            self.keys.judged
        );
        let Some(f) = &self.keys.finding else {
            println!("oracle rkey: ok");
            return Vec::new();
        };
        let path = d.cfg.out.join(format!("rkey-{tag}.pcap"));
        let sessions = d.rec.sessions_from(f.session, f.base);
        let to = f.to.min(d.rec.sent.len());
        let r = record::write_packets(
            &path,
            &d.rec.sent[f.from.min(to)..to],
            &sessions,
            Some("rkey"),
            d.rec.peer.as_deref(),
        );
        match r {
            Ok(()) => {
                println!("finding rkey-{tag}: {}", f.why);
                println!(
                    "  {} ({} packets since the last good check)",
                    path.display(),
                    to - f.from.min(to)
                );
                println!(
                    "  replay: rxe fuzz --replay {} -d {} --to {}",
                    path.display(),
                    d.cfg.local,
                    d.cfg.target
                );
                println!("oracle rkey: FINDING {}", path.display());
            }
            Err(e) => println!("oracle rkey: FINDING ({e})"),
        }
        vec![Finding {
            oracle: "rkey",
            path,
            replayable: true,
        }]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fuzz::bth::bth_repr;
    use crate::fuzz::record::{IcrcChoice, QpnChoice};
    use crate::fuzz::session::Region;
    use rxe_core::wire::{AtomicEthRepr, Opcode, PacketRepr, RethRepr};
    use std::time::Duration;

    fn emit(op: Opcode, psn: Psn, rkey: u32, len: u32) -> Vec<u8> {
        let mut r = PacketRepr::new(bth_repr(op, 0x22, psn, true));
        let data = vec![0u8; len.min(64) as usize];
        if op == Opcode::RC_COMPARE_SWAP {
            r.atomic_eth = Some(AtomicEthRepr {
                va: 0x1000,
                rkey,
                swap_add: 1,
                compare: 0,
            });
        } else if op != Opcode::RC_SEND_ONLY {
            r.reth = Some(RethRepr {
                va: 0x1000,
                rkey,
                dma_len: len,
            });
            if op == Opcode::RC_RDMA_WRITE_ONLY {
                r.payload = &data;
            }
        }
        let mut b = vec![0u8; r.buffer_len()];
        let n = r.emit(&mut b).unwrap();
        b.truncate(n);
        b
    }

    fn sent(bytes: Vec<u8>, psn: PsnBase) -> Sent {
        Sent {
            session: 0,
            step: 0,
            arm: "region".into(),
            qpn: QpnChoice::Peer,
            icrc: IcrcChoice::Right,
            psn,
            region: None,
            expect: None,
            bytes,
            time: Duration::ZERO,
        }
    }

    #[test]
    fn keyed_requests_and_what_shows_they_ran() {
        let p = Psn::new(100);
        let k = keyed(&emit(Opcode::RC_RDMA_READ_REQUEST, p, 0x1234, 64)).unwrap();
        assert_eq!((k.op, k.rkey, k.len), (KeyedOp::Read, 0x1234, 64));
        // Zero-length: no key is checked. A SEND: no key at all.
        assert!(keyed(&emit(Opcode::RC_RDMA_READ_REQUEST, p, 1, 0)).is_none());
        assert!(keyed(&emit(Opcode::RC_SEND_ONLY, p, 1, 0)).is_none());
        let w = keyed(&emit(Opcode::RC_RDMA_WRITE_ONLY, p, 7, 8)).unwrap();
        assert_eq!(w.op, KeyedOp::Write);
        let a = keyed(&emit(Opcode::RC_COMPARE_SWAP, p, 7, 0)).unwrap();
        assert_eq!((a.op, a.len), (KeyedOp::Atomic, 8));

        // READ data at the READ's PSN; not at another, not a NAK.
        assert!(executed(&k, p, 1, &[(Kind::ReadData, p)]).is_some());
        assert!(executed(&k, p, 1, &[(Kind::ReadData, p.sub(1))]).is_none());
        assert!(executed(&k, p, 1, &[(Kind::NakAccess, p)]).is_none());
        assert!(executed(&k, p, 1, &[(Kind::Ack, p)]).is_none());
        // A WRITE: an ACK of it or of a later packet of its step.
        assert!(executed(&w, p, 3, &[(Kind::Ack, p.add(2))]).is_some());
        assert!(executed(&w, p, 3, &[(Kind::Ack, p.add(3))]).is_none());
        assert!(executed(&w, p, 1, &[(Kind::Ack, p.sub(1))]).is_none());
        assert!(executed(&a, p, 1, &[(Kind::AtomicAck, p)]).is_some());
        assert!(executed(&a, p, 1, &[(Kind::Ack, p)]).is_none());
    }

    /// Only a request the peer must see as new is judged: the first of its
    /// step, at the PSN the peer expects, every earlier packet answered.
    #[test]
    fn only_requests_known_to_be_new_are_judged() {
        let region = Region {
            va: 0x1000,
            rkey: 0x4455,
            len: 4096,
        };
        let mut s = Session::for_test(0, region);
        s.sq_psn = Psn::new(10);
        let mut w = KeyWatch::default();
        w.connection(&s, 0, Peer::PerftestRead { size: 4096 });
        // The granted key: not judged.
        let ok = sent(
            emit(Opcode::RC_RDMA_READ_REQUEST, s.sq_psn, 0x4455, 8),
            PsnBase::Ours,
        );
        w.sent(&s, 0, 0, &ok);
        assert!(w.cur.unwrap().judged.is_none());
        // Its answer moves the expected PSN on: in sync again.
        s.sq_psn = s.sq_psn.next();
        let bad = sent(
            emit(Opcode::RC_RDMA_READ_REQUEST, s.sq_psn, 0x4454, 8),
            PsnBase::Ours,
        );
        w.sent(&s, 0, 1, &bad);
        let j = w.cur.unwrap().judged.unwrap();
        assert_eq!((j.k.rkey, j.granted, j.idx), (0x4454, Some(0x4455), 1));
        // No answer: the peer may or may not have executed it, so the next
        // request at the same PSN may be a duplicate: not judged.
        w.sent(&s, 0, 2, &bad);
        assert!(w.cur.unwrap().judged.is_none());
        // An answer that covers it: in sync again.
        s.sq_psn = s.sq_psn.next();
        let bad = sent(
            emit(Opcode::RC_RDMA_READ_REQUEST, s.sq_psn, 0x4454, 8),
            PsnBase::Ours,
        );
        w.sent(&s, 0, 3, &bad);
        assert!(w.cur.unwrap().judged.is_some());
        // A packet far ahead (never executed) does not spoil the sync.
        s.sq_psn = s.sq_psn.next();
        let far = sent(
            emit(Opcode::RC_SEND_ONLY, s.sq_psn.add(1 << 22), 0, 0),
            PsnBase::Ours,
        );
        w.sent(&s, 0, 4, &far);
        let bad = sent(
            emit(Opcode::RC_RDMA_READ_REQUEST, s.sq_psn, 0x4454, 8),
            PsnBase::Ours,
        );
        w.sent(&s, 0, 5, &bad);
        assert!(w.cur.unwrap().judged.is_some());
        // Not the first packet of its step, or not at the expected PSN.
        s.sq_psn = s.sq_psn.next();
        let send = sent(emit(Opcode::RC_SEND_ONLY, s.sq_psn, 0, 0), PsnBase::Ours);
        w.sent(&s, 0, 6, &send);
        let next = sent(
            emit(Opcode::RC_RDMA_READ_REQUEST, s.sq_psn.next(), 0x4454, 8),
            PsnBase::Ours,
        );
        w.sent(&s, 1, 7, &next);
        assert!(w.cur.unwrap().judged.is_none());
        // A pingpong peer grants no key: any key is judged.
        let mut p = Session::for_test(1, region);
        p.region = None;
        w.connection(&p, 8, Peer::Pingpong);
        let any = sent(
            emit(Opcode::RC_RDMA_WRITE_ONLY, p.sq_psn, 0x4455, 8),
            PsnBase::Ours,
        );
        w.sent(&p, 0, 8, &any);
        assert_eq!(w.cur.unwrap().judged.unwrap().granted, None);
        // An rping server keeps keys of its own: nothing is judged.
        w.connection(&p, 9, Peer::Rping { size: 64 });
        w.sent(&p, 0, 9, &any);
        assert!(w.cur.is_none_or(|c| c.judged.is_none()));
    }
}
