//! The worker pool: permanent workers, spares started when every worker is busy and work
//! waits, up to a cap; spares leave when idle.

use super::sys::{SPIN_WAIT, spin_readable, wait_readable};
use super::{LINGER, SPARE_WORKER_IDLE};
use crate::log::Level;
use crate::sync::LockClean;
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use std::cell::Cell;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// A unit of work: serving one connection until it parks or closes.
pub(super) type Job = Box<dyn FnOnce(&Worker) + Send>;

thread_local! {
    static ON_WORKER: Cell<bool> = const { Cell::new(false) };
}

/// True on a worker thread of the core (which must not wait for the core to stop).
pub(super) fn on_worker() -> bool {
    ON_WORKER.with(|w| w.get())
}

/// What a session sees of the worker that serves it.
pub struct Worker {
    queue: Receiver<Job>,
}

impl Worker {
    /// True when other connections wait for a worker (a streaming connection should then hand
    /// its worker back between requests).
    pub fn others_waiting(&self) -> bool {
        !self.queue.is_empty()
    }

    /// True when the connection on `fd` has its next request (or its end of stream) here within
    /// [`LINGER`] and no other connection waits for this worker: serve on. False: park it.
    ///
    /// It polls, yielding the CPU between polls, for the first [`SPIN_WAIT`] (in a request/reply
    /// stream the next request is usually closer than a sleeping thread's wake-up), then sleeps
    /// in the kernel for the rest.
    pub fn more_soon(&self, fd: RawFd) -> bool {
        if self.others_waiting() {
            return false;
        }
        let mut pfd = [libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        }];
        spin_readable(&mut pfd, SPIN_WAIT)
            || wait_readable(&mut pfd, LINGER.saturating_sub(SPIN_WAIT))
    }
}

pub(super) struct Pool {
    tx: Mutex<Option<Sender<Job>>>,
    rx: Receiver<Job>,
    idle: AtomicUsize,
    total: AtomicUsize,
    permanent: usize,
    most: usize,
    stopping: AtomicBool,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Pool {
    pub(super) fn new() -> Arc<Pool> {
        let cores = crate::cpus::available();
        let (tx, rx) = crossbeam_channel::unbounded();
        let pool = Arc::new(Pool {
            tx: Mutex::new(Some(tx)),
            rx,
            idle: AtomicUsize::new(0),
            total: AtomicUsize::new(0),
            permanent: cores.max(2),
            most: (4 * cores).max(16),
            stopping: AtomicBool::new(false),
            threads: Mutex::default(),
        });
        for _ in 0..pool.permanent {
            pool.spawn(true);
        }
        pool
    }

    /// Worker threads running now.
    pub(super) fn threads(&self) -> usize {
        self.total.load(Ordering::Relaxed)
    }

    /// Queues `job`; starts a spare worker when none is idle.
    pub(super) fn run(self: &Arc<Self>, job: Job) {
        let sent = {
            let tx = self.tx.lock_clean();
            tx.as_ref().map(|tx| tx.send(job).is_ok())
        };
        if sent != Some(true) {
            return;
        }
        self.grow_if_starved();
    }

    /// Starts spare workers while more jobs are queued than workers wait for them (a worker
    /// counted idle may already be on its way to a job: counting the queue, not only the idle
    /// workers, keeps a burst of slow jobs from queueing a fast one behind them).
    pub(super) fn grow_if_starved(self: &Arc<Self>) {
        // Relaxed: a heuristic; a spare too many or too few costs a thread or a short wait.
        while self.rx.len() > self.idle.load(Ordering::Relaxed)
            && self.total.load(Ordering::Relaxed) < self.most
        {
            if !self.spawn(false) {
                break;
            }
        }
    }

    /// Starts a worker; false when the thread could not be started.
    fn spawn(self: &Arc<Self>, permanent: bool) -> bool {
        let n = self.total.fetch_add(1, Ordering::Relaxed);
        self.idle.fetch_add(1, Ordering::Relaxed);
        let pool = self.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("tw-net-{n}"))
            .spawn(move || pool.work(permanent));
        // The new worker counts as idle from here, so a loop of `spawn` calls sees it at once.
        match spawned {
            Ok(h) => {
                let mut threads = self.threads.lock_clean();
                threads.retain(|t| !t.is_finished());
                threads.push(h);
                true
            }
            Err(e) => {
                self.total.fetch_sub(1, Ordering::Relaxed);
                self.idle.fetch_sub(1, Ordering::Relaxed);
                tw_log!(Level::Error, "net: cannot start a worker thread: {e}");
                false
            }
        }
    }

    fn work(&self, permanent: bool) {
        ON_WORKER.with(|w| w.set(true));
        let worker = Worker {
            queue: self.rx.clone(),
        };
        // `spawn` counted this worker idle.
        loop {
            let got = if permanent {
                self.rx.recv().map_err(|_| RecvTimeoutError::Disconnected)
            } else {
                self.rx.recv_timeout(SPARE_WORKER_IDLE)
            };
            self.idle.fetch_sub(1, Ordering::Relaxed);
            match got {
                Ok(job) => job(&worker),
                Err(_) => break,
            }
            // Acquire pairs with the Release in `stop`.
            if self.stopping.load(Ordering::Acquire) && self.rx.is_empty() {
                break;
            }
            self.idle.fetch_add(1, Ordering::Relaxed);
        }
        self.total.fetch_sub(1, Ordering::Relaxed);
    }

    /// Lets the workers finish what is queued and exit, and waits for them (unless called on a
    /// worker, which cannot wait for itself).
    pub(super) fn stop(&self) {
        // Release pairs with the Acquire in `work`.
        self.stopping.store(true, Ordering::Release);
        self.tx.lock_clean().take();
        if on_worker() {
            return;
        }
        let threads = std::mem::take(&mut *self.threads.lock_clean());
        for t in threads {
            let _ = t.join();
        }
    }
}
