use std::time::Instant;
use tidewire::store::proto::{KeyVersion, PutItem, Reply, Request, WriteConfig};
use tidewire_master::{Master, MasterConfig};
fn key(i: usize) -> String {
    format!(
        "{:016x}{:048x}",
        (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
        i
    )
}
#[test]
#[ignore]
fn restore_timing() {
    let n: usize = std::env::var("N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let m = Master::new(MasterConfig::default());
    for c in 0..4u64 {
        m.handle(Request::Mount {
            client_id: c + 1,
            name: format!("a:{c}"),
            base: 0x10_0000 * (c + 1) << 20,
            size: (n as u64 * 64 / 4 + (1 << 20)),
        });
    }
    let t = Instant::now();
    for lo in (0..n).step_by(1000) {
        let hi = (lo + 1000).min(n);
        let c = (lo / 1000 % 4) as u64 + 1;
        let Some(Reply::Started { results }) = m.handle(Request::PutStart {
            client_id: c,
            upsert: false,
            items: (lo..hi)
                .map(|i| PutItem {
                    key: key(i),
                    size: 64,
                })
                .collect(),
            config: WriteConfig::default(),
        }) else {
            panic!()
        };
        let done: Vec<KeyVersion> = results
            .iter()
            .zip(lo..hi)
            .map(|(r, i)| KeyVersion {
                key: key(i),
                version: r.version,
            })
            .collect();
        m.handle(Request::PutEnd {
            client_id: c,
            items: done,
        });
    }
    eprintln!("fill {:?}", t.elapsed());
    let t = Instant::now();
    let snap = m.snapshot_json();
    eprintln!("snapshot {} bytes in {:?}", snap.len(), t.elapsed());
    let t = Instant::now();
    let recs = tidewire_master::journal_record::decode_snapshot(&snap).unwrap();
    eprintln!("decode {} in {:?}", recs.len(), t.elapsed());
    drop(recs);
    let next = Master::new(MasterConfig::default());
    let rec = tidewire::etcd::journal::Recovered {
        snapshot: Some(snap),
        records: Vec::new(),
        batches: 1,
    };
    let t = Instant::now();
    let r = next.restore(&rec).unwrap();
    eprintln!("restore {r:?} in {:?}", t.elapsed());
}
