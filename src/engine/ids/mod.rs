//! Engine-owned id tables: `Arc<T>` objects in generation-tagged slots, so a stale, freed or
//! forged id is looked up and refused instead of dereferenced. Ids are never 0 or `u64::MAX`
//! (Mooncake uses those as "failed" markers).
//!
//! Lookups are lock-free: slots live in chunks that are allocated once and never move or go
//! away while the table lives, and each slot's state word packs its generation, a live bit and
//! a count of readers. A reader joins with one compare-and-swap that also checks the generation;
//! a remover retires the slot with a compare-and-swap that requires zero readers, so the object
//! is never dropped under a reader. Only insert and remove take the allocation lock (to pick or
//! return a slot index).

use crate::error::{ErrorKind, Result, fail};
use crate::sync::LockClean;
use std::marker::PhantomData;
use std::sync::Arc;

#[cfg(loom)]
use loom::sync::{
    Mutex,
    atomic::{AtomicPtr, AtomicU64, Ordering},
};
#[cfg(not(loom))]
use std::sync::{
    Mutex,
    atomic::{AtomicPtr, AtomicU64, Ordering},
};

/// Slots per chunk (log2), and chunks per table: at most `MAX_LIVE` ids are live at once.
#[cfg(not(loom))]
const CHUNK_BITS: u32 = 10;
#[cfg(not(loom))]
const MAX_CHUNKS: usize = 1024;
#[cfg(loom)]
const CHUNK_BITS: u32 = 1;
#[cfg(loom)]
const MAX_CHUNKS: usize = 2;
const CHUNK: usize = 1 << CHUNK_BITS;

/// Most ids live at once in one table.
pub const MAX_LIVE: usize = CHUNK * MAX_CHUNKS;

/// Generations run 1..=GEN_MASK (never 0, so no id is 0; the top bit stays clear, so no id is
/// `u64::MAX`).
const GEN_MASK: u32 = 0x7fff_ffff;
/// State word: generation in the high 32 bits, then the live bit, then the reader count.
const LIVE: u64 = 1 << 31;
const READERS: u64 = LIVE - 1;

fn make_id(index: u32, generation: u32) -> u64 {
    ((generation as u64) << 32) | index as u64
}

fn split_id(id: u64) -> (u32, u32) {
    (id as u32, (id >> 32) as u32)
}

fn generation_of(state: u64) -> u32 {
    (state >> 32) as u32
}

fn pause() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::thread::yield_now();
}

struct Slot<T> {
    state: AtomicU64,
    /// `Arc::into_raw` of the live object; NULL when free.
    value: AtomicPtr<T>,
}

struct Alloc {
    /// Slots ever handed out (indices below are in allocated chunks).
    next: u32,
    free: Vec<u32>,
}

/// A generational table of shared objects with lock-free lookups.
pub struct IdTable<T> {
    /// Chunk `c` holds slots `c * CHUNK ..`; NULL until first needed, then fixed until drop.
    chunks: Box<[AtomicPtr<Slot<T>>]>,
    alloc: Mutex<Alloc>,
    /// The table owns `Arc<T>`s: Send/Sync only when those are.
    _owns: PhantomData<Arc<T>>,
}

impl<T> Default for IdTable<T> {
    fn default() -> Self {
        IdTable {
            chunks: (0..MAX_CHUNKS)
                .map(|_| AtomicPtr::new(std::ptr::null_mut()))
                .collect(),
            alloc: Mutex::new(Alloc {
                next: 0,
                free: Vec::new(),
            }),
            _owns: PhantomData,
        }
    }
}

/// A reader's hold on a live slot: the object cannot be dropped until it is released.
struct ReadHold<'a, T> {
    slot: &'a Slot<T>,
}

impl<T> ReadHold<'_, T> {
    fn value(&self) -> &T {
        // Acquire pairs with the Release store of the state in `insert`, which follows the
        // value's store; the hold keeps the object alive (removers wait for zero readers).
        let p = self.slot.value.load(Ordering::Acquire);
        // SAFETY: while a reader is counted on a live slot, `value` is the `Arc::into_raw` of
        // the object stored by `insert`, and `remove_if` retires it only at zero readers.
        unsafe { &*p }
    }
}

impl<T> Drop for ReadHold<'_, T> {
    fn drop(&mut self) {
        // Release: our reads of the object happen before a remover's Acquire sees zero readers.
        self.slot.state.fetch_sub(1, Ordering::Release);
    }
}

impl<T> IdTable<T> {
    fn slot(&self, index: u32) -> Option<&Slot<T>> {
        let chunk = self.chunks.get(index as usize >> CHUNK_BITS)?;
        let base = chunk.load(Ordering::Acquire);
        if base.is_null() {
            return None;
        }
        // SAFETY: a non-NULL chunk pointer is a leaked `Box<[Slot<T>]>` of CHUNK slots that
        // lives until the table drops; the offset is below CHUNK.
        Some(unsafe { &*base.add(index as usize & (CHUNK - 1)) })
    }

