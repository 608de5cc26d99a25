//! Minimal leveled logging to stderr. Level from `TW_LOG_LEVEL` (or Mooncake's `MC_LOG_LEVEL`):
//! `error`, `warn`/`warning` (default), `info`, `debug`/`trace`.

use std::sync::OnceLock;

/// Severity, most severe first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Failures the user must see.
    Error = 0,
    /// Degraded behaviour.
    Warn = 1,
    /// Lifecycle events.
    Info = 2,
    /// Everything else.
    Debug = 3,
}

fn parse(v: &str) -> Option<Level> {
    match v.to_ascii_lowercase().as_str() {
        "error" => Some(Level::Error),
        "warn" | "warning" => Some(Level::Warn),
        "info" => Some(Level::Info),
        "debug" | "trace" => Some(Level::Debug),
        _ => None,
    }
}

/// The configured maximum level.
pub fn max_level() -> Level {
    static LEVEL: OnceLock<Level> = OnceLock::new();
    *LEVEL.get_or_init(|| {
        ["TW_LOG_LEVEL", "MC_LOG_LEVEL"]
            .iter()
            .find_map(|k| std::env::var(k).ok().and_then(|v| parse(&v)))
            .unwrap_or(Level::Warn)
    })
}

/// Logs one line if `level` is enabled (in scope everywhere below `lib.rs`'s `mod log`; other
/// crates of the project, the master's, `use tidewire::tw_log`).
#[macro_export]
macro_rules! tw_log {
    ($level:expr, $($arg:tt)*) => {
        if $level <= $crate::log::max_level() {
            eprintln!("[tidewire {:?}] {}", $level, format_args!($($arg)*));
        }
    };
}
