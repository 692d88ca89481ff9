//! How a verbs call failed: its errno, and the rxe-verbs `Error` for it.

use crate::error::{unsupported, Error};
use std::ffi::c_int;

/// The calling thread's `errno`.
pub(super) fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// The errno of a verbs call that returned `ret` (providers return a
/// positive errno; some return -1 and set `errno`).
pub(super) fn rc_errno(ret: c_int) -> i32 {
    if ret > 0 {
        ret
    } else {
        match errno() {
            0 => -ret,
            e => e,
        }
    }
}

/// An `Error` for a verbs call that failed with `errno`.
pub(super) fn os_error(call: &'static str, dev: &str, errno: i32) -> Error {
    let source = std::io::Error::from_raw_os_error(errno);
    match errno {
        libc::EINVAL => Error::InvalidArgument {
            name: call,
            reason: format!("{dev} refused the arguments ({source})"),
        },
        libc::EOPNOTSUPP | libc::ENOSYS | libc::EPROTONOSUPPORT => {
            unsupported(format!("{call} on native device {dev} ({source})"))
        }
        libc::EBUSY => Error::Busy(call),
        _ => Error::Io {
            what: format!("{call} on {dev}"),
            source,
        },
    }
}
