//! One record of the master's HA journal (`--enable_oplog`), as a type: what `objects` and
//! `durable` queue while a shard is locked, and what a new leader reads back. This module is
//! the format only (it knows nothing of the master's tables); `durable` drives the objects and
//! segments from decoded records.
//!
//! The format is compact JSON, one object per record, keys in byte order (the form the
//! journal has had since its first version, and that journals already in etcd hold):
//!
//! ```text
//! {"base":B,"client":C,"name":"seg","op":"mount","size":S}
//! {"name":"seg","op":"unmount"}
//! {"hard_pin":false,"key":"k","op":"put","replicas":[["seg",offset,size],...],"size":S,"version":V}
//! {"key":"k","op":"hold","replicas":[["seg",offset,len],...],"version":V,"writer":W}
//! {"key":"k","op":"unhold","version":V}
//! {"key":"k","op":"del"}
//! ```
//!
//! A journal outlives a binary upgrade, so [`Record::encode`] writes exactly these bytes (the
//! golden test in `journal_record_tests.rs` holds them) whatever serde_json's map order is, and
//! [`Record::decode`] refuses a record with a missing or mistyped field instead of reading it as
//! zeros.

use serde_json::value::RawValue;
use std::borrow::Cow;
use std::fmt::{self, Write as _};
use std::sync::Arc;

/// Where one replica of a journaled write lies: `len` bytes at `offset` of segment `segment`
/// (written as `[segment, offset, len]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaAt {
    /// The segment's name.
    pub segment: Arc<str>,
    /// Offset in the segment.
    pub offset: u64,
    /// Bytes (every replica of one write has the same length).
    pub len: u64,
}

/// One journal record: an idempotent set or delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record<'a> {
    /// Client `client` mounted segment `name` at `base`, `size` bytes.
    Mount {
        /// The mounting client's id.
        client: u64,
        /// The segment's name.
        name: Cow<'a, str>,
        /// Its base address.
        base: u64,
        /// Its size in bytes.
        size: u64,
    },
    /// Segment `name` was unmounted (its objects went with it).
    Unmount {
        /// The segment's name.
        name: Cow<'a, str>,
    },
    /// A complete object: `size` bytes in each replica.
    Put {
        /// The object's key.
        key: Cow<'a, str>,
        /// Its size in bytes.
        size: u64,
        /// Its replicas (each `size` bytes long).
        replicas: Vec<ReplicaAt>,
        /// Hard-pinned (never evicted).
        hard_pin: bool,
        /// The write that published it (its PutEnd, resent to a new leader, is then known);
        /// `None` in records written before versions were journaled.
        version: Option<u64>,
    },
    /// An unfinished write's space: a new leader keeps it from reuse until the writer reports.
    Hold {
        /// The object's key.
        key: Cow<'a, str>,
        /// The write's version.
        version: u64,
        /// The writing client's id.
        writer: u64,
        /// The write's buffers.
        replicas: Vec<ReplicaAt>,
    },
    /// Write `version` of `key` no longer holds its space (freed, or published: a put follows).
    Unhold {
        /// The object's key.
        key: Cow<'a, str>,
        /// The write's version.
        version: u64,
    },
    /// `key` was removed (or its bytes are being rewritten in place).
    Del {
        /// The object's key.
        key: Cow<'a, str>,
    },
}

/// Why a journal record was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordError(String);

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "malformed journal record: {}", self.0)
    }
}

impl std::error::Error for RecordError {}

fn bad(what: impl Into<String>) -> RecordError {
    RecordError(what.into())
}

/// `replicas` (segment name, offset), each `len` bytes, as journal placements.
pub fn placed(replicas: Vec<(Arc<str>, u64)>, len: u64) -> Vec<ReplicaAt> {
    replicas
        .into_iter()
        .map(|(segment, offset)| ReplicaAt {
            segment,
            offset,
            len,
        })
        .collect()
}

