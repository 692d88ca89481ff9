//! A perftest `ib_read_bw` server run with `-R`, connected the way its
//! client connects: through rdma_cm, twice.
//!
//! What perftest does with `-R` (seen on the wire between two perftests
//! over the drop-in): a first rdma_cm connection is its *communication*
//! channel, over which the out-of-band exchange that otherwise goes over
//! TCP goes as SENDs, each side one SEND of the same size per message, the
//! client first: the version string (16 bytes, `6.06`), the cycle buffer
//! (4, big-endian), the cache line (4), the MTU (2, its enum as a digit
//! and a NUL) and a 56-byte `pingpong_dest`; then a second rdma_cm
//! connection, the test QP; then on the first, one 56-byte message and
//! the handshakes of the RDMA bandwidth tests (three `pingpong_dest`s,
//! big-endian: LID, outstanding reads, QPN, PSN, R_Key, 4 bytes, VA, GID,
//! SRQN, GID index), the server's naming the buffer the client READs.
//! That buffer, registered for remote READ only, is the canary, as with
//! the TCP exchange ([`super::canary`]).
//!
//! The fuzzer keeps the communication connection ([`Link::comm`]) while
//! it fuzzes the test QP, and ends both with DREQs (the server's run ends
//! on its DISCONNECTED events).

use super::bth::bth_repr;
use super::config::{Res, Target};
use super::session::{Link, Region, Session};
use rxe_core::psn::Psn;
use rxe_core::wire::{Opcode, PacketRepr};
use std::time::{Duration, Instant};

/// perftest's version string as its client sends it.
const VERSION: &[u8] = b"6.06";
/// `struct pingpong_dest` on the communication channel.
const DEST_LEN: usize = 56;

/// Our `pingpong_dest`: QPN, PSN and GID; no buffer of ours is offered.
fn dest(qpn: u32, psn: Psn, gid: [u8; 16]) -> [u8; DEST_LEN] {
    let mut b = [0u8; DEST_LEN];
    b[4..8].copy_from_slice(&128u32.to_be_bytes());
    b[8..12].copy_from_slice(&qpn.to_be_bytes());
    b[12..16].copy_from_slice(&psn.value().to_be_bytes());
    b[32..48].copy_from_slice(&gid);
    b
}

/// The buffer a server's `pingpong_dest` names: VA and R_Key.
fn dest_region(b: &[u8]) -> Option<(u64, u32)> {
    if b.len() < DEST_LEN {
        return None;
    }
    let rkey = u32::from_be_bytes(b[16..20].try_into().ok()?);
    let va = u64::from_be_bytes(b[24..32].try_into().ok()?);
    Some((va, rkey))
}

