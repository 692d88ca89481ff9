//! The opcode table: one entry per BTH opcode, read by every parser and check.
//!
//! The BTH opcode's top three bits name the transport (RC `000`, UC `001`,
//! RD `010`, UD `011`, CNP `100`) and the low five bits the operation. Each
//! entry says which extension headers follow the BTH (in wire order), whether
//! a payload may follow, where the packet sits in a message
//! (first/middle/last/only) and which QP types may send it. The set of opcodes
//! is the one the Linux kernel's `rdma_rxe` knows, plus the RoCE v2 CNP.

use bitflags::bitflags;
use core::fmt;

bitflags! {
    /// Extension headers that may follow the BTH. Their order on the wire is
    /// the order of the bits here (see [`ExtHeaders::WIRE_ORDER`]).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct ExtHeaders: u16 {
        /// Reliable Datagram Extended Transport Header (4 bytes).
        const RDETH = 1 << 0;
        /// Datagram Extended Transport Header (8 bytes).
        const DETH = 1 << 1;
        /// Flush Extended Transport Header (4 bytes).
        const FETH = 1 << 2;
        /// RDMA Extended Transport Header (16 bytes).
        const RETH = 1 << 3;
        /// Atomic Extended Transport Header (28 bytes).
        const ATOMIC_ETH = 1 << 4;
        /// ACK Extended Transport Header (4 bytes).
        const AETH = 1 << 5;
        /// Atomic Acknowledge Extended Transport Header (8 bytes).
        const ATOMIC_ACK_ETH = 1 << 6;
        /// Immediate data (4 bytes).
        const IMMDT = 1 << 7;
        /// Invalidate Extended Transport Header (4 bytes).
        const IETH = 1 << 8;
        /// The 16 reserved bytes of a CNP.
        const CNP_PAD = 1 << 9;
    }
}

impl ExtHeaders {
    /// Every extension header with its length, in the order they appear on
    /// the wire after the BTH.
    pub const WIRE_ORDER: [(ExtHeaders, usize); 10] = [
        (ExtHeaders::RDETH, 4),
        (ExtHeaders::DETH, 8),
        (ExtHeaders::FETH, 4),
        (ExtHeaders::RETH, 16),
        (ExtHeaders::ATOMIC_ETH, 28),
        (ExtHeaders::AETH, 4),
        (ExtHeaders::ATOMIC_ACK_ETH, 8),
        (ExtHeaders::IMMDT, 4),
        (ExtHeaders::IETH, 4),
        (ExtHeaders::CNP_PAD, 16),
    ];

    /// Total length in bytes of these extension headers: two lookups,
    /// one for each half of the ten bits (the length of a packet's headers
    /// is asked for several times per packet sent and received).
    pub const fn byte_len(self) -> usize {
        let b = self.bits() as usize;
        (LEN_LOW[b & 0x1f] + LEN_HIGH[(b >> 5) & 0x1f]) as usize
    }

    /// Byte offset of `header` counted from the end of the BTH, if present.
    pub fn offset_of(self, header: ExtHeaders) -> Option<usize> {
        if !self.contains(header) {
            return None;
        }
        let mut off = 0;
        for (h, n) in Self::WIRE_ORDER {
            if h == header {
                return Some(off);
            }
            if self.contains(h) {
                off += n;
            }
        }
        None
    }
}

/// [`ExtHeaders::byte_len`] of every set of the first five headers (bits
/// 0 to 4), and of the last five (bits 5 to 9, shifted down).
const LEN_LOW: [u8; 32] = lengths(0);
const LEN_HIGH: [u8; 32] = lengths(5);

const fn lengths(first: usize) -> [u8; 32] {
    let mut t = [0u8; 32];
    let mut set = 0;
    while set < 32 {
        let mut i = 0;
        while i < 5 {
            if set >> i & 1 != 0 {
                t[set] += ExtHeaders::WIRE_ORDER[first + i].1 as u8;
            }
            i += 1;
        }
        set += 1;
    }
    t
}

bitflags! {
    /// QP types that may send a given opcode.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct QpTypes: u8 {
        /// Reliable Connected.
        const RC = 1 << 0;
        /// Unreliable Connected.
        const UC = 1 << 1;
        /// Reliable Datagram (parsed, not implemented as a QP type).
        const RD = 1 << 2;
        /// Unreliable Datagram (also the GSI QP1).
        const UD = 1 << 3;
    }
}

