//! Shared helpers for the master's integration tests: requests to an in-process master, an HTTP
//! peer of its admin routes, the `tidewire-master` binary of this package as a child process,
//! and real etcd servers for the HA tests.
#![allow(dead_code)] // not every test binary that includes `common` uses every helper

#[path = "../../../tests/common/etcd.rs"]
pub mod etcd;
pub mod http_client;
pub mod master;
pub mod requests;

// The library tests' port helpers and etcd servers, the same files (one copy for both suites).
#[path = "../../../tests/common/ports.rs"]
mod ports;
pub use ports::{free_port, restartable_port};
pub mod fault;
