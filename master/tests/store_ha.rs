//! Store master high availability on a real etcd: three `tidewire-master --enable_ha` processes,
//! clients given `etcd://...` under a put/get load, the leader SIGKILLed. With `--enable_oplog`
//! every acknowledged object stays readable; without it objects are lost but clients carry on
//! (there with transfer-engine metadata on the same etcd);
//! keys of their full length (NUL bytes, 1 MiB) are journaled and come back; a standby refuses
//! clients and names the leader; a client whose masters all vanished gets errors in bounded time.

mod common;
use common::etcd::Etcd;
use common::master::spawn_master;
use std::collections::HashMap;
use std::process::Child;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tidewire::etcd::EtcdClient;
use tidewire::etcd::election::{master_view_key, read_leader};
use tidewire::store::{StoreClient, StoreConfig, WriteConfig, code};

/// Leader lease, seconds (`TW_HA_TEST_TTL` to measure with another, e.g. Mooncake's 5).
static TTL_CELL: std::sync::OnceLock<u64> = std::sync::OnceLock::new();

fn ttl() -> u64 {
    *TTL_CELL.get_or_init(|| {
        std::env::var("TW_HA_TEST_TTL")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(2)
    })
}

struct MasterProc {
    child: Child,
    addr: String,
}

fn start_master(etcd: &Etcd, oplog: bool) -> MasterProc {
    let (child, v) = spawn_master([
        "--rpc_address=127.0.0.1",
        "--rpc_port=0",
        "--enable_metric_reporting=false",
        "--enable_ha=true",
        &format!("--etcd_endpoints={}", etcd.endpoints()),
        &format!("--ha_lease_ttl={}", ttl()),
        &format!("--enable_oplog={oplog}"),
    ]);
    MasterProc {
        child,
        addr: format!("127.0.0.1:{}", v["rpc_port"].as_u64().unwrap()),
    }
}

impl Drop for MasterProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn leader(etcd: &Etcd) -> Option<String> {
    let c = EtcdClient::new(&etcd.endpoints(), Duration::from_secs(2)).unwrap();
    read_leader(&c, &master_view_key(""))
        .ok()
        .flatten()
        .map(|l| l.0)
}

fn wait_for<T>(limit: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> (T, Duration) {
    let t0 = Instant::now();
    loop {
        if let Some(v) = f() {
            return (v, t0.elapsed());
        }
        assert!(t0.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn client(master: &str, seg: u64) -> StoreClient {
    client_on(master, seg, "P2PHANDSHAKE")
}

fn client_on(master: &str, seg: u64, metadata: &str) -> StoreClient {
    StoreClient::setup(&StoreConfig {
        local_hostname: "127.0.0.1".into(),
        metadata_server: metadata.into(),
        global_segment_size: seg,
        local_buffer_size: 16 << 20,
        protocol: "tcp".into(),
        device_name: String::new(),
        master_server_address: master.into(),
        disk: None,
    })
    .expect("setup")
}

fn value(key: &str) -> Vec<u8> {
    let seed = key
        .bytes()
        .fold(7u8, |a, b| a.wrapping_mul(31).wrapping_add(b));
    (0..(2048 + seed as usize * 8))
        .map(|i| (i as u8).wrapping_add(seed))
        .collect()
}

fn put(c: &StoreClient, key: &str) -> i32 {
    let v = value(key);
    c.put_values(&[(key, &[&v[..]])], false, &WriteConfig::default())[0]
}

fn get(c: &StoreClient, key: &str) -> Result<Vec<u8>, i32> {
    c.get_values(&[key])
        .pop()
        .unwrap()
        .map(|f| f.bytes().to_vec())
}

/// What one load thread ends with: acknowledged keys with their time, and failed puts.
type LoadResult = (Vec<(String, Instant)>, usize);

/// Runs a put/get load from `clients` until `stop`.
fn load(
    clients: &[Arc<StoreClient>],
    stop: Arc<AtomicBool>,
) -> Vec<std::thread::JoinHandle<LoadResult>> {
    clients
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let (c, stop) = (c.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut acked = Vec::new();
                let mut failures = 0;
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    let key = format!("c{i}-{n}");
                    n += 1;
                    if put(&c, &key) == code::OK {
                        acked.push((key, Instant::now()));
                        // Read back an earlier acknowledged key now and then.
                        if acked.len() % 5 == 0 {
                            let k = &acked[acked.len() / 2].0;
                            if let Ok(v) = get(&c, k) {
                                assert_eq!(v, value(k), "{k} read back wrong");
                            }
                        }
                    } else {
                        failures += 1;
                        std::thread::sleep(Duration::from_millis(20));
                    }
                }
                (acked, failures)
            })
        })
        .collect()
}

