//! The target child process: spawn `tidewire-bench target`, wait for its READY line, and always
//! stop it again (close its stdin, wait, kill only when it lingers) — also from `Drop`.

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// What the target announced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ready {
    /// Segment name to open.
    pub segment: String,
    /// Address of its registered buffer.
    pub addr: u64,
    /// Length of its registered buffer.
    pub size: u64,
    /// Its process id.
    pub pid: u32,
    /// Address of its shared buffer of the same size (`--shared`), if any.
    pub shared: Option<u64>,
}

/// Parses `READY segment=<name> addr=<addr> size=<len> pid=<pid> [shared=<addr>]`.
pub fn parse_ready(line: &str) -> Option<Ready> {
    let mut words = line.split_whitespace();
    if words.next()? != "READY" {
        return None;
    }
    let (mut segment, mut addr, mut size, mut pid, mut shared) = (None, None, None, None, None);
    for w in words {
        let (k, v) = w.split_once('=')?;
        match k {
            "segment" => segment = Some(v.to_string()),
            "addr" => addr = crate::args::parse_u64(v).ok(),
            "size" => size = crate::args::parse_u64(v).ok(),
            "pid" => pid = v.parse().ok(),
            "shared" => shared = crate::args::parse_u64(v).ok(),
            _ => {}
        }
    }
    Some(Ready {
        segment: segment?,
        addr: addr?,
        size: size?,
        pid: pid?,
        shared,
    })
}

/// A running target; stopped when dropped.
pub struct TargetChild {
    child: Child,
    stdin: Option<ChildStdin>,
    /// Its READY announcement.
    pub ready: Ready,
    stopped: Option<ExitStatus>,
}

/// How long a target may take to print READY.
pub const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a target may take to exit after its stdin closed.
pub const EXIT_GRACE: Duration = Duration::from_secs(5);

/// A child that is killed and reaped on drop unless it was handed over.
struct Guard(Option<Child>);

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl TargetChild {
    /// Starts `<this program> target <args>` and waits up to `timeout` for its READY line.
    pub fn spawn(args: &[String], timeout: Duration) -> Result<TargetChild, String> {
        let exe =
            std::env::current_exe().map_err(|e| format!("cannot find own executable: {e}"))?;
        let mut child = Command::new(&exe)
            .arg("target")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot start target {}: {e}", exe.display()))?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("piped stdout");
        let mut guard = Guard(Some(child));
        let (tx, rx) = mpsc::channel();
        // The reader forwards anything else the target prints to our stderr and ends at EOF.
        std::thread::Builder::new()
            .name("target-stdout".into())
            .spawn(move || {
                let mut sent = false;
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    match parse_ready(&line) {
                        Some(r) if !sent => {
                            sent = true;
                            let _ = tx.send(r);
                        }
                        _ => eprintln!("target: {line}"),
                    }
                }
            })
            .map_err(|e| format!("cannot start reader thread: {e}"))?;
        let deadline = Instant::now() + timeout;
        let ready = loop {
            match rx.recv_timeout(Duration::from_millis(50)) {
                Ok(r) => break r,
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let c = guard.0.as_mut().expect("child");
                    let st = c
                        .wait()
                        .map(|s| s.to_string())
                        .unwrap_or_else(|e| e.to_string());
                    guard.0 = None;
                    return Err(format!("target exited before it was ready ({st})"));
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if Instant::now() >= deadline {
                        return Err(format!(
                            "target did not print READY within {} s (killed it)",
                            timeout.as_secs()
                        ));
                    }
                }
            }
        };
        let child = guard.0.take().expect("child");
        Ok(TargetChild {
            child,
            stdin,
            ready,
            stopped: None,
        })
    }

    /// The child's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills the child (SIGKILL) and reaps it.
    pub fn kill(&mut self) -> Result<ExitStatus, String> {
        if let Some(st) = self.stopped {
            return Ok(st);
        }
        self.child
            .kill()
            .map_err(|e| format!("killing target: {e}"))?;
        let st = self
            .child
            .wait()
            .map_err(|e| format!("reaping target: {e}"))?;
        self.stopped = Some(st);
        drop(self.stdin.take());
        Ok(st)
    }

    /// Closes the child's stdin and waits up to [`EXIT_GRACE`]; kills it if it lingers.
    /// Returns its exit status and whether it had to be killed.
    pub fn stop(&mut self) -> Result<(ExitStatus, bool), String> {
        if let Some(st) = self.stopped {
            return Ok((st, false));
        }
        drop(self.stdin.take());
        let deadline = Instant::now() + EXIT_GRACE;
        loop {
            match self.child.try_wait() {
                Ok(Some(st)) => {
                    self.stopped = Some(st);
                    return Ok((st, false));
                }
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                Ok(None) => break,
                Err(e) => return Err(format!("waiting for target: {e}")),
            }
        }
        let _ = self.child.kill();
        let st = self
            .child
            .wait()
            .map_err(|e| format!("reaping target: {e}"))?;
        self.stopped = Some(st);
        Ok((st, true))
    }
}

impl Drop for TargetChild {
    fn drop(&mut self) {
        if self.stopped.is_none() {
            let _ = self.stop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_line() {
        let r = parse_ready("READY segment=127.0.0.1:4000 addr=0x7f00 size=4096 pid=12").unwrap();
        assert_eq!(
            r,
            Ready {
                segment: "127.0.0.1:4000".into(),
                addr: 0x7f00,
                size: 4096,
                pid: 12,
                shared: None,
            }
        );
        let s = parse_ready("READY segment=x addr=1 size=2 pid=3 shared=0x9000").unwrap();
        assert_eq!(s.shared, Some(0x9000));
        assert!(parse_ready("READY segment=x addr=1 size=2").is_none());
        assert!(parse_ready("HELLO segment=x addr=1 size=2 pid=3").is_none());
        assert!(parse_ready("READY segment=x addr=zz size=2 pid=3").is_none());
    }
}
