//! A context's CQs and SRQs by number: `QpInitAttr` names a QP's CQs and
//! SRQ by the numbers the API gave out, and the QP needs the objects.
//!
//! Each CQ and SRQ holds its context (`Arc<NContext>`), so the context
//! holds them weakly, and by `dyn Any`: `context.rs` then needs to know
//! nothing of `cq.rs` and `srq.rs`, which look their own objects up
//! (`NCq::by_id`, `NSrq::by_id`) and get back the type they put in.

use parking_lot::Mutex;
use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Weak};

/// Objects of one kind by number, held weakly.
#[derive(Default)]
pub(super) struct Registry {
    map: Mutex<HashMap<u32, Weak<dyn Any + Send + Sync>>>,
}

impl Registry {
    pub(super) fn insert<T: Any + Send + Sync>(&self, id: u32, obj: &Arc<T>) {
        let weak: Weak<T> = Arc::downgrade(obj);
        let weak: Weak<dyn Any + Send + Sync> = weak;
        self.map.lock().insert(id, weak);
    }

    pub(super) fn remove(&self, id: u32) {
        self.map.lock().remove(&id);
    }

    /// The live object numbered `id`, if it is a `T`.
    pub(super) fn get<T: Any + Send + Sync>(&self, id: u32) -> Option<Arc<T>> {
        let obj = self.map.lock().get(&id).and_then(Weak::upgrade)?;
        obj.downcast::<T>().ok()
    }
}
