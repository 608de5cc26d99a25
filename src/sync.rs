//! The synchronisation primitives of the lane channel, the completion latch and the batch: std's,
//! or loom's models when built with `--cfg loom` (`make loom`), so loom can explore every
//! interleaving of those pieces. And the one way this crate takes a lock: [`LockClean`],
//! [`RwLockClean`] and, for condvar waits and the rest, [`Recover`].
//!
//! # Why a poisoned lock is taken anyway
//!
//! A std lock is poisoned when a thread panics while holding it; the data stays as the panicking
//! thread left it (nothing is rolled back) and every later `lock()` returns `Err`. Here a panic
//! is a bug that is already caught and reported where it happens: at the C boundary
//! (`ffi_boundary!` turns it into `TW_ERR_PANIC`, and the API promises the engine stays usable)
//! and in every worker thread (`guard.rs`). Propagating the poison instead would turn that one
//! panic into a panic in every later call that takes the lock, and a dead worker, for the life
//! of the process. The state under this crate's locks is maps, queues, counters and flags that
//! stay memory-safe and structurally valid whatever line a panic interrupts; ids, deadlines and
//! ranges are validated on every use anyway. So every lock, wait and `get_mut` recovers the
//! guard from the poison and carries on.

#[cfg(loom)]
pub(crate) use loom::sync::{Arc, Condvar, Mutex, MutexGuard};
#[cfg(not(loom))]
pub(crate) use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use std::sync::{LockResult, PoisonError, RwLockReadGuard, RwLockWriteGuard, TryLockError};

/// Atomics, as above.
pub(crate) mod atomic {
    #[cfg(loom)]
    pub(crate) use loom::sync::atomic::{
        AtomicBool, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering,
    };
    #[cfg(not(loom))]
    pub(crate) use std::sync::atomic::{
        AtomicBool, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering,
    };
}

/// The value of a lock operation's result, poisoned or not (see the module documentation):
/// `cv.wait(guard).recover()`, `m.get_mut().recover()`, `m.into_inner().recover()`.
pub trait Recover<T> {
    /// The guard (or value), whether or not a panicking thread poisoned the lock.
    fn recover(self) -> T;
}

impl<T> Recover<T> for LockResult<T> {
    fn recover(self) -> T {
        self.unwrap_or_else(PoisonError::into_inner)
    }
}

/// Taking a mutex, poisoned or not (see the module documentation).
pub trait LockClean {
    /// What the lock hands out.
    type Guard<'a>
    where
        Self: 'a;
    /// Blocks until the lock is held, as `lock()`, recovering a poisoned lock.
    fn lock_clean(&self) -> Self::Guard<'_>;
    /// The lock if it is free now (poisoned or not), `None` if another thread holds it.
    fn try_lock_clean(&self) -> Option<Self::Guard<'_>>;
}

/// `LockClean` for a mutex type of std's shape (std's, and loom's under `cfg(loom)`).
macro_rules! lock_clean_for {
    ($mutex:ident, $guard:ty, [$($bound:tt)*]) => {
        impl<T $($bound)*> LockClean for $mutex<T> {
            type Guard<'a>
                = $guard
            where
                T: 'a;
            fn lock_clean(&self) -> Self::Guard<'_> {
                self.lock().recover()
            }
            fn try_lock_clean(&self) -> Option<Self::Guard<'_>> {
                match self.try_lock() {
                    Ok(g) => Some(g),
                    Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
                    Err(TryLockError::WouldBlock) => None,
                }
            }
        }
    };
}

use std::sync::Mutex as StdMutex;
lock_clean_for!(StdMutex, std::sync::MutexGuard<'a, T>, [: ?Sized]);
#[cfg(loom)]
use loom::sync::Mutex as LoomMutex;
#[cfg(loom)]
lock_clean_for!(LoomMutex, loom::sync::MutexGuard<'a, T>, []);

/// Taking a read or write lock, poisoned or not (see the module documentation).
pub trait RwLockClean<T: ?Sized> {
    /// `read()`, recovering a poisoned lock.
    fn read_clean(&self) -> RwLockReadGuard<'_, T>;
    /// `write()`, recovering a poisoned lock.
    fn write_clean(&self) -> RwLockWriteGuard<'_, T>;
}

impl<T: ?Sized> RwLockClean<T> for std::sync::RwLock<T> {
    fn read_clean(&self) -> RwLockReadGuard<'_, T> {
        self.read().recover()
    }
    fn write_clean(&self) -> RwLockWriteGuard<'_, T> {
        self.write().recover()
    }
}

#[cfg(test)]
mod tests {
    use super::{LockClean, Recover, RwLockClean};
    use std::sync::{Condvar, Mutex, RwLock};

    #[test]
    fn a_poisoned_lock_is_taken_with_its_data() {
        let m = Mutex::new(1);
        let rw = RwLock::new(2);
        let _ = std::panic::catch_unwind(|| {
            let _g = m.lock().unwrap();
            let _w = rw.write().unwrap();
            panic!("poison both");
        });
        assert!(m.is_poisoned() && rw.is_poisoned());
        *m.lock_clean() += 1;
        assert_eq!(*m.try_lock_clean().expect("free"), 2);
        assert_eq!(*rw.read_clean(), 2);
        *rw.write_clean() = 3;
        let g = m.lock_clean();
        assert!(m.try_lock_clean().is_none(), "held");
        let (g, _) = Condvar::new()
            .wait_timeout(g, std::time::Duration::from_millis(1))
            .recover();
        assert_eq!(*g, 2);
        drop(g);
        assert_eq!(m.into_inner().recover(), 2);
    }
}
