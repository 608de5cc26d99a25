//! A leader's durable journal in etcd: an append-only log of records (opaque strings, e.g. JSON)
//! plus snapshots that replace the log they cover, so a successor can rebuild the state.
//!
//! Keys under one prefix:
//! - `log/<seq, 16 hex digits>`: one batch, a JSON array of records, written create-only; a
//!   record too large for one batch (a Store object with a key near its 1 MiB limit) takes
//!   several consecutive batches instead, each a JSON object `{"part":i,"parts":n,"text":...}`
//!   holding one piece of it, read back only when all `n` parts are there in order;
//! - `snap/<seq>-<take>/<chunk, 8 hex digits>`: a snapshot taken once batch `seq` was written
//!   (`take` counts the snapshots taken after the same batch), in chunks;
//! - `head`: `{"snapshot":seq,"take":t,"chunks":n}` naming the current snapshot (absent before
//!   the first); the log it does not cover starts at batch `seq + 1`. A head without `take`
//!   (the form before snapshots were written beside the log) names `snap/<seq>/`.
//!
//! A snapshot is written while batches keep being appended after it ([`Journal::plan_snapshot`],
//! [`SnapshotPlan::write`] on another thread, [`Journal::snapshot_written`]): a successor reads
//! whichever snapshot `head` names and the batches after it, so a snapshot of a large state
//! never holds up a commit.
//!
//! Every write that matters is a transaction fenced on the leader key: it succeeds only while
//! that key still has the create revision the writer won with, so a deposed leader cannot append.
//! Each request stays far below etcd's 1.5 MiB request limit (batches and chunks hold at most
//! [`MAX_VALUE`] bytes before base64) and uses a handful of operations (the limit is 128). A
//! snapshot makes the log it covers and the previous snapshot garbage; [`Journal::compact`]
//! deletes them, so what the journal holds stays near one snapshot plus the batches since.
//! Deleted keys keep their old versions in etcd's history until etcd compacts it, so each
//! compaction also compacts etcd's history up to the revision the previous one ended at: the
//! database stays near two snapshots and the log between them, without etcd's
//! `--auto-compaction-retention` (history newer than the previous snapshot is kept, for
//! watchers that lag).

mod read;

use read::SnapshotDir;
pub use read::{JournalTail, recover};

use super::{EtcdClient, b64, int};
use crate::error::{Error, ErrorKind, Result};
use serde_json::json;
use std::sync::Arc;

/// Most bytes in one batch or snapshot chunk before base64 (which adds a third).
pub const MAX_VALUE: usize = 512 << 10;

/// Longest record: a larger one is refused (`InvalidArgument`) before anything is written.
pub const MAX_RECORD: usize = 64 << 20;

/// Batches or chunks read per range request (bounds each answer to a few MiB).
const PAGE: i64 = 8;

/// Who may write: the leader key and the create revision this leader won it with.
#[derive(Debug, Clone)]
pub struct Fence {
    /// The leader key.
    pub key: String,
    /// Its create revision when this leader won (the view version).
    pub create_revision: i64,
}

/// What a successor reads back.
#[derive(Debug, Clone, Default)]
pub struct Recovered {
    /// The latest snapshot, if one was taken.
    pub snapshot: Option<String>,
    /// Records appended after it, oldest first.
    pub records: Vec<String>,
    /// Batches after the snapshot.
    pub batches: u64,
}

/// A journal writer (the leader's). One writer at a time; see `journal_writer` for a
/// thread-safe front with group commit.
pub struct Journal {
    client: Arc<EtcdClient>,
    prefix: String,
    fence: Fence,
    /// Sequence number of the next batch.
    next_seq: u64,
    /// Batches since the current snapshot and their bytes.
    batches: u64,
    bytes: u64,
    /// etcd's revision when the last compaction ended: history before it goes at the next.
    compact_to: Option<i64>,
    /// Bytes of the last snapshot written.
    snapshot_bytes: u64,
    /// The batch the current snapshot was taken after and its take number (`None`: no
    /// snapshot, or one in the old form): a new snapshot never reuses its directory.
    head_dir: Option<SnapshotDir>,
}

