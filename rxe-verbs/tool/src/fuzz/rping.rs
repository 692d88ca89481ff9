//! An rping server as the peer (librdmacm's `rping -s`, or `rxe rping -s`),
//! connected through rdma_cm ([`super::cm`]).
//!
//! rping's exchange, which the fuzzer plays as the client: it SENDs the
//! address, R_Key and size of its *start* buffer (a 16-byte `struct
//! rping_rdma_info`, big-endian), the server RDMA READs the start buffer
//! and SENDs "go ahead"; the client SENDs the info of its *rdma* buffer,
//! the server RDMA WRITEs what it read into it and SENDs again. So the
//! server's own requester works for us: its READ requests are answered by
//! our minimal responder from [`LocalMem`](super::local_mem::LocalMem),
//! its WRITEs land there, its SENDs are ACKed ([`super::session`]).
//!
//! One such round is the liveness check on an rping peer (a valid SEND of
//! anything else would not do: the server's one posted receive is 16
//! bytes, and rping takes a SEND of another length as the end of the
//! connection), and its result feeds the **data** oracle: what the server
//! wrote back must be what it read, byte for byte. That checks the data
//! the peer *receives* (our READ responses) and the data it *sends* (its
//! WRITE), through its legitimate operations.
//!
//! [`Rping`] is that oracle: it checks an rping peer's connections in
//! place of the liveness probe.

use super::bth::bth_repr;
use super::canary::{write_region_finding, RegionFinding};
use super::driver::Driver;
use super::local_mem::{RDMA_KEY, RDMA_VA, START_KEY, START_VA};
use super::mutate::Gen;
use super::oracle::{Check, Finding, Oracle};
use super::record::{IcrcChoice, PsnBase, QpnChoice};
use super::session::{Kind, Session, Signature};
use rxe_core::psn::Psn;
use rxe_core::wire::{Opcode, PacketRepr};
use std::time::{Duration, Instant};

/// `struct rping_rdma_info`: buf (be64), rkey (be32), size (be32).
pub(crate) const INFO_LEN: usize = 16;
/// The arm name of a round's SENDs.
pub(crate) const ARM: &str = "rping";
/// The oracle a wrong round fires.
pub(crate) const DATA: &str = "data";

/// rping's info of one of our buffers.
fn info(va: u64, rkey: u32, len: usize) -> [u8; INFO_LEN] {
    let mut b = [0u8; INFO_LEN];
    b[..8].copy_from_slice(&va.to_be_bytes());
    b[8..12].copy_from_slice(&rkey.to_be_bytes());
    b[12..].copy_from_slice(&(len as u32).to_be_bytes());
    b
}

/// rping's ping text for round `n` (`rdma-ping-N: ` and a rolling run of
/// letters, NUL last), `size` bytes.
pub(crate) fn ping_text(n: u64, size: usize) -> Vec<u8> {
    let mut b = format!("rdma-ping-{n}: ").into_bytes();
    b.truncate(size);
    let mut c = 65 + (n % 58) as u8;
    while b.len() < size {
        b.push(c);
        c = if c >= 122 { 65 } else { c + 1 };
    }
    if let Some(l) = b.last_mut() {
        *l = 0;
    }
    b
}

/// A SEND ONLY of `payload` (one of rping's infos).
fn send_packet(psn: Psn, payload: &[u8]) -> Vec<u8> {
    let mut r = PacketRepr::new(bth_repr(Opcode::RC_SEND_ONLY, 0, psn, true));
    r.payload = payload;
    let mut b = vec![0u8; r.buffer_len()];
    let n = r.emit(&mut b).unwrap_or(0);
    b.truncate(n);
    b
}

/// The data oracle against an rping peer.
#[derive(Debug, Default)]
pub(crate) struct Rping {
    /// Its finding: a round that came back other than it went.
    pub finding: Option<RegionFinding>,
}

impl Rping {
    /// One rping round on a live connection: the start buffer's info, the
    /// server's READ and "go ahead", the rdma buffer's info, the server's
    /// WRITE and SEND; then what it wrote must be what it read. `tries`
    /// SENDs at most for each info (following the PSN an RNR or sequence
    /// NAK names), each waiting `window` for the server's answer.
    fn round(&mut self, d: &mut Driver, s: &mut Session, tries: u32, window: Duration) -> Check {
        let Some(size) = s.local.as_ref().map(|m| m.start.len()) else {
            return Check::Dead;
        };
        let from = d.last_good.min(d.rec.sent.len());
        let text = ping_text(s.rounds, size);
        if let Some(m) = s.local.as_mut() {
            m.start.copy_from_slice(&text);
            m.rdma.fill(0);
        }
        let first = s.peer_messages;
        if !rping_send(
            d,
            s,
            &info(START_VA, START_KEY, size),
            first + 1,
            tries,
            window,
        ) || !rping_send(
            d,
            s,
            &info(RDMA_VA, RDMA_KEY, size),
            first + 2,
            tries,
            window,
        ) {
            return Check::Dead;
        }
        s.rounds += 1;
        let back = s.local.as_ref().map(|m| m.rdma.clone()).unwrap_or_default();
        if back != text {
            let at = back
                .iter()
                .zip(&text)
                .position(|(a, b)| a != b)
                .unwrap_or(0);
            let differ = back.iter().zip(&text).filter(|(a, b)| a != b).count();
            self.finding = Some(RegionFinding {
                oracle: DATA,
                why: format!(
                    "the rping server wrote back other bytes than it read from us: {differ} of {size} differ, the first at offset {at} ({:#04x} -> {:#04x})",
                    text[at], back[at]
                ),
                from,
                to: d.rec.sent.len(),
                session: s.index,
            });
            return Check::Found;
        }
        // (A good round is a good liveness check: the driver notes it.)
        Check::Ok
    }
}

