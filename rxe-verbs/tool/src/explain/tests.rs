//! The explain table against rxe-core's parsers, bit by bit; frame sets;
//! damaged frames.

use super::fields::dissect;
use super::table::{self, raw_bits, Spec};
use super::FrameSet;
use rxe_core::wire::LinkType;
use rxe_net::capture::CaptureReader;
use std::path::PathBuf;

/// Deterministic pseudo-random bytes.
fn noise(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

fn flip(b: &mut [u8], pos: usize) {
    b[pos / 8] ^= 0x80 >> (pos % 8);
}

/// Bit positions (from the start of the header) a spec claims.
fn claimed(s: &Spec) -> std::ops::Range<usize> {
    let first = s.at * 8 + usize::from(s.bit);
    first..first + usize::from(s.width)
}

fn overlap(a: &Spec, b: &Spec) -> bool {
    let (x, y) = (claimed(a), claimed(b));
    x.start < y.end && y.start < x.end
}

/// For each field rxe-core reads: flipping any one of its bits changes
/// rxe-core's value of it and of no other (non-overlapping) field, and
/// rxe-core's value equals the raw bits at the claimed place. With
/// `covers` (`n` bytes), flipping any bit no row with a getter claims
/// changes no value rxe-core reads: the table misses no field.
fn check(name: &str, specs: &[Spec], base: &[u8], covers: Option<usize>) {
    let values =
        |b: &[u8]| -> Vec<Option<u64>> { specs.iter().map(|s| s.get.map(|g| g(b))).collect() };
    let orig = values(base);
    for (i, s) in specs.iter().enumerate() {
        if let Some(g) = s.get {
            let raw = raw_bits(base, s.at, s.bit, s.width).unwrap();
            assert_eq!(
                g(base),
                raw,
                "{name}.{}: rxe-core's value is not the claimed bits",
                s.name
            );
        }
        for pos in claimed(s) {
            let mut b = base.to_vec();
            flip(&mut b, pos);
            let now = values(&b);
            if s.get.is_some() {
                assert_ne!(
                    now[i], orig[i],
                    "{name}.{}: flipping bit {pos} did not change it",
                    s.name
                );
            }
            for (j, o) in specs.iter().enumerate() {
                if j != i && !overlap(s, o) {
                    assert_eq!(
                        now[j], orig[j],
                        "{name}: flipping bit {pos} of {} changed {}",
                        s.name, o.name
                    );
                }
            }
        }
    }
    if let Some(n) = covers {
        for pos in 0..n * 8 {
            if specs
                .iter()
                .any(|s| s.get.is_some() && claimed(s).contains(&pos))
            {
                continue;
            }
            let mut b = base.to_vec();
            flip(&mut b, pos);
            assert_eq!(
                values(&b),
                orig,
                "{name}: bit {pos} is read by rxe-core but not in the table"
            );
        }
    }
}

#[test]
fn transport_header_tables_match_rxe_core() {
    let tables: [(&str, &[Spec], usize); 9] = [
        ("BTH", table::BTH, 12),
        ("RDETH", table::RDETH, 4),
        ("DETH", table::DETH, 8),
        ("FETH", table::FETH, 4),
        ("RETH", table::RETH, 16),
        ("AtomicETH", table::ATOMIC_ETH, 28),
        ("AETH", table::AETH, 4),
        ("AtomicAckETH", table::ATOMIC_ACK_ETH, 8),
        ("ImmDt", table::IMMDT, 4),
    ];
    for (name, specs, len) in tables {
        for seed in 0..16 {
            check(name, specs, &noise(len, seed), Some(len));
        }
        check(name, specs, &vec![0; len], Some(len));
    }
    check("IETH", table::IETH, &noise(4, 3), Some(4));
    // Every AETH syndrome byte, so each type's decoding is covered.
    for s in 0..=255u8 {
        check("AETH", table::AETH, &[s, 1, 2, 3], Some(4));
    }
}

/// A MAD header for a CM message with attribute `attr` and random data.
fn cm_mad(attr: u16, seed: u64) -> Vec<u8> {
    let mut m = noise(256, seed);
    m[..4].copy_from_slice(&[1, 0x07, 2, 0x03]);
    m[16..18].copy_from_slice(&attr.to_be_bytes());
    m
}

#[test]
fn mad_and_cm_tables_match_rxe_core() {
    for seed in 0..8 {
        check("MAD", table::MAD_HEADER, &noise(256, seed), Some(24));
    }
    for attr in 0x10..=0x18u16 {
        let (name, specs) = table::cm_table(attr).unwrap();
        for seed in 0..4 {
            // Only the key fields are in the table, so no coverage check;
            // the header bits must stay a CM MAD, so data bits only.
            check(name, specs, &cm_mad(attr, seed), None);
        }
    }
}

#[test]
fn frame_sets() {
    let f: FrameSet = "3,10-12".parse().unwrap();
    assert!(f.contains(3) && f.contains(10) && f.contains(12));
    assert!(!f.contains(4) && !f.contains(13) && !f.contains(9));
    assert!("".parse::<FrameSet>().is_err());
    assert!("5-3".parse::<FrameSet>().is_err());
    assert!("x".parse::<FrameSet>().is_err());
}

fn pcap(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/data/pcaps")
        .join(name)
}

/// Every prefix of real frames dissects without a panic; a cut frame says
/// why it stopped, and what it shows is a prefix of the whole frame's view.
#[test]
fn truncated_frames_show_what_parses() {
    for name in [
        "atomic_fadd.pcap",
        "extra_imm_naks.pcap",
        "rping.pcap",
        "read_bw_512.pcap",
    ] {
        let recs: Vec<_> = CaptureReader::open(pcap(name))
            .unwrap()
            .map(|r| r.unwrap())
            .take(12)
            .collect();
        for r in recs {
            let whole = dissect(r.link_type, &r.data, None).expect("RoCE");
            assert!(whole.facts.is_some(), "{name} frame {} parses", r.number);
            let any = Some(("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap()));
            for n in 0..r.data.len() {
                // A frame cut short (by a snapshot length, say) no longer
                // matches its IP length: only the note is shown.
                let d = dissect(r.link_type, &r.data[..n], any).expect("shown");
                assert!(
                    d.facts.is_none(),
                    "{name} frame {} cut at {n} parsed",
                    r.number
                );
                assert!(d.note.is_some());
            }
        }
    }
}

/// The BTH of a packet cut inside its extension headers is still shown.
#[test]
fn cut_inside_the_extension_headers_shows_the_bth() {
    let r = CaptureReader::open(pcap("read_bw_512.pcap"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap();
    let mut data = r.data.clone();
    // Shrink the RoCE packet to BTH + 8 bytes of the RETH + ICRC, fixing
    // the IP and UDP lengths (IPv4 here) so the framing still parses.
    let t_off = 14 + 20 + 8;
    let new_len = 12 + 8 + 4;
    data.truncate(t_off + new_len);
    data[16..18].copy_from_slice(&((20 + 8 + new_len) as u16).to_be_bytes());
    data[38..40].copy_from_slice(&((8 + new_len) as u16).to_be_bytes());
    let d = dissect(LinkType::Ethernet, &data, None).unwrap();
    let names: Vec<_> = d.headers.iter().map(|h| h.name.as_str()).collect();
    assert_eq!(names, ["Ethernet", "IPv4", "UDP", "BTH", "RETH"]);
    assert_eq!(d.headers[3].fields.len(), table::BTH.len());
    assert!(d.headers[4].fields.is_empty());
    let note = d.note.unwrap();
    assert!(note.contains("RETH cut short: 12 of 16 bytes"), "{note}");
}
