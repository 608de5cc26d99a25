//! loom models (`make loom`, i.e. `RUSTFLAGS="--cfg loom" cargo test --lib loom_`): every
//! interleaving of the lane channel, the completion latch and a batch's completion (status,
//! notification, free), within loom's bounds.

use crate::completion::{Batch, Latch, PendingNotify, SliceDone, TaskState};
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

/// A batch of two one-slice tasks carrying a notification: task 0 already done, task 1 finished
/// by a transport thread while the caller follows NIXL's plugin (poll the task until it is
/// terminal, act on the notification where the status query would, then free) and a second
/// thread makes one status query of its own. In every interleaving, a caller that has seen every
/// task COMPLETED may free the batch (never "busy" because the latch lags the task counts), and
/// the notification is taken exactly once over both threads (never lost, never twice).
#[test]
fn loom_batch_notify_once_and_free_after_completed() {
    loom::model(|| {
        let b = std::sync::Arc::new(Batch::new(2));
        {
            let _g = b.submit_lock.lock().unwrap();
            b.prepare_task(0, 1);
            b.prepare_task(1, 1);
            b.add_slices(2);
            b.publish(2);
        }
        b.set_notify(PendingNotify {
            segment: 1,
            name: "n".into(),
            msg: "m".into(),
        });
        SliceDone::new(b.clone(), 0).finish(Ok(8));
        let slice = SliceDone::new(b.clone(), 1);
        let finisher = thread::spawn(move || slice.finish(Ok(8)));
        let b2 = b.clone();
        let other = thread::spawn(move || {
            let done = b2.status(1).state == TaskState::Completed;
            usize::from(done && b2.take_due_notify().is_some())
        });
        let mut mine = 0;
        while b.status(1).state != TaskState::Completed {
            thread::yield_now();
        }
        mine += usize::from(b.take_due_notify().is_some());
        // Every task read COMPLETED: the batch is done and may be freed, and the free finds
        // the notification already taken.
        assert!(b.tasks_done());
        assert!(b.may_free());
        mine += usize::from(b.take_due_notify().is_some());
        assert_eq!(
            mine + other.join().unwrap(),
            1,
            "notification taken exactly once"
        );
        finisher.join().unwrap();
        assert!(b.is_idle());
    });
}
