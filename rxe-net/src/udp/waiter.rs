//! [`Waiter`]: waiting for a transport's socket (and its forward socket)
//! without holding the transport, and waking a waiter from another thread.

use super::sys::{context, cvt, ppoll};
#[cfg(doc)]
use super::UdpTransport;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

/// Waits for a transport's receiving socket; see [`UdpTransport::waiter`].
///
/// It waits on its own duplicate of the socket, so it needs no access to
/// the transport, and on an `eventfd(2)` that [`Waiter::wake`] sets, so
/// another thread can end a wait early (for example when something other
/// than a packet produced what the waiting thread waits for).
///
/// Two kinds of thread may wait at once, each with a wake-up of its own: a
/// *receiver* ([`Waiter::wait_receiver`], woken by
/// [`Waiter::wake_receiver`]) and any other ([`Waiter::wait`], woken by
/// [`Waiter::wake`]). A wake-up is used up by the wait that reads it, so
/// with one `eventfd` for both, a wake-up meant for the receiver could be
/// read by the other thread's wait, and the receiver slept on.
#[derive(Debug)]
pub struct Waiter {
    fd: OwnedFd,
    /// Where datagrams other processes pass on arrive ([`crate::share`]).
    fwd: OwnedFd,
    /// Set when a wait saw `fwd` readable ([`FwdLook`]).
    fwd_ready: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// The transport's multicast group sockets ([`crate::mcast`]).
    groups: OwnedFd,
    wake: OwnedFd,
    wake_receiver: OwnedFd,
}

impl Waiter {
    /// A waiter on duplicates of a transport's descriptors (its receiving
    /// socket, forward socket and multicast group sockets), with its two
    /// eventfds for wake-ups.
    pub(super) fn new(
        fd: OwnedFd,
        fwd: OwnedFd,
        fwd_ready: std::sync::Arc<std::sync::atomic::AtomicBool>,
        groups: OwnedFd,
    ) -> io::Result<Waiter> {
        let eventfd = || {
            // SAFETY: plain system call; the descriptor is checked before use.
            let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
            let fd = cvt(fd).map_err(|e| context(e, "eventfd"))?;
            // SAFETY: `fd` is a new descriptor that nothing else owns.
            Ok::<_, io::Error>(unsafe { OwnedFd::from_raw_fd(fd) })
        };
        Ok(Waiter {
            fd,
            fwd,
            fwd_ready,
            groups,
            wake: eventfd()?,
            wake_receiver: eventfd()?,
        })
    }

    /// Waits up to `timeout` (`None`: no limit) for a datagram or a
    /// [`Waiter::wake`]; true if a datagram is ready. A wake-up is used up
    /// by the wait it ends (or by the next wait, if none was waiting).
    pub fn wait(&self, timeout: Option<Duration>) -> io::Result<bool> {
        self.wait_on(&self.wake, timeout)
    }

    /// [`Waiter::wait`] for the receiver, ended by
    /// [`Waiter::wake_receiver`] (and not by [`Waiter::wake`]).
    pub fn wait_receiver(&self, timeout: Option<Duration>) -> io::Result<bool> {
        self.wait_on(&self.wake_receiver, timeout)
    }

    fn wait_on(&self, wake: &OwnedFd, timeout: Option<Duration>) -> io::Result<bool> {
        let mut pfds = [
            libc::pollfd {
                fd: self.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: wake.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.fwd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.groups.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        if !ppoll(&mut pfds, timeout)? {
            return Ok(false);
        }
        if pfds[1].revents != 0 {
            take_wake(wake);
        }
        if pfds[2].revents != 0 {
            self.fwd_ready
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(pfds[0].revents != 0 || pfds[2].revents != 0 || pfds[3].revents != 0)
    }

    /// Sleeps up to `timeout`, or until a [`Waiter::wake`] (true then),
    /// whatever the socket holds: for a thread that leaves the socket to
    /// another but must still be wakeable.
    pub fn nap(&self, timeout: Duration) -> io::Result<bool> {
        let mut pfds = [libc::pollfd {
            fd: self.wake.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        if !ppoll(&mut pfds, Some(timeout))? {
            return Ok(false);
        }
        take_wake(&self.wake);
        Ok(true)
    }

    /// Ends the current (or next) [`Waiter::wait`] or [`Waiter::nap`] of
    /// any thread.
    pub fn wake(&self) {
        signal(&self.wake);
    }

    /// Ends the current (or next) [`Waiter::wait_receiver`].
    pub fn wake_receiver(&self) {
        signal(&self.wake_receiver);
    }
}

/// Uses up a wake-up: reads (and so resets) an eventfd's counter.
fn take_wake(fd: &OwnedFd) {
    let mut v = 0u64;
    // SAFETY: reads 8 bytes into `v`; the eventfd is nonblocking, so a
    // wake-up another waiter took first is EAGAIN, not a hang.
    let _ = unsafe {
        libc::read(
            fd.as_raw_fd(),
            (&mut v as *mut u64).cast(),
            size_of::<u64>(),
        )
    };
}

/// Adds one to an eventfd's counter.
fn signal(fd: &OwnedFd) {
    let v = 1u64;
    // SAFETY: writes 8 bytes from `v` to the eventfd. It can only fail
    // when the counter is about to overflow, which means a wake-up is
    // already pending.
    let _ = unsafe { libc::write(fd.as_raw_fd(), (&v as *const u64).cast(), size_of::<u64>()) };
}
