//! CPU accounting (getrusage for this process, /proc for the target) and terminal detection.

use std::time::Duration;

/// User + system CPU time of this process (all threads).
pub fn self_cpu() -> Duration {
    // SAFETY: getrusage only writes the zero-initialised struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a rusage struct.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return Duration::ZERO;
    }
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// User + system CPU time of process `pid` from `/proc/<pid>/stat`, if readable.
pub fn proc_cpu(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat_cpu(&stat, clock_ticks())
}

fn clock_ticks() -> u64 {
    // SAFETY: sysconf has no memory effects.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as u64 } else { 100 }
}

/// utime + stime (fields 14 and 15) of a `/proc/<pid>/stat` line; the command name in
/// parentheses may contain spaces, so fields are counted after the last `)`.
fn parse_stat_cpu(stat: &str, ticks: u64) -> Option<Duration> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state), so field N is f[N - 3].
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    Some(Duration::from_secs_f64(
        (utime + stime) as f64 / ticks as f64,
    ))
}

/// Whether stderr is a terminal.
pub fn stderr_is_tty() -> bool {
    // SAFETY: isatty has no memory effects.
    unsafe { libc::isatty(2) == 1 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields() {
        let line = "123 (a b) c) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 1 0";
        assert_eq!(parse_stat_cpu(line, 100), Some(Duration::from_secs(3)));
        assert!(parse_stat_cpu("garbage", 100).is_none());
    }

    #[test]
    fn own_cpu_is_readable() {
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        assert!(self_cpu() > Duration::ZERO);
        assert!(proc_cpu(std::process::id()).is_some());
    }
}
