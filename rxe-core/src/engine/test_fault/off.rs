//! Builds without the `test-fault` feature: no fault can be named, so
//! every hook the engine calls answers "no fault" and compiles away.

use crate::engine::MemTable;

/// A fault to put into the device on purpose: none in this build (an
/// enum with no variants, so `Option<TestFault>` is always `None`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TestFault {}

impl TestFault {
    /// The opcode byte that trips the fault on a QP.
    pub fn opcode(self) -> Option<u8> {
        match self {}
    }

    /// Whether RDMA WRITEs skip the remote-write permission checks: never.
    pub(crate) fn ignores_write_access(_: Option<TestFault>) -> bool {
        false
    }

    /// Whether a READ's responses are to be corrupted: never.
    pub(crate) fn corrupts_read(_: Option<TestFault>, _offset: usize) -> bool {
        false
    }

    /// Corrupts a READ response's payload: never called in this build.
    pub(crate) fn corrupt(_payload: &mut [u8]) {}

    /// The R_Key a request's `rkey` is checked as: itself.
    pub(crate) fn remote_key(_: Option<TestFault>, _mem: &MemTable, rkey: u32) -> u32 {
        rkey
    }

    /// Whether the fault, once tripped, silences the QP.
    pub(crate) fn wedges(self) -> bool {
        match self {}
    }
}
