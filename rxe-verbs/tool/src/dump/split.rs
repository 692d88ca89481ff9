//! GSO super-packets in a capture: a capture on `lo` or a veth of a stack
//! that sends with UDP GSO (older rxe-rs builds among them) holds each
//! burst as one IPv4 packet carrying several RoCE packets, with the ICRCs
//! each got for its own segment (IPv4 identification + k). Such a frame
//! fails its ICRC check as a whole; [`expand`] finds the segments with
//! [`split_super`] (the same search the transport's raw receive uses) and
//! gives one frame per packet, with the headers the kernel's segmentation
//! would have given it, so that every later step (text, JSON, `--explain`,
//! `--ladder`) sees the packets a receiver sees.

use rxe_core::wire::icrc::{segment_headers, split_super, Split};
use rxe_core::wire::{IpRepr, RoceFrame};
use rxe_net::capture::Record;

/// Which packet of a split super-packet a frame is: `index` of `count`,
/// from 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    pub index: usize,
    pub count: usize,
}

/// The frames `rec` stands for: itself, or, for an IPv4 RoCE frame whose
/// ICRC fails and that splits into several packets, one frame per packet
/// (the frame number of the super-packet kept).
pub fn expand(rec: Record) -> Vec<(Record, Option<Segment>)> {
    match segments(&rec) {
        Some(frames) => {
            let count = frames.len();
            frames
                .into_iter()
                .enumerate()
                .map(|(i, data)| {
                    let r = Record {
                        orig_len: data.len() as u32,
                        data,
                        ..rec.clone()
                    };
                    (
                        r,
                        Some(Segment {
                            index: i + 1,
                            count,
                        }),
                    )
                })
                .collect()
        }
        None => vec![(rec, None)],
    }
}

/// The segments' frames, if `rec` is a super-packet.
fn segments(rec: &Record) -> Option<Vec<Vec<u8>>> {
    let roce = RoceFrame::parse(rec.link_type, &rec.data).ok()?;
    if !matches!(roce.ip, IpRepr::V4 { .. }) || roce.icrc_ok() {
        return None;
    }
    let ip = roce.ip_packet;
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    // Any length is a packet to a capture reader: no limit.
    let mut segs = Vec::new();
    if split_super(ip, roce.transport, usize::MAX, &mut segs) != Split::Many {
        return None;
    }
    // `ip_packet` lies inside the frame: what comes before it is the link
    // header, which every segment keeps.
    let link = ip.as_ptr() as usize - rec.data.as_ptr() as usize;
    let head = &ip[..ihl + 8];
    Some(
        segs.iter()
            .enumerate()
            .map(|(k, &(off, len, _))| {
                let mut f = Vec::with_capacity(link + head.len() + len);
                f.extend_from_slice(&rec.data[..link]);
                f.resize(link + head.len(), 0);
                segment_headers(head, k, len, &mut f[link..]);
                f.extend_from_slice(&roce.transport[off..off + len]);
                f
            })
            .collect(),
    )
}
