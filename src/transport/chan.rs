//! A small MPMC channel (mutex + condvars) for the TCP lanes. Unlike crossbeam's, a blocked
//! receiver never spins or yields before sleeping: on a 2-core host the spinning of idle lane
//! threads measurably took CPU from the threads doing the work. Wake-ups are only signalled when
//! someone is actually waiting, so the uncontended path is one lock/unlock.

use crate::sync::{Arc, Condvar, Mutex, MutexGuard};
use crate::sync::{LockClean, Recover};
use std::collections::VecDeque;

struct State<T> {
    items: VecDeque<T>,
    senders: usize,
    receivers: usize,
    waiting_receivers: usize,
    waiting_senders: usize,
}

struct Chan<T> {
    state: Mutex<State<T>>,
    not_empty: Condvar,
    not_full: Condvar,
    cap: usize,
}

impl<T> Chan<T> {
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock_clean()
    }
}

/// Sending half (cloneable).
pub struct Sender<T>(Arc<Chan<T>>);
/// Receiving half (cloneable).
pub struct Receiver<T>(Arc<Chan<T>>);

/// The value could not be sent: every receiver is gone.
#[derive(Debug)]
pub struct SendError<T>(pub T);

impl<T> SendError<T> {
    /// The value that was not sent.
    pub fn into_inner(self) -> T {
        self.0
    }
}

/// Every sender is gone and the channel is empty.
#[derive(Debug, PartialEq, Eq)]
pub struct RecvError;

/// Why `try_recv` returned nothing.
#[derive(Debug, PartialEq, Eq)]
pub enum TryRecvError {
    /// Nothing queued right now.
    Empty,
    /// Nothing queued and every sender is gone.
    Disconnected,
}

fn with_cap<T>(cap: usize) -> (Sender<T>, Receiver<T>) {
    let c = Arc::new(Chan {
        state: Mutex::new(State {
            items: VecDeque::new(),
            senders: 1,
            receivers: 1,
            waiting_receivers: 0,
            waiting_senders: 0,
        }),
        not_empty: Condvar::new(),
        not_full: Condvar::new(),
        cap: cap.max(1),
    });
    (Sender(c.clone()), Receiver(c))
}

/// A channel without a bound.
pub fn unbounded<T>() -> (Sender<T>, Receiver<T>) {
    with_cap(usize::MAX)
}

/// A channel holding at most `cap` items; `send` blocks while it is full.
pub fn bounded<T>(cap: usize) -> (Sender<T>, Receiver<T>) {
    with_cap(cap)
}

impl<T> Sender<T> {
    /// Queues `v`, blocking while the channel is full.
    pub fn send(&self, v: T) -> Result<(), SendError<T>> {
        let mut s = self.0.lock();
        while s.items.len() >= self.0.cap && s.receivers > 0 {
            s.waiting_senders += 1;
            s = self.0.not_full.wait(s).recover();
            s.waiting_senders -= 1;
        }
        if s.receivers == 0 {
            return Err(SendError(v));
        }
        s.items.push_back(v);
        let wake = s.waiting_receivers > 0;
        drop(s);
        if wake {
            self.0.not_empty.notify_one();
        }
        Ok(())
    }

    /// Queues every item in order under one lock (blocking while the channel is full) and wakes
    /// at most one sleeping receiver per item queued. On `Err` (every receiver gone) the items
    /// not queued come back, in order.
    pub fn send_all<I: IntoIterator<Item = T>>(&self, items: I) -> Result<(), SendError<Vec<T>>> {
        let mut items = items.into_iter();
        let mut s = self.0.lock();
        let room = self.0.cap.saturating_sub(s.items.len());
        s.items.reserve(items.size_hint().0.min(room));
        let mut queued = 0usize;
        while let Some(v) = items.next() {
            while s.items.len() >= self.0.cap && s.receivers > 0 {
                // Receivers must see what is queued before this sender sleeps for room.
                if queued > 0 && s.waiting_receivers > 0 {
                    self.0.not_empty.notify_all();
                }
                queued = 0;
                s.waiting_senders += 1;
                s = self.0.not_full.wait(s).recover();
                s.waiting_senders -= 1;
            }
            if s.receivers == 0 {
                let mut rest = vec![v];
                rest.extend(items);
                return Err(SendError(rest));
            }
            s.items.push_back(v);
            queued += 1;
        }
        let wake = s.waiting_receivers.min(queued);
        drop(s);
        for _ in 0..wake {
            self.0.not_empty.notify_one();
        }
        Ok(())
    }