/// The transport named by the top three bits of the opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Reliable Connected (`000xxxxx`).
    Rc,
    /// Unreliable Connected (`001xxxxx`).
    Uc,
    /// Reliable Datagram (`010xxxxx`).
    Rd,
    /// Unreliable Datagram (`011xxxxx`).
    Ud,
    /// Congestion Notification Packet (`100xxxxx`, RoCE v2 annex).
    Cnp,
}

impl Transport {
    /// The prefix used in IBTA-style opcode names.
    pub const fn prefix(self) -> &'static str {
        match self {
            Transport::Rc => "RC",
            Transport::Uc => "UC",
            Transport::Rd => "RD",
            Transport::Ud => "UD",
            Transport::Cnp => "CNP",
        }
    }
}

/// What a packet asks for or answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    /// SEND (with or without immediate or invalidate).
    Send,
    /// RDMA WRITE (with or without immediate).
    RdmaWrite,
    /// RDMA READ request.
    ReadRequest,
    /// RDMA READ response (also answers FLUSH and ATOMIC WRITE).
    ReadResponse,
    /// Acknowledge: ACK, NAK or RNR NAK in the AETH.
    Acknowledge,
    /// Atomic acknowledge: AETH plus the original remote value.
    AtomicAcknowledge,
    /// Atomic compare-and-swap.
    CompareSwap,
    /// Atomic fetch-and-add.
    FetchAdd,
    /// FLUSH (IBTA 1.5 persistence extension).
    Flush,
    /// ATOMIC WRITE (IBTA 1.5): an 8-byte write performed atomically.
    AtomicWrite,
    /// Congestion notification (RoCE v2).
    Cnp,
}

impl Operation {
    /// Whether this is a request (sent by a requester) rather than a
    /// response (sent by a responder). CNPs are neither; they count as
    /// requests here since they are not part of any acknowledged stream.
    pub const fn is_request(self) -> bool {
        !matches!(
            self,
            Operation::ReadResponse | Operation::Acknowledge | Operation::AtomicAcknowledge
        )
    }
}

/// Where a packet sits in a multi-packet message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Position {
    /// First packet of a message of two or more packets.
    First,
    /// A packet between first and last.
    Middle,
    /// Last packet of a message of two or more packets.
    Last,
    /// The whole message in one packet.
    Only,
}

impl Position {
    /// True for `First` and `Only`: the packet starts a message.
    pub const fn starts(self) -> bool {
        matches!(self, Position::First | Position::Only)
    }
    /// True for `Last` and `Only`: the packet ends a message.
    pub const fn ends(self) -> bool {
        matches!(self, Position::Last | Position::Only)
    }
}

/// One row of the opcode table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpcodeInfo {
    /// The opcode byte.
    pub code: u8,
    /// IBTA-style name, e.g. `RC_SEND_ONLY`, `RC_RDMA_READ_REQUEST`.
    pub name: &'static str,
    /// The transport the opcode belongs to.
    pub transport: Transport,
    /// The operation.
    pub operation: Operation,
    /// First/middle/last/only.
    pub position: Position,
    /// Extension headers following the BTH.
    pub headers: ExtHeaders,
    /// Whether payload bytes may follow the headers.
    pub payload: bool,
    /// QP types allowed to send it.
    pub qp_types: QpTypes,
}

impl OpcodeInfo {
    /// Length of the BTH plus extension headers.
    pub const fn header_len(&self) -> usize {
        super::bth::BTH_LEN + self.headers.byte_len()
    }
    /// Whether the packet carries immediate data.
    pub fn has_immediate(&self) -> bool {
        self.headers.contains(ExtHeaders::IMMDT)
    }
    /// Whether the packet carries an invalidate key.
    pub fn has_invalidate(&self) -> bool {
        self.headers.contains(ExtHeaders::IETH)
    }
}

/// A BTH opcode. Any byte value is representable; [`Opcode::info`] says
/// whether it is one we know.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Opcode(pub u8);

macro_rules! opcodes {
    ($( $konst:ident = $code:literal, $transport:ident, $op:ident, $pos:ident, [$($hdr:ident)|*], $payload:literal; )*) => {
        impl Opcode {
            $(
                #[doc = concat!("`", stringify!($konst), "` (", stringify!($code), ")")]
                pub const $konst: Opcode = Opcode($code);
            )*
        }

        /// Every opcode we know, in numeric order.
        pub const ALL: &[OpcodeInfo] = &[
            $(
                OpcodeInfo {
                    code: $code,
                    name: stringify!($konst),
                    transport: Transport::$transport,
                    operation: Operation::$op,
                    position: Position::$pos,
                    headers: ExtHeaders::empty() $(.union(ExtHeaders::$hdr))*,
                    payload: $payload,
                    qp_types: qp_types_of(Transport::$transport),
                },
            )*
        ];
    };
}

