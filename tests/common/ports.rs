//! Ports for test servers on 127.0.0.1. Shared with the master's tests
//! (`master/tests/common/mod.rs` includes this file), so both suites pick ports one way.

use std::net::TcpListener;

/// A 127.0.0.1 port free a moment ago (bound, then released).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A 127.0.0.1 port free a moment ago, for a server a test stops and starts again on the same
/// port. It lies below the kernel's ephemeral range: a port from [`free_port`] could meanwhile
/// become the source port of some outgoing connection (the suite makes thousands), and the
/// restarted server would then fail to bind with "Address already in use".
pub fn restartable_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let range: Vec<u32> = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .map(|s| {
            s.split_whitespace()
                .filter_map(|v| v.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    let (eph_low, eph_high) = match range[..] {
        [l, h] => (l, h),
        _ => (32768, 60999),
    };
    // Below the ephemeral range where there is room, above it otherwise.
    let (low, high) = if eph_low >= 11_000 {
        (10_000u32, eph_low)
    } else {
        (eph_high.saturating_add(1).min(64_000), 65_535)
    };
    let span = high - low;
    let start = std::process::id().wrapping_mul(7919) % span;
    for _ in 0..span.min(2000) {
        let step = NEXT.fetch_add(1, Ordering::Relaxed).wrapping_mul(131);
        let port = (low + (start + step) % span) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in {low}..{high}");
}