/// A snapshot about to be written beside the log: where, what it covers, and what the writer
/// needs to write it without the [`Journal`] (which keeps appending meanwhile).
pub struct SnapshotPlan {
    client: Arc<EtcdClient>,
    prefix: String,
    fence: Fence,
    /// The last batch written before the state is taken: the snapshot covers it and every
    /// batch before it.
    covers: u64,
    take: u32,
    /// The backlog when the plan was made (what the snapshot replaces).
    batches: u64,
    bytes: u64,
    compact_to: Option<i64>,
}

/// What a written snapshot leaves for [`Journal::snapshot_written`].
pub struct SnapshotWritten {
    batches: u64,
    bytes: u64,
    snapshot_bytes: u64,
    head_dir: SnapshotDir,
    compact_to: Option<i64>,
}

fn seq_key(prefix: &str, seq: u64) -> String {
    format!("{prefix}log/{seq:016x}")
}

/// The directory of the snapshot taken after batch `seq` (its `take`-th; `None`: the old form).
fn snap_dir(prefix: &str, seq: u64, take: Option<u32>) -> String {
    match take {
        Some(t) => format!("{prefix}snap/{seq:016x}-{t:08x}/"),
        None => format!("{prefix}snap/{seq:016x}/"),
    }
}

/// Writes `value` at `key` if `fence` still holds (and, with `create_only`, `key` does not
/// exist yet); a retried write that already landed (same value there) counts as done.
fn fenced_put(
    client: &EtcdClient,
    fence: &Fence,
    key: &str,
    value: &[u8],
    create_only: bool,
) -> Result<()> {
    let fence_cmp = json!({"key": b64(fence.key.as_bytes()), "target": "CREATE",
                           "result": "EQUAL", "create_revision": fence.create_revision.to_string()});
    let mut compare = vec![fence_cmp];
    if create_only {
        compare.push(json!({"key": b64(key.as_bytes()), "target": "CREATE",
                            "result": "EQUAL", "create_revision": "0"}));
    }
    let req = json!({
        "compare": compare,
        "success": [{"request_put": {"key": b64(key.as_bytes()), "value": b64(value)}}],
        "failure": [{"request_range": {"key": b64(fence.key.as_bytes())}},
                    {"request_range": {"key": b64(key.as_bytes())}}],
    });
    let v = client.call("/v3/kv/txn", &req)?;
    if v["succeeded"].as_bool().unwrap_or(false) {
        return Ok(());
    }
    let leader = &v["responses"][0]["response_range"]["kvs"][0];
    if int(&leader["create_revision"]) != fence.create_revision {
        return Err(not_leader(fence));
    }
    let there = super::key_value(&v["responses"][1]["response_range"]["kvs"][0])?;
    if there.value == value {
        return Ok(());
    }
    Err(Error::new(
        ErrorKind::Metadata,
        format!("journal: {key} already holds another batch"),
    ))
}

fn not_leader(fence: &Fence) -> Error {
    Error::new(
        ErrorKind::Metadata,
        format!(
            "journal: no longer the leader ({} is not at revision {})",
            fence.key, fence.create_revision
        ),
    )
}

/// One piece of a record that spans several batches.
#[derive(serde::Serialize, serde::Deserialize)]
struct Part {
    part: u64,
    parts: u64,
    text: String,
}

/// The bytes `c` takes in a JSON string (an upper bound for the short escapes).
fn json_char_len(c: char) -> usize {
    match c {
        '\u{0}'..='\u{1f}' => 6,
        '"' | '\\' => 2,
        _ => c.len_utf8(),
    }
}

