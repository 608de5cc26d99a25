//! Reading a journal back: [`recover`] for everything at once, and [`JournalTail`] for a
//! standby that keeps up with the leader while it stands by, so that on winning it reads only
//! what was written since.

use super::{PAGE, Part, Recovered, seq_key, snap_dir};
use crate::error::{Error, ErrorKind, Result};
use crate::etcd::{EtcdClient, int, prefix_end};
use serde_json::Value;
use std::sync::Arc;

fn bad_batch(key: &[u8], why: impl std::fmt::Display) -> Error {
    Error::new(
        ErrorKind::Metadata,
        format!("journal batch {}: {why}", String::from_utf8_lossy(key)),
    )
}

/// A record being put together from its parts while the log is read.
pub(super) struct Pending {
    parts: u64,
    next: u64,
    text: String,
}

/// Adds batch `raw` (at `key`) to `out`: its records, or one part of a record. A record whose
/// parts stop before the last (its writer was deposed or died while writing it; it was never
/// acknowledged) is dropped when the next record starts; a part out of order is an error.
pub(super) fn decode_batch(
    raw: &[u8],
    key: &[u8],
    pending: &mut Option<Pending>,
    out: &mut Vec<String>,
) -> Result<()> {
    if raw.first() != Some(&b'{') {
        let records: Vec<String> = serde_json::from_slice(raw)
            .map_err(|e| bad_batch(key, format!("not a JSON array of strings: {e}")))?;
        *pending = None;
        out.extend(records);
        return Ok(());
    }
    let p: Part = serde_json::from_slice(raw)
        .map_err(|e| bad_batch(key, format!("not a record part: {e}")))?;
    if p.part >= p.parts {
        return Err(bad_batch(key, format!("part {} of {}", p.part, p.parts)));
    }
    if p.part == 0 {
        *pending = Some(Pending {
            parts: p.parts,
            next: 0,
            text: String::new(),
        });
    }
    match pending {
        Some(r) if r.parts == p.parts && r.next == p.part => {
            r.text.push_str(&p.text);
            r.next += 1;
        }
        _ => {
            return Err(bad_batch(
                key,
                format!("part {} of {} without the parts before it", p.part, p.parts),
            ));
        }
    }
    if p.part + 1 == p.parts {
        out.extend(pending.take().map(|r| r.text));
    }
    Ok(())
}

/// Reads every key in `[from, end)` page by page, oldest first.
fn scan(
    client: &EtcdClient,
    from: &[u8],
    end: &[u8],
    mut f: impl FnMut(&[u8], &[u8]) -> Result<()>,
) -> Result<()> {
    let mut from = from.to_vec();
    loop {
        let r = client.range(&from, end, PAGE)?;
        let n = r.kvs.len();
        for kv in &r.kvs {
            f(&kv.key, &kv.value)?;
        }
        match r.kvs.last() {
            Some(last) if (n as i64) < r.count => {
                from = last.key.clone();
                from.push(0);
            }
            _ => return Ok(()),
        }
    }
}

/// Reads the journal under `prefix`: the current snapshot and every batch after it, checking
/// that none is missing.
pub fn recover(client: &Arc<EtcdClient>, prefix: &str) -> Result<(Recovered, u64)> {
    let mut tail = JournalTail::new(client.clone(), prefix);
    tail.poll()?;
    let (rec, next_seq, _) = tail.into_parts();
    Ok((rec, next_seq))
}

/// The batch a snapshot was taken after and its take number.
pub(super) type SnapshotDir = (u64, u32);

/// What `head` names: the snapshot's batch, directory and chunk count, and its directory in
/// today's form (`None` for the old form).
fn parse_head(prefix: &str, raw: &[u8]) -> Result<(u64, String, usize, Option<SnapshotDir>)> {
    let h: Value = serde_json::from_slice(raw)
        .map_err(|e| Error::new(ErrorKind::Metadata, format!("journal head: {e}")))?;
    let seq = int(&h["snapshot"]) as u64;
    let chunks = int(&h["chunks"]) as usize;
    let take = h["take"].as_u64().map(|t| t as u32);
    Ok((
        seq,
        snap_dir(prefix, seq, take),
        chunks,
        take.map(|t| (seq, t)),
    ))
}

/// The journal as read so far: a standby keeps one up to date ([`JournalTail::poll`]) while it
/// stands by, so that on winning it reads only what the leader wrote since
/// ([`Journal::open_from_tail`]); [`recover`] is one poll of a new one.
pub struct JournalTail {
    pub(super) client: Arc<EtcdClient>,
    pub(super) prefix: String,
    /// The `head` value the snapshot was read from (outer `None`: nothing read yet, or a poll
    /// failed and everything is read again).
    head: Option<Option<Vec<u8>>>,
    head_dir: Option<SnapshotDir>,
    snapshot: Option<String>,
    records: Vec<String>,
    batches: u64,
    next_seq: u64,
    pending: Option<Pending>,
}

