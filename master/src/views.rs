//! Read-only views of the master for the admin routes.

use super::*;

/// Read-only views for the admin routes: each takes the locks it needs briefly and changes
/// nothing (no lease, no read hold, no access time).
impl Master {
    /// Whether this master serves requests (`false`: an HA standby, or a leader still
    /// rebuilding its state).
    pub fn serving(&self) -> bool {
        self.standby.read_clean().is_none()
    }

    /// Clients the master is tracking (heard from within `client_ttl + client_grace`).
    pub fn client_count(&self) -> usize {
        self.clients.lock_clean().len()
    }

    /// Objects stored (complete or in flight).
    pub fn object_count(&self) -> usize {
        self.objs.count()
    }

    /// Keys of complete objects: at most `max_items` keys and `max_bytes` key bytes.
    pub fn list_keys(&self, max_items: usize, max_bytes: usize) -> objects::KeyList {
        self.objs.list_keys(max_items, max_bytes)
    }

    /// Every complete object's key, each followed by `\n`, handed to `out` one shard's keys at
    /// a time with no lock held (see [`objects::Objects::each_key_chunk`]).
    pub fn each_key_chunk(
        &self,
        out: &mut dyn FnMut(&[u8]) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        self.objs.each_key_chunk(out)
    }

    /// One key's complete value: size, replicas, lease, pins.
    pub fn query_key(&self, key: &str) -> Result<objects::KeyInfo, i32> {
        self.objs.peek(key, &self.segs)
    }

    /// Every mounted segment with its usage, sorted by name.
    pub fn segment_details(&self) -> Vec<segments::SegmentInfo> {
        self.segs.details()
    }

    /// One mounted segment with its usage.
    pub fn segment_detail(&self, name: &str) -> Option<segments::SegmentInfo> {
        self.segs.detail(name)
    }
}
