//! Work requests in C: the API's `SendWr`s as a linked list of
//! `ibv_send_wr`, its `RecvWr`s as one of `ibv_recv_wr` (for QPs and
//! SRQs), and which request of a list the provider refused, and why.

use super::error::rc_errno;
use super::ffi::*;
use super::pd::NAh;
use crate::error::Error;
use rxe_core::engine::EngineError;
use rxe_core::types::{RecvWr, SendFlags, SendOpcode, SendWr, Sge};
use std::ffi::c_int;
use std::marker::PhantomData;
use std::ptr;
use std::sync::Arc;

fn sges(list: &[Sge]) -> impl Iterator<Item = ibv_sge> + '_ {
    list.iter().map(|s| ibv_sge {
        addr: s.addr,
        length: s.length,
        lkey: s.lkey,
    })
}

/// The error for work request `index` refused with `errno`.
fn wr_error(index: usize, wr_id: u64, errno: i32, queue: &'static str, cap: u32) -> Error {
    let source = match errno {
        libc::ENOMEM => EngineError::QueueFull {
            queue,
            capacity: cap as usize,
        },
        e => EngineError::InvalidArgument {
            name: "wr",
            reason: format!(
                "refused by the device ({})",
                std::io::Error::from_raw_os_error(e)
            ),
        },
    };
    Error::BadWorkRequest {
        index,
        wr_id,
        source,
    }
}

/// A linked list of `ibv_recv_wr` built from the API's work requests; the
/// storage does not move while the chain is posted.
pub(super) struct RecvChain {
    _sges: Vec<ibv_sge>,
    wrs: Vec<ibv_recv_wr>,
}

impl RecvChain {
    pub(super) fn new(list: &[RecvWr]) -> RecvChain {
        // Moving the Vecs into the struct later does not move their heap
        // storage, which is what the pointers point into.
        let mut sges: Vec<ibv_sge> = list.iter().flat_map(|w| sges(&w.sg_list)).collect();
        let base = sges.as_mut_ptr();
        let mut wrs: Vec<ibv_recv_wr> = Vec::with_capacity(list.len());
        let mut at = 0;
        for w in list {
            let sg_list = if w.sg_list.is_empty() {
                ptr::null_mut()
            } else {
                // SAFETY: `at` is within `sges`, which is not resized after.
                unsafe { base.add(at) }
            };
            wrs.push(ibv_recv_wr {
                wr_id: w.wr_id,
                next: ptr::null_mut(),
                sg_list,
                num_sge: w.sg_list.len() as c_int,
            });
            at += w.sg_list.len();
        }
        let p = wrs.as_mut_ptr();
        for i in 1..wrs.len() {
            // SAFETY: both indices are in bounds; the Vec is not resized
            // after, and the write goes through the same raw pointer.
            unsafe { (*p.add(i - 1)).next = p.add(i) };
        }
        RecvChain { _sges: sges, wrs }
    }

    pub(super) fn head(&mut self) -> *mut ibv_recv_wr {
        if self.wrs.is_empty() {
            ptr::null_mut()
        } else {
            self.wrs.as_mut_ptr()
        }
    }

    pub(super) fn result(
        &self,
        rc: c_int,
        bad: *mut ibv_recv_wr,
        list: &[RecvWr],
        queue: &'static str,
        cap: u32,
    ) -> Result<(), Error> {
        if rc == 0 {
            return Ok(());
        }
        let index = index_of(self.wrs.as_ptr(), bad, self.wrs.len());
        let wr_id = list.get(index).map_or(0, |w| w.wr_id);
        Err(wr_error(index, wr_id, rc_errno(rc), queue, cap))
    }
}

/// Which element of `base[..n]` `bad` points at (0 if none).
fn index_of<T>(base: *const T, bad: *const T, n: usize) -> usize {
    let off = (bad as usize).wrapping_sub(base as usize) / std::mem::size_of::<T>().max(1);
    if bad.is_null() || off >= n {
        0
    } else {
        off
    }
}

/// A linked list of `ibv_send_wr` built from the API's work requests, with
/// their scatter/gather entries; the storage does not move while the chain
/// is posted. It borrows the requests (an inline request's SGE points at
/// its bytes) and the address handles of the UD sends (`wr.ud.ah`), so
/// neither can go before the chain does.
pub(super) struct SendChain<'a> {
    _sges: Vec<ibv_sge>,
    wrs: Vec<ibv_send_wr>,
    /// The requests and address handles `new` was given, both `'a`.
    _borrows: PhantomData<&'a ()>,
}

