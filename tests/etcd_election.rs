//! Leader election on a real etcd (started by the tests on 127.0.0.1): Mooncake's master_view
//! key, one leader among three contenders, a leader cut off from etcd stepping down before a new
//! one wins, resignation, a key written by someone else, a deleted key, etcd unreachable, and
//! contender processes SIGKILLed one after another (the failover time in BENCHMARKS.md).

mod common;
use common::etcd::{Etcd, dead_port};
use common::proxy::Proxy;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tidewire::ErrorKind;
use tidewire::etcd::EtcdClient;
use tidewire::etcd::election::{Election, ElectionConfig, Role, master_view_key, read_leader};

fn unique_key(tag: &str) -> String {
    master_view_key(&format!("tw-{tag}-{}", std::process::id()))
}

fn contender(endpoints: &str, key: &str, value: &str, ttl: i64) -> Election {
    Election::start(ElectionConfig {
        endpoints: endpoints.to_string(),
        key: key.to_string(),
        value: value.to_string(),
        lease_ttl: ttl,
    })
    .unwrap()
}

/// Polls `f` every 10 ms for at most `limit`; the time it took, or a panic naming `what`.
fn wait_for(limit: Duration, what: &str, mut f: impl FnMut() -> bool) -> Duration {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
    t0.elapsed()
}

fn leaders(all: &[Election]) -> Vec<usize> {
    (0..all.len()).filter(|&i| all[i].is_leader()).collect()
}

#[test]
fn three_contenders_elect_one_and_replace_a_leader_cut_off_from_etcd() {
    let etcd = Etcd::single();
    let key = unique_key("three");
    let proxies: Vec<Proxy> = (0..3)
        .map(|_| Proxy::start(etcd.members[0].client_port))
        .collect();
    let values: Vec<String> = (0..3).map(|i| format!("127.0.0.1:{}", 50051 + i)).collect();
    let all: Vec<Election> = (0..3)
        .map(|i| {
            contender(
                &format!("127.0.0.1:{}", proxies[i].port),
                &key,
                &values[i],
                2,
            )
        })
        .collect();
    wait_for(Duration::from_secs(10), "a leader", || {
        leaders(&all).len() == 1 && all.iter().all(|e| e.leader().is_some())
    });
    let first = leaders(&all)[0];
    let ttl = all[first].lease_ttl();
    let c = EtcdClient::new(&etcd.endpoints(), Duration::from_secs(2)).unwrap();
    let (kv, _) = c.get(key.as_bytes()).unwrap();
    let kv = kv.expect("the leader key exists");
    assert_eq!(kv.value, values[first].as_bytes());
    assert_ne!(kv.lease, 0, "the leader key hangs on a lease");
    for (i, e) in all.iter().enumerate() {
        assert_eq!(e.leader().as_deref(), Some(values[first].as_str()), "{i}");
        if i != first {
            assert_eq!(e.status().role, Role::Follower(values[first].clone()));
        }
    }
    // The leader loses etcd: it cannot renew, steps down, and its key expires for the others.
    proxies[first].cut();
    let t_cut = Instant::now();
    let took = wait_for(2 * ttl + Duration::from_secs(2), "a new leader", || {
        leaders(&all).iter().any(|&i| i != first)
    });
    let second = leaders(&all)[0];
    assert_ne!(second, first);
    assert_eq!(leaders(&all), vec![second], "exactly one leader");
    assert!(!all[first].is_leader());
    let old = all[first].status();
    let new = all[second].status();
    assert!(!matches!(old.role, Role::Leader { .. }));
    assert!(
        old.since <= new.since,
        "the old leader stepped down {:?} after the new one won",
        old.since - new.since
    );
    assert!(old.since >= t_cut, "it stepped down because of the cut");
    let (kv, _) = c.get(key.as_bytes()).unwrap();
    assert_eq!(kv.unwrap().value, values[second].as_bytes());
    eprintln!(
        "failover with a {ttl:?} lease: {took:?} from the cut; old leader stood down after {:?}",
        old.since - t_cut
    );
    assert!(all[first].status().last_error.is_some());
    // Back in touch, the old leader follows the new one.
    proxies[first].restore();
    wait_for(Duration::from_secs(10), "the old leader follows", || {
        all[first].status().role == Role::Follower(values[second].clone())
    });
    assert_eq!(leaders(&all), vec![second]);
}

#[test]
fn a_resigning_leader_hands_over_without_waiting_for_its_lease() {
    let etcd = Etcd::single();
    let key = unique_key("resign");
    let a = contender(&etcd.endpoints(), &key, "10.0.0.1:1", 10);
    wait_for(Duration::from_secs(5), "a leads", || a.is_leader());
    let b = contender(&etcd.url(), &key, "10.0.0.2:2", 10);
    wait_for(Duration::from_secs(5), "b follows", || {
        b.status().role == Role::Follower("10.0.0.1:1".into())
    });
    let Role::Leader { view_version: v1 } = a.status().role else {
        panic!("a leads")
    };
    drop(a);
    let took = wait_for(Duration::from_secs(3), "b leads", || b.is_leader());
    assert!(took < Duration::from_secs(3), "far below the 10 s lease");
    let Role::Leader { view_version: v2 } = b.status().role else {
        panic!("b leads")
    };
    assert!(v2 > v1, "a new view version");
    let c = EtcdClient::new(&etcd.endpoints(), Duration::from_secs(2)).unwrap();
    assert_eq!(
        read_leader(&c, &key).unwrap(),
        Some(("10.0.0.2:2".to_string(), v2))
    );
}

