//! tidewire: a KV-cache transfer engine for LLM inference, compatible with the Mooncake Transfer
//! Engine on the wire (TCP data v1/v2, P2P handshake, HTTP metadata) and at the C ABI.
//!
//! The core is synchronous: named worker threads, channels (a park-only one on the TCP lanes,
//! crossbeam elsewhere) and atomics, no async runtime. [`engine::Engine`] is the entry point;
//! `ffi` holds the C APIs and is the only module that touches pointers handed in by C callers;
//! `gpu` and `transport::rdma` hold pointers to CUDA and verbs objects they created themselves.
//! See `src/README.md` for the layers.

#[macro_use]
pub mod log;
pub mod addr;
pub mod auth;
pub mod completion;
pub mod engine;
pub mod error;
pub mod etcd;
mod ffi;
pub mod gpu;
pub mod http_client;
pub mod memory;
pub mod metadata;
pub mod net;
pub mod store;
pub mod transport;

pub(crate) mod cpus;
#[doc(hidden)]
pub mod fuzzing;
pub(crate) mod guard;
#[cfg(all(test, loom))]
mod loom_models;
pub mod sync;

pub use engine::{Config, Engine, Request};
pub use error::{Error, ErrorKind, Result};
pub use transport::Opcode;

/// Crate version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
