//! Segments mounted at run time, besides the one `setup` mounts (Mooncake's `mount_segment`,
//! `allocate_and_mount_segment`, `unmount_segment`, `unmount_and_free_segment`): each is a
//! mapping registered with the engine and mounted on the master as `<engine name>#<id>`, so its
//! replicas are reached through this client's engine like the first segment's. New objects are
//! placed there at once; unmounting drops the replicas there (an object keeps its others, one
//! left with none goes), and the memory is unregistered and unmapped after the grace period, so
//! a transfer already started on it ends first.

use super::StoreError;
use super::mem::{ExtraSegment, Mapped};
use super::proto::{Reply, Request, code};
use super::shared::StoreClient;
use std::sync::Arc;
use std::time::Duration;

/// Separates the engine name from a run-time segment's id in its name on the master.
pub const SEGMENT_ID_MARK: char = '#';

fn new_id() -> String {
    let mut v = [0u64; 2];
    // SAFETY: getrandom writes at most 16 bytes into `v`.
    let n = unsafe { libc::getrandom(v.as_mut_ptr().cast(), 16, 0) };
    if n != 16 {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        v = [t, std::process::id() as u64];
    }
    format!("{}-{}", v[0], v[1])
}

impl StoreClient {
    /// Maps `size` bytes of the file at `path` from `offset` (page aligned) and mounts them as
    /// a segment; returns its id. Mooncake's `mount_segment`.
    pub fn mount_file_segment(
        &self,
        path: &str,
        size: u64,
        offset: u64,
    ) -> Result<String, StoreError> {
        let len = usize::try_from(size)
            .map_err(|_| StoreError::new(code::INVALID_PARAMS, "size too large"))?;
        let mem = Mapped::file(path, offset, len)
            .map_err(|e| StoreError::new(code::INVALID_PARAMS, format!("mapping {path}: {e}")))?;
        self.mount_extra(mem, false)
    }

    /// Allocates `size` bytes and mounts them as a segment; returns its id. Mooncake's
    /// `allocate_and_mount_segment`.
    pub fn allocate_segment(&self, size: u64) -> Result<String, StoreError> {
        let len = usize::try_from(size)
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| StoreError::new(code::INVALID_PARAMS, "size is 0 or too large"))?;
        let mem = Mapped::new(len).map_err(|e| {
            StoreError::new(code::INVALID_PARAMS, format!("mapping {len} bytes: {e}"))
        })?;
        self.mount_extra(mem, true)
    }

    fn mount_extra(&self, mem: Mapped, allocated: bool) -> Result<String, StoreError> {
        let sh = &self.shared;
        let (addr, len) = (mem.addr(), mem.len() as u64);
        sh.engine
            .register_memory(addr, len, "cpu:0", true)
            .map_err(|e| StoreError::new(code::INTERNAL_ERROR, format!("register: {e}")))?;
        let id = new_id();
        let name = format!("{}{SEGMENT_ID_MARK}{id}", sh.engine.name());
        if let Err(e) = sh.mount_one(&name, addr, len) {
            let _ = sh.engine.unregister_memory(addr);
            return Err(e);
        }
        sh.extra.insert(
            id.clone(),
            ExtraSegment {
                name,
                mem: Arc::new(mem),
                allocated,
            },
        );
        Ok(id)
    }

    /// Unmounts run-time segments by id (those mapped from files with `allocated == false`,
    /// those allocated with `true`): the master drops their replicas at once, and the memory is
    /// unregistered and unmapped after `grace`. Returns 0, or the first failure's code (-1 for
    /// an id this client did not mount that way, as Mooncake).
    pub fn unmount_segments(&self, ids: &[&str], grace: Duration, allocated: bool) -> i32 {
        let sh = &self.shared;
        let mut first = 0;
        let mut gone: Vec<Arc<Mapped>> = Vec::new();
        for id in ids {
            let Some(seg) = sh.extra.take(id, allocated) else {
                if first == 0 {
                    first = -1;
                }
                continue;
            };
            let reply = sh.conn.call(&Request::Unmount {
                client_id: sh.client_id,
                name: seg.name.clone(),
            });
            match reply {
                Ok(Reply::Ok) => gone.push(seg.mem),
                Ok(Reply::Error { code, .. }) => {
                    first = if first == 0 { code } else { first };
                    sh.extra.insert(id.to_string(), seg);
                }
                Ok(_) | Err(_) => {
                    first = if first == 0 { code::RPC_FAIL } else { first };
                    sh.extra.insert(id.to_string(), seg);
                }
            }
        }
        if gone.is_empty() {
            return first;
        }
        let release = {
            let sh = sh.clone();
            move || {
                std::thread::sleep(grace);
                for m in gone {
                    let _ = sh.engine.unregister_memory(m.addr());
                    // Unmapped when the last reference (a read planned on it) lets go.
                    drop(m);
                }
            }
        };
        match grace.is_zero() {
            true => release(),
            false => {
                let _ = std::thread::Builder::new()
                    .name("tw-store-unmount".into())
                    .spawn(release);
            }
        }
        first
    }
}
