//! The disk tier of one client (Mooncake's SSD offload): the client that owns a memory segment
//! writes objects from it to record files in its own directory and, after a restart, adopts
//! every record that was complete on disk. The master decides what is written and what is
//! dropped (see `offload.rs`); this module keeps the files.
//!
//! A directory holds `tier.id` (the tier's random identity, which names it to the master and
//! lets a process on the same host tell the directory is the one named), `tier.lock` (held
//! with `flock` by the one process that owns the tier: a second owner is refused) and record
//! files `NNNNNNNNNN.twd` ([`record`]), appended to in order and deleted whole, oldest first,
//! when the tier is over its quota. A record is never changed once written; a removed or
//! replaced key gets a tombstone. I/O is buffered (`pwrite`/`pread` through the page cache):
//! see docs/store.md for the measurement behind that choice.

pub mod files;
pub mod record;

use super::StoreError;
use super::proto::code;
use crate::sync::LockClean;
use files::{Files, file_name, file_no};
use record::{ALIGN, HEADER_LEN, Kind};
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Disk-tier settings (Mooncake's names in brackets).
#[derive(Debug, Clone)]
pub struct DiskConfig {
    /// The tier's directory (`ssd_offload_path`, `MOONCAKE_OFFLOAD_FILE_STORAGE_PATH`):
    /// absolute, existing, writable, no symlink or `..` on the way.
    pub path: String,
    /// Bytes the record files may take (`MOONCAKE_OFFLOAD_BUCKET_MAX_TOTAL_SIZE`); 0: 90 % of
    /// the filesystem's size.
    pub quota: u64,
    /// A record file is closed for appends past this size
    /// (`MOONCAKE_OFFLOAD_BUCKET_SIZE_LIMIT_BYTES`, 256 MiB).
    pub file_limit: u64,
}

impl DiskConfig {
    /// Settings for `path`, the rest from Mooncake's environment variables or their defaults.
    pub fn from_env(path: &str) -> DiskConfig {
        let num = |name: &str, default: u64| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(default)
        };
        DiskConfig {
            path: path.to_string(),
            quota: num("MOONCAKE_OFFLOAD_BUCKET_MAX_TOTAL_SIZE", 0),
            file_limit: num("MOONCAKE_OFFLOAD_BUCKET_SIZE_LIMIT_BYTES", 256 << 20).max(ALIGN),
        }
    }
}

/// A tier's name on the master: `disk://<id>@<owner engine name><directory>`. Segment names of
/// this form are disk tiers; their replicas' addresses are record locators.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TierName {
    /// The tier's identity (16 hex digits).
    pub id: String,
    /// The owner's engine name (`host:port`).
    pub owner: String,
    /// The directory on the owner's host.
    pub path: String,
}

/// Prefix of disk-tier segment names.
pub const TIER_PREFIX: &str = "disk://";

impl TierName {
    /// The segment name.
    pub fn to_name(&self) -> String {
        format!("{TIER_PREFIX}{}@{}{}", self.id, self.owner, self.path)
    }

    /// Parses a segment name; `None` for a memory segment's.
    pub fn parse(name: &str) -> Option<TierName> {
        let rest = name.strip_prefix(TIER_PREFIX)?;
        let (id, rest) = rest.split_once('@')?;
        let slash = rest.find('/')?;
        Some(TierName {
            id: id.to_string(),
            owner: rest[..slash].to_string(),
            path: rest[slash..].to_string(),
        })
    }
}

/// The identity written in `dir/tier.id`, if any.
pub fn read_id(dir: &Path) -> Option<String> {
    let s = std::fs::read_to_string(dir.join("tier.id")).ok()?;
    let id = s.trim();
    (id.len() == 16 && id.bytes().all(|b| b.is_ascii_hexdigit())).then(|| id.to_string())
}

/// One record the tier holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// Key.
    pub key: String,
    /// Locator ([`record::locator`]).
    pub loc: u64,
    /// Value bytes.
    pub len: u64,
}

#[derive(Debug, Default, Clone, Copy)]
struct FileUse {
    /// Bytes in the file.
    len: u64,
}

