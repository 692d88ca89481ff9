//! What `crate::sync` is in the model tests: the names the production
//! modules use (parking_lot's lock API, std's atomics and `OnceLock`),
//! mapped onto loom's types, so that loom sees every lock, wait, notify
//! and atomic access of those modules.

pub use loom::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::ops::{Deref, DerefMut};
use std::time::Instant;

/// parking_lot's `Mutex` API over loom's.
pub struct Mutex<T>(loom::sync::Mutex<T>);

impl<T> Mutex<T> {
    pub fn new(t: T) -> Self {
        Mutex(loom::sync::Mutex::new(t))
    }
    pub fn lock(&self) -> MutexGuard<'_, T> {
        MutexGuard(Some(self.0.lock().unwrap()))
    }
}

impl<T: Default> Default for Mutex<T> {
    fn default() -> Self {
        Mutex::new(T::default())
    }
}

impl<T> std::fmt::Debug for Mutex<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Mutex")
    }
}

/// The guard; an `Option` only so that [`Condvar::wait`] can hand it to
/// loom's `wait`, which takes it by value.
pub struct MutexGuard<'a, T>(Option<loom::sync::MutexGuard<'a, T>>);

impl<T> Deref for MutexGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.0.as_ref().expect("held")
    }
}

impl<T> DerefMut for MutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        self.0.as_mut().expect("held")
    }
}

/// parking_lot's `Condvar` API over loom's. Loom does not model time: a
/// wait with a deadline still in the future waits for a notification
/// (so a lost wake-up is a deadlock loom reports), and one whose deadline
/// has passed times out at once.
#[derive(Debug, Default)]
pub struct Condvar(loom::sync::Condvar);

/// What a wait with a deadline returns.
pub struct WaitTimeoutResult(bool);

impl WaitTimeoutResult {
    pub fn timed_out(&self) -> bool {
        self.0
    }
}

impl Condvar {
    pub fn new() -> Self {
        Condvar(loom::sync::Condvar::new())
    }
    pub fn notify_all(&self) {
        self.0.notify_all();
    }
    pub fn wait<T>(&self, g: &mut MutexGuard<'_, T>) {
        let inner = g.0.take().expect("held");
        g.0 = Some(self.0.wait(inner).unwrap());
    }
    pub fn wait_until<T>(&self, g: &mut MutexGuard<'_, T>, deadline: Instant) -> WaitTimeoutResult {
        if Instant::now() >= deadline {
            return WaitTimeoutResult(true);
        }
        self.wait(g);
        WaitTimeoutResult(false)
    }
}

/// std's `OnceLock`: the value in a real one (loom runs one thread at a
/// time), published through a loom atomic so that loom sees the ordering
/// between `set` and `get`.
pub struct OnceLock<T> {
    set: AtomicBool,
    cell: std::sync::OnceLock<T>,
}

impl<T> OnceLock<T> {
    pub fn new() -> Self {
        OnceLock {
            set: AtomicBool::new(false),
            cell: std::sync::OnceLock::new(),
        }
    }
    pub fn set(&self, v: T) -> Result<(), T> {
        self.cell.set(v)?;
        self.set.store(true, Ordering::Release);
        Ok(())
    }
    pub fn get(&self) -> Option<&T> {
        if self.set.load(Ordering::Acquire) {
            self.cell.get()
        } else {
            None
        }
    }
}
