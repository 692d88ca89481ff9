//! Capturing what a device sends and receives to a pcap file, for
//! `rxe dump`, tshark or Wireshark.
//!
//! Set `RXE_PCAP=/path/file.pcap` (a `{addr}` in the path becomes the
//! device's address, so two processes can share the setting) or call
//! [`crate::Device::with_capture`]. Frames are written as raw IP packets.
//! A sent packet is written once the kernel took it, with the IP header
//! the kernel gives it (don't fragment; IPv4 identification 0, or k for
//! segment k of a GSO send, `RXE_GSO=1`, whose ICRC the transport adjusts
//! for that ID: the capture shows both as they went out, so every ICRC of
//! a sent packet checks) and UDP checksum 0 (the kernel fills in a real
//! one; the ICRC masks it). A received packet is written exactly
//! as it arrived when the device receives through a raw socket (root);
//! otherwise its IP header is rebuilt the same way as for a sent one (with,
//! for a packet the transport verified, the ID of a GSO segment k if that
//! is what its ICRC is right for), so packets from senders with other
//! nonzero IP IDs (the kernel's rxe) show `ICRC BAD` in such a capture
//! although they were fine.

use parking_lot::Mutex;
use rxe_core::engine::IcrcStatus;
use rxe_core::engine::{RecvMeta, Transmit};
use rxe_core::wire::icrc;
use rxe_core::wire::{FrameRepr, IpRepr, LinkType, UdpChecksum};
use rxe_net::capture::CaptureWriter;
use rxe_net::udp::{SentAs, GSO_MAX_SEGMENTS};
use std::fs::File;
use std::net::IpAddr;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A pcap file being written.
pub(crate) struct Capture {
    writer: Mutex<CaptureWriter<File>>,
}

impl Capture {
    pub fn create(path: &Path) -> std::io::Result<Capture> {
        let f = File::create(path)?;
        let writer = CaptureWriter::new(f, LinkType::RawIp).map_err(std::io::Error::other)?;
        Ok(Capture {
            writer: Mutex::new(writer),
        })
    }

    fn write(&self, ip_packet: &[u8]) {
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        // A capture that cannot be written is not worth failing traffic for.
        let _ = self.writer.lock().write(ts, ip_packet);
    }

    /// Writes a packet the kernel took, as it went out (`how`: its IPv4
    /// identification and ICRC, from the transport).
    pub fn sent(&self, t: &Transmit, how: SentAs) {
        let mut p = ip_packet_with_id(
            t.src,
            t.dst,
            t.src_port,
            t.traffic_class,
            t.hop_limit,
            how.ip_id,
            &t.payload,
        );
        if t.payload.len() >= how.icrc.len() && !p.is_empty() {
            let at = p.len() - how.icrc.len();
            p[at..].copy_from_slice(&how.icrc);
        }
        self.write(&p);
    }

    /// Writes a received packet: `ip` if the transport saw the real header.
    pub fn received(&self, meta: &RecvMeta, payload: &[u8], ip: Option<&[u8]>) {
        match ip {
            Some(ip) => self.write(ip),
            None => {
                let mut p = ip_packet(meta.src, meta.dst, meta.src_port, 0, 64, payload);
                if meta.icrc == IcrcStatus::Ok {
                    gso_segment_id(&mut p);
                }
                self.write(&p)
            }
        }
    }
}

