//! Our side's memory for an rping server's RDMA: the two buffers whose
//! address and R_Key the fuzzer SENDs it ([`super::rping`]), which the
//! session's minimal responder serves its READs from and lands its WRITEs
//! in ([`super::session`]). A plain type below both.

/// Where our two buffers are, as the server sees them: fixed, so that a
/// replayed round's SENDs point at the replaying connection's buffers too.
pub(crate) const START_VA: u64 = 0x0000_7e57_0000_0000;
pub(crate) const START_KEY: u32 = 0x0057_a201;
pub(crate) const RDMA_VA: u64 = 0x0000_7e57_0010_0000;
pub(crate) const RDMA_KEY: u32 = 0x00d4_7a02;

/// Our side's memory for the peer's RDMA: the start buffer it may READ,
/// the rdma buffer it may WRITE. Nothing else is served.
#[derive(Debug, Clone)]
pub(crate) struct LocalMem {
    pub start: Vec<u8>,
    pub rdma: Vec<u8>,
    /// Where the next WRITE MIDDLE or LAST lands (after a FIRST), and
    /// where the WRITE's DMA length ends.
    write_at: Option<(usize, usize)>,
    /// READs served, WRITE bytes taken, and requests refused.
    pub reads: u64,
    pub written: u64,
    pub refused: u64,
}

impl LocalMem {
    pub(crate) fn new(size: usize) -> LocalMem {
        LocalMem {
            start: vec![0; size],
            rdma: vec![0; size],
            write_at: None,
            reads: 0,
            written: 0,
            refused: 0,
        }
    }

    /// The bytes a READ of `len` at `va` with `rkey` returns, if it names
    /// the start buffer (or the rdma buffer: rping's rdma buffer is
    /// readable too) within its bounds.
    pub(crate) fn read(&self, va: u64, rkey: u32, len: u32) -> Option<&[u8]> {
        let (base, buf) = match rkey {
            START_KEY => (START_VA, &self.start),
            RDMA_KEY => (RDMA_VA, &self.rdma),
            _ => return None,
        };
        let off = usize::try_from(va.checked_sub(base)?).ok()?;
        let end = off.checked_add(len as usize)?;
        buf.get(off..end)
    }

    /// A WRITE FIRST or ONLY (`reth`: VA, R_Key and DMA length) or a later
    /// packet of one (`None`). Whether it landed.
    pub(crate) fn write(&mut self, reth: Option<(u64, u32, u32)>, data: &[u8], last: bool) -> bool {
        let (at, end) = match reth {
            Some((va, rkey, len)) => {
                let range = va
                    .checked_sub(RDMA_VA)
                    .and_then(|o| usize::try_from(o).ok())
                    .and_then(|o| o.checked_add(len as usize).map(|e| (o, e)))
                    .filter(|&(_, e)| e <= self.rdma.len());
                match range {
                    Some(r) if rkey == RDMA_KEY => r,
                    _ => {
                        self.write_at = None;
                        return false;
                    }
                }
            }
            None => match self.write_at {
                Some(r) => r,
                None => return false,
            },
        };
        let next = at + data.len();
        if next > end || (last && next != end) {
            self.write_at = None;
            return false;
        }
        self.rdma[at..next].copy_from_slice(data);
        self.written += data.len() as u64;
        self.write_at = (!last).then_some((next, end));
        true
    }
}
