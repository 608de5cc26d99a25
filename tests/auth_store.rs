//! Peer authentication on the Store's master connection: a `tidewire-master` started with
//! `TW_AUTH_KEY` serves Store clients holding the same key (bytes put and got back), and refuses
//! clients without it or with another one, quickly and with a log line naming them. Each client
//! runs in a child process (this test binary re-run with a role variable), since the key reaches
//! a Store client only through the environment.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tidewire::store::{StoreClient, StoreConfig, WriteConfig};

const ROLE_VAR: &str = "TW_AUTH_STORE_CLIENT";
const KEY: &str = "store key";

/// Child entry point: set up a Store client against the master in `TW_AUTH_STORE_CLIENT`,
/// put and get one value, print `RESULT ok` or `RESULT err <code> <message>`.
#[test]
#[ignore = "child process role, started by the other tests"]
fn child_store_client_main() {
    let Ok(master) = std::env::var(ROLE_VAR) else {
        return;
    };
    let setup = StoreClient::setup(&StoreConfig {
        local_hostname: "127.0.0.1".into(),
        metadata_server: "P2PHANDSHAKE".into(),
        global_segment_size: 16 << 20,
        local_buffer_size: 16 << 20,
        protocol: "tcp".into(),
        device_name: String::new(),
        master_server_address: master,
        disk: None,
    });
    let c = match setup {
        Ok(c) => c,
        Err(e) => {
            println!("RESULT err {} {}", e.code, e.message);
            return;
        }
    };
    let v: Vec<u8> = (0..100_000u32).map(|i| (i * 7) as u8).collect();
    let rc = c.put_values(&[("k", &[&v[..]])], false, &WriteConfig::default())[0];
    let got = c
        .get_values(&["k"])
        .pop()
        .unwrap()
        .map(|f| f.bytes().to_vec());
    match got {
        Ok(b) if rc == 0 && b == v => println!("RESULT ok"),
        other => println!("RESULT err put={rc} get={:?}", other.map(|b| b.len())),
    }
}

/// `tidewire-master` with the key, its stderr lines kept.
struct Master {
    child: Child,
    port: u16,
    log: Arc<Mutex<Vec<String>>>,
}

impl Master {
    fn start() -> Master {
        let mut child = Command::new(common::master::master_bin())
            .args([
                "--rpc_address=127.0.0.1",
                "--rpc_port=0",
                "--metrics_port=0",
            ])
            .env("TW_AUTH_KEY", KEY)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("master starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let ready: serde_json::Value = serde_json::from_str(&line).expect("ready line");
        let log = Arc::new(Mutex::new(Vec::new()));
        let (log2, err) = (log.clone(), child.stderr.take().unwrap());
        std::thread::spawn(move || {
            for l in BufReader::new(err).lines().map_while(Result::ok) {
                eprintln!("master: {l}");
                log2.lock().unwrap().push(l);
            }
        });
        Master {
            child,
            port: ready["rpc_port"].as_u64().unwrap() as u16,
            log,
        }
    }

    fn logged(&self, text: &str) -> bool {
        let until = Instant::now() + Duration::from_secs(5);
        while Instant::now() < until {
            if self.log.lock().unwrap().iter().any(|l| l.contains(text)) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }
}

impl Drop for Master {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs a Store client child with `key` (None = no TW_AUTH_KEY) and returns its RESULT line.
fn client_with(m: &Master, key: Option<&str>) -> String {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "child_store_client_main",
        "--nocapture",
        "--ignored",
    ])
    .env(ROLE_VAR, format!("127.0.0.1:{}", m.port))
    .env("TW_SAME_HOST", "0")
    .env("TW_RDMA", "off")
    .env_remove("TW_AUTH_KEY")
    .stdout(Stdio::piped())
    .stderr(Stdio::inherit());
    if let Some(k) = key {
        cmd.env("TW_AUTH_KEY", k);
    }
    let out = cmd.output().expect("client child runs");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    text.lines()
        .find(|l| l.starts_with("RESULT "))
        .unwrap_or_else(|| panic!("no RESULT line in {text:?}"))
        .to_string()
}

#[test]
fn keyed_master_serves_keyed_clients_and_refuses_others() {
    let m = Master::start();
    assert_eq!(client_with(&m, Some(KEY)), "RESULT ok");
    assert!(!m.logged("master: refused"), "no refusal for the right key");

    let t0 = Instant::now();
    let r = client_with(&m, None);
    assert!(r.starts_with("RESULT err"), "{r}");
    assert!(t0.elapsed() < Duration::from_secs(15), "{:?}", t0.elapsed());
    assert!(m.logged("peer did not authenticate (auth_key is set)"));

    let r = client_with(&m, Some("not the key"));
    assert!(r.starts_with("RESULT err"), "{r}");
    assert!(r.contains("another auth_key"), "{r}");
    assert!(m.logged("authentication failed: the peer has another auth_key"));
}
