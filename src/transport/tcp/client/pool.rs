//! The peers of one engine: started on first use, dropped again once nothing refers to them.
//!
//! A peer (its lane threads and connections) is evicted when the client's map holds the only
//! reference (no open segment routes to it, no submit is using it) and nothing was submitted to
//! it for longer than the transfer deadline: every slice ends by its deadline, so none of its
//! work can still be pending. Without this, every restarted peer (new port, new address) left
//! two threads per lane and their sockets behind for the engine's lifetime.

use super::{ClientConfig, Peer, PeerAddr};
use crate::sync::LockClean;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Slack beyond the transfer deadline before an unused peer is evicted.
const EVICT_SLACK: Duration = Duration::from_secs(1);

/// All peers of one engine.
pub struct TcpClient {
    cfg: ClientConfig,
    peers: Mutex<HashMap<PeerAddr, Arc<Peer>>>,
}

impl TcpClient {
    /// A client with no peers yet.
    pub fn new(cfg: ClientConfig) -> TcpClient {
        TcpClient {
            cfg,
            peers: Mutex::default(),
        }
    }

    /// The lanes to `addr`, started on first use. Unused peers are evicted first.
    pub fn peer(&self, addr: &PeerAddr) -> std::io::Result<Arc<Peer>> {
        let mut peers = self.peers.lock_clean();
        let evicted = self.take_unused(&mut peers, Some(addr));
        let found = match peers.get(addr) {
            Some(p) => Ok(p.clone()),
            None => Peer::start(addr.clone(), self.cfg.clone()).map(|p| {
                let p = Arc::new(p);
                peers.insert(addr.clone(), p.clone());
                p
            }),
        };
        drop(peers);
        // Joining their (idle) lane threads happens outside the lock.
        drop(evicted);
        found
    }

    /// Drops peers that nothing refers to and that had no submit within the transfer deadline
    /// (called when a segment is closed). Returns how many were dropped.
    pub fn evict_unused(&self) -> usize {
        let mut peers = self.peers.lock_clean();
        let evicted = self.take_unused(&mut peers, None);
        drop(peers);
        evicted.len()
    }

    /// Peers currently started.
    pub fn peer_count(&self) -> usize {
        self.peers.lock_clean().len()
    }

    fn take_unused(
        &self,
        peers: &mut HashMap<PeerAddr, Arc<Peer>>,
        keep: Option<&PeerAddr>,
    ) -> Vec<Arc<Peer>> {
        let quiet = self.cfg.transfer_timeout + EVICT_SLACK;
        // strong_count == 1: only this map refers to the peer, and new references are only
        // handed out under the map's lock, which the caller holds.
        let unused: Vec<PeerAddr> = peers
            .iter()
            .filter(|(a, p)| {
                Some(*a) != keep && Arc::strong_count(p) == 1 && p.unused_for() > quiet
            })
            .map(|(a, _)| a.clone())
            .collect();
        unused.iter().filter_map(|a| peers.remove(a)).collect()
    }

    /// Stops every lane, failing queued work.
    pub fn shutdown(&self) {
        let peers: Vec<_> = self.peers.lock_clean().drain().map(|(_, p)| p).collect();
        drop(peers);
    }
}