/// Appends `s` as a JSON string (serde_json's escaping, as the journal always had).
fn put_str(out: &mut String, s: &str) {
    // A `String` sink cannot fail, nor can serializing a `str`.
    let quoted = serde_json::to_string(s).unwrap_or_default();
    out.push_str(&quoted);
}

fn put_replicas(out: &mut String, replicas: &[ReplicaAt]) {
    out.push('[');
    for (i, r) in replicas.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push('[');
        put_str(out, &r.segment);
        let _ = write!(out, ",{},{}]", r.offset, r.len);
    }
    out.push(']');
}

impl<'a> Record<'a> {
    /// A complete object's record: `size` bytes at each (segment name, offset) of `replicas`,
    /// published by write `version` (`None`: not known).
    pub fn put(
        key: &'a str,
        size: u64,
        replicas: Vec<(Arc<str>, u64)>,
        hard_pin: bool,
        version: Option<u64>,
    ) -> Self {
        Record::Put {
            key: Cow::Borrowed(key),
            size,
            replicas: placed(replicas, size),
            hard_pin,
            version,
        }
    }

    /// An unfinished write's record: `len` bytes at each (segment name, offset) of `replicas`.
    pub fn hold(
        key: &'a str,
        version: u64,
        writer: u64,
        replicas: Vec<(Arc<str>, u64)>,
        len: u64,
    ) -> Self {
        Record::Hold {
            key: Cow::Borrowed(key),
            version,
            writer,
            replicas: placed(replicas, len),
        }
    }

    /// Write `version` of `key` no longer holds its space.
    pub fn unhold(key: &'a str, version: u64) -> Self {
        Record::Unhold {
            key: Cow::Borrowed(key),
            version,
        }
    }

    /// `key` was removed.
    pub fn del(key: &'a str) -> Self {
        Record::Del {
            key: Cow::Borrowed(key),
        }
    }

    /// The record's bytes as the journal keeps them (see the module docs).
    pub fn encode(&self) -> String {
        let mut o = String::with_capacity(64);
        // Keys in byte order, as a serde_json map without `preserve_order` writes them.
        match self {
            Record::Mount {
                client,
                name,
                base,
                size,
            } => {
                let _ = write!(o, "{{\"base\":{base},\"client\":{client},\"name\":");
                put_str(&mut o, name);
                let _ = write!(o, ",\"op\":\"mount\",\"size\":{size}}}");
            }
            Record::Unmount { name } => {
                o.push_str("{\"name\":");
                put_str(&mut o, name);
                o.push_str(",\"op\":\"unmount\"}");
            }
            Record::Put {
                key,
                size,
                replicas,
                hard_pin,
                version,
            } => {
                let _ = write!(o, "{{\"hard_pin\":{hard_pin},\"key\":");
                put_str(&mut o, key);
                o.push_str(",\"op\":\"put\",\"replicas\":");
                put_replicas(&mut o, replicas);
                let _ = write!(o, ",\"size\":{size}");
                if let Some(v) = version {
                    let _ = write!(o, ",\"version\":{v}");
                }
                o.push('}');
            }
            Record::Hold {
                key,
                version,
                writer,
                replicas,
            } => {
                o.push_str("{\"key\":");
                put_str(&mut o, key);
                o.push_str(",\"op\":\"hold\",\"replicas\":");
                put_replicas(&mut o, replicas);
                let _ = write!(o, ",\"version\":{version},\"writer\":{writer}}}");
            }
            Record::Unhold { key, version } => {
                o.push_str("{\"key\":");
                put_str(&mut o, key);
                let _ = write!(o, ",\"op\":\"unhold\",\"version\":{version}}}");
            }
            Record::Del { key } => {
                o.push_str("{\"key\":");
                put_str(&mut o, key);
                o.push_str(",\"op\":\"del\"}");
            }
        }
        o
    }

