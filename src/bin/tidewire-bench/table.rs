//! The results table printed after a run.

use crate::args::human_size;
use crate::bench::RunResult;
use std::io::Write;

/// Prints the results table.
pub fn print_table(results: &[RunResult], target_cpu_known: bool) {
    let mut o = std::io::stdout().lock();
    let cpu_head = if target_cpu_known {
        "CPU s/GB (both)"
    } else {
        "CPU s/GB (self)"
    };
    let _ = writeln!(
        o,
        "{:<9} {:<6} {:>8} {:>5} {:>3} {:>3} {:>8} {:>10} {:>9} {:>9} {:>9} {:>15} {:>6}",
        "path",
        "op",
        "block",
        "batch",
        "thr",
        "qd",
        "GB/s",
        "ops/s",
        "p50 µs",
        "p99 µs",
        "max µs",
        cpu_head,
        "errors"
    );
    for r in results {
        let _ = writeln!(
            o,
            "{:<9} {:<6} {:>8} {:>5} {:>3} {:>3} {:>8.3} {:>10.0} {:>9} {:>9} {:>9} {:>15} {:>6}",
            r.path,
            r.spec.op.name(),
            human_size(r.spec.block),
            r.spec.batch,
            r.spec.threads,
            r.spec.queue_depth,
            r.gbps(),
            r.ops(),
            fmt_us(r.lat_us[0]),
            fmt_us(r.lat_us[1]),
            fmt_us(r.lat_us[2]),
            r.cpu_per_gb()
                .map_or_else(|| "-".to_string(), |c| format!("{c:.2}")),
            r.errors
        );
    }
    for r in results.iter().filter(|r| r.first_error.is_some()) {
        let _ = writeln!(
            o,
            "error in {} {}: {}",
            r.spec.op.name(),
            human_size(r.spec.block),
            r.first_error.as_deref().unwrap_or_default()
        );
    }
}

/// Microseconds with one decimal below 1000, whole above.
pub fn fmt_us(us: f64) -> String {
    if us < 1000.0 {
        format!("{us:.1}")
    } else {
        format!("{us:.0}")
    }
}
