//! The descriptors libibverbs reads events from (a context's `async_fd`,
//! a completion channel's `fd`): made non-blocking, and waited on with a
//! deadline, so that a reader gives up on time and two readers do not both
//! block in libibverbs.

use super::error::errno;
use std::ffi::c_int;
use std::time::Instant;

/// Sets `O_NONBLOCK` on `fd`.
pub(super) fn set_nonblocking(fd: c_int) {
    // SAFETY: fcntl on a descriptor libibverbs opened; errors are ignored
    // (a blocking descriptor still works: reads happen after poll says so).
    unsafe {
        let fl = libc::fcntl(fd, libc::F_GETFL);
        if fl >= 0 {
            libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK);
        }
    }
}

/// Waits until `fd` is readable or `deadline` passes.
pub(super) fn wait_readable(fd: c_int, deadline: Instant) -> bool {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let ms = left.as_millis().min(i32::MAX as u128) as c_int;
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut p, 1, ms) };
        if n > 0 {
            return true;
        }
        if n == 0 || errno() != libc::EINTR {
            return false;
        }
    }
}
