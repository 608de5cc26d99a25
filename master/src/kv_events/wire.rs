//! Mooncake's KV-event payload: msgpack `[timestamp_ms, [event_map, ...], dp_rank]`, each map
//! written field by field in the order Mooncake's publisher writes them (see the module docs
//! of [`super`] for the fields).

use super::{Event, KvConfig, Medium};
use rmp::encode;

/// The 64-bit hash of a key for `seq_hashes`: the key itself when it is a decimal number or a
/// `0x` hexadecimal number (the low 64 bits of a longer hexadecimal one); `None` otherwise.
pub fn key_hash(key: &str) -> Option<u64> {
    if let Some(hex) = key.strip_prefix("0x").or_else(|| key.strip_prefix("0X")) {
        if hex.is_empty() || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let low = &hex[hex.len().saturating_sub(16)..];
        return u64::from_str_radix(low, 16).ok();
    }
    if key.is_empty() || !key.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    key.parse().ok()
}

fn str_or_nil(out: &mut Vec<u8>, s: &str) {
    if s.is_empty() {
        let _ = encode::write_nil(out);
    } else {
        let _ = encode::write_str(out, s);
    }
}

fn field(out: &mut Vec<u8>, name: &str) {
    let _ = encode::write_str(out, name);
}

/// What one batch's encoding counted.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Encoded {
    /// Events written.
    pub events: u64,
    /// Object events whose key gave no hash (written with `object_key`, or skipped without it).
    pub unparsed: u64,
}

/// Encodes one batch: `events` numbered from `first_id`, all stamped `ts_ms`. An object event
/// whose key gives no hash is skipped when object keys are not emitted (nothing would name it).
pub fn encode_batch(
    cfg: &KvConfig,
    ts_ms: i64,
    first_id: u64,
    events: &[Event],
    out: &mut Vec<u8>,
) -> Encoded {
    let mut counted = Encoded::default();
    let hashes: Vec<Option<u64>> = events.iter().map(|e| e.key().and_then(key_hash)).collect();
    let sent: Vec<bool> = events
        .iter()
        .zip(&hashes)
        .map(|(e, h)| e.key().is_none() || h.is_some() || cfg.emit_object_key)
        .collect();
    let _ = encode::write_array_len(out, 3);
    let _ = encode::write_sint(out, ts_ms);
    let n = sent.iter().filter(|s| **s).count();
    let _ = encode::write_array_len(out, n as u32);
    for (i, ev) in events.iter().enumerate() {
        if ev.key().is_some() && hashes[i].is_none() {
            counted.unparsed += 1;
        }
        if !sent[i] {
            continue;
        }
        write_event(cfg, ts_ms, first_id + i as u64, ev, hashes[i], out);
        counted.events += 1;
    }
    let _ = encode::write_uint(out, u64::from(cfg.dp_rank));
    counted
}