impl JournalTail {
    /// Nothing read yet of the journal under `prefix`.
    pub fn new(client: Arc<EtcdClient>, prefix: &str) -> JournalTail {
        JournalTail {
            client,
            prefix: prefix.to_string(),
            head: None,
            head_dir: None,
            snapshot: None,
            records: Vec::new(),
            batches: 0,
            next_seq: 0,
            pending: None,
        }
    }

    /// Reads what was written since the last poll: the snapshot `head` names when it changed
    /// (then the log after it again), and the batches after the last one read. On an error
    /// the next poll reads everything again.
    pub fn poll(&mut self) -> Result<()> {
        let r = self.poll_once();
        if r.is_err() {
            self.head = None;
        }
        r
    }

    fn poll_once(&mut self) -> Result<()> {
        let (head, _) = self.client.get(format!("{}head", self.prefix).as_bytes())?;
        let head = head.map(|h| h.value);
        if self.head.as_ref() == Some(&head) {
            return self.read_log();
        }
        let mut snapshot_at = None;
        (self.next_seq, self.head_dir) = (0, None);
        if let Some(raw) = &head {
            let (seq, dir, chunks, head_dir) = parse_head(&self.prefix, raw)?;
            snapshot_at = Some((seq, dir, chunks));
            (self.next_seq, self.head_dir) = (seq + 1, head_dir);
        }
        self.records.clear();
        (self.batches, self.pending, self.snapshot) = (0, None, None);
        // The snapshot and the log after it are read at the same time (each is many requests).
        let client = self.client.clone();
        let snapshot = std::thread::scope(|s| {
            let snapshot = s.spawn(|| {
                snapshot_at
                    .map(|(seq, dir, chunks)| read_snapshot(&client, seq, &dir, chunks))
                    .transpose()
            });
            let log = self.read_log();
            let snapshot = snapshot.join().unwrap_or_else(|_| {
                Err(Error::new(
                    ErrorKind::Internal,
                    "journal: the snapshot reader panicked",
                ))
            });
            log.and(snapshot)
        })?;
        self.snapshot = snapshot;
        self.head = Some(head);
        Ok(())
    }

    /// Reads the batches from `next_seq` on; a missing batch is an error.
    fn read_log(&mut self) -> Result<()> {
        let (prefix, log_prefix) = (&self.prefix, format!("{}log/", self.prefix));
        let (next_seq, pending, records) =
            (&mut self.next_seq, &mut self.pending, &mut self.records);
        let mut batches = 0;
        scan(
            &self.client,
            seq_key(prefix, *next_seq).as_bytes(),
            &prefix_end(log_prefix.as_bytes()),
            |k, v| {
                let want = seq_key(prefix, *next_seq);
                if k != want.as_bytes() {
                    return Err(Error::new(
                        ErrorKind::Metadata,
                        format!(
                            "journal: batch {want} missing (found {})",
                            String::from_utf8_lossy(k)
                        ),
                    ));
                }
                decode_batch(v, k, pending, records)?;
                batches += 1;
                *next_seq += 1;
                Ok(())
            },
        )?;
        self.batches += batches;
        Ok(())
    }

    /// Records read so far after the snapshot.
    pub fn records(&self) -> usize {
        self.records.len()
    }

    /// What was read (a record whose parts stop before the last is left out: it was never
    /// acknowledged), the number of the next batch, and the snapshot's directory.
    pub(super) fn into_parts(self) -> (Recovered, u64, Option<SnapshotDir>) {
        let rec = Recovered {
            snapshot: self.snapshot,
            records: self.records,
            batches: self.batches,
        };
        (rec, self.next_seq, self.head_dir)
    }
}

/// The snapshot of `chunks` chunks in `dir` (taken after batch `seq`).
fn read_snapshot(client: &EtcdClient, seq: u64, dir: &str, chunks: usize) -> Result<String> {
    // Only the chunks the head counts: a failed earlier try may have left more behind.
    let end = format!("{dir}{chunks:08x}");
    let mut text = Vec::new();
    let mut got = 0usize;
    scan(client, dir.as_bytes(), end.as_bytes(), |_, v| {
        text.extend_from_slice(v);
        got += 1;
        Ok(())
    })?;
    if got != chunks {
        return Err(Error::new(
            ErrorKind::Metadata,
            format!("journal snapshot {seq:x}: {got} of {chunks} chunks present"),
        ));
    }
    String::from_utf8(text).map_err(|e| {
        Error::new(
            ErrorKind::Metadata,
            format!("journal snapshot {seq:x}: {e}"),
        )
    })
}