#[test]
fn follows_a_leader_written_by_another_implementation_until_its_lease_ends() {
    let etcd = Etcd::single();
    let key = unique_key("foreign");
    let c = EtcdClient::new(&etcd.endpoints(), Duration::from_secs(2)).unwrap();
    // What a Mooncake master writes: its address on its own lease.
    let lease = c.lease_grant(30).unwrap();
    assert!(
        c.put_if_absent(key.as_bytes(), b"10.1.1.1:50051", lease.id)
            .unwrap()
            .succeeded
    );
    let e = contender(&etcd.endpoints(), &key, "127.0.0.1:7", 2);
    wait_for(Duration::from_secs(5), "following", || {
        e.leader().as_deref() == Some("10.1.1.1:50051")
    });
    std::thread::sleep(Duration::from_millis(500));
    assert!(!e.is_leader());
    c.lease_revoke(lease.id).unwrap();
    let took = wait_for(Duration::from_secs(3), "takes over", || e.is_leader());
    eprintln!("took over {took:?} after the foreign lease was revoked");
    assert_eq!(
        read_leader(&c, &key).unwrap().map(|l| l.0).as_deref(),
        Some("127.0.0.1:7")
    );
}

#[test]
fn a_leader_whose_key_is_deleted_steps_down_and_campaigns_again() {
    let etcd = Etcd::single();
    let key = unique_key("deleted");
    let e = contender(&etcd.endpoints(), &key, "127.0.0.1:8", 3);
    wait_for(Duration::from_secs(5), "leads", || e.is_leader());
    let Role::Leader { view_version: v1 } = e.status().role else {
        panic!("leads")
    };
    let g = e.status().generation;
    let c = EtcdClient::new(&etcd.endpoints(), Duration::from_secs(2)).unwrap();
    assert!(c.delete(key.as_bytes()).unwrap());
    // It notices at its next renewal (a third of the lease) and wins again under a new view.
    wait_for(
        Duration::from_secs(6),
        "leads under a new view",
        || matches!(e.status().role, Role::Leader { view_version } if view_version > v1),
    );
    assert!(e.status().generation >= g + 2, "stepped down in between");
    assert!(e.is_leader());
}

#[test]
fn unreachable_etcd_is_a_clear_error_at_start() {
    let port = dead_port();
    let err = Election::start(ElectionConfig {
        endpoints: format!("127.0.0.1:{port}"),
        key: master_view_key(""),
        value: "127.0.0.1:1".into(),
        lease_ttl: 5,
    })
    .err()
    .expect("fails");
    assert_eq!(err.kind(), ErrorKind::Metadata);
    assert!(err.message().contains(&port.to_string()), "{err}");
    let bad = Election::start(ElectionConfig {
        endpoints: "https://127.0.0.1:1".into(),
        key: master_view_key(""),
        value: "127.0.0.1:1".into(),
        lease_ttl: 5,
    });
    assert!(bad.is_err());
    let empty = Election::start(ElectionConfig {
        endpoints: "127.0.0.1:1".into(),
        key: master_view_key(""),
        value: String::new(),
        lease_ttl: 5,
    });
    assert_eq!(empty.err().unwrap().kind(), ErrorKind::InvalidArgument);
}

const ROLE_VAR: &str = "TW_ELECTION_CHILD";

/// Child entry point: one contender (`TW_ELECTION_CHILD` = `endpoints|key|value|ttl`) that
/// runs until killed.
#[test]
#[ignore = "child process role, started by the other tests"]
fn child_contender_main() {
    let Ok(spec) = std::env::var(ROLE_VAR) else {
        return;
    };
    let p: Vec<&str> = spec.split('|').collect();
    let _e = contender(p[0], p[1], p[2], p[3].parse().unwrap());
    println!("READY");
    std::thread::sleep(Duration::from_secs(120));
}

fn spawn_contender(etcd: &Etcd, key: &str, value: &str, ttl: i64) -> Child {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_contender_main",
            "--nocapture",
            "--ignored",
        ])
        .env(ROLE_VAR, format!("{}|{key}|{value}|{ttl}", etcd.url()))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.starts_with("READY") {
        line.clear();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "contender exited early"
        );
    }
    child
}

#[test]
fn sigkilled_leader_processes_are_replaced_within_two_lease_periods() {
    let etcd = Etcd::single();
    let key = unique_key("procs");
    let ttl = 5; // Mooncake's master_view lease
    let values: Vec<String> = (0..3).map(|i| format!("127.0.0.1:{}", 51000 + i)).collect();
    let mut children: Vec<Option<Child>> = values
        .iter()
        .map(|v| Some(spawn_contender(&etcd, &key, v, ttl)))
        .collect();
    let c = EtcdClient::new(&etcd.endpoints(), Duration::from_secs(2)).unwrap();
    let leader_now = || read_leader(&c, &key).unwrap().map(|l| l.0);
    wait_for(Duration::from_secs(10), "a first leader", || {
        leader_now().is_some()
    });
    let mut times = Vec::new();
    for _round in 0..2 {
        let old = leader_now().unwrap();
        let i = values.iter().position(|v| *v == old).unwrap();
        // Let at least one renewal happen so the kill lands anywhere in the lease period.
        std::thread::sleep(Duration::from_millis(2200));
        let mut victim = children[i].take().expect("the leader is alive");
        victim.kill().unwrap();
        victim.wait().unwrap();
        let took = wait_for(
            Duration::from_secs(2 * ttl as u64 + 1),
            "a new leader",
            || leader_now().is_some_and(|v| v != old),
        );
        let new = leader_now().unwrap();
        let j = values.iter().position(|v| *v == new).unwrap();
        assert!(children[j].is_some(), "a live contender leads");
        times.push(took);
    }
    eprintln!("leader failover after SIGKILL with a {ttl} s lease: {times:?}");
    for mut c in children.into_iter().flatten() {
        let _ = c.kill();
        let _ = c.wait();
    }
}
