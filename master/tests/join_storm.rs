//! The master's fault model, part one: a join storm (Mooncake RFC #4181's scenario, scaled to a
//! CI run). Four clients hold many objects and then only send their heartbeats, with a short
//! `--client_ttl`; twelve clients join at once and hammer the master with puts, gets and exist
//! calls; then a `remove_all` of everything. No client may be declared dead (suspended or
//! dropped), the idle clients' segments keep every object until the removal, and a probe that
//! pings every 100 ms never waits long. `TW_STORM_OBJECTS` and `TW_STORM_SECS` change the scale.

mod common;
use common::fault::{MasterProc, check, client, fill, key, value};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tidewire::store::{StoreClient, WriteConfig, code};

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

const LEN: usize = 64;
const IDLE: usize = 4;
const JOINING: usize = 12;

/// One joining client's loop until `stop`: upserts of 16 keys of its own (a rolling set),
/// reads of them back, and exist calls on the idle clients' objects. Counts its operations.
fn hammer(c: &StoreClient, id: usize, objects: usize, stop: &AtomicBool, ops: &AtomicU64) {
    let mut n = 0usize;
    while !stop.load(Ordering::Relaxed) {
        let keys: Vec<String> = (0..16)
            .map(|j| format!("join{id}-{}", (n + j) % 2048))
            .collect();
        let vals: Vec<Vec<u8>> = keys.iter().map(|k| value(k, 256)).collect();
        let parts: Vec<[&[u8]; 1]> = vals.iter().map(|v| [&v[..]]).collect();
        let items: Vec<(&str, &[&[u8]])> = keys
            .iter()
            .zip(&parts)
            .map(|(k, p)| (k.as_str(), &p[..]))
            .collect();
        let put = c.put_values(&items, true, &WriteConfig::default());
        let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        for ((k, rc), got) in keys.iter().zip(&put).zip(c.get_values(&refs)) {
            if *rc == code::OK {
                // Another upsert of ours cannot race this one; a read may still find the
                // key removed by the remove_all at the end.
                if let Ok(v) = got {
                    assert_eq!(v.bytes(), &value(k, 256)[..], "{k}");
                }
            }
        }
        let probe: Vec<String> = (0..16)
            .map(|j| key("storm", (n * 7919 + j * 104_729) % objects))
            .collect();
        let refs: Vec<&str> = probe.iter().map(String::as_str).collect();
        let _ = c.exist(&refs);
        ops.fetch_add(48, Ordering::Relaxed);
        n += 16;
    }
}

#[test]
fn a_join_storm_and_remove_all_declare_no_client_dead() {
    let objects = env("TW_STORM_OBJECTS", 300_000);
    let storm = Duration::from_secs(env("TW_STORM_SECS", 20) as u64);
    let m = MasterProc::start(&["--client_ttl=5".into(), "--client_grace_sec=5".into()]);
    let url = m.addr.clone();
    // Four clients hold every object, then stay idle (heartbeats only).
    let per = (objects * (LEN + 64) / IDLE + (8 << 20)) as u64;
    let t0 = Instant::now();
    let idle: Vec<StoreClient> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..IDLE)
            .map(|i| {
                let url = url.clone();
                s.spawn(move || {
                    let c = client(&url, per);
                    fill(
                        &c,
                        "storm",
                        i * objects / IDLE,
                        (i + 1) * objects / IDLE,
                        LEN,
                        1000,
                    );
                    c
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let filled = t0.elapsed();
    assert_eq!(m.metric("tidewire_master_objects"), Some(objects as f64));

    // The probe: a ping every 100 ms, its slowest answer kept.
    let stop_probe = Arc::new(AtomicBool::new(false));
    let worst = Arc::new(Mutex::new(Duration::ZERO));
    let probe = {
        let (stop, worst) = (stop_probe.clone(), worst.clone());
        let c = client(&url, 0);
        std::thread::spawn(move || {
            let mut n = 0u32;
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                assert_eq!(c.health_check(), 0, "the master answers the probe");
                let took = t.elapsed();
                let mut w = worst.lock().unwrap();
                *w = (*w).max(took);
                drop(w);
                n += 1;
                std::thread::sleep(Duration::from_millis(100).saturating_sub(took));
            }
            n
        })
    };

    // Twelve clients join at once, each lending a segment, and hammer until told to stop.
    let stop = Arc::new(AtomicBool::new(false));
    let ops = Arc::new(AtomicU64::new(0));
    let storm_t0 = Instant::now();
    let joiners: Vec<_> = (0..JOINING)
        .map(|id| {
            let (url, stop, ops) = (url.clone(), stop.clone(), ops.clone());
            std::thread::spawn(move || {
                let c = client(&url, 16 << 20);
                hammer(&c, id, objects, &stop, &ops);
            })
        })
        .collect();
    std::thread::sleep(storm);
    // Still under the storm: every object of the idle clients is there, its bytes intact.
    let t = Instant::now();
    let missing = check(&idle[0], "storm", 0, objects, LEN, 997);
    let checked = t.elapsed();
    assert!(
        missing.is_empty(),
        "{} objects lost: {:?}",
        missing.len(),
        &missing[..3.min(missing.len())]
    );
    // Then everything is removed, the joiners still hammering.
    let t = Instant::now();
    let removed = idle[1].remove_all(true);
    let removal = t.elapsed();
    stop.store(true, Ordering::Relaxed);
    for j in joiners {
        j.join().unwrap();
    }
    let stormed = storm_t0.elapsed();
    stop_probe.store(true, Ordering::Relaxed);
    let probes = probe.join().unwrap();
    let worst = *worst.lock().unwrap();
    let suspended = m.metric("tidewire_master_clients_suspended_total");
    let dropped = m.metric("tidewire_master_clients_dropped_total");
    let clients = m.metric("tidewire_master_clients");
    eprintln!(
        "join storm: {objects} objects on {IDLE} idle clients (filled in {filled:?}); \
         {JOINING} clients joined and made {} key operations (puts, gets, exists) in {stormed:?}; \
         check of every object under the storm {checked:?}; remove_all removed {removed} in \
         {removal:?}; probe: {probes} pings, worst {worst:?}; clients suspended {suspended:?}, \
         dropped {dropped:?}, live {clients:?}",
        ops.load(Ordering::Relaxed)
    );
    assert_eq!(suspended, Some(0.0), "a client was suspended");
    assert_eq!(dropped, Some(0.0), "a client was dropped");
    assert_eq!(clients, Some((IDLE + JOINING + 1) as f64));
    assert!(removed >= objects as i64, "remove_all removed {removed}");
    assert!(worst < Duration::from_secs(1), "a probe waited {worst:?}");
    // The idle clients' objects are gone; their segments are still mounted.
    assert_eq!(check(&idle[2], "storm", 0, 1000, LEN, 1000).len(), 1000);
    assert_eq!(idle[3].health_check(), 0);
}