#[test]
fn leader_sigkilled_under_load_with_oplog_keeps_every_acknowledged_object() {
    let etcd = Etcd::single();
    let mut masters: Vec<Option<MasterProc>> =
        (0..3).map(|_| Some(start_master(&etcd, true))).collect();
    let (first, _) = wait_for(Duration::from_secs(10), "a leader", || leader(&etcd));
    let url = format!("etcd://{}", etcd.endpoints());
    let clients: Vec<Arc<StoreClient>> = (0..2).map(|_| Arc::new(client(&url, 64 << 20))).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let workers = load(&clients, stop.clone());
    std::thread::sleep(Duration::from_millis(1500));
    let i = masters
        .iter()
        .position(|m| m.as_ref().is_some_and(|m| m.addr == first))
        .expect("the leader is one of ours");
    let killed_at = Instant::now();
    drop(masters[i].take()); // SIGKILL
    let (second, elected) = wait_for(Duration::from_secs(2 * ttl() + 2), "a new leader", || {
        leader(&etcd).filter(|l| *l != first)
    });
    assert!(masters.iter().flatten().any(|m| m.addr == second));
    std::thread::sleep(Duration::from_secs(3));
    stop.store(true, Ordering::Relaxed);
    let mut acked: HashMap<String, Instant> = HashMap::new();
    let mut failures = 0;
    for w in workers {
        let (a, f) = w.join().unwrap();
        failures += f;
        acked.extend(a);
    }
    let first_after = acked
        .values()
        .filter(|t| **t > killed_at)
        .min()
        .map(|t| *t - killed_at)
        .expect("clients continued after the failover");
    let after = acked.values().filter(|t| **t > killed_at).count();
    eprintln!(
        "oplog failover (lease {} s): new leader after {elected:?}; first acknowledged put after the kill {first_after:?}; {} puts acknowledged ({after} after the kill), {failures} failed",
        ttl(),
        acked.len()
    );
    assert!(after >= 10, "clients continue: {after}");
    // Every acknowledged object, before and after the failover, reads back intact.
    let reader = &clients[0];
    let mut missing = Vec::new();
    for k in acked.keys() {
        match get(reader, k) {
            Ok(v) => assert_eq!(v, value(k), "{k}"),
            Err(c) => missing.push((k.clone(), c)),
        }
    }
    assert!(
        missing.is_empty(),
        "{} acknowledged objects lost: {:?}",
        missing.len(),
        &missing[..missing.len().min(5)]
    );
}

#[test]
fn full_length_keys_survive_a_failover_with_oplog() {
    // Keys that differ after a NUL, and a 1 MiB key of NULs (its journal record, about 7 MiB,
    // spans several journal batches): all journaled, all back after the leader is killed, and
    // the journal keeps accepting writes.
    let etcd = Etcd::single();
    let mut masters: Vec<Option<MasterProc>> =
        (0..2).map(|_| Some(start_master(&etcd, true))).collect();
    let (first, _) = wait_for(Duration::from_secs(10), "a leader", || leader(&etcd));
    let url = format!("etcd://{}", etcd.endpoints());
    let c = client(&url, 32 << 20);
    let long = "\0".repeat(tidewire::store::proto::MAX_KEY_LEN);
    let keys = ["k\0a", "k\0b", long.as_str(), "after"];
    for k in keys {
        assert_eq!(put(&c, k), code::OK, "put {:?}", &k[..k.len().min(8)]);
    }
    let i = masters
        .iter()
        .position(|m| m.as_ref().is_some_and(|m| m.addr == first))
        .unwrap();
    drop(masters[i].take()); // SIGKILL
    wait_for(Duration::from_secs(2 * ttl() + 2), "a new leader", || {
        leader(&etcd).filter(|l| *l != first)
    });
    wait_for(
        Duration::from_secs(10),
        "a read through the new leader",
        || get(&c, "after").ok(),
    );
    for k in keys {
        assert_eq!(get(&c, k).unwrap(), value(k), "{:?}", &k[..k.len().min(8)]);
    }
    assert_eq!(get(&c, "k").unwrap_err(), code::OBJECT_NOT_FOUND);
    assert_eq!(put(&c, "later"), code::OK);
}

