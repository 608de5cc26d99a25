//! Segment metadata in etcd, written as Mooncake writes it, with what Mooncake lacks: every key
//! this engine writes hangs on one lease that a background thread keeps alive, so the keys of a
//! crashed engine vanish within the lease time; reads are cached and kept true by a watch
//! (`etcd::cache`). When etcd goes away the engine keeps working with what it holds; when it comes
//! back, an expired lease is replaced and every key is written again.

use crate::error::{Error, ErrorKind, Result};
use crate::etcd::cache::{Lookup, WatchCache, run_watch};
use crate::etcd::{EtcdClient, is_lease_not_found};
use crate::log::Level;
use crate::sync::{LockClean, Recover};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Lease time to live, seconds, unless `TW_ETCD_LEASE_TTL` says otherwise (2..=60). A crashed
/// engine's keys disappear at most this long (plus etcd's expiry check, about 1 s) after its
/// last renewal.
pub const DEFAULT_LEASE_TTL: i64 = 5;

fn lease_ttl() -> i64 {
    std::env::var("TW_ETCD_LEASE_TTL")
        .ok()
        .and_then(|v| v.trim().parse::<i64>().ok())
        .filter(|t| (2..=60).contains(t))
        .unwrap_or(DEFAULT_LEASE_TTL)
}

struct Owned {
    lease: i64,
    /// Every key this engine wrote and has not deleted, with its latest value.
    keys: BTreeMap<String, String>,
    /// Some write failed: etcd may hold older values than `keys`.
    behind: bool,
}

struct Shared {
    client: Arc<EtcdClient>,
    ttl: i64,
    owned: Mutex<Owned>,
    stop: Mutex<bool>,
    wake: Condvar,
}

/// An etcd metadata store: a lease, the keys on it, and a watched read cache. Thread-safe.
pub struct EtcdStore {
    shared: Arc<Shared>,
    cache: Arc<WatchCache>,
    watch_stop: Arc<AtomicBool>,
    keeper: Mutex<Option<JoinHandle<()>>>,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Owned> {
        self.owned.lock_clean()
    }

    /// Grants a fresh lease and writes every owned key on it.
    fn renew(&self, o: &mut Owned) -> Result<()> {
        let lease = self.client.lease_grant(self.ttl)?;
        o.lease = lease.id;
        o.behind = true;
        self.rewrite(o)
    }

    /// Writes every owned key again on the current lease.
    fn rewrite(&self, o: &mut Owned) -> Result<()> {
        for (k, v) in &o.keys {
            self.client.put(k.as_bytes(), v.as_bytes(), o.lease)?;
        }
        o.behind = false;
        Ok(())
    }

    fn put(&self, key: &str, value: &str) -> Result<()> {
        let mut o = self.lock();
        o.keys.insert(key.to_string(), value.to_string());
        let r = match self.client.put(key.as_bytes(), value.as_bytes(), o.lease) {
            Err(e) if is_lease_not_found(&e) => self.renew(&mut o),
            other => other.map(|_| ()),
        };
        if r.is_err() {
            o.behind = true;
        }
        r
    }

    /// The keep-alive loop: renews the lease every third of its time to live, replaces it when
    /// etcd forgot it, and writes the keys again after failed writes.
    fn keep_alive(&self) {
        let period = Duration::from_millis((self.ttl as u64 * 1000 / 3).max(300));
        let mut down = false;
        loop {
            {
                let stop = self.stop.lock_clean();
                let (stop, _) = self
                    .wake
                    .wait_timeout_while(stop, period, |s| !*s)
                    .recover();
                if *stop {
                    return;
                }
            }
            let lease = self.lock().lease;
            let outcome = match self.client.lease_keepalive(lease) {
                Ok(Some(_)) => {
                    let mut o = self.lock();
                    if o.behind {
                        self.rewrite(&mut o)
                    } else {
                        Ok(())
                    }
                }
                Ok(None) => {
                    let mut o = self.lock();
                    if o.lease != lease {
                        Ok(())
                    } else {
                        let n = o.keys.len();
                        self.renew(&mut o).inspect(|_| {
                            tw_log!(
                                Level::Info,
                                "etcd lease {lease:x} ended; {n} keys written again on lease {:x}",
                                o.lease
                            )
                        })
                    }
                }
                Err(e) => Err(e),
            };
            match outcome {
                Ok(()) if down => {
                    tw_log!(Level::Info, "etcd reachable again; lease and keys in place");
                    down = false;
                }
                Ok(()) => {}
                Err(e) if !down => {
                    tw_log!(
                        Level::Warn,
                        "etcd metadata: {e}; open segments keep working, keys are restored when etcd returns"
                    );
                    down = true;
                }
                Err(_) => {}
            }
        }
    }
}