impl Link {
    /// Connects to an `ib_read_bw -R` server: the communication
    /// connection, the exchange, the test connection, the handshakes.
    /// Returns the test connection's session (its region: the server's
    /// buffer, `size` bytes of it).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn perftest_cm_connect(
        &mut self,
        target: &Target,
        size: u32,
        mtu: usize,
        index: u32,
        base_psn: Psn,
        our_qpn: u32,
        deadline: Instant,
    ) -> Res<Session> {
        // The communication channel: a QP number and PSN of its own.
        let comm_qpn = our_qpn ^ 0x8000;
        let comm_psn = base_psn.add(0x40_0000);
        let c = self.cm_connect(target, comm_qpn, comm_psn, mtu, deadline)?;
        self.set_peer(c.peer);
        let mut comm = Session::new(index, comm_qpn, c.peer_qpn, c.sq_psn, comm_psn, c.mtu);
        let gid = match self.local() {
            std::net::IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
            std::net::IpAddr::V6(a) => a.octets(),
        };
        let mut version = [0u8; 16];
        version[..VERSION.len()].copy_from_slice(VERSION);
        self.comm_xchg(&mut comm, &version, deadline)?;
        self.comm_xchg(&mut comm, &4096u32.to_be_bytes(), deadline)?;
        self.comm_xchg(&mut comm, &64u32.to_be_bytes(), deadline)?;
        let mtu_enum = rxe_core::types::Mtu::from_bytes(mtu).map_or(3, |m| m as u8);
        let theirs = self.comm_xchg(&mut comm, &[b'0' + mtu_enum, 0], deadline)?;
        let mtu = theirs
            .first()
            .filter(|d| d.is_ascii_digit())
            .and_then(|d| rxe_core::types::Mtu::from_bytes(128usize << (d - b'0').min(5)))
            .map_or(mtu, |m| m.bytes().min(mtu));
        self.comm_xchg(&mut comm, &[0u8; DEST_LEN], deadline)?;
        // The test QP.
        let t = self.cm_connect(target, our_qpn, base_psn, mtu, deadline)?;
        self.comm_xchg(&mut comm, &[0u8; DEST_LEN], deadline)?;
        let mine = dest(our_qpn, base_psn, gid);
        let mut region = None;
        for _ in 0..3 {
            let theirs = self.comm_xchg(&mut comm, &mine, deadline)?;
            region = dest_region(&theirs).or(region);
        }
        let (va, rkey) = region.ok_or("the server's handshake named no buffer")?;
        self.comm = Some(comm);
        let mut s = Session::new(
            index,
            our_qpn,
            t.peer_qpn,
            t.sq_psn,
            base_psn,
            t.mtu.min(mtu),
        );
        s.region = Some(Region {
            va,
            rkey,
            len: size,
        });
        Ok(s)
    }

    /// Ends the test as perftest's client does, on the communication
    /// connection: a handshake, the reports (five 8-byte messages: size,
    /// iterations and three figures, here zeros), a last handshake; the
    /// server then ends its run (and sends the DREQs). Within `wait`; a
    /// server that is gone is no error.
    pub(crate) fn finish_perftest_cm(&mut self, wait: Duration) {
        let Some(mut comm) = self.comm.take() else {
            return;
        };
        let deadline = Instant::now() + wait;
        let mine = dest(comm.our_qpn, comm.peer_epsn, [0; 16]);
        let _ = (|| -> Res<()> {
            self.comm_xchg(&mut comm, &mine, deadline)?;
            for _ in 0..5 {
                self.comm_xchg(&mut comm, &[0u8; 8], deadline)?;
            }
            self.comm_xchg(&mut comm, &mine, deadline)?;
            Ok(())
        })();
    }

    /// One message of perftest's exchange on the communication
    /// connection: our SEND of `msg`, then the server's SEND of the same
    /// size. Returns what the server sent.
    fn comm_xchg(&mut self, comm: &mut Session, msg: &[u8], deadline: Instant) -> Res<Vec<u8>> {
        let got = comm.peer_messages;
        let mut acked = false;
        while Instant::now() < deadline {
            // (Again after an RNR NAK: its receive was not posted yet.)
            let psn = comm.sq_psn;
            let mut r = PacketRepr::new(bth_repr(Opcode::RC_SEND_ONLY, comm.peer_qpn, psn, true));
            r.payload = msg;
            let mut b = vec![0u8; r.buffer_len()];
            let n = r.emit(&mut b).map_err(|e| e.to_string())?;
            b.truncate(n);
            if let Some(c) = self.icrc(&b) {
                b[n - 4..].copy_from_slice(&c.to_le_bytes());
            }
            self.send(b)?;
            let end = (Instant::now() + Duration::from_millis(300)).min(deadline);
            while Instant::now() < end {
                let left = end - Instant::now();
                let a = self.collect_quiet(comm, left);
                acked |= comm.sq_psn != psn;
                if comm.peer_messages > got && acked {
                    return Ok(comm.last_recv.take().unwrap_or_default());
                }
                if a.sig.fatal() {
                    return Err("the server refused a message of the exchange".into());
                }
                if a.sig.has(super::session::Kind::RnrNak) {
                    std::thread::sleep(Duration::from_millis(5));
                    break;
                }
            }
            if acked {
                continue;
            }
        }
        Err("the server did not answer perftest's exchange over rdma_cm".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dests_as_perftest_sends_them() {
        // The server's handshake of a capture of ib_read_bw -R over the
        // drop-in.
        let theirs = hex(
            "0000000000000080009d2eb200603cee84cf4ff7000000000000558c24c53000\
             00000000000000000000ffff7f0005dc0000000000000000",
        );
        assert_eq!(dest_region(&theirs), Some((0x558c_24c5_3000, 0x84cf_4ff7)));
        assert_eq!(dest_region(&theirs[..55]), None);
        let gid = std::net::Ipv4Addr::new(127, 0, 5, 221)
            .to_ipv6_mapped()
            .octets();
        let mine = dest(0x26c730, Psn::new(0xab8558), gid);
        let client = hex(
            "00000000000000800026c73000ab8558000000000000000000000000000000\
             0000000000000000000000ffff7f0005dd0000000000000000",
        );
        assert_eq!(&mine[..], &client[..]);
    }

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }
}
