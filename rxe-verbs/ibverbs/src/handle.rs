//! The objects the library handed out and not yet destroyed, by address,
//! so that a pointer that is not (or no longer) one of ours gets EINVAL
//! instead of being followed, and the typed lookup of the object behind a
//! program's pointer ([`get`]). The hot verbs (post, poll) skip the check.

use crate::ffi::Fail;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::OnceLock;

/// What an address holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Context,
    Pd,
    Mr,
    Channel,
    Cq,
    Qp,
    Srq,
    Ah,
    Mw,
    /// librdmacm's objects (`rdmacm/`): an `rdma_event_channel`, an
    /// `rdma_cm_id`, an `rdma_cm_event` taken and not yet acknowledged.
    CmChannel,
    CmId,
    CmEvent,
}

/// A Rust object whose address the program holds: its C struct (`C`) is
/// its first field, or for a context inside it at `OFFSET`.
pub trait Handle: Sized {
    /// Its kind in the registry.
    const KIND: Kind;
    /// The C struct the program's pointer points to.
    type C;
    /// What EINVAL says of a pointer that is not a live object of the
    /// kind ("not a queue pair").
    const NOT_LIVE: &'static str;
    /// What it says of NULL: the same, unless the type says "NULL".
    const NULL: &'static str = Self::NOT_LIVE;
    /// Where the program's pointer is inside the object, in bytes.
    const OFFSET: usize = 0;
}

fn table() -> &'static Mutex<HashMap<usize, Kind>> {
    static T: OnceLock<Mutex<HashMap<usize, Kind>>> = OnceLock::new();
    T.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Registers `obj` (a `Box<T>` just made) as live.
pub fn add<T: Handle>(obj: *const T) {
    table().lock().insert(obj as usize, T::KIND);
}

/// Removes `obj` if it is a live `T`; false if it was not.
pub fn remove<T: Handle>(obj: *const T) -> bool {
    let mut t = table().lock();
    if t.get(&(obj as usize)) == Some(&T::KIND) {
        t.remove(&(obj as usize));
        true
    } else {
        false
    }
}

/// Whether `obj` is a live `T`.
pub fn is_live<T: Handle>(obj: *const T) -> bool {
    table().lock().get(&(obj as usize)) == Some(&T::KIND)
}

/// The live `T` behind the program's pointer `p`, or EINVAL naming the
/// argument `arg`.
pub fn check<T: Handle>(p: *const T::C, arg: &str) -> Result<*mut T, Fail> {
    if p.is_null() {
        return Err(Fail::inval(arg, T::NULL));
    }
    let obj = (p as usize).wrapping_sub(T::OFFSET) as *mut T;
    if !is_live(obj) {
        return Err(Fail::inval(arg, T::NOT_LIVE));
    }
    Ok(obj)
}

/// [`check`], as a reference: the object stays until the program destroys
/// it, which it may not do while it uses it (libibverbs' contract too).
pub fn get<'a, T: Handle>(p: *const T::C, arg: &str) -> Result<&'a T, Fail> {
    // SAFETY: a live T is a Box<T> at this address.
    check(p, arg).map(|o| unsafe { &*o })
}
