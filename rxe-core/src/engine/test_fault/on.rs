//! The test faults themselves, in builds with the `test-fault` feature
//! (see the parent module for what each one does).

use crate::engine::MemTable;

/// A fault to put into the device on purpose (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TestFault {
    /// The QP stops answering anything once it receives this opcode.
    WedgeAfterOpcode(u8),
    /// The QP's packets are cut short once it receives this opcode.
    GarbleAfterOpcode(u8),
    /// RDMA WRITEs are executed without the remote-write permission.
    IgnoreWriteAccess,
    /// READs that start unaligned are answered with wrong bytes.
    CorruptUnalignedRead,
    /// An R_Key with the wrong variant reaches its slot's region.
    AcceptNeighbourRkey,
}

impl TestFault {
    /// Parses `wedge-after-opcode=0x0c`, `garble-after-opcode=12`,
    /// `ignore-write-access`, `corrupt-unaligned-read` or
    /// `accept-neighbour-rkey`.
    pub fn parse(s: &str) -> Result<TestFault, String> {
        match s.trim() {
            "ignore-write-access" => return Ok(TestFault::IgnoreWriteAccess),
            "corrupt-unaligned-read" => return Ok(TestFault::CorruptUnalignedRead),
            "accept-neighbour-rkey" => return Ok(TestFault::AcceptNeighbourRkey),
            _ => {}
        }
        let (name, val) = s
            .trim()
            .split_once('=')
            .ok_or_else(|| format!("{s:?}: want NAME=OPCODE"))?;
        let val = val.trim();
        let op = match val.strip_prefix("0x").or_else(|| val.strip_prefix("0X")) {
            Some(h) => u8::from_str_radix(h, 16),
            None => val.parse(),
        }
        .map_err(|_| format!("{s:?}: the opcode must be a byte (0x0c or 12)"))?;
        match name.trim() {
            "wedge-after-opcode" => Ok(TestFault::WedgeAfterOpcode(op)),
            "garble-after-opcode" => Ok(TestFault::GarbleAfterOpcode(op)),
            n => Err(format!(
                "{n:?}: the faults are wedge-after-opcode, garble-after-opcode, \
                 ignore-write-access, corrupt-unaligned-read and accept-neighbour-rkey"
            )),
        }
    }

    /// The opcode byte that trips the fault on a QP (`None`: a fault of
    /// every QP from the start).
    pub fn opcode(self) -> Option<u8> {
        match self {
            TestFault::WedgeAfterOpcode(o) | TestFault::GarbleAfterOpcode(o) => Some(o),
            TestFault::IgnoreWriteAccess
            | TestFault::CorruptUnalignedRead
            | TestFault::AcceptNeighbourRkey => None,
        }
    }

    /// Whether RDMA WRITEs skip the remote-write permission checks.
    pub(crate) fn ignores_write_access(f: Option<TestFault>) -> bool {
        f == Some(TestFault::IgnoreWriteAccess)
    }

    /// Whether the responses of a READ whose bytes start at `offset` in
    /// its region's memory are to be corrupted.
    pub(crate) fn corrupts_read(f: Option<TestFault>, offset: usize) -> bool {
        f == Some(TestFault::CorruptUnalignedRead) && !offset.is_multiple_of(8)
    }

    /// Corrupts a READ response's payload, already read from the region
    /// into the packet: its first byte inverted.
    pub(crate) fn corrupt(payload: &mut [u8]) {
        if let Some(b) = payload.first_mut() {
            *b = !*b;
        }
    }

    /// The R_Key a request's `rkey` is checked as: itself, or under
    /// `accept-neighbour-rkey` the key of the live entry in its slot.
    pub(crate) fn remote_key(f: Option<TestFault>, mem: &MemTable, rkey: u32) -> u32 {
        if f == Some(TestFault::AcceptNeighbourRkey) {
            mem.key_in_slot(rkey).unwrap_or(rkey)
        } else {
            rkey
        }
    }

