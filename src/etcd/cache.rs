//! A read cache of the keys under one prefix, kept true by an etcd watch. A value is served from
//! the cache only while the watch is live and started no later than the read that filled it, so
//! every later change reaches the cache. Each change also marks the key *stale* until its next
//! read, which tells the engine to re-read a descriptor it holds instead of using an old one.

use super::watch::EventKind;
use super::{EtcdClient, prefix_end};
use crate::log::Level;
use crate::sync::LockClean;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Most keys remembered; changes to further keys are not cached (reads still work).
const MAX_ENTRIES: usize = 65536;

/// How long one watch request stays open before it is re-opened from the next revision.
pub const WATCH_WINDOW: Duration = Duration::from_secs(3);

#[derive(Default)]
struct Entry {
    /// `None`: unknown; `Some(None)`: known absent; `Some(Some(v))`: known value.
    value: Option<Option<Vec<u8>>>,
    /// Store revision the value is true at.
    rev: i64,
    /// Changed since it was last read.
    stale: bool,
}

#[derive(Default)]
struct State {
    /// Revision from which the watch has delivered every change, while one is established.
    watch_from: Option<i64>,
    /// The watch is connected now.
    live: bool,
    /// Bumped whenever the cache forgets everything.
    epoch: u64,
    entries: HashMap<String, Entry>,
}

/// What a read found in the cache.
pub enum Lookup {
    /// The value (or its absence) is known.
    Hit(Option<Vec<u8>>),
    /// Read it from etcd, then [`WatchCache::fill`] with this epoch.
    Miss {
        /// The cache epoch when the read began.
        epoch: u64,
        /// Whether the key was stale before this read.
        was_stale: bool,
    },
}

/// The cache. Thread-safe.
#[derive(Default)]
pub struct WatchCache {
    state: Mutex<State>,
}

impl WatchCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock_clean()
    }

    /// Starts a read of `key`: clears its stale mark and answers from the cache when it can.
    pub fn begin_read(&self, key: &str) -> Lookup {
        let mut st = self.lock();
        let live = st.live && st.watch_from.is_some();
        let epoch = st.epoch;
        match st.entries.get_mut(key) {
            Some(e) => {
                let was_stale = std::mem::take(&mut e.stale);
                match (&e.value, live) {
                    (Some(v), true) => Lookup::Hit(v.clone()),
                    _ => Lookup::Miss { epoch, was_stale },
                }
            }
            None => Lookup::Miss {
                epoch,
                was_stale: false,
            },
        }
    }

    /// Records what a read at store revision `read_rev` returned, when the watch vouches for
    /// everything after it.
    pub fn fill(&self, key: &str, epoch: u64, value: Option<Vec<u8>>, read_rev: i64) {
        let mut st = self.lock();
        let covered = st.live && st.watch_from.is_some_and(|w| read_rev >= w);
        if st.epoch != epoch || !covered {
            return;
        }
        if st.entries.len() >= MAX_ENTRIES && !st.entries.contains_key(key) {
            return;
        }
        let e = st.entries.entry(key.to_string()).or_default();
        if e.value.is_none() || e.rev <= read_rev {
            e.value = Some(value);
            e.rev = read_rev;
        }
    }

    /// A read failed: keep the key stale if it was.
    pub fn read_failed(&self, key: &str, was_stale: bool) {
        if was_stale {
            if let Some(e) = self.lock().entries.get_mut(key) {
                e.stale = true;
            }
        }
    }

    /// Whether `key` changed since it was last read.
    pub fn is_stale(&self, key: &str) -> bool {
        self.lock().entries.get(key).is_some_and(|e| e.stale)
    }

    /// A change seen by the watch.
    pub fn apply(&self, key: &str, value: Option<Vec<u8>>, rev: i64) {
        let mut st = self.lock();
        if st.entries.len() >= MAX_ENTRIES && !st.entries.contains_key(key) {
            return;
        }
        let e = st.entries.entry(key.to_string()).or_default();
        if e.value.is_none() || rev > e.rev {
            e.value = Some(value);
            e.rev = rev;
            e.stale = true;
        }
    }

    /// The watch is established (from `from`) or lost.
    pub fn set_live(&self, live: bool, from: Option<i64>) {
        let mut st = self.lock();
        st.live = live;
        if from.is_some() {
            st.watch_from = from;
        }
    }

    /// Changes may have been missed: forget every value and mark every key stale.
    pub fn reset(&self) {
        let mut st = self.lock();
        st.epoch += 1;
        st.watch_from = None;
        for e in st.entries.values_mut() {
            e.value = None;
            e.rev = 0;
            e.stale = true;
        }
    }

    /// Whether values are served from memory now.
    pub fn is_live(&self) -> bool {
        let st = self.lock();
        st.live && st.watch_from.is_some()
    }
}

