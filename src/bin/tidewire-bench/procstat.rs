//! Resource readings of a process from `/proc`: resident memory, open descriptors, threads.

/// One reading of a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// Resident set size in bytes (`VmRSS`).
    pub rss: u64,
    /// Open file descriptors (entries of `/proc/<pid>/fd`).
    pub fds: u64,
    /// Threads (`Threads`).
    pub threads: u64,
}

/// Reads `pid`'s usage; `None` when the process is gone or `/proc` is unreadable.
pub fn usage(pid: u32) -> Option<Usage> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let (rss, threads) = parse_status(&status)?;
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64;
    Some(Usage { rss, fds, threads })
}

/// `VmRSS` (in bytes) and `Threads` from the text of `/proc/<pid>/status`.
fn parse_status(status: &str) -> Option<(u64, u64)> {
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
    };
    Some((field("VmRSS:")? * 1024, field("Threads:")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_fields() {
        let s = "Name:\tx\nVmRSS:\t  2048 kB\nThreads:\t7\n";
        assert_eq!(parse_status(s), Some((2048 * 1024, 7)));
        assert_eq!(parse_status("Name:\tx\n"), None);
    }

    #[test]
    fn own_usage_is_readable() {
        let u = usage(std::process::id()).expect("own /proc entry");
        assert!(u.rss > 0 && u.fds >= 3 && u.threads >= 1, "{u:?}");
    }
}
