//! The `tidewire-master` binary's command line as a user meets it: `--help` prints exactly the
//! golden text checked in beside the flag table, a bad command line or a refused Mooncake flag
//! exits with status 2 and a message naming the flag, and the flags it honours take effect.

use std::io::{BufRead, BufReader, Read};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn run(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tidewire-master"))
        .args(args)
        .output()
        .expect("tidewire-master runs")
}

#[test]
fn help_prints_the_golden_text() {
    let golden = include_str!("../src/bin/tidewire-master/flags/help.golden.txt");
    for flag in ["--help", "-h", "-help"] {
        let out = run(&[flag]);
        assert!(out.status.success(), "{flag}: {:?}", out.status);
        assert_eq!(String::from_utf8_lossy(&out.stdout), golden, "{flag}");
    }
}

#[test]
fn a_bad_command_line_exits_2_naming_the_flag() {
    for (args, says) in [
        (&["--no_such_flag=1"][..], "unknown flag --no_such_flag"),
        (
            &["--rpc_port=x"][..],
            "--rpc_port: \"x\" is not a valid number",
        ),
        (&["--rpc_port"][..], "--rpc_port needs a value"),
        (&["--enable_ha"][..], "--enable_ha needs --etcd_endpoints"),
    ] {
        let out = run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

#[test]
fn a_refused_mooncake_flag_exits_2_saying_why() {
    for (args, says) in [
        (
            &["--enable_cxl=true"][..],
            "tidewire-master: --enable_cxl: tidewire has no CXL memory tier",
        ),
        (
            &["--root_fs_dir", "/mnt/3fs"][..],
            "tidewire-master: --root_fs_dir: tidewire has no shared file-system storage backend",
        ),
        (
            &["--offload_cap_ratio=0.5"][..],
            "tidewire-master: --offload_cap_ratio: not yet supported: ",
        ),
        (
            &["-enable_kv_events=1"][..],
            "tidewire-master: --enable_kv_events needs --kv_events_backend_id",
        ),
        (
            &["--snapshot_interval_seconds=600"][..],
            "tidewire-master: --snapshot_interval_seconds: tidewire-master takes and restores no snapshots",
        ),
        (
            &["--rpc_enable_tcp_no_delay=false"][..],
            "tidewire-master: --rpc_enable_tcp_no_delay=false: tidewire's connections are always TCP_NODELAY",
        ),
    ] {
        let out = run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}: nothing served");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.starts_with(says), "{args:?}: {err}");
    }
    // KV events whose socket cannot be bound: the start fails, naming the flag.
    let out = run(&[
        "--enable_kv_events",
        "--kv_events_backend_id=b",
        "--kv_events_bind_endpoint=bogus://x",
        "--rpc_port=0",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--kv_events_bind_endpoint=bogus://x: cannot bind"),
        "{err}"
    );
    // Several refused flags: each named on its own line.
    let out = run(&["--enable_snapshot", "--rpc_port=0", "--config_path=m.json"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    let named: Vec<&str> = err
        .lines()
        .map(|l| l.split(':').nth(1).unwrap_or("").trim())
        .collect();
    assert_eq!(named, ["--enable_snapshot", "--config_path"], "{err}");
}

/// Starts the binary with `args` on loopback ports of its choosing; returns the child, its ready
/// line and its stderr (read on a thread until it exits).
fn start(
    args: &[&str],
) -> (
    std::process::Child,
    serde_json::Value,
    std::thread::JoinHandle<String>,
) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tidewire-master"))
        .args([
            "--rpc_address=127.0.0.1",
            "--rpc_port=0",
            "--enable_metric_reporting=false",
        ])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tidewire-master starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let ready = serde_json::from_str(&line).unwrap_or_else(|e| panic!("ready line {line:?}: {e}"));
    (child, ready, err)
}

#[test]
fn feature_off_values_start_and_honoured_flags_take_effect() {
    let (mut child, ready, err) = start(&[
        // Refused flags given the value that means "off": accepted silently.
        "--enable_cxl=false",
        "--noenable_snapshot",
        "--enable_offload=false",
        "--enable_kv_events=0",
        "--root_fs_dir=",
        // Newly honoured.
        "--rpc_conn_timeout_seconds=1",
        "--cluster_id=flags_test",
        "--max_threads=64",
    ]);
    let port = ready["rpc_port"].as_u64().unwrap() as u16;
    // An idle connection is closed after --rpc_conn_timeout_seconds (1 s; the default is 300).
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let t = Instant::now();
    let mut buf = [0u8; 16];
    let n = c.read(&mut buf).unwrap_or(0);
    let waited = t.elapsed();
    assert_eq!(n, 0, "closed without a reply");
    assert!(
        waited >= Duration::from_millis(500) && waited < Duration::from_secs(15),
        "closed after {waited:?}"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    let err = err.join().unwrap();
    assert!(
        err.contains("tidewire-master: --max_threads=64 has no effect: the RPC server's threads"),
        "the thread count is said to have no effect: {err}"
    );
}
