//! Reading and writing capture files.
//!
//! [`CaptureReader`] reads classic pcap (either byte order, microsecond or
//! nanosecond timestamps) and pcapng (any number of sections and
//! interfaces, each interface with its own link type, timestamp resolution
//! and offset), telling the two apart by their magic number. It yields one
//! [`Record`] per frame, numbered from 1 as Wireshark numbers them: every
//! frame counts, RoCE or not.
//!
//! [`CaptureWriter`] writes classic pcap with nanosecond timestamps, so that
//! tests and tools can record what crosses a link and open it in Wireshark.
//!
//! Both sit on the `pcap-file` crate, which frames the records; this module
//! decodes the packet records itself so that it can honour what that crate
//! does not (pcapng `if_tsresol`/`if_tsoffset`, snapshot-truncated frames,
//! simple packet blocks) and so that a damaged file gives a
//! [`CaptureError`], never a panic.
//!
//! ```no_run
//! use rxe_net::capture::CaptureReader;
//!
//! for record in CaptureReader::open("trace.pcapng")? {
//!     let record = record?;
//!     println!("{} {:?} {:?} {} bytes", record.number, record.timestamp,
//!              record.link_type, record.data.len());
//! }
//! # Ok::<(), rxe_net::capture::CaptureError>(())
//! ```

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapReader, PcapWriter};
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};
use pcap_file::pcapng::PcapNgReader;
use pcap_file::{DataLink, Endianness, PcapError, TsResolution};
use rxe_core::wire::LinkType;
use std::fs::File;
use std::io::{self, BufWriter, Chain, Cursor, ErrorKind, Read, Write};
use std::path::Path;
use std::time::Duration;

/// The largest frame a record may hold unless the file's snapshot length
/// says otherwise (Wireshark's `WTAP_MAX_PACKET_SIZE_STANDARD`).
pub const MAX_FRAME_LEN: u32 = 262_144;

/// The snapshot length [`CaptureWriter`] declares.
pub const WRITER_SNAPLEN: u32 = MAX_FRAME_LEN;

const PCAPNG_SHB: u32 = 0x0A0D_0D0A;
const PCAPNG_IDB: u32 = 1;
const PCAPNG_PB: u32 = 2;
const PCAPNG_SPB: u32 = 3;
const PCAPNG_EPB: u32 = 6;

/// Why a capture file could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CaptureError {
    /// The underlying reader or writer failed.
    #[error("{0}")]
    Io(#[from] io::Error),
    /// The file holds no bytes at all.
    #[error("empty file")]
    Empty,
    /// The file starts with neither a pcap nor a pcapng magic number.
    #[error("not a pcap or pcapng file (it starts with {})", hex(.magic))]
    NotACapture {
        /// The first four bytes.
        magic: [u8; 4],
    },
    /// The file ends inside its file header (or first pcapng section header).
    #[error("the file is cut short in its header")]
    TruncatedHeader,
    /// The file header is malformed.
    #[error("corrupt file header: {reason}")]
    CorruptHeader {
        /// What is wrong.
        reason: String,
    },
    /// The file ends in the middle of a record.
    #[error("the file is cut short in the record after frame {frames}")]
    Truncated {
        /// Frames read completely before the cut.
        frames: u64,
    },
    /// A record (or pcapng block) is malformed.
    #[error("corrupt record after frame {frames}: {reason}")]
    Corrupt {
        /// Frames read before the bad record.
        frames: u64,
        /// What is wrong.
        reason: String,
    },
    /// A link-layer header type we cannot find IP packets in. For pcap this
    /// is returned when opening the file; for pcapng, for each frame of
    /// such an interface (and reading can go on).
    #[error(
        "unsupported link type {link_type} ({}){}",
        link_type_name(*.link_type),
        .interface.map(|i| format!(" on interface {i}")).unwrap_or_default()
    )]
    UnsupportedLinkType {
        /// The `LINKTYPE_*` number.
        link_type: u32,
        /// The pcapng interface, if any.
        interface: Option<u32>,
    },
    /// A frame too long for the writer's snapshot length.
    #[error("frame of {len} bytes is longer than the snapshot length {WRITER_SNAPLEN}")]
    FrameTooLong {
        /// The frame length.
        len: usize,
    },
    /// A timestamp that classic pcap cannot hold (after 2106).
    #[error("timestamp {0:?} does not fit in a pcap record")]
    TimestampOutOfRange(Duration),
}

