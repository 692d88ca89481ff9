//! A context's `cmd_fd`, and `ibv_import_device`.
//!
//! On the kernel a context's `cmd_fd` is its open `/dev/infiniband/uverbsN`,
//! a character device: programs `fstat`, `poll`, `fcntl` or `dup` it, and
//! pass it to `ibv_import_device`. A soft device's context holds an open
//! `/dev/null` there (a character device too, which the device view also
//! shows as `/dev/infiniband/uverbsN`), so every such call works on a real
//! descriptor and none meets EBADF.
//!
//! `ibv_import_device` answers as rdma-core 44 does on kernel rxe: a
//! descriptor that is no character device is EINVAL, one of no RDMA
//! device ENODEV, and a soft device's `cmd_fd` EOPNOTSUPP, since the rxe
//! provider has no `import_context` (and neither can another process
//! share a soft device's engine through a descriptor).

use crate::ffi::{entry, note, set_errno};
use crate::native;
use parking_lot::Mutex;
use std::collections::HashSet;
use std::ffi::c_int;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;

/// The open descriptors that are some context's `cmd_fd`.
static CMD_FDS: Mutex<Option<HashSet<c_int>>> = Mutex::new(None);

/// A context's `cmd_fd`: `/dev/null`, open for reading and writing.
#[derive(Debug)]
pub struct CmdFd(File);

impl CmdFd {
    pub fn open() -> std::io::Result<CmdFd> {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/null")?;
        CMD_FDS
            .lock()
            .get_or_insert_with(HashSet::new)
            .insert(f.as_raw_fd());
        Ok(CmdFd(f))
    }
    pub fn fd(&self) -> c_int {
        self.0.as_raw_fd()
    }
}

impl Drop for CmdFd {
    fn drop(&mut self) {
        if let Some(s) = CMD_FDS.lock().as_mut() {
            s.remove(&self.0.as_raw_fd());
        }
    }
}

/// Whether `fd` is a soft device context's `cmd_fd`.
pub fn is_cmd_fd(fd: c_int) -> bool {
    CMD_FDS.lock().as_ref().is_some_and(|s| s.contains(&fd))
}

fn fail(errno: c_int, why: &str) -> *mut crate::sys::ibv_context {
    note("ibv_import_device", why);
    set_errno(errno);
    std::ptr::null_mut()
}

entry! {
    /// `ibv_import_device(cmd_fd)`: a kernel device's file descriptor goes to
    /// the system library when it is loaded (`native.rs`); a soft device's
    /// is ours.
    pub unsafe extern "C" fn ibv_import_device(cmd_fd: c_int) -> *mut crate::sys::ibv_context {
        match native::lib().and_then(|l| l.import_device) {
            // SAFETY: the system library's ibv_import_device.
            Some(f) if !is_cmd_fd(cmd_fd) => native::bridged(|| unsafe { f(cmd_fd) }),
            _ => import_device(cmd_fd),
        }
    }
}

/// `ibv_import_device` for a descriptor no system library is asked about.
fn import_device(cmd_fd: c_int) -> *mut crate::sys::ibv_context {
    if is_cmd_fd(cmd_fd) {
        return fail(
            libc::EOPNOTSUPP,
            "cmd_fd: a soft device's context cannot be imported (as rdma-core's rxe provider has no import_context)",
        );
    }
    // SAFETY: fstat writes the stat buffer it is given; any fd value is safe.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(cmd_fd, &mut st) } != 0 || st.st_mode & libc::S_IFMT != libc::S_IFCHR {
        return fail(libc::EINVAL, "cmd_fd: not an open character device");
    }
    fail(
        libc::ENODEV,
        "cmd_fd: no RDMA device behind this descriptor",
    )
}