/// Splits `s` into pieces whose JSON strings take at most `max` bytes each.
fn split_json(s: &str, max: usize) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut start, mut size) = (0, 0);
    for (i, c) in s.char_indices() {
        let n = json_char_len(c);
        if size + n > max && i > start {
            out.push(&s[start..i]);
            (start, size) = (i, 0);
        }
        size += n;
    }
    if start < s.len() {
        out.push(&s[start..]);
    }
    out
}

impl Journal {
    /// Reads the journal under `prefix` (see [`recover`]) and returns a writer that appends
    /// after it, fenced on `fence`, with what was recovered.
    pub fn open(
        client: Arc<EtcdClient>,
        prefix: &str,
        fence: Fence,
    ) -> Result<(Journal, Recovered)> {
        let mut tail = JournalTail::new(client, prefix);
        tail.poll()?;
        Ok(Journal::after(tail, fence))
    }

    /// [`open`](Self::open) from what a standby has read already: only what was written since
    /// its last poll is read now (all of it again when `tail` is of another prefix).
    pub fn open_from_tail(
        client: Arc<EtcdClient>,
        prefix: &str,
        fence: Fence,
        mut tail: JournalTail,
    ) -> Result<(Journal, Recovered)> {
        if tail.prefix != prefix {
            tail = JournalTail::new(client, prefix);
        }
        tail.poll()?;
        Ok(Journal::after(tail, fence))
    }

    /// A writer that appends after what `tail` read.
    fn after(tail: JournalTail, fence: Fence) -> (Journal, Recovered) {
        let (client, prefix) = (tail.client.clone(), tail.prefix.clone());
        let (rec, next_seq, head_dir) = tail.into_parts();
        let bytes = rec.records.iter().map(|r| r.len() as u64).sum();
        let j = Journal {
            client,
            prefix,
            fence,
            next_seq,
            batches: rec.batches,
            bytes,
            compact_to: None,
            head_dir,
            snapshot_bytes: rec.snapshot.as_ref().map_or(0, |s| s.len() as u64),
        };
        (j, rec)
    }

    /// Batches and bytes appended since the last snapshot (for deciding when to compact).
    pub fn backlog(&self) -> (u64, u64) {
        (self.batches, self.bytes)
    }

    /// Bytes of the current snapshot (0 before the first).
    pub fn snapshot_bytes(&self) -> u64 {
        self.snapshot_bytes
    }

    /// Writes `value` at `key` if this leader still holds the key (and, with `create_only`,
    /// `key` does not exist yet). A retried write that already landed (same value there)
    /// counts as done.
    fn put_fenced(&self, key: &str, value: &[u8], create_only: bool) -> Result<()> {
        fenced_put(&self.client, &self.fence, key, value, create_only)
    }