impl CaptureError {
    /// True if reading cannot go on after this error. Only an unsupported
    /// link type on one pcapng interface leaves the rest of the file readable.
    pub fn is_fatal(&self) -> bool {
        !matches!(self, CaptureError::UnsupportedLinkType { .. })
    }
}

/// Result with [`CaptureError`].
pub type Result<T> = std::result::Result<T, CaptureError>;

fn hex(b: &[u8]) -> String {
    b.iter()
        .map(|x| format!("{x:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn link_type_name(n: u32) -> String {
    match DataLink::from(n) {
        DataLink::Unknown(_) => "unknown".to_owned(),
        known => format!("{known:?}"),
    }
}

/// Maps a pcap `LINKTYPE_*` number to the frame layouts rxe-core parses.
///
/// Ethernet (1), Linux cooked v1 (113) and v2 (276), and raw IP: 101, the
/// old DLT numbers 12 and 14 that some files carry, and the IPv4-only (228)
/// and IPv6-only (229) types.
pub fn link_type_from_pcap(n: u32) -> Result<LinkType> {
    match n {
        1 => Ok(LinkType::Ethernet),
        113 => Ok(LinkType::LinuxSll),
        276 => Ok(LinkType::LinuxSll2),
        12 | 14 | 101 | 228 | 229 => Ok(LinkType::RawIp),
        _ => Err(CaptureError::UnsupportedLinkType {
            link_type: n,
            interface: None,
        }),
    }
}

/// The `LINKTYPE_*` number a capture file uses for a link type.
pub fn pcap_link_type(link: LinkType) -> u32 {
    match link {
        LinkType::Ethernet => 1,
        LinkType::LinuxSll => 113,
        LinkType::LinuxSll2 => 276,
        LinkType::RawIp => 101,
    }
}

/// One frame from a capture file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Frame number, from 1, counting every frame in the file.
    pub number: u64,
    /// When the frame was captured, since the Unix epoch.
    pub timestamp: Duration,
    /// What the frame starts with.
    pub link_type: LinkType,
    /// The frame's length on the wire; more than `data.len()` if the
    /// capture cut it short (snapshot length).
    pub orig_len: u32,
    /// The captured bytes.
    pub data: Vec<u8>,
}

/// The two file formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// Classic libpcap format.
    Pcap,
    /// pcapng.
    PcapNg,
}

type Src<R> = Chain<Cursor<[u8; 4]>, R>;

/// What a pcapng interface description tells about its frames.
#[derive(Debug, Clone, Copy)]
struct Interface {
    link: std::result::Result<LinkType, u32>,
    snaplen: u32,
    /// `if_tsresol`: bit 7 clear, 10^-n seconds; set, 2^-n seconds.
    tsresol: u8,
    /// `if_tsoffset`, seconds (signed).
    tsoffset: i64,
}

impl Interface {
    fn new(idb: &InterfaceDescriptionBlock<'_>) -> Self {
        let mut i = Interface {
            link: link_type_from_pcap(u32::from(idb.linktype)).map_err(|_| idb.linktype.into()),
            snaplen: idb.snaplen,
            tsresol: 6,
            tsoffset: 0,
        };
        for opt in &idb.options {
            match opt {
                InterfaceDescriptionOption::IfTsResol(r) => i.tsresol = *r,
                InterfaceDescriptionOption::IfTsOffset(o) => i.tsoffset = *o as i64,
                _ => {}
            }
        }
        i
    }

    fn timestamp(&self, units: u64) -> Duration {
        let units = u128::from(units);
        let nanos = if self.tsresol & 0x80 != 0 {
            // units < 2^64, so units * 10^9 < 2^94 and the shift is < 128.
            (units * 1_000_000_000) >> (self.tsresol & 0x7f)
        } else {
            let e = u32::from(self.tsresol);
            if e <= 9 {
                units * 10u128.pow(9 - e)
            } else {
                10u128.checked_pow(e - 9).map_or(0, |d| units / d)
            }
        };
        let secs = u64::try_from(nanos / 1_000_000_000).unwrap_or(u64::MAX);
        let t = Duration::new(secs, (nanos % 1_000_000_000) as u32);
        if self.tsoffset >= 0 {
            t.saturating_add(Duration::from_secs(self.tsoffset.unsigned_abs()))
        } else {
            t.saturating_sub(Duration::from_secs(self.tsoffset.unsigned_abs()))
        }
    }
}

enum Inner<R: Read> {
    Pcap {
        reader: PcapReader<Src<R>>,
        link: LinkType,
        header: PcapHeader,
    },
    PcapNg {
        reader: PcapNgReader<Src<R>>,
        interfaces: Vec<Interface>,
    },
}

