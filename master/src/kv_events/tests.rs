//! The queue, numbering and replay buffer, without a socket.

use super::publisher::{Numbering, publish_once};
use super::*;

fn events(cap: usize) -> Arc<KvEvents> {
    KvEvents::new(KvConfig {
        backend_id: "b".into(),
        queue_capacity: cap,
        ..KvConfig::default()
    })
}

fn stored(i: usize) -> Event {
    Event::Stored {
        key: format!("k{i}").into(),
        medium: Medium::Cpu,
    }
}

/// Publishes everything queued; returns the (sequence, event count) of each message sent.
fn drain(ev: &KvEvents, n: &mut Numbering) -> Vec<(u64, usize)> {
    let mut sent = Vec::new();
    let mut batch = Vec::new();
    let mut send = |seq: u64, payload: &[u8]| {
        let v = rmpv::decode::read_value(&mut &payload[..]).unwrap();
        sent.push((seq, v.as_array().unwrap()[1].as_array().unwrap().len()));
        true
    };
    while publish_once(ev, n, &mut batch, &mut send) > 0 {}
    sent
}

#[test]
fn batches_of_64_numbered_from_1() {
    let ev = events(1024);
    let mut n = Numbering::new();
    (0..130).for_each(|i| ev.push(stored(i)));
    assert_eq!(drain(&ev, &mut n), [(1, 64), (2, 64), (3, 2)]);
    assert_eq!(ev.last_seq(), 3);
    assert_eq!(n.next_id, 131);
    let s = ev.status_json();
    assert_eq!(s["published_batches"], 3);
    assert_eq!(s["published_events"], 130);
    assert_eq!(s["dropped_events"], 0);
    assert_eq!(s["skipped_unparsed_keys"], 130);
    match ev.replay(2, usize::MAX) {
        Replay::Batches(b) => assert_eq!(b.iter().map(|m| m.0).collect::<Vec<_>>(), [2, 3]),
        r => panic!("{r:?}"),
    }
    assert_eq!(ev.replay(4, usize::MAX), Replay::Batches(vec![]));
    assert_eq!(ev.replay(0, usize::MAX), Replay::Gone { oldest: 1 });
}

#[test]
fn overflow_drops_oldest_and_leaves_a_gap() {
    let ev = events(8);
    let mut n = Numbering::new();
    ev.push(stored(0));
    assert_eq!(drain(&ev, &mut n), [(1, 1)]);
    (1..=20).for_each(|i| ev.push(stored(i)));
    // 12 dropped (the oldest); the 8 newest are sent after a skipped sequence number.
    assert_eq!(drain(&ev, &mut n), [(3, 8)]);
    assert_eq!(ev.stats.dropped_events.load(Ordering::Relaxed), 12);
    // Event ids 2..=13 were used up by the lost events.
    assert_eq!(n.next_id, 22);
    // Nothing replays across the gap.
    assert_eq!(ev.replay(1, usize::MAX), Replay::Gone { oldest: 3 });
    assert_eq!(ev.replay(2, usize::MAX), Replay::Gone { oldest: 3 });
    match ev.replay(3, usize::MAX) {
        Replay::Batches(b) => assert_eq!(b.len(), 1),
        r => panic!("{r:?}"),
    }
}

#[test]
fn replay_keeps_a_byte_budget_and_pages() {
    let ev = KvEvents::new(KvConfig {
        backend_id: "b".into(),
        replay_bytes: 4096,
        ..KvConfig::default()
    });
    let mut n = Numbering::new();
    for i in 0..100 {
        ev.push(stored(i));
        drain(&ev, &mut n);
    }
    let Replay::Gone { oldest } = ev.replay(1, usize::MAX) else {
        panic!("old messages kept past the budget");
    };
    assert!(oldest > 1 && oldest <= 100);
    let Replay::Batches(all) = ev.replay(oldest, usize::MAX) else {
        panic!()
    };
    assert_eq!(all.last().unwrap().0, 100);
    assert!(all.iter().map(|m| m.1.len()).sum::<usize>() <= 4096);
    let Replay::Batches(page) = ev.replay(oldest, 1) else {
        panic!()
    };
    assert_eq!(page.len(), 1);
}

#[test]
fn unbounded_queue_never_drops() {
    let ev = events(0);
    let mut n = Numbering::new();
    (0..100_000).for_each(|i| ev.push(stored(i)));
    let sent = drain(&ev, &mut n);
    assert_eq!(sent.iter().map(|m| m.1).sum::<usize>(), 100_000);
    assert_eq!(ev.stats.dropped_events.load(Ordering::Relaxed), 0);
}

#[test]
fn a_leader_that_takes_over_numbers_above_any_predecessor() {
    // The predecessor: numbered from 1, as far as it got.
    let old = events(1024);
    let mut n = Numbering::new();
    (0..200).for_each(|i| old.push(stored(i)));
    let sent = drain(&old, &mut n);
    let old_last = sent.last().unwrap().0;
    // The successor, numbered from the time in microseconds: far above, and contiguous from
    // there; its inventory's sequence is read before its first message.
    let new = events(1024);
    let mut n = Numbering::new();
    // Standing by and rebuilding, it queues nothing (its inventory covers the rebuild).
    new.mute_until_leading();
    new.push(stored(999));
    assert_eq!(drain(&new, &mut n), []);
    new.number_after_predecessor();
    let floor = new.last_seq();
    assert!(floor > old_last + 1_000_000_000_000_000, "{floor}");
    (0..70).for_each(|i| new.push(stored(i)));
    assert_eq!(drain(&new, &mut n), [(floor + 1, 64), (floor + 2, 6)]);
    // A subscriber that asks the successor for what followed the predecessor's last message
    // is told to read the inventory.
    assert_eq!(
        new.replay(old_last + 1, usize::MAX),
        Replay::Gone { oldest: floor + 1 }
    );
}
