//! One shard's objects: a slab of fixed-size records (a `Vec`, freed slots reused through a
//! free list), the keys' bytes one after another in one buffer, and a hash index that holds
//! only slot numbers (4 bytes per entry). A record names its key by offset and length in the
//! key buffer, so storing an object allocates nothing of its own, and a mass removal frees a
//! few large buffers instead of millions of small ones (which the allocator would keep until
//! a trim that holds its locks while it walks them). A removed key's bytes stay until the
//! buffer is compacted.
//!
//! Slot numbers are stable until the shard is compacted, which bumps [`Table::layout`]: a walk
//! that let go of the shard's lock between chunks and finds the layout changed starts the
//! shard again (every walk is idempotent). Compacting the key buffer moves no record.

use super::Object;
use hashbrown::HashTable;
use std::hash::{BuildHasher, RandomState};

/// Fewer free slots than this are never worth a compaction.
const COMPACT_MIN_FREE: usize = 64;

/// Fewer dead key bytes than this are never worth a compaction of the key buffer.
const COMPACT_MIN_KEY_BYTES: usize = 4096;

/// A shard's records, their keys and their index.
pub(super) struct Table {
    slots: Vec<Option<Object>>,
    free: Vec<u32>,
    index: HashTable<u32>,
    hasher: RandomState,
    /// Every record's key, at the record's `key_at` (removed keys' bytes too, until compacted).
    keys: String,
    /// Bytes of `keys` that belong to no record.
    dead_key_bytes: usize,
    /// Changes whenever records move to other slots (compaction).
    pub(super) layout: u32,
}

/// The key of record `o` in the key buffer `keys`.
fn key_in<'k>(keys: &'k str, o: &Object) -> &'k str {
    keys.get(o.key_at..o.key_at + o.key_len as usize)
        .unwrap_or_default()
}

impl Table {
    /// An empty table; `hasher` must be the one the caller hashes keys with.
    pub(super) fn new(hasher: RandomState) -> Table {
        Table {
            slots: Vec::new(),
            free: Vec::new(),
            index: HashTable::new(),
            hasher,
            keys: String::new(),
            dead_key_bytes: 0,
            layout: 0,
        }
    }

    /// Live records.
    pub(super) fn len(&self) -> usize {
        self.index.len()
    }

    /// Slots in use or free (a walk's bound).
    pub(super) fn slots(&self) -> usize {
        self.slots.len()
    }

    /// The slot of `key` (whose hash is `hash`).
    pub(super) fn find(&self, hash: u64, key: &str) -> Option<u32> {
        let (slots, keys) = (&self.slots, self.keys.as_str());
        self.index
            .find(hash, |&i| {
                slots[i as usize]
                    .as_ref()
                    .is_some_and(|o| key_in(keys, o) == key)
            })
            .copied()
    }

    /// The record of `key` (whose hash is `hash`), if there is one.
    pub(super) fn lookup(&self, hash: u64, key: &str) -> Option<&Object> {
        self.find(hash, key).and_then(|s| self.get(s))
    }

    /// The record of `key` (whose hash is `hash`), if there is one.
    pub(super) fn lookup_mut(&mut self, hash: u64, key: &str) -> Option<&mut Object> {
        self.find(hash, key).and_then(|s| self.get_mut(s))
    }

    /// The record in `slot`, if it holds one.
    pub(super) fn get(&self, slot: u32) -> Option<&Object> {
        self.slots.get(slot as usize).and_then(Option::as_ref)
    }

    /// The record in `slot`, if it holds one.
    pub(super) fn get_mut(&mut self, slot: u32) -> Option<&mut Object> {
        self.slots.get_mut(slot as usize).and_then(Option::as_mut)
    }

    /// The key of the record in `slot`, if it holds one.
    pub(super) fn key(&self, slot: u32) -> Option<&str> {
        self.get(slot).map(|o| key_in(&self.keys, o))
    }

    /// The record in `slot` with its key, if it holds one.
    pub(super) fn entry_mut(&mut self, slot: u32) -> Option<(&str, &mut Object)> {
        let o = self.slots.get_mut(slot as usize)?.as_mut()?;
        Some((key_in(&self.keys, o), o))
    }

    /// Adds a record for `key`, which is not in the table (the caller checked); returns its
    /// slot. The record's own key fields are set here.
    pub(super) fn insert(&mut self, hash: u64, key: &str, mut o: Object) -> u32 {
        o.key_at = self.keys.len();
        // MAX_KEY_LEN (1 MiB) bounds a key far below 4 GiB.
        o.key_len = u32::try_from(key.len()).unwrap_or(u32::MAX);
        self.keys.push_str(key);
        let slot = match self.free.pop() {
            Some(s) => {
                self.slots[s as usize] = Some(o);
                s
            }
            None => {
                // A shard never holds 4 G records: the master's memory runs out long before.
                let s = u32::try_from(self.slots.len()).unwrap_or(u32::MAX);
                self.slots.push(Some(o));
                s
            }
        };
        let (slots, keys, hasher) = (&self.slots, self.keys.as_str(), &self.hasher);
        self.index
            .insert_unique(hash, slot, |&i| rehash(hasher, slots, keys, i));
        slot
    }

