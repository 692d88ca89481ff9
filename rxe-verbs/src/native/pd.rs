//! `NPd`, a native protection domain, and `NAh`, the address handles
//! created on it (one per address vector, kept with the PD).

use super::context::NContext;
use super::error::{errno, os_error};
use super::ffi::*;
use super::loader::Verbs;
use crate::attr::gid_of;
use crate::error::Error;
use parking_lot::Mutex;
use rxe_core::types::AddressVector;
use std::collections::HashMap;
use std::sync::Arc;

/// A native protection domain, with the address handles created on it.
pub(crate) struct NPd {
    pub ctx: Arc<NContext>,
    pub(super) pd: *mut ibv_pd,
    ahs: Mutex<HashMap<AddressVector, Arc<NAh>>>,
}

// SAFETY: see NContext.
unsafe impl Send for NPd {}
// SAFETY: see NContext.
unsafe impl Sync for NPd {}

impl Drop for NPd {
    fn drop(&mut self) {
        // Address handles first: a PD with AHs cannot be deallocated.
        self.ahs.get_mut().clear();
        // SAFETY: every region, QP and SRQ on this PD holds an Arc of it, so
        // none is left; deallocated once.
        unsafe { (self.ctx.v.dealloc_pd)(self.pd) };
    }
}

impl NPd {
    pub fn alloc(ctx: &Arc<NContext>) -> Result<Arc<NPd>, Error> {
        // SAFETY: live context.
        let pd = unsafe { (ctx.v.alloc_pd)(ctx.ctx) };
        if pd.is_null() {
            return Err(os_error("ibv_alloc_pd", ctx.name(), errno()));
        }
        Ok(Arc::new(NPd {
            ctx: ctx.clone(),
            pd,
            ahs: Mutex::new(HashMap::new()),
        }))
    }

    pub fn handle(&self) -> u32 {
        // SAFETY: live PD.
        unsafe { (*self.pd).handle }
    }

    pub(super) fn ah_attr(&self, av: &AddressVector) -> ibv_ah_attr {
        ibv_ah_attr {
            grh: ibv_global_route {
                dgid: ibv_gid {
                    raw: gid_of(av.dest).octets(),
                },
                flow_label: av.flow_label,
                sgid_index: self.ctx.sgid(av.sgid_index),
                hop_limit: av.hop_limit,
                traffic_class: av.traffic_class,
            },
            dlid: 0,
            sl: 0,
            src_path_bits: 0,
            static_rate: 0,
            is_global: 1,
            port_num: self.ctx.port,
        }
    }

    /// The address handle for `av`, created on first use and kept with the PD.
    pub fn ah(&self, av: &AddressVector) -> Result<Arc<NAh>, Error> {
        let mut m = self.ahs.lock();
        if let Some(a) = m.get(av) {
            return Ok(a.clone());
        }
        let mut attr = self.ah_attr(av);
        // SAFETY: live PD, valid attributes.
        let ah = unsafe { (self.ctx.v.create_ah)(self.pd, &mut attr) };
        if ah.is_null() {
            return Err(os_error("ibv_create_ah", self.ctx.name(), errno()));
        }
        let a = Arc::new(NAh { v: self.ctx.v, ah });
        m.insert(*av, a.clone());
        Ok(a)
    }
}

/// A native address handle (owned by its PD's cache).
pub(crate) struct NAh {
    v: &'static Verbs,
    pub(super) ah: *mut ibv_ah,
}

// SAFETY: see NContext.
unsafe impl Send for NAh {}
// SAFETY: see NContext.
unsafe impl Sync for NAh {}

impl Drop for NAh {
    fn drop(&mut self) {
        // SAFETY: created by ibv_create_ah, destroyed once; the PD outlives it.
        unsafe { (self.v.destroy_ah)(self.ah) };
    }
}
