//! Key-value pairs as the etcd v3 JSON gateway sends them (base64 bytes, int64 as strings), and
//! the key arithmetic of ranges.

use crate::error::{Error, ErrorKind, Result};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::Value;

/// One key-value pair as etcd stores it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KeyValue {
    /// The key.
    pub key: Vec<u8>,
    /// The value.
    pub value: Vec<u8>,
    /// Revision of the key's creation.
    pub create_revision: i64,
    /// Revision of its last change.
    pub mod_revision: i64,
    /// Changes since creation (1 = fresh).
    pub version: i64,
    /// Lease the key hangs on (0 = none).
    pub lease: i64,
}

/// Encodes bytes as the gateway wants them.
pub fn b64(bytes: &[u8]) -> String {
    B64.encode(bytes)
}

/// The `range_end` that makes a range cover every key starting with `prefix` (etcd's rule:
/// the prefix with its last byte below 0xff incremented; `"\0"` for everything).
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// Reads an int64 the gateway sent as a string (or a number); absent means 0.
pub fn int(v: &Value) -> i64 {
    match v {
        Value::String(s) => s.parse().unwrap_or(0),
        Value::Number(n) => n.as_i64().unwrap_or(0),
        _ => 0,
    }
}

pub(super) fn bytes(v: &Value) -> Result<Vec<u8>> {
    match v.as_str() {
        None => Ok(Vec::new()),
        Some(s) => B64
            .decode(s)
            .map_err(|e| Error::new(ErrorKind::Protocol, format!("etcd sent bad base64: {e}"))),
    }
}

/// Decodes one `kv` object of a gateway answer.
pub fn key_value(v: &Value) -> Result<KeyValue> {
    Ok(KeyValue {
        key: bytes(&v["key"])?,
        value: bytes(&v["value"])?,
        create_revision: int(&v["create_revision"]),
        mod_revision: int(&v["mod_revision"]),
        version: int(&v["version"]),
        lease: int(&v["lease"]),
    })
}
