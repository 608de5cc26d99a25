//! Entry points for the fuzz targets in `fuzz/` that reach the master: arbitrary bytes as a peer
//! sends them. Not part of the API (hidden from the docs); each function must return normally
//! for any input, which is what the fuzzer checks.

use crate::admin::{Admin, AdminOptions, HaStatus};
use crate::http::{self, HttpRequest, HttpResponse, MetadataStore};
use crate::{Master, MasterConfig};
use std::sync::{Arc, OnceLock};
use tidewire::store::proto::{KeyVersion, PutItem, Reply, Request, WriteConfig};

/// The admin routes of a master with one segment and one complete object (`k`), made once.
fn admin() -> &'static Admin {
    static ADMIN: OnceLock<Arc<Admin>> = OnceLock::new();
    ADMIN.get_or_init(|| {
        let m = Arc::new(Master::new(MasterConfig::default()));
        let mount = Request::Mount {
            client_id: 1,
            name: "seg:1".into(),
            base: 1 << 32,
            size: 1 << 30,
        };
        assert_eq!(m.handle(mount), Some(Reply::Ok));
        let start = Request::PutStart {
            client_id: 1,
            upsert: false,
            items: vec![PutItem {
                key: "k".into(),
                size: 64,
            }],
            config: WriteConfig::default(),
        };
        if let Some(Reply::Started { results }) = m.handle(start) {
            let items = vec![KeyVersion {
                key: "k".into(),
                version: results[0].version,
            }];
            m.handle(Request::PutEnd {
                client_id: 1,
                items,
            });
        }
        Admin::new(m, Arc::new(HaStatus::standalone()), AdminOptions::default())
    })
}

/// One request on the master's HTTP port as the reactor and a worker see it: the head searched
/// for its end as the bytes arrive, the request read and parsed, then answered by the metadata
/// store and by the admin routes, and each reply written. A reply's head never carries a byte
/// the peer chose that would break it (CR or LF in a header value).
pub fn http_request(data: &[u8]) {
    // The reactor: the head is looked for in prefixes that grow as bytes arrive.
    let mut want = http::fuzz_want(http::MAX_HEAD);
    // Reads of 1 to 64 bytes (each read's size taken from the data), never past what the
    // session allows.
    let mut n = 0;
    while n < data.len() {
        n = match want(&data[..n]) {
            Some(most) => {
                assert!(most > n, "a session must allow more than it holds");
                let step = 1 + usize::from(data[n] % 64);
                (n + step).min(most).min(data.len())
            }
            None => break,
        };
    }
    let _ = want(data);
    // The worker: read, parse, answer.
    let req = match http::read_request(&mut &data[..], http::MAX_HEAD) {
        Ok(req) => req,
        Err((status, m)) => {
            reply(HttpResponse::new(status, "text/plain", m.into_bytes()));
            return;
        }
    };
    check_params(&req);
    reply(MetadataStore::default().handle(&req));
    reply(admin().handle(&req));
}

/// The query parameters decode without panicking, and every byte of the query, percent-encoded,
/// decodes back to itself.
fn check_params(req: &HttpRequest) {
    for name in ["key", "keys", "segment", ""] {
        let _ = req.param(name);
    }
    let raw = req.raw_query.as_bytes();
    let encoded: String = raw.iter().map(|b| format!("%{b:02X}")).collect();
    assert_eq!(http::percent_decode_bytes(&encoded), raw);
}

fn reply(r: HttpResponse) {
    for (k, v) in &r.headers {
        assert!(
            !k.contains(['\r', '\n']) && !v.contains(['\r', '\n']),
            "{k}: {v:?}"
        );
    }
    let mut out = Vec::new();
    http::respond(&mut out, r.clone()).expect("a reply writes into memory");
    let end = out
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a reply has a head");
    assert_eq!(
        &out[end + 4..],
        &r.body[..],
        "the body follows the head as it is"
    );
}
