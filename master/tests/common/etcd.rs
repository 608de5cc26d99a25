//! Real etcd servers for tests: `etcd` from PATH (or `ETCD_BIN`), on 127.0.0.1 with free ports,
//! a temp data dir and `--unsafe-no-fsync`; stopped by PID and cleaned up on drop. (The part
//! of the library tests' `tests/common/etcd.rs` that the master's tests use.)

use super::{free_port, restartable_port};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// One member of a test cluster.
pub struct Member {
    pub name: String,
    pub client_port: u16,
    pub peer_port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

/// A test etcd cluster (one or more members).
pub struct Etcd {
    pub members: Vec<Member>,
    initial_cluster: String,
    token: String,
}

fn temp_dir(tag: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let d = std::env::temp_dir().join(format!(
        "tw-etcd-{}-{}-{tag}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn etcd_bin() -> String {
    std::env::var("ETCD_BIN").unwrap_or_else(|_| "etcd".to_string())
}

/// GET `path` on 127.0.0.1:`port`; the body on status 200.
pub fn http_get(port: u16, path: &str) -> Option<String> {
    let mut s = TcpStream::connect_timeout(
        &format!("127.0.0.1:{port}").parse().unwrap(),
        Duration::from_millis(500),
    )
    .ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut resp = String::new();
    s.read_to_string(&mut resp).ok()?;
    let (head, body) = resp.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_string())
}

impl Etcd {
    /// A single-member cluster, started and healthy.
    pub fn single() -> Etcd {
        Etcd::cluster(1)
    }

    /// An `n`-member cluster, started and healthy.
    pub fn cluster(n: usize) -> Etcd {
        let members: Vec<Member> = (0..n)
            .map(|i| Member {
                name: format!("m{i}"),
                client_port: restartable_port(),
                peer_port: restartable_port(),
                dir: temp_dir(&format!("m{i}")),
                child: None,
            })
            .collect();
        let initial_cluster = members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer_port))
            .collect::<Vec<_>>()
            .join(",");
        let mut e = Etcd {
            members,
            initial_cluster,
            token: format!("tw-{}-{}", std::process::id(), free_port()),
        };
        for i in 0..n {
            e.spawn(i);
        }
        for i in 0..n {
            e.wait_healthy(i);
        }
        e
    }

    fn spawn(&mut self, i: usize) {
        let m = &mut self.members[i];
        let log = std::fs::File::create(m.dir.join("etcd.log")).unwrap();
        let client = format!("http://127.0.0.1:{}", m.client_port);
        let peer = format!("http://127.0.0.1:{}", m.peer_port);
        let child = Command::new(etcd_bin())
            .args(["--name", &m.name])
            .arg("--data-dir")
            .arg(m.dir.join("data"))
            .args([
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .args(["--initial-cluster", &self.initial_cluster])
            .args(["--initial-cluster-token", &self.token])
            .args(["--unsafe-no-fsync", "--logger=zap", "--log-level=error"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("etcd is installed (Debian: etcd-server)");
        m.child = Some(child);
    }

    fn wait_healthy(&mut self, i: usize) {
        let t0 = Instant::now();
        let port = self.members[i].client_port;
        while t0.elapsed() < Duration::from_secs(20) {
            if let Some(c) = self.members[i].child.as_mut() {
                if let Ok(Some(st)) = c.try_wait() {
                    let log = std::fs::read_to_string(self.members[i].dir.join("etcd.log"))
                        .unwrap_or_default();
                    panic!("etcd member {i} exited ({st}): {log}");
                }
            }
            if http_get(port, "/health").is_some_and(|b| b.contains("true")) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("etcd member {i} not healthy within 20 s");
    }

    /// `127.0.0.1:p1;127.0.0.1:p2...` (Mooncake's endpoint list).
    pub fn endpoints(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("127.0.0.1:{}", m.client_port))
            .collect::<Vec<_>>()
            .join(";")
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            if let Some(mut c) = self.members[i].child.take() {
                // SAFETY: plain libc call on the PID of a child we spawned and have not reaped.
                unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
                let _ = c.wait();
            }
            let _ = std::fs::remove_dir_all(&self.members[i].dir);
        }
    }
}