const fn qp_types_of(t: Transport) -> QpTypes {
    match t {
        Transport::Rc => QpTypes::RC,
        Transport::Uc => QpTypes::UC,
        Transport::Rd => QpTypes::RD,
        Transport::Ud => QpTypes::UD,
        // A CNP refers to the QP whose traffic was marked: any QP type.
        Transport::Cnp => QpTypes::RC.union(QpTypes::UC).union(QpTypes::UD),
    }
}

opcodes! {
    RC_SEND_FIRST = 0x00, Rc, Send, First, [], true;
    RC_SEND_MIDDLE = 0x01, Rc, Send, Middle, [], true;
    RC_SEND_LAST = 0x02, Rc, Send, Last, [], true;
    RC_SEND_LAST_WITH_IMMEDIATE = 0x03, Rc, Send, Last, [IMMDT], true;
    RC_SEND_ONLY = 0x04, Rc, Send, Only, [], true;
    RC_SEND_ONLY_WITH_IMMEDIATE = 0x05, Rc, Send, Only, [IMMDT], true;
    RC_RDMA_WRITE_FIRST = 0x06, Rc, RdmaWrite, First, [RETH], true;
    RC_RDMA_WRITE_MIDDLE = 0x07, Rc, RdmaWrite, Middle, [], true;
    RC_RDMA_WRITE_LAST = 0x08, Rc, RdmaWrite, Last, [], true;
    RC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x09, Rc, RdmaWrite, Last, [IMMDT], true;
    RC_RDMA_WRITE_ONLY = 0x0a, Rc, RdmaWrite, Only, [RETH], true;
    RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x0b, Rc, RdmaWrite, Only, [RETH | IMMDT], true;
    RC_RDMA_READ_REQUEST = 0x0c, Rc, ReadRequest, Only, [RETH], false;
    RC_RDMA_READ_RESPONSE_FIRST = 0x0d, Rc, ReadResponse, First, [AETH], true;
    RC_RDMA_READ_RESPONSE_MIDDLE = 0x0e, Rc, ReadResponse, Middle, [], true;
    RC_RDMA_READ_RESPONSE_LAST = 0x0f, Rc, ReadResponse, Last, [AETH], true;
    RC_RDMA_READ_RESPONSE_ONLY = 0x10, Rc, ReadResponse, Only, [AETH], true;
    RC_ACKNOWLEDGE = 0x11, Rc, Acknowledge, Only, [AETH], false;
    RC_ATOMIC_ACKNOWLEDGE = 0x12, Rc, AtomicAcknowledge, Only, [AETH | ATOMIC_ACK_ETH], false;
    RC_COMPARE_SWAP = 0x13, Rc, CompareSwap, Only, [ATOMIC_ETH], false;
    RC_FETCH_ADD = 0x14, Rc, FetchAdd, Only, [ATOMIC_ETH], false;
    RC_SEND_LAST_WITH_INVALIDATE = 0x16, Rc, Send, Last, [IETH], true;
    RC_SEND_ONLY_WITH_INVALIDATE = 0x17, Rc, Send, Only, [IETH], true;
    RC_FLUSH = 0x1c, Rc, Flush, Only, [FETH | RETH], false;
    RC_ATOMIC_WRITE = 0x1d, Rc, AtomicWrite, Only, [RETH], true;

    UC_SEND_FIRST = 0x20, Uc, Send, First, [], true;
    UC_SEND_MIDDLE = 0x21, Uc, Send, Middle, [], true;
    UC_SEND_LAST = 0x22, Uc, Send, Last, [], true;
    UC_SEND_LAST_WITH_IMMEDIATE = 0x23, Uc, Send, Last, [IMMDT], true;
    UC_SEND_ONLY = 0x24, Uc, Send, Only, [], true;
    UC_SEND_ONLY_WITH_IMMEDIATE = 0x25, Uc, Send, Only, [IMMDT], true;
    UC_RDMA_WRITE_FIRST = 0x26, Uc, RdmaWrite, First, [RETH], true;
    UC_RDMA_WRITE_MIDDLE = 0x27, Uc, RdmaWrite, Middle, [], true;
    UC_RDMA_WRITE_LAST = 0x28, Uc, RdmaWrite, Last, [], true;
    UC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x29, Uc, RdmaWrite, Last, [IMMDT], true;
    UC_RDMA_WRITE_ONLY = 0x2a, Uc, RdmaWrite, Only, [RETH], true;
    UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x2b, Uc, RdmaWrite, Only, [RETH | IMMDT], true;

    RD_SEND_FIRST = 0x40, Rd, Send, First, [RDETH | DETH], true;
    RD_SEND_MIDDLE = 0x41, Rd, Send, Middle, [RDETH | DETH], true;
    RD_SEND_LAST = 0x42, Rd, Send, Last, [RDETH | DETH], true;
    RD_SEND_LAST_WITH_IMMEDIATE = 0x43, Rd, Send, Last, [RDETH | DETH | IMMDT], true;
    RD_SEND_ONLY = 0x44, Rd, Send, Only, [RDETH | DETH], true;
    RD_SEND_ONLY_WITH_IMMEDIATE = 0x45, Rd, Send, Only, [RDETH | DETH | IMMDT], true;
    RD_RDMA_WRITE_FIRST = 0x46, Rd, RdmaWrite, First, [RDETH | DETH | RETH], true;
    RD_RDMA_WRITE_MIDDLE = 0x47, Rd, RdmaWrite, Middle, [RDETH | DETH], true;
    RD_RDMA_WRITE_LAST = 0x48, Rd, RdmaWrite, Last, [RDETH | DETH], true;
    RD_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x49, Rd, RdmaWrite, Last, [RDETH | DETH | IMMDT], true;
    RD_RDMA_WRITE_ONLY = 0x4a, Rd, RdmaWrite, Only, [RDETH | DETH | RETH], true;
    RD_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x4b, Rd, RdmaWrite, Only, [RDETH | DETH | RETH | IMMDT], true;
    RD_RDMA_READ_REQUEST = 0x4c, Rd, ReadRequest, Only, [RDETH | DETH | RETH], false;
    RD_RDMA_READ_RESPONSE_FIRST = 0x4d, Rd, ReadResponse, First, [RDETH | AETH], true;
    RD_RDMA_READ_RESPONSE_MIDDLE = 0x4e, Rd, ReadResponse, Middle, [RDETH], true;
    RD_RDMA_READ_RESPONSE_LAST = 0x4f, Rd, ReadResponse, Last, [RDETH | AETH], true;
    RD_RDMA_READ_RESPONSE_ONLY = 0x50, Rd, ReadResponse, Only, [RDETH | AETH], true;
    RD_ACKNOWLEDGE = 0x51, Rd, Acknowledge, Only, [RDETH | AETH], false;
    RD_ATOMIC_ACKNOWLEDGE = 0x52, Rd, AtomicAcknowledge, Only, [RDETH | AETH | ATOMIC_ACK_ETH], false;
    RD_COMPARE_SWAP = 0x53, Rd, CompareSwap, Only, [RDETH | DETH | ATOMIC_ETH], false;
    RD_FETCH_ADD = 0x54, Rd, FetchAdd, Only, [RDETH | DETH | ATOMIC_ETH], false;

    UD_SEND_ONLY = 0x64, Ud, Send, Only, [DETH], true;
    UD_SEND_ONLY_WITH_IMMEDIATE = 0x65, Ud, Send, Only, [DETH | IMMDT], true;

    CNP = 0x81, Cnp, Cnp, Only, [CNP_PAD], false;
}

