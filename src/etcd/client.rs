//! A synchronous etcd v3 client over the JSON gateway (HTTP/1.1 `POST /v3/...`, keys and values
//! in standard base64, int64 fields as strings). Each call has a deadline and a bounded response;
//! a call that cannot reach an endpoint (or that the member answers with a 5xx) moves on to the
//! next endpoint of the list, and the client keeps using the one that answered.
//!
//! Retries make writes at-least-once: a put retried on another member is harmless, and a
//! [`EtcdClient::put_if_absent`] whose first try landed reports `succeeded == false` with the
//! caller's own value as the existing one, which the caller can recognise.

use super::kv::bytes;
pub use super::kv::{KeyValue, b64, int, key_value, prefix_end};
use super::watch::WatchStream;
use crate::error::{Error, ErrorKind, Result};
use crate::http_client as web;
use serde_json::{Value, json};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Default etcd client port, used when an endpoint names none.
pub const DEFAULT_PORT: u16 = 2379;

/// A range answer: the pairs and the store revision it was read at.
#[derive(Debug, Clone, Default)]
pub struct Range {
    /// Pairs found (at most the limit asked for).
    pub kvs: Vec<KeyValue>,
    /// How many keys matched in all.
    pub count: i64,
    /// Store revision of the read.
    pub revision: i64,
}

/// The outcome of [`EtcdClient::put_if_absent`].
#[derive(Debug, Clone)]
pub struct CreateOutcome {
    /// True when the key did not exist and was written.
    pub succeeded: bool,
    /// Store revision after the transaction.
    pub revision: i64,
    /// The pair already there when `succeeded` is false.
    pub existing: Option<KeyValue>,
}

/// A granted lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    /// Lease id.
    pub id: i64,
    /// Granted time to live, seconds.
    pub ttl: i64,
}

/// A client for one etcd cluster, given as a list of endpoints. Thread-safe; calls may run
/// concurrently (the agent pools connections).
pub struct EtcdClient {
    endpoints: Vec<String>,
    current: AtomicUsize,
    agent: ureq::Agent,
    deadline: Duration,
}

/// Parses an etcd connection string as Mooncake does: the part after an optional `etcd://`,
/// `,` and `;` both separate endpoints, and each is `host:port` or `http://host:port`
/// (the port defaults to 2379). Returns base URLs (`http://host:port`).
pub fn parse_endpoints(spec: &str) -> Result<Vec<String>> {
    let spec = spec.trim();
    let list = spec.strip_prefix("etcd://").unwrap_or(spec);
    let mut out = Vec::new();
    for raw in list
        .split([',', ';'])
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        if raw.starts_with("https://") {
            return Err(Error::new(
                ErrorKind::Unsupported,
                format!("etcd endpoint {raw:?}: TLS is not included in this build; use http://"),
            ));
        }
        let hp = raw
            .strip_prefix("http://")
            .unwrap_or(raw)
            .trim_end_matches('/');
        if hp.contains("://") || hp.contains('/') {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("etcd endpoint {raw:?} is not host:port or http://host:port"),
            ));
        }
        let (host, port) = crate::addr::parse_host_port(hp, DEFAULT_PORT)?;
        out.push(format!(
            "http://{}",
            crate::addr::join_host_port(&host, port)
        ));
    }
    if out.is_empty() {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            format!("no etcd endpoint in {spec:?}"),
        ));
    }
    Ok(out)
}

/// True when etcd answered that the lease does not exist (expired, revoked, or a new cluster).
pub fn is_lease_not_found(e: &Error) -> bool {
    e.message().contains("lease not found")
}

/// An error etcd itself returned (HTTP 4xx with a gRPC code), as opposed to an unreachable one.
fn etcd_error(path: &str, status: u16, body: &[u8]) -> Error {
    let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let msg = v["message"]
        .as_str()
        .or(v["error"].as_str())
        .map(str::to_string)
        .unwrap_or_else(|| String::from_utf8_lossy(body).chars().take(200).collect());
    let kind = match int(&v["code"]) {
        3 => ErrorKind::InvalidArgument,
        _ => ErrorKind::Metadata,
    };
    Error::new(kind, format!("etcd {path}: {msg} (HTTP {status})"))
}

