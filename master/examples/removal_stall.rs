//! In-process: fill N objects, then remove_all in stretches on one thread while another calls
//! Exist on one key in a loop (and a thread ticks the master as the server does); prints every
//! probe over 2 ms, every tick over 5 ms and the quantiles of the probes during the removal
//! (and checks that every object was stored and removed): no network, no Python, so
//! what it shows is the master's own share of a call's wait behind a mass removal.
//! `cargo run --release -p tidewire-master --example removal_stall -- 4000000`
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;
use tidewire::store::proto::{KeyVersion, PutItem, Reply, Request, WriteConfig};
use tidewire_master::{Master, MasterConfig};

/// The key of object `i` (64 hex characters, spread over the shards).
fn key(i: usize) -> String {
    format!("{:064x}", i as u128 * 0x9E37_79B9_7F4A_7C15)
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(4_000_000);
    // The allocator as the master binary sets it.
    tidewire_master::tune_allocator();
    let m = Arc::new(Master::new(MasterConfig::default()));
    m.handle(Request::Mount {
        client_id: 1,
        name: "seg".into(),
        base: 1 << 40,
        size: 1 << 36,
    });
    let t = Instant::now();
    for lo in (0..n).step_by(1024) {
        let items: Vec<PutItem> = (lo..(lo + 1024).min(n))
            .map(|i| PutItem {
                key: key(i),
                size: 64,
            })
            .collect();
        let r = m.handle(Request::PutStart {
            client_id: 1,
            upsert: false,
            items: items.clone(),
            config: WriteConfig {
                replica_num: 1,
                ..Default::default()
            },
        });
        let Some(Reply::Started { results, .. }) = r else {
            panic!("{r:?}")
        };
        let kv = items
            .iter()
            .zip(results)
            .map(|(it, r)| KeyVersion {
                key: it.key.clone(),
                version: r.version,
            })
            .collect();
        m.handle(Request::PutEnd {
            client_id: 1,
            items: kv,
        });
    }
    assert_eq!(m.object_count(), n, "the fill did not store every object");
    eprintln!("filled {n} in {:?}", t.elapsed());
    let t0 = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let (m2, s2) = (m.clone(), stop.clone());
    let probe = std::thread::spawn(move || {
        // (start, wait) of each probe, seconds since t0 and ms.
        let mut w = Vec::new();
        let probed = key(n / 2);
        while !s2.load(Ordering::Relaxed) {
            let t = Instant::now();
            m2.handle(Request::Exist {
                keys: vec![probed.clone()],
            });
            let d = t.elapsed().as_secs_f64() * 1e3;
            let at = (t - t0).as_secs_f64();
            if d > 2.0 {
                eprintln!("stall {d:.1} ms at {at:.3}");
            }
            w.push((at, d));
        }
        w
    });
    let (m3, s3) = (m.clone(), stop.clone());
    let ticker = std::thread::spawn(move || {
        let mut worst = 0f64;
        while !s3.load(Ordering::Relaxed) {
            std::thread::sleep(std::time::Duration::from_millis(100));
            let t = Instant::now();
            m3.tick();
            m3.handle(Request::Ping { client_id: 1 });
            let d = t.elapsed().as_secs_f64() * 1e3;
            if d > 5.0 {
                eprintln!("tick {d:.1} ms ending at {:.3}", t0.elapsed().as_secs_f64());
            }
            worst = worst.max(d);
        }
        worst
    });
    std::thread::sleep(std::time::Duration::from_millis(300));
    let t = Instant::now();
    let began = (t - t0).as_secs_f64();
    eprintln!("remove_all starts at {began:.3}");
    let (mut from, mut total, mut worst_stretch) = (0u64, 0i64, 0f64);
    loop {
        let ts = Instant::now();
        let r = m.handle(Request::RemoveAll {
            force: true,
            from: Some(from),
        });
        worst_stretch = worst_stretch.max(ts.elapsed().as_secs_f64() * 1e3);
        match r {
            Some(Reply::Removed { count, next }) => {
                total += count;
                match next {
                    Some(c) => from = c,
                    None => break,
                }
            }
            other => panic!("{other:?}"),
        }
    }
    let ended = t0.elapsed().as_secs_f64();
    assert_eq!(total as usize, n, "remove_all did not remove every object");
    eprintln!(
        "removed {total} in {:?}; worst stretch {worst_stretch:.1} ms",
        t.elapsed()
    );
    // The sweeps and trims after the removal are watched too (printed stalls), not counted below.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    stop.store(true, Ordering::Relaxed);
    let tick_worst = ticker.join().unwrap();
    // The quantiles are of the probes that started while the removal ran.
    let mut w: Vec<f64> = probe
        .join()
        .unwrap()
        .into_iter()
        .filter(|&(at, _)| (began..ended).contains(&at))
        .map(|(_, d)| d)
        .collect();
    w.sort_by(f64::total_cmp);
    eprintln!(
        "probe during remove_all: n={} p50 {:.3} p99 {:.3} p999 {:.3} max {:.3} ms; tick worst {tick_worst:.1} ms",
        w.len(),
        w[w.len() / 2],
        w[w.len() * 99 / 100],
        w[w.len() * 999 / 1000],
        w[w.len() - 1]
    );
}
