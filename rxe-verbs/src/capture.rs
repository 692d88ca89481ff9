//! Capturing what a device sends and receives to a pcap file, for
//! `rxe dump`, tshark or Wireshark.
//!
//! Set `RXE_PCAP=/path/file.pcap` (a `{addr}` in the path becomes the
//! device's address, so two processes can share the setting) or call
//! [`crate::Device::with_capture`]. Frames are written as raw IP packets.
//! A sent packet is written with the IP header the kernel gives it (IPv4
//! identification 0, don't fragment) and UDP checksum 0 (the kernel fills
//! in a real one; the ICRC masks it). A received packet is written exactly
//! as it arrived when the device receives through a raw socket (root);
//! otherwise its IP header is rebuilt the same way as for a sent one, so
//! packets from senders with nonzero IP IDs (the kernel's rxe) show
//! `ICRC BAD` in such a capture although they were fine.

use parking_lot::Mutex;
use rxe_core::engine::{RecvMeta, Transmit};
use rxe_core::wire::{IpRepr, LinkType};
use rxe_net::capture::CaptureWriter;
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

    /// Writes a packet about to be sent.
    pub fn sent(&self, t: &Transmit) {
        self.write(&ip_packet(
            t.src,
            t.dst,
            t.src_port,
            t.traffic_class,
            t.hop_limit,
            &t.payload,
        ));
    }

    /// Writes a received packet: `ip` if the transport saw the real header.
    pub fn received(&self, meta: &RecvMeta, payload: &[u8], ip: Option<&[u8]>) {
        match ip {
            Some(ip) => self.write(ip),
            None => self.write(&ip_packet(
                meta.src,
                meta.dst,
                meta.src_port,
                0,
                64,
                payload,
            )),
        }
    }
}

/// The IP and UDP headers a Linux UDP socket writes for an unconnected
/// socket with path MTU discovery on, around a RoCE v2 payload.
fn ip_packet(src: IpAddr, dst: IpAddr, sport: u16, tc: u8, hop: u8, payload: &[u8]) -> Vec<u8> {
    let ip = match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => IpRepr::V4 {
            src: s,
            dst: d,
            tos: tc,
            id: 0,
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
    let hlen = ip.header_len();
    let udp_len = 8 + payload.len();
    let mut buf = vec![0u8; hlen + udp_len];
    if ip.emit(&mut buf, udp_len).is_err() {
        return Vec::new();
    }
    buf[hlen..hlen + 2].copy_from_slice(&sport.to_be_bytes());
    buf[hlen + 2..hlen + 4].copy_from_slice(&rxe_core::wire::ROCE_V2_PORT.to_be_bytes());
    buf[hlen + 4..hlen + 6].copy_from_slice(&(udp_len as u16).to_be_bytes());
    buf[hlen + 8..].copy_from_slice(payload);
    buf
}