/// Reads the frames of a pcap or pcapng file.
///
/// Iterating yields `Ok(Record)` per frame; after an error for which
/// [`CaptureError::is_fatal`] is true, iteration ends.
pub struct CaptureReader<R: Read> {
    inner: Inner<R>,
    frames: u64,
    done: bool,
}

impl<R: Read> std::fmt::Debug for CaptureReader<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaptureReader")
            .field("format", &self.format())
            .field("frames", &self.frames)
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl CaptureReader<File> {
    /// Opens a capture file.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        // pcap-file buffers its input itself, no BufReader needed.
        Self::new(File::open(path)?)
    }
}

/// Reads up to 4 bytes, returning how many there were.
fn read_magic<R: Read>(r: &mut R) -> io::Result<([u8; 4], usize)> {
    let mut magic = [0u8; 4];
    let mut n = 0;
    while n < 4 {
        match r.read(&mut magic[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok((magic, n))
}

/// Maps an error from opening (reading the file header).
fn header_error(e: PcapError) -> CaptureError {
    match e {
        PcapError::IoError(e) if e.kind() == ErrorKind::UnexpectedEof => {
            CaptureError::TruncatedHeader
        }
        PcapError::IoError(e) => CaptureError::Io(e),
        other => CaptureError::CorruptHeader {
            reason: other.to_string(),
        },
    }
}

impl<R: Read> CaptureReader<R> {
    /// Reads the file header from `reader` and detects the format.
    pub fn new(mut reader: R) -> Result<Self> {
        let (magic, n) = read_magic(&mut reader)?;
        match n {
            0 => return Err(CaptureError::Empty),
            1..=3 => return Err(CaptureError::TruncatedHeader),
            _ => {}
        }
        let src = Cursor::new(magic).chain(reader);
        let inner = match u32::from_be_bytes(magic) {
            0xa1b2_c3d4 | 0xd4c3_b2a1 | 0xa1b2_3c4d | 0x4d3c_b2a1 => {
                let reader = PcapReader::new(src).map_err(header_error)?;
                let header = reader.header();
                let link = link_type_from_pcap(header.datalink.into())?;
                Inner::Pcap {
                    reader,
                    link,
                    header,
                }
            }
            PCAPNG_SHB => Inner::PcapNg {
                reader: PcapNgReader::new(src).map_err(header_error)?,
                interfaces: Vec::new(),
            },
            _ => return Err(CaptureError::NotACapture { magic }),
        };
        Ok(CaptureReader {
            inner,
            frames: 0,
            done: false,
        })
    }

    /// The file's format.
    pub fn format(&self) -> Format {
        match self.inner {
            Inner::Pcap { .. } => Format::Pcap,
            Inner::PcapNg { .. } => Format::PcapNg,
        }
    }

    /// The link type of a pcap file; `None` for pcapng, where each
    /// interface has its own.
    pub fn link_type(&self) -> Option<LinkType> {
        match self.inner {
            Inner::Pcap { link, .. } => Some(link),
            Inner::PcapNg { .. } => None,
        }
    }

    /// Frames read so far (the number of the last frame yielded or skipped).
    pub fn frames_read(&self) -> u64 {
        self.frames
    }

    /// Reads the next frame: `None` at the end of the file.
    pub fn next_record(&mut self) -> Option<Result<Record>> {
        if self.done {
            return None;
        }
        let mut r = match &mut self.inner {
            Inner::Pcap {
                reader,
                link,
                header,
            } => next_pcap(reader, *link, header, self.frames),
            Inner::PcapNg { reader, interfaces } => next_pcapng(reader, interfaces, self.frames),
        };
        match r {
            None => self.done = true,
            Some(Ok(ref mut rec)) => {
                self.frames += 1;
                rec.number = self.frames;
            }
            Some(Err(ref e)) => {
                if e.is_fatal() {
                    self.done = true;
                } else {
                    self.frames += 1;
                }
            }
        }
        r
    }
}

impl<R: Read> Iterator for CaptureReader<R> {
    type Item = Result<Record>;
    fn next(&mut self) -> Option<Self::Item> {
        self.next_record()
    }
}

impl<R: Read> std::iter::FusedIterator for CaptureReader<R> {}

/// Maps an error from reading a record.
fn record_error(e: PcapError, frames: u64) -> CaptureError {
    match e {
        PcapError::IoError(e) if e.kind() == ErrorKind::UnexpectedEof => {
            CaptureError::Truncated { frames }
        }
        PcapError::IoError(e) => CaptureError::Io(e),
        other => corrupt(frames, other.to_string()),
    }
}

fn corrupt(frames: u64, reason: impl Into<String>) -> CaptureError {
    CaptureError::Corrupt {
        frames,
        reason: reason.into(),
    }
}

fn next_pcap<R: Read>(
    reader: &mut PcapReader<Src<R>>,
    link: LinkType,
    header: &PcapHeader,
    frames: u64,
) -> Option<Result<Record>> {
    let raw = match reader.next_raw_packet()? {
        Ok(raw) => raw,
        Err(e) => return Some(Err(record_error(e, frames))),
    };
    // Checked here rather than by pcap-file, which refuses the common case
    // of a frame longer than the snapshot length (orig_len > snaplen).
    if raw.incl_len > header.snaplen.max(MAX_FRAME_LEN) {
        let why = format!("record length {} is implausible", raw.incl_len);
        return Some(Err(corrupt(frames, why)));
    }
    let frac_nanos = match header.ts_resolution {
        TsResolution::MicroSecond => u64::from(raw.ts_frac) * 1000,
        TsResolution::NanoSecond => u64::from(raw.ts_frac),
    };
    Some(Ok(Record {
        number: 0,
        timestamp: Duration::from_secs(raw.ts_sec.into()) + Duration::from_nanos(frac_nanos),
        link_type: link,
        orig_len: raw.orig_len,
        data: raw.data.into_owned(),
    }))
}

/// Reads pcapng fields in the section's byte order.
struct Fields<'a> {
    body: &'a [u8],
    big: bool,
}

impl Fields<'_> {
    fn u16(&self, at: usize) -> u16 {
        let b = [self.body[at], self.body[at + 1]];
        if self.big {
            u16::from_be_bytes(b)
        } else {
            u16::from_le_bytes(b)
        }
    }
    fn u32(&self, at: usize) -> u32 {
        let mut b = [0u8; 4];
        b.copy_from_slice(&self.body[at..at + 4]);
        if self.big {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        }
    }
}

/// What one pcapng block turned out to be.
enum NgBlock {
    Section,
    Interface,
    Other,
    Packet {
        iface: u32,
        /// Timestamp in the interface's units; `None` for a simple packet block.
        ts: Option<u64>,
        orig_len: u32,
        data: Vec<u8>,
    },
}

fn next_pcapng<R: Read>(
    reader: &mut PcapNgReader<Src<R>>,
    interfaces: &mut Vec<Interface>,
    frames: u64,
) -> Option<Result<Record>> {
    loop {
        // Only a section header block changes the byte order, and we do
        // not read its fields ourselves.
        let big = reader.section().endianness == Endianness::Big;
        let spb_snaplen = interfaces.first().map_or(0, |i| i.snaplen);
        let block = match reader.next_raw_block()? {
            Ok(b) => decode_block(b.type_, &b.body, big, spb_snaplen),
            Err(e) => return Some(Err(record_error(e, frames))),
        };
        let (iface, ts, orig_len, data) = match block {
            Err(why) => return Some(Err(corrupt(frames, why))),
            Ok(NgBlock::Section) => {
                interfaces.clear();
                continue;
            }
            Ok(NgBlock::Interface) => {
                // pcap-file has parsed it (or failed with an error above).
                match reader.interfaces().last() {
                    Some(idb) => interfaces.push(Interface::new(idb)),
                    None => return Some(Err(corrupt(frames, "unreadable interface block"))),
                }
                continue;
            }
            Ok(NgBlock::Other) => continue,
            Ok(NgBlock::Packet {
                iface,
                ts,
                orig_len,
                data,
            }) => (iface, ts, orig_len, data),
        };
        let Some(i) = interfaces.get(iface as usize) else {
            let why = format!("frame on interface {iface}, which is not described");
            return Some(Err(corrupt(frames, why)));
        };
        return Some(match i.link {
            Ok(link_type) => Ok(Record {
                number: 0,
                timestamp: ts.map_or(Duration::ZERO, |t| i.timestamp(t)),
                link_type,
                orig_len,
                data,
            }),
            Err(n) => Err(CaptureError::UnsupportedLinkType {
                link_type: n,
                interface: Some(iface),
            }),
        });
    }
}

/// Decodes the packet blocks (enhanced, simple, and the obsolete packet
/// block) of a pcapng file; other blocks are only classified.
fn decode_block(
    type_: u32,
    body: &[u8],
    big: bool,
    spb_snaplen: u32,
) -> std::result::Result<NgBlock, String> {
    let f = Fields { body, big };
    let (iface, ts, caplen, orig_len, off) = match type_ {
        PCAPNG_SHB => return Ok(NgBlock::Section),
        PCAPNG_IDB => return Ok(NgBlock::Interface),
        PCAPNG_EPB | PCAPNG_PB => {
            if body.len() < 20 {
                return Err("packet block shorter than 20 bytes".into());
            }
            let iface = if type_ == PCAPNG_EPB {
                f.u32(0)
            } else {
                u32::from(f.u16(0))
            };
            let ts = (u64::from(f.u32(4)) << 32) | u64::from(f.u32(8));
            (iface, Some(ts), f.u32(12) as usize, f.u32(16), 20)
        }
        PCAPNG_SPB => {
            if body.len() < 4 {
                return Err("simple packet block shorter than 4 bytes".into());
            }
            let orig_len = f.u32(0);
            // No captured length: the original length, cut to the
            // snapshot length of interface 0 and to the block.
            let mut caplen = (body.len() - 4).min(orig_len as usize);
            if spb_snaplen != 0 {
                caplen = caplen.min(spb_snaplen as usize);
            }
            (0, None, caplen, orig_len, 4)
        }
        _ => return Ok(NgBlock::Other),
    };
    if caplen > body.len() - off {
        return Err(format!(
            "captured length {caplen} runs past the end of its block"
        ));
    }
    Ok(NgBlock::Packet {
        iface,
        ts,
        orig_len,
        data: body[off..off + caplen].to_vec(),
    })
}

/// Writes frames to a classic pcap file (little-endian, nanosecond
/// timestamps, snapshot length [`WRITER_SNAPLEN`]).
pub struct CaptureWriter<W: Write> {
    writer: PcapWriter<W>,
    link: LinkType,
}

impl<W: Write> std::fmt::Debug for CaptureWriter<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaptureWriter")
            .field("link", &self.link)
            .finish_non_exhaustive()
    }
}

