//! Segment metadata: descriptors (Mooncake's JSON schema, `descriptor.rs`), the RPC/handshake
//! framing and client (`rpc.rs`) and its server (`server.rs`), and the metadata service a
//! connection string names (`service/`: Mooncake's HTTP protocol, or etcd through `crate::etcd`).

pub mod descriptor;
pub mod rpc;
pub mod server;
pub mod service;

pub use descriptor::{BufferDesc, SegmentDesc};

pub use crate::addr::{first_lan_ipv4, join_host_port, parse_host_port, resolve};

/// Metadata mode name for peer-to-peer descriptor exchange (no external service).
pub const P2PHANDSHAKE: &str = "P2PHANDSHAKE";

/// Mooncake's default handshake port when a name carries none (`MC_HANDSHAKE_PORT`).
pub const DEFAULT_HANDSHAKE_PORT: u16 = 12001;
