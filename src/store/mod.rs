//! The Store: a Mooncake-Store-compatible distributed KV store whose bytes move through the
//! engine. `proto` is the master RPC protocol (the master itself, the metadata
//! service behind `tidewire-master`, is its own crate in `master/`), `client` the library side (setup, mount, heartbeat), `flows` its
//! put/get/remove paths, `multi` the values in several pieces and `sessions` the get sessions
//! and replica descriptors.

pub mod admin;
pub mod alloc;
mod batch;
pub mod client;
pub mod conn;
pub mod copying;
pub mod flows;
mod holds;
pub mod mem;
pub mod multi;
pub mod proto;
mod reads;
pub mod sessions;

pub use client::{StoreClient, StoreConfig};
pub use proto::{WriteConfig, code};

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
