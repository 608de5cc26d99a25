//! The mass-removal trim and its follow-up (`Master::trim_after_removals`).

use super::background::{TRIM_AFTER, TRIM_FOLLOWUPS};
use super::*;

fn followups(m: &Master) -> u64 {
    m.trim_followups.load(Ordering::Relaxed)
}

/// A mass removal is trimmed once it has settled, and followed up once by a later sweep
/// after a tail of removals has settled too; never while removals go on.
#[test]
fn mass_removal_trims_once_settled_then_follows_up_once() {
    let m = Master::new(MasterConfig::default());
    m.objs.note_removed(TRIM_AFTER);
    m.trim_after_removals();
    assert_eq!(followups(&m), 0, "still removing: no trim yet");
    assert_eq!(m.objs.removed_lately(), TRIM_AFTER);
    m.trim_after_removals();
    assert_eq!(
        m.objs.removed_lately(),
        0,
        "settled: trimmed, the count taken"
    );
    assert_eq!(followups(&m), TRIM_FOLLOWUPS, "and a follow-up armed");
    m.objs.note_removed(10);
    m.trim_after_removals();
    assert_eq!(
        followups(&m),
        TRIM_FOLLOWUPS,
        "a tail still going on: it waits"
    );
    m.trim_after_removals();
    assert_eq!(
        followups(&m),
        0,
        "settled, nothing retired: the follow-up ran"
    );
    m.trim_after_removals();
    assert_eq!(followups(&m), 0, "and only once");
}

/// A removal far beyond the threshold is trimmed while it goes on, without its follow-up
/// running before it has settled.
#[test]
fn a_long_removal_is_trimmed_on_the_way() {
    let m = Master::new(MasterConfig::default());
    m.objs.note_removed(16 * TRIM_AFTER);
    m.trim_after_removals();
    assert_eq!(m.objs.removed_lately(), 0, "trimmed while going on");
    m.objs.note_removed(1);
    m.trim_after_removals();
    assert_eq!(
        followups(&m),
        TRIM_FOLLOWUPS,
        "not settled: no follow-up yet"
    );
}

/// The tick after a mass removal's walk reaches its end gives the memory back, without
/// waiting for a sweep to see the removals settle; ticks without one do not.
#[test]
fn the_tick_after_a_walk_ends_trims() {
    use tidewire::store::proto::{Reply, Request};
    let m = Master::new(MasterConfig::default());
    m.tick(); // the first tick sweeps; the next nine do not
    m.objs.note_removed(TRIM_AFTER);
    m.tick();
    assert_eq!(
        m.objs.removed_lately(),
        TRIM_AFTER,
        "no walk ended: no trim"
    );
    let r = m.handle(Request::RemoveAll {
        force: true,
        from: Some(objects::WALK_START),
    });
    assert_eq!(
        r,
        Some(Reply::Removed {
            count: 0,
            next: None
        })
    );
    m.tick();
    assert_eq!(m.objs.removed_lately(), 0, "trimmed at the walk's end");
    assert_eq!(followups(&m), TRIM_FOLLOWUPS, "and a follow-up armed");
}
