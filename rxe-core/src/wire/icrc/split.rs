//! Unsegmented GSO super-packets, as a raw socket sees them before the UDP
//! layer cuts them up: found by their ICRCs and split into the packets
//! they carry ([`split_super`]), and the headers each segment gets
//! ([`segment_headers`]). Pure functions of the bytes (`rxe_net::udp`
//! calls them).

use super::verdict::IcrcStatus;
use super::{compute_parts, ICRC_LEN};
use crate::wire::BTH_LEN;

/// What a raw-mode datagram that failed its ICRC check turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    /// One packet (with a bad ICRC): handed out as it is, as without GSO.
    One,
    /// Several packets, in the segment list.
    Many,
    /// Longer than any packet, and no segment size explains it: dropped.
    Malformed,
}

/// Writes the IPv4 and UDP headers of segment `k` (`n` bytes of UDP
/// payload) of a super-packet whose headers are `head` into `out`: the
/// lengths of one segment, identification + k, a fresh header checksum
/// and UDP checksum 0 (none), as the kernel's segmentation would have
/// written them but for the UDP checksum.
#[inline]
pub fn segment_headers(head: &[u8], k: usize, n: usize, out: &mut [u8]) {
    let ihl = head.len() - 8;
    out.copy_from_slice(head);
    out[2..4].copy_from_slice(&((ihl + 8 + n) as u16).to_be_bytes());
    let id = u16::from_be_bytes([head[4], head[5]]).wrapping_add(k as u16);
    out[4..6].copy_from_slice(&id.to_be_bytes());
    out[10..12].fill(0);
    let sum = out[..ihl]
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum::<u32>();
    let sum = (sum & 0xffff) + (sum >> 16);
    let sum = (sum & 0xffff) + (sum >> 16);
    out[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    out[ihl + 4..ihl + 6].copy_from_slice(&((8 + n) as u16).to_be_bytes());
    out[ihl + 6..ihl + 8].fill(0);
}

/// The most ICRCs [`split_super`] computes to find a segment size.
const SPLIT_TRIES: usize = 8;

/// Splits an IPv4 packet that may be a loopback GSO sender's unsegmented
/// super-packet (a raw socket sees it before the UDP layer cuts it up)
/// into the packets it carries: `segs` gets (offset in the UDP payload,
/// length, ICRC verdict) of each. `max_datagram` is the longest packet
/// the receiver takes: one longer that no segment size explains is
/// [`Split::Malformed`].
///
/// The super-packet's header is the one segment 0 gets (its
/// identification `id`); segment k gets `id + k` and its own lengths. The
/// segment size is not written anywhere, so candidates are tried: first
/// the sizes of full packets at RoCE's MTUs (the middle packets of a
/// message), then every size from the smallest that fits the segment
/// limit upwards. A candidate must put something that looks like a BTH
/// (transport version 0, the first packet's P_Key, reserved bits clear) at
/// every segment start, and then the first segment's ICRC must be right
/// for `id`: a wrong size passes that with odds of 2^-32. At most 8
/// ICRCs are computed (`SPLIT_TRIES`). A candidate whose every segment
/// verifies wins; failing that the first whose first segment does (its
/// other segments are then handed out as Bad).
pub fn split_super(
    ip: &[u8],
    payload: &[u8],
    max_datagram: usize,
    segs: &mut Vec<(usize, usize, IcrcStatus)>,
) -> Split {
    segs.clear();
    let min = BTH_LEN + ICRC_LEN;
    let ihl = usize::from(ip.first().map_or(0, |b| b & 0x0f)) * 4;
    let total = payload.len();
    if ihl < 20 || ip.len() < ihl + 8 || total < 2 * min {
        return Split::One;
    }
    let hdr = &ip[..ihl];
    let udp = &ip[ihl..ihl + 8];
    let id = u16::from_be_bytes([hdr[4], hdr[5]]);
    let pkey = [payload[2], payload[3]];
    let bth_like =
        |b: &[u8]| b.len() >= min && b[1] & 0x0f == 0 && b[2..4] == pkey && b[8] & 0x7f == 0;
    // Segment k (offset off, length n) with ID id + k.
    let seg_ok = |off: usize, n: usize, k: usize| {
        let mut h = [0u8; 60];
        let h = &mut h[..ihl];
        h.copy_from_slice(hdr);
        h[2..4].copy_from_slice(&((ihl + 8 + n) as u16).to_be_bytes());
        h[4..6].copy_from_slice(&id.wrapping_add(k as u16).to_be_bytes());
        let mut u = [0u8; 8];
        u.copy_from_slice(udp);
        u[4..6].copy_from_slice(&((8 + n) as u16).to_be_bytes());
        let seg = &payload[off..off + n];
        let (body, tail) = seg.split_at(n - ICRC_LEN);
        let carried = u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]);
        compute_parts(h, &u, body).is_ok_and(|c| c == carried)
    };
    let lo = min.max(total.div_ceil(128));
    let hi = (total - 1).min(max_datagram);
    let plausible = |s: usize| {
        if s < lo || s > hi {
            return false;
        }
        let n = total.div_ceil(s);
        let last = total - (n - 1) * s;
        last >= min && (1..n).all(|j| bth_like(&payload[j * s..]))
    };
    let guesses = [12usize, 16, 28, 32]
        .into_iter()
        .flat_map(|h| [256usize, 512, 1024, 2048, 4096].map(|m| h + m + ICRC_LEN));
    let mut tries = 0;
    let mut first_fit = None;
    // Whether every segment of `first_fit` was found right in the search:
    // then the verdicts below need no second pass over the ICRCs (which
    // was a third of a 64-byte SEND's receive cost).
    let mut all_ok = false;
    let mut seen = [0usize; 20];
    for (gi, s) in guesses.chain(lo..=hi).enumerate() {
        if gi >= seen.len() && seen.contains(&s) {
            continue; // a guess already tried
        }
        if gi < seen.len() {
            seen[gi] = s;
        }
        if !plausible(s) {
            continue;
        }
        tries += 1;
        if tries > SPLIT_TRIES {
            break;
        }
        if !seg_ok(0, s, 0) {
            continue;
        }
        let n = total.div_ceil(s);
        let all = (1..n).all(|k| seg_ok(k * s, s.min(total - k * s), k));
        if all {
            first_fit = Some(s);
            all_ok = true;
            break;
        }
        first_fit.get_or_insert(s);
    }
    let Some(s) = first_fit else {
        return if ihl + 8 + total > max_datagram {
            Split::Malformed
        } else {
            Split::One
        };
    };
    let mut off = 0;
    let mut k = 0;
    while off < total {
        let n = s.min(total - off);
        let ok = k == 0 || all_ok || seg_ok(off, n, k);
        let v = if ok { IcrcStatus::Ok } else { IcrcStatus::Bad };
        segs.push((off, n, v));
        off += n;
        k += 1;
    }
    Split::Many
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A transport packet of `n` bytes: a BTH-like start (transport
    /// version 0, P_Key 0xffff, reserved bits clear), a body, and room
    /// for the ICRC.
    fn transport(n: usize, seed: u8) -> Vec<u8> {
        let mut t: Vec<u8> = (0..n).map(|i| seed.wrapping_add(i as u8)).collect();
        t[..12].copy_from_slice(&[0x0a, 0, 0xff, 0xff, 0, 0, 0, 9, 0, 0, 0, seed]);
        t
    }

    /// The super-packet a GSO sender's raw socket shows for `segs`, and
    /// each segment with the ICRC its own headers (ID id + k) give it.
    fn super_packet(segs: &[Vec<u8>], id: u16) -> (Vec<u8>, Vec<u8>) {
        let total: usize = segs.iter().map(Vec::len).sum();
        let mut head = [0u8; 28];
        head[0] = 0x45;
        head[2..4].copy_from_slice(&((28 + total) as u16).to_be_bytes());
        head[4..6].copy_from_slice(&id.to_be_bytes());
        head[6] = 0x40;
        head[8] = 64;
        head[9] = 17;
        head[12..16].copy_from_slice(&[10, 0, 0, 1]);
        head[16..20].copy_from_slice(&[10, 0, 0, 2]);
        head[20..22].copy_from_slice(&0xc000u16.to_be_bytes());
        head[22..24].copy_from_slice(&4791u16.to_be_bytes());
        let mut payload = Vec::new();
        for (k, s) in segs.iter().enumerate() {
            let mut h = [0u8; 28];
            segment_headers(&head, k, s.len(), &mut h);
            let body = &s[..s.len() - ICRC_LEN];
            let c = compute_parts(&h[..20], &h[20..], body).unwrap();
            payload.extend_from_slice(body);
            payload.extend_from_slice(&c.to_le_bytes());
        }
        (head.to_vec(), payload)
    }

    /// A super-packet of three full segments and a short last one splits
    /// at the right size with every ICRC right; one damaged segment is
    /// handed out as Bad and the others as Ok; a single packet is One.
    #[test]
    fn a_super_packet_splits_into_its_segments() {
        let segs: Vec<Vec<u8>> = [1056, 1056, 1056, 300]
            .iter()
            .enumerate()
            .map(|(k, &n)| transport(n, k as u8))
            .collect();
        let (ip, payload) = super_packet(&segs, 0x1234);
        let mut out = Vec::new();
        assert_eq!(split_super(&ip, &payload, 9216, &mut out), Split::Many);
        let want: Vec<_> = [(0, 1056), (1056, 1056), (2112, 1056), (3168, 300)]
            .iter()
            .map(|&(o, n)| (o, n, IcrcStatus::Ok))
            .collect();
        assert_eq!(out, want);

        let mut damaged = payload.clone();
        damaged[1056 + 40] ^= 1;
        assert_eq!(split_super(&ip, &damaged, 9216, &mut out), Split::Many);
        let verdicts: Vec<_> = out.iter().map(|s| s.2).collect();
        assert_eq!(
            verdicts,
            [
                IcrcStatus::Ok,
                IcrcStatus::Bad,
                IcrcStatus::Ok,
                IcrcStatus::Ok
            ]
        );

        let (ip1, one) = super_packet(&segs[..1], 7);
        assert_eq!(split_super(&ip1, &one, 9216, &mut out), Split::One);
        // Longer than any packet and no size explains it: malformed.
        let junk = vec![0u8; 10_000];
        assert_eq!(split_super(&ip, &junk, 9216, &mut out), Split::Malformed);
    }
}