    /// Appends records durably, in as few batches as [`MAX_VALUE`] allows; a record too large
    /// for one batch is written in parts, one batch each, after the batch before it. Fails when
    /// this leader was deposed or a record exceeds [`MAX_RECORD`] (then nothing is written).
    pub fn append(&mut self, records: &[String]) -> Result<()> {
        if let Some(r) = records.iter().find(|r| r.len() > MAX_RECORD) {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "journal: a record of {} bytes exceeds {MAX_RECORD}",
                    r.len()
                ),
            ));
        }
        let mut i = 0;
        while i < records.len() {
            let mut batch: Vec<&String> = Vec::new();
            let mut size = 2;
            while i < records.len() {
                let r = &records[i];
                let cost = serde_json::to_string(r).map(|s| s.len()).unwrap_or(r.len()) + 1;
                if size + cost > MAX_VALUE {
                    break;
                }
                size += cost;
                batch.push(r);
                i += 1;
            }
            if batch.is_empty() {
                // records[i] alone is too large for a batch.
                self.append_parts(&records[i])?;
                i += 1;
                continue;
            }
            let value = serde_json::to_vec(&batch)
                .map_err(|e| Error::new(ErrorKind::Internal, format!("journal batch: {e}")))?;
            self.append_batch(&value)?;
        }
        Ok(())
    }

    /// Writes one batch value at the next sequence number.
    fn append_batch(&mut self, value: &[u8]) -> Result<()> {
        let key = seq_key(&self.prefix, self.next_seq);
        self.put_fenced(&key, value, true)?;
        self.next_seq += 1;
        self.batches += 1;
        self.bytes += value.len() as u64;
        Ok(())
    }

    /// Writes `record` as consecutive part batches.
    fn append_parts(&mut self, record: &str) -> Result<()> {
        // Room for the part's other fields.
        let pieces = split_json(record, MAX_VALUE - 64);
        let parts = pieces.len() as u64;
        for (part, text) in pieces.into_iter().enumerate() {
            let value = serde_json::to_vec(&Part {
                part: part as u64,
                parts,
                text: text.to_string(),
            })
            .map_err(|e| Error::new(ErrorKind::Internal, format!("journal part: {e}")))?;
            self.append_batch(&value)?;
        }
        Ok(())
    }

    /// Stores `snapshot` (the whole state after everything appended so far) and deletes the log
    /// it covers and the previous snapshot: [`plan_snapshot`](Self::plan_snapshot), write,
    /// [`snapshot_written`](Self::snapshot_written) in one call.
    pub fn compact(&mut self, snapshot: &str) -> Result<()> {
        let written = self.plan_snapshot().write(snapshot)?;
        self.snapshot_written(written);
        Ok(())
    }

    /// Plans a snapshot of the state as it is once every batch appended so far has been
    /// applied: take the state after this call, write it with [`SnapshotPlan::write`] (on any
    /// thread, while this journal keeps appending), then hand the result to
    /// [`snapshot_written`](Self::snapshot_written).
    pub fn plan_snapshot(&mut self) -> SnapshotPlan {
        if self.next_seq == 0 {
            // Nothing written yet: batch 0 is never written, so the snapshot covers it.
            self.next_seq = 1;
        }
        // Batch numbers start at the head's batch + 1: `covers` is the last one written (the
        // head's own batch when nothing was appended since).
        let covers = self.next_seq - 1;
        let take = match self.head_dir {
            Some((seq, t)) if seq == covers => t + 1,
            _ => 0,
        };
        SnapshotPlan {
            client: self.client.clone(),
            prefix: self.prefix.clone(),
            fence: self.fence.clone(),
            covers,
            take,
            batches: self.batches,
            bytes: self.bytes,
            compact_to: self.compact_to,
        }
    }

    /// Takes in a snapshot written from [`plan_snapshot`](Self::plan_snapshot): the backlog
    /// it replaced is no longer counted.
    pub fn snapshot_written(&mut self, w: SnapshotWritten) {
        self.batches = self.batches.saturating_sub(w.batches);
        self.bytes = self.bytes.saturating_sub(w.bytes);
        self.snapshot_bytes = w.snapshot_bytes;
        self.head_dir = Some(w.head_dir);
        self.compact_to = w.compact_to;
    }
}