#[test]
fn without_oplog_objects_are_lost_but_clients_remount_and_continue() {
    let etcd = Etcd::single();
    let mut masters: Vec<Option<MasterProc>> =
        (0..2).map(|_| Some(start_master(&etcd, false))).collect();
    let (first, _) = wait_for(Duration::from_secs(10), "a leader", || leader(&etcd));
    // Transfer-engine metadata on the same etcd, as Mooncake deployments do.
    let url = format!("etcd://{}", etcd.endpoints());
    let c = client_on(&url, 32 << 20, &url);
    let reader = client_on(&url, 0, &url);
    assert_eq!(put(&c, "before"), code::OK);
    assert_eq!(get(&reader, "before").unwrap(), value("before"));
    let i = masters
        .iter()
        .position(|m| m.as_ref().is_some_and(|m| m.addr == first))
        .unwrap();
    drop(masters[i].take());
    wait_for(Duration::from_secs(2 * ttl() + 2), "a new leader", || {
        leader(&etcd).filter(|l| *l != first)
    });
    // The client finds the new leader and re-mounts its segment by itself.
    let (_, took) = wait_for(
        Duration::from_secs(10),
        "a put through the new leader",
        || (put(&c, "after") == code::OK).then_some(()),
    );
    eprintln!("without oplog: first put through the new leader {took:?} after it was elected");
    assert_eq!(get(&c, "after").unwrap(), value("after"));
    assert_eq!(get(&reader, "after").unwrap(), value("after"));
    assert_eq!(get(&c, "before").unwrap_err(), code::OBJECT_NOT_FOUND);
}

#[test]
fn a_standby_refuses_clients_and_names_the_leader() {
    let etcd = Etcd::single();
    let masters: Vec<MasterProc> = (0..2).map(|_| start_master(&etcd, false)).collect();
    let (lead, _) = wait_for(Duration::from_secs(10), "a leader", || leader(&etcd));
    let standby = masters.iter().find(|m| m.addr != lead).unwrap();
    // Give the standby a moment to learn who leads.
    std::thread::sleep(Duration::from_millis(300));
    let err = StoreClient::setup(&StoreConfig {
        master_server_address: standby.addr.clone(),
        global_segment_size: 0,
        local_buffer_size: 0,
        ..StoreConfig::default()
    })
    .err()
    .expect("a standby does not serve");
    assert_eq!(err.code, code::RPC_FAIL);
    assert!(
        err.message.contains("standby") && err.message.contains(&lead),
        "{err}"
    );
}

#[test]
fn a_client_whose_masters_vanished_gets_errors_not_hangs() {
    let etcd = Etcd::single();
    let m = start_master(&etcd, false);
    wait_for(Duration::from_secs(10), "a leader", || leader(&etcd));
    let c = client(&format!("etcd://{}", etcd.endpoints()), 16 << 20);
    assert_eq!(put(&c, "k"), code::OK);
    drop(m);
    let t0 = Instant::now();
    let rc = put(&c, "k2");
    assert!(rc == code::RPC_FAIL || rc == code::RPC_TIMEOUT, "{rc}");
    assert!(get(&c, "k").is_err());
    assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", t0.elapsed());
    // No master at all: setup fails at once with a clear error.
    std::thread::sleep(Duration::from_secs(ttl() + 1));
    let err = StoreClient::setup(&StoreConfig {
        master_server_address: format!("etcd://{}", etcd.endpoints()),
        global_segment_size: 0,
        local_buffer_size: 0,
        ..StoreConfig::default()
    })
    .err()
    .expect("no master");
    assert!(err.message.contains("no master leads"), "{err}");
}
