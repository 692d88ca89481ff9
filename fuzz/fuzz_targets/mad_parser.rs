//! Feeds arbitrary bytes to rxe-core's MAD and CM parsers (`rxe_core::mad`).
//!
//! Input layout: the first byte is a selector, the rest the data, read in
//! four ways:
//!
//! * as a frame of the link type `selector % 4` (as `frame_parser` reads
//!   its input, so its corpus seeds this target too): a UD packet to QP 1
//!   in it goes through `GsiMad::from_packet` and `CmMad::parse`;
//! * as a bare transport packet (`GsiMad::parse`) and as a bare MAD
//!   (`CmMad::parse`, which must refuse anything but 256 bytes);
//! * as the body of a CM MAD: the data, cut or zero-filled to 256 bytes,
//!   with a CM header whose attribute is `selector % 11`'s message; it must
//!   parse, and re-emit to the same bytes with exactly the reserved bits
//!   cleared (the bits the message uses are what the parse of all-ones
//!   data emits);
//! * as private data for rdma_cm's header (`CmaHeader::parse`).
//!
//! Whatever parses must emit and parse back to the same repr.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rxe_core::mad::cm::AttributeId;
use rxe_core::mad::{CmMad, CmMessage, CmaHeader, GsiMad, Mad, MadHeader, MAD_DATA_LEN, MAD_LEN};
use rxe_core::wire::{LinkType, PacketRepr, RoceFrame};

const LINKS: [LinkType; 4] = [
    LinkType::Ethernet,
    LinkType::LinuxSll,
    LinkType::LinuxSll2,
    LinkType::RawIp,
];

const ATTRS: [AttributeId; 11] = [
    AttributeId::REQ,
    AttributeId::MRA,
    AttributeId::REJ,
    AttributeId::REP,
    AttributeId::RTU,
    AttributeId::DREQ,
    AttributeId::DREP,
    AttributeId::SIDR_REQ,
    AttributeId::SIDR_REP,
    AttributeId::LAP,
    AttributeId::APR,
];

fuzz_target!(|input: &[u8]| {
    let Some((&sel, data)) = input.split_first() else {
        return;
    };
    in_a_frame(LINKS[usize::from(sel % 4)], data);
    bare(data);
    cm_body(ATTRS[usize::from(sel) % ATTRS.len()], data);
    cma_header(data);
});

/// A CM MAD must re-emit to the same repr; the GSI packet around it too.
fn round_trip(m: &CmMad) {
    let bytes = m.to_bytes();
    assert_eq!(CmMad::parse(&bytes), Ok(*m), "a CM MAD re-parses");
    let _ = (m.to_string(), m.describe(), format!("{m:?}"));
}

fn gsi_round_trip(g: &GsiMad<'_>) {
    let _ = g.to_string();
    let p = g.to_packet(1);
    let mut buf = vec![0u8; p.buffer_len()];
    p.emit(&mut buf).expect("a GSI packet emits");
    assert_eq!(GsiMad::parse(&buf), Ok(*g), "a GSI packet re-parses");
    if let Ok(m) = g.cm() {
        round_trip(&m);
    }
}

fn in_a_frame(link: LinkType, data: &[u8]) {
    let Ok(f) = RoceFrame::parse(link, data) else {
        return;
    };
    let Ok(p) = f.packet() else {
        return;
    };
    let repr = PacketRepr::parse(&p).expect("a checked packet parses");
    if let Ok(g) = GsiMad::from_packet(&repr) {
        gsi_round_trip(&g);
    }
}

fn bare(data: &[u8]) {
    if let Ok(g) = GsiMad::parse(data) {
        gsi_round_trip(&g);
    }
    match CmMad::parse(data) {
        Ok(m) => {
            assert_eq!(data.len(), MAD_LEN);
            round_trip(&m);
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
    if let Ok(v) = Mad::new_checked(data) {
        if let Ok(h) = MadHeader::parse(&v) {
            let _ = h.to_string();
        }
    } else {
        assert_ne!(data.len(), MAD_LEN);
    }
}

fn cm_body(attr: AttributeId, data: &[u8]) {
    let mut mad = [0u8; MAD_LEN];
    let n = data.len().min(MAD_LEN);
    mad[..n].copy_from_slice(&data[..n]);
    mad[..4].copy_from_slice(&[1, 0x07, 2, 0x03]);
    mad[16..18].copy_from_slice(&attr.0.to_be_bytes());
    let m = CmMad::parse(&mad).expect("any body under a CM header parses");
    assert_eq!(m.message.attribute_id(), attr);
    round_trip(&m);
    // The bits the message uses: emitting the parse of all-ones data.
    let ones = CmMessage::parse(attr, &[0xff; MAD_DATA_LEN]).expect("parses");
    let mut mask = [0u8; MAD_DATA_LEN];
    ones.emit(&mut mask);
    let out = m.to_bytes();
    for i in 0..MAD_DATA_LEN {
        assert_eq!(out[24 + i], mad[24 + i] & mask[i], "byte {i} of the data");
    }
    // The header: everything but the reserved bytes 18-19 comes back.
    assert_eq!(out[..18], mad[..18]);
    assert_eq!(out[20..24], mad[20..24]);
}

fn cma_header(data: &[u8]) {
    if let Ok(h) = CmaHeader::parse(data) {
        let _ = h.to_string();
        let mut b = [0u8; 36];
        h.emit(&mut b).expect("36 bytes hold the header");
        assert_eq!(CmaHeader::parse(&b), Ok(h), "an rdma_cm header re-parses");
    }
}
