//! KV events: the master publishes which keys it stores, as Mooncake's master does
//! (`--enable_kv_events`, Mooncake #2214), on one ZMQ PUB socket, plus what Mooncake lacks: a
//! replay buffer and an inventory, so a new or lagging subscriber resumes without a gap.
//!
//! Wire (Mooncake's): each message is three frames: an empty topic, the 8-byte big-endian
//! sequence number (1, 2, ...), and msgpack `[timestamp_ms, [event_map, ...], dp_rank]` with at
//! most [`MAX_BATCH`] events ([`wire`] has the maps).
//!
//! When (one event per key change, in the order of each key's changes):
//! - `stored` when a put or upsert completes (PutEnd), and for records a fresh disk tier brings
//!   (medium `disk`);
//! - `removed` when a readable value goes: remove, remove_by_regex, remove_all (one per
//!   object), eviction of the last replica, the segments holding its replicas unmounted, the
//!   last replica lost from a disk tier, and an upsert that rewrites the value in place (the key
//!   is unreadable until its PutEnd's `stored`);
//! - `cleared` after a remove_all walk that left no object (as Mooncake).
//!
//! Moving between memory and disk sends nothing (the key stays readable).
//!
//! The request path only pushes onto a bounded lock-free queue (never blocks; when full, the
//! oldest event is dropped and counted). A publisher thread ([`publisher`]) batches, numbers,
//! encodes and sends; events lost to a full queue leave a gap of one sequence number (and of
//! their count in `event_id`s), which tells subscribers to recover.

mod publisher;
pub mod wire;

use crossbeam_queue::{ArrayQueue, SegQueue};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::Thread;
use tidewire::sync::LockClean;

/// Most events in one message (Mooncake's).
pub const MAX_BATCH: usize = 64;

/// Where an object's value is: Mooncake's `medium`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Medium {
    /// In a memory segment (`cpu`).
    Cpu,
    /// On a disk tier only (`disk`).
    Disk,
}

/// One change of the key inventory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The key became readable (a put completed).
    Stored {
        /// The object key.
        key: Box<str>,
        /// Where its value is.
        medium: Medium,
    },
    /// The key stopped being readable.
    Removed {
        /// The object key.
        key: Box<str>,
        /// Where its value was.
        medium: Medium,
    },
    /// No key is left (after remove_all).
    Cleared,
}

impl Event {
    /// The object key (`None` for `cleared`).
    pub fn key(&self) -> Option<&str> {
        match self {
            Event::Stored { key, .. } | Event::Removed { key, .. } => Some(key),
            Event::Cleared => None,
        }
    }

    /// The medium (`None` for `cleared`).
    pub fn medium(&self) -> Option<Medium> {
        match self {
            Event::Stored { medium, .. } | Event::Removed { medium, .. } => Some(*medium),
            Event::Cleared => None,
        }
    }
}

/// The publisher's settings: Mooncake's `--kv_events_*` flags, same defaults, and tidewire's
/// replay buffer.
#[derive(Debug, Clone)]
pub struct KvConfig {
    /// ZMQ endpoint the PUB socket binds (`--kv_events_bind_endpoint`).
    pub bind_endpoint: String,
    /// `backend_id` of every event (`--kv_events_backend_id`, required).
    pub backend_id: String,
    /// `tenant_id` of every event (`--kv_events_tenant_id`, `default`).
    pub tenant_id: String,
    /// `model_name`; empty is nil (`--kv_events_model_name`).
    pub model_name: String,
    /// `block_size`; 0 is nil (`--kv_events_block_size`).
    pub block_size: u64,
    /// `additional_salt`; empty is nil (`--kv_events_additional_salt`).
    pub additional_salt: String,
    /// `lora_name`; empty is nil (`--kv_events_lora_name`).
    pub lora_name: String,
    /// `dp_rank` of every event and message (`--kv_events_dp_rank`, 0).
    pub dp_rank: u32,
    /// Adds `type`, `block_hashes`, `parent_block_hash` (`--kv_events_emit_legacy_compat`, true).
    pub emit_legacy_compat: bool,
    /// Adds `object_key` (`--kv_events_emit_object_key`, true).
    pub emit_object_key: bool,
    /// Events waiting at most; 0: unbounded (`--kv_events_queue_capacity`, 65,536).
    pub queue_capacity: usize,
    /// Bytes of recent messages kept for replay (`--kv_events_replay_bytes`, 64 MiB).
    pub replay_bytes: usize,
}

impl Default for KvConfig {
    fn default() -> Self {
        KvConfig {
            bind_endpoint: "tcp://0.0.0.0:5557".into(),
            backend_id: String::new(),
            tenant_id: "default".into(),
            model_name: String::new(),
            block_size: 0,
            additional_salt: String::new(),
            lora_name: String::new(),
            dp_rank: 0,
            emit_legacy_compat: true,
            emit_object_key: true,
            queue_capacity: 65_536,
            replay_bytes: 64 << 20,
        }
    }
}

