//! Test hosts in network namespaces: `ip netns` namespaces with unique names, veth pairs with
//! their own 10.x addresses, netem delay/loss, links set down, black-holed addresses, and a
//! tidewire peer process (`tidewire-bench target`) running inside a namespace. Everything made
//! here is removed on drop (namespaces, links, processes), also when the test panics; traffic
//! stays inside the namespaces the test created. Needs root (CI runs as root): tests call
//! [`available`] first and say why they are skipped otherwise.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::Duration;

static SEQ: AtomicU32 = AtomicU32::new(0);

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("running ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn run_in(ns: &str, prog: &str, args: &[&str]) -> Result<(), String> {
    let mut full = vec!["netns", "exec", ns, prog];
    full.extend_from_slice(args);
    ip(&full)
}

/// Whether namespaces can be made here (root, `ip` present, the kernel allows it). Probed once.
pub fn available() -> Result<(), String> {
    static PROBE: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    PROBE
        .get_or_init(|| {
            // SAFETY: geteuid has no preconditions.
            if unsafe { libc::geteuid() } != 0 {
                return Err("network-namespace tests need root".into());
            }
            Netns::new("probe").map(drop)
        })
        .clone()
}

/// Whether the kernel has the netem qdisc (some minimal kernels do not).
pub fn netem_available() -> bool {
    static PROBE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *PROBE.get_or_init(|| {
        let Ok(ns) = Netns::new("netem") else {
            return false;
        };
        run_in(
            &ns.name,
            "tc",
            &["qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"],
        )
        .is_ok()
    })
}

/// Whether this machine can degrade a link without netem: `nft` with random drops (numgen) and
/// the `tbf` qdisc for a rate-limited, queueing link. Probed once.
pub fn degrade_available() -> Result<(), String> {
    static PROBE: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    PROBE
        .get_or_init(|| {
            let ns = Netns::new("dgr")?;
            ns.tc(&[
                "qdisc", "add", "dev", "lo", "root", "tbf", "rate", "10mbit", "burst", "32kbit",
                "latency", "20ms",
            ])
            .map_err(|e| format!("no tbf qdisc: {e}"))?;
            nft_drop_rules(&ns.name, "lo", 5).map_err(|e| format!("no nft random drop: {e}"))
        })
        .clone()
}

/// In namespace `ns`: drops `percent` % of the packets entering and leaving `dev`, at random
/// (nftables `numgen random`), counting them.
fn nft_drop_rules(ns: &str, dev: &str, percent: u32) -> Result<(), String> {
    let pct = percent.to_string();
    run_in(ns, "nft", &["add", "table", "inet", "twloss"])?;
    for (chain, hook, dir) in [("in", "input", "iifname"), ("out", "output", "oifname")] {
        run_in(
            ns,
            "nft",
            &[
                "add", "chain", "inet", "twloss", chain, "{", "type", "filter", "hook", hook,
                "priority", "0", ";", "}",
            ],
        )?;
        run_in(
            ns,
            "nft",
            &[
                "add", "rule", "inet", "twloss", chain, dir, dev, "numgen", "random", "mod", "100",
                "<", &pct, "counter", "drop",
            ],
        )?;
    }
    Ok(())
}

