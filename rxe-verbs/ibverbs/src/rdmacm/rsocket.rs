//! rsockets (`<rdma/rsocket.h>`): a socket API over RDMA that librdmacm
//! builds on `rdma_connect`/`rdma_accept` and a protocol of its own. They
//! exist so that programs load; `rsocket` fails with ENOSYS (it needs the
//! CM protocol, see `connect.rs`), so no descriptor is ever an rsocket and
//! the calls on one fail with EBADF, as librdmacm's do for a descriptor it
//! does not know. `rpoll` and `rselect` take ordinary descriptors, as
//! librdmacm's do, and are `poll` and `select`.

use crate::ffi::{entry, note, set_errno};
use std::ffi::{c_int, c_void};

fn fail<T>(call: &str, errno: c_int, v: T) -> T {
    note(
        call,
        if errno == libc::ENOSYS {
            "rsockets need the connection manager protocol, which rxe-rs's drop-in librdmacm does not speak yet"
        } else {
            "not an rsocket (rsocket() has not made one)"
        },
    );
    set_errno(errno);
    v
}

entry! {
    on_panic = -1;
    pub unsafe extern "C" fn rsocket(_domain: c_int, _type: c_int, _protocol: c_int) -> c_int {
        fail(VERB, libc::ENOSYS, -1)
    }
}

macro_rules! ebadf {
    ($($name:ident($($a:ident: $t:ty),*) -> $r:ty = $v:expr;)*) => {
        $(entry! {
            on_panic = $v;
            pub unsafe extern "C" fn $name($($a: $t),*) -> $r {
                $(let _ = $a;)*
                fail(VERB, libc::EBADF, $v)
            }
        })*
    };
}

ebadf! {
    rbind(socket: c_int, addr: *const c_void, addrlen: u32) -> c_int = -1;
    rlisten(socket: c_int, backlog: c_int) -> c_int = -1;
    raccept(socket: c_int, addr: *mut c_void, addrlen: *mut u32) -> c_int = -1;
    rconnect(socket: c_int, addr: *const c_void, addrlen: u32) -> c_int = -1;
    rshutdown(socket: c_int, how: c_int) -> c_int = -1;
    rclose(socket: c_int) -> c_int = -1;
    rrecv(socket: c_int, buf: *mut c_void, len: usize, flags: c_int) -> isize = -1;
    rrecvfrom(socket: c_int, buf: *mut c_void, len: usize, flags: c_int, src: *mut c_void, addrlen: *mut u32) -> isize = -1;
    rrecvmsg(socket: c_int, msg: *mut c_void, flags: c_int) -> isize = -1;
    rsend(socket: c_int, buf: *const c_void, len: usize, flags: c_int) -> isize = -1;
    rsendto(socket: c_int, buf: *const c_void, len: usize, flags: c_int, dest: *const c_void, addrlen: u32) -> isize = -1;
    rsendmsg(socket: c_int, msg: *const c_void, flags: c_int) -> isize = -1;
    rread(socket: c_int, buf: *mut c_void, count: usize) -> isize = -1;
    rreadv(socket: c_int, iov: *const c_void, iovcnt: c_int) -> isize = -1;
    rwrite(socket: c_int, buf: *const c_void, count: usize) -> isize = -1;
    rwritev(socket: c_int, iov: *const c_void, iovcnt: c_int) -> isize = -1;
    rgetpeername(socket: c_int, addr: *mut c_void, addrlen: *mut u32) -> c_int = -1;
    rgetsockname(socket: c_int, addr: *mut c_void, addrlen: *mut u32) -> c_int = -1;
    rsetsockopt(socket: c_int, level: c_int, optname: c_int, optval: *const c_void, optlen: u32) -> c_int = -1;
    rgetsockopt(socket: c_int, level: c_int, optname: c_int, optval: *mut c_void, optlen: *mut u32) -> c_int = -1;
    riomap(socket: c_int, buf: *mut c_void, len: usize, prot: c_int, flags: c_int, offset: i64) -> i64 = -1;
    riounmap(socket: c_int, buf: *mut c_void, len: usize) -> c_int = -1;
    riowrite(socket: c_int, buf: *const c_void, count: usize, offset: i64, flags: c_int) -> usize = usize::MAX;
}

entry! {
    on_panic = -1;
    /// `rfcntl(socket, cmd, ...)`: the variable argument is not read.
    pub unsafe extern "C" fn rfcntl(socket: c_int, cmd: c_int) -> c_int {
        let _ = (socket, cmd);
        fail(VERB, libc::EBADF, -1)
    }
}

entry! {
    data;
    on_panic = -1;
    pub unsafe extern "C" fn rpoll(
        fds: *mut libc::pollfd,
        nfds: libc::nfds_t,
        timeout: c_int,
    ) -> c_int {
        // SAFETY: the program's arguments, as poll takes them.
        unsafe { libc::poll(fds, nfds, timeout) }
    }
}

entry! {
    data;
    on_panic = -1;
    pub unsafe extern "C" fn rselect(
        nfds: c_int,
        readfds: *mut libc::fd_set,
        writefds: *mut libc::fd_set,
        exceptfds: *mut libc::fd_set,
        timeout: *mut libc::timeval,
    ) -> c_int {
        // SAFETY: the program's arguments, as select takes them.
        unsafe { libc::select(nfds, readfds, writefds, exceptfds, timeout) }
    }
}