struct Appending {
    no: u32,
    file: File,
    len: u64,
}

struct State {
    /// Live records by locator (so by file, oldest first).
    live: BTreeMap<u64, (Box<str>, u64)>,
    files: BTreeMap<u32, FileUse>,
    appending: Option<Appending>,
    next_no: u32,
    used: u64,
}

/// A client's disk tier.
pub struct DiskTier {
    dir: PathBuf,
    id: String,
    quota: u64,
    file_limit: u64,
    files: Arc<Files>,
    state: Mutex<State>,
    /// Held for the tier's life: the `flock` on `tier.lock`.
    _lock: File,
}

fn bad(msg: String) -> StoreError {
    StoreError::new(code::INVALID_PARAMS, msg)
}

/// Checks a tier path the way Mooncake does (absolute, no `..`, no symlink on the way, an
/// existing directory) and returns it.
fn checked_dir(path: &str) -> Result<PathBuf, StoreError> {
    let p = Path::new(path);
    if path.is_empty() {
        return Err(bad(
            "ssd_offload_path is empty (set it, or MOONCAKE_OFFLOAD_FILE_STORAGE_PATH)".into(),
        ));
    }
    if !p.is_absolute() {
        return Err(bad(format!("ssd_offload_path {path:?} is not absolute")));
    }
    if p.components().any(|c| c == Component::ParentDir) {
        return Err(bad(format!("ssd_offload_path {path:?} contains '..'")));
    }
    let mut at = PathBuf::from("/");
    for c in p.components().skip(1) {
        at.push(c);
        let m = std::fs::symlink_metadata(&at)
            .map_err(|e| bad(format!("ssd_offload_path {path:?}: {}: {e}", at.display())))?;
        if m.file_type().is_symlink() {
            return Err(bad(format!(
                "ssd_offload_path {path:?}: {} is a symbolic link",
                at.display()
            )));
        }
    }
    if !p.is_dir() {
        return Err(bad(format!("ssd_offload_path {path:?} is not a directory")));
    }
    Ok(p.to_path_buf())
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn random_id() -> String {
    let mut v = [0u8; 8];
    // SAFETY: getrandom writes at most 8 bytes into `v`.
    let n = unsafe { libc::getrandom(v.as_mut_ptr().cast(), 8, 0) };
    if n != 8 {
        v = (now_ms() ^ ((std::process::id() as u64) << 40)).to_le_bytes();
    }
    v.iter().map(|b| format!("{b:02x}")).collect()
}

/// 90 % of the size of the filesystem holding `dir`.
fn default_quota(dir: &Path) -> u64 {
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else {
        return 0;
    };
    // SAFETY: `st` is a plain C struct that statvfs fills; `c` is NUL-terminated.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return 0;
    }
    (st.f_blocks as u64).saturating_mul(st.f_frsize as u64) / 10 * 9
}

