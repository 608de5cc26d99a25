//! The metadata store behind a `metadata` connection string, as Mooncake reads it:
//! `P2PHANDSHAKE` (none), `http://...` (the HTTP protocol), `etcd://...` or a bare endpoint
//! list (etcd). `https://` and `redis://` are refused with a clear error.

pub mod etcd;
pub mod http;

use crate::error::{Error, ErrorKind, Result};
use etcd::EtcdStore;
use http::HttpStore;
use std::time::Duration;

/// Which store a connection string names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    /// No store: descriptors are exchanged peer to peer.
    P2p,
    /// Mooncake's HTTP metadata protocol.
    Http,
    /// etcd through its v3 JSON gateway.
    Etcd,
}

/// Classifies and checks a connection string without contacting anything.
pub fn parse_kind(conn: &str) -> Result<StoreKind> {
    let conn = conn.trim();
    if conn == crate::metadata::P2PHANDSHAKE {
        return Ok(StoreKind::P2p);
    }
    // A list whose later endpoints carry `http://` is still a list (the scheme is the first
    // endpoint's).
    let scheme = conn
        .split_once("://")
        .map(|(s, _)| s)
        .filter(|s| !s.contains([',', ';']));
    match scheme {
        Some("http") | Some("https") => {
            HttpStore::new(conn, Duration::from_secs(1))?;
            Ok(StoreKind::Http)
        }
        Some("etcd") | None => {
            crate::etcd::parse_endpoints(conn)?;
            Ok(StoreKind::Etcd)
        }
        Some(other) => Err(Error::new(
            ErrorKind::Unsupported,
            format!(
                "metadata {conn:?}: {other}:// is not supported; use P2PHANDSHAKE, http://host:port/path or etcd://host:port[;host:port...]"
            ),
        )),
    }
}

/// An open metadata store.
pub enum MetadataStore {
    /// HTTP metadata server.
    Http(HttpStore),
    /// etcd cluster.
    Etcd(EtcdStore),
}

impl MetadataStore {
    /// Opens the store `conn` names (never P2P). `deadline` bounds each call; `prefix` is the
    /// key prefix whose reads an etcd store caches. Fails when an etcd cluster cannot be
    /// reached, naming its endpoints.
    pub fn open(conn: &str, deadline: Duration, prefix: &str) -> Result<MetadataStore> {
        match parse_kind(conn)? {
            StoreKind::Http => Ok(MetadataStore::Http(HttpStore::new(conn.trim(), deadline)?)),
            StoreKind::Etcd => Ok(MetadataStore::Etcd(EtcdStore::open(
                conn, deadline, prefix,
            )?)),
            StoreKind::P2p => Err(Error::new(
                ErrorKind::InvalidArgument,
                "P2PHANDSHAKE has no metadata store",
            )),
        }
    }

    /// Reads a key: `Ok(None)` when it does not exist.
    pub fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        match self {
            MetadataStore::Http(s) => s.get(key),
            MetadataStore::Etcd(s) => s.get(key),
        }
    }

    /// Writes a key (on etcd: on this engine's lease).
    pub fn put(&self, key: &str, json: &str) -> Result<()> {
        match self {
            MetadataStore::Http(s) => s.put(key, json),
            MetadataStore::Etcd(s) => s.put(key, json),
        }
    }

    /// Deletes a key.
    pub fn delete(&self, key: &str) -> Result<()> {
        match self {
            MetadataStore::Http(s) => s.delete(key),
            MetadataStore::Etcd(s) => s.delete(key),
        }
    }

    /// Whether `key` is known to have changed since this store last read it (etcd's watch);
    /// always false over HTTP, which cannot tell.
    pub fn is_stale(&self, key: &str) -> bool {
        match self {
            MetadataStore::Http(_) => false,
            MetadataStore::Etcd(s) => s.is_stale(key),
        }
    }

    /// Stops background work and releases the lease (etcd); nothing to do over HTTP.
    pub fn close(&self) {
        if let MetadataStore::Etcd(s) = self {
            s.close();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_as_mooncake_reads_them() {
        assert_eq!(parse_kind("P2PHANDSHAKE").unwrap(), StoreKind::P2p);
        assert_eq!(parse_kind("http://h:1/metadata").unwrap(), StoreKind::Http);
        for etcd in [
            "h:2379",
            "etcd://h:2379",
            "etcd://a:1;b:2",
            "a:1,http://b:2",
        ] {
            assert_eq!(parse_kind(etcd).unwrap(), StoreKind::Etcd, "{etcd}");
        }
        assert_eq!(
            parse_kind("https://h/m").unwrap_err().kind(),
            ErrorKind::Unsupported
        );
        assert_eq!(
            parse_kind("redis://h:6379").unwrap_err().kind(),
            ErrorKind::Unsupported
        );
        assert!(parse_kind("etcd://").is_err());
        assert!(parse_kind("").is_err());
    }
}
