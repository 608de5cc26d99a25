//! Read holds (one client's reads of a version in progress) and retired buffers (no longer
//! reachable by key, kept until their readers or a dropped write's writer are done).

use super::super::MasterConfig;
use super::Tick;
use super::replicas::Replicas;

/// One client's reads of a version in progress (see the module docs).
#[derive(Debug, Clone, Copy)]
pub(super) struct Hold {
    pub(super) client: u64,
    /// Reads in progress.
    pub(super) reads: u32,
    /// When the newest of them was granted.
    pub(super) granted: Tick,
}

/// A version's read holds: nothing allocated while there are none (the common case). Boxed
/// on purpose: 8 bytes in every record instead of a `Vec`'s 24, for a list that is usually
/// empty.
#[derive(Debug, Default)]
#[allow(clippy::box_collection)]
pub(super) struct Holds(Option<Box<Vec<Hold>>>);

impl Holds {
    pub(super) fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// Adds one read of `client`.
    pub(super) fn add(&mut self, client: u64, now: Tick) {
        let holds = self.0.get_or_insert_with(Default::default);
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
    pub(super) fn end(&mut self, client: u64) {
        let Some(holds) = self.0.as_mut() else {
            return;
        };
        if let Some(i) = holds.iter().position(|h| h.client == client) {
            holds[i].reads -= 1;
            if holds[i].reads == 0 {
                holds.swap_remove(i);
            }
        }
        if holds.is_empty() {
            self.0 = None;
        }
    }

    /// The same holds, for buffers that leave this version while its reads may still use
    /// them (they end by their lease or their client's heartbeats, not by `ReadDone`).
    pub(super) fn copied(&self) -> Holds {
        Holds(self.0.clone())
    }

    /// The holds, one per client.
    pub(super) fn iter(&self) -> impl Iterator<Item = &Hold> {
        self.0.iter().flat_map(|h| h.iter())
    }

    /// Keeps the holds `keep` accepts.
    pub(super) fn retain(&mut self, keep: impl FnMut(&Hold) -> bool) {
        if let Some(holds) = self.0.as_mut() {
            holds.retain(keep);
            if holds.is_empty() {
                self.0 = None;
            }
        }
    }
}

/// Whether a hold still protects its buffers at `now`; `alive` tells whether a client's
/// heartbeats are arriving.
pub(super) fn hold_live(
    h: &Hold,
    now: Tick,
    cfg: &MasterConfig,
    alive: &dyn Fn(u64) -> bool,
) -> bool {
    now < h.granted.saturating_add(super::nanos(cfg.lease_ttl))
        || (now < h.granted.saturating_add(super::nanos(cfg.read_hold_max)) && alive(h.client))
}

/// Buffers no longer reachable by key, kept until their readers (or a pre-empted writer) are done.
#[derive(Debug)]
pub(super) struct Retired {
    /// Bytes of each replica.
    pub(super) size: u64,
    pub(super) replicas: Replicas,
    pub(super) holds: Holds,
    /// A pre-empted or discarded write: its writer may still be writing until it reports (PutEnd
    /// or PutRevoke) or until `free_at`.
    pub(super) writer: Option<Writer>,
    pub(super) free_at: Tick,
}

/// The writer of dropped write space, and the key it wrote (for the journal).
#[derive(Debug)]
pub(super) struct Writer {
    pub(super) client: u64,
    pub(super) key: Box<str>,
}

impl Retired {
    pub(super) fn due(&self, now: Tick) -> bool {
        match self.writer {
            Some(_) => self.free_at <= now,
            None => self.holds.is_empty(),
        }
    }
}
