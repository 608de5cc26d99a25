//! etcd v3 over its JSON gateway: the client (`client.rs`: KV, leases, transactions, endpoint
//! failover), watch streams (`watch.rs`), a watch-kept read cache (`cache.rs`), leader election
//! (`election.rs`) and the fenced journal with its writer thread (`journal.rs`,
//! `journal_writer.rs`) that give the Store master its high availability.

pub mod cache;
mod client;
pub mod election;
pub mod journal;
pub mod journal_writer;
mod kv;
pub mod watch;

pub use client::*;