fn write_event(
    cfg: &KvConfig,
    ts_ms: i64,
    id: u64,
    ev: &Event,
    hash: Option<u64>,
    out: &mut Vec<u8>,
) {
    let legacy = cfg.emit_legacy_compat;
    let (kind, legacy_kind) = match ev {
        Event::Stored { .. } => ("stored", "BlockStored"),
        Event::Removed { .. } => ("removed", "BlockRemoved"),
        Event::Cleared => ("cleared", "AllBlocksCleared"),
    };
    // Common fields: event_id, timestamp, event_type, model_name, block_size, additional_salt,
    // lora_name, tenant_id, backend_id, medium, dp_rank (11), legacy type (1).
    let mut len = 11 + u32::from(legacy);
    let key = ev.key();
    if let Some(_k) = key {
        // group_id, seq_hashes, base_block_idx (3), object_key, legacy block_hashes.
        len += 3 + u32::from(cfg.emit_object_key) + u32::from(legacy);
        if matches!(ev, Event::Stored { .. }) {
            // parent_hash, token_ids, legacy parent_block_hash.
            len += 2 + u32::from(legacy);
        }
    }
    let _ = encode::write_map_len(out, len);
    field(out, "event_id");
    let _ = encode::write_uint(out, id);
    field(out, "timestamp");
    let _ = encode::write_sint(out, ts_ms);
    field(out, "event_type");
    let _ = encode::write_str(out, kind);
    if legacy {
        field(out, "type");
        let _ = encode::write_str(out, legacy_kind);
    }
    field(out, "model_name");
    str_or_nil(out, &cfg.model_name);
    field(out, "block_size");
    match cfg.block_size {
        0 => {
            let _ = encode::write_nil(out);
        }
        b => {
            let _ = encode::write_uint(out, b);
        }
    }
    field(out, "additional_salt");
    str_or_nil(out, &cfg.additional_salt);
    field(out, "lora_name");
    str_or_nil(out, &cfg.lora_name);
    field(out, "tenant_id");
    let _ = encode::write_str(out, &cfg.tenant_id);
    field(out, "backend_id");
    let _ = encode::write_str(out, &cfg.backend_id);
    field(out, "medium");
    match ev.medium() {
        Some(m) => {
            let _ = encode::write_str(out, m.as_str());
        }
        None => {
            let _ = encode::write_nil(out);
        }
    }
    field(out, "dp_rank");
    let _ = encode::write_uint(out, u64::from(cfg.dp_rank));
    let Some(key) = key else {
        return;
    };
    field(out, "group_id");
    let _ = encode::write_nil(out);
    let hashes = |out: &mut Vec<u8>| {
        let _ = encode::write_array_len(out, u32::from(hash.is_some()));
        if let Some(h) = hash {
            let _ = encode::write_uint(out, h);
        }
    };
    field(out, "seq_hashes");
    hashes(out);
    if legacy {
        field(out, "block_hashes");
        hashes(out);
    }
    field(out, "base_block_idx");
    let _ = encode::write_uint(out, 0);
    if cfg.emit_object_key {
        field(out, "object_key");
        let _ = encode::write_str(out, key);
    }
    if matches!(ev, Event::Stored { .. }) {
        field(out, "parent_hash");
        let _ = encode::write_nil(out);
        field(out, "token_ids");
        let _ = encode::write_nil(out);
        if legacy {
            field(out, "parent_block_hash");
            let _ = encode::write_nil(out);
        }
    }
}