enum Queue {
    Bounded(ArrayQueue<Event>),
    Unbounded(SegQueue<Event>),
}

/// Counters, as `GET /kv_events/status` shows them.
#[derive(Debug, Default)]
pub struct Stats {
    /// Messages sent.
    pub published_batches: AtomicU64,
    /// Events in them.
    pub published_events: AtomicU64,
    /// Events lost: dropped from a full queue, or in a message whose send failed.
    pub dropped_events: AtomicU64,
    /// Object events whose key gave no hash (sent with `object_key`, or skipped without it).
    pub skipped_unparsed_keys: AtomicU64,
    /// Events queued (the request path's count).
    pub queued_events: AtomicU64,
    /// Events dropped from a full queue (part of `dropped_events`).
    pub overflowed: AtomicU64,
    /// The sequence number of the last message sent (0: none yet).
    pub last_seq: AtomicU64,
}

/// Recent messages by sequence number, for replay.
#[derive(Default)]
pub(crate) struct Ring {
    /// (sequence, payload frame), oldest first, contiguous in sequence.
    msgs: VecDeque<(u64, Arc<[u8]>)>,
    bytes: usize,
    /// No replay reaches below this sequence: events were lost just before it.
    floor: u64,
}

/// What a replay request gets.
#[derive(Debug, PartialEq, Eq)]
pub enum Replay {
    /// Messages `from..` (possibly none yet), oldest first; more may follow `last`.
    Batches(Vec<(u64, Arc<[u8]>)>),
    /// `from` is older than the buffer, or events were lost after it: take the inventory.
    Gone {
        /// The oldest sequence a replay can start at now.
        oldest: u64,
    },
}

/// The publisher as the request path and the admin routes see it.
pub struct KvEvents {
    cfg: KvConfig,
    queue: Queue,
    /// Counters.
    pub stats: Stats,
    /// Set while the publisher waits for events (a push then wakes it).
    idle: AtomicBool,
    thread: OnceLock<Thread>,
    ring: Mutex<Ring>,
    /// The first sequence number of this leadership's messages (1, or higher after
    /// [`KvEvents::number_after_predecessor`]).
    first_seq: AtomicU64,
    /// Events are not queued: an HA master standing by or rebuilding its state from the
    /// journal (its inventory then is what a subscriber reads).
    muted: AtomicBool,
}

impl KvEvents {
    /// A publisher's queue and counters; [`KvEvents::start`] binds and starts sending.
    pub fn new(cfg: KvConfig) -> Arc<KvEvents> {
        let queue = match cfg.queue_capacity {
            0 => Queue::Unbounded(SegQueue::new()),
            n => Queue::Bounded(ArrayQueue::new(n)),
        };
        Arc::new(KvEvents {
            cfg,
            queue,
            stats: Stats::default(),
            idle: AtomicBool::new(false),
            thread: OnceLock::new(),
            ring: Mutex::new(Ring {
                floor: 1,
                ..Ring::default()
            }),
            first_seq: AtomicU64::new(1),
            muted: AtomicBool::new(false),
        })
    }

    /// The settings.
    pub fn config(&self) -> &KvConfig {
        &self.cfg
    }

    /// Binds the PUB socket and starts the publisher thread (`tw-kv-events`).
    pub fn start(self: &Arc<Self>) -> Result<(), String> {
        publisher::start(self.clone())
    }

    /// Queues one event: never blocks. When the queue is full the oldest event is dropped (and
    /// counted).
    pub fn push(&self, ev: Event) {
        if self.muted.load(Ordering::Relaxed) {
            return;
        }
        self.stats.queued_events.fetch_add(1, Ordering::Relaxed);
        match &self.queue {
            Queue::Bounded(q) => {
                if q.force_push(ev).is_some() {
                    self.stats.dropped_events.fetch_add(1, Ordering::Relaxed);
                    self.stats.overflowed.fetch_add(1, Ordering::SeqCst);
                }
            }
            Queue::Unbounded(q) => q.push(ev),
        }
        // Pairs with the publisher's fence between setting `idle` and looking at the queue.
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.idle.load(Ordering::SeqCst) && self.idle.swap(false, Ordering::SeqCst) {
            if let Some(t) = self.thread.get() {
                t.unpark();
            }
        }
    }

    fn pop(&self) -> Option<Event> {
        match &self.queue {
            Queue::Bounded(q) => q.pop(),
            Queue::Unbounded(q) => q.pop(),
        }
    }

    fn queued(&self) -> bool {
        match &self.queue {
            Queue::Bounded(q) => !q.is_empty(),
            Queue::Unbounded(q) => !q.is_empty(),
        }
    }

