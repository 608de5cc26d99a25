//! The Store: a Mooncake-Store-compatible distributed KV store whose bytes move through the
//! engine (the master, the metadata service behind `tidewire-master`, is its own crate in
//! `master/`). Read top down, each file using only those below it:
//!
//! - the client: `client` (setup, mount, the heartbeat thread);
//! - one file per verb: `put`, `get`, `multi` (values in several pieces), `sessions` (get
//!   sessions, ranged reads, replica descriptors), `copying` (values copied in and out),
//!   `admin` (sizes, existence, removal), `tasks` (replica copy and move tasks, run here for
//!   the master, and replica clearing);
//! - `reads`: reading found objects from their replicas, for `get` and `sessions`;
//! - `shared`: the state every verb works on, and the [`StoreClient`] handle;
//! - what every verb uses: `keys`, `caller_memory` (a value's bytes in the caller's memory),
//!   `holds` (read holds, heartbeats, open sessions), `batch` (one engine batch, without the
//!   client state), `mem` and `alloc` (local buffers), `conn` (the master connection) and
//!   `proto` (the master protocol).

pub mod admin;
pub mod alloc;
mod batch;
pub mod caller_memory;
pub mod client;
pub mod conn;
pub mod copying;
pub mod disk;
mod disk_reads;
pub mod get;
mod holds;
pub mod keys;
pub mod mem;
pub mod multi;
mod offload;
pub mod proto;
pub mod put;
mod put_sessions;
mod reads;
pub mod segments;
pub mod sessions;
mod shared;
pub mod tasks;

pub use client::StoreConfig;
pub use proto::{WriteConfig, code};
pub use shared::StoreClient;

/// A store failure: one of Mooncake's codes ([`proto::code`]) and a detail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreError {
    /// Negative code.
    pub code: i32,
    /// Detail.
    pub message: String,
}

impl StoreError {
    /// An error.
    pub fn new(code: i32, message: impl Into<String>) -> StoreError {
        StoreError {
            code,
            message: message.into(),
        }
    }
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (code {})", self.message, self.code)
    }
}

impl std::error::Error for StoreError {}
