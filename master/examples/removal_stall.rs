//! In-process: fill N objects, then remove_all in stretches on one thread while another calls
//! Exist on one key in a loop (and a thread ticks the master as the server does); prints every
//! probe over 2 ms, every tick over 5 ms and the probe's quantiles: no network, no Python, so
//! what it shows is the master's own share of a call's wait behind a mass removal.
//! `cargo run --release -p tidewire-master --example removal_stall -- 4000000`
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;
use tidewire::store::proto::{KeyVersion, PutItem, Reply, Request, WriteConfig};
use tidewire_master::{Master, MasterConfig};

static T0: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(4_000_000);
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
                key: format!("{:064x}", i as u128 * 0x9E37_79B9_7F4A_7C15),
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
    eprintln!("filled {} in {:?}", m.object_count(), t.elapsed());
    T0.set(Instant::now()).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let (m2, s2) = (m.clone(), stop.clone());
    let probe = std::thread::spawn(move || {
        let mut w = Vec::new();
        let t0 = *T0.get().unwrap();
        while !s2.load(Ordering::Relaxed) {
            let t = Instant::now();
            m2.handle(Request::Exist {
                keys: vec![format!("{:064x}", 7u128)],
            });
            let d = t.elapsed().as_secs_f64() * 1e3;
            if d > 2.0 {
                eprintln!("stall {d:.1} ms at {:.3}", (t - t0).as_secs_f64());
            }
            w.push(d);
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
                eprintln!(
                    "tick {d:.1} ms ending at {:.3}",
                    (Instant::now() - *T0.get().unwrap()).as_secs_f64()
                );
            }
            worst = worst.max(d);
        }
        worst
    });
    std::thread::sleep(std::time::Duration::from_millis(300));
    let t = Instant::now();
    eprintln!(
        "remove_all starts at {:.3}",
        (t - *T0.get().unwrap()).as_secs_f64()
    );
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
    eprintln!(
        "removed {total} in {:?}; worst stretch {worst_stretch:.1} ms",
        t.elapsed()
    );
    std::thread::sleep(std::time::Duration::from_millis(1500));
    stop.store(true, Ordering::Relaxed);
    let mut w = probe.join().unwrap();
    let tick_worst = ticker.join().unwrap();
    w.sort_by(f64::total_cmp);
    eprintln!(
        "probe n={} p50 {:.3} p99 {:.3} p999 {:.3} max {:.3} ms; tick worst {tick_worst:.1} ms",
        w.len(),
        w[w.len() / 2],
        w[w.len() * 99 / 100],
        w[w.len() * 999 / 1000],
        w[w.len() - 1]
    );
}