    /// Makes room for `records` more records with `key_bytes` more key bytes (a new leader
    /// restoring a snapshot: the table then never grows and rehashes on the way).
    pub(super) fn reserve(&mut self, records: usize, key_bytes: usize) {
        self.slots.reserve(records);
        self.keys.reserve(key_bytes);
        let (slots, keys, hasher) = (&self.slots, self.keys.as_str(), &self.hasher);
        self.index
            .reserve(records, |&i| rehash(hasher, slots, keys, i));
    }

    /// Puts `o` in place of the record in `slot` (same key) and returns the record it replaces.
    pub(super) fn replace(&mut self, slot: u32, mut o: Object) -> Option<Object> {
        let old = self.get_mut(slot)?;
        (o.key_at, o.key_len) = (old.key_at, old.key_len);
        Some(std::mem::replace(old, o))
    }

    /// Takes the record out of `slot` (the slot becomes free) and hands it to `f` with its key.
    pub(super) fn remove_with<R>(
        &mut self,
        slot: u32,
        f: impl FnOnce(Object, &str) -> R,
    ) -> Option<R> {
        let o = self.slots.get_mut(slot as usize)?.take()?;
        let key = key_in(&self.keys, &o);
        let hash = self.hasher.hash_one(key);
        if let Ok(e) = self.index.find_entry(hash, |&i| i == slot) {
            e.remove();
        }
        self.free.push(slot);
        self.dead_key_bytes += key.len();
        Some(f(o, key))
    }

    /// Takes the record out of `slot` (the slot becomes free).
    pub(super) fn remove(&mut self, slot: u32) -> Option<Object> {
        self.remove_with(slot, |o, _| o)
    }

    /// Every record with its slot and key.
    pub(super) fn iter(&self) -> impl Iterator<Item = (u32, &str, &Object)> {
        let keys = self.keys.as_str();
        self.slots
            .iter()
            .enumerate()
            .filter_map(move |(i, o)| o.as_ref().map(|o| (i as u32, key_in(keys, o), o)))
    }

    /// Every record, mutably.
    pub(super) fn values_mut(&mut self) -> impl Iterator<Item = &mut Object> {
        self.slots.iter_mut().filter_map(Option::as_mut)
    }

    /// Bytes this table holds in its own allocations (boxed parts not counted).
    pub(super) fn footprint(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<Option<Object>>()
            + self.free.capacity() * 4
            + self.index.allocation_size()
            + self.keys.capacity()
    }

    /// When at least half the slots are free, moves the records down into the free ones (in
    /// order), drops the free tail and gives the spare capacity back; when at least half the
    /// key buffer is dead, copies the live keys into a buffer of their size. So memory follows
    /// the live records after a mass removal. An empty table lets go of everything. Returns
    /// whether records or keys moved or memory was released.
    pub(super) fn compact(&mut self) -> bool {
        let live = self.index.len();
        if live == 0 {
            if self.slots.capacity() == 0 && self.index.capacity() == 0 && self.keys.capacity() == 0
            {
                return false;
            }
            self.slots = Vec::new();
            self.free = Vec::new();
            self.index = HashTable::new();
            self.keys = String::new();
            self.dead_key_bytes = 0;
            self.layout = self.layout.wrapping_add(1);
            return true;
        }
        let slots_moved = self.compact_slots();
        slots_moved | self.compact_keys()
    }

    fn compact_slots(&mut self) -> bool {
        let holes = self.slots.len() - self.index.len();
        if holes < COMPACT_MIN_FREE || holes * 2 < self.slots.len() {
            return false;
        }
        let mut to = 0usize;
        for from in 0..self.slots.len() {
            if self.slots[from].is_none() {
                continue;
            }
            if from != to {
                self.slots.swap(from, to);
                let key = self.slots[to]
                    .as_ref()
                    .map_or("", |o| key_in(&self.keys, o));
                let hash = self.hasher.hash_one(key);
                if let Some(i) = self.index.find_mut(hash, |&i| i as usize == from) {
                    *i = to as u32;
                }
            }
            to += 1;
        }
        self.slots.truncate(to);
        self.slots.shrink_to_fit();
        self.free = Vec::new();
        let (slots, keys, hasher) = (&self.slots, self.keys.as_str(), &self.hasher);
        self.index
            .shrink_to_fit(|&i| rehash(hasher, slots, keys, i));
        self.layout = self.layout.wrapping_add(1);
        true
    }

    fn compact_keys(&mut self) -> bool {
        let dead = self.dead_key_bytes;
        if dead < COMPACT_MIN_KEY_BYTES || dead * 2 < self.keys.len() {
            return false;
        }
        let mut keys = String::with_capacity(self.keys.len() - dead);
        for o in self.slots.iter_mut().filter_map(Option::as_mut) {
            let at = keys.len();
            keys.push_str(key_in(&self.keys, o));
            o.key_at = at;
        }
        self.keys = keys;
        self.dead_key_bytes = 0;
        true
    }
}