    /// Whether the fault, once tripped, silences the QP.
    pub(crate) fn wedges(self) -> bool {
        matches!(self, TestFault::WedgeAfterOpcode(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses() {
        assert_eq!(
            TestFault::parse("wedge-after-opcode=0x0c"),
            Ok(TestFault::WedgeAfterOpcode(0x0c))
        );
        assert_eq!(
            TestFault::parse(" garble-after-opcode = 12 "),
            Ok(TestFault::GarbleAfterOpcode(12))
        );
        assert!(TestFault::parse("wedge-after-opcode").is_err());
        assert!(TestFault::parse("wedge-after-opcode=0x100").is_err());
        assert!(TestFault::parse("accept-anything=1").is_err());
        assert_eq!(
            TestFault::parse(" ignore-write-access "),
            Ok(TestFault::IgnoreWriteAccess)
        );
        assert!(TestFault::parse("ignore-write-access=1").is_err());
        assert_eq!(
            TestFault::parse("corrupt-unaligned-read"),
            Ok(TestFault::CorruptUnalignedRead)
        );
        assert_eq!(TestFault::CorruptUnalignedRead.opcode(), None);
        let f = Some(TestFault::CorruptUnalignedRead);
        assert!(TestFault::corrupts_read(f, 4097));
        assert!(!TestFault::corrupts_read(f, 4096));
        assert!(!TestFault::corrupts_read(None, 4097));
        assert!(!TestFault::corrupts_read(
            Some(TestFault::IgnoreWriteAccess),
            1
        ));
        let mut b = [0x0f, 1];
        TestFault::corrupt(&mut b);
        assert_eq!(b, [0xf0, 1]);
        TestFault::corrupt(&mut []);
        assert_eq!(
            TestFault::parse(" accept-neighbour-rkey"),
            Ok(TestFault::AcceptNeighbourRkey)
        );
        assert_eq!(TestFault::AcceptNeighbourRkey.opcode(), None);
        assert_eq!(TestFault::IgnoreWriteAccess.opcode(), None);
        assert!(!TestFault::IgnoreWriteAccess.wedges());
    }

    #[test]
    fn garbled_packets_do_not_parse_but_keep_their_qpn() {
        use crate::psn::Psn;
        use crate::wire::{AethRepr, AethSyndrome, BthRepr, Opcode, Packet, PacketRepr};
        // The shortest packet a QP sends: an ACK (BTH, AETH, ICRC).
        let mut r = PacketRepr::new(BthRepr {
            opcode: Opcode::RC_ACKNOWLEDGE,
            solicited: false,
            mig_req: false,
            pad_count: 0,
            pkey: 0xffff,
            fecn: false,
            becn: false,
            dest_qp: 0x12_3456,
            ack_req: false,
            psn: Psn::new(7),
        });
        r.aeth = Some(AethRepr {
            syndrome: AethSyndrome::Ack { credits: 31 },
            msn: 1,
        });
        let mut b = vec![0u8; r.buffer_len()];
        r.emit(&mut b).unwrap();
        assert!(Packet::new_checked(&b[..]).is_ok());
        b.truncate(super::super::GARBLE_LEN);
        assert!(Packet::new_checked(&b[..]).is_err());
        assert_eq!(u32::from_be_bytes([0, b[5], b[6], b[7]]), 0x12_3456);
    }
}

#[cfg(test)]
mod neighbour_key_tests {
    use super::*;
    use crate::engine::mem::{PdId, VecMemory};
    use crate::types::Access;
    use std::sync::Arc;

    /// Under `accept-neighbour-rkey` a key with its variant bits wrong
    /// reaches the region, with the region's own checks; another slot's
    /// key, and a key of a region that is gone, reach nothing.
    #[test]
    fn a_neighbour_key_reaches_its_slot_and_nothing_else() {
        let f = Some(TestFault::AcceptNeighbourRkey);
        let mut t = MemTable::new(9);
        let pd = PdId(1);
        let mem = Arc::new(VecMemory::from_vec((0..64).collect()));
        let keys = t
            .reg_mr(pd, mem, 0x1000, Access::LOCAL_WRITE | Access::REMOTE_READ)
            .unwrap();
        let k = keys.rkey;
        for x in [1, 0x80, 0xff] {
            let n = k ^ x;
            assert!(t.remote(pd, 1, n, 0x1000, 8, Access::REMOTE_READ).is_err());
            assert_eq!(TestFault::remote_key(None, &t, n), n);
            let got = TestFault::remote_key(f, &t, n);
            assert_eq!(got, k);
            // Still the region's own range, rights and PD.
            assert!(t.remote(pd, 1, got, 0x1000, 8, Access::REMOTE_READ).is_ok());
            assert!(t
                .remote(pd, 1, got, 0x1039, 8, Access::REMOTE_READ)
                .is_err());
            assert!(t
                .remote(pd, 1, got, 0x1000, 8, Access::REMOTE_WRITE)
                .is_err());
            assert!(t
                .remote(PdId(2), 1, got, 0x1000, 8, Access::REMOTE_READ)
                .is_err());
        }
        // Another slot: as it was.
        assert_eq!(TestFault::remote_key(f, &t, k ^ 0x100), k ^ 0x100);
        // Gone: names nothing.
        t.dereg_mr(k).unwrap();
        assert_eq!(TestFault::remote_key(f, &t, k ^ 1), k ^ 1);
    }
}