/// Lookup table from opcode byte to its row in [`ALL`].
const INDEX: [u8; 256] = {
    let mut idx = [u8::MAX; 256];
    let mut i = 0;
    while i < ALL.len() {
        idx[ALL[i].code as usize] = i as u8;
        i += 1;
    }
    idx
};

impl Opcode {
    /// The table row for this opcode, or `None` for an opcode we do not know.
    pub fn info(self) -> Option<&'static OpcodeInfo> {
        match INDEX[self.0 as usize] {
            u8::MAX => None,
            i => Some(&ALL[i as usize]),
        }
    }

    /// IBTA-style name (`RC_SEND_ONLY`), or `None` if unknown.
    pub fn name(self) -> Option<&'static str> {
        self.info().map(|i| i.name)
    }
}

impl fmt::Debug for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => write!(f, "{n}({:#04x})", self.0),
            None => write!(f, "Opcode({:#04x})", self.0),
        }
    }
}

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "UNKNOWN_{:#04x}", self.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transport_bits_match_transport() {
        for info in ALL {
            let expected = match info.code >> 5 {
                0 => Transport::Rc,
                1 => Transport::Uc,
                2 => Transport::Rd,
                3 => Transport::Ud,
                4 => Transport::Cnp,
                _ => panic!("opcode {:#x} has a reserved transport", info.code),
            };
            assert_eq!(info.transport, expected, "{}", info.name);
            assert!(
                info.name.starts_with(info.transport.prefix()),
                "{}",
                info.name
            );
        }
    }

    #[test]
    fn table_is_sorted_and_indexed() {
        assert!(ALL.windows(2).all(|w| w[0].code < w[1].code));
        assert_eq!(Opcode(0x15).info(), None);
        assert_eq!(Opcode(0xff).info(), None);
        assert_eq!(Opcode::RC_FLUSH.info().unwrap().name, "RC_FLUSH");
        // 26 RC (incl. FLUSH, ATOMIC WRITE) ... as the kernel's rxe has them, plus CNP.
        assert_eq!(ALL.len(), 25 + 12 + 21 + 2 + 1);
    }

    #[test]
    fn byte_len_sums_the_headers_present() {
        // The tables take header i of WIRE_ORDER to be bit i.
        for (i, (h, _)) in ExtHeaders::WIRE_ORDER.iter().enumerate() {
            assert_eq!(h.bits(), 1 << i);
        }
        for bits in 0..1u16 << 10 {
            let h = ExtHeaders::from_bits_retain(bits);
            let sum: usize = ExtHeaders::WIRE_ORDER
                .iter()
                .filter(|(x, _)| h.contains(*x))
                .map(|(_, n)| n)
                .sum();
            assert_eq!(h.byte_len(), sum, "{h:?}");
        }
        // Bits no header has count nothing.
        assert_eq!(ExtHeaders::from_bits_retain(0xfc00).byte_len(), 0);
    }

    #[test]
    fn header_lengths_follow_the_kernel_table() {
        let len = |o: Opcode| o.info().unwrap().header_len();
        assert_eq!(len(Opcode::RC_SEND_ONLY), 12);
        assert_eq!(len(Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE), 12 + 16 + 4);
        assert_eq!(len(Opcode::RC_ATOMIC_ACKNOWLEDGE), 12 + 4 + 8);
        assert_eq!(len(Opcode::RC_COMPARE_SWAP), 12 + 28);
        assert_eq!(len(Opcode::RC_FLUSH), 12 + 4 + 16);
        assert_eq!(
            len(Opcode::RD_RDMA_WRITE_ONLY_WITH_IMMEDIATE),
            12 + 4 + 8 + 16 + 4
        );
        assert_eq!(len(Opcode::UD_SEND_ONLY_WITH_IMMEDIATE), 12 + 8 + 4);
        assert_eq!(len(Opcode::CNP), 12 + 16);
        let h = Opcode::RD_RDMA_WRITE_ONLY_WITH_IMMEDIATE
            .info()
            .unwrap()
            .headers;
        assert_eq!(h.offset_of(ExtHeaders::RDETH), Some(0));
        assert_eq!(h.offset_of(ExtHeaders::DETH), Some(4));
        assert_eq!(h.offset_of(ExtHeaders::RETH), Some(12));
        assert_eq!(h.offset_of(ExtHeaders::IMMDT), Some(28));
        assert_eq!(h.offset_of(ExtHeaders::AETH), None);
        let f = Opcode::RC_FLUSH.info().unwrap().headers;
        assert_eq!(f.offset_of(ExtHeaders::FETH), Some(0));
        assert_eq!(f.offset_of(ExtHeaders::RETH), Some(4));
    }

    #[test]
    fn positions_and_payload() {
        for info in ALL {
            if matches!(
                info.operation,
                Operation::Acknowledge
                    | Operation::AtomicAcknowledge
                    | Operation::ReadRequest
                    | Operation::CompareSwap
                    | Operation::FetchAdd
                    | Operation::Flush
                    | Operation::Cnp
            ) {
                assert!(!info.payload, "{}", info.name);
                assert_eq!(info.position, Position::Only, "{}", info.name);
            } else {
                assert!(info.payload, "{}", info.name);
            }
            // Only first/only packets of a WRITE carry the RETH.
            if info.operation == Operation::RdmaWrite {
                assert_eq!(
                    info.headers.contains(ExtHeaders::RETH),
                    info.position.starts(),
                    "{}",
                    info.name
                );
            }
        }
    }
}
