//! Event file descriptors: a pipe whose read end holds one byte for every
//! pending event. The program polls, epolls or selects the read end and
//! reads a byte for each event it takes (`ibv_get_cq_event`,
//! `ibv_get_async_event`), blocking or not as it set the descriptor with
//! `fcntl`. The library's side writes without blocking. Which bytes are
//! written and read when is [`crate::event_queue`]'s business.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// The pipe behind a completion channel or a context's async events.
#[derive(Debug)]
pub struct EventPipe {
    read: OwnedFd,
    write: OwnedFd,
    /// The read end opened again, non-blocking whatever the program sets
    /// on its own descriptor: for dropping the bytes of events that are
    /// withdrawn without ever blocking.
    drain: OwnedFd,
}

impl EventPipe {
    pub fn new() -> std::io::Result<EventPipe> {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: fds has room for the two descriptors pipe2 writes.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: pipe2 succeeded, so both are open descriptors we own.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: fcntl on a descriptor we own.
        unsafe {
            let fl = libc::fcntl(write.as_raw_fd(), libc::F_GETFL);
            libc::fcntl(write.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK);
        }
        let path = format!("/proc/self/fd/{}\0", read.as_raw_fd());
        // SAFETY: a NUL-terminated path; opening a pipe's read end again
        // gives a new open file description with flags of its own.
        let d = unsafe {
            libc::open(
                path.as_ptr().cast(),
                libc::O_RDONLY | libc::O_NONBLOCK | libc::O_CLOEXEC,
            )
        };
        if d < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: open succeeded; we own the descriptor.
        let drain = unsafe { OwnedFd::from_raw_fd(d) };
        Ok(EventPipe { read, write, drain })
    }

    /// The descriptor the program sees.
    pub fn fd(&self) -> RawFd {
        self.read.as_raw_fd()
    }

    /// One more pending event. Never blocks: a pipe holds 64 KiB of events
    /// not yet taken, far more than a program arms.
    pub fn signal(&self) {
        let b = [1u8];
        // SAFETY: writes one byte from a live buffer to a descriptor we own.
        unsafe { libc::write(self.write.as_raw_fd(), b.as_ptr().cast(), 1) };
    }

    /// Drops the bytes of `n` withdrawn events, without blocking; returns
    /// how many were there (a byte another thread read meanwhile is not).
    pub fn drain(&self, n: usize) -> usize {
        let mut buf = [0u8; 64];
        let mut left = n;
        while left > 0 {
            let want = left.min(buf.len());
            // SAFETY: reads at most `want` bytes into a live buffer from a
            // non-blocking descriptor we own.
            let got = unsafe { libc::read(self.drain.as_raw_fd(), buf.as_mut_ptr().cast(), want) };
            if got <= 0 {
                break;
            }
            left -= got as usize;
        }
        n - left
    }

    /// Takes one pending event's byte, blocking unless the program set
    /// O_NONBLOCK. Err is the errno (EAGAIN, EINTR, ...).
    pub fn take(&self) -> Result<(), i32> {
        let mut b = [0u8];
        // SAFETY: reads one byte into a live buffer from a descriptor we own.
        let n = unsafe { libc::read(self.read.as_raw_fd(), b.as_mut_ptr().cast(), 1) };
        match n {
            1 => Ok(()),
            0 => Err(libc::EIO),
            // EINTR too goes back to the program, as a read on the kernel's
            // descriptor would.
            _ => Err(std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO)),
        }
    }
}

impl crate::event_queue::EventFd for EventPipe {
    fn signal(&self) {
        EventPipe::signal(self);
    }
    fn drain(&self, n: usize) -> usize {
        EventPipe::drain(self, n)
    }
    fn take(&self) -> Result<(), i32> {
        EventPipe::take(self)
    }
}