impl Medium {
    /// Mooncake's name: `cpu` (memory) or `disk`.
    pub fn as_str(self) -> &'static str {
        match self {
            Medium::Cpu => "cpu",
            Medium::Disk => "disk",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmpv::Value;

    fn cfg() -> KvConfig {
        KvConfig {
            backend_id: "pool-a".into(),
            model_name: "m".into(),
            block_size: 16,
            ..KvConfig::default()
        }
    }

    fn decode(bytes: &[u8]) -> Value {
        let mut r = bytes;
        let v = rmpv::decode::read_value(&mut r).unwrap();
        assert!(r.is_empty(), "trailing bytes");
        v
    }

    fn get<'a>(m: &'a Value, k: &str) -> Option<&'a Value> {
        m.as_map()
            .unwrap()
            .iter()
            .find(|(n, _)| n.as_str() == Some(k))
            .map(|(_, v)| v)
    }

    fn keys(m: &Value) -> Vec<&str> {
        m.as_map()
            .unwrap()
            .iter()
            .map(|(k, _)| k.as_str().unwrap())
            .collect()
    }

    #[test]
    fn key_hashes() {
        assert_eq!(key_hash("12345"), Some(12345));
        assert_eq!(key_hash("0xff"), Some(255));
        assert_eq!(key_hash("0x0123456789abcdef0011"), Some(0x456789abcdef0011));
        assert_eq!(key_hash("18446744073709551616"), None);
        assert_eq!(key_hash("key-1"), None);
        assert_eq!(key_hash(""), None);
        assert_eq!(key_hash("0x"), None);
        assert_eq!(key_hash("-1"), None);
    }

    #[test]
    fn batch_layout() {
        let events = vec![
            Event::Stored {
                key: "0x10".into(),
                medium: Medium::Cpu,
            },
            Event::Removed {
                key: "k".into(),
                medium: Medium::Disk,
            },
            Event::Cleared,
        ];
        let mut out = Vec::new();
        let c = encode_batch(&cfg(), 1_700_000_000_123, 7, &events, &mut out);
        assert_eq!(
            c,
            Encoded {
                events: 3,
                unparsed: 1
            }
        );
        let v = decode(&out);
        let top = v.as_array().unwrap();
        assert_eq!(top.len(), 3);
        assert_eq!(top[0].as_i64(), Some(1_700_000_000_123));
        assert_eq!(top[2].as_u64(), Some(0));
        let evs = top[1].as_array().unwrap();
        assert_eq!(evs.len(), 3);

        let s = &evs[0];
        assert_eq!(
            keys(s),
            [
                "event_id",
                "timestamp",
                "event_type",
                "type",
                "model_name",
                "block_size",
                "additional_salt",
                "lora_name",
                "tenant_id",
                "backend_id",
                "medium",
                "dp_rank",
                "group_id",
                "seq_hashes",
                "block_hashes",
                "base_block_idx",
                "object_key",
                "parent_hash",
                "token_ids",
                "parent_block_hash",
            ]
        );
        assert_eq!(get(s, "event_id").unwrap().as_u64(), Some(7));
        assert_eq!(
            get(s, "timestamp").unwrap().as_i64(),
            Some(1_700_000_000_123)
        );
        assert_eq!(get(s, "event_type").unwrap().as_str(), Some("stored"));
        assert_eq!(get(s, "type").unwrap().as_str(), Some("BlockStored"));
        assert_eq!(get(s, "model_name").unwrap().as_str(), Some("m"));
        assert_eq!(get(s, "block_size").unwrap().as_u64(), Some(16));
        assert!(get(s, "additional_salt").unwrap().is_nil());
        assert!(get(s, "lora_name").unwrap().is_nil());
        assert_eq!(get(s, "tenant_id").unwrap().as_str(), Some("default"));
        assert_eq!(get(s, "backend_id").unwrap().as_str(), Some("pool-a"));
        assert_eq!(get(s, "medium").unwrap().as_str(), Some("cpu"));
        assert!(get(s, "group_id").unwrap().is_nil());
        let h = get(s, "seq_hashes").unwrap().as_array().unwrap();
        assert_eq!(h.len(), 1);
        assert_eq!(h[0].as_u64(), Some(16));
        assert_eq!(get(s, "block_hashes"), get(s, "seq_hashes"));
        assert_eq!(get(s, "base_block_idx").unwrap().as_u64(), Some(0));
        assert_eq!(get(s, "object_key").unwrap().as_str(), Some("0x10"));
        assert!(get(s, "parent_hash").unwrap().is_nil());
        assert!(get(s, "token_ids").unwrap().is_nil());

        let r = &evs[1];
        assert_eq!(get(r, "event_id").unwrap().as_u64(), Some(8));
        assert_eq!(get(r, "event_type").unwrap().as_str(), Some("removed"));
        assert_eq!(get(r, "type").unwrap().as_str(), Some("BlockRemoved"));
        assert_eq!(get(r, "medium").unwrap().as_str(), Some("disk"));
        assert!(get(r, "seq_hashes").unwrap().as_array().unwrap().is_empty());
        assert_eq!(get(r, "object_key").unwrap().as_str(), Some("k"));
        assert!(get(r, "parent_hash").is_none());

        let c = &evs[2];
        assert_eq!(keys(c).len(), 12);
        assert_eq!(get(c, "event_type").unwrap().as_str(), Some("cleared"));
        assert_eq!(get(c, "type").unwrap().as_str(), Some("AllBlocksCleared"));
        assert!(get(c, "medium").unwrap().is_nil());
        assert!(get(c, "object_key").is_none());
    }

    #[test]
    fn without_legacy_or_keys() {
        let cfg = KvConfig {
            emit_legacy_compat: false,
            emit_object_key: false,
            dp_rank: 3,
            block_size: 0,
            ..cfg()
        };
        let events = vec![
            Event::Stored {
                key: "name".into(),
                medium: Medium::Cpu,
            },
            Event::Removed {
                key: "42".into(),
                medium: Medium::Cpu,
            },
        ];
        let mut out = Vec::new();
        let c = encode_batch(&cfg, 5, 1, &events, &mut out);
        assert_eq!(
            c,
            Encoded {
                events: 1,
                unparsed: 1
            }
        );
        let v = decode(&out);
        let top = v.as_array().unwrap();
        assert_eq!(top[2].as_u64(), Some(3));
        let evs = top[1].as_array().unwrap();
        assert_eq!(evs.len(), 1);
        let r = &evs[0];
        // The unparsed key's event was skipped; the numbers stay those of the queue order.
        assert_eq!(get(r, "event_id").unwrap().as_u64(), Some(2));
        assert!(get(r, "type").is_none());
        assert!(get(r, "block_hashes").is_none());
        assert!(get(r, "object_key").is_none());
        assert!(get(r, "block_size").unwrap().is_nil());
        assert_eq!(get(r, "dp_rank").unwrap().as_u64(), Some(3));
        assert_eq!(keys(r).len(), 14);
    }
}