impl EtcdClient {
    /// A client for `spec` (see [`parse_endpoints`]); each call ends within `deadline` per
    /// endpoint tried. Nothing is contacted yet.
    pub fn new(spec: &str, deadline: Duration) -> Result<EtcdClient> {
        Ok(EtcdClient {
            endpoints: parse_endpoints(spec)?,
            current: AtomicUsize::new(0),
            agent: web::agent(deadline),
            deadline,
        })
    }

    /// The endpoints, as base URLs.
    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    /// The endpoint list for messages: `[http://a:1, http://b:2]`.
    pub fn endpoint_list(&self) -> String {
        format!("[{}]", self.endpoints.join(", "))
    }

    /// Per-call deadline.
    pub fn deadline(&self) -> Duration {
        self.deadline
    }

    /// POSTs `body` to `path` on the current endpoint, moving on to the next ones when it is
    /// unreachable or unavailable. Returns the decoded JSON answer.
    pub fn call(&self, path: &str, body: &Value) -> Result<Value> {
        let payload = body.to_string();
        let n = self.endpoints.len();
        let start = self.current.load(Ordering::Relaxed) % n;
        let mut failures = Vec::new();
        for i in 0..n {
            let idx = (start + i) % n;
            let url = format!("{}{path}", self.endpoints[idx]);
            let sent = self
                .agent
                .post(&url)
                .header("Content-Type", "application/json")
                .send(payload.as_bytes());
            let mut resp = match sent {
                Ok(r) => r,
                Err(e) => {
                    failures.push(format!("{}: {}", self.endpoints[idx], web::describe(&e)));
                    if web::is_transport(&e) {
                        continue;
                    }
                    break;
                }
            };
            let status = resp.status().as_u16();
            let raw = match web::read_body(&mut resp) {
                Ok(b) => b,
                Err(m) => {
                    failures.push(format!("{}: {m}", self.endpoints[idx]));
                    continue;
                }
            };
            if status >= 500 {
                failures.push(format!(
                    "{}: HTTP {status} {}",
                    self.endpoints[idx],
                    String::from_utf8_lossy(&raw)
                        .chars()
                        .take(200)
                        .collect::<String>()
                ));
                continue;
            }
            self.current.store(idx, Ordering::Relaxed);
            if status != 200 {
                return Err(etcd_error(path, status, &raw));
            }
            return serde_json::from_slice(&raw).map_err(|e| {
                Error::new(
                    ErrorKind::Protocol,
                    format!("etcd {path}: bad JSON answer: {e}"),
                )
            });
        }
        Err(Error::new(
            ErrorKind::Metadata,
            format!(
                "etcd unreachable at {} ({path}): {}",
                self.endpoint_list(),
                failures.join("; ")
            ),
        ))
    }

    /// Writes `key = value`, on `lease` when it is not 0. Returns the new store revision.
    pub fn put(&self, key: &[u8], value: &[u8], lease: i64) -> Result<i64> {
        let mut req = json!({"key": b64(key), "value": b64(value)});
        if lease != 0 {
            req["lease"] = json!(lease.to_string());
        }
        let v = self.call("/v3/kv/put", &req)?;
        Ok(int(&v["header"]["revision"]))
    }

    /// Reads keys in `[key, range_end)` (`range_end` empty = just `key`), at most `limit`
    /// (0 = no limit).
    pub fn range(&self, key: &[u8], range_end: &[u8], limit: i64) -> Result<Range> {
        let mut req = json!({"key": b64(key)});
        if !range_end.is_empty() {
            req["range_end"] = json!(b64(range_end));
        }
        if limit > 0 {
            req["limit"] = json!(limit.to_string());
        }
        let v = self.call("/v3/kv/range", &req)?;
        let kvs = match v["kvs"].as_array() {
            Some(a) => a.iter().map(key_value).collect::<Result<Vec<_>>>()?,
            None => Vec::new(),
        };
        Ok(Range {
            count: int(&v["count"]),
            revision: int(&v["header"]["revision"]),
            kvs,
        })
    }

