//! The soak's per-minute table and its verdict: did the initiator's resident memory, open
//! descriptors and threads stay flat?

use crate::procstat::Usage;
use std::io::Write;

/// Allowed growth of RSS from the reading after the first interval (minute 1) to the last: this fraction of it ...
pub const RSS_GROWTH_FRACTION: f64 = 0.10;
/// ... or this many bytes, whichever is larger.
pub const RSS_GROWTH_BYTES: u64 = 16 << 20;
/// Allowed growth of open descriptors from minute 1 to the last minute.
pub const FD_GROWTH: u64 = 4;
/// Allowed growth of threads from minute 1 to the last minute.
pub const THREAD_GROWTH: u64 = 2;

/// One row of the table.
#[derive(Debug, Clone)]
pub struct Row {
    /// Seconds since the workers started (0 = just before).
    pub secs: u64,
    /// The initiator.
    pub initiator: Usage,
    /// The target alive at the reading (pid and usage), if any.
    pub target: Option<(u32, Usage)>,
    /// Restarts so far.
    pub restarts: u64,
    /// Successful requests so far.
    pub ok: u64,
    /// Failed requests so far.
    pub failed: u64,
    /// Bytes moved so far.
    pub bytes: u64,
}

fn mib(b: u64) -> String {
    format!("{:.1}", b as f64 / (1 << 20) as f64)
}

/// The table header.
pub fn print_header() {
    println!(
        "{:>5} {:>10} {:>5} {:>5} | {:>8} {:>10} {:>5} {:>5} | {:>8} {:>10} {:>7} {:>9}",
        "t s",
        "init MiB",
        "fds",
        "thr",
        "tgt pid",
        "tgt MiB",
        "fds",
        "thr",
        "restarts",
        "ok",
        "failed",
        "GB moved"
    );
}

/// One table line (printed as soon as it is read).
pub fn print_row(r: &Row) {
    let (pid, t) = match r.target {
        Some((pid, u)) => (pid.to_string(), Some(u)),
        None => ("-".to_string(), None),
    };
    let tv = |f: fn(&Usage) -> String| t.as_ref().map_or_else(|| "-".to_string(), f);
    println!(
        "{:>5} {:>10} {:>5} {:>5} | {:>8} {:>10} {:>5} {:>5} | {:>8} {:>10} {:>7} {:>9.2}",
        r.secs,
        mib(r.initiator.rss),
        r.initiator.fds,
        r.initiator.threads,
        pid,
        tv(|u| mib(u.rss)),
        tv(|u| u.fds.to_string()),
        tv(|u| u.threads.to_string()),
        r.restarts,
        r.ok,
        r.failed,
        r.bytes as f64 / 1e9
    );
    let _ = std::io::stdout().flush();
}

/// The flatness rule, as printed with the verdict.
pub fn rule() -> String {
    format!(
        "flat = last reading <= reading after the first interval (minute 1) + max({:.0} %, {} MiB) for RSS, + {} \
         for open fds, + {} for threads",
        RSS_GROWTH_FRACTION * 100.0,
        RSS_GROWTH_BYTES >> 20,
        FD_GROWTH,
        THREAD_GROWTH
    )
}

/// Which of RSS, fds and threads grew beyond the rule between `first` and `last`
/// (empty when flat).
pub fn growth(first: &Usage, last: &Usage) -> Vec<String> {
    let mut out = Vec::new();
    let rss_allow = ((first.rss as f64 * RSS_GROWTH_FRACTION) as u64).max(RSS_GROWTH_BYTES);
    if last.rss > first.rss + rss_allow {
        out.push(format!("RSS {} -> {} MiB", mib(first.rss), mib(last.rss)));
    }
    if last.fds > first.fds + FD_GROWTH {
        out.push(format!("fds {} -> {}", first.fds, last.fds));
    }
    if last.threads > first.threads + THREAD_GROWTH {
        out.push(format!("threads {} -> {}", first.threads, last.threads));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u(rss_mib: u64, fds: u64, threads: u64) -> Usage {
        Usage {
            rss: rss_mib << 20,
            fds,
            threads,
        }
    }

    #[test]
    fn flatness_rule() {
        assert!(growth(&u(100, 20, 10), &u(116, 24, 12)).is_empty());
        assert!(growth(&u(100, 20, 10), &u(90, 10, 5)).is_empty());
        assert_eq!(growth(&u(100, 20, 10), &u(117, 20, 10)).len(), 1);
        assert_eq!(growth(&u(1000, 20, 10), &u(1090, 25, 13)).len(), 2);
        assert!(growth(&u(1000, 20, 10), &u(1101, 20, 10))[0].starts_with("RSS"));
    }
}
