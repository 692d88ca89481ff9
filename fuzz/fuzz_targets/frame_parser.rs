//! Feeds arbitrary bytes to rxe-core's wire-format parsers.
//!
//! Input layout: the first byte picks the link type (`byte % 4`:
//! 0 Ethernet, 1 Linux cooked v1, 2 Linux cooked v2, 3 raw IP); the rest is
//! the frame. Besides "no panic", the target checks that whatever parses
//! re-emits and re-parses to the same repr:
//!
//! * frame level: `RoceFrame::parse` -> `FrameRepr` + `PacketRepr` ->
//!   `FrameRepr::emit` -> `RoceFrame::parse` gives equal reprs, a valid
//!   ICRC, and emitting again gives the same bytes;
//! * packet level: the bytes after the selector as a bare transport packet
//!   (`Packet::new_checked` + `PacketRepr::parse`), re-emitted with
//!   `PacketRepr::emit`;
//! * every header view and repr on the same bytes, and the ICRC functions.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rxe_core::wire::{
    icrc, Aeth, AethRepr, AtomicAckEth, AtomicAckEthRepr, AtomicEth, AtomicEthRepr, Bth, BthRepr,
    Deth, DethRepr, Feth, FethRepr, Ieth, ImmDt, LinkType, Packet, PacketRepr, Rdeth, RdethRepr,
    Reth, RethRepr, RoceFrame,
};

const LINKS: [LinkType; 4] = [
    LinkType::Ethernet,
    LinkType::LinuxSll,
    LinkType::LinuxSll2,
    LinkType::RawIp,
];

fuzz_target!(|input: &[u8]| {
    let Some((&sel, data)) = input.split_first() else {
        return;
    };
    let link = LINKS[usize::from(sel % 4)];
    frame_round_trip(link, data);
    packet_round_trip(data);
    headers(data);
    icrc_functions(data);
});

fn frame_round_trip(link: LinkType, data: &[u8]) {
    let rf = match RoceFrame::parse(link, data) {
        Ok(rf) => rf,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    let _ = rf.icrc_ok();
    let _ = rf.computed_icrc();
    let frame_repr = rf.repr();
    let packet = match rf.packet() {
        Ok(p) => p,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    let repr = PacketRepr::parse(&packet).expect("a checked packet parses");
    let _ = repr.to_string();
    assert_eq!(repr.payload, packet.payload());
    assert_eq!(usize::from(repr.pad_count()), packet.pad().len());
    assert_eq!(repr.buffer_len(), rf.transport.len());

    // Re-emit: Ethernet keeps its link header, everything else comes back as raw IP.
    let mut buf = vec![0u8; frame_repr.buffer_len(repr.buffer_len())];
    let n = frame_repr
        .emit(&repr, &mut buf)
        .expect("a parsed repr emits");
    assert_eq!(n, buf.len());
    let link2 = if frame_repr.eth.is_some() {
        LinkType::Ethernet
    } else {
        LinkType::RawIp
    };
    let rf2 = RoceFrame::parse(link2, &buf).expect("an emitted frame parses");
    assert!(rf2.icrc_ok(), "an emitted frame has a valid ICRC");
    assert_eq!(rf2.repr(), frame_repr);
    let p2 = rf2.packet().expect("an emitted packet checks");
    let repr2 = PacketRepr::parse(&p2).expect("an emitted packet parses");
    assert_eq!(repr2, repr);
    let mut buf2 = vec![0u8; buf.len()];
    rf2.repr().emit(&repr2, &mut buf2).expect("emits again");
    assert_eq!(buf2, buf, "emit is idempotent");
}

fn packet_round_trip(data: &[u8]) {
    let packet = match Packet::new_checked(data) {
        Ok(p) => p,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    let _ = (
        packet.info(),
        packet.pad(),
        packet.icrc(),
        packet.payload_offset(),
    );
    let repr = PacketRepr::parse(&packet).expect("a checked packet parses");
    let mut buf = vec![0u8; repr.buffer_len()];
    assert_eq!(buf.len(), data.len());
    repr.emit(&mut buf).expect("a parsed repr emits");
    let p2 = Packet::new_checked(&buf[..]).expect("an emitted packet checks");
    assert_eq!(PacketRepr::parse(&p2).expect("parses"), repr);
}

fn headers(d: &[u8]) {
    if let Ok(v) = Bth::new_checked(d) {
        let _ = BthRepr::parse(&v);
    }
    if let Ok(v) = Rdeth::new_checked(d) {
        let _ = RdethRepr::parse(&v);
    }
    if let Ok(v) = Deth::new_checked(d) {
        let _ = DethRepr::parse(&v);
    }
    if let Ok(v) = Feth::new_checked(d) {
        let _ = FethRepr::parse(&v);
    }
    if let Ok(v) = Reth::new_checked(d) {
        let _ = RethRepr::parse(&v);
    }
    if let Ok(v) = AtomicEth::new_checked(d) {
        let _ = AtomicEthRepr::parse(&v);
    }
    if let Ok(v) = Aeth::new_checked(d) {
        let _ = AethRepr::parse(&v);
    }
    if let Ok(v) = AtomicAckEth::new_checked(d) {
        let _ = AtomicAckEthRepr::parse(&v);
    }
    if let Ok(v) = ImmDt::new_checked(d) {
        let _ = v.value();
    }
    if let Ok(v) = Ieth::new_checked(d) {
        let _ = v.rkey();
    }
    // The reprs check the length themselves, even behind an unchecked view.
    let _ = BthRepr::parse(&Bth::new_unchecked(d));
    let _ = RethRepr::parse(&Reth::new_unchecked(d));
    let _ = AtomicEthRepr::parse(&AtomicEth::new_unchecked(d));
}

fn icrc_functions(d: &[u8]) {
    let computed = icrc::compute(d);
    let verified = icrc::verify(d);
    assert_eq!(computed.is_ok(), verified.is_ok());
    let _ = icrc::carried(d);
    let mut copy = d.to_vec();
    if let Ok(crc) = icrc::fill(&mut copy) {
        assert_eq!(Ok(crc), computed);
        assert_eq!(icrc::verify(&copy), Ok(true));
    }
    // compute_parts on an arbitrary three-way split.
    if d.len() >= 2 {
        let a = usize::from(d[0]) % d.len();
        let b = a + (usize::from(d[1]) % (d.len() - a + 1));
        let _ = icrc::compute_parts(&d[..a], &d[a..b], &d[b..]);
    }
}
