//! Engine-owned id tables: a slab of `Arc<T>` with a generation per slot, so a stale, freed or
//! forged id is looked up and refused instead of dereferenced. Ids are never 0 or `u64::MAX`
//! (Mooncake uses those as "failed" markers).

use std::sync::{Arc, Mutex};

struct Entry<T> {
    generation: u32,
    value: Option<Arc<T>>,
}

/// A generational table of shared objects.
pub struct IdTable<T> {
    slots: Mutex<Slab<T>>,
}

struct Slab<T> {
    entries: Vec<Entry<T>>,
    free: Vec<u32>,
}

const GEN_MASK: u32 = 0x7fff_ffff;

fn make_id(index: u32, generation: u32) -> u64 {
    // generation >= 1 keeps the id away from 0; the mask keeps it away from u64::MAX.
    ((generation as u64) << 32) | index as u64
}

fn split_id(id: u64) -> (u32, u32) {
    (id as u32, (id >> 32) as u32)
}

impl<T> Default for IdTable<T> {
    fn default() -> Self {
        IdTable {
            slots: Mutex::new(Slab {
                entries: Vec::new(),
                free: Vec::new(),
            }),
        }
    }
}

impl<T> IdTable<T> {
    /// Stores `value` and returns its new id.
    pub fn insert(&self, value: Arc<T>) -> u64 {
        let mut s = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(index) = s.free.pop() {
            let e = &mut s.entries[index as usize];
            e.generation = (e.generation % GEN_MASK) + 1;
            e.value = Some(value);
            make_id(index, e.generation)
        } else {
            let index = s.entries.len() as u32;
            s.entries.push(Entry {
                generation: 1,
                value: Some(value),
            });
            make_id(index, 1)
        }
    }

    /// The live object for `id`, if any.
    pub fn get(&self, id: u64) -> Option<Arc<T>> {
        let (index, generation) = split_id(id);
        let s = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        let e = s.entries.get(index as usize)?;
        if e.generation == generation {
            e.value.clone()
        } else {
            None
        }
    }

    /// Removes `id` if `allow` approves of its object; returns the object, or `Err(None)` for an
    /// unknown id and `Err(Some(obj))` when refused.
    pub fn remove_if(
        &self,
        id: u64,
        allow: impl FnOnce(&T) -> bool,
    ) -> Result<Arc<T>, Option<Arc<T>>> {
        let (index, generation) = split_id(id);
        let mut s = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        let Some(e) = s.entries.get_mut(index as usize) else {
            return Err(None);
        };
        if e.generation != generation || e.value.is_none() {
            return Err(None);
        }
        if !allow(e.value.as_ref().expect("checked")) {
            return Err(e.value.clone());
        }
        let v = e.value.take().expect("checked");
        s.free.push(index);
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_and_forged_ids_are_refused() {
        let t: IdTable<u32> = IdTable::default();
        let a = t.insert(Arc::new(1));
        assert_ne!(a, 0);
        assert_eq!(*t.get(a).unwrap(), 1);
        assert!(
            t.remove_if(a, |_| false).unwrap_err().is_some(),
            "refused removal keeps it"
        );
        assert!(t.get(a).is_some());
        assert!(t.remove_if(a, |_| true).is_ok());
        assert!(t.get(a).is_none(), "freed");
        assert!(
            t.remove_if(a, |_| true).unwrap_err().is_none(),
            "double free"
        );
        let b = t.insert(Arc::new(2));
        assert_ne!(a, b, "slot reuse gets a new generation");
        assert!(t.get(a).is_none());
        assert!(t.get(0).is_none() && t.get(u64::MAX).is_none() && t.get(b ^ 1).is_none());
    }
}
