//! The master gives memory back to the OS after a mass removal (its own test binary, so no
//! other test allocates in this process meanwhile).

use tidewire::store::proto::{KeyVersion, PutItem, Reply, Request, WriteConfig};
use tidewire_master::{Master, MasterConfig};

fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<u64>()
        .unwrap()
        * 1024
}

fn key(i: usize) -> String {
    format!(
        "{:016x}{:048x}",
        (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
        i
    )
}

#[test]
fn memory_goes_back_after_remove_all() {
    const N: usize = 400 * 1024;
    let m = Master::new(MasterConfig::default());
    m.handle(Request::Mount {
        client_id: 1,
        name: "a:1".into(),
        base: 0x10_0000,
        size: N as u64 * 128,
    });
    let before = rss();
    for lo in (0..N).step_by(1024) {
        let items: Vec<PutItem> = (lo..lo + 1024)
            .map(|i| PutItem {
                key: key(i),
                size: 64,
            })
            .collect();
        let Some(Reply::Started { results }) = m.handle(Request::PutStart {
            client_id: 1,
            upsert: false,
            items,
            config: WriteConfig::default(),
        }) else {
            panic!("put_start")
        };
        assert!(results.iter().all(|r| r.code == 0));
        let done = results
            .iter()
            .zip(lo..)
            .map(|(r, i)| KeyVersion {
                key: key(i),
                version: r.version,
            })
            .collect();
        let Some(Reply::Codes { codes }) = m.handle(Request::PutEnd {
            client_id: 1,
            items: done,
        }) else {
            panic!("put_end")
        };
        assert!(codes.iter().all(|&c| c == 0));
    }
    assert_eq!(m.object_count(), N);
    let full = rss();
    let grown = full.saturating_sub(before);
    assert!(
        grown > 40 << 20,
        "{N} objects should take tens of MiB: grew {grown}"
    );
    assert_eq!(
        m.handle(Request::RemoveAll {
            force: true,
            from: None
        }),
        Some(Reply::Count { count: N as i64 })
    );
    // The first sweep sees the removals, the next one (no more since) gives memory back.
    m.sweep();
    m.sweep();
    let after = rss();
    eprintln!(
        "RSS: {} MiB empty, {} MiB with {N} objects, {} MiB after remove_all",
        before >> 20,
        full >> 20,
        after >> 20
    );
    assert!(
        after < before + grown / 5,
        "after remove_all the RSS is {after}, from {before} empty and {full} full"
    );
}
