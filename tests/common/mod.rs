//! Shared helpers for the integration tests.
#![allow(dead_code)]

pub mod etcd;
pub mod netns;
pub mod proxy;

use tidewire::{Config, Engine};

/// A page-aligned heap buffer with a stable address.
pub struct Buf(pub Vec<u8>);

impl Buf {
    pub fn new(len: usize, fill: u8) -> Buf {
        Buf(vec![fill; len])
    }
    pub fn pattern(len: usize, seed: u8) -> Buf {
        Buf((0..len)
            .map(|i| {
                (i as u32)
                    .wrapping_mul(31)
                    .wrapping_add(seed as u32 * 7 + 11) as u8
            })
            .collect())
    }
    pub fn addr(&self) -> u64 {
        self.0.as_ptr() as u64
    }
    pub fn len(&self) -> u64 {
        self.0.len() as u64
    }
}

/// An engine whose peers are reached over TCP only (the same-host shortcuts off), so that tests
/// of the wire path really use the wire.
pub fn engine() -> Engine {
    engine_with(&[])
}

/// Like [`engine`], with extra options (a later `("same_host", "1")` turns the shortcut on).
pub fn engine_with(opts: &[(&str, &str)]) -> Engine {
    let mut cfg = Config::default();
    cfg.set("same_host", "0").unwrap();
    cfg.set("rdma", "off").unwrap();
    for (k, v) in opts {
        cfg.set(k, v).unwrap();
    }
    Engine::new(cfg).expect("engine starts")
}
