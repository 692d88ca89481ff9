//! The objects the library handed out and not yet destroyed, by address,
//! so that a pointer that is not (or no longer) one of ours gets EINVAL
//! instead of being followed. The hot verbs (post, poll) skip the check.

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

fn table() -> &'static Mutex<HashMap<usize, Kind>> {
    static T: OnceLock<Mutex<HashMap<usize, Kind>>> = OnceLock::new();
    T.get_or_init(|| Mutex::new(HashMap::new()))
}

pub fn add(kind: Kind, addr: usize) {
    table().lock().insert(addr, kind);
}

/// Removes `addr` if it holds a live `kind`; false if it did not.
pub fn remove(kind: Kind, addr: usize) -> bool {
    let mut t = table().lock();
    if t.get(&addr) == Some(&kind) {
        t.remove(&addr);
        true
    } else {
        false
    }
}

pub fn is(kind: Kind, addr: usize) -> bool {
    table().lock().get(&addr) == Some(&kind)
}
