//! Feeds arbitrary bytes to `rxe_net::capture::CaptureReader`, the reader
//! behind `rxe dump`, as a whole capture file (pcap or pcapng).
//!
//! Besides "no panic, no unbounded allocation" the target checks what the
//! reader promises:
//!
//! * records are numbered 1, 2, 3, ... (a non-fatal error, an unsupported
//!   link type on one pcapng interface, uses up a number too), and iteration
//!   ends after the first fatal error and stays ended (`FusedIterator`);
//! * a record holds no more bytes than the file has, and there cannot be
//!   more records than the file has room for (12 bytes each at the least);
//! * every frame goes through `RoceFrame::parse` for its link type, as
//!   `rxe dump` does;
//! * what reads back writes back: the frames of the first link type, written
//!   with `CaptureWriter` and read again, come back with the same bytes,
//!   link type and timestamps.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rxe_core::wire::RoceFrame;
use rxe_net::capture::{CaptureReader, CaptureWriter, Record};
use std::io::Cursor;
use std::time::Duration;

fuzz_target!(|data: &[u8]| {
    let reader = match CaptureReader::new(Cursor::new(data)) {
        Ok(r) => r,
        Err(e) => {
            let _ = (e.to_string(), e.is_fatal());
            return;
        }
    };
    let _ = (reader.format(), reader.link_type(), format!("{reader:?}"));
    let mut reader = reader;
    let mut records: Vec<Record> = Vec::new();
    let mut items = 0u64;
    let mut ended_with_fatal = false;
    while let Some(item) = reader.next() {
        items += 1;
        assert!(
            items <= data.len() as u64 / 12 + 1,
            "{items} items from a {}-byte file",
            data.len()
        );
        match item {
            Ok(rec) => {
                assert_eq!(rec.number, items, "records are numbered from 1");
                assert!(
                    rec.data.len() <= data.len(),
                    "a record larger than its file"
                );
                if let Ok(rf) = RoceFrame::parse(rec.link_type, &rec.data) {
                    let _ = (rf.icrc_ok(), rf.repr());
                    if let Ok(p) = rf.packet() {
                        let _ = rxe_core::wire::PacketRepr::parse(&p).map(|r| r.to_string());
                    }
                }
                records.push(rec);
            }
            Err(e) => {
                let _ = e.to_string();
                if e.is_fatal() {
                    ended_with_fatal = true;
                    break;
                }
            }
        }
        assert_eq!(reader.frames_read(), items);
    }
    if ended_with_fatal {
        assert!(reader.next().is_none(), "no records after a fatal error");
    }
    assert!(reader.next().is_none(), "the iterator stays ended");

    round_trip(&records);
});

/// Writes the frames of the first record's link type as classic pcap and
/// reads them back.
fn round_trip(records: &[Record]) {
    let Some(first) = records.first() else {
        return;
    };
    let link = first.link_type;
    let mut writer = CaptureWriter::new(Vec::new(), link).expect("a header writes to a Vec");
    let mut kept: Vec<&Record> = Vec::new();
    for r in records.iter().filter(|r| r.link_type == link) {
        if writer.write(r.timestamp, &r.data).is_ok() {
            kept.push(r);
        }
    }
    let bytes = writer.finish().expect("a Vec flushes");
    let back: Vec<Record> = CaptureReader::new(Cursor::new(&bytes[..]))
        .expect("a written file opens")
        .map(|r| r.expect("a written record reads back"))
        .collect();
    assert_eq!(back.len(), kept.len());
    for (b, k) in back.iter().zip(kept) {
        assert_eq!(b.link_type, link);
        assert_eq!(b.data, k.data);
        assert_eq!(b.orig_len as usize, k.data.len());
        // The writer keeps nanoseconds and whole seconds up to 2^32 - 1.
        assert_eq!(b.timestamp, k.timestamp);
        assert!(b.timestamp < Duration::from_secs(1 << 32));
    }
}
