//! KV events' admin routes: Mooncake's `GET /kv_events/status`, and tidewire's recovery routes
//! for subscribers, `GET /kv_events/snapshot` (the inventory, as of a sequence number) and
//! `GET /kv_events/replay` (recent messages by sequence number). Bodies of the recovery routes
//! are msgpack (`application/msgpack`), as the events themselves.

use super::replies::{error, json};
use super::{Admin, HttpRequest, HttpResponse};
use crate::kv_events::{KvEvents, Replay};
use rmp::encode;
use tidewire::store::proto::code;

const MSGPACK: &str = "application/msgpack";

fn write_str(out: &mut Vec<u8>, s: &str) {
    let _ = encode::write_str(out, s);
}

impl Admin {
    fn kv(&self) -> Result<&KvEvents, HttpResponse> {
        self.master
            .kv_events()
            .map(|k| &**k)
            .ok_or_else(|| error(404, code::INVALID_PARAMS, "kv events are not enabled"))
    }

    fn number(r: &HttpRequest, name: &str) -> Result<Option<u64>, HttpResponse> {
        let Some(raw) = r.param(name) else {
            return Ok(None);
        };
        std::str::from_utf8(&raw)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .map(Some)
            .ok_or_else(|| {
                error(
                    400,
                    code::INVALID_PARAMS,
                    &format!("{name} is not a number"),
                )
            })
    }

    /// `GET /kv_events/status`: Mooncake's fields (`enabled: false` and zeros when off).
    pub(super) fn kv_status(&self) -> HttpResponse {
        match self.master.kv_events() {
            Some(kv) => json(200, &kv.status_json()),
            None => json(
                200,
                &serde_json::json!({
                    "enabled": false,
                    "published_batches": 0,
                    "published_events": 0,
                    "dropped_events": 0,
                    "skipped_unparsed_keys": 0,
                    "invalid_event_hashes": 0,
                }),
            ),
        }
    }

    /// `GET /kv_events/snapshot?shard=N`: `{seq, backend_id, keys: [[key, medium], ...], next}`.
    /// `seq` is read before any shard is: every event numbered up to it is reflected in the
    /// keys, and applying the messages after it (in order) brings the keys up to date. `next`
    /// is the `shard` of the next page (nil after the last); the first page's `seq` holds for
    /// the whole listing.
    pub(super) fn kv_snapshot(&self, r: &HttpRequest) -> HttpResponse {
        let kv = match self.kv() {
            Ok(kv) => kv,
            Err(e) => return e,
        };
        let from = match Self::number(r, "shard") {
            Ok(s) => s.unwrap_or(0) as usize,
            Err(e) => return e,
        };
        let seq = kv.last_seq();
        let page = self.master.kv_inventory(from, self.opts.max_list_items);
        let bytes: usize = page.keys.iter().map(|(k, _)| k.len() + 8).sum();
        let mut out = Vec::with_capacity(bytes + 64);
        let _ = encode::write_map_len(&mut out, 4);
        write_str(&mut out, "seq");
        let _ = encode::write_uint(&mut out, seq);
        write_str(&mut out, "backend_id");
        write_str(&mut out, &kv.config().backend_id);
        write_str(&mut out, "keys");
        let _ = encode::write_array_len(&mut out, page.keys.len() as u32);
        for (k, m) in &page.keys {
            let _ = encode::write_array_len(&mut out, 2);
            write_str(&mut out, k);
            write_str(&mut out, m.as_str());
        }
        write_str(&mut out, "next");
        match page.next {
            Some(n) => {
                let _ = encode::write_uint(&mut out, n as u64);
            }
            None => {
                let _ = encode::write_nil(&mut out);
            }
        }
        HttpResponse::new(200, MSGPACK, out)
            .header("X-Tidewire-Listed", page.keys.len().to_string())
    }

    /// `GET /kv_events/replay?from=N`: `{oldest, last, batches: [[seq, payload], ...]}` with the
    /// messages from `from` on (each payload the exact bytes of the third frame), at most the
    /// listing byte cap per reply (ask again from the next number); 410 with `{oldest, last}`
    /// when the buffer no longer reaches back to `from` or events were lost after it (take the
    /// snapshot).
    pub(super) fn kv_replay(&self, r: &HttpRequest) -> HttpResponse {
        let kv = match self.kv() {
            Ok(kv) => kv,
            Err(e) => return e,
        };
        let from = match Self::number(r, "from") {
            Ok(Some(f)) => f,
            Ok(None) => return error(400, code::INVALID_PARAMS, "Missing from query parameter"),
            Err(e) => return e,
        };
        let last = kv.last_seq();
        let mut out = Vec::new();
        match kv.replay(from, self.opts.max_list_bytes) {
            Replay::Gone { oldest } => {
                let _ = encode::write_map_len(&mut out, 2);
                write_str(&mut out, "oldest");
                let _ = encode::write_uint(&mut out, oldest);
                write_str(&mut out, "last");
                let _ = encode::write_uint(&mut out, last);
                HttpResponse::new(410, MSGPACK, out)
            }
            Replay::Batches(b) => {
                let _ = encode::write_map_len(&mut out, 3);
                write_str(&mut out, "oldest");
                let _ = encode::write_uint(&mut out, from);
                write_str(&mut out, "last");
                let _ = encode::write_uint(&mut out, last.max(b.last().map_or(0, |m| m.0)));
                write_str(&mut out, "batches");
                let _ = encode::write_array_len(&mut out, b.len() as u32);
                for (seq, payload) in &b {
                    let _ = encode::write_array_len(&mut out, 2);
                    let _ = encode::write_uint(&mut out, *seq);
                    let _ = encode::write_bin(&mut out, payload);
                }
                HttpResponse::new(200, MSGPACK, out)
            }
        }
    }
}
