//! The number of CPUs this process may run on, read once.
//!
//! `std::thread::available_parallelism` reads the cgroup's CPU quota from `/sys/fs/cgroup` on
//! every call (about six files opened, read and closed on Linux). Store calls and engine
//! batches size their helpers by it, so they ask this cache instead: a store `get_into` went
//! from 6 `openat` per call to none.

use std::sync::OnceLock;

/// CPUs available to this process (at least 1), as `available_parallelism` said on first use.
/// Thread-safe; the value does not follow later changes of affinity or quota.
pub fn available() -> usize {
    static CPUS: OnceLock<usize> = OnceLock::new();
    *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}
