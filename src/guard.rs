//! Worker threads run their body inside `catch_unwind`: a panic is logged with the thread's job
//! instead of ending the thread silently. Work the thread held is not lost: every slice it owned
//! is dropped during unwinding, and a dropped `SliceDone` fails its task.

use crate::log::Level;

/// Runs `f`, logging (not propagating) a panic; `what` names the thread's job.
pub(crate) fn guarded(what: &str, f: impl FnOnce()) {
    if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        let why = p
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".to_string());
        tw_log!(
            Level::Error,
            "{what}: worker thread panicked ({why}); the work it held failed"
        );
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_panic_is_contained() {
        let mut ran = false;
        super::guarded("test", || {
            ran = true;
            panic!("boom");
        });
        assert!(ran);
    }
}
