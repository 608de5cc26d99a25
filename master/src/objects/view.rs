//! Read-only views for the admin HTTP routes: key listings and one key's state, with no side
//! effects (no lease, no access time).

use super::super::segments::Segments;
use super::Objects;
use tidewire::store::proto::code;

/// Keys of complete objects for an admin listing (see [`Objects::list_keys`]).
#[derive(Debug, Clone, Default)]
pub struct KeyList {
    /// The keys listed, in no particular order.
    pub keys: Vec<String>,
    /// Complete objects in all (more than `keys.len()` when the listing was cut short).
    pub total: usize,
}

/// One key as an admin query sees it (see [`Objects::peek`]).
#[derive(Debug, Clone)]
pub struct KeyInfo {
    /// Value size in bytes.
    pub size: u64,
    /// The complete replicas.
    pub replicas: Vec<tidewire::store::proto::ReplicaDesc>,
    /// Time left on the read lease (`None`: no lease active).
    pub lease_left: Option<std::time::Duration>,
    /// Hard-pinned.
    pub hard_pin: bool,
    /// Soft-pinned now.
    pub soft_pin: bool,
}

impl Objects {
    /// Read-only admin listing: keys of complete objects, at most `max_items` of them and at most
    /// `max_bytes` of key bytes (each key counted with one separator byte); `total` counts every
    /// complete object. Each shard is locked once, for one pass over it; nothing changes (no
    /// lease, no access time).
    pub fn list_keys(&self, max_items: usize, max_bytes: usize) -> KeyList {
        let mut out = KeyList::default();
        let mut bytes = 0usize;
        let mut full = false;
        for sh in self.all() {
            for (_, k, o) in sh.table.iter() {
                if o.complete.is_none() {
                    continue;
                }
                out.total += 1;
                if full {
                    continue;
                }
                if out.keys.len() >= max_items || bytes + k.len() + 1 > max_bytes {
                    full = true;
                    continue;
                }
                bytes += k.len() + 1;
                out.keys.push(k.to_string());
            }
        }
        out
    }

    /// Read-only admin listing of every complete object's key, each followed by `\n`, handed
    /// to `out` one shard at a time: each shard is locked once, for the copy of its keys, and
    /// released before `out` runs (so a slow reader holds no lock). Keys written or removed
    /// while the listing runs may or may not be listed; each key is listed at most once.
    pub fn each_key_chunk(
        &self,
        out: &mut dyn FnMut(&[u8]) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        let mut buf = Vec::new();
        for i in 0..self.shards.len() {
            buf.clear();
            {
                let sh = self.shard(i);
                for (_, k, o) in sh.table.iter() {
                    if o.complete.is_some() {
                        buf.extend_from_slice(k.as_bytes());
                        buf.push(b'\n');
                    }
                }
            }
            if !buf.is_empty() {
                out(&buf)?;
            }
        }
        Ok(())
    }

    /// Read-only admin query of one key: its complete value's size and replicas, lease and pins.
    /// Grants no lease and adds no read hold (unlike Get). `OBJECT_NOT_FOUND`, or
    /// `REPLICA_IS_NOT_READY` while only a write is in flight.
    pub fn peek(&self, key: &str, segs: &Segments) -> Result<KeyInfo, i32> {
        let now = self.now();
        let (hash, si) = self.locate(key);
        let sh = self.shard(si);
        let o = sh.table.lookup(hash, key).ok_or(code::OBJECT_NOT_FOUND)?;
        let c = o.complete.as_ref().ok_or(code::REPLICA_IS_NOT_READY)?;
        Ok(KeyInfo {
            size: c.size,
            replicas: segs.descs(c.replicas.as_slice(), c.size),
            lease_left: (o.lease_until > now)
                .then(|| std::time::Duration::from_nanos(o.lease_until - now)),
            hard_pin: o.hard_pin,
            soft_pin: o.soft_pin_until > now,
        })
    }

    /// Bytes the shards' slabs and indexes hold (keys and boxed parts not counted).
    pub fn footprint(&self) -> usize {
        self.all().map(|s| s.table.footprint()).sum()
    }
}
