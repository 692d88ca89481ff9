//! Buffers for outgoing packets, used again and again.
//!
//! Every packet the engine sends is a [`super::Transmit`] that owns its
//! bytes. Allocating a fresh buffer for each (4 KiB and more at a large
//! MTU) costs an allocation, zeroing and, as the allocator hands memory
//! back and forth with the kernel, page faults. So the engine keeps the
//! buffers that the driver hands back after sending
//! ([`super::Engine::recycle`]) and builds the next packets in them: once
//! the pool is warm, the data path allocates nothing.
//!
//! Packets are built here too ([`TxPool::build`], [`TxPool::build_filled`]):
//! headers, payload and ICRC straight into a pooled buffer.
//!
//! The same goes for the scatter/gather lists of work requests posted by
//! reference ([`super::Engine::post_send_ref`], `post_recv_ref`): the
//! engine copies the caller's list into one that a finished request gave
//! back, instead of allocating a new one per request.

use super::Transmit;
use crate::types::{AddressVector, Sge};
use crate::wire::{icrc, PacketRepr, ICRC_LEN};
use std::net::IpAddr;

/// At most this many idle buffers are kept (about 9 MiB at the largest
/// packet size); the rest are freed.
const MAX_IDLE: usize = 1024;

/// The idle buffers.
#[derive(Debug, Default)]
pub(crate) struct TxPool {
    idle: Vec<Vec<u8>>,
    /// Idle scatter/gather lists, empty, with their capacity.
    sges: Vec<Vec<Sge>>,
}

impl TxPool {
    /// A buffer of exactly `len` bytes, with unspecified contents: the
    /// caller writes every byte.
    pub fn take(&mut self, len: usize) -> Vec<u8> {
        match self.idle.pop() {
            Some(mut b) => {
                if b.len() >= len {
                    b.truncate(len);
                } else {
                    b.resize(len, 0);
                }
                b
            }
            None => vec![0; len],
        }
    }

    /// Keeps `buf` for a later packet (or frees it if enough are idle).
    pub fn give(&mut self, buf: Vec<u8>) {
        if self.idle.len() < MAX_IDLE && buf.capacity() > 0 {
            self.idle.push(buf);
        }
    }

    /// A copy of `from` in a list a finished work request gave back.
    pub fn copy_sges(&mut self, from: &[Sge]) -> Vec<Sge> {
        let mut v = self.sges.pop().unwrap_or_default();
        v.extend_from_slice(from);
        v
    }

    /// Keeps a finished work request's list for [`TxPool::copy_sges`].
    pub fn give_sges(&mut self, mut v: Vec<Sge>) {
        if self.sges.len() < MAX_IDLE && v.capacity() > 0 {
            v.clear();
            self.sges.push(v);
        }
    }

    /// Idle buffers now.
    #[cfg(test)]
    pub fn idle(&self) -> usize {
        self.idle.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_come_back_with_the_asked_length() {
        let mut p = TxPool::default();
        let a = p.take(4096);
        assert_eq!(a.len(), 4096);
        let ptr = a.as_ptr();
        p.give(a);
        assert_eq!(p.idle(), 1);
        // The same memory serves the next packet, shorter or longer.
        let b = p.take(20);
        assert_eq!((b.len(), b.as_ptr()), (20, ptr));
        p.give(b);
        let c = p.take(4128);
        assert_eq!(c.len(), 4128);
        assert_eq!(p.idle(), 0);
    }

    #[test]
    fn sge_lists_come_back_as_copies_in_old_memory() {
        let mut p = TxPool::default();
        let s = |addr| Sge {
            addr,
            length: 8,
            lkey: 1,
        };
        let a = p.copy_sges(&[s(1), s(2)]);
        assert_eq!(a, [s(1), s(2)]);
        let ptr = a.as_ptr();
        p.give_sges(a);
        let b = p.copy_sges(&[s(3)]);
        assert_eq!((&b[..], b.as_ptr()), (&[s(3)][..], ptr));
        // An empty list has nothing worth keeping.
        p.give_sges(Vec::new());
        assert!(p.sges.is_empty());
    }

    #[test]
    fn the_pool_is_bounded() {
        let mut p = TxPool::default();
        for _ in 0..MAX_IDLE + 10 {
            p.give(vec![0; 16]);
        }
        assert_eq!(p.idle(), MAX_IDLE);
        p.give(Vec::new());
        assert_eq!(p.idle(), MAX_IDLE);
    }
}

impl TxPool {
    /// A packet from `src` (UDP source port `src_port`) to `dst`, in a
    /// buffer of the pool, serialized with its ICRC.
    pub fn build(
        &mut self,
        src_port: u16,
        repr: &PacketRepr<'_>,
        src: IpAddr,
        dst: IpAddr,
        av: Option<&AddressVector>,
    ) -> Option<Transmit> {
        let copy = |b: &mut [u8]| {
            b.copy_from_slice(repr.payload);
            true
        };
        self.build_filled(src_port, repr, src, dst, av, (repr.payload.len(), copy))
            .ok()
    }

    /// Serializes a packet whose payload of `len` bytes (`payload` is
    /// `(len, fill)`) `fill` writes straight into the packet buffer (from
    /// registered memory, without a copy in between), and computes its
    /// ICRC. `fill` must write all of its slice and return true, or return
    /// false to give up (the buffer, which may hold an earlier packet's
    /// bytes, is then never sent).
    pub fn build_filled(
        &mut self,
        src_port: u16,
        repr: &PacketRepr<'_>,
        src: IpAddr,
        dst: IpAddr,
        av: Option<&AddressVector>,
        (len, fill): (usize, impl FnOnce(&mut [u8]) -> bool),
    ) -> Result<Transmit, BuildError> {
        let mut payload = self.take(repr.buffer_len_for(len));
        let (range, n) = match repr.emit_around(&mut payload, len) {
            Ok(r) => r,
            Err(_) => {
                self.give(payload);
                return Err(BuildError::Emit);
            }
        };
        if !fill(&mut payload[range]) {
            self.give(payload);
            return Err(BuildError::Fill);
        }
        let Ok(crc) = icrc::compute_udp(src, dst, src_port, &payload[..n - ICRC_LEN]) else {
            self.give(payload);
            return Err(BuildError::Emit);
        };
        payload[n - ICRC_LEN..n].copy_from_slice(&crc.to_le_bytes());
        Ok(Transmit {
            src,
            dst,
            src_port,
            traffic_class: av.map_or(0, |a| a.traffic_class),
            hop_limit: av.map_or(64, |a| a.hop_limit),
            payload,
        })
    }
}

/// Why [`TxPool::build_filled`] made no packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BuildError {
    /// The headers do not fit the opcode, or no ICRC for these addresses.
    Emit,
    /// The payload could not be read (the memory went away or is short).
    Fill,
}
