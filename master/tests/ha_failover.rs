//! The master's fault model, part two: HA with the journal at a CI scale. Objects are written
//! through three `--enable_ha --enable_oplog` masters on one etcd, the leader is SIGKILLed
//! twice in a row (a supervisor starts a replacement each time), then every master is
//! SIGKILLed and three new ones are started cold. Every acknowledged object stays (all counted,
//! a sample read back byte for byte) and a put is acknowledged within 6 s of each loss.
//! `TW_FAILOVER_OBJECTS` changes the scale; `ha_scale.rs` runs it at 1 M objects.

mod common;
use common::fault::{HaCluster, check, fill_parallel, key, value};
use std::time::{Duration, Instant};

const LEN: usize = 64;
const TTL: u64 = 2;

#[test]
fn two_leader_kills_and_a_cold_restart_keep_every_acknowledged_object() {
    let objects: usize = std::env::var("TW_FAILOVER_OBJECTS")
        .ok()
        .and_then(|v| v.parse().ok())
        // The project's suite runs optimized (`make rust-test`: --release); an unoptimized
        // master rebuilds its state about five times slower, so a debug run writes fewer.
        .unwrap_or(if cfg!(debug_assertions) {
            20_000
        } else {
            200_000
        });
    let mut ha = HaCluster::start(3, TTL);
    let url = ha.url();
    let writers = 4;
    let seg = (objects * LEN / writers + (8 << 20)) as u64;
    let t0 = Instant::now();
    let clients = fill_parallel(&url, writers, seg, "ha", objects, LEN);
    let filled = t0.elapsed();
    let (db, _) = ha.etcd_db_size();
    eprintln!("ha failover: {objects} objects written in {filled:?}; etcd db {db} bytes");

    let c = &clients[0];
    let mut probes = Vec::new();
    for k in 0..2 {
        let probe = format!("after-kill-{k}");
        let f = ha.kill_leader(c, &probe);
        eprintln!(
            "ha failover: leader kill {}: new leader after {:?}, first put acknowledged after {:?}; {}",
            k + 1,
            f.elected,
            f.first_put,
            ha.restored_line()
        );
        assert!(f.first_put < Duration::from_secs(6), "{f:?}");
        // The new leader had read the journal while it stood by.
        let (after_snapshot, read_before) = ha.restored_records();
        assert!(
            after_snapshot == 0 || read_before > 0,
            "nothing read while standing by: {}",
            ha.restored_line()
        );
        probes.push(probe);
    }
    let cold = ha.cold_restart(3, c, "after-cold-restart");
    probes.push("after-cold-restart".into());
    eprintln!(
        "ha failover: cold restart of every master: leader after {:?}, first put after {:?}; {}",
        cold.elected,
        cold.first_put,
        ha.restored_line()
    );
    let t = Instant::now();
    let missing = check(&clients[1], "ha", 0, objects, LEN, 101);
    assert!(
        missing.is_empty(),
        "{} acknowledged objects lost, e.g. {:?}",
        missing.len(),
        &missing[..missing.len().min(3)]
    );
    for p in &probes {
        let got = clients[2].get_values(&[p.as_str()]).pop().unwrap();
        assert_eq!(got.expect(p).bytes(), &value(p, 64)[..], "{p}");
    }
    let count = ha.leader().metric("tidewire_master_objects");
    assert_eq!(count, Some((objects + probes.len()) as f64));
    let (db, in_use) = ha.etcd_db_size();
    eprintln!(
        "ha failover: every object checked in {:?} ({count:?} on the leader); etcd db {db} \
         bytes ({in_use} in use); key {} reads back",
        t.elapsed(),
        key("ha", objects - 1)
    );
}
