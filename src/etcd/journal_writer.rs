//! A thread-safe front for a [`Journal`]: callers hand records to [`JournalWriter::commit`] and
//! block until they are durable in etcd; one writer thread appends whatever is queued as one
//! group (so concurrent callers share a round trip) and, when the log since the last snapshot
//! grows past the policy, starts a snapshot thread that takes the state through the owner's
//! callback and writes it beside the log. Commits go on while it writes: a snapshot of a
//! million objects takes seconds, longer than a client waits for a reply.
//!
//! Records should be idempotent "set" or "delete" operations on the owner's state: the snapshot
//! is taken while callers keep mutating that state, so it may already reflect some records that
//! are replayed after it; replaying them in order still ends in the right state.
//!
//! Once a write is fenced off (another leader took over), every later commit fails at once.

use super::journal::{Journal, SnapshotPlan, SnapshotWritten};
use crate::error::{Error, ErrorKind, Result};
use crate::log::Level;
use crate::sync::{LockClean, Recover};
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

/// When to replace the log by a snapshot. Both limits grow with the snapshot: once it is
/// larger than twice `max_bytes`, they are multiplied by (snapshot bytes / 2 `max_bytes`), so
/// a large state is not rewritten whole for every small stretch of log (writing snapshots then
/// costs about twice the log itself) and a successor reads at most about one and a half
/// snapshots (at a million objects, the log it replays costs it more per object than the
/// snapshot).
#[derive(Debug, Clone, Copy)]
pub struct CompactPolicy {
    /// Batches since the last snapshot.
    pub max_batches: u64,
    /// Bytes of batches since the last snapshot.
    pub max_bytes: u64,
}

impl CompactPolicy {
    /// Whether `batches` and `bytes` of log since a snapshot of `snapshot` bytes call for a
    /// new snapshot.
    pub fn due(&self, batches: u64, bytes: u64, snapshot: u64) -> bool {
        let scale = (snapshot / self.max_bytes.max(1) / 2).max(1);
        batches >= self.max_batches.saturating_mul(scale)
            || bytes >= self.max_bytes.saturating_mul(scale)
    }
}

impl Default for CompactPolicy {
    fn default() -> Self {
        CompactPolicy {
            max_batches: 256,
            max_bytes: 32 << 20,
        }
    }
}

/// Produces the owner's whole state as one string (called on the snapshot thread).
pub type SnapshotFn = Box<dyn Fn() -> String + Send + Sync>;

/// Retries of a group that etcd did not take (an unreachable cluster, an election in etcd).
const RETRIES: u32 = 10;
const RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(300);

/// How often an idle writer looks at its snapshot (one finished, or one due).
const IDLE_LOOK: std::time::Duration = std::time::Duration::from_millis(500);

fn is_fenced(e: &Error) -> bool {
    e.message().contains("no longer the leader")
}

struct Queue {
    pending: VecDeque<String>,
    /// Tickets: records handed in so far / made durable so far.
    submitted: u64,
    durable: u64,
    /// Set for good once a write fails (fenced, or etcd kept failing).
    failed: Option<Error>,
    stop: bool,
}

struct Shared {
    q: Mutex<Queue>,
    work: Condvar,
    done: Condvar,
}

/// The group-commit writer. Dropping it stops the thread after the queued records are written.
pub struct JournalWriter {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.q.lock_clean()
    }

    fn run(&self, mut journal: Journal, snapshot: SnapshotFn, policy: CompactPolicy) {
        let snapshot = Arc::new(snapshot);
        let mut compaction: Option<JoinHandle<Result<SnapshotWritten>>> = None;
        loop {
            let group: Vec<String> = {
                let q = self.lock();
                let (mut q, waited) = self
                    .work
                    .wait_timeout_while(q, IDLE_LOOK, |q| q.pending.is_empty() && !q.stop)
                    .recover();
                if q.pending.is_empty() && q.stop {
                    drop(q);
                    // Stopping, nothing left: a snapshot being written is finished first.
                    if let Some(c) = compaction.take() {
                        let _ = self.compaction_done(&mut journal, c);
                    }
                    return;
                }
                if waited.timed_out() && q.pending.is_empty() {
                    drop(q);
                    // Idle: a snapshot that finished is taken in, and one that is due (the log
                    // grew while the last was written) starts now rather than at the next
                    // commit, so a successor finds a short log.
                    if !self.maybe_snapshot(&mut journal, &mut compaction, &snapshot, policy) {
                        return;
                    }
                    continue;
                }
                q.pending.drain(..).collect()
            };
            let n = group.len() as u64;
            let mut result = journal.append(&group);
            for _ in 0..RETRIES {
                match &result {
                    Err(e) if e.kind() == ErrorKind::Metadata && !is_fenced(e) => {
                        std::thread::sleep(RETRY_PAUSE);
                        // Replaying records that already landed is harmless (see above).
                        result = journal.append(&group);
                    }
                    _ => break,
                }
            }
            let mut q = self.lock();
            match result {
                Ok(()) => q.durable += n,
                Err(e) => {
                    tw_log!(Level::Error, "journal: {e}; no more writes");
                    q.failed = Some(e);
                    q.pending.clear();
                    self.done.notify_all();
                    return;
                }
            }
            self.done.notify_all();
            drop(q);
            if !self.maybe_snapshot(&mut journal, &mut compaction, &snapshot, policy) {
                return;
            }
        }
    }

    /// Takes in a finished snapshot, and starts the next one when the log since is due; false
    /// when this writer was fenced off.
    fn maybe_snapshot(
        &self,
        journal: &mut Journal,
        compaction: &mut Option<JoinHandle<Result<SnapshotWritten>>>,
        snapshot: &Arc<SnapshotFn>,
        policy: CompactPolicy,
    ) -> bool {
        if compaction.as_ref().is_some_and(|c| c.is_finished()) {
            let c = compaction.take().expect("checked");
            if !self.compaction_done(journal, c) {
                return false;
            }
        }
        let (batches, bytes) = journal.backlog();
        if compaction.is_none() && policy.due(batches, bytes, journal.snapshot_bytes()) {
            let plan = journal.plan_snapshot();
            match start_snapshot(plan, snapshot.clone(), (batches, bytes)) {
                Ok(c) => *compaction = Some(c),
                Err(e) => tw_log!(Level::Warn, "journal: snapshot thread: {e}"),
            }
        }
        true
    }

    /// Takes in a finished snapshot thread's result; false when this writer was fenced off
    /// (then every later commit fails).
    fn compaction_done(
        &self,
        journal: &mut Journal,
        c: JoinHandle<Result<SnapshotWritten>>,
    ) -> bool {
        let result = c.join().unwrap_or_else(|_| {
            Err(Error::new(
                ErrorKind::Internal,
                "journal: the snapshot thread panicked",
            ))
        });
        match result {
            Ok(w) => journal.snapshot_written(w),
            Err(e) => {
                tw_log!(Level::Warn, "journal: compaction failed: {e}");
                if is_fenced(&e) {
                    self.lock().failed = Some(e);
                    self.done.notify_all();
                    return false;
                }
            }
        }
        true
    }
}