impl SnapshotPlan {
    /// Writes `snapshot` in chunks, points `head` at it, then deletes the log it covers, the
    /// previous snapshot and etcd's history one snapshot behind. Fails when this leader was
    /// deposed or etcd refused a write (then `head` still names the previous snapshot).
    pub fn write(self, snapshot: &str) -> Result<SnapshotWritten> {
        let dir = snap_dir(&self.prefix, self.covers, Some(self.take));
        let mut chunks = 0u32;
        for piece in split_utf8(snapshot, MAX_VALUE) {
            let key = format!("{dir}{chunks:08x}");
            fenced_put(&self.client, &self.fence, &key, piece.as_bytes(), false)?;
            chunks += 1;
        }
        let head = json!({"snapshot": self.covers, "take": self.take, "chunks": chunks});
        let head_key = format!("{}head", self.prefix);
        fenced_put(
            &self.client,
            &self.fence,
            &head_key,
            head.to_string().as_bytes(),
            false,
        )?;
        let mut written = SnapshotWritten {
            batches: self.batches,
            bytes: self.bytes,
            snapshot_bytes: snapshot.len() as u64,
            head_dir: (self.covers, self.take),
            compact_to: self.compact_to,
        };
        // Garbage now: the batches it covers and older snapshots (a failure here only leaves
        // garbage behind, which the next compaction removes).
        let log = self.prefix.clone() + "log/";
        let after = seq_key(&self.prefix, self.covers + 1);
        self.client.delete_range(log.as_bytes(), after.as_bytes())?;
        let snaps = self.prefix.clone() + "snap/";
        self.client.delete_range(snaps.as_bytes(), dir.as_bytes())?;
        // etcd's history: what the previous compaction deleted (and everything before) goes
        // now; what this one deleted goes at the next.
        let (_, now) = self.client.get(head_key.as_bytes())?;
        if let Some(rev) = written.compact_to.replace(now) {
            self.client.compact(rev)?;
        }
        Ok(written)
    }
}

/// Splits `s` into pieces of at most `max` bytes on character boundaries.
fn split_utf8(s: &str, max: usize) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = s;
    while !rest.is_empty() {
        let mut cut = rest.len().min(max);
        while !rest.is_char_boundary(cut) {
            cut -= 1;
        }
        let (a, b) = rest.split_at(cut);
        out.push(a);
        rest = b;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::read::decode_batch;
    use super::*;

    #[test]
    fn pieces_respect_char_boundaries() {
        let s = "aé".repeat(10);
        let parts = split_utf8(&s, 4);
        assert!(parts.iter().all(|p| p.len() <= 4));
        assert_eq!(parts.concat(), s);
        assert!(split_utf8("", 4).is_empty());
        assert_eq!(seq_key("p/", 255), "p/log/00000000000000ff");
    }

    #[test]
    fn a_large_record_splits_into_parts_that_read_back() {
        let record = format!("{}\"é\\\u{0}", "x".repeat(3000)).repeat(500);
        let pieces = split_json(&record, 1000);
        assert!(pieces.len() > 1000);
        assert_eq!(pieces.concat(), record);
        assert!(
            pieces
                .iter()
                .all(|p| serde_json::to_string(p).unwrap().len() <= 1002)
        );
        let parts = pieces.len() as u64;
        let batches: Vec<Vec<u8>> = std::iter::once(b"[\"a\"]".to_vec())
            .chain(pieces.iter().enumerate().map(|(i, t)| {
                serde_json::to_vec(&Part {
                    part: i as u64,
                    parts,
                    text: t.to_string(),
                })
                .unwrap()
            }))
            .chain(std::iter::once(b"[\"b\"]".to_vec()))
            .collect();
        let read = |bs: &[Vec<u8>]| {
            let (mut pending, mut out) = (None, Vec::new());
            for b in bs {
                decode_batch(b, b"k", &mut pending, &mut out)?;
            }
            Ok::<_, Error>(out)
        };
        assert_eq!(read(&batches).unwrap(), ["a", &record, "b"]);
        // A record cut short (its writer gone) is dropped when the next one starts, or at the
        // end of the log; a part without the parts before it is an error.
        let cut: Vec<Vec<u8>> = [&batches[..3], &batches[batches.len() - 1..]].concat();
        assert_eq!(read(&cut).unwrap(), ["a", "b"]);
        assert_eq!(read(&batches[..3]).unwrap(), ["a"]);
        let restarted: Vec<Vec<u8>> = [&batches[..3], &batches[1..]].concat();
        assert_eq!(read(&restarted).unwrap(), ["a", &record, "b"]);
        let hole: Vec<Vec<u8>> = [&batches[..2], &batches[3..]].concat();
        assert!(read(&hole).is_err());
    }
}
