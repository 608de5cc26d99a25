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
//! {"hard_pin":false,"key":"k","op":"put","replicas":[["seg",offset,size],...],"size":S}
//! {"key":"k","op":"hold","replicas":[["seg",offset,len],...],"version":V,"writer":W}
//! {"key":"k","op":"unhold","version":V}
//! {"key":"k","op":"del"}
//! ```
//!
//! A journal outlives a binary upgrade, so [`Record::encode`] writes exactly these bytes (the
//! golden test in `journal_record_tests.rs` holds them) whatever serde_json's map order is, and
//! [`Record::decode`] refuses a record with a missing or mistyped field instead of reading it as
//! zeros.

use serde_json::Value;
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
    /// A complete object's record: `size` bytes at each (segment name, offset) of `replicas`.
    pub fn put(key: &'a str, size: u64, replicas: Vec<(Arc<str>, u64)>, hard_pin: bool) -> Self {
        Record::Put {
            key: Cow::Borrowed(key),
            size,
            replicas: placed(replicas, size),
            hard_pin,
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
            } => {
                let _ = write!(o, "{{\"hard_pin\":{hard_pin},\"key\":");
                put_str(&mut o, key);
                o.push_str(",\"op\":\"put\",\"replicas\":");
                put_replicas(&mut o, replicas);
                let _ = write!(o, ",\"size\":{size}}}");
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
        let v: Value = serde_json::from_str(line).map_err(|e| bad(format!("not JSON: {e}")))?;
        Record::from_value(&v)
    }

    /// Reads one record from its JSON value (a journal line, or an entry of a snapshot).
    pub fn from_value(v: &Value) -> Result<Record<'static>, RecordError> {
        let Some(fields) = v.as_object() else {
            return Err(bad("not a JSON object"));
        };
        let op = fields
            .get("op")
            .and_then(Value::as_str)
            .ok_or_else(|| bad("no \"op\" string"))?;
        let text = |f: &str| -> Result<Cow<'static, str>, RecordError> {
            match fields.get(f).and_then(Value::as_str) {
                Some(s) => Ok(Cow::Owned(s.to_string())),
                None => Err(bad(format!("{op}: \"{f}\" is not a string"))),
            }
        };
        let num = |f: &str| -> Result<u64, RecordError> {
            fields
                .get(f)
                .and_then(Value::as_u64)
                .ok_or_else(|| bad(format!("{op}: \"{f}\" is not an unsigned integer")))
        };
        let replicas = || -> Result<Vec<ReplicaAt>, RecordError> {
            let list = fields
                .get("replicas")
                .and_then(Value::as_array)
                .ok_or_else(|| bad(format!("{op}: \"replicas\" is not a list")))?;
            list.iter().map(|x| replica(op, x)).collect()
        };
        Ok(match op {
            "mount" => Record::Mount {
                client: num("client")?,
                name: text("name")?,
                base: num("base")?,
                size: num("size")?,
            },
            "unmount" => Record::Unmount {
                name: text("name")?,
            },
            "put" => Record::Put {
                key: text("key")?,
                size: num("size")?,
                replicas: replicas()?,
                hard_pin: fields
                    .get("hard_pin")
                    .and_then(Value::as_bool)
                    .ok_or_else(|| bad("put: \"hard_pin\" is not a boolean"))?,
            },
            "hold" => Record::Hold {
                key: text("key")?,
                version: num("version")?,
                writer: num("writer")?,
                replicas: replicas()?,
            },
            "unhold" => Record::Unhold {
                key: text("key")?,
                version: num("version")?,
            },
            "del" => Record::Del { key: text("key")? },
            other => return Err(bad(format!("unknown op {other:?}"))),
        })
    }
}

/// One `[segment, offset, len]` entry of a record's replica list.
fn replica(op: &str, x: &Value) -> Result<ReplicaAt, RecordError> {
    match x.as_array().map(Vec::as_slice) {
        Some([name, offset, len]) => match (name.as_str(), offset.as_u64(), len.as_u64()) {
            (Some(name), Some(offset), Some(len)) => Ok(ReplicaAt {
                segment: Arc::from(name),
                offset,
                len,
            }),
            _ => Err(bad(format!("{op}: replica {x} is not [name, offset, len]"))),
        },
        _ => Err(bad(format!("{op}: replica {x} is not [name, offset, len]"))),
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

/// The records of a snapshot, in the order a new leader applies them (segments, then objects,
/// then held writes); each entry decoded on its own, so one malformed entry is refused alone.
pub fn decode_snapshot(
    snapshot: &str,
) -> Result<Vec<Result<Record<'static>, RecordError>>, RecordError> {
    let v: Value =
        serde_json::from_str(snapshot).map_err(|e| bad(format!("snapshot is not JSON: {e}")))?;
    if !v.is_object() {
        return Err(bad("snapshot is not a JSON object"));
    }
    let mut out = Vec::new();
    for part in ["segments", "objects", "holds"] {
        match &v[part] {
            Value::Null => {}
            Value::Array(list) => out.extend(list.iter().map(Record::from_value)),
            _ => return Err(bad(format!("snapshot: \"{part}\" is not a list"))),
        }
    }
    Ok(out)
}

#[cfg(test)]
#[path = "journal_record_tests.rs"]
mod tests;
