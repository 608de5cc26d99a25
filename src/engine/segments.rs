//! The segment table: name ↔ id, cached descriptors, and the route each segment uses.

use crate::metadata::SegmentDesc;
use crate::sync::RwLockClean;
use crate::transport::Route;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

/// Segment id type (`int32_t` in both C APIs). 0 is this engine.
pub type SegmentId = i32;

/// Id of this engine's own segment.
pub const LOCAL_SEGMENT: SegmentId = 0;

/// An opened remote segment.
pub struct Segment {
    /// Name it was opened with.
    pub name: String,
    /// RPC host and port for notifications.
    pub rpc: (String, u16),
    /// Cached descriptor and route (replaced on refresh); no route when the peer publishes a
    /// protocol this engine cannot speak.
    pub state: RwLock<(Arc<SegmentDesc>, Option<Route>)>,
}

impl Segment {
    /// Current route (`None`: unsupported protocol).
    pub fn route(&self) -> Option<Route> {
        self.state.read_clean().1.clone()
    }

    /// Current descriptor.
    pub fn desc(&self) -> Arc<SegmentDesc> {
        self.state.read_clean().0.clone()
    }
}

/// Opened segments.
#[derive(Default)]
pub struct SegmentTable {
    by_name: HashMap<String, SegmentId>,
    by_id: HashMap<SegmentId, Arc<Segment>>,
    next: SegmentId,
}

impl SegmentTable {
    /// Cached id for `name`.
    pub fn id_of(&self, name: &str) -> Option<SegmentId> {
        self.by_name.get(name).copied()
    }

    /// The segment with `id`.
    pub fn get(&self, id: SegmentId) -> Option<Arc<Segment>> {
        self.by_id.get(&id).cloned()
    }

    /// Adds a segment and returns its new id (from 1).
    pub fn insert(&mut self, seg: Segment) -> SegmentId {
        self.next = self.next.checked_add(1).unwrap_or(1).max(1);
        let id = self.next;
        self.by_name.insert(seg.name.clone(), id);
        self.by_id.insert(id, Arc::new(seg));
        id
    }

    /// Forgets `id`; returns whether it existed.
    pub fn remove(&mut self, id: SegmentId) -> bool {
        match self.by_id.remove(&id) {
            Some(s) => {
                self.by_name.remove(&s.name);
                true
            }
            None => false,
        }
    }

    /// Every open segment.
    pub fn all(&self) -> Vec<(SegmentId, Arc<Segment>)> {
        self.by_id.iter().map(|(k, v)| (*k, v.clone())).collect()
    }
}