/// A packet the transport verified (Ok) without its IP header may be
/// segment k of a GSO send or a GRO datagram, which the transport checks
/// for ID k too: if its ICRC is wrong for ID 0, writes the first ID below
/// [`GSO_MAX_SEGMENTS`] it is right for into the IPv4 header (and fixes
/// the header checksum); else leaves it. Captures only: up to 63 ICRCs.
fn gso_segment_id(p: &mut [u8]) {
    if p.len() < 20 || p[0] != 0x45 || !matches!(icrc::verify(p), Ok(false)) {
        return;
    }
    let set = |p: &mut [u8], id: u16| {
        p[4..6].copy_from_slice(&id.to_be_bytes());
        p[10..12].fill(0);
        let sum = p[..20]
            .chunks(2)
            .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
            .sum::<u32>();
        let sum = (sum & 0xffff) + (sum >> 16);
        let sum = (sum & 0xffff) + (sum >> 16);
        p[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    };
    for id in 1..GSO_MAX_SEGMENTS as u16 {
        set(p, id);
        if matches!(icrc::verify(p), Ok(true)) {
            return;
        }
    }
    set(p, 0);
}

/// The IP and UDP headers a Linux UDP socket writes for an unconnected
/// socket with path MTU discovery on, around a RoCE v2 payload.
fn ip_packet(src: IpAddr, dst: IpAddr, sport: u16, tc: u8, hop: u8, payload: &[u8]) -> Vec<u8> {
    ip_packet_with_id(src, dst, sport, tc, hop, 0, payload)
}

/// [`ip_packet`] with IPv4 identification `id` (ignored for IPv6).
fn ip_packet_with_id(
    src: IpAddr,
    dst: IpAddr,
    sport: u16,
    tc: u8,
    hop: u8,
    id: u16,
    payload: &[u8],
) -> Vec<u8> {
    let ip = match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => IpRepr::V4 {
            src: s,
            dst: d,
            tos: tc,
            id,
            dont_fragment: true,
            ttl: hop,
        },
        (IpAddr::V6(s), IpAddr::V6(d)) => IpRepr::V6 {
            src: s,
            dst: d,
            traffic_class: tc,
            flow_label: 0,
            hop_limit: hop,
        },
        _ => return Vec::new(),
    };
    FrameRepr {
        eth: None,
        ip,
        udp_src_port: sport,
        udp_checksum: UdpChecksum::Zero,
    }
    .wrap_vec(payload)
    .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use crate::context::CtxImp;
    use crate::*;
    use rxe_core::engine::{IcrcStatus, RecvMeta};
    use rxe_core::wire::icrc;
    use rxe_net::capture::CaptureReader;
    use std::net::{IpAddr, Ipv4Addr};
    use std::time::Duration;

    /// A received packet handed out without its IP header (plain mode)
    /// that the transport verified for a GSO segment's ID k is written
    /// with ID k, so that its ICRC checks; one with a bad ICRC is written
    /// with ID 0, as before.
    #[test]
    fn plain_mode_segment_k_is_written_with_id_k() {
        let dir = std::env::temp_dir().join(format!("rxe-gro-capture-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("b.pcap");
        let (src, dst) = (
            IpAddr::V4(Ipv4Addr::new(127, 0, 93, 3)),
            IpAddr::V4(Ipv4Addr::new(127, 0, 93, 4)),
        );
        let mut body = vec![0x04, 0, 0xff, 0xff, 0, 0, 0, 1, 0, 0, 0, 1];
        body.extend((0..36).map(|i| i as u8));
        let mut p = super::ip_packet_with_id(src, dst, 4791, 0, 64, 5, &body);
        icrc::fill(&mut p).unwrap();
        let payload = p[28..].to_vec();
        let meta = |icrc| RecvMeta {
            src,
            dst,
            src_port: 4791,
            icrc,
        };
        {
            let c = super::Capture::create(&file).unwrap();
            c.received(&meta(IcrcStatus::Ok), &payload, None);
            c.received(&meta(IcrcStatus::Bad), &payload, None);
        }
        let mut r = CaptureReader::open(&file).unwrap();
        let ok = r.next_record().unwrap().unwrap().data;
        assert_eq!(ok, p, "ID 5, header checksum and all");
        assert!(icrc::verify(&ok).unwrap());
        let bad = r.next_record().unwrap().unwrap().data;
        assert_eq!(bad[4..6], [0, 0]);
        assert!(!icrc::verify(&bad).unwrap());
        assert!(r.next_record().is_none());
        std::fs::remove_dir_all(&dir).ok();
    }

    /// A device that sends with GSO (`RXE_GSO=1`, set here on its
    /// transport) writes a 64 KiB RDMA WRITE at MTU 1024 to a device that
    /// did not turn GSO on: the bytes arrive, and the sender's capture
    /// shows each segment as it went out, IPv4 ID k with the ICRC adjusted
    /// for it, so that every ICRC in the file checks; so does the
    /// receiver's capture.
    // 127.0.93.1-2
    #[test]
    fn gso_capture_shows_each_segment_as_sent_every_icrc_good() {
        let dir = std::env::temp_dir().join(format!("rxe-gso-capture-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("a.pcap");
        let bfile = dir.join("b.pcap");
        let (a4, b4) = (
            IpAddr::V4(Ipv4Addr::new(127, 0, 93, 1)),
            IpAddr::V4(Ipv4Addr::new(127, 0, 93, 2)),
        );
        let all = Access::LOCAL_WRITE
            .union(Access::REMOTE_WRITE)
            .union(Access::REMOTE_READ);
        let len = 64 << 10;
        let data: Vec<u8> = (0..len).map(|i| (i * 7 + i / 251) as u8).collect();
        {
            let actx = Device::soft(a4).with_capture(&file).open().unwrap();
            let bctx = Device::soft(b4).with_capture(&bfile).open().unwrap();
            let CtxImp::Soft(inner) = &actx.imp else {
                unreachable!("a soft device")
            };
            inner.shared.link.lock().set_gso(true).unwrap();
            let (apd, bpd) = (actx.alloc_pd().unwrap(), bctx.alloc_pd().unwrap());
            let (acq, bcq) = (
                actx.create_cq(16, None).unwrap(),
                bctx.create_cq(16, None).unwrap(),
            );
            let (amr, bmr) = (
                apd.alloc_mr(len, all).unwrap(),
                bpd.alloc_mr(len, all).unwrap(),
            );
            let aqp = actx
                .create_qp(&apd, &QpInitAttr::new(QpType::Rc, &acq, &acq))
                .unwrap();
            let bqp = bctx
                .create_qp(&bpd, &QpInitAttr::new(QpType::Rc, &bcq, &bcq))
                .unwrap();
            let o = ConnectOptions {
                mtu: Mtu::Mtu1024,
                ..ConnectOptions::default()
            };
            aqp.connect(&bqp.endpoint(), &o).unwrap();
            bqp.connect(&aqp.endpoint(), &o).unwrap();
            amr.write(0, &data).unwrap();
            aqp.post_send(&[SendWr::write(1, &[amr.sge(0..len)], bmr.remote())])
                .unwrap();
            let wc = acq.wait(1, Duration::from_secs(30)).unwrap().remove(0);
            assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
            assert_eq!(bmr.with_bytes(|b| b.to_vec()), data);
            let s = *inner.shared.link.lock().stats();
            assert!(s.tx_gso_sends > 0, "{s:?}");
            drop((aqp, bqp, amr, bmr, acq, bcq, apd, bpd));
        }
        let mut r = CaptureReader::open(&file).unwrap();
        let (mut sent, mut nonzero_ids) = (0, 0);
        while let Some(rec) = r.next_record() {
            let rec = rec.unwrap();
            let ip = &rec.data[..];
            assert!(
                icrc::verify(ip).unwrap(),
                "frame {}: ICRC as on the wire",
                rec.number
            );
            if ip[12..16] == [127, 0, 93, 1] {
                sent += 1;
                nonzero_ids += usize::from(ip[4..6] != [0, 0]);
            }
        }
        assert!(sent >= 64, "{sent} packets sent");
        assert!(nonzero_ids > 0, "GSO segments k > 0 carry ID k");
        // The receiver's capture too: raw mode writes each segment's own
        // header, plain mode (RXE_RECV_MODE=plain) the ID it verified.
        let mut r = CaptureReader::open(&bfile).unwrap();
        let mut got = 0;
        while let Some(rec) = r.next_record() {
            let rec = rec.unwrap();
            assert!(icrc::verify(&rec.data).unwrap(), "B frame {}", rec.number);
            got += usize::from(rec.data[12..16] == [127, 0, 93, 1]);
        }
        assert!(got >= 64, "{got} packets received");
        std::fs::remove_dir_all(&dir).ok();
    }
}
