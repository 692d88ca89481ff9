//! Where each field of the transport headers sits, as the IBTA draws
//! them: byte offset from the start of the header, first bit counted from
//! that byte's most significant bit, width in bits. The header views
//! ([`super::Bth`], [`super::Reth`], ...) read the fields; this says where
//! they are, for tools that take a packet apart field by field (`rxe dump
//! --explain`, whose tests flip every bit of every entry and check that
//! exactly the view's accessor for it changes). Every header's fields
//! cover it whole, each bit once (tested here).

/// One field of a header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    /// The IBTA's name for it.
    pub name: &'static str,
    /// Byte offset from the start of the header.
    pub at: usize,
    /// First bit, counted from the most significant bit of byte `at`.
    pub bit: u8,
    /// Width in bits.
    pub width: u8,
}

const fn f(name: &'static str, at: usize, bit: u8, width: u8) -> Field {
    Field {
        name,
        at,
        bit,
        width,
    }
}

/// Base Transport Header (12 bytes): its fields in order.
pub mod bth {
    use super::{f, Field};

    /// `OpCode`: byte 0, 8 bits from bit 0.
    pub const OPCODE: Field = f("OpCode", 0, 0, 8);
    /// `SE`: byte 1, 1 bits from bit 0.
    pub const SE: Field = f("SE", 1, 0, 1);
    /// `M`: byte 1, 1 bits from bit 1.
    pub const M: Field = f("M", 1, 1, 1);
    /// `PadCnt`: byte 1, 2 bits from bit 2.
    pub const PADCNT: Field = f("PadCnt", 1, 2, 2);
    /// `TVer`: byte 1, 4 bits from bit 4.
    pub const TVER: Field = f("TVer", 1, 4, 4);
    /// `P_Key`: byte 2, 16 bits from bit 0.
    pub const P_KEY: Field = f("P_Key", 2, 0, 16);
    /// `FECN`: byte 4, 1 bits from bit 0.
    pub const FECN: Field = f("FECN", 4, 0, 1);
    /// `BECN`: byte 4, 1 bits from bit 1.
    pub const BECN: Field = f("BECN", 4, 1, 1);
    /// `Resv6`: byte 4, 6 bits from bit 2.
    pub const RESV6: Field = f("Resv6", 4, 2, 6);
    /// `DestQP`: byte 5, 24 bits from bit 0.
    pub const DESTQP: Field = f("DestQP", 5, 0, 24);
    /// `AckReq`: byte 8, 1 bits from bit 0.
    pub const ACKREQ: Field = f("AckReq", 8, 0, 1);
    /// `Resv7`: byte 8, 7 bits from bit 1.
    pub const RESV7: Field = f("Resv7", 8, 1, 7);
    /// `PSN`: byte 9, 24 bits from bit 0.
    pub const PSN: Field = f("PSN", 9, 0, 24);
    /// Every field, in order.
    pub const ALL: &[Field] = &[
        OPCODE, SE, M, PADCNT, TVER, P_KEY, FECN, BECN, RESV6, DESTQP, ACKREQ, RESV7, PSN,
    ];
    /// The header's length in bytes.
    pub const LEN: usize = 12;
}

/// Reliable Datagram ETH (4 bytes): its fields in order.
pub mod rdeth {
    use super::{f, Field};

    /// `Reserved`: byte 0, 8 bits from bit 0.
    pub const RESERVED_0_0: Field = f("Reserved", 0, 0, 8);
    /// `EE-Context`: byte 1, 24 bits from bit 0.
    pub const EE_CONTEXT: Field = f("EE-Context", 1, 0, 24);
    /// Every field, in order.
    pub const ALL: &[Field] = &[RESERVED_0_0, EE_CONTEXT];
    /// The header's length in bytes.
    pub const LEN: usize = 4;
}

/// Datagram ETH (8 bytes): its fields in order.
pub mod deth {
    use super::{f, Field};

    /// `Q_Key`: byte 0, 32 bits from bit 0.
    pub const Q_KEY: Field = f("Q_Key", 0, 0, 32);
    /// `Reserved`: byte 4, 8 bits from bit 0.
    pub const RESERVED_4_0: Field = f("Reserved", 4, 0, 8);
    /// `SrcQP`: byte 5, 24 bits from bit 0.
    pub const SRCQP: Field = f("SrcQP", 5, 0, 24);
    /// Every field, in order.
    pub const ALL: &[Field] = &[Q_KEY, RESERVED_4_0, SRCQP];
    /// The header's length in bytes.
    pub const LEN: usize = 8;
}

/// Flush ETH (4 bytes): its fields in order.
pub mod feth {
    use super::{f, Field};

    /// `Reserved`: byte 0, 26 bits from bit 0.
    pub const RESERVED_0_0: Field = f("Reserved", 0, 0, 26);
    /// `SEL`: byte 3, 2 bits from bit 2.
    pub const SEL: Field = f("SEL", 3, 2, 2);
    /// `PLT`: byte 3, 4 bits from bit 4.
    pub const PLT: Field = f("PLT", 3, 4, 4);
    /// Every field, in order.
    pub const ALL: &[Field] = &[RESERVED_0_0, SEL, PLT];
    /// The header's length in bytes.
    pub const LEN: usize = 4;
}

/// RDMA ETH (16 bytes): its fields in order.
pub mod reth {
    use super::{f, Field};

