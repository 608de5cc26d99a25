//! KV events' views of the objects: the inventory a subscriber starts from, and the `cleared`
//! event after a remove_all that left nothing.

use super::super::kv_events::{Event, Medium};
use super::{Objects, SHARDS, Version};

/// One page of the inventory (see [`Objects::inventory`]).
#[derive(Debug, Clone, Default)]
pub struct Inventory {
    /// Readable keys and where their values are.
    pub keys: Vec<(String, Medium)>,
    /// The shard the next page starts at; `None` after the last shard.
    pub next: Option<usize>,
}

impl Objects {
    /// Readable keys of the shards from `from` on, whole shards until at least `max_keys` keys
    /// are listed. Each shard is locked once.
    pub fn inventory(&self, from: usize, max_keys: usize) -> Inventory {
        let mut out = Inventory::default();
        for si in from..SHARDS {
            if out.keys.len() >= max_keys.max(1) {
                out.next = Some(si);
                break;
            }
            let sh = self.shard(si);
            for (_, key, o) in sh.table.iter() {
                if let Some(c) = o.complete.as_ref() {
                    out.keys.push((key.to_string(), Version::medium(c)));
                }
            }
        }
        out
    }

    /// After a remove_all walk: when no readable object is left, queues `cleared` with every
    /// shard locked (so no put completes in between). Returns whether it did.
    pub fn cleared_if_empty(&self) -> bool {
        let Some(kv) = self.kv.get() else {
            return false;
        };
        let shards: Vec<_> = self.all_at_once();
        let empty = shards
            .iter()
            .all(|sh| sh.table.len() == 0 || sh.table.iter().all(|(_, _, o)| o.complete.is_none()));
        if empty {
            kv.push(Event::Cleared);
        }
        empty
    }

    /// Every shard's lock, taken in shard order and held together.
    fn all_at_once(&self) -> Vec<std::sync::MutexGuard<'_, super::Shard>> {
        (0..SHARDS).map(|i| self.shard(i)).collect()
    }
}
