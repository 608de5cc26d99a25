//! Helpers for the fault-model tests (`join_storm`, `ha_failover`, `ha_scale`): masters as child
//! processes (stopped by PID on drop, their stderr kept in a file for the report), Store clients,
//! values derived from their keys, the admin routes' metrics, and timing helpers.

use super::etcd::Etcd;
use super::master::master_bin;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tidewire::etcd::EtcdClient;
use tidewire::etcd::election::{master_view_key, read_leader};
use tidewire::store::{StoreClient, StoreConfig, WriteConfig, code};

/// A `tidewire-master` child process.
pub struct MasterProc {
    child: Child,
    /// `127.0.0.1:rpc_port`.
    pub addr: String,
    /// The admin routes' address.
    pub admin: std::net::SocketAddr,
    /// Its stderr.
    pub log: PathBuf,
}

impl MasterProc {
    /// Starts `tidewire-master` on 127.0.0.1 (free RPC and metrics ports) with `extra` flags and
    /// waits for its ready line.
    pub fn start(extra: &[String]) -> MasterProc {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let log = std::env::temp_dir().join(format!(
            "tw-fault-master-{}-{}.log",
            std::process::id(),
            N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let mut child = Command::new(master_bin())
            .args([
                "--rpc_address=127.0.0.1",
                "--rpc_port=0",
                "--metrics_port=0",
                "--enable_metric_reporting=true",
            ])
            .args(extra)
            // Info: the journal's snapshots are logged.
            .env("TW_LOG_LEVEL", "info")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("master starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("ready line {line:?}: {e}; log: {}", read(&log)));
        MasterProc {
            child,
            addr: format!("127.0.0.1:{}", v["rpc_port"].as_u64().unwrap()),
            admin: format!("127.0.0.1:{}", v["metrics_port"].as_u64().unwrap())
                .parse()
                .unwrap(),
            log,
        }
    }

    /// An HA master on `etcd` with the journal on, leader lease `ttl` seconds.
    pub fn ha(etcd: &Etcd, ttl: u64) -> MasterProc {
        MasterProc::start(&[
            "--enable_ha=true".into(),
            format!("--etcd_endpoints={}", etcd.endpoints()),
            format!("--ha_lease_ttl={ttl}"),
            "--enable_oplog=true".into(),
        ])
    }

    /// A counter or gauge from its `/metrics` (`None` when the route does not answer).
    pub fn metric(&self, name: &str) -> Option<f64> {
        let text = super::http_client::get(self.admin, "/metrics").text();
        text.lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
    }

    /// The lines of its stderr that contain `what`.
    pub fn log_lines(&self, what: &str) -> Vec<String> {
        read(&self.log)
            .lines()
            .filter(|l| l.contains(what))
            .map(str::to_string)
            .collect()
    }
}

fn read(p: &PathBuf) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

impl Drop for MasterProc {
    fn drop(&mut self) {
        // SIGKILL to our own child, by PID (Child::kill), then reaped.
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// The leader's address as etcd holds it.
pub fn leader(etcd: &Etcd) -> Option<String> {
    let c = EtcdClient::new(&etcd.endpoints(), Duration::from_secs(2)).ok()?;
    read_leader(&c, &master_view_key(""))
        .ok()
        .flatten()
        .map(|l| l.0)
}

/// Polls `f` every 20 ms until it gives a value; panics after `limit`.
pub fn wait_for<T>(limit: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> (T, Duration) {
    let t0 = Instant::now();
    loop {
        if let Some(v) = f() {
            return (v, t0.elapsed());
        }
        assert!(t0.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A Store client on `master` (an address or `etcd://...`) lending a `seg`-byte segment.
pub fn client(master: &str, seg: u64) -> StoreClient {
    StoreClient::setup(&StoreConfig {
        local_hostname: "127.0.0.1".into(),
        metadata_server: "P2PHANDSHAKE".into(),
        global_segment_size: seg,
        local_buffer_size: 8 << 20,
        protocol: "tcp".into(),
        device_name: String::new(),
        master_server_address: master.into(),
        disk: None,
    })
    .expect("setup")
}

/// Key `i` of a run: 64 hex characters like a KV cache's, its prefix naming the run.
pub fn key(run: &str, i: usize) -> String {
    format!(
        "{run}-{:016x}{:040x}",
        (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
        i
    )
}

/// The value stored under `key`: `len` bytes derived from it.
pub fn value(key: &str, len: usize) -> Vec<u8> {
    let seed = key.bytes().fold(0xcbf2_9ce4_8422_2325u64, |a, b| {
        (a ^ b as u64).wrapping_mul(0x100_0000_01b3)
    });
    (0..len)
        .map(|i| (seed >> ((i % 8) * 8)) as u8 ^ i as u8)
        .collect()
}

/// Puts `keys` (values of `len` bytes) in one batch; the codes.
pub fn put_batch(c: &StoreClient, keys: &[String], len: usize) -> Vec<i32> {
    let vals: Vec<Vec<u8>> = keys.iter().map(|k| value(k, len)).collect();
    let parts: Vec<[&[u8]; 1]> = vals.iter().map(|v| [&v[..]]).collect();
    let items: Vec<(&str, &[&[u8]])> = keys
        .iter()
        .zip(&parts)
        .map(|(k, p)| (k.as_str(), &p[..]))
        .collect();
    c.put_values(&items, false, &WriteConfig::default())
}

/// `writers` clients on `url`, each lending `seg` bytes, that put `objects` keys of `run`
/// (`len` bytes each) between them, in parallel; the clients stay up.
pub fn fill_parallel(
    url: &str,
    writers: usize,
    seg: u64,
    run: &str,
    objects: usize,
    len: usize,
) -> Vec<StoreClient> {
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..writers)
            .map(|i| {
                s.spawn(move || {
                    let c = client(url, seg);
                    let (lo, hi) = (i * objects / writers, (i + 1) * objects / writers);
                    fill(&c, run, lo, hi, len, 1000);
                    c
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Puts keys `from..to` of `run` through `c` in batches of `batch`, retrying a failed batch
/// a few times (a put failed is not acknowledged; a retried one overwrites nothing: it is
/// `OBJECT_ALREADY_EXISTS` when it had landed). Panics when a batch keeps failing.
pub fn fill(c: &StoreClient, run: &str, from: usize, to: usize, len: usize, batch: usize) {
    for lo in (from..to).step_by(batch) {
        let keys: Vec<String> = (lo..(lo + batch).min(to)).map(|i| key(run, i)).collect();
        let mut todo = keys;
        for attempt in 0.. {
            let codes = put_batch(c, &todo, len);
            todo = todo
                .into_iter()
                .zip(codes)
                .filter(|(_, rc)| *rc != code::OK && *rc != code::OBJECT_ALREADY_EXISTS)
                .map(|(k, _)| k)
                .collect();
            if todo.is_empty() {
                break;
            }
            assert!(attempt < 5, "{} puts keep failing", todo.len());
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// Checks that keys `from..to` of `run` all exist (in batches of 1000) and that every
/// `stride`-th one reads back its bytes. Returns the keys missing.
pub fn check(
    c: &StoreClient,
    run: &str,
    from: usize,
    to: usize,
    len: usize,
    stride: usize,
) -> Vec<String> {
    let mut missing = Vec::new();
    for lo in (from..to).step_by(1000) {
        let keys: Vec<String> = (lo..(lo + 1000).min(to)).map(|i| key(run, i)).collect();
        let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        for (k, rc) in keys.iter().zip(c.exist(&refs)) {
            if rc != 1 {
                missing.push(k.clone());
            }
        }
    }
    let sample: Vec<String> = (from..to).step_by(stride).map(|i| key(run, i)).collect();
    for chunk in sample.chunks(64) {
        let refs: Vec<&str> = chunk.iter().map(String::as_str).collect();
        for (k, got) in chunk.iter().zip(c.get_values(&refs)) {
            match got {
                Ok(v) => assert_eq!(v.bytes(), &value(k, len)[..], "{k} read back wrong"),
                Err(rc) => assert!(missing.contains(k), "{k}: exists but get gives {rc}"),
            }
        }
    }
    missing
}

/// Three (or more) HA masters with the journal on, one etcd, and what a failover took.
pub struct HaCluster {
    /// The etcd they share.
    pub etcd: Etcd,
    /// The masters running now.
    pub masters: Vec<MasterProc>,
    /// Leader lease, seconds.
    pub ttl: u64,
}

/// One failover as a client saw it.
#[derive(Debug, Clone, Copy)]
pub struct Failover {
    /// From the loss to a new leader's address in etcd.
    pub elected: Duration,
    /// From the loss to the first acknowledged put.
    pub first_put: Duration,
}

impl HaCluster {
    /// `n` masters on a new etcd, a leader elected.
    pub fn start(n: usize, ttl: u64) -> HaCluster {
        let etcd = Etcd::single();
        let masters = (0..n).map(|_| MasterProc::ha(&etcd, ttl)).collect();
        let c = HaCluster { etcd, masters, ttl };
        wait_for(Duration::from_secs(10), "a leader", || leader(&c.etcd));
        c
    }

    /// `etcd://...` for clients.
    pub fn url(&self) -> String {
        self.etcd.url()
    }

    /// The leading master (as etcd names it), waiting until it serves.
    pub fn leader(&self) -> &MasterProc {
        let (addr, _) = wait_for(Duration::from_secs(60), "a leader", || leader(&self.etcd));
        self.masters
            .iter()
            .find(|m| m.addr == addr)
            .expect("the leader is one of ours")
    }

    /// Waits for the first put of `probe` through `c` to be acknowledged; how long it took.
    fn first_put(c: &StoreClient, probe: &str, limit: Duration) -> Duration {
        let t0 = Instant::now();
        let v = value(probe, 64);
        loop {
            let rc = c.put_values(&[(probe, &[&v[..]])], false, &WriteConfig::default())[0];
            if rc == code::OK || rc == code::OBJECT_ALREADY_EXISTS {
                return t0.elapsed();
            }
            assert!(
                t0.elapsed() < limit,
                "no put acknowledged within {limit:?} (last {rc})"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILLs the leader, starts a replacement master (as a supervisor would; it comes up
    /// as a standby) and measures until a new leader and the first put of `probe` through `c`.
    pub fn kill_leader(&mut self, c: &StoreClient, probe: &str) -> Failover {
        let old = self.leader().addr.clone();
        let i = self.masters.iter().position(|m| m.addr == old).unwrap();
        let t0 = Instant::now();
        drop(self.masters.remove(i)); // SIGKILL
        self.masters.push(MasterProc::ha(&self.etcd, self.ttl));
        let limit = Duration::from_secs(60);
        let (_, _) = wait_for(limit, "a new leader", || {
            leader(&self.etcd).filter(|l| *l != old)
        });
        let elected = t0.elapsed();
        let rest = Self::first_put(c, probe, limit);
        Failover {
            elected,
            first_put: elected + rest,
        }
    }

    /// SIGKILLs every master at once, then starts `n` new ones; measured from their start.
    pub fn cold_restart(&mut self, n: usize, c: &StoreClient, probe: &str) -> Failover {
        self.masters.clear(); // SIGKILL each
        // The old leader's lease must run out before anyone can win.
        let t0 = Instant::now();
        self.masters = (0..n)
            .map(|_| MasterProc::ha(&self.etcd, self.ttl))
            .collect();
        let names: Vec<String> = self.masters.iter().map(|m| m.addr.clone()).collect();
        let limit = Duration::from_secs(120);
        wait_for(limit, "a leader among the new masters", || {
            leader(&self.etcd).filter(|l| names.contains(l))
        });
        let elected = t0.elapsed();
        let rest = Self::first_put(c, probe, limit);
        Failover {
            elected,
            first_put: elected + rest,
        }
    }

    /// What the leader logged when it rebuilt its state from the journal.
    pub fn restored_line(&self) -> String {
        self.leader()
            .log_lines("from the journal")
            .pop()
            .unwrap_or_default()
    }

    /// From the leader's restore line: (records after the snapshot, how many of them it had
    /// read while standing by).
    pub fn restored_records(&self) -> (usize, usize) {
        let line = self.restored_line();
        let num_before = |what: &str| -> usize {
            line.split(what)
                .next()
                .and_then(|head| head.rsplit(['(', ' ', ',']).find(|w| !w.is_empty()))
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("no count before {what:?} in {line:?}"))
        };
        (
            num_before(" record(s) after the snapshot"),
            num_before(" of them read while standing by"),
        )
    }

    /// etcd's database size and the part of it in use, bytes (`/v3/maintenance/status`).
    pub fn etcd_db_size(&self) -> (u64, u64) {
        let c = EtcdClient::new(&self.etcd.endpoints(), Duration::from_secs(5)).unwrap();
        let v = c
            .call("/v3/maintenance/status", &serde_json::json!({}))
            .unwrap();
        (
            tidewire::etcd::int(&v["dbSize"]) as u64,
            tidewire::etcd::int(&v["dbSizeInUse"]) as u64,
        )
    }
}
