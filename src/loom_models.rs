//! loom models (`make loom`, i.e. `RUSTFLAGS="--cfg loom" cargo test --lib loom_`): every
//! interleaving of the lane channel and of the completion latch, within loom's bounds.

use crate::completion::Latch;
use crate::transport::chan::{RecvError, bounded};
use loom::sync::Arc;
use loom::thread;

/// Two producers into a one-slot channel, one consumer: every item arrives exactly once, a full
/// channel blocks without losing a wake-up, and the consumer sees the disconnect at the end.
#[test]
fn loom_chan_bounded_two_producers() {
    loom::model(|| {
        let (tx, rx) = bounded::<u32>(1);
        let tx2 = tx.clone();
        let a = thread::spawn(move || tx.send(1).unwrap());
        let b = thread::spawn(move || tx2.send(2).unwrap());
        let mut got = [rx.recv().unwrap(), rx.recv().unwrap()];
        got.sort_unstable();
        assert_eq!(got, [1, 2]);
        a.join().unwrap();
        b.join().unwrap();
        assert_eq!(rx.recv(), Err(RecvError));
    });
}

/// A receiver that drops while a sender is blocked on a full channel wakes it with an error.
#[test]
fn loom_chan_receiver_drop_wakes_blocked_sender() {
    loom::model(|| {
        let (tx, rx) = bounded::<u32>(1);
        tx.send(1).unwrap();
        let t = thread::spawn(move || tx.send(2).is_err());
        drop(rx);
        assert!(t.join().unwrap());
    });
}

/// `send_all` of three items into a one-slot channel with two sleeping receivers: it wakes them
/// before it sleeps for room (no deadlock), every item arrives exactly once and in order per
/// receiver.
#[test]
fn loom_chan_send_all_wakes_receivers() {
    loom::model(|| {
        let (tx, rx) = bounded::<u32>(1);
        let rx2 = rx.clone();
        let a = thread::spawn(move || {
            let mut v = Vec::new();
            while let Ok(x) = rx2.recv() {
                v.push(x);
            }
            v
        });
        tx.send_all([1, 2, 3]).unwrap();
        drop(tx);
        let mut mine = Vec::new();
        while let Ok(x) = rx.recv() {
            mine.push(x);
        }
        let theirs = a.join().unwrap();
        assert!(mine.is_sorted() && theirs.is_sorted());
        let mut all = [mine, theirs].concat();
        all.sort_unstable();
        assert_eq!(all, [1, 2, 3]);
    });
}

/// Two finishers and a waiter: the waiter always wakes (no lost wake-up) and exactly one
/// finisher sees the latch go idle.
#[test]
fn loom_latch_no_lost_wakeup() {
    loom::model(|| {
        let l = Arc::new(Latch::default());
        l.add(2);
        let (l1, l2) = (l.clone(), l.clone());
        let a = thread::spawn(move || l1.done());
        let b = thread::spawn(move || l2.done());
        assert!(l.wait(None));
        let lasts = [a.join().unwrap(), b.join().unwrap()];
        assert_eq!(lasts.iter().filter(|&&x| x).count(), 1);
        assert!(l.is_idle());
    });
}
