//! The message headers `recvmmsg(2)` and `sendmmsg(2)` are given, kept
//! from call to call, and when a receive looks at the forward socket.

use super::{BATCH, GSO_DATAGRAM};
use rxe_core::wire::ICRC_LEN;

/// Room for three control messages (two `int`s, one `u16`; 24 bytes each
/// on 64-bit Linux), aligned for `cmsghdr`.
pub(super) type Cbuf = [u64; 10];

/// `recvmmsg`'s and `sendmmsg`'s headers and what they point at, kept in
/// the transport so that a call does not clear 13 KiB of them first (a
/// memset that was the costliest user-space work of a spinning wait, which
/// polls the socket over and over). Every call sets the fields it relies on
/// in the entries it passes.
pub(super) struct Slots {
    pub(super) names: [libc::sockaddr_storage; BATCH],
    pub(super) iovs: [libc::iovec; BATCH],
    pub(super) hdrs: [libc::mmsghdr; BATCH],
    pub(super) cbufs: [Cbuf; BATCH],
    /// GSO sends: a packet whose ICRC changes goes as two pieces (all but
    /// the ICRC, then the ICRC from `icrcs`).
    pub(super) gso_iovs: [libc::iovec; 2 * BATCH],
    pub(super) icrcs: [[u8; ICRC_LEN]; BATCH],
    /// The IPv4 identification each packet of the last send went out with
    /// (k for segment k of a GSO send, else 0); `icrcs` has the ICRC of
    /// those with a nonzero one.
    pub(super) ids: [u16; BATCH],
}

/// When a receive looks at the forward socket ([`crate::share`]), which
/// only another process on the same address ever writes to: a look that
/// finds nothing is a system call after every `recvmmsg`, on a latency
/// test's critical path and in every empty look of a spinning
/// receiver. It looks when a wait (the transport's own or a [`Waiter`]'s,
/// both of which watch the forward socket) saw it readable, while the
/// last look found datagrams, and otherwise every [`FWD_EVERY`]th receive,
/// so that a forwarded datagram that arrives while a receiver spins
/// without waiting still waits for at most that many receives.
#[derive(Debug, Default)]
pub(super) struct FwdLook {
    pub(super) ready: std::sync::Arc<std::sync::atomic::AtomicBool>,
    pub(super) active: bool,
    pub(super) skipped: u32,
}

/// See [`FwdLook`].
pub(super) const FWD_EVERY: u32 = 16;

impl FwdLook {
    pub(super) fn should_look(&mut self) -> bool {
        self.skipped += 1;
        let look = self.active
            || self.skipped >= FWD_EVERY
            || self.ready.swap(false, std::sync::atomic::Ordering::Relaxed);
        if look {
            self.skipped = 0;
            self.active = false;
        }
        look
    }

    /// The look found a datagram: look again next time.
    pub(super) fn found(&mut self) {
        self.active = true;
    }
}

/// The receive side's message headers, set up once: `recvmmsg` writes
/// only the lengths and flags of the headers it filled, so only those are
/// reset before the next call. Setting up all [`BATCH`] headers before
/// every call was most of the work of a latency test's receive (one
/// datagram a call) and of every empty look of a spinning receiver
/// (docs/performance.md, `RxSlots`).
pub(super) struct RxSlots {
    pub(super) names: [libc::sockaddr_storage; BATCH],
    pub(super) iovs: [libc::iovec; BATCH],
    pub(super) hdrs: [libc::mmsghdr; BATCH],
    pub(super) cbufs: [Cbuf; BATCH],
    /// How many headers at the front the last call may have written.
    pub(super) dirty: usize,
    /// What `msg_namelen` and `msg_controllen` start each call with.
    pub(super) namelen: libc::socklen_t,
    pub(super) controllen: usize,
}

impl RxSlots {
    /// Headers for `recvmmsg` into `bufs` ([`BATCH`] slots of
    /// [`GSO_DATAGRAM`] bytes, a heap block that never moves): with the
    /// sender's address unless `raw_mode` (a raw socket's packets carry
    /// their addresses in the IP header), and without it with room for a
    /// control message (a plain socket with `UDP_GRO` says in one how long
    /// the packets of a coalesced datagram are).
    pub(super) fn new(bufs: &mut [u8], raw_mode: bool) -> Box<RxSlots> {
        assert!(bufs.len() >= BATCH * GSO_DATAGRAM);
        // SAFETY: all-zero is a valid value for these plain C structs
        // (null pointers, zero lengths).
        let mut r: Box<RxSlots> = Box::new(unsafe { std::mem::zeroed() });
        let base = bufs.as_mut_ptr();
        for i in 0..BATCH {
            r.iovs[i] = libc::iovec {
                // SAFETY: (i + 1) * GSO_DATAGRAM <= bufs.len(), asserted above.
                iov_base: unsafe { base.add(i * GSO_DATAGRAM) }.cast(),
                iov_len: GSO_DATAGRAM,
            };
            let name = (&mut r.names[i] as *mut libc::sockaddr_storage).cast();
            let control = r.cbufs[i].as_mut_ptr().cast();
            let iov: *mut libc::iovec = &mut r.iovs[i];
            let h = &mut r.hdrs[i].msg_hdr;
            h.msg_name = if raw_mode { std::ptr::null_mut() } else { name };
            h.msg_iov = iov;
            h.msg_iovlen = 1;
            h.msg_control = if raw_mode {
                std::ptr::null_mut()
            } else {
                control
            };
        }
        if !raw_mode {
            r.namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            r.controllen = size_of::<Cbuf>();
        }
        r.dirty = BATCH;
        r
    }

    /// Resets what the last call wrote, for the next `recvmmsg`.
    pub(super) fn ready(&mut self) {
        for h in &mut self.hdrs[..self.dirty] {
            h.msg_len = 0;
            h.msg_hdr.msg_namelen = self.namelen;
            h.msg_hdr.msg_controllen = self.controllen as _;
            h.msg_hdr.msg_flags = 0;
        }
        self.dirty = 0;
    }
}

// SAFETY: as for `Slots`: the pointers point at the transport's own
// receive buffer (a heap block that never moves) and at this box's fields.
unsafe impl Send for RxSlots {}

impl Slots {
    pub(super) fn new() -> Box<Slots> {
        // SAFETY: all-zero is a valid value for these plain C structs
        // (null pointers, zero lengths).
        Box::new(unsafe { std::mem::zeroed() })
    }
}

// SAFETY: the raw pointers in `iovs` and `hdrs` are written before every
// system call that uses them, pointing at the transport's own buffers and
// `Slots` fields (or at the packets being sent, for the one call), and are
// never dereferenced by Rust code: moving the transport to another thread
// moves nothing they could dangle into.
unsafe impl Send for Slots {}