impl CaptureWriter<BufWriter<File>> {
    /// Creates (or truncates) a file. Call [`CaptureWriter::finish`] to
    /// flush it and see any error.
    pub fn create(path: impl AsRef<Path>, link: LinkType) -> Result<Self> {
        Self::new(BufWriter::new(File::create(path)?), link)
    }
}

fn write_error(e: PcapError) -> CaptureError {
    match e {
        PcapError::IoError(e) => CaptureError::Io(e),
        other => CaptureError::Io(io::Error::new(ErrorKind::InvalidInput, other.to_string())),
    }
}

impl<W: Write> CaptureWriter<W> {
    /// Writes the file header for frames of the given link type.
    pub fn new(writer: W, link: LinkType) -> Result<Self> {
        let header = PcapHeader {
            version_major: 2,
            version_minor: 4,
            ts_correction: 0,
            ts_accuracy: 0,
            snaplen: WRITER_SNAPLEN,
            datalink: DataLink::from(pcap_link_type(link)),
            ts_resolution: TsResolution::NanoSecond,
            endianness: Endianness::Little,
        };
        let writer = PcapWriter::with_header(writer, header).map_err(write_error)?;
        Ok(CaptureWriter { writer, link })
    }

    /// The link type every frame must have.
    pub fn link_type(&self) -> LinkType {
        self.link
    }

