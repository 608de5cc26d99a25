//! Shared helpers for the integration tests.
#![allow(dead_code)]

pub mod etcd;
pub mod fake_verbs;
pub mod http_meta;
pub mod master;
pub mod netns;
mod ports;
pub mod proxy;

pub use ports::{free_port, restartable_port};
use tidewire::{Config, Engine, Opcode, Request};

/// `n` requests of `len` bytes each, request `i` between `local + i*len` and `remote + i*len`
/// of segment `seg`.
pub fn strided_requests(
    op: Opcode,
    local: &Buf,
    seg: i32,
    remote: u64,
    n: u64,
    len: u64,
) -> Vec<Request> {
    (0..n)
        .map(|i| Request {
            op,
            local: local.addr() + i * len,
            segment: seg,
            remote: remote + i * len,
            len,
        })
        .collect()
}

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

/// Registers each buffer with `e` as host memory its peers may read and write.
pub fn share(e: &Engine, bufs: &[&Buf]) {
    for b in bufs {
        e.register_memory(b.addr(), b.len(), "cpu:0", true).unwrap();
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

/// A raw 24-byte data-port request header (size, address, opcode byte), as a hostile or
/// hand-driven peer writes it.
#[allow(dead_code)] // not every test binary that includes `common` speaks raw frames
pub fn header(size: u64, addr: u64, op: u8) -> [u8; 24] {
    let mut h = [0u8; 24];
    h[..8].copy_from_slice(&size.to_le_bytes());
    h[8..16].copy_from_slice(&addr.to_le_bytes());
    h[16] = op;
    h
}

/// Timing-sensitive tests of one binary run one at a time.
#[allow(dead_code)] // not every test binary that includes `common` needs it
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}
