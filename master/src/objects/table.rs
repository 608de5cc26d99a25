//! One shard's objects: a slab of fixed-size records (a `Vec`, freed slots reused through a
//! free list) and a hash index that holds only slot numbers (4 bytes per entry). The key lives
//! once, in its record. Slot numbers are stable until the shard is compacted, which bumps
//! [`Table::layout`]: a walk that let go of the shard's lock between chunks and finds the
//! layout changed starts the shard again (every walk is idempotent).

use super::Object;
use hashbrown::HashTable;
use std::hash::{BuildHasher, RandomState};

/// Fewer free slots than this are never worth a compaction.
const COMPACT_MIN_FREE: usize = 64;

/// A shard's records and their index.
pub(super) struct Table {
    slots: Vec<Option<Object>>,
    free: Vec<u32>,
    index: HashTable<u32>,
    hasher: RandomState,
    /// Changes whenever records move to other slots (compaction).
    pub(super) layout: u32,
}

impl Table {
    /// An empty table; `hasher` must be the one the caller hashes keys with.
    pub(super) fn new(hasher: RandomState) -> Table {
        Table {
            slots: Vec::new(),
            free: Vec::new(),
            index: HashTable::new(),
            hasher,
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
        let slots = &self.slots;
        self.index
            .find(hash, |&i| {
                slots[i as usize]
                    .as_ref()
                    .is_some_and(|o| o.key.as_ref() == key)
            })
            .copied()
    }

    /// The record in `slot`, if it holds one.
    pub(super) fn get(&self, slot: u32) -> Option<&Object> {
        self.slots.get(slot as usize).and_then(Option::as_ref)
    }

    /// The record in `slot`, if it holds one.
    pub(super) fn get_mut(&mut self, slot: u32) -> Option<&mut Object> {
        self.slots.get_mut(slot as usize).and_then(Option::as_mut)
    }

    /// Adds a record whose key is not in the table (the caller checked); returns its slot.
    pub(super) fn insert(&mut self, hash: u64, o: Object) -> u32 {
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
        let (slots, hasher) = (&self.slots, &self.hasher);
        self.index
            .insert_unique(hash, slot, |&i| rehash(hasher, slots, i));
        slot
    }

    /// Takes the record out of `slot` (the slot becomes free).
    pub(super) fn remove(&mut self, slot: u32) -> Option<Object> {
        let o = self.slots.get_mut(slot as usize)?.take()?;
        let hash = self.hasher.hash_one(o.key.as_ref());
        if let Ok(e) = self.index.find_entry(hash, |&i| i == slot) {
            e.remove();
        }
        self.free.push(slot);
        Some(o)
    }

    /// Every record with its slot.
    pub(super) fn iter(&self) -> impl Iterator<Item = (u32, &Object)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, o)| o.as_ref().map(|o| (i as u32, o)))
    }

    /// Every record, mutably.
    pub(super) fn values_mut(&mut self) -> impl Iterator<Item = &mut Object> {
        self.slots.iter_mut().filter_map(Option::as_mut)
    }

    /// Bytes this table holds in its own allocations (keys and boxed parts not counted).
    pub(super) fn footprint(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<Option<Object>>()
            + self.free.capacity() * 4
            + self.index.allocation_size()
    }

    /// When at least half the slots are free, moves the records down into the free ones (in
    /// order), drops the free tail and gives the spare capacity back, so memory follows the
    /// live records after a mass removal. An empty table lets go of everything. Returns
    /// whether records moved or memory was released.
    pub(super) fn compact(&mut self) -> bool {
        let live = self.index.len();
        if live == 0 {
            if self.slots.capacity() == 0 && self.index.capacity() == 0 {
                return false;
            }
            self.slots = Vec::new();
            self.free = Vec::new();
            self.index = HashTable::new();
            self.layout = self.layout.wrapping_add(1);
            return true;
        }
        let holes = self.slots.len() - live;
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
                let key = self.slots[to].as_ref().map_or("", |o| o.key.as_ref());
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
        let (slots, hasher) = (&self.slots, &self.hasher);
        self.index.shrink_to_fit(|&i| rehash(hasher, slots, i));
        self.layout = self.layout.wrapping_add(1);
        true
    }
}

fn rehash(hasher: &RandomState, slots: &[Option<Object>], i: u32) -> u64 {
    hasher.hash_one(slots[i as usize].as_ref().map_or("", |o| o.key.as_ref()))
}

#[cfg(test)]
mod tests {
    use super::super::{Object, Objects};
    use super::Table;
    use std::hash::BuildHasher;

    #[test]
    fn records_are_compact_and_slots_are_reused() {
        assert_eq!(std::mem::size_of::<Option<Object>>(), 104);
        let objs = Objects::default();
        let mut t = Table::new(objs.hasher.clone());
        let n = 100_000u32;
        let keys: Vec<String> = (0..n).map(|i| format!("{i:064x}")).collect();
        for k in &keys {
            let h = objs.hasher.hash_one(k.as_str());
            t.insert(h, Object::new(k, false, 1));
        }
        // Slab and index: 104 bytes a record (at most as many spare, as a Vec grows), and
        // the index.
        let per = t.footprint() as f64 / f64::from(n);
        assert!(per < 104.0 * 2.0 + 12.0, "{per} bytes per object");
        for (i, k) in keys.iter().enumerate() {
            let h = objs.hasher.hash_one(k.as_str());
            assert_eq!(t.find(h, k), Some(i as u32));
        }
        // Free slots are reused, and a table half empty compacts (records move, keys stay
        // found).
        for i in (0..n).step_by(2) {
            assert!(t.remove(i).is_some());
        }
        assert!(t.remove(0).is_none(), "a free slot holds nothing");
        let h = objs.hasher.hash_one("again");
        assert_eq!(t.insert(h, Object::new("again", false, 1)), n - 2);
        t.remove(n - 2);
        let layout = t.layout;
        assert!(t.compact());
        assert_ne!(t.layout, layout);
        assert_eq!(t.slots(), t.len());
        assert_eq!(t.len(), n as usize / 2);
        assert_eq!(t.insert(h, Object::new("again", false, 1)), n / 2);
        for (i, k) in keys.iter().enumerate().filter(|(i, _)| i % 2 == 1) {
            let h = objs.hasher.hash_one(k.as_str());
            let slot = t.find(h, k).unwrap_or_else(|| panic!("{i} lost"));
            assert_eq!(&*t.get(slot).unwrap().key, k.as_str());
        }
        assert!(t.find(objs.hasher.hash_one("again"), "again").is_some());
        // Emptied, it lets go of everything.
        let slots: Vec<u32> = t.iter().map(|(s, _)| s).collect();
        for s in slots {
            t.remove(s);
        }
        assert!(t.compact());
        assert_eq!(t.footprint(), 0);
    }
}
