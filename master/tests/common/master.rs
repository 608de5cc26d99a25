//! `tidewire-master` as a child process: the binary of this package, which Cargo builds before
//! the package's integration tests and names in `CARGO_BIN_EXE_tidewire-master`.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

/// The `tidewire-master` binary of this build.
pub fn master_bin() -> &'static str {
    env!("CARGO_BIN_EXE_tidewire-master")
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