    /// Reads one key: the pair (if any) and the store revision of the read.
    pub fn get(&self, key: &[u8]) -> Result<(Option<KeyValue>, i64)> {
        let r = self.range(key, b"", 0)?;
        Ok((r.kvs.into_iter().next(), r.revision))
    }

    /// Every key starting with `prefix`.
    pub fn get_prefix(&self, prefix: &[u8]) -> Result<Range> {
        self.range(prefix, &prefix_end(prefix), 0)
    }

    /// Deletes `[key, range_end)` (`range_end` empty = just `key`); returns how many went.
    pub fn delete_range(&self, key: &[u8], range_end: &[u8]) -> Result<i64> {
        let mut req = json!({"key": b64(key)});
        if !range_end.is_empty() {
            req["range_end"] = json!(b64(range_end));
        }
        let v = self.call("/v3/kv/deleterange", &req)?;
        Ok(int(&v["deleted"]))
    }

    /// Compacts etcd's history up to `revision`: older versions of every key are dropped and
    /// their space is reused (the database file does not shrink without a defragmentation). A
    /// revision etcd already compacted past counts as done.
    pub fn compact(&self, revision: i64) -> Result<()> {
        let req = json!({"revision": revision.to_string()});
        match self.call("/v3/kv/compaction", &req) {
            Err(e) if e.message().contains("compacted") => Ok(()),
            r => r.map(|_| ()),
        }
    }

    /// Deletes one key; returns whether it existed.
    pub fn delete(&self, key: &[u8]) -> Result<bool> {
        Ok(self.delete_range(key, b"")? > 0)
    }

    /// Writes `key = value` (on `lease` when not 0) only if the key does not exist, in one
    /// transaction; otherwise returns the pair that is there.
    pub fn put_if_absent(&self, key: &[u8], value: &[u8], lease: i64) -> Result<CreateOutcome> {
        let mut put = json!({"key": b64(key), "value": b64(value)});
        if lease != 0 {
            put["lease"] = json!(lease.to_string());
        }
        let req = json!({
            "compare": [{"key": b64(key), "target": "CREATE", "result": "EQUAL", "create_revision": "0"}],
            "success": [{"request_put": put}],
            "failure": [{"request_range": {"key": b64(key)}}],
        });
        let v = self.call("/v3/kv/txn", &req)?;
        let succeeded = v["succeeded"].as_bool().unwrap_or(false);
        let existing = if succeeded {
            None
        } else {
            match v["responses"][0]["response_range"]["kvs"][0] {
                Value::Null => None,
                ref kv => Some(key_value(kv)?),
            }
        };
        Ok(CreateOutcome {
            succeeded,
            revision: int(&v["header"]["revision"]),
            existing,
        })
    }

    /// Grants a lease of `ttl` seconds.
    pub fn lease_grant(&self, ttl: i64) -> Result<Lease> {
        let v = self.call("/v3/lease/grant", &json!({"TTL": ttl.to_string()}))?;
        let lease = Lease {
            id: int(&v["ID"]),
            ttl: int(&v["TTL"]),
        };
        if lease.id == 0 || lease.ttl <= 0 {
            let why = v["error"].as_str().unwrap_or("no lease in the answer");
            return Err(Error::new(
                ErrorKind::Metadata,
                format!("etcd lease grant: {why}"),
            ));
        }
        Ok(lease)
    }

    /// Renews a lease once. `Ok(Some(ttl))` while it lives, `Ok(None)` when etcd no longer
    /// knows it (expired or revoked).
    pub fn lease_keepalive(&self, id: i64) -> Result<Option<i64>> {
        let v = self.call("/v3/lease/keepalive", &json!({"ID": id.to_string()}))?;
        let ttl = int(&v["result"]["TTL"]);
        Ok((ttl > 0).then_some(ttl))
    }

