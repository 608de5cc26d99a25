//! The process's file descriptors, as the connection core sees them: the soft limit raised to
//! the hard one when the first server starts (as Go's runtime does at start-up), and the share of
//! it that server connections may hold before the reactor evicts the quietest idle one to take a
//! new one. The rest is kept for everything else the process opens (its own connections to
//! peers, files, the listeners themselves), so a flood of idle connections can neither lock a
//! new peer out nor starve the process.

use crate::log::Level;
use std::sync::OnceLock;

/// The descriptors kept back from server connections: an eighth of the limit, at least 64 and
/// at most 4,096.
pub(super) fn reserve(limit: u64) -> u64 {
    (limit / 8).clamp(64, 4096)
}

/// How many server connections may be open at once before the reactor makes room: the soft
/// `RLIMIT_NOFILE` (after [`raise_limit`]) less [`reserve`], never below 16.
pub(super) fn connection_budget() -> usize {
    let limit = soft_limit();
    usize::try_from(limit.saturating_sub(reserve(limit)).max(16)).unwrap_or(usize::MAX)
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit, once per process (later calls do
/// nothing), and says so at debug level. Returns the soft limit in force afterwards.
pub(super) fn raise_limit() -> u64 {
    static RAISED: OnceLock<u64> = OnceLock::new();
    *RAISED.get_or_init(|| {
        let Some((soft, hard)) = get() else {
            return u64::MAX;
        };
        if soft >= hard {
            return soft;
        }
        let lim = libc::rlimit {
            rlim_cur: hard,
            rlim_max: hard,
        };
        // SAFETY: setrlimit reads one initialised `rlimit` from a valid reference.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } == 0 {
            tw_log!(
                Level::Debug,
                "net: raised the open-file limit from {soft} to {hard} (the hard limit)"
            );
            hard
        } else {
            let e = std::io::Error::last_os_error();
            tw_log!(
                Level::Debug,
                "net: cannot raise the open-file limit from {soft} to {hard}: {e}"
            );
            soft
        }
    })
}

/// The soft `RLIMIT_NOFILE` now (`u64::MAX` when unlimited or unknown).
pub(super) fn soft_limit() -> u64 {
    get().map_or(u64::MAX, |(soft, _)| soft)
}

fn get() -> Option<(u64, u64)> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one `rlimit` through a valid mutable reference.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return None;
    }
    Some((lim.rlim_cur, lim.rlim_max))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reserve_grows_with_the_limit_within_bounds() {
        assert_eq!(reserve(256), 64);
        assert_eq!(reserve(1024), 128);
        assert_eq!(reserve(65_536), 4096);
        assert_eq!(reserve(u64::MAX), 4096);
    }
}