impl<'a> SendChain<'a> {
    /// `ahs[i]` is the address handle of `list[i]`'s UD destination.
    pub(super) fn new(list: &'a [SendWr], ahs: &'a [Option<Arc<NAh>>]) -> SendChain<'a> {
        let count: usize = list
            .iter()
            .map(|w| {
                if w.inline_data.is_some() {
                    1
                } else {
                    w.sg_list.len()
                }
            })
            .sum();
        let mut sge_buf: Vec<ibv_sge> = Vec::with_capacity(count);
        for w in list {
            match &w.inline_data {
                // IBV_SEND_INLINE: the provider copies the bytes at post time.
                Some(d) => sge_buf.push(ibv_sge {
                    addr: d.as_ptr() as u64,
                    length: d.len() as u32,
                    lkey: 0,
                }),
                None => sge_buf.extend(sges(&w.sg_list)),
            }
        }
        let base = sge_buf.as_mut_ptr();
        let mut wrs: Vec<ibv_send_wr> = Vec::with_capacity(list.len());
        let mut at = 0;
        for (w, ah) in list.iter().zip(ahs) {
            let n = if w.inline_data.is_some() {
                1
            } else {
                w.sg_list.len()
            };
            let mut flags = 0;
            if w.flags.contains(SendFlags::FENCE) {
                flags |= IBV_SEND_FENCE;
            }
            if w.flags.contains(SendFlags::SIGNALED) {
                flags |= IBV_SEND_SIGNALED;
            }
            if w.flags.contains(SendFlags::SOLICITED) {
                flags |= IBV_SEND_SOLICITED;
            }
            if w.flags.contains(SendFlags::INLINE) || w.inline_data.is_some() {
                flags |= IBV_SEND_INLINE;
            }
            let wr = match (&w.ud, ah) {
                (Some(ud), Some(ah)) => wr_union {
                    ud: wr_ud {
                        ah: ah.ah,
                        remote_qpn: ud.remote_qpn,
                        remote_qkey: ud.remote_qkey,
                    },
                },
                _ => match w.opcode {
                    SendOpcode::AtomicCmpSwap | SendOpcode::AtomicFetchAdd => wr_union {
                        atomic: wr_atomic {
                            remote_addr: w.remote_addr,
                            compare_add: w.compare_add,
                            swap: w.swap,
                            rkey: w.rkey,
                        },
                    },
                    _ => wr_union {
                        rdma: wr_rdma {
                            remote_addr: w.remote_addr,
                            rkey: w.rkey,
                        },
                    },
                },
            };
            let imm = match w.opcode {
                // __be32 in memory: the soft stack's value goes on the wire
                // big-endian, so store its big-endian bytes.
                SendOpcode::SendWithImm | SendOpcode::RdmaWriteWithImm => w.imm_data.to_be(),
                SendOpcode::SendWithInv | SendOpcode::LocalInv => w.invalidate_rkey,
                _ => 0,
            };
            let sg_list = if n == 0 {
                ptr::null_mut()
            } else {
                // SAFETY: `at` is within `sge_buf`, which is not resized after.
                unsafe { base.add(at) }
            };
            // The rest is zero (bindgen's Default): `next` is linked below,
            // and the XRC and bind_mw/tso unions are unused here.
            let x = ibv_send_wr {
                wr_id: w.wr_id,
                sg_list,
                num_sge: n as c_int,
                opcode: wr_opcode(w.opcode),
                send_flags: flags,
                __bindgen_anon_1: send_wr_imm { imm_data: imm },
                wr,
                ..Default::default()
            };
            wrs.push(x);
            at += n;
        }
        let p = wrs.as_mut_ptr();
        for i in 1..wrs.len() {
            // SAFETY: in bounds; `wrs` is not resized after, and the write
            // goes through the same raw pointer.
            unsafe { (*p.add(i - 1)).next = p.add(i) };
        }
        SendChain {
            _sges: sge_buf,
            wrs,
            _borrows: PhantomData,
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.wrs.is_empty()
    }

    pub(super) fn head(&mut self) -> *mut ibv_send_wr {
        if self.wrs.is_empty() {
            ptr::null_mut()
        } else {
            self.wrs.as_mut_ptr()
        }
    }

    /// What posting the chain returned (`rc`, `bad`), as an error naming
    /// the refused request of `list`.
    pub(super) fn result(
        &self,
        rc: c_int,
        bad: *mut ibv_send_wr,
        list: &[SendWr],
        queue: &'static str,
        cap: u32,
    ) -> Result<(), Error> {
        if rc == 0 {
            return Ok(());
        }
        let index = index_of(self.wrs.as_ptr(), bad, self.wrs.len());
        let wr_id = list.get(index).map_or(0, |w| w.wr_id);
        Err(wr_error(index, wr_id, rc_errno(rc), queue, cap))
    }
}

fn wr_opcode(op: SendOpcode) -> u32 {
    match op {
        SendOpcode::Send => IBV_WR_SEND,
        SendOpcode::SendWithImm => IBV_WR_SEND_WITH_IMM,
        SendOpcode::SendWithInv => IBV_WR_SEND_WITH_INV,
        SendOpcode::RdmaWrite => IBV_WR_RDMA_WRITE,
        SendOpcode::RdmaWriteWithImm => IBV_WR_RDMA_WRITE_WITH_IMM,
        SendOpcode::RdmaRead => IBV_WR_RDMA_READ,
        SendOpcode::AtomicCmpSwap => IBV_WR_ATOMIC_CMP_AND_SWP,
        SendOpcode::AtomicFetchAdd => IBV_WR_ATOMIC_FETCH_AND_ADD,
        SendOpcode::AtomicWrite => IBV_WR_ATOMIC_WRITE,
        SendOpcode::LocalInv => IBV_WR_LOCAL_INV,
        SendOpcode::BindMw => IBV_WR_BIND_MW,
        // Refused by `NQp::post_send` before this is reached.
        SendOpcode::Flush => unreachable!("FLUSH is refused on a native device"),
    }
}