impl Oracle<Driver> for Rping {
    fn checks(&self) -> bool {
        true
    }

    fn check(&mut self, d: &mut Driver, s: &mut Session, tries: u32, window: Duration) -> Check {
        self.round(d, s, tries, window)
    }

    fn fired(&self) -> Option<&'static str> {
        self.finding.as_ref().map(|f| f.oracle)
    }

    /// Prints the data verdict (an rping peer has no region to watch: no
    /// canary) and writes the finding, if any.
    fn verdict(&self, d: &Driver, tag: &str) -> Vec<Finding> {
        match &self.finding {
            Some(f) => write_region_finding(d, f, tag).into_iter().collect(),
            None => {
                println!("oracle {DATA}: ok");
                Vec::new()
            }
        }
    }
}

/// SENDs `payload` until the peer has sent `want` messages of its own
/// (its answer) or `tries` SENDs went without. Counts as one step.
fn rping_send(
    d: &mut Driver,
    s: &mut Session,
    payload: &[u8],
    want: u64,
    tries: u32,
    window: Duration,
) -> bool {
    let before = d.link.unparsable.len();
    let mut sig = Signature::default();
    let mut done = false;
    'tries: for _ in 0..tries.max(1) {
        let g = Gen {
            bytes: send_packet(s.sq_psn, payload),
            qpn: QpnChoice::Peer,
            icrc: IcrcChoice::Right,
            psn: PsnBase::Ours,
            wellformed: true,
            region: None,
        };
        if d.send(s, ARM, &[g]) == 0 {
            break;
        }
        let end = Instant::now() + window;
        loop {
            let now = Instant::now();
            if s.peer_messages >= want {
                done = true;
                break 'tries;
            }
            if now >= end {
                break;
            }
            let a = d.collect(s, end - now);
            sig.0 |= a.sig.0;
            if a.sig.fatal() {
                break 'tries;
            }
            // Refused for now (no receive posted yet, or our PSN was
            // off after fuzzing): SEND again at the PSN it names.
            if (a.sig.has(Kind::RnrNak) || a.sig.has(Kind::NakSeq)) && s.peer_messages < want {
                std::thread::sleep(Duration::from_millis(5));
                continue 'tries;
            }
        }
    }
    d.count_step(before, sig);
    done
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fuzz::local_mem::LocalMem;

    #[test]
    fn local_memory_serves_only_its_buffers() {
        let mut m = LocalMem::new(64);
        m.start.copy_from_slice(&ping_text(3, 64));
        assert_eq!(m.read(START_VA, START_KEY, 64), Some(&m.start[..]));
        assert_eq!(m.read(START_VA + 8, START_KEY, 8), Some(&m.start[8..16]));
        assert_eq!(m.read(START_VA, START_KEY, 65), None);
        assert_eq!(m.read(START_VA - 1, START_KEY, 1), None);
        assert_eq!(m.read(START_VA, START_KEY ^ 1, 1), None);
        assert_eq!(m.read(u64::MAX, START_KEY, 2), None);
        // A WRITE FIRST, MIDDLE, LAST lands in order; one past the end,
        // with another key, or continued without a FIRST does not.
        assert!(m.write(Some((RDMA_VA + 4, RDMA_KEY, 12)), b"abcd", false));
        assert!(m.write(None, b"efgh", false));
        assert!(m.write(None, b"ijkl", true));
        assert_eq!(&m.rdma[4..16], b"abcdefghijkl");
        assert!(!m.write(None, b"x", true));
        assert!(!m.write(Some((RDMA_VA + 60, RDMA_KEY, 8)), b"12345678", true));
        assert!(!m.write(Some((RDMA_VA, START_KEY, 1)), b"1", true));
        assert!(!m.write(Some((START_VA, RDMA_KEY, 1)), b"1", true));
        assert!(!m.write(Some((RDMA_VA, RDMA_KEY, 4)), b"12345678", true));
        assert_eq!(m.written, 12);
    }

    #[test]
    fn ping_text_is_rpings() {
        let t = ping_text(0, 24);
        assert_eq!(&t, b"rdma-ping-0: ABCDEFGHIJ\0");
        assert_eq!(ping_text(1, 16).len(), 16);
        assert_eq!(ping_text(7, 16)[15], 0);
        assert_eq!(
            info(0x1122, 0x33, 64)[..],
            [0, 0, 0, 0, 0, 0, 0x11, 0x22, 0, 0, 0, 0x33, 0, 0, 0, 64]
        );
    }
}