/// Keeps `cache` in step with the keys under `prefix` until `stop` is set. Runs on its own
/// thread; each watch request lasts [`WATCH_WINDOW`] and the next one continues from the next
/// revision, so the thread notices `stop` within that time.
pub fn run_watch(
    client: Arc<EtcdClient>,
    cache: Arc<WatchCache>,
    prefix: String,
    stop: Arc<AtomicBool>,
) {
    let end = prefix_end(prefix.as_bytes());
    let mut next_rev = 0i64;
    let mut cluster = String::new();
    let mut down = false;
    while !stop.load(Ordering::Acquire) {
        let mut stream = match client.watch(prefix.as_bytes(), &end, next_rev, WATCH_WINDOW) {
            Ok(s) => s,
            Err(e) => {
                cache.set_live(false, None);
                if !down && !stop.load(Ordering::Acquire) {
                    tw_log!(Level::Warn, "metadata watch lost: {e}; retrying");
                    down = true;
                }
                sleep_unless(&stop, Duration::from_millis(250));
                continue;
            }
        };
        loop {
            let msg = match stream.next_message() {
                Ok(Some(m)) => m,
                Ok(None) => break,
                Err(e) => {
                    cache.set_live(false, None);
                    if !stop.load(Ordering::Acquire) {
                        tw_log!(Level::Warn, "metadata watch: {e}");
                    }
                    break;
                }
            };
            if msg.canceled || msg.compact_revision > 0 {
                tw_log!(
                    Level::Info,
                    "metadata watch canceled ({}); re-reading every key",
                    msg.cancel_reason
                );
                cache.reset();
                next_rev = 0;
                break;
            }
            if msg.created {
                let new_cluster = !cluster.is_empty() && msg.cluster_id != cluster;
                let went_back = next_rev > 0 && msg.revision + 1 < next_rev;
                cluster = msg.cluster_id.clone();
                if new_cluster || went_back {
                    tw_log!(
                        Level::Info,
                        "etcd at {} is a different store now; re-reading every key",
                        stream.endpoint()
                    );
                    cache.reset();
                    next_rev = 0;
                    break;
                }
                if next_rev == 0 {
                    next_rev = msg.revision + 1;
                    cache.set_live(true, Some(msg.revision));
                } else {
                    cache.set_live(true, None);
                }
                if down {
                    tw_log!(Level::Info, "metadata watch back on {}", stream.endpoint());
                    down = false;
                }
            }
            for ev in msg.events {
                let key = String::from_utf8_lossy(&ev.kv.key).into_owned();
                let value = (ev.kind == EventKind::Put).then_some(ev.kv.value);
                cache.apply(&key, value, ev.kv.mod_revision);
                next_rev = next_rev.max(ev.kv.mod_revision + 1);
            }
        }
    }
}

/// Sleeps up to `d`, waking early when `stop` is set.
fn sleep_unless(stop: &AtomicBool, d: Duration) {
    let step = Duration::from_millis(50);
    let mut left = d;
    while !left.is_zero() && !stop.load(Ordering::Acquire) {
        let s = left.min(step);
        std::thread::sleep(s);
        left -= s;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hit(c: &WatchCache, k: &str) -> Option<Option<Vec<u8>>> {
        match c.begin_read(k) {
            Lookup::Hit(v) => Some(v),
            Lookup::Miss { .. } => None,
        }
    }

    #[test]
    fn serves_only_what_the_watch_covers() {
        let c = WatchCache::default();
        // No watch yet: nothing is cached.
        c.fill("k", 0, Some(b"a".to_vec()), 10);
        assert!(hit(&c, "k").is_none());
        c.set_live(true, Some(10));
        // A read older than the watch start is not trusted.
        c.fill("k", 0, Some(b"a".to_vec()), 9);
        assert!(hit(&c, "k").is_none());
        c.fill("k", 0, Some(b"a".to_vec()), 10);
        assert_eq!(hit(&c, "k"), Some(Some(b"a".to_vec())));
        // A change marks the key stale until the next read, which sees the new value.
        assert!(!c.is_stale("k"));
        c.apply("k", Some(b"b".to_vec()), 11);
        assert!(c.is_stale("k"));
        assert_eq!(hit(&c, "k"), Some(Some(b"b".to_vec())));
        assert!(!c.is_stale("k"));
        // An older read arriving late does not overwrite a newer event.
        c.fill("k", 0, Some(b"a".to_vec()), 10);
        assert_eq!(hit(&c, "k"), Some(Some(b"b".to_vec())));
        c.apply("k", None, 12);
        assert_eq!(hit(&c, "k"), Some(None));
        // Watch lost: reads go to etcd again; reset forgets and marks stale.
        c.set_live(false, None);
        assert!(hit(&c, "k").is_none());
        c.set_live(true, None);
        assert_eq!(hit(&c, "k"), Some(None));
        c.reset();
        assert!(c.is_stale("k"));
        assert!(hit(&c, "k").is_none());
        c.fill("k", 0, Some(b"x".to_vec()), 20);
        assert!(hit(&c, "k").is_none(), "old epoch, no watch");
    }
}