    /// True when nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.0.lock().items.is_empty()
    }
}

impl<T> Receiver<T> {
    /// True when nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.0.lock().items.is_empty()
    }

    /// Takes the oldest item, sleeping until there is one; `Err` once every sender is gone.
    pub fn recv(&self) -> Result<T, RecvError> {
        let mut s = self.0.lock();
        loop {
            if let Some(v) = s.items.pop_front() {
                let wake = s.waiting_senders > 0;
                drop(s);
                if wake {
                    self.0.not_full.notify_one();
                }
                return Ok(v);
            }
            if s.senders == 0 {
                return Err(RecvError);
            }
            s.waiting_receivers += 1;
            s = self.0.not_empty.wait(s).recover();
            s.waiting_receivers -= 1;
        }
    }

    /// Takes the oldest item if there is one.
    pub fn try_recv(&self) -> Result<T, TryRecvError> {
        let mut s = self.0.lock();
        match s.items.pop_front() {
            Some(v) => {
                let wake = s.waiting_senders > 0;
                drop(s);
                if wake {
                    self.0.not_full.notify_one();
                }
                Ok(v)
            }
            None if s.senders == 0 => Err(TryRecvError::Disconnected),
            None => Err(TryRecvError::Empty),
        }
    }
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        self.0.lock().senders += 1;
        Sender(self.0.clone())
    }
}

impl<T> Clone for Receiver<T> {
    fn clone(&self) -> Self {
        self.0.lock().receivers += 1;
        Receiver(self.0.clone())
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let mut s = self.0.lock();
        s.senders -= 1;
        if s.senders == 0 {
            drop(s);
            self.0.not_empty.notify_all();
        }
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        let mut s = self.0.lock();
        s.receivers -= 1;
        if s.receivers == 0 {
            drop(s);
            self.0.not_full.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_bounded_and_disconnect() {
        let (tx, rx) = bounded::<u32>(2);
        let t = std::thread::spawn(move || {
            for i in 0..1000 {
                tx.send(i).unwrap();
            }
        });
        for i in 0..1000 {
            assert_eq!(rx.recv().unwrap(), i);
        }
        t.join().unwrap();
        assert_eq!(rx.recv(), Err(RecvError), "all senders gone");
        assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
        let (tx, rx) = unbounded::<u32>();
        assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
        drop(rx);
        assert_eq!(tx.send(5).unwrap_err().into_inner(), 5);
    }

    #[test]
    fn send_all_keeps_order_blocks_when_full_and_returns_the_rest() {
        let (tx, rx) = bounded::<u32>(3);
        let t = std::thread::spawn(move || {
            tx.send_all(0..1000).unwrap();
            tx
        });
        for i in 0..1000 {
            assert_eq!(rx.recv().unwrap(), i);
        }
        let tx = t.join().unwrap();
        drop(rx);
        assert_eq!(tx.send_all(7..10).unwrap_err().into_inner(), vec![7, 8, 9]);
    }

    #[test]
    fn many_producers_many_consumers() {
        let (tx, rx) = bounded::<u64>(8);
        let producers: Vec<_> = (0..4)
            .map(|p| {
                let tx = tx.clone();
                std::thread::spawn(move || (0..500).for_each(|i| tx.send(p * 1000 + i).unwrap()))
            })
            .collect();
        drop(tx);
        let consumers: Vec<_> = (0..3)
            .map(|_| {
                let rx = rx.clone();
                std::thread::spawn(move || {
                    let mut sum = 0u64;
                    while let Ok(v) = rx.recv() {
                        sum += v;
                    }
                    sum
                })
            })
            .collect();
        producers.into_iter().for_each(|p| p.join().unwrap());
        let total: u64 = consumers.into_iter().map(|c| c.join().unwrap()).sum();
        let want: u64 = (0..4u64)
            .map(|p| (0..500u64).map(|i| p * 1000 + i).sum::<u64>())
            .sum();
        assert_eq!(total, want);
    }
}