impl DiskTier {
    /// Opens (or starts) the tier in `cfg.path`: checks the path, takes its lock, and adopts the
    /// records found there (a torn tail of a file is cut off; tombstoned records are dropped).
    pub fn open(cfg: &DiskConfig) -> Result<DiskTier, StoreError> {
        let dir = checked_dir(&cfg.path)?;
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join("tier.lock"))
            .map_err(|e| {
                bad(format!(
                    "ssd_offload_path {:?} is not writable: {e}",
                    cfg.path
                ))
            })?;
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            return Err(bad(format!(
                "ssd_offload_path {:?} is in use by another live client",
                cfg.path
            )));
        }
        let id = match read_id(&dir) {
            Some(id) => id,
            None => {
                let id = random_id();
                let tmp = dir.join("tier.id.tmp");
                std::fs::write(&tmp, format!("{id}\n"))
                    .and_then(|_| std::fs::rename(&tmp, dir.join("tier.id")))
                    .map_err(|e| bad(format!("writing {}/tier.id: {e}", cfg.path)))?;
                id
            }
        };
        let quota = match cfg.quota {
            0 => default_quota(&dir),
            q => q,
        };
        let state = scan(&dir)?;
        Ok(DiskTier {
            files: Arc::new(Files::new(&dir)),
            dir,
            id,
            quota,
            file_limit: cfg.file_limit,
            state: Mutex::new(state),
            _lock: lock,
        })
    }

    /// The tier's name on the master, for an owner whose engine is `owner`.
    pub fn name(&self, owner: &str) -> TierName {
        TierName {
            id: self.id.clone(),
            owner: owner.to_string(),
            path: self.dir.to_string_lossy().into_owned(),
        }
    }

    /// The quota in bytes.
    pub fn quota(&self) -> u64 {
        self.quota
    }

    /// Bytes the record files take.
    pub fn used(&self) -> u64 {
        self.state.lock_clean().used
    }

    /// Every live record.
    pub fn held(&self) -> Vec<Held> {
        let st = self.state.lock_clean();
        st.live
            .iter()
            .map(|(loc, (key, len))| Held {
                key: key.to_string(),
                loc: *loc,
                len: *len,
            })
            .collect()
    }

    /// The record files, for reads.
    pub fn files(&self) -> &Files {
        &self.files
    }

    /// The record files, shared.
    pub fn files_handle(&self) -> Arc<Files> {
        self.files.clone()
    }

    /// Appends one record per `(key, value)` (a new file is started past the file limit);
    /// each gets its locator, or the error that stopped it.
    pub fn append(&self, items: &[(&str, &[u8])]) -> Vec<Result<u64, String>> {
        let mut st = self.state.lock_clean();
        items
            .iter()
            .map(|(key, value)| {
                let loc = self.append_one(&mut st, Kind::Value, key, value)?;
                st.live.insert(loc, ((*key).into(), value.len() as u64));
                Ok(loc)
            })
            .collect()
    }

    fn append_one(
        &self,
        st: &mut State,
        kind: Kind,
        key: &str,
        value: &[u8],
    ) -> Result<u64, String> {
        let span = record::span(key.len(), value.len() as u64);
        let full = st
            .appending
            .as_ref()
            .is_some_and(|a| a.len > 0 && a.len + span > self.file_limit);
        if full || st.appending.is_none() {
            let no = st.next_no;
            let file = OpenOptions::new()
                .create_new(true)
                .write(true)
                .open(self.dir.join(file_name(no)))
                .map_err(|e| format!("creating {}: {e}", file_name(no)))?;
            st.next_no += 1;
            st.files.insert(no, FileUse::default());
            st.appending = Some(Appending { no, file, len: 0 });
        }
        let a = st.appending.as_mut().unwrap_or_else(|| unreachable!());
        let head = record::encode_head(kind, key, value, now_ms());
        let at = a.len;
        let pad = span as usize - head.len() - value.len();
        let written = a
            .file
            .write_all_at(&head, at)
            .and_then(|_| a.file.write_all_at(value, at + head.len() as u64))
            .and_then(|_| {
                a.file
                    .write_all_at(&vec![0u8; pad], at + (head.len() + value.len()) as u64)
            });
        if let Err(e) = written {
            let no = a.no;
            // The file may end inside this record: close it for appends (a scan cuts it there).
            st.appending = None;
            return Err(format!("writing {}: {e}", file_name(no)));
        }
        a.len += span;
        let no = a.no;
        if let Some(u) = st.files.get_mut(&no) {
            u.len += span;
        }
        st.used += span;
        Ok(record::locator(no, at))
    }

    /// Ends records (their keys were removed or replaced): a tombstone each, so a restart does
    /// not bring them back.
    pub fn drop_records(&self, locs: &[u64]) {
        let mut st = self.state.lock_clean();
        for &loc in locs {
            if st.live.remove(&loc).is_some() {
                let _ = self.append_one(&mut st, Kind::Tombstone, "", &loc.to_le_bytes());
            }
        }
    }

    /// Deletes every record file (the tier was unmounted: its records must not come back).
    pub fn clear(&self) {
        let mut st = self.state.lock_clean();
        st.appending = None;
        for no in std::mem::take(&mut st.files).into_keys() {
            let _ = std::fs::remove_file(self.dir.join(file_name(no)));
            self.files.forget(no);
        }
        st.live.clear();
        st.used = 0;
    }

    /// Deletes the oldest record files while the tier is over 90 % of its quota, down to 80 %
    /// (Mooncake's watermarks); returns the live records that went with them.
    pub fn enforce_quota(&self) -> Vec<Held> {
        let mut st = self.state.lock_clean();
        let mut gone = Vec::new();
        if st.used <= self.quota / 10 * 9 {
            return gone;
        }
        let low = self.quota / 10 * 8;
        while st.used > low {
            let Some((&no, &u)) = st.files.iter().next() else {
                break;
            };
            if st.appending.as_ref().is_some_and(|a| a.no == no) {
                st.appending = None;
            }
            let from = record::locator(no, 0);
            let to = record::locator(no.saturating_add(1), 0);
            let locs: Vec<u64> = st.live.range(from..to).map(|(l, _)| *l).collect();
            for loc in locs {
                if let Some((key, len)) = st.live.remove(&loc) {
                    gone.push(Held {
                        key: key.into(),
                        loc,
                        len,
                    });
                }
            }
            let _ = std::fs::remove_file(self.dir.join(file_name(no)));
            self.files.forget(no);
            st.files.remove(&no);
            st.used = st.used.saturating_sub(u.len);
        }
        gone
    }
}

