//! The segment descriptor, byte-compatible with Mooncake's `encodeSegmentDesc`/`decodeSegmentDesc`
//! for the TCP protocol. tidewire-only keys start with `tw_`; Mooncake ignores unknown keys.

use crate::error::{Error, ErrorKind, Result};
use serde::{Deserialize, Deserializer, Serialize};

/// One published buffer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BufferDesc {
    /// Absolute address in the owner's address space.
    pub addr: u64,
    /// Length in bytes.
    pub length: u64,
    /// Local keys, one per entry of `devices` (RDMA only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lkey: Vec<u32>,
    /// Mooncake TCP uses the segment name here; RDMA uses the location.
    pub name: String,
    /// Remote keys, one per entry of `devices` (RDMA only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rkey: Vec<u32>,
}

/// One published RDMA device (`devices[]` of an RDMA descriptor).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceDesc {
    /// GID as 16 colon-separated lowercase hex bytes.
    pub gid: String,
    /// Port LID (0 on RoCE).
    #[serde(default)]
    pub lid: u16,
    /// Device name (`mlx5_0`).
    pub name: String,
}

/// A peer's segment descriptor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentDesc {
    /// Registered buffers.
    #[serde(default)]
    pub buffers: Vec<BufferDesc>,
    /// RDMA devices, in the order of every buffer's `rkey`/`lkey` (RDMA only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<DeviceDesc>,
    /// Segment name.
    pub name: String,
    /// NIC priority matrix (RDMA only): `{"cpu:0": [[preferred], [available]]}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_matrix: Option<serde_json::Value>,
    /// `"tcp"` or `"rdma"` (Mooncake multi-protocol builds publish an array; we keep the first).
    #[serde(deserialize_with = "protocol_string")]
    pub protocol: String,
    /// Unused by TCP; Mooncake's wheel always emits it.
    #[serde(default)]
    pub rdma_server_name: String,
    /// Data host (newer Mooncake); empty means "the host part of the name".
    #[serde(default)]
    pub tcp_data_host: String,
    /// Data port.
    #[serde(default)]
    pub tcp_data_port: u16,
    /// 2 = acknowledged framing; a missing field means 1.
    #[serde(default = "proto_v1")]
    pub tcp_proto_version: u32,
    /// `"YYYY-MM-DD HH:MM:SS.ffffff"`, informational.
    #[serde(default)]
    pub timestamp: String,
    /// tidewire extension: identity of the host (boot id) for the same-host path.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub tw_host_id: String,
    /// tidewire extension: owner's process id.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tw_pid: u32,
    /// tidewire extension: random identity of the engine (same-host shortcut).
    #[serde(default, skip_serializing_if = "is_zero64")]
    pub tw_token: u64,
    /// tidewire extension: where the owner keeps `tw_token` in its memory.
    #[serde(default, skip_serializing_if = "is_zero64")]
    pub tw_token_addr: u64,
    /// tidewire extension: protocol revision of the tidewire peer (0 = not tidewire).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tw_version: u32,
    /// tidewire extension: the owner's fd of its shared buffers' control block (0 = none).
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub tw_shm_ctl: i32,
    /// tidewire extension: shared (memfd-backed) buffers a verified same-host peer may map.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tw_shm: Vec<SharedBufDesc>,
}

/// tidewire extension: one shared buffer (see `memory::shared_buffers`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SharedBufDesc {
    /// Address in the owner.
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
    /// The owner's fd of the buffer's memfd.
    pub fd: i32,
    /// Control slot.
    pub slot: u32,
    /// Generation (the slot reads `gen << 1 | 1` while the buffer is open).
    pub generation: u64,
}

fn is_zero_i32(v: &i32) -> bool {
    *v == 0
}

