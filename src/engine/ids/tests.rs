//! Id table: refusals of stale, freed and forged ids, and a stress run of concurrent readers,
//! inserters and removers that checks no object is dropped early, twice or never.

use super::*;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering as O;

#[test]
fn stale_and_forged_ids_are_refused() {
    let t: IdTable<u32> = IdTable::default();
    let a = t.insert(Arc::new(1)).unwrap();
    assert_ne!(a, 0);
    assert_eq!(*t.get(a).unwrap(), 1);
    assert_eq!(t.with(a, |v| *v + 1), Some(2));
    assert!(
        t.remove_if(a, |_| false).unwrap_err().is_some(),
        "refused removal keeps it"
    );
    assert!(t.get(a).is_some());
    assert!(t.remove_if(a, |_| true).is_ok());
    assert!(t.get(a).is_none(), "freed");
    assert!(t.with(a, |_| ()).is_none(), "freed");
    assert!(
        t.remove_if(a, |_| true).unwrap_err().is_none(),
        "double free"
    );
    let b = t.insert(Arc::new(2)).unwrap();
    assert_ne!(a, b, "slot reuse gets a new generation");
    assert_eq!(a as u32, b as u32, "the freed slot is reused");
    assert!(t.get(a).is_none());
    for forged in [
        0,
        u64::MAX,
        b ^ 1,
        b + (1 << 32),
        b | (1 << 63),
        (b as u32 as u64) + 5,
    ] {
        assert!(t.get(forged).is_none(), "{forged:#x}");
        assert!(t.remove_if(forged, |_| true).unwrap_err().is_none());
    }
    // Slots far past anything allocated, and in chunks never allocated.
    assert!(t.get(make_id(MAX_LIVE as u32 - 1, 1)).is_none());
    assert!(t.get(make_id(u32::MAX, 1)).is_none());
}

#[test]
fn table_fills_then_refuses_then_reuses() {
    let t: IdTable<()> = IdTable::default();
    let ids: Vec<u64> = (0..MAX_LIVE)
        .map(|_| t.insert(Arc::new(())).unwrap())
        .collect();
    let e = t.insert(Arc::new(())).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::TooManyRequests);
    assert!(t.remove_if(ids[7], |_| true).is_ok());
    let again = t.insert(Arc::new(())).unwrap();
    assert_eq!(again as u32, ids[7] as u32);
    assert!(t.get(ids[7]).is_none() && t.get(again).is_some());
    assert!(t.get(ids[MAX_LIVE - 1]).is_some());
}

struct Probe(Arc<AtomicUsize>);

impl Drop for Probe {
    fn drop(&mut self) {
        self.0.fetch_add(1, O::SeqCst);
    }
}

/// Four threads insert, read (get and with), and free ids concurrently, including each other's
/// and stale ones; every object is dropped exactly once, and never while it is read.
#[test]
fn stress_concurrent_insert_read_remove() {
    let table: Arc<IdTable<Probe>> = Arc::new(IdTable::default());
    let drops = Arc::new(AtomicUsize::new(0));
    let shared: Arc<Vec<AtomicU64Std>> = Arc::new((0..64).map(|_| AtomicU64Std::new(0)).collect());
    let per_thread = 20_000usize;
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let (table, drops, shared) = (table.clone(), drops.clone(), shared.clone());
            std::thread::spawn(move || {
                let mut freed = 0usize;
                let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ t as u64;
                for i in 0..per_thread {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    let cell = &shared[(rng % 64) as usize];
                    match i % 4 {
                        0 => {
                            let id = table.insert(Arc::new(Probe(drops.clone()))).unwrap();
                            // Whatever id was in the cell is forgotten (it may leak from the
                            // table's point of view until the end).
                            let old = cell.swap(id, O::SeqCst);
                            if old != 0 && table.remove_if(old, |_| true).is_ok() {
                                freed += 1;
                            }
                        }
                        1 => {
                            let id = cell.load(O::SeqCst);
                            if let Some(p) = table.get(id) {
                                // The object is alive while we hold it.
                                assert!(Arc::strong_count(&p.0) >= 2);
                            }
                        }
                        2 => {
                            let id = cell.load(O::SeqCst);
                            let _ = table.with(id, |p| assert!(Arc::strong_count(&p.0) >= 2));
                        }
                        _ => {
                            let id = cell.swap(0, O::SeqCst);
                            if id != 0 && table.remove_if(id, |_| true).is_ok() {
                                freed += 1;
                            }
                        }
                    }
                }
                freed
            })
        })
        .collect();
    let freed: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    let inserted = 4 * per_thread / 4;
    assert_eq!(
        drops.load(O::SeqCst),
        freed,
        "every removed object dropped once"
    );
    let live = shared
        .iter()
        .filter(|c| table.get(c.load(O::SeqCst)).is_some())
        .count();
    assert_eq!(freed + live, inserted, "nothing lost or freed twice");
    drop(table);
    assert_eq!(
        drops.load(O::SeqCst),
        inserted,
        "dropping the table drops the rest"
    );
}

use std::sync::atomic::AtomicU64 as AtomicU64Std;