    /// Reads one record from its journal line.
    pub fn decode(line: &str) -> Result<Record<'static>, RecordError> {
        Record::decode_borrowed(line, &mut Segments::default()).map(Record::into_owned)
    }

    /// Reads one record, borrowing its strings from `line` where they need no unescaping;
    /// segment names are shared through `names`.
    fn decode_borrowed(line: &'a str, names: &mut Segments) -> Result<Record<'a>, RecordError> {
        // (serde would also read a struct from a list, by position.)
        if !line.trim_start().starts_with('{') {
            return Err(bad("not a JSON object"));
        }
        let w: Wire<'a> = serde_json::from_str(line).map_err(|e| bad(format!("{e}")))?;
        w.record(names)
    }

    /// The record with owned strings.
    pub fn into_owned(self) -> Record<'static> {
        let own = |c: Cow<'_, str>| Cow::Owned(c.into_owned());
        match self {
            Record::Mount {
                client,
                name,
                base,
                size,
            } => Record::Mount {
                client,
                name: own(name),
                base,
                size,
            },
            Record::Unmount { name } => Record::Unmount { name: own(name) },
            Record::Put {
                key,
                size,
                replicas,
                hard_pin,
                version,
            } => Record::Put {
                key: own(key),
                size,
                replicas,
                hard_pin,
                version,
            },
            Record::Hold {
                key,
                version,
                writer,
                replicas,
            } => Record::Hold {
                key: own(key),
                version,
                writer,
                replicas,
            },
            Record::Unhold { key, version } => Record::Unhold {
                key: own(key),
                version,
            },
            Record::Del { key } => Record::Del { key: own(key) },
        }
    }
}

/// A record's fields as they arrive (every op's, each optional): typed, strings borrowed
/// where they can be, unknown fields ignored, a duplicated or mistyped one refused.
#[derive(serde::Deserialize)]
struct Wire<'a> {
    #[serde(borrow)]
    op: Cow<'a, str>,
    #[serde(borrow, default)]
    key: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    client: Option<u64>,
    base: Option<u64>,
    size: Option<u64>,
    version: Option<u64>,
    writer: Option<u64>,
    hard_pin: Option<bool>,
    #[serde(borrow, default)]
    replicas: Option<Vec<(Cow<'a, str>, u64, u64)>>,
}

/// Segment names seen while decoding, shared (a snapshot names a few segments a million times).
#[derive(Default)]
struct Segments(Vec<Arc<str>>);

impl Segments {
    fn get(&mut self, name: &str) -> Arc<str> {
        if let Some(n) = self.0.iter().find(|n| &***n == name) {
            return n.clone();
        }
        let n: Arc<str> = Arc::from(name);
        if self.0.len() < 64 {
            self.0.push(n.clone());
        }
        n
    }
}

impl<'a> Wire<'a> {
    fn record(self, names: &mut Segments) -> Result<Record<'a>, RecordError> {
        let op = &*self.op;
        let text = |v: Option<Cow<'a, str>>, f: &str| {
            v.ok_or_else(|| bad(format!("{op}: \"{f}\" is not a string")))
        };
        let num = |v: Option<u64>, f: &str| {
            v.ok_or_else(|| bad(format!("{op}: \"{f}\" is not an unsigned integer")))
        };
        let mut replicas = |v: Option<Vec<(Cow<'a, str>, u64, u64)>>| {
            let list = v.ok_or_else(|| bad(format!("{op}: \"replicas\" is not a list")))?;
            Ok::<_, RecordError>(
                list.into_iter()
                    .map(|(name, offset, len)| ReplicaAt {
                        segment: names.get(&name),
                        offset,
                        len,
                    })
                    .collect(),
            )
        };
        Ok(match op {
            "mount" => Record::Mount {
                client: num(self.client, "client")?,
                name: text(self.name, "name")?,
                base: num(self.base, "base")?,
                size: num(self.size, "size")?,
            },
            "unmount" => Record::Unmount {
                name: text(self.name, "name")?,
            },
            "put" => Record::Put {
                key: text(self.key, "key")?,
                size: num(self.size, "size")?,
                replicas: replicas(self.replicas)?,
                hard_pin: self
                    .hard_pin
                    .ok_or_else(|| bad("put: \"hard_pin\" is not a boolean"))?,
                version: self.version,
            },
            "hold" => Record::Hold {
                key: text(self.key, "key")?,
                version: num(self.version, "version")?,
                writer: num(self.writer, "writer")?,
                replicas: replicas(self.replicas)?,
            },
            "unhold" => Record::Unhold {
                key: text(self.key, "key")?,
                version: num(self.version, "version")?,
            },
            "del" => Record::Del {
                key: text(self.key, "key")?,
            },
            other => return Err(bad(format!("unknown op {other:?}"))),
        })
    }
}

