//! A fixed number of slots (connections, sessions): `try_take` hands out an RAII permit or
//! nothing, so a server can refuse work beyond its cap instead of starting another thread.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A counter of taken slots with a cap.
#[derive(Debug)]
pub struct Slots {
    cap: usize,
    used: AtomicUsize,
}

/// One taken slot; given back on drop.
#[derive(Debug)]
pub struct Permit(Arc<Slots>);

impl Slots {
    /// `cap` slots, all free.
    pub fn new(cap: usize) -> Arc<Slots> {
        Arc::new(Slots {
            cap,
            used: AtomicUsize::new(0),
        })
    }

    /// A slot, or `None` when all are taken.
    pub fn try_take(self: &Arc<Self>) -> Option<Permit> {
        // Relaxed: the count guards a resource limit, not data.
        self.used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| {
                (u < self.cap).then_some(u + 1)
            })
            .ok()
            .map(|_| Permit(self.clone()))
    }

    /// Slots taken now.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// The cap.
    pub fn cap(&self) -> usize {
        self.cap
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.0.used.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_and_gives_back() {
        let s = Slots::new(2);
        let a = s.try_take().unwrap();
        let _b = s.try_take().unwrap();
        assert!(s.try_take().is_none());
        drop(a);
        assert_eq!(s.used(), 1);
        assert!(s.try_take().is_some());
    }
}
