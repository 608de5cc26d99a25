//! Requests to a [`Master`] driven in-process through `Master::handle` (no network), for the
//! tests of its semantics: two segments, writes, reads, removals.

use tidewire::store::proto::{
    GetResult, KeyVersion, PutItem, Reply, Request, StartResult, WriteConfig,
};
use tidewire_master::{Master, MasterConfig};

/// Bytes of each test segment.
pub const SEG: u64 = 1 << 20;

/// A master with the two segments of [`mount_two`].
pub fn master(cfg: MasterConfig) -> Master {
    let m = Master::new(cfg);
    mount_two(&m);
    m
}

/// Mounts segments "a:1" (client 1) and "b:1" (client 2), 1 MiB each.
pub fn mount_two(m: &Master) {
    for (id, name, base) in [(1, "a:1", 0x10_0000u64), (2, "b:1", 0x1000_0000)] {
        assert_eq!(
            m.handle(Request::Mount {
                client_id: id,
                name: name.into(),
                base,
                size: SEG,
            }),
            Some(Reply::Ok)
        );
    }
}

/// Starts a write of `key` (`size` bytes) as client 1.
pub fn start(m: &Master, key: &str, size: u64, upsert: bool, cfg: WriteConfig) -> StartResult {
    match m.handle(Request::PutStart {
        client_id: 1,
        upsert,
        items: vec![PutItem {
            key: key.into(),
            size,
        }],
        config: cfg,
    }) {
        Some(Reply::Started { mut results }) => results.remove(0),
        other => panic!("{other:?}"),
    }
}

/// The codes of a `Codes` reply.
pub fn codes(r: Option<Reply>) -> Vec<i32> {
    match r {
        Some(Reply::Codes { codes }) => codes,
        other => panic!("{other:?}"),
    }
}

/// Ends write `version` of `key` as client 1; its code.
pub fn end(m: &Master, key: &str, version: u64) -> i32 {
    codes(m.handle(Request::PutEnd {
        client_id: 1,
        items: vec![KeyVersion {
            key: key.into(),
            version,
        }],
    }))[0]
}

/// The client id the tests read as (a client without a segment).
pub const READER: u64 = 3;

/// Reads `key` as [`READER`].
pub fn get(m: &Master, key: &str) -> GetResult {
    get_as(m, READER, key)
}

/// Reads `key` as `client_id`.
pub fn get_as(m: &Master, client_id: u64, key: &str) -> GetResult {
    match m.handle(Request::Get {
        client_id,
        keys: vec![key.into()],
    }) {
        Some(Reply::Replicas { mut results, .. }) => results.remove(0),
        other => panic!("{other:?}"),
    }
}

/// [`READER`] is done reading version `version` of `key`.
pub fn done(m: &Master, key: &str, version: u64) {
    assert_eq!(
        m.handle(Request::ReadDone {
            client_id: READER,
            items: vec![KeyVersion {
                key: key.into(),
                version,
            }],
        }),
        None
    );
}

/// Writes `key` completely (start and end); the start's result.
pub fn put(m: &Master, key: &str, size: u64, upsert: bool) -> StartResult {
    let s = start(m, key, size, upsert, WriteConfig::default());
    assert_eq!(s.code, 0, "{key}");
    assert_eq!(end(m, key, s.version), 0);
    s
}

/// Removes `key`; its code.
pub fn remove(m: &Master, key: &str, force: bool) -> i32 {
    codes(m.handle(Request::Remove {
        keys: vec![key.into()],
        force,
    }))[0]
}

/// Revokes write `version` of `key` as client 1; its code.
pub fn revoke(m: &Master, key: &str, version: u64) -> i32 {
    codes(m.handle(Request::PutRevoke {
        client_id: 1,
        items: vec![KeyVersion {
            key: key.into(),
            version,
        }],
    }))[0]
}

/// A heartbeat of `client_id`.
pub fn ping(m: &Master, client_id: u64) {
    assert!(matches!(
        m.handle(Request::Ping { client_id }),
        Some(Reply::Pong { .. })
    ));
}