fn rehash(hasher: &RandomState, slots: &[Option<Object>], keys: &str, i: u32) -> u64 {
    hasher.hash_one(slots[i as usize].as_ref().map_or("", |o| key_in(keys, o)))
}

#[cfg(test)]
mod tests {
    use super::super::{Object, Objects};
    use super::Table;
    use std::hash::BuildHasher;

    const RECORD: usize = 96;

    fn insert(t: &mut Table, objs: &Objects, k: &str) -> u32 {
        t.insert(objs.hasher.hash_one(k), k, Object::new(false, 1))
    }

    fn find(t: &Table, objs: &Objects, k: &str) -> Option<u32> {
        t.find(objs.hasher.hash_one(k), k)
    }

    #[test]
    fn records_are_compact_and_slots_are_reused() {
        assert_eq!(std::mem::size_of::<Option<Object>>(), RECORD);
        let objs = Objects::default();
        let mut t = Table::new(objs.hasher.clone());
        let n = 100_000u32;
        let keys: Vec<String> = (0..n).map(|i| format!("{i:064x}")).collect();
        for k in &keys {
            insert(&mut t, &objs, k);
        }
        // Slab, keys and index: a record and a key each (at most as much spare, as a Vec
        // grows), and the index.
        let per = t.footprint() as f64 / f64::from(n);
        let bound = (RECORD + 64) as f64 * 2.0 + 12.0;
        assert!(per < bound, "{per} bytes per object");
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(find(&t, &objs, k), Some(i as u32));
            assert_eq!(t.key(i as u32), Some(k.as_str()));
        }
        // Free slots are reused, and a table half empty compacts (records move, keys stay
        // found).
        for i in (0..n).step_by(2) {
            assert!(t.remove(i).is_some());
        }
        assert!(t.remove(0).is_none(), "a free slot holds nothing");
        assert_eq!(insert(&mut t, &objs, "again"), n - 2);
        t.remove(n - 2);
        let layout = t.layout;
        assert!(t.compact());
        assert_ne!(t.layout, layout);
        assert_eq!(t.slots(), t.len());
        assert_eq!(t.len(), n as usize / 2);
        assert_eq!(t.keys.len(), 64 * n as usize / 2, "the dead keys went too");
        assert_eq!(insert(&mut t, &objs, "again"), n / 2);
        for (i, k) in keys.iter().enumerate().filter(|(i, _)| i % 2 == 1) {
            let slot = find(&t, &objs, k).unwrap_or_else(|| panic!("{i} lost"));
            assert_eq!(t.key(slot), Some(k.as_str()));
        }
        assert!(find(&t, &objs, "again").is_some());
        // Emptied, it lets go of everything.
        let slots: Vec<u32> = t.iter().map(|(s, _, _)| s).collect();
        for s in slots {
            t.remove(s);
        }
        assert!(t.compact());
        assert_eq!(t.footprint(), 0);
    }

    /// Keys removed while their slots are reused leave no holes in the slab, only dead bytes
    /// in the key buffer: those are compacted away on their own, and every key stays found.
    #[test]
    fn dead_key_bytes_are_compacted_without_slot_holes() {
        let objs = Objects::default();
        let mut t = Table::new(objs.hasher.clone());
        let live: Vec<String> = (0..1000).map(|i| format!("live-{i:059}")).collect();
        for k in &live {
            insert(&mut t, &objs, k);
        }
        for round in 0..4 {
            let k = format!("churn-{round}-{}", "x".repeat(1000));
            for i in 0..100 {
                let slot = insert(&mut t, &objs, &format!("{k}{i}"));
                assert!(t.remove(slot).is_some());
            }
        }
        assert_eq!(t.slots(), 1001, "one slot reused by every churned key");
        assert!(
            t.keys.len() > 400_000,
            "dead bytes accumulate: {}",
            t.keys.len()
        );
        let layout = t.layout;
        assert!(t.compact());
        assert_eq!(t.layout, layout, "no record moved");
        assert_eq!(t.keys.len(), 64 * 1000);
        assert!(t.keys.capacity() < 2 * 64 * 1000);
        for (i, k) in live.iter().enumerate() {
            assert_eq!(find(&t, &objs, k), Some(i as u32), "{k}");
            assert_eq!(t.key(i as u32), Some(k.as_str()));
        }
        assert!(!t.compact(), "nothing left to compact");
    }

    /// A record replaced in place keeps its key.
    #[test]
    fn a_replaced_record_keeps_its_key() {
        let objs = Objects::default();
        let mut t = Table::new(objs.hasher.clone());
        insert(&mut t, &objs, "a");
        let b = insert(&mut t, &objs, "bb");
        assert!(t.replace(b, Object::new(true, 2)).is_some());
        assert_eq!(t.key(b), Some("bb"));
        assert!(t.get(b).is_some_and(|o| o.hard_pin));
        assert_eq!(find(&t, &objs, "bb"), Some(b));
        assert!(t.replace(7, Object::new(true, 2)).is_none());
    }
}
