//! In-process: the master's put rate with KV events off and on, and the event rate the
//! publisher sustains with nothing dropped. T threads each run puts (PutStart + PutEnd of one
//! 64-byte object per request, as a client's `put`) on a fresh master for S seconds; phases
//! alternate off/on R times. With events on, the PUB socket is bound on 127.0.0.1 and a SUB
//! subscriber in this process receives every message and checks the sequence numbers.
//! No network between client and master, so what it shows is the master's own cost (a real
//! put adds an RPC round trip and the data transfer, which makes the share smaller).
//! `cargo run --release -p tidewire-master --example kv_events_rate -- [T] [S] [R] [SUB=1|0]`
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tidewire::store::proto::{KeyVersion, PutItem, Reply, Request, WriteConfig};
use tidewire_master::kv_events::{KvConfig, KvEvents};
use tidewire_master::{Master, MasterConfig};

fn put(m: &Master, key: String) {
    let items = vec![PutItem { key, size: 64 }];
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
    m.handle(Request::PutEnd {
        client_id: 1,
        items: vec![KeyVersion {
            key: items[0].key.clone(),
            version: results[0].version,
        }],
    });
}

struct Phase {
    puts_per_s: f64,
    events_per_s: f64,
    dropped: u64,
    received: u64,
    gaps: u64,
}

fn phase(
    threads: usize,
    secs: f64,
    events: bool,
    port: u16,
    round: usize,
    subscribe: bool,
) -> Phase {
    let m = Arc::new(Master::new(MasterConfig::default()));
    m.handle(Request::Mount {
        client_id: 1,
        name: "seg".into(),
        base: 1 << 40,
        size: 1 << 38,
    });
    let endpoint = format!("tcp://127.0.0.1:{port}");
    let sub_stop = Arc::new(AtomicBool::new(false));
    let received = Arc::new(AtomicU64::new(0));
    let gaps = Arc::new(AtomicU64::new(0));
    let mut sub = None;
    let kv = events.then(|| {
        let kv = KvEvents::new(KvConfig {
            bind_endpoint: endpoint.clone(),
            backend_id: "bench".into(),
            ..KvConfig::default()
        });
        kv.start().expect("bind");
        m.enable_kv_events(kv.clone());
        if !subscribe {
            return kv;
        }
        let ctx = zmq::Context::new();
        let s = ctx.socket(zmq::SUB).unwrap();
        s.set_subscribe(b"").unwrap();
        s.set_rcvhwm(0).unwrap();
        s.set_rcvtimeo(200).unwrap();
        s.connect(&endpoint).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let (stop, recv, gaps) = (sub_stop.clone(), received.clone(), gaps.clone());
        sub = Some(std::thread::spawn(move || {
            let _ctx = ctx;
            let mut last = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let Ok(frames) = s.recv_multipart(0) else {
                    continue;
                };
                let seq = u64::from_be_bytes(frames[1][..8].try_into().unwrap());
                if seq != last + 1 {
                    gaps.fetch_add(1, Ordering::Relaxed);
                }
                last = seq;
                recv.fetch_add(1, Ordering::Relaxed);
            }
        }));
        kv
    });
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let t0 = Instant::now();
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let (m, stop, done) = (m.clone(), stop.clone(), done.clone());
            std::thread::spawn(move || {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    for _ in 0..64 {
                        put(&m, format!("r{round}/t{t}/{i:016x}"));
                        i += 1;
                    }
                }
                done.fetch_add(i, Ordering::Relaxed);
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs_f64(secs));
    stop.store(true, Ordering::Relaxed);
    workers.into_iter().for_each(|w| w.join().unwrap());
    let elapsed = t0.elapsed().as_secs_f64();
    let puts = done.load(Ordering::Relaxed);
    let mut out = Phase {
        puts_per_s: puts as f64 / elapsed,
        events_per_s: 0.0,
        dropped: 0,
        received: 0,
        gaps: 0,
    };
    if let Some(kv) = kv {
        // Wait for the publisher to send what is queued and the subscriber to get it.
        let deadline = Instant::now() + Duration::from_secs(30);
        while kv.stats.published_events.load(Ordering::Relaxed)
            + kv.stats.dropped_events.load(Ordering::Relaxed)
            < puts
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        let sent_at = t0.elapsed().as_secs_f64();
        while subscribe
            && received.load(Ordering::Relaxed) < kv.last_seq()
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        sub_stop.store(true, Ordering::Relaxed);
        if let Some(s) = sub {
            s.join().unwrap();
        }
        out.events_per_s = kv.stats.published_events.load(Ordering::Relaxed) as f64 / sent_at;
        out.dropped = kv.stats.dropped_events.load(Ordering::Relaxed);
        out.received = received.load(Ordering::Relaxed);
        out.gaps = gaps.load(Ordering::Relaxed);
        if subscribe && out.received != kv.last_seq() {
            println!(
                "  the subscriber got {} of {} sequence numbers",
                out.received,
                kv.last_seq()
            );
        }
    }
    out
}

fn main() {
    tidewire_master::tune_allocator();
    let arg = |i: usize, d: f64| {
        std::env::args()
            .nth(i)
            .and_then(|s| s.parse().ok())
            .unwrap_or(d)
    };
    let threads = arg(1, 2.0) as usize;
    let secs = arg(2, 3.0);
    let rounds = arg(3, 3.0) as usize;
    // 0: no subscriber (the PUB socket discards), to see the publisher's own cost.
    let subscribe = arg(4, 1.0) != 0.0;
    // A fresh port per phase: a publisher keeps its socket for the process's life.
    let port = || {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let (mut off, mut on) = (Vec::new(), Vec::new());
    for r in 0..rounds {
        let a = phase(threads, secs, false, port(), 2 * r, subscribe);
        println!("round {r} off: {:.0} puts/s", a.puts_per_s);
        off.push(a.puts_per_s);
        let b = phase(threads, secs, true, port(), 2 * r + 1, subscribe);
        println!(
            "round {r} on:  {:.0} puts/s, {:.0} events/s published, dropped {}, messages received {} (gaps {})",
            b.puts_per_s, b.events_per_s, b.dropped, b.received, b.gaps
        );
        on.push(b.puts_per_s);
    }
    let med = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (a, b) = (med(&mut off), med(&mut on));
    println!(
        "median: off {a:.0} puts/s, on {b:.0} puts/s ({:+.1} %)",
        (b / a - 1.0) * 100.0
    );
}
