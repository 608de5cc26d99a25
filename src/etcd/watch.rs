//! One etcd watch over the JSON gateway: a chunked HTTP response carrying one JSON message per
//! line (`{"result":{...}}`). Each line is bounded in size; the stream ends when its time window
//! (set by [`super::EtcdClient::watch`]) passes, so a reader thread wakes up regularly.

use super::kv::{KeyValue, int, key_value};
use crate::error::{Error, ErrorKind, Result};
use crate::http_client::MAX_RESPONSE;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read};

/// What happened to a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// Created or changed.
    Put,
    /// Deleted (or its lease ended).
    Delete,
}

/// One change.
#[derive(Debug, Clone)]
pub struct WatchEvent {
    /// Put or delete.
    pub kind: EventKind,
    /// The pair after the change (a delete carries the key and its revision only).
    pub kv: KeyValue,
}

/// One message of a watch stream.
#[derive(Debug, Clone, Default)]
pub struct WatchMessage {
    /// Cluster the answering member belongs to.
    pub cluster_id: String,
    /// Store revision when the message was sent.
    pub revision: i64,
    /// The first message of a stream.
    pub created: bool,
    /// The watch ended on etcd's side (see `compact_revision` and `cancel_reason`).
    pub canceled: bool,
    /// Set when the start revision was already compacted away.
    pub compact_revision: i64,
    /// Why etcd canceled it, when it says.
    pub cancel_reason: String,
    /// The changes, in revision order.
    pub events: Vec<WatchEvent>,
}

/// An open watch stream.
pub struct WatchStream {
    reader: BufReader<ureq::BodyReader<'static>>,
    endpoint: String,
}

fn window_over(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
    ) || e
        .get_ref()
        .and_then(|x| x.downcast_ref::<ureq::Error>())
        .is_some_and(|u| matches!(u, ureq::Error::Timeout(_)))
}

impl WatchStream {
    pub(crate) fn new(resp: ureq::http::Response<ureq::Body>, endpoint: String) -> WatchStream {
        WatchStream {
            reader: BufReader::new(resp.into_body().into_reader()),
            endpoint,
        }
    }

    /// The endpoint serving this stream.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The next message; `Ok(None)` when the window is over or etcd closed the stream.
    pub fn next_message(&mut self) -> Result<Option<WatchMessage>> {
        let mut line = Vec::new();
        loop {
            line.clear();
            let read = (&mut self.reader)
                .take(MAX_RESPONSE + 1)
                .read_until(b'\n', &mut line);
            match read {
                Ok(0) => return Ok(None),
                Ok(_) if line.len() as u64 > MAX_RESPONSE => {
                    return Err(Error::new(
                        ErrorKind::Protocol,
                        format!(
                            "etcd watch at {}: message over {MAX_RESPONSE} bytes",
                            self.endpoint
                        ),
                    ));
                }
                Ok(_) if line.iter().all(u8::is_ascii_whitespace) => continue,
                Ok(_) => return parse(&line, &self.endpoint).map(Some),
                Err(e) if window_over(&e) => return Ok(None),
                Err(e) => {
                    return Err(Error::new(
                        ErrorKind::Metadata,
                        format!("etcd watch at {}: {e}", self.endpoint),
                    ));
                }
            }
        }
    }
}

fn parse(line: &[u8], endpoint: &str) -> Result<WatchMessage> {
    let v: Value = serde_json::from_slice(line).map_err(|e| {
        Error::new(
            ErrorKind::Protocol,
            format!("etcd watch at {endpoint}: bad JSON: {e}"),
        )
    })?;
    if !v["error"].is_null() {
        let err = &v["error"];
        let msg = err["message"].as_str().unwrap_or_default();
        return Err(Error::new(
            ErrorKind::Metadata,
            format!(
                "etcd watch at {endpoint}: {msg} (code {})",
                int(&err["grpc_code"])
            ),
        ));
    }
    let r = &v["result"];
    let header = &r["header"];
    let mut events = Vec::new();
    if let Some(list) = r["events"].as_array() {
        for e in list {
            let kind = if e["type"].as_str() == Some("DELETE") {
                EventKind::Delete
            } else {
                EventKind::Put
            };
            events.push(WatchEvent {
                kind,
                kv: key_value(&e["kv"])?,
            });
        }
    }
    Ok(WatchMessage {
        cluster_id: match &header["cluster_id"] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        },
        revision: int(&header["revision"]),
        created: r["created"].as_bool().unwrap_or(false),
        canceled: r["canceled"].as_bool().unwrap_or(false),
        compact_revision: int(&r["compact_revision"]),
        cancel_reason: r["cancel_reason"].as_str().unwrap_or_default().to_string(),
        events,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_gateway_messages() {
        let m = parse(
            br#"{"result":{"header":{"cluster_id":"12","revision":"7"},"created":true}}"#,
            "e",
        )
        .unwrap();
        assert!(m.created && m.events.is_empty());
        assert_eq!((m.cluster_id.as_str(), m.revision), ("12", 7));
        let m = parse(
            br#"{"result":{"header":{"revision":"9"},"events":[{"kv":{"key":"YQ==","value":"Yg==","mod_revision":"8"}},{"type":"DELETE","kv":{"key":"YQ==","mod_revision":"9"}}]}}"#,
            "e",
        )
        .unwrap();
        assert_eq!(m.events.len(), 2);
        assert_eq!(m.events[0].kind, EventKind::Put);
        assert_eq!(m.events[0].kv.value, b"b");
        assert_eq!(m.events[1].kind, EventKind::Delete);
        assert_eq!(m.events[1].kv.mod_revision, 9);
        assert!(parse(b"{", "e").is_err());
        assert!(parse(br#"{"error":{"grpc_code":14,"message":"x"}}"#, "e").is_err());
    }
}