/// Reads the records of every file in `dir`: live values (latest per key), minus tombstoned
/// ones; a file is cut at its first record that is not whole (a torn append) and never
/// appended to again.
fn scan(dir: &Path) -> Result<State, StoreError> {
    let mut nos: Vec<u32> = std::fs::read_dir(dir)
        .map_err(|e| bad(format!("reading {}: {e}", dir.display())))?
        .filter_map(|e| e.ok())
        .filter_map(|e| file_no(&e.file_name().to_string_lossy()))
        .collect();
    nos.sort_unstable();
    let mut st = State {
        live: BTreeMap::new(),
        files: BTreeMap::new(),
        appending: None,
        next_no: nos.last().map_or(0, |n| n + 1),
        used: 0,
    };
    let mut latest: std::collections::HashMap<Box<str>, u64> = Default::default();
    let mut ended: Vec<u64> = Vec::new();
    for no in nos {
        let path = dir.join(file_name(no));
        let Ok(f) = File::open(&path) else { continue };
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        let mut at = 0u64;
        let mut head = vec![0u8; HEADER_LEN];
        while at + HEADER_LEN as u64 <= len {
            if f.read_exact_at(&mut head, at).is_err() {
                break;
            }
            let Some((h, crc)) = record::decode_head(&head) else {
                break;
            };
            let span = h.span();
            let whole = (HEADER_LEN as u64 + h.key_len as u64).saturating_add(h.value_len);
            if at.saturating_add(whole) > len {
                break;
            }
            let mut key = vec![0u8; h.key_len as usize];
            if f.read_exact_at(&mut key, at + HEADER_LEN as u64).is_err()
                || !record::key_matches(&head, &key, crc)
            {
                break;
            }
            let loc = record::locator(no, at);
            match h.kind {
                Kind::Value => {
                    let Ok(key) = String::from_utf8(key) else {
                        break;
                    };
                    let key: Box<str> = key.into();
                    if let Some(old) = latest.insert(key.clone(), loc) {
                        st.live.remove(&old);
                    }
                    st.live.insert(loc, (key, h.value_len));
                }
                Kind::Tombstone => {
                    let mut v = [0u8; 8];
                    let at_value = at + HEADER_LEN as u64;
                    if f.read_exact_at(&mut v, at_value).is_ok() && record::value_ok(&h, &v) {
                        ended.push(u64::from_le_bytes(v));
                    }
                }
            }
            at = at.saturating_add(span);
        }
        st.files.insert(no, FileUse { len });
        st.used += len;
    }
    for loc in ended {
        if let Some((key, _)) = st.live.remove(&loc) {
            if latest.get(&key) == Some(&loc) {
                latest.remove(&key);
            }
        }
    }
    Ok(st)
}

#[cfg(test)]
mod tests;
