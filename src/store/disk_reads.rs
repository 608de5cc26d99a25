//! Reading objects from disk-tier replicas (records of the tier's owner, see `disk/`): from
//! this client's own tier, or from the directory of another process's tier on this host, read
//! directly (the directory's identity file must name the tier). Each record is checked (key,
//! size, checksums) before its bytes count; a replica that cannot be read is a miss
//! (`OBJECT_NOT_FOUND`), never a wrong or empty value. Reads of several objects run on up to
//! [`DISK_READERS`] threads, so the disk sees a queue deep enough for its bandwidth.

use super::caller_memory::Read;
use super::disk::TierName;
use super::disk::files::{Files, ReadMiss};
use super::mem::{Copy, copy_placed};
use super::proto::{ReplicaDesc, code};
use super::shared::Shared;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// Most threads reading disk replicas for one call (`TW_STORE_DISK_READERS`, default 8).
pub const DISK_READERS: usize = 8;

fn disk_readers() -> usize {
    static N: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *N.get_or_init(|| {
        std::env::var("TW_STORE_DISK_READERS")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .filter(|&n| n > 0)
            .unwrap_or(DISK_READERS)
    })
}

/// Whether a replica is a disk tier's record.
pub(crate) fn on_disk(d: &&ReplicaDesc) -> bool {
    d.endpoint.starts_with(super::disk::TIER_PREFIX)
}

/// Whether another process's tier directory on this host may be read directly
/// (`TW_STORE_DISK_DIRECT`, default on; `0` sends every such read through its owner, as for a
/// tier on another host).
fn direct_neighbours() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("TW_STORE_DISK_DIRECT").map_or(true, |v| v.trim() != "0"))
}

/// The files of the tier a disk replica names, when this process can read them.
fn tier_files(sh: &Shared, d: &ReplicaDesc) -> Option<Arc<Files>> {
    let name = TierName::parse(&d.endpoint)?;
    match &sh.tier {
        Some(t) if t.name(sh.engine.name()).id == name.id => Some(t.files_handle()),
        _ if direct_neighbours() => sh.neighbours.files(&name),
        _ => None,
    }
}

/// Reads `r` from one disk replica `d`.
///
/// # Safety
/// As [`read_disk_replicas`], for `r`.
unsafe fn read_one(sh: &Shared, r: &Read<'_>, d: &ReplicaDesc) -> Result<(), ReadMiss> {
    let files = tier_files(sh, d).ok_or(ReadMiss::Elsewhere)?;
    let size = r.found.size;
    let direct = match r.dst {
        super::caller_memory::Mem::One(a) if sh.engine.memory_device(a).is_none() => Some(a),
        _ => None,
    };
    if let Some(a) = direct {
        // SAFETY: the caller's contract: `len` writable bytes at `a`, host memory, unshared.
        let dst = unsafe { std::slice::from_raw_parts_mut(a as *mut u8, r.len as usize) };
        return files.read(d.addr, r.key, size, r.off, dst);
    }
    // Pieces, or device memory: through a buffer, then the same copies as our own segment's.
    let mut buf = vec![0u8; r.len as usize];
    files.read(d.addr, r.key, size, r.off, &mut buf)?;
    let base = buf.as_ptr() as u64;
    let copies: Vec<Copy> = r
        .dst
        .spans(r.len)
        .map(|(a, at, n)| Copy {
            src: base + at,
            dst: a,
            len: n,
        })
        .collect();
    // SAFETY: sources lie in `buf`, destinations are the caller's memory per the contract.
    let ok = unsafe { copy_placed(&copies, |a| sh.engine.memory_device(a)) };
    match ok.iter().all(|&b| b) {
        true => Ok(()),
        false => Err(ReadMiss::Gone("copy to the destination failed".into())),
    }
}

/// Reads each of `which` (indexes into `reads`) from its disk replicas, in turn until one
/// reads whole; `out[i]` becomes `Ok` or `OBJECT_NOT_FOUND`. Returns the reads whose disk
/// replicas this process cannot reach (another host's tier): their owner must bring them to
/// memory first.
///
/// # Safety
/// As `reads::read_replicas`: each read's destination covers `len`
/// writable bytes, unshared during the call.
pub(crate) unsafe fn read_disk_replicas(
    sh: &Shared,
    reads: &[Read<'_>],
    which: &[usize],
    out: &mut [Result<(), i32>],
) -> Vec<usize> {
    let one = |i: usize| -> Result<(), ReadMiss> {
        let r = &reads[i];
        let mut last = None;
        for d in r.found.replicas.iter().filter(on_disk) {
            if d.len != r.found.size {
                continue;
            }
            // SAFETY: this fn's contract, for read `i`.
            match unsafe { read_one(sh, r, d) } {
                Ok(()) => {
                    sh.disk_reads.fetch_add(1, Ordering::Relaxed);
                    return Ok(());
                }
                Err(e) => last = Some(e),
            }
        }
        match &last {
            Some(ReadMiss::Elsewhere) | None => {}
            Some(e) => tw_log!(
                crate::log::Level::Warn,
                "store: disk replica of {:?}: {e:?}",
                r.key
            ),
        }
        Err(last.unwrap_or_else(|| ReadMiss::Gone("no disk replica of its size".into())))
    };
    let threads = which.len().min(disk_readers());
    let mut elsewhere = Vec::new();
    let mut settle = |i: usize, r: Result<(), ReadMiss>, out: &mut [Result<(), i32>]| {
        out[i] = match r {
            Ok(()) => Ok(()),
            Err(ReadMiss::Elsewhere) => {
                elsewhere.push(i);
                Err(code::OBJECT_NOT_FOUND)
            }
            Err(_) => Err(code::OBJECT_NOT_FOUND),
        };
    };
    if threads <= 1 {
        for &i in which {
            settle(i, one(i), out);
        }
        return elsewhere;
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<(usize, Result<(), ReadMiss>)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let k = next.fetch_add(1, Ordering::Relaxed);
                        let Some(&i) = which.get(k) else { break };
                        mine.push((i, one(i)));
                    }
                    mine
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap_or_default())
            .collect()
    });
    for (i, r) in results {
        settle(i, r, out);
    }
    elsewhere
}
