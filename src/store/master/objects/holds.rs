//! Read holds (one client's reads of a version in progress) and retired buffers (no longer
//! reachable by key, kept until their readers or a dropped write's writer are done).

use super::super::MasterConfig;
use super::super::segments::Replica;
use std::time::Instant;

/// One client's reads of a version in progress (see the module docs).
#[derive(Debug, Clone, Copy)]
pub(super) struct Hold {
    pub(super) client: u64,
    /// Reads in progress.
    pub(super) reads: u32,
    /// When the newest of them was granted.
    pub(super) granted: Instant,
}

/// Whether a hold still protects its buffers at `now`; `alive` tells whether a client's
/// heartbeats are arriving.
pub(super) fn hold_live(
    h: &Hold,
    now: Instant,
    cfg: &MasterConfig,
    alive: &dyn Fn(u64) -> bool,
) -> bool {
    now < h.granted + cfg.lease_ttl || (now < h.granted + cfg.read_hold_max && alive(h.client))
}

/// Adds one read of `client`.
pub(super) fn add_hold(holds: &mut Vec<Hold>, client: u64, now: Instant) {
    match holds.iter_mut().find(|h| h.client == client) {
        Some(h) => {
            h.reads = h.reads.saturating_add(1);
            h.granted = now;
        }
        None => holds.push(Hold {
            client,
            reads: 1,
            granted: now,
        }),
    }
}

/// Ends one read of `client` (ignored when it holds none: its hold already expired).
pub(super) fn end_hold(holds: &mut Vec<Hold>, client: u64) {
    if let Some(i) = holds.iter().position(|h| h.client == client) {
        holds[i].reads -= 1;
        if holds[i].reads == 0 {
            holds.swap_remove(i);
        }
    }
}

/// Buffers no longer reachable by key, kept until their readers (or a pre-empted writer) are done.
#[derive(Debug)]
pub(super) struct Retired {
    pub(super) replicas: Vec<Replica>,
    pub(super) holds: Vec<Hold>,
    /// A pre-empted or discarded write: its writer may still be writing until it reports (PutEnd
    /// or PutRevoke) or until `free_at`.
    pub(super) writer: Option<Writer>,
    pub(super) free_at: Instant,
}

/// The writer of dropped write space, and the key it wrote (for the journal).
#[derive(Debug)]
pub(super) struct Writer {
    pub(super) client: u64,
    pub(super) key: Box<str>,
}

impl Retired {
    pub(super) fn due(&self, now: Instant) -> bool {
        match self.writer {
            Some(_) => self.free_at <= now,
            None => self.holds.is_empty(),
        }
    }
}
