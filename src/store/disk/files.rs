//! A tier directory's record files, opened for reading (by the tier's owner, or by another
//! process on the same host that reads the directory directly), and the checked read of one
//! record: the header and key must carry their CRC and name the key asked for, the value its
//! CRC and the size asked for. Anything else is a miss, never bytes.

use super::record::{self, HEADER_LEN, Kind};
use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Why a record could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadMiss {
    /// Its file is gone (evicted under the quota) or cannot be opened.
    Gone(String),
    /// It is not the record asked for, or its bytes fail their checksum.
    Corrupt(String),
    /// Its tier is not readable from this process (another host's).
    Elsewhere,
}

/// The name of record file `no` in a tier directory.
pub fn file_name(no: u32) -> String {
    format!("{no:010}.twd")
}

/// The number of a record file named `name`, if it is one.
pub fn file_no(name: &str) -> Option<u32> {
    let digits = name.strip_suffix(".twd")?;
    (digits.len() == 10 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// Open record files of one directory, by number.
pub struct Files {
    dir: PathBuf,
    open: Mutex<HashMap<u32, Arc<File>>>,
}

impl Files {
    /// Files of `dir` (opened on first use).
    pub fn new(dir: &Path) -> Files {
        Files {
            dir: dir.to_path_buf(),
            open: Mutex::new(HashMap::new()),
        }
    }

    fn file(&self, no: u32) -> Result<Arc<File>, ReadMiss> {
        let mut open = crate::sync::LockClean::lock_clean(&self.open);
        if let Some(f) = open.get(&no) {
            return Ok(f.clone());
        }
        let path = self.dir.join(file_name(no));
        let f = File::open(&path)
            .map(Arc::new)
            .map_err(|e| ReadMiss::Gone(format!("{}: {e}", path.display())))?;
        open.insert(no, f.clone());
        Ok(f)
    }

    /// Forgets file `no` (deleted): later reads of it miss.
    pub fn forget(&self, no: u32) {
        crate::sync::LockClean::lock_clean(&self.open).remove(&no);
    }

    /// Reads `dst.len()` bytes at offset `off` of the value of record `loc`, which must be
    /// `key`'s and `size` bytes long. A read of the whole value goes straight into `dst`;
    /// a part is read with the rest of the value, which the checksum needs.
    pub fn read(
        &self,
        loc: u64,
        key: &str,
        size: u64,
        off: u64,
        dst: &mut [u8],
    ) -> Result<(), ReadMiss> {
        let (no, at) = record::place(loc);
        let f = self.file(no)?;
        let corrupt = |why: &str| ReadMiss::Corrupt(format!("record {loc:#x} of {key:?}: {why}"));
        let mut head = vec![0u8; HEADER_LEN + key.len()];
        f.read_exact_at(&mut head, at)
            .map_err(|e| corrupt(&format!("header: {e}")))?;
        let (h, crc) = record::decode_head(&head).ok_or_else(|| corrupt("no header"))?;
        if h.kind != Kind::Value
            || h.key_len as usize != key.len()
            || !record::key_matches(&head[..HEADER_LEN], &head[HEADER_LEN..], crc)
            || &head[HEADER_LEN..] != key.as_bytes()
        {
            return Err(corrupt("another key, or its header fails its checksum"));
        }
        if h.value_len != size || off.checked_add(dst.len() as u64).is_none_or(|e| e > size) {
            return Err(corrupt("another size"));
        }
        let value_at = at + (HEADER_LEN + key.len()) as u64;
        let read = |buf: &mut [u8]| {
            f.read_exact_at(buf, value_at)
                .map_err(|e| corrupt(&format!("value: {e}")))
        };
        if off == 0 && dst.len() as u64 == size {
            read(dst)?;
            return match record::value_ok(&h, dst) {
                true => Ok(()),
                false => Err(corrupt("value fails its checksum")),
            };
        }
        let mut whole = vec![0u8; size as usize];
        read(&mut whole)?;
        if !record::value_ok(&h, &whole) {
            return Err(corrupt("value fails its checksum"));
        }
        dst.copy_from_slice(&whole[off as usize..off as usize + dst.len()]);
        Ok(())
    }
}

/// Every tier directory another process on this host owns that this process has read from, by
/// tier name (see [`super::TierName`]). A directory whose identity file does not name the tier
/// (another host's path, or a directory reused since) is not read.
#[derive(Default)]
pub struct Neighbours {
    open: Mutex<HashMap<String, Option<Arc<Files>>>>,
}

impl Neighbours {
    /// The files of the tier named `name`, when this host has its directory.
    pub fn files(&self, name: &super::TierName) -> Option<Arc<Files>> {
        let mut open = crate::sync::LockClean::lock_clean(&self.open);
        if let Some(f) = open.get(&name.id) {
            return f.clone();
        }
        let here = super::read_id(Path::new(&name.path)).is_some_and(|id| id == name.id);
        let f = here.then(|| Arc::new(Files::new(Path::new(&name.path))));
        open.insert(name.id.clone(), f.clone());
        f
    }
}