impl EtcdStore {
    /// Connects to the cluster in `spec` (Mooncake's etcd connection string), grants the lease
    /// and starts the keep-alive and watch threads. Fails with the endpoint list when no
    /// endpoint answers. `watch_prefix`: the keys whose reads are cached.
    pub fn open(spec: &str, deadline: Duration, watch_prefix: &str) -> Result<EtcdStore> {
        let client = Arc::new(EtcdClient::new(spec, deadline)?);
        let ttl = lease_ttl();
        let lease = client.lease_grant(ttl).map_err(|e| {
            Error::new(
                ErrorKind::Metadata,
                format!(
                    "etcd metadata at {}: cannot start: {}",
                    client.endpoint_list(),
                    e.message()
                ),
            )
        })?;
        let shared = Arc::new(Shared {
            client: client.clone(),
            ttl,
            owned: Mutex::new(Owned {
                lease: lease.id,
                keys: BTreeMap::new(),
                behind: false,
            }),
            stop: Mutex::new(false),
            wake: Condvar::new(),
        });
        let spawn_err = |e: std::io::Error| {
            Error::new(ErrorKind::Internal, format!("starting etcd thread: {e}"))
        };
        let s2 = shared.clone();
        let keeper = std::thread::Builder::new()
            .name("tw-etcd-lease".into())
            .spawn(move || s2.keep_alive())
            .map_err(spawn_err)?;
        let cache = Arc::new(WatchCache::default());
        let watch_stop = Arc::new(AtomicBool::new(false));
        let store = EtcdStore {
            shared,
            cache: cache.clone(),
            watch_stop: watch_stop.clone(),
            keeper: Mutex::new(Some(keeper)),
        };
        let prefix = watch_prefix.to_string();
        // The watch thread is not joined: it notices `watch_stop` when its current window ends.
        std::thread::Builder::new()
            .name("tw-etcd-watch".into())
            .spawn(move || run_watch(client, cache, prefix, watch_stop))
            .map_err(spawn_err)?;
        Ok(store)
    }

    /// The client (for direct etcd operations).
    pub fn client(&self) -> &EtcdClient {
        &self.shared.client
    }

    /// The lease this store's keys hang on now.
    pub fn lease(&self) -> i64 {
        self.shared.lock().lease
    }

    /// Whether reads are served from the watched cache now.
    pub fn cache_live(&self) -> bool {
        self.cache.is_live()
    }

    /// Writes `key` on the lease and remembers it, so it is written again if the lease is lost.
    pub fn put(&self, key: &str, json: &str) -> Result<()> {
        self.shared.put(key, json)
    }

    /// Reads `key`, from the watched cache when it can.
    pub fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        let (epoch, was_stale) = match self.cache.begin_read(key) {
            Lookup::Hit(v) => return Ok(v),
            Lookup::Miss { epoch, was_stale } => (epoch, was_stale),
        };
        match self.shared.client.get(key.as_bytes()) {
            Ok((kv, rev)) => {
                let value = kv.map(|kv| kv.value);
                self.cache.fill(key, epoch, value.clone(), rev);
                Ok(value)
            }
            Err(e) => {
                self.cache.read_failed(key, was_stale);
                Err(e)
            }
        }
    }

    /// Deletes `key` and forgets it.
    pub fn delete(&self, key: &str) -> Result<()> {
        self.shared.lock().keys.remove(key);
        self.shared.client.delete(key.as_bytes()).map(|_| ())
    }

    /// Whether `key` changed since it was last read.
    pub fn is_stale(&self, key: &str) -> bool {
        self.cache.is_stale(key)
    }

    /// Stops the threads and revokes the lease (which deletes any key still on it).
    pub fn close(&self) {
        self.watch_stop.store(true, Ordering::Release);
        *self.shared.stop.lock_clean() = true;
        self.shared.wake.notify_all();
        let keeper = self.keeper.lock_clean().take();
        if let Some(t) = keeper {
            let _ = t.join();
            let mut o = self.shared.lock();
            o.keys.clear();
            if let Err(e) = self.shared.client.lease_revoke(o.lease) {
                tw_log!(Level::Warn, "revoking etcd lease {:x}: {e}", o.lease);
            }
        }
    }
}

impl Drop for EtcdStore {
    fn drop(&mut self) {
        self.close();
    }
}
