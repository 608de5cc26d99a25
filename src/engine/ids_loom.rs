//! loom models of the id table (`RUSTFLAGS="--cfg loom" cargo test --release --lib ids_loom`):
//! every interleaving, within loom's bounds, of lookups racing removal and of two removers.

use super::*;
use loom::thread;

/// A reader racing a remover either sees the object whole or not at all, never a freed one;
/// afterwards the id is dead and the table holds no reference.
#[test]
fn ids_loom_get_races_remove() {
    loom::model(|| {
        let t = Arc::new(IdTable::<u64>::default());
        let value = Arc::new(42u64);
        let id = t.insert(value.clone()).unwrap();
        let t2 = t.clone();
        let reader = thread::spawn(move || {
            let a = t2.get(id).map(|v| *v);
            let b = t2.with(id, |v| *v);
            (a, b)
        });
        assert!(t.remove_if(id, |_| true).is_ok());
        let (a, b) = reader.join().unwrap();
        assert!(a.is_none_or(|v| v == 42) && b.is_none_or(|v| v == 42));
        assert!(t.get(id).is_none());
        assert_eq!(Arc::strong_count(&value), 1, "the table let go of it");
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
