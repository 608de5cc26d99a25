//! Shared helpers for the integration tests.
#![allow(dead_code)]

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

pub fn engine() -> Engine {
    engine_with(&[])
}

pub fn engine_with(opts: &[(&str, &str)]) -> Engine {
    let mut cfg = Config::default();
    for (k, v) in opts {
        cfg.set(k, v).unwrap();
    }
    Engine::new(cfg).expect("engine starts")
}