    /// Remaining time to live of a lease (`None` when unknown) and its keys.
    pub fn lease_time_to_live(&self, id: i64) -> Result<(Option<i64>, Vec<Vec<u8>>)> {
        let v = self.call(
            "/v3/lease/timetolive",
            &json!({"ID": id.to_string(), "keys": true}),
        )?;
        let ttl = int(&v["TTL"]);
        let keys = match v["keys"].as_array() {
            Some(a) => a.iter().map(bytes).collect::<Result<Vec<_>>>()?,
            None => Vec::new(),
        };
        Ok(((ttl > 0).then_some(ttl), keys))
    }

    /// Revokes a lease, deleting its keys at once. An unknown lease is not an error.
    pub fn lease_revoke(&self, id: i64) -> Result<()> {
        match self.call("/v3/lease/revoke", &json!({"ID": id.to_string()})) {
            Err(e) if is_lease_not_found(&e) => Ok(()),
            other => other.map(|_| ()),
        }
    }

    /// Opens a watch on `[key, range_end)` from `start_revision` (0 = from now). The stream
    /// yields messages until `window` has passed since it opened, then ends; re-open from the
    /// last revision seen + 1 to miss nothing.
    pub fn watch(
        &self,
        key: &[u8],
        range_end: &[u8],
        start_revision: i64,
        window: Duration,
    ) -> Result<WatchStream> {
        let mut create = json!({"key": b64(key), "prev_kv": false});
        if !range_end.is_empty() {
            create["range_end"] = json!(b64(range_end));
        }
        if start_revision > 0 {
            create["start_revision"] = json!(start_revision.to_string());
        }
        let body = json!({"create_request": create}).to_string();
        let agent = web::stream_agent(self.deadline, window);
        let n = self.endpoints.len();
        let start = self.current.load(Ordering::Relaxed) % n;
        let mut failures = Vec::new();
        for i in 0..n {
            let idx = (start + i) % n;
            let url = format!("{}/v3/watch", self.endpoints[idx]);
            match agent
                .post(&url)
                .header("Content-Type", "application/json")
                .send(body.as_bytes())
            {
                Ok(resp) if resp.status().as_u16() == 200 => {
                    return Ok(WatchStream::new(resp, self.endpoints[idx].clone()));
                }
                Ok(mut resp) => {
                    let status = resp.status().as_u16();
                    let raw = web::read_body(&mut resp).unwrap_or_default();
                    if status < 500 {
                        return Err(etcd_error("/v3/watch", status, &raw));
                    }
                    failures.push(format!("{}: HTTP {status}", self.endpoints[idx]));
                }
                Err(e) => failures.push(format!("{}: {}", self.endpoints[idx], web::describe(&e))),
            }
        }
        Err(Error::new(
            ErrorKind::Metadata,
            format!(
                "etcd unreachable at {} (/v3/watch): {}",
                self.endpoint_list(),
                failures.join("; ")
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_forms() {
        let one = vec!["http://127.0.0.1:2379".to_string()];
        assert_eq!(parse_endpoints("127.0.0.1:2379").unwrap(), one);
        assert_eq!(parse_endpoints("etcd://127.0.0.1:2379").unwrap(), one);
        assert_eq!(parse_endpoints("http://127.0.0.1:2379/").unwrap(), one);
        assert_eq!(parse_endpoints("127.0.0.1").unwrap(), one);
        assert_eq!(
            parse_endpoints("etcd://a:1;http://b:2, c:3,").unwrap(),
            vec!["http://a:1", "http://b:2", "http://c:3"]
        );
        assert_eq!(parse_endpoints("[::1]:5").unwrap(), vec!["http://[::1]:5"]);
        for bad in [
            "",
            "etcd://",
            " ; , ",
            "a:99999",
            "https://a:1",
            "http://a:1/x",
            "x://a:1",
        ] {
            assert!(parse_endpoints(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn prefix_ends() {
        assert_eq!(prefix_end(b"mooncake/"), b"mooncake0".to_vec());
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_end(b"\xff"), vec![0]);
        assert_eq!(int(&json!("17")), 17);
        assert_eq!(int(&json!(5)), 5);
        assert_eq!(int(&Value::Null), 0);
    }
}