    /// Queues nothing until [`number_after_predecessor`](Self::number_after_predecessor): an
    /// HA master's events start when it leads (the changes its rebuild makes are no news: a
    /// subscriber reads them in its inventory).
    pub fn mute_until_leading(&self) {
        self.muted.store(true, Ordering::SeqCst);
    }

    /// Numbers the messages from now on above any number a predecessor could have sent: from
    /// the time in microseconds since the Unix epoch (a leader sends far fewer than one message
    /// a microsecond, and its successor starts at least a lease later). A subscriber sees a gap,
    /// replay answers 410 and it reads this master's inventory. Called by a leader that takes
    /// over, before it serves.
    pub fn number_after_predecessor(&self) {
        let now_us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        let first = now_us.max(self.last_seq() + 1);
        let mut ring = self.ring.lock_clean();
        ring.msgs.clear();
        ring.bytes = 0;
        ring.floor = first;
        self.first_seq.store(first, Ordering::SeqCst);
        self.stats.last_seq.store(first - 1, Ordering::SeqCst);
        self.muted.store(false, Ordering::SeqCst);
    }

    /// The sequence number of the last message sent (0: none yet).
    pub fn last_seq(&self) -> u64 {
        self.stats.last_seq.load(Ordering::SeqCst)
    }

    /// Messages from sequence `from` on, at most `max_bytes` of payload (at least one message
    /// when there is one).
    pub fn replay(&self, from: u64, max_bytes: usize) -> Replay {
        let ring = self.ring.lock_clean();
        let oldest = ring
            .msgs
            .front()
            .map_or(self.last_seq() + 1, |m| m.0)
            .max(ring.floor);
        if from < oldest {
            return Replay::Gone { oldest };
        }
        let mut out = Vec::new();
        let mut bytes = 0;
        let skip = ring.msgs.front().map_or(0, |m| from.saturating_sub(m.0)) as usize;
        for (seq, payload) in ring.msgs.iter().skip(skip) {
            if !out.is_empty() && bytes + payload.len() > max_bytes {
                break;
            }
            bytes += payload.len();
            out.push((*seq, payload.clone()));
        }
        Replay::Batches(out)
    }

    /// Keeps a sent message for replay (the oldest go past the byte budget).
    fn keep(&self, seq: u64, payload: Arc<[u8]>) {
        let mut ring = self.ring.lock_clean();
        if ring.msgs.back().is_some_and(|m| m.0 + 1 != seq) {
            // A sequence number was skipped for lost events: nothing before it replays.
            ring.msgs.clear();
            ring.bytes = 0;
            ring.floor = seq;
        }
        ring.bytes += payload.len();
        ring.msgs.push_back((seq, payload));
        while ring.bytes > self.cfg.replay_bytes && ring.msgs.len() > 1 {
            if let Some((_, p)) = ring.msgs.pop_front() {
                ring.bytes -= p.len();
            }
        }
    }

    /// The publisher lost events before `seq`: no replay reaches across.
    fn lost_before(&self, seq: u64) {
        let mut ring = self.ring.lock_clean();
        ring.msgs.clear();
        ring.bytes = 0;
        ring.floor = seq;
    }

    /// `GET /kv_events/status`: Mooncake's keys, then tidewire's.
    pub fn status_json(&self) -> serde_json::Value {
        let s = &self.stats;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let ring = self.ring.lock_clean();
        serde_json::json!({
            "enabled": true,
            "published_batches": l(&s.published_batches),
            "published_events": l(&s.published_events),
            "dropped_events": l(&s.dropped_events),
            "skipped_unparsed_keys": l(&s.skipped_unparsed_keys),
            "invalid_event_hashes": 0,
            "last_seq": self.last_seq(),
            "replay_oldest_seq": ring.msgs.front().map_or(self.last_seq() + 1, |m| m.0)
                .max(ring.floor),
            "replay_bytes": ring.bytes,
            "backend_id": self.cfg.backend_id,
            "bind_endpoint": self.cfg.bind_endpoint,
        })
    }

    /// Prometheus lines.
    pub fn render(&self) -> String {
        let s = &self.stats;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut t = String::new();
        for (name, help, v) in [
            (
                "kv_events_published_batches_total",
                "KV-event messages sent",
                l(&s.published_batches),
            ),
            (
                "kv_events_published_events_total",
                "KV events sent",
                l(&s.published_events),
            ),
            (
                "kv_events_dropped_events_total",
                "KV events lost (queue full or send failed)",
                l(&s.dropped_events),
            ),
            (
                "kv_events_skipped_unparsed_keys_total",
                "KV events whose key gave no hash",
                l(&s.skipped_unparsed_keys),
            ),
        ] {
            t.push_str(&format!(
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}\n"
            ));
        }
        t.push_str(&format!(
            "# HELP kv_events_last_seq Sequence number of the last KV-event message\n\
             # TYPE kv_events_last_seq gauge\nkv_events_last_seq {}\n",
            self.last_seq()
        ));
        t
    }
}

#[cfg(test)]
mod tests;
