//! The master's settings ([`MasterConfig`]: mooncake_master's flags, same defaults).

use super::segments::Strategy;
use super::tiering;
use std::time::Duration;

/// Master behaviour (mooncake_master's flags, same defaults).
#[derive(Debug, Clone)]
pub struct MasterConfig {
    /// Read lease granted by Get/Exist (`--default_kv_lease_ttl`, 10 s).
    pub lease_ttl: Duration,
    /// Soft-pin TTL (`--default_kv_soft_pin_ttl`, 30 min).
    pub soft_pin_ttl: Duration,
    /// Whether soft-pinned objects may be evicted (`--allow_evict_soft_pinned_objects`, true).
    pub allow_evict_soft_pinned: bool,
    /// Usage fraction that starts eviction (`--eviction_high_watermark_ratio`, 0.90).
    pub eviction_high_watermark: f64,
    /// Fraction of capacity one eviction pass frees (`--eviction_ratio`, 0.05).
    pub eviction_ratio: f64,
    /// A client silent this long is suspended: nothing new is placed on its segments
    /// (`--client_ttl`, 10 s).
    pub client_ttl: Duration,
    /// A suspended client that pings again within this grace keeps its segments and objects;
    /// after `client_ttl + client_grace` of silence they are unmounted (`--client_grace_sec`, 10).
    pub client_grace: Duration,
    /// The longest a read hold lasts while its reader's heartbeats arrive (it lasts at least the
    /// lease whatever they do) (`--max_read_hold_sec`, 120).
    pub read_hold_max: Duration,
    /// An unfinished write older than this is discarded (`--put_start_discard_timeout_sec`, 30).
    pub put_start_discard_timeout: Duration,
    /// A discarded write's space is reused after this (`--put_start_release_timeout_sec`, 600).
    pub put_start_release_timeout: Duration,
    /// Placement (`--allocation_strategy`, random).
    pub strategy: Strategy,
    /// The disk tier (`--enable_offload` and its siblings).
    pub tier: tiering::TierConfig,
}

impl Default for MasterConfig {
    fn default() -> Self {
        MasterConfig {
            lease_ttl: Duration::from_millis(10_000),
            soft_pin_ttl: Duration::from_millis(1_800_000),
            allow_evict_soft_pinned: true,
            eviction_high_watermark: 0.90,
            eviction_ratio: 0.05,
            client_ttl: Duration::from_secs(10),
            client_grace: Duration::from_secs(10),
            read_hold_max: Duration::from_secs(120),
            put_start_discard_timeout: Duration::from_secs(30),
            put_start_release_timeout: Duration::from_secs(600),
            strategy: Strategy::Random,
            tier: tiering::TierConfig::default(),
        }
    }
}