/// Packets the `twloss` rules of namespace `ns` dropped so far.
fn nft_dropped(ns: &str) -> Result<u64, String> {
    let out = Command::new("ip")
        .args([
            "netns", "exec", ns, "nft", "list", "table", "inet", "twloss",
        ])
        .output()
        .map_err(|e| format!("running nft: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut total = 0;
    for w in text.split_whitespace().collect::<Vec<_>>().windows(2) {
        if w[0] == "packets" {
            total += w[1]
                .parse::<u64>()
                .map_err(|e| format!("nft counter: {e}"))?;
        }
    }
    Ok(total)
}

/// A network namespace, deleted on drop (which also deletes its veth ends and kills nothing:
/// processes started in it are owned by [`Peer`]).
pub struct Netns {
    /// Its name for `ip netns`.
    pub name: String,
}

impl Netns {
    /// A fresh namespace with loopback up. The name is unique per process and call.
    pub fn new(tag: &str) -> Result<Netns, String> {
        let name = format!(
            "tw-{tag}-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        ip(&["netns", "add", &name])?;
        let ns = Netns { name };
        run_in(&ns.name, "ip", &["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// Runs `ip ARGS` inside this namespace.
    pub fn ip(&self, args: &[&str]) -> Result<(), String> {
        run_in(&self.name, "ip", args)
    }

    /// Runs `tc ARGS` inside this namespace.
    pub fn tc(&self, args: &[&str]) -> Result<(), String> {
        run_in(&self.name, "tc", args)
    }

    /// A command that runs `prog` inside this namespace.
    pub fn command(&self, prog: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name, prog]);
        c
    }

    /// Moves the calling thread into this namespace (threads it starts afterwards inherit it).
    /// Sockets this thread creates afterwards live in the namespace; engines created on it bind
    /// and connect there. The thread cannot go back: use it on a test's own thread only.
    pub fn enter_this_thread(&self) -> Result<(), String> {
        let path = format!("/run/netns/{}", self.name);
        let f = std::fs::File::open(&path).map_err(|e| format!("{path}: {e}"))?;
        // SAFETY: `f` is an open namespace file; setns only changes the calling thread.
        let rc = unsafe { libc::setns(std::os::fd::AsRawFd::as_raw_fd(&f), libc::CLONE_NEWNET) };
        if rc != 0 {
            return Err(format!("setns: {}", std::io::Error::last_os_error()));
        }
        Ok(())
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = ip(&["netns", "del", &self.name]);
    }
}

/// A veth pair between two namespaces, `10.<a>.<b>.1/24` on side A and `.2` on side B.
pub struct Link {
    /// Interface name in namespace A.
    pub if_a: String,
    /// Interface name in namespace B.
    pub if_b: String,
    /// Address of side A.
    pub addr_a: String,
    /// Address of side B.
    pub addr_b: String,
    ns_a: String,
    ns_b: String,
}

impl Link {
    /// Connects `a` and `b` with a new veth pair and brings it up.
    pub fn new(a: &Netns, b: &Netns) -> Result<Link, String> {
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        let (if_a, if_b) = (format!("twa{n}"), format!("twb{n}"));
        let net = format!("10.{}.{}", 100 + n / 250 % 100, n % 250);
        ip(&[
            "link", "add", &if_a, "netns", &a.name, "type", "veth", "peer", "name", &if_b, "netns",
            &b.name,
        ])?;
        let link = Link {
            addr_a: format!("{net}.1"),
            addr_b: format!("{net}.2"),
            if_a,
            if_b,
            ns_a: a.name.clone(),
            ns_b: b.name.clone(),
        };
        run_in(
            &a.name,
            "ip",
            &[
                "addr",
                "add",
                &format!("{}/24", link.addr_a),
                "dev",
                &link.if_a,
            ],
        )?;
        run_in(
            &b.name,
            "ip",
            &[
                "addr",
                "add",
                &format!("{}/24", link.addr_b),
                "dev",
                &link.if_b,
            ],
        )?;
        run_in(&a.name, "ip", &["link", "set", &link.if_a, "up"])?;
        run_in(&b.name, "ip", &["link", "set", &link.if_b, "up"])?;
        Ok(link)
    }

    /// Applies `netem ARGS` (e.g. `["delay", "20ms", "loss", "5%"]`) on side B's egress.
    /// Fails when the kernel has no netem.
    pub fn netem_b(&self, args: &[&str]) -> Result<(), String> {
        let mut full = vec!["qdisc", "replace", "dev", &self.if_b, "root", "netem"];
        full.extend_from_slice(args);
        run_in(&self.ns_b, "tc", &full)
    }

    /// Degrades the link without netem: `loss_percent` % random drops of B's packets in both
    /// directions (nftables), and both ends shaped by `tbf` to `rate` with up to `latency` of
    /// queueing (a congested bottleneck: delay that grows with load, tail drops when full).
    pub fn degrade(&self, loss_percent: u32, rate: &str, latency: &str) -> Result<(), String> {
        nft_drop_rules(&self.ns_b, &self.if_b, loss_percent)?;
        for (ns, dev) in [(&self.ns_a, &self.if_a), (&self.ns_b, &self.if_b)] {
            run_in(
                ns,
                "tc",
                &[
                    "qdisc", "replace", "dev", dev, "root", "tbf", "rate", rate, "burst", "32kbit",
                    "latency", latency,
                ],
            )?;
        }
        Ok(())
    }

    /// Packets dropped so far by [`Link::degrade`]'s random-loss rules.
    pub fn dropped(&self) -> Result<u64, String> {
        nft_dropped(&self.ns_b)
    }

    /// Sets side B's interface down (its traffic vanishes without a reset).
    pub fn down_b(&self) -> Result<(), String> {
        run_in(&self.ns_b, "ip", &["link", "set", &self.if_b, "down"])
    }

    /// Makes `addr` (on B's subnet) a black hole seen from side A: frames go to a MAC nobody
    /// has, so SYNs and data vanish silently (no reset, no ICMP).
    pub fn blackhole_from_a(&self, addr: &str) -> Result<(), String> {
        run_in(
            &self.ns_a,
            "ip",
            &[
                "neigh",
                "replace",
                addr,
                "lladdr",
                "02:00:00:00:0b:0b",
                "nud",
                "permanent",
                "dev",
                &self.if_a,
            ],
        )
    }
}

/// A `tidewire-bench target` inside a namespace: one engine with one registered buffer, killed
/// and reaped on drop.
pub struct Peer {
    child: Child,
    stdin: Option<ChildStdin>,
    /// Segment name (`host:rpc_port`).
    pub segment: String,
    /// Address of the registered buffer.
    pub addr: u64,
    /// Its length.
    pub len: u64,
}

impl Peer {
    /// Starts a target in `ns` advertising `host`, with `buffer` bytes, serving at most
    /// `max_seconds`; waits (at most 20 s) for its READY line.
    pub fn start(ns: &Netns, host: &str, buffer: u64, max_seconds: u64) -> Result<Peer, String> {
        let exe = env!("CARGO_BIN_EXE_tidewire-bench");
        let mut child = ns
            .command(exe)
            .args(["target", "--host", host])
            .args(["--buffer-size", &buffer.to_string()])
            .args(["--max-seconds", &max_seconds.to_string()])
            .env("TW_SAME_HOST", "0")
            .env("TW_RDMA", "off")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("spawning the target: {e}"))?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel::<String>();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let mut peer = Peer {
            child,
            stdin,
            segment: String::new(),
            addr: 0,
            len: 0,
        };
        let line = rx
            .recv_timeout(Duration::from_secs(20))
            .map_err(|_| "the target printed no READY line in 20 s".to_string())?;
        for field in line.split_whitespace().skip(1) {
            match field.split_once('=') {
                Some(("segment", v)) => peer.segment = v.to_string(),
                Some(("addr", v)) => {
                    peer.addr = u64::from_str_radix(v.trim_start_matches("0x"), 16)
                        .map_err(|e| format!("READY addr {v}: {e}"))?
                }
                Some(("size", v)) => peer.len = v.parse().map_err(|e| format!("size: {e}"))?,
                _ => {}
            }
        }
        if peer.segment.is_empty() || peer.addr == 0 {
            return Err(format!("unexpected READY line {line:?}"));
        }
        Ok(peer)
    }

    /// The process id.
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Sends `sig` (SIGSTOP, SIGCONT, SIGKILL, ...) to the peer.
    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child, which is not reaped before drop.
        unsafe { libc::kill(self.pid(), sig) };
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        drop(self.stdin.take());
        self.signal(libc::SIGKILL);
        let _ = self.child.wait();
    }
}
