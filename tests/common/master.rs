//! `tidewire-master` as a child process, for the Store tests.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

/// The `tidewire-master` binary of this build. It belongs to the `master` crate of the
/// workspace, so Cargo names no `CARGO_BIN_EXE_` for it here: it sits in the profile directory,
/// one above this test binary's `deps/`, once `cargo test --workspace` (or `make build`) built it.
pub fn master_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let bin = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("test binary sits in <profile>/deps")
        .join("tidewire-master");
    assert!(
        bin.exists(),
        "{} is missing: build it first (cargo build -p tidewire-master, or cargo test --workspace)",
        bin.display()
    );
    bin
}

/// Starts `tidewire-master` with `args` (stderr discarded) and waits for its ready line: the
/// child, and that line as JSON (`rpc_port`, `metrics_port`, `http_metadata_port`, ...).
pub fn spawn_master<I, S>(args: I) -> (Child, serde_json::Value)
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut child = Command::new(master_bin())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("master starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let ready = serde_json::from_str(&line).expect("ready line");
    (child, ready)
}

/// A `tidewire-master` on 127.0.0.1 (free ports, read lease 300 ms), killed on drop, and store
/// clients of it.
pub struct TestMaster(Child, u16);

impl TestMaster {
    pub fn start() -> TestMaster {
        let (child, v) = spawn_master([
            "--rpc_address=127.0.0.1",
            "--rpc_port=0",
            "--metrics_port=0",
            "--default_kv_lease_ttl=300",
        ]);
        TestMaster(child, v["rpc_port"].as_u64().unwrap() as u16)
    }

    /// A client with a segment of `seg` bytes (0: none) and a 16 MiB local buffer.
    pub fn client(&self, seg: u64) -> tidewire::store::StoreClient {
        tidewire::store::StoreClient::setup(&tidewire::store::StoreConfig {
            local_hostname: "127.0.0.1".into(),
            metadata_server: "P2PHANDSHAKE".into(),
            global_segment_size: seg,
            local_buffer_size: 16 << 20,
            protocol: "tcp".into(),
            device_name: String::new(),
            master_server_address: format!("127.0.0.1:{}", self.1),
            disk: None,
        })
        .expect("setup")
    }
}

impl Drop for TestMaster {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