/// Starts the thread that takes the state (after every batch `plan` covers) and writes it.
fn start_snapshot(
    plan: SnapshotPlan,
    snapshot: Arc<SnapshotFn>,
    (batches, bytes): (u64, u64),
) -> std::io::Result<JoinHandle<Result<SnapshotWritten>>> {
    std::thread::Builder::new()
        .name("tw-journal-snap".into())
        .spawn(move || {
            let t0 = std::time::Instant::now();
            let snap = snapshot();
            let taken = t0.elapsed();
            let result = plan.write(&snap);
            tw_log!(
                Level::Info,
                "journal: snapshot of {} bytes (taken in {taken:?}, written in {:?}) \
                 replaces {batches} batches of {bytes} bytes",
                snap.len(),
                t0.elapsed() - taken
            );
            result
        })
}

impl JournalWriter {
    /// Starts the writer thread over `journal`.
    pub fn start(
        journal: Journal,
        snapshot: SnapshotFn,
        policy: CompactPolicy,
    ) -> Result<JournalWriter> {
        let shared = Arc::new(Shared {
            q: Mutex::new(Queue {
                pending: VecDeque::new(),
                submitted: 0,
                durable: 0,
                failed: None,
                stop: false,
            }),
            work: Condvar::new(),
            done: Condvar::new(),
        });
        let s2 = shared.clone();
        let thread = std::thread::Builder::new()
            .name("tw-journal".into())
            .spawn(move || s2.run(journal, snapshot, policy))
            .map_err(|e| Error::new(ErrorKind::Internal, format!("journal thread: {e}")))?;
        Ok(JournalWriter {
            shared,
            thread: Some(thread),
        })
    }

    /// Queues `records` and waits until they are durable. Fails, without waiting, once the
    /// writer has failed (the error says why: deposed leader, or etcd unreachable for longer
    /// than its deadlines).
    pub fn commit(&self, records: Vec<String>) -> Result<()> {
        let ticket = self.enqueue(records);
        self.wait(ticket)
    }

    /// Queues records without waiting (callers that must order records under their own lock
    /// queue there and [`wait`](Self::wait) after releasing it). Returns a ticket.
    pub fn enqueue(&self, records: Vec<String>) -> u64 {
        let mut q = self.shared.lock();
        if q.failed.is_none() && !records.is_empty() {
            q.submitted += records.len() as u64;
            q.pending.extend(records);
            self.shared.work.notify_one();
        }
        q.submitted
    }

    /// A ticket covering everything queued so far.
    pub fn ticket(&self) -> u64 {
        self.shared.lock().submitted
    }

    /// Waits until every record up to `ticket` is durable, or the writer failed.
    pub fn wait(&self, ticket: u64) -> Result<()> {
        let q = self.shared.lock();
        if let Some(e) = &q.failed {
            return Err(e.clone());
        }
        let q = self
            .shared
            .done
            .wait_while(q, |q| q.durable < ticket && q.failed.is_none())
            .recover();
        match &q.failed {
            Some(e) if q.durable < ticket => Err(e.clone()),
            _ => Ok(()),
        }
    }

    /// The error that stopped the writer, if any.
    pub fn failure(&self) -> Option<Error> {
        self.shared.lock().failed.clone()
    }
}

impl Drop for JournalWriter {
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.work.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