    /// `VA`: byte 0, 64 bits from bit 0.
    pub const VA: Field = f("VA", 0, 0, 64);
    /// `R_Key`: byte 8, 32 bits from bit 0.
    pub const R_KEY: Field = f("R_Key", 8, 0, 32);
    /// `DMALen`: byte 12, 32 bits from bit 0.
    pub const DMALEN: Field = f("DMALen", 12, 0, 32);
    /// Every field, in order.
    pub const ALL: &[Field] = &[VA, R_KEY, DMALEN];
    /// The header's length in bytes.
    pub const LEN: usize = 16;
}

/// Atomic ETH (28 bytes): its fields in order.
pub mod atomic_eth {
    use super::{f, Field};

    /// `VA`: byte 0, 64 bits from bit 0.
    pub const VA: Field = f("VA", 0, 0, 64);
    /// `R_Key`: byte 8, 32 bits from bit 0.
    pub const R_KEY: Field = f("R_Key", 8, 0, 32);
    /// `SwapDt/AddDt`: byte 12, 64 bits from bit 0.
    pub const SWAPDT_ADDDT: Field = f("SwapDt/AddDt", 12, 0, 64);
    /// `CmpDt`: byte 20, 64 bits from bit 0.
    pub const CMPDT: Field = f("CmpDt", 20, 0, 64);
    /// Every field, in order.
    pub const ALL: &[Field] = &[VA, R_KEY, SWAPDT_ADDDT, CMPDT];
    /// The header's length in bytes.
    pub const LEN: usize = 28;
}

/// ACK ETH (4 bytes): its fields in order.
pub mod aeth {
    use super::{f, Field};

    /// `Syndrome`: byte 0, 8 bits from bit 0.
    pub const SYNDROME: Field = f("Syndrome", 0, 0, 8);
    /// `Syndrome.Reserved`: byte 0, 1 bits from bit 0.
    pub const SYNDROME_RESERVED: Field = f("Syndrome.Reserved", 0, 0, 1);
    /// `Syndrome.Type`: byte 0, 2 bits from bit 1.
    pub const SYNDROME_TYPE: Field = f("Syndrome.Type", 0, 1, 2);
    /// `Syndrome.Value`: byte 0, 5 bits from bit 3.
    pub const SYNDROME_VALUE: Field = f("Syndrome.Value", 0, 3, 5);
    /// `MSN`: byte 1, 24 bits from bit 0.
    pub const MSN: Field = f("MSN", 1, 0, 24);
    /// Every field, in order.
    pub const ALL: &[Field] = &[
        SYNDROME,
        SYNDROME_RESERVED,
        SYNDROME_TYPE,
        SYNDROME_VALUE,
        MSN,
    ];
    /// The header's length in bytes.
    pub const LEN: usize = 4;
}

/// Atomic ACK ETH (8 bytes): its fields in order.
pub mod atomic_ack_eth {
    use super::{f, Field};

    /// `OrigRemDt`: byte 0, 64 bits from bit 0.
    pub const ORIGREMDT: Field = f("OrigRemDt", 0, 0, 64);
    /// Every field, in order.
    pub const ALL: &[Field] = &[ORIGREMDT];
    /// The header's length in bytes.
    pub const LEN: usize = 8;
}

/// Immediate Data (4 bytes): its fields in order.
pub mod immdt {
    use super::{f, Field};

    /// `ImmDt`: byte 0, 32 bits from bit 0.
    pub const IMMDT: Field = f("ImmDt", 0, 0, 32);
    /// Every field, in order.
    pub const ALL: &[Field] = &[IMMDT];
    /// The header's length in bytes.
    pub const LEN: usize = 4;
}

/// Invalidate ETH (4 bytes): its fields in order.
pub mod ieth {
    use super::{f, Field};

    /// `R_Key`: byte 0, 32 bits from bit 0.
    pub const R_KEY: Field = f("R_Key", 0, 0, 32);
    /// Every field, in order.
    pub const ALL: &[Field] = &[R_KEY];
    /// The header's length in bytes.
    pub const LEN: usize = 4;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each header's fields, in order, cover its bits once each (a dotted
    /// name is part of the field before it: the AETH's syndrome).
    #[test]
    fn fields_tile_every_header() {
        let headers: &[(&str, &[Field], usize)] = &[
            ("bth", bth::ALL, bth::LEN),
            ("rdeth", rdeth::ALL, rdeth::LEN),
            ("deth", deth::ALL, deth::LEN),
            ("feth", feth::ALL, feth::LEN),
            ("reth", reth::ALL, reth::LEN),
            ("atomic_eth", atomic_eth::ALL, atomic_eth::LEN),
            ("aeth", aeth::ALL, aeth::LEN),
            ("atomic_ack_eth", atomic_ack_eth::ALL, atomic_ack_eth::LEN),
            ("immdt", immdt::ALL, immdt::LEN),
            ("ieth", ieth::ALL, ieth::LEN),
        ];
        for &(name, fields, len) in headers {
            let mut next = 0usize;
            for fl in fields.iter().filter(|fl| !fl.name.contains('.')) {
                let start = fl.at * 8 + usize::from(fl.bit);
                assert_eq!(
                    start, next,
                    "{name}.{}: starts at bit {start}, not {next}",
                    fl.name
                );
                next = start + usize::from(fl.width);
            }
            assert_eq!(
                next,
                len * 8,
                "{name}: fields end at bit {next}, the header at {}",
                len * 8
            );
        }
    }
}