    /// Joins the readers of `id`'s slot if `id` is live.
    fn hold(&self, id: u64) -> Option<ReadHold<'_, T>> {
        let (index, generation) = split_id(id);
        if generation == 0 || generation > GEN_MASK {
            return None;
        }
        let slot = self.slot(index)?;
        let mut s = slot.state.load(Ordering::Relaxed);
        loop {
            if generation_of(s) != generation || s & LIVE == 0 {
                return None;
            }
            if s & READERS == READERS {
                // Absurdly many readers at once: wait rather than overflow into the live bit.
                pause();
                s = slot.state.load(Ordering::Relaxed);
                continue;
            }
            // Acquire pairs with `insert`'s Release store: the value is visible once we hold.
            match slot
                .state
                .compare_exchange_weak(s, s + 1, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => return Some(ReadHold { slot }),
                Err(now) => s = now,
            }
        }
    }

    /// Stores `value` and returns its new id; `TooManyRequests` when `MAX_LIVE` ids are live.
    pub fn insert(&self, value: Arc<T>) -> Result<u64> {
        let mut a = self.alloc.lock_clean();
        let index = match a.free.pop() {
            Some(i) => i,
            None if (a.next as usize) < MAX_LIVE => {
                let i = a.next;
                let chunk = &self.chunks[i as usize >> CHUNK_BITS];
                if chunk.load(Ordering::Relaxed).is_null() {
                    let slots: Box<[Slot<T>]> = (0..CHUNK)
                        .map(|_| Slot {
                            state: AtomicU64::new(0),
                            value: AtomicPtr::new(std::ptr::null_mut()),
                        })
                        .collect();
                    // Release: readers that see the pointer see initialised slots.
                    chunk.store(Box::into_raw(slots).cast::<Slot<T>>(), Ordering::Release);
                }
                a.next += 1;
                i
            }
            None => {
                return fail(
                    ErrorKind::TooManyRequests,
                    format!("{MAX_LIVE} ids are live, the most one engine holds; free some"),
                );
            }
        };
        drop(a);
        let slot = self.slot(index).expect("allocated above");
        // The slot is free: not live, no readers (readers only join live slots), so this thread
        // owns it until the Release store below publishes it.
        let s = slot.state.load(Ordering::Relaxed);
        let generation = (generation_of(s) % GEN_MASK) + 1;
        slot.value
            .store(Arc::into_raw(value).cast_mut(), Ordering::Relaxed);
        slot.state
            .store(((generation as u64) << 32) | LIVE, Ordering::Release);
        Ok(make_id(index, generation))
    }

    /// The live object for `id`, if any.
    pub fn get(&self, id: u64) -> Option<Arc<T>> {
        let hold = self.hold(id)?;
        let p: *const T = hold.value();
        // SAFETY: `p` came from `Arc::into_raw` and the table's reference is alive while we
        // hold the slot, so adding a reference and adopting it is sound.
        unsafe {
            Arc::increment_strong_count(p);
            Some(Arc::from_raw(p))
        }
    }

    /// Runs `f` on the live object for `id` without touching its reference count. `f` should
    /// be short: a remover of `id` waits for it.
    pub fn with<R>(&self, id: u64, f: impl FnOnce(&T) -> R) -> Option<R> {
        let hold = self.hold(id)?;
        Some(f(hold.value()))
    }

    /// Removes `id` if `allow` approves of its object; returns the object, or `Err(None)` for an
    /// unknown id and `Err(Some(obj))` when refused.
    pub fn remove_if(
        &self,
        id: u64,
        allow: impl FnOnce(&T) -> bool,
    ) -> std::result::Result<Arc<T>, Option<Arc<T>>> {
        let v = self.get(id).ok_or(None)?;
        if !allow(&v) {
            return Err(Some(v));
        }
        let (index, generation) = split_id(id);
        let slot = self.slot(index).expect("get found it");
        let mut s = slot.state.load(Ordering::Relaxed);
        loop {
            if generation_of(s) != generation || s & LIVE == 0 {
                return Err(None); // another remover won
            }
            if s & READERS != 0 {
                pause(); // readers hold for a few loads
                s = slot.state.load(Ordering::Relaxed);
                continue;
            }
            // Acquire: every reader's use of the object happened before (their Release
            // decrement); afterwards nobody can join, the slot is not live.
            match slot.state.compare_exchange_weak(
                s,
                (generation as u64) << 32,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(now) => s = now,
            }
        }
        let p = slot.value.swap(std::ptr::null_mut(), Ordering::Relaxed);
        // SAFETY: `p` is the table's `Arc::into_raw` reference, retired above with no readers.
        drop(unsafe { Arc::from_raw(p) });
        self.alloc.lock_clean().free.push(index);
        Ok(v)
    }
}

impl<T> Drop for IdTable<T> {
    fn drop(&mut self) {
        for chunk in self.chunks.iter() {
            let base = chunk.load(Ordering::Acquire);
            if base.is_null() {
                continue;
            }
            // SAFETY: `base` is the leaked `Box<[Slot<T>]>` of CHUNK slots made in `insert`;
            // `&mut self` means no reader or writer is left.
            let slots = unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(base, CHUNK)) };
            for s in slots.iter() {
                let p = s.value.load(Ordering::Relaxed);
                if !p.is_null() {
                    // SAFETY: the table's own `Arc::into_raw` reference of a live object.
                    drop(unsafe { Arc::from_raw(p) });
                }
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests;

#[cfg(all(test, loom))]
mod loom_models;
