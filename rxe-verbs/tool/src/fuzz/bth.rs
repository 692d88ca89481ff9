//! The BTH helpers that every packet builder and reader of the fuzzer
//! shares: a well-behaved requester's BTH, and the destination QP read
//! from raw bytes.

use rxe_core::psn::Psn;
use rxe_core::wire::{BthRepr, Opcode};

/// A BTH with the defaults of a well-behaved requester.
pub(crate) fn bth_repr(op: Opcode, qpn: u32, psn: Psn, ack_req: bool) -> BthRepr {
    BthRepr {
        opcode: op,
        solicited: false,
        mig_req: false,
        pad_count: 0,
        pkey: 0xffff,
        fecn: false,
        becn: false,
        dest_qp: qpn & 0xff_ffff,
        ack_req,
        psn,
    }
}

/// The destination QP of a BTH (the first 8 bytes must be there).
pub(crate) fn bth_qpn(b: &[u8]) -> u32 {
    u32::from_be_bytes([0, b[5], b[6], b[7]])
}