fn is_zero64(v: &u64) -> bool {
    *v == 0
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

fn proto_v1() -> u32 {
    1
}

fn protocol_string<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<String, D::Error> {
    let v = serde_json::Value::deserialize(d)?;
    match v {
        serde_json::Value::String(s) => Ok(s),
        serde_json::Value::Array(items) => {
            let names: Vec<String> = items
                .into_iter()
                .filter_map(|i| i.as_str().map(String::from))
                .collect();
            Ok(names
                .iter()
                .find(|n| *n == "tcp")
                .cloned()
                .or_else(|| names.first().cloned())
                .unwrap_or_default())
        }
        _ => Err(serde::de::Error::custom(
            "protocol must be a string or an array",
        )),
    }
}

impl SegmentDesc {
    /// Whether a peer can reach this segment over TCP: it speaks `"tcp"`, or `"rdma"` with a
    /// TCP data port beside it (a tidewire peer).
    pub fn tcp_reachable(&self) -> bool {
        self.protocol == "tcp" || (self.protocol == "rdma" && self.tcp_data_port != 0)
    }

    /// Decodes and validates a descriptor as Mooncake does (empty name, zero address or zero
    /// length in any buffer rejects the whole descriptor).
    pub fn decode(bytes: &[u8]) -> Result<SegmentDesc> {
        let text = std::str::from_utf8(bytes)
            .map_err(|_| Error::new(ErrorKind::Metadata, "descriptor is not UTF-8"))?;
        if text.trim() == "null" {
            return Err(Error::new(
                ErrorKind::Metadata,
                "peer has no descriptor yet (no transport installed)",
            ));
        }
        let d: SegmentDesc = serde_json::from_str(text)
            .map_err(|e| Error::new(ErrorKind::Metadata, format!("malformed descriptor: {e}")))?;
        if d.name.is_empty() {
            return Err(Error::new(
                ErrorKind::Metadata,
                "descriptor has an empty name",
            ));
        }
        if let Some(b) = d
            .buffers
            .iter()
            .find(|b| b.name.is_empty() || b.addr == 0 || b.length == 0)
        {
            return Err(Error::new(
                ErrorKind::Metadata,
                format!("descriptor has an invalid buffer {b:?}"),
            ));
        }
        if let Some(dev) = d
            .devices
            .iter()
            .find(|v| v.name.is_empty() || v.gid.is_empty())
        {
            return Err(Error::new(
                ErrorKind::Metadata,
                format!("descriptor has an invalid device {dev:?}"),
            ));
        }
        if let Some(b) = d.buffers.iter().find(|b| {
            b.rkey.len() != b.lkey.len() || (!b.rkey.is_empty() && b.rkey.len() != d.devices.len())
        }) {
            return Err(Error::new(
                ErrorKind::Metadata,
                format!(
                    "descriptor buffer {:#x} has keys that do not match its devices",
                    b.addr
                ),
            ));
        }
        Ok(d)
    }

    /// Compact JSON, keys in sorted order (as Mooncake's writer).
    pub fn encode(&self) -> String {
        serde_json::to_string(self).expect("descriptor serialises")
    }

    /// Finds the buffer holding `[addr, addr+len)`.
    pub fn buffer_for(&self, addr: u64, len: u64) -> Option<&BufferDesc> {
        let end = addr.checked_add(len)?;
        self.buffers
            .iter()
            .find(|b| b.addr <= addr && end <= b.addr.saturating_add(b.length))
    }
}

/// Local time formatted like Mooncake's descriptor timestamps.
pub fn timestamp_now() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = now.as_secs() as libc::time_t;
    let mut tm: libc::tm = unsafe_zeroed_tm();
    // SAFETY: both pointers are valid for the call; localtime_r is thread-safe.
    unsafe { libc::localtime_r(&secs, &mut tm) };
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02}.{:06}",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec,
        now.subsec_micros()
    )
}

fn unsafe_zeroed_tm() -> libc::tm {
    // SAFETY: libc::tm is plain old data; all-zero is a valid value.
    unsafe { std::mem::zeroed() }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOONCAKE: &str = r#"{"buffers":[{"addr":94183372082128,"length":4096,"name":"127.0.0.1:15204"}],"name":"127.0.0.1:15204","protocol":"tcp","rdma_server_name":"","tcp_data_host":"127.0.0.1","tcp_data_port":16344,"tcp_proto_version":2,"timestamp":"2026-11-29 16:51:28.219632"}"#;

    #[test]
    fn decodes_mooncake_wheel_output() {
        let d = SegmentDesc::decode(MOONCAKE.as_bytes()).unwrap();
        assert_eq!(d.tcp_data_port, 16344);
        assert_eq!(d.tcp_proto_version, 2);
        assert_eq!(d.buffers[0].length, 4096);
        assert_eq!(d.tw_version, 0);
        // Without tidewire keys we re-encode to exactly the same bytes.
        assert_eq!(d.encode(), MOONCAKE);
    }

    #[test]
    fn rejects_bad_descriptors() {
        for bad in [
            "null",
            "{}",
            "not json",
            r#"{"name":"","protocol":"tcp"}"#,
            r#"{"name":"a","protocol":"tcp","buffers":[{"name":"a","addr":0,"length":1}]}"#,
            r#"{"name":"a","protocol":"tcp","buffers":[{"name":"a","addr":1,"length":0}]}"#,
        ] {
            assert_eq!(
                SegmentDesc::decode(bad.as_bytes()).unwrap_err().kind(),
                ErrorKind::Metadata,
                "{bad}"
            );
        }
        let old = SegmentDesc::decode(br#"{"name":"a","protocol":["rdma","tcp"]}"#).unwrap();
        assert_eq!(old.tcp_proto_version, 1);
        assert_eq!(old.protocol, "tcp");
    }

    #[test]
    fn timestamp_shape() {
        let t = timestamp_now();
        assert_eq!(t.len(), 26, "{t}");
        assert_eq!(&t[4..5], "-");
        assert_eq!(&t[19..20], ".");
    }
}