/// A journal snapshot: every mounted segment, complete object and held write as records,
/// written `{"holds":[...],"objects":[...],"segments":[...]}` (the snapshot's form since its
/// first version).
pub fn encode_snapshot<'a>(
    segments: impl IntoIterator<Item = Record<'a>>,
    objects: impl IntoIterator<Item = Record<'a>>,
    holds: impl IntoIterator<Item = Record<'a>>,
) -> String {
    fn list<'a>(out: &mut String, name: &str, records: impl IntoIterator<Item = Record<'a>>) {
        let _ = write!(out, "\"{name}\":[");
        for (i, r) in records.into_iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&r.encode());
        }
        out.push(']');
    }
    // Keys in byte order, as for a record.
    let mut out = String::from("{");
    list(&mut out, "holds", holds);
    out.push(',');
    list(&mut out, "objects", objects);
    out.push(',');
    list(&mut out, "segments", segments);
    out.push('}');
    out
}

/// A snapshot's three lists, each entry kept as its text so that one malformed entry is
/// refused alone.
#[derive(serde::Deserialize)]
struct SnapshotLists<'a> {
    #[serde(borrow, default)]
    segments: Option<Vec<&'a RawValue>>,
    #[serde(borrow, default)]
    objects: Option<Vec<&'a RawValue>>,
    #[serde(borrow, default)]
    holds: Option<Vec<&'a RawValue>>,
}

/// The records of a snapshot, in the order a new leader applies them (segments, then objects,
/// then held writes), borrowing from `snapshot`; each entry decoded on its own, so one
/// malformed entry is refused alone. Large snapshots are decoded on several threads.
pub fn decode_snapshot(
    snapshot: &str,
) -> Result<Vec<Result<Record<'_>, RecordError>>, RecordError> {
    // (serde would also read a struct from a list, by position.)
    if !snapshot.trim_start().starts_with('{') {
        return Err(bad("snapshot is not a JSON object"));
    }
    let lists: SnapshotLists<'_> =
        serde_json::from_str(snapshot).map_err(|e| bad(format!("snapshot: {e}")))?;
    let entries: Vec<&str> = [lists.segments, lists.objects, lists.holds]
        .into_iter()
        .flatten()
        .flatten()
        .map(RawValue::get)
        .collect();
    Ok(decode_records(&entries))
}

/// Decodes records (journal lines, or a snapshot's entries), in order, borrowing from them;
/// many are decoded on several threads.
pub fn decode_records<'a>(lines: &[&'a str]) -> Vec<Result<Record<'a>, RecordError>> {
    fn decode<'a>(part: &[&'a str]) -> Vec<Result<Record<'a>, RecordError>> {
        let mut names = Segments::default();
        part.iter()
            .map(|e| Record::decode_borrowed(e, &mut names))
            .collect()
    }
    const PER_THREAD: usize = 64 << 10;
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(lines.len().div_ceil(PER_THREAD))
        .max(1);
    if threads == 1 {
        return decode(lines);
    }
    let per = lines.len().div_ceil(threads);
    std::thread::scope(|s| {
        let parts: Vec<_> = lines
            .chunks(per)
            .map(|c| s.spawn(move || decode(c)))
            .collect();
        parts
            .into_iter()
            .flat_map(|h| h.join().expect("decoding does not panic"))
            .collect()
    })
}

#[cfg(test)]
#[path = "journal_record_tests.rs"]
mod tests;