    /// Writes one frame captured at `timestamp` (since the Unix epoch).
    pub fn write(&mut self, timestamp: Duration, frame: &[u8]) -> Result<()> {
        if frame.len() > WRITER_SNAPLEN as usize {
            return Err(CaptureError::FrameTooLong { len: frame.len() });
        }
        if timestamp.as_secs() > u64::from(u32::MAX) {
            return Err(CaptureError::TimestampOutOfRange(timestamp));
        }
        let p = PcapPacket::new(timestamp, frame.len() as u32, frame);
        self.writer.write_packet(&p).map_err(write_error)?;
        Ok(())
    }

    /// Flushes and gives the underlying writer back.
    pub fn finish(self) -> Result<W> {
        let mut w = self.writer.into_writer();
        w.flush()?;
        Ok(w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
    use pcap_file::pcapng::blocks::simple_packet::SimplePacketBlock;
    use pcap_file::pcapng::{Block, PcapNgWriter};
    use std::borrow::Cow;

    fn frames() -> Vec<(Duration, Vec<u8>)> {
        (0..5u8)
            .map(|i| {
                let len = 20 + usize::from(i) * 7;
                let data = (0..len).map(|b| (b as u8).wrapping_mul(i + 1)).collect();
                (
                    Duration::new(1_700_000_000 + u64::from(i), 123_456_789),
                    data,
                )
            })
            .collect()
    }

    fn pcap(link: LinkType) -> Vec<u8> {
        let mut w = CaptureWriter::new(Vec::new(), link).unwrap();
        for (t, d) in frames() {
            w.write(t, &d).unwrap();
        }
        w.finish().unwrap()
    }

    fn read_all(bytes: &[u8]) -> Result<Vec<Record>> {
        CaptureReader::new(bytes)?.collect()
    }

    #[test]
    fn pcap_round_trip() {
        for link in [
            LinkType::Ethernet,
            LinkType::RawIp,
            LinkType::LinuxSll,
            LinkType::LinuxSll2,
        ] {
            let bytes = pcap(link);
            let r = CaptureReader::new(&bytes[..]).unwrap();
            assert_eq!(r.format(), Format::Pcap);
            assert_eq!(r.link_type(), Some(link));
            let recs = read_all(&bytes).unwrap();
            assert_eq!(recs.len(), 5);
            for (i, (rec, (t, d))) in recs.iter().zip(frames()).enumerate() {
                assert_eq!(rec.number, i as u64 + 1);
                assert_eq!(rec.timestamp, t);
                assert_eq!(rec.link_type, link);
                assert_eq!(rec.orig_len as usize, d.len());
                assert_eq!(rec.data, d);
            }
        }
    }

    /// A classic pcap by hand: big-endian, microseconds, a frame cut short
    /// by the snapshot length (orig_len > snaplen, which pcap-file's own
    /// packet check would refuse).
    #[test]
    fn big_endian_microseconds_and_snaplen() {
        let mut b = vec![];
        b.extend_from_slice(&0xa1b2_c3d4u32.to_be_bytes());
        b.extend_from_slice(&2u16.to_be_bytes());
        b.extend_from_slice(&4u16.to_be_bytes());
        b.extend_from_slice(&[0; 8]);
        b.extend_from_slice(&64u32.to_be_bytes()); // snaplen
        b.extend_from_slice(&101u32.to_be_bytes()); // LINKTYPE_RAW
        for (sec, usec, data) in [(10u32, 999_999u32, vec![0x45; 64]), (11, 5, vec![0x60; 3])] {
            b.extend_from_slice(&sec.to_be_bytes());
            b.extend_from_slice(&usec.to_be_bytes());
            b.extend_from_slice(&(data.len() as u32).to_be_bytes());
            b.extend_from_slice(&1500u32.to_be_bytes());
            b.extend_from_slice(&data);
        }
        let recs = read_all(&b).unwrap();
        assert_eq!(recs.len(), 2);
        assert_eq!(recs[0].timestamp, Duration::new(10, 999_999_000));
        assert_eq!(recs[0].orig_len, 1500);
        assert_eq!(recs[0].data.len(), 64);
        assert_eq!(recs[1].timestamp, Duration::new(11, 5000));
        assert_eq!(recs[1].link_type, LinkType::RawIp);
    }

    fn idb(link: u32, options: Vec<InterfaceDescriptionOption<'static>>) -> Block<'static> {
        Block::InterfaceDescription(InterfaceDescriptionBlock {
            linktype: DataLink::from(link),
            snaplen: 0,
            options,
        })
    }

    fn epb(iface: u32, units: u64, data: &[u8]) -> Block<'_> {
        // pcap-file writes `timestamp.as_nanos()` as the raw 64-bit count,
        // whatever the interface's resolution: pass raw units as "nanos".
        Block::EnhancedPacket(EnhancedPacketBlock {
            interface_id: iface,
            timestamp: Duration::from_nanos(units),
            original_len: data.len() as u32,
            data: Cow::Borrowed(data),
            options: vec![],
        })
    }

    #[test]
    fn pcapng_interfaces_resolutions_and_sections() {
        for endianness in [Endianness::Big, Endianness::Little] {
            let mut w = PcapNgWriter::with_endianness(Vec::new(), endianness).unwrap();
            // 0: Ethernet, default resolution (microseconds).
            w.write_block(&idb(1, vec![])).unwrap();
            // 1: SLL2 in nanoseconds, 100 s offset.
            w.write_block(&idb(
                276,
                vec![
                    InterfaceDescriptionOption::IfTsResol(9),
                    InterfaceDescriptionOption::IfTsOffset(100),
                ],
            ))
            .unwrap();
            // 2: IEEE 802.11, which we cannot read.
            w.write_block(&idb(105, vec![])).unwrap();
            // 3: raw IPv4, 2^-10 s.
            w.write_block(&idb(228, vec![InterfaceDescriptionOption::IfTsResol(0x8a)]))
                .unwrap();
            w.write_block(&epb(0, 1_500_000, b"eth")).unwrap();
            w.write_block(&epb(1, 2_000_000_001, b"sll2")).unwrap();
            w.write_block(&epb(2, 7, b"wifi")).unwrap();
            w.write_block(&epb(3, 3 * 1024 + 512, b"ip")).unwrap();
            // A simple packet block: interface 0, no timestamp.
            w.write_block(&Block::SimplePacket(SimplePacketBlock {
                original_len: 5,
                data: Cow::Borrowed(b"simple\0\0"),
            }))
            .unwrap();
            let bytes = w.into_inner();

            let mut r = CaptureReader::new(&bytes[..]).unwrap();
            assert_eq!(r.format(), Format::PcapNg);
            assert_eq!(r.link_type(), None);
            let a = r.next().unwrap().unwrap();
            assert_eq!(
                (a.number, a.timestamp, a.link_type, &a.data[..]),
                (
                    1,
                    Duration::from_millis(1500),
                    LinkType::Ethernet,
                    &b"eth"[..]
                )
            );
            let b = r.next().unwrap().unwrap();
            assert_eq!(
                (b.number, b.timestamp, b.link_type, &b.data[..]),
                (2, Duration::new(102, 1), LinkType::LinuxSll2, &b"sll2"[..])
            );
            let c = r.next().unwrap().unwrap_err();
            assert!(!c.is_fatal());
            assert!(
                matches!(
                    c,
                    CaptureError::UnsupportedLinkType {
                        link_type: 105,
                        interface: Some(2)
                    }
                ),
                "{c:?}"
            );
            assert_eq!(
                c.to_string(),
                "unsupported link type 105 (IEEE802_11) on interface 2"
            );
            assert_eq!(r.frames_read(), 3);
            let d = r.next().unwrap().unwrap();
            assert_eq!(
                (d.number, d.timestamp, d.link_type, &d.data[..]),
                (4, Duration::from_millis(3500), LinkType::RawIp, &b"ip"[..])
            );
            let e = r.next().unwrap().unwrap();
            assert_eq!((e.number, &e.data[..]), (5, &b"simpl"[..]));
            assert!(r.next().is_none());

            // A second section starts over with its own interfaces.
            let mut w = PcapNgWriter::with_endianness(bytes, endianness).unwrap();
            w.write_block(&idb(101, vec![])).unwrap();
            w.write_block(&epb(0, 1, b"raw")).unwrap();
            let recs: Vec<_> = CaptureReader::new(&w.into_inner()[..])
                .unwrap()
                .filter_map(|r| r.ok())
                .collect();
            assert_eq!(recs.len(), 5);
            assert_eq!(recs[4].number, 6);
            assert_eq!(recs[4].link_type, LinkType::RawIp);
        }
    }

    #[test]
    fn unsupported_pcap_link_type_names_it() {
        let mut bytes = pcap(LinkType::Ethernet);
        bytes[20..24].copy_from_slice(&105u32.to_le_bytes());
        let e = CaptureReader::new(&bytes[..]).unwrap_err();
        assert_eq!(e.to_string(), "unsupported link type 105 (IEEE802_11)");
        bytes[20..24].copy_from_slice(&4000u32.to_le_bytes());
        let e = CaptureReader::new(&bytes[..]).unwrap_err();
        assert_eq!(e.to_string(), "unsupported link type 4000 (unknown)");
        for (n, link) in [
            (12u32, LinkType::RawIp),
            (14, LinkType::RawIp),
            (228, LinkType::RawIp),
            (229, LinkType::RawIp),
            (113, LinkType::LinuxSll),
        ] {
            bytes[20..24].copy_from_slice(&n.to_le_bytes());
            assert_eq!(
                CaptureReader::new(&bytes[..]).unwrap().link_type(),
                Some(link)
            );
        }
    }

    #[test]
    fn not_a_capture() {
        assert!(matches!(read_all(b""), Err(CaptureError::Empty)));
        assert!(matches!(
            read_all(b"\xd4\xc3"),
            Err(CaptureError::TruncatedHeader)
        ));
        let e = read_all(b"hello, world").unwrap_err();
        assert!(matches!(e, CaptureError::NotACapture { .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            "not a pcap or pcapng file (it starts with 68 65 6c 6c)"
        );
    }

    fn pcapng() -> Vec<u8> {
        let mut w = PcapNgWriter::with_endianness(Vec::new(), Endianness::Little).unwrap();
        w.write_block(&idb(1, vec![InterfaceDescriptionOption::IfTsResol(9)]))
            .unwrap();
        for (t, d) in frames() {
            w.write_block(&epb(0, t.as_nanos() as u64, &d)).unwrap();
        }
        w.into_inner()
    }

    #[test]
    fn truncated_files_are_errors() {
        for bytes in [pcap(LinkType::Ethernet), pcapng()] {
            let whole = read_all(&bytes).unwrap();
            assert_eq!(whole.len(), 5);
            for cut in 0..bytes.len() {
                let mut got = vec![];
                let mut err = None;
                match CaptureReader::new(&bytes[..cut]) {
                    Err(e) => err = Some(e),
                    Ok(r) => {
                        for rec in r {
                            match rec {
                                Ok(rec) => got.push(rec),
                                Err(e) => err = Some(e),
                            }
                        }
                    }
                }
                // Whatever was read is a prefix of the real frames.
                assert_eq!(got[..], whole[..got.len()], "cut at {cut}");
                match err {
                    Some(CaptureError::Truncated { frames }) => {
                        assert_eq!(frames, got.len() as u64)
                    }
                    Some(CaptureError::TruncatedHeader | CaptureError::Empty) => {
                        assert!(got.is_empty())
                    }
                    // Cut exactly between records.
                    None => assert!(got.len() < 5, "cut at {cut}"),
                    Some(e) => panic!("cut at {cut}: {e:?}"),
                }
            }
        }
    }

    /// Flipping bytes anywhere never panics and never loops: every read ends.
    #[test]
    fn corrupt_files_do_not_panic() {
        for bytes in [pcap(LinkType::Ethernet), pcapng()] {
            for at in 0..bytes.len() {
                for x in [0x01u8, 0x80, 0xff] {
                    let mut b = bytes.clone();
                    b[at] ^= x;
                    if let Ok(r) = CaptureReader::new(&b[..]) {
                        assert!(r.take(100).count() <= 6);
                    }
                }
            }
        }
    }

    #[test]
    fn corrupt_record_length() {
        let mut bytes = pcap(LinkType::Ethernet);
        // incl_len of frame 2 (header 24, record 1 = 16 + 20 bytes).
        let at = 24 + 16 + 20 + 8;
        bytes[at..at + 4].copy_from_slice(&0x0100_0000u32.to_le_bytes());
        let mut r = CaptureReader::new(&bytes[..]).unwrap();
        assert!(r.next().unwrap().is_ok());
        let e = r.next().unwrap().unwrap_err();
        assert!(matches!(e, CaptureError::Truncated { frames: 1 }), "{e:?}");
        assert!(r.next().is_none());
    }

    #[test]
    fn writer_limits() {
        let mut w = CaptureWriter::new(Vec::new(), LinkType::RawIp).unwrap();
        assert!(matches!(
            w.write(Duration::ZERO, &vec![0; WRITER_SNAPLEN as usize + 1]),
            Err(CaptureError::FrameTooLong { .. })
        ));
        assert!(matches!(
            w.write(Duration::from_secs(1 << 33), b"x"),
            Err(CaptureError::TimestampOutOfRange(_))
        ));
        w.write(Duration::from_nanos(1), b"x").unwrap();
        assert_eq!(w.finish().unwrap().len(), 24 + 16 + 1);
    }

    #[test]
    fn timestamp_resolutions() {
        let i = |tsresol, tsoffset| Interface {
            link: Ok(LinkType::Ethernet),
            snaplen: 0,
            tsresol,
            tsoffset,
        };
        assert_eq!(i(6, 0).timestamp(1_000_001), Duration::new(1, 1000));
        assert_eq!(i(0, 0).timestamp(3), Duration::from_secs(3));
        assert_eq!(i(12, 0).timestamp(5_000_000), Duration::from_micros(5));
        assert_eq!(i(0x81, 0).timestamp(3), Duration::from_millis(1500));
        assert_eq!(i(6, -1).timestamp(1_500_000), Duration::from_millis(500));
        assert_eq!(i(6, -10).timestamp(1), Duration::ZERO);
        // Nonsense resolutions do not overflow or panic.
        assert_eq!(i(127, 0).timestamp(u64::MAX), Duration::ZERO);
        assert_eq!(i(0xff, 0).timestamp(u64::MAX), Duration::ZERO);
        i(0, i64::MAX).timestamp(u64::MAX);
    }
}
