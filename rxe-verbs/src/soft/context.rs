//! What a [`crate::Context`] asks of an open soft device: its attributes,
//! its tunables, its asynchronous events and its counters.

use super::{Inner, MAX_SPIN};
use crate::attr::{gid_of, AsyncEventKind, AsyncNotify, DeviceAttr, PortAttr};
use crate::device::Device;
use crate::error::{unsupported, Error};
use rxe_core::engine::Counters;
use rxe_net::faults::FaultCounters;
use rxe_net::udp::{RecvMode, UdpStats};
use std::net::Ipv6Addr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

impl Inner {
    pub fn device(&self) -> &Device {
        &self.shared.device
    }

    /// The device's only GID: its address.
    pub fn gid(&self) -> Ipv6Addr {
        gid_of(self.shared.device.addr())
    }

    pub fn set_poll_spin(&self, spin: Duration) {
        let ns = spin.min(MAX_SPIN).as_nanos() as u64;
        self.shared.spin_ns.store(ns, Ordering::Relaxed);
    }

    pub fn poll_spin(&self) -> Duration {
        Duration::from_nanos(self.shared.spin_ns.load(Ordering::Relaxed))
    }

    pub fn set_post_batching(&self, window: Duration) {
        self.shared.doorbell.set_window(window);
    }

    pub fn held_posts(&self) -> u64 {
        self.shared.doorbell.held_posts()
    }

    pub fn query_device(&self) -> DeviceAttr {
        let caps = self.shared.lock().config().caps;
        DeviceAttr::new(self.device(), &caps)
    }

    /// Port 1, with the link's MTU as it is now (it may have changed since
    /// the device opened; the kernel's rxe follows its net device too).
    pub fn query_port(&self) -> PortAttr {
        let mtu = self.device().active_mtu();
        let mut e = self.shared.lock();
        if e.config().port_mtu != mtu {
            e.set_port_mtu(mtu);
        }
        PortAttr::new(self.device(), e.config())
    }

    pub fn recv_mode(&self) -> RecvMode {
        self.shared.recv_mode
    }

    pub fn get_async_event(&self, timeout: Duration) -> Option<AsyncEventKind> {
        self.shared.events.pop(Instant::now() + timeout)
    }

    pub fn set_async_notify(&self, f: AsyncNotify) -> Result<(), Error> {
        if self.shared.events.set_sink(f) {
            Ok(())
        } else {
            Err(unsupported("a second async notify hook"))
        }
    }

    pub fn counters(&self) -> Counters {
        self.shared.lock().counters().clone()
    }

    pub fn transport_stats(&self) -> UdpStats {
        *self.shared.link.lock().stats()
    }

    pub fn fault_counters(&self) -> Option<FaultCounters> {
        self.shared.faults.as_ref().map(|f| f.lock().counters())
    }
}
