//! loom models of the id table (`RUSTFLAGS="--cfg loom" cargo test --release --lib ids_loom`):
//! every interleaving, within loom's bounds, of lookups racing removal and of two removers.

use super::*;
use loom::cell::UnsafeCell;
use loom::thread;

/// A value whose reads and whose drop (a write) loom checks for ordering: reading it after or
/// concurrently with its drop is reported as a data race.
struct Guarded(UnsafeCell<u64>);

impl Guarded {
    fn read(&self) -> u64 {
        // SAFETY: loom checks that no write (the drop) races with this read.
        self.0.with(|p| unsafe { *p })
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        // SAFETY: loom checks that no read races with this write.
        self.0.with_mut(|p| unsafe { *p = 0 });
    }
}

/// A reader racing a remover (which drops the object) either sees the object whole or not at
/// all: loom reports any read that is not ordered before the drop. Afterwards the id is dead.
/// The reader uses `with` only: `get` hands out a std `Arc`, whose own ordering loom does not
/// see (it would report a false race at the last `Arc`'s drop).
#[test]
fn ids_loom_get_races_remove() {
    loom::model(|| {
        let t = Arc::new(IdTable::<Guarded>::default());
        let id = t.insert(Arc::new(Guarded(UnsafeCell::new(42)))).unwrap();
        let t2 = t.clone();
        let reader = thread::spawn(move || {
            let a = t2.with(id, |v| v.read());
            let b = t2.with(id, |v| v.read());
            (a, b)
        });
        // The remover drops the last reference at once: that is the object's drop.
        assert!(t.remove_if(id, |_| true).is_ok());
        let (a, b) = reader.join().unwrap();
        assert!(a.is_none_or(|v| v == 42) && b.is_none_or(|v| v == 42));
        assert!(t.get(id).is_none() && t.with(id, |_| ()).is_none());
    });
}

/// Two removers of one id: exactly one wins; a reuse of the slot gets a new id.
#[test]
fn ids_loom_two_removers() {
    loom::model(|| {
        let t = Arc::new(IdTable::<u64>::default());
        let id = t.insert(Arc::new(7)).unwrap();
        let t2 = t.clone();
        let other = thread::spawn(move || t2.remove_if(id, |_| true).is_ok());
        let mine = t.remove_if(id, |_| true).is_ok();
        let theirs = other.join().unwrap();
        assert!(mine ^ theirs, "exactly one removal succeeds");
        let again = t.insert(Arc::new(8)).unwrap();
        assert_ne!(again, id);
        assert!(t.get(id).is_none());
        assert_eq!(t.get(again).map(|v| *v), Some(8));
    });
}

/// An insert racing a lookup of an id of the same slot's previous life: the stale id never
/// sees the new object.
#[test]
fn ids_loom_stale_id_during_reuse() {
    loom::model(|| {
        let t = Arc::new(IdTable::<u64>::default());
        let old = t.insert(Arc::new(1)).unwrap();
        assert!(t.remove_if(old, |_| true).is_ok());
        let t2 = t.clone();
        let reader = thread::spawn(move || t2.get(old).is_none());
        let new = t.insert(Arc::new(2)).unwrap();
        assert!(reader.join().unwrap());
        assert_eq!(t.with(new, |v| *v), Some(2));
    });
}
