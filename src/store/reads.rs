//! Reading found objects from their replicas: our own segment by memcpy, the others by engine
//! READ batches. A read whose transfer fails tries the object's next complete replica, and the
//! segments that failed are reported to the master (it places nothing new there until their
//! owner's next heartbeat).

use super::batch::BatchEnd;
pub(crate) use super::caller_memory::Read;
use super::disk_reads::{on_disk, read_disk_replicas};
use super::mem::{Copy, copy_placed, populate_behind, prefault_write};
use super::proto::{ReplicaDesc, code};
use super::shared::Shared;
use crate::engine::Request as Xfer;
use crate::transport::Opcode;

/// Runs `reads`; per read, `Ok` or the code it failed with (`TRANSFER_FAIL` once every
/// replica failed, `INTERNAL_ERROR` when the object lists none of its size). `fresh`: the
/// destinations were just allocated (their pages are populated alongside the transfer).
///
/// # Safety
/// Each read's `dst` covers `len` bytes of writable caller memory, unshared during the call
/// (pieces do not overlap); each `[off, off+len)` lies within its object (`found.size`),
/// whose read hold the caller has.
pub(crate) unsafe fn read_replicas(
    sh: &Shared,
    reads: &[Read<'_>],
    fresh: bool,
) -> Vec<Result<(), i32>> {
    let mut out: Vec<Result<(), i32>> = vec![Ok(()); reads.len()];
    let mut copies: Vec<Copy> = Vec::new();
    let mut copy_owner: Vec<usize> = Vec::new();
    // Per read still to go over the engine: its remote replicas, and which one is next. A
    // read in pieces is one request per piece, all to the same replica.
    let mut remote: Vec<(usize, Vec<&ReplicaDesc>, usize)> = Vec::new();
    // Reads to serve from a disk tier: those with no memory replica, and (after the engine
    // rounds) those whose memory replicas all failed.
    let mut from_disk: Vec<usize> = Vec::new();
    for (i, r) in reads.iter().enumerate() {
        let fits = |d: &&ReplicaDesc| d.len == r.found.size && !on_disk(d);
        if let Some(own) = r
            .found
            .replicas
            .iter()
            .filter(fits)
            .find(|d| sh.own_segment(d))
        {
            for (a, at, n) in r.dst.spans(r.len) {
                copies.push(Copy {
                    src: own.addr + r.off + at,
                    dst: a,
                    len: n,
                });
                copy_owner.push(i);
            }
            continue;
        }
        let others: Vec<&ReplicaDesc> = r.found.replicas.iter().filter(fits).collect();
        if others.is_empty() {
            match r.found.replicas.iter().any(|d| on_disk(&d)) {
                true => from_disk.push(i),
                false => out[i] = Err(code::INTERNAL_ERROR),
            }
        } else {
            remote.push((i, others, 0));
        }
    }
    if fresh {
        copies.iter().for_each(|c| prefault_write(c.dst, c.len));
    }
    // SAFETY: sources lie in our own live segment inside complete versions the caller holds
    // (offsets within the object); destinations are caller memory per this fn's contract
    // (GPU destinations are registered, so their device is known).
    let copied = unsafe { copy_placed(&copies, |a| sh.engine.memory_device(a)) };
    for (done, &i) in copied.into_iter().zip(&copy_owner) {
        if !done {
            out[i] = Err(code::TRANSFER_FAIL);
        }
    }

    let mut open = sh.resolver();
    let mut failed_segments: Vec<String> = Vec::new();
    let mut first_round = true;
    while !remote.is_empty() {
        let mut reqs: Vec<Xfer> = Vec::new();
        let mut owner: Vec<usize> = Vec::new();
        let mut sent = vec![false; remote.len()];
        let mut bytes = 0;
        for (k, (i, reps, next)) in remote.iter_mut().enumerate() {
            let r = &reads[*i];
            while let Some(d) = reps.get(*next) {
                match open(&d.endpoint) {
                    Some(seg) => {
                        for (a, at, n) in r.dst.spans(r.len) {
                            reqs.push(Xfer {
                                op: Opcode::Read,
                                local: a,
                                segment: seg,
                                remote: d.addr + r.off + at,
                                len: n,
                            });
                            owner.push(k);
                        }
                        sent[k] = true;
                        bytes += r.len;
                        break;
                    }
                    None => {
                        failed_segments.push(d.endpoint.clone());
                        *next += 1;
                    }
                }
            }
        }
        let fresh_dst: Vec<(u64, u64)> = match fresh && first_round {
            true => reqs.iter().map(|r| (r.local, r.len)).collect(),
            false => Vec::new(),
        };
        first_round = false;
        let mut retry = vec![false; remote.len()];
        match populate_behind(&fresh_dst, || sh.run_batch(&reqs, bytes)) {
            BatchEnd::Done(ok) => {
                // A read fails once however many of its pieces failed: the next replica.
                for (j, done) in ok.into_iter().enumerate() {
                    if !done {
                        retry[owner[j]] = true;
                    }
                }
                for (k, (_, reps, next)) in remote.iter_mut().enumerate() {
                    if retry[k] {
                        failed_segments.push(reps[*next].endpoint.clone());
                        *next += 1;
                    }
                }
            }
            // Refused before anything moved (our memory, not the replica): no retry.
            BatchEnd::Rejected(c) => owner.iter().for_each(|&k| out[remote[k].0] = Err(c)),
            // Out of time: no retry either.
            BatchEnd::TimedOut => owner
                .iter()
                .for_each(|&k| out[remote[k].0] = Err(code::TRANSFER_FAIL)),
        }
        let mut still = Vec::new();
        for (k, item) in remote.into_iter().enumerate() {
            let exhausted = item.2 >= item.1.len();
            if !sent[k] && exhausted {
                // No replica could even be opened.
                out[item.0] = Err(code::TRANSFER_FAIL);
            } else if retry[k] {
                match exhausted {
                    true => out[item.0] = Err(code::TRANSFER_FAIL),
                    false => still.push(item),
                }
            }
        }
        remote = still;
    }
    sh.report_failed(failed_segments);
    for (i, r) in reads.iter().enumerate() {
        if out[i] == Err(code::TRANSFER_FAIL) && r.found.replicas.iter().any(|d| on_disk(&d)) {
            from_disk.push(i);
        }
    }
    if !from_disk.is_empty() {
        // Fresh destinations are populated alongside, as for engine reads.
        let fresh_dst: Vec<(u64, u64)> = match fresh {
            true => from_disk
                .iter()
                .flat_map(|&i| reads[i].dst.spans(reads[i].len).map(|(a, _, n)| (a, n)))
                .collect(),
            false => Vec::new(),
        };
        // SAFETY: as this fn's contract, for the reads listed.
        let elsewhere = populate_behind(&fresh_dst, || unsafe {
            read_disk_replicas(sh, reads, &from_disk, &mut out)
        });
        if !elsewhere.is_empty() {
            // SAFETY: as this fn's contract, for the reads listed.
            unsafe { promote_and_read(sh, reads, &elsewhere, &mut out, fresh) };
        }
    }
    out
}

/// How long a read of another host's disk replica waits for its owner to bring it to memory.
const PROMOTE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Reads whose disk replicas lie on another host: the master has their owners read them into
/// memory at once (`Promote`), and each is read from its memory replica as soon as the master
/// lists one for the same version (polled from 2 to 20 ms apart, for at most
/// [`PROMOTE_WAIT`]). Those that do not make it stay `OBJECT_NOT_FOUND`.
///
/// # Safety
/// As [`read_replicas`], for the reads listed.
unsafe fn promote_and_read(
    sh: &Shared,
    reads: &[Read<'_>],
    far: &[usize],
    out: &mut [Result<(), i32>],
    fresh: bool,
) {
    let promote = |ks: &[&str]| {
        let asked = sh.conn.call(&super::proto::Request::Promote {
            client_id: sh.client_id,
            keys: ks.iter().map(|k| k.to_string()).collect(),
        });
        matches!(asked, Ok(super::proto::Reply::Codes { .. }))
    };
    let deadline = std::time::Instant::now() + PROMOTE_WAIT;
    let mut pause = std::time::Duration::from_millis(2);
    let mut left: Vec<usize> = far.to_vec();
    while !left.is_empty() && std::time::Instant::now() < deadline {
        let mut ks: Vec<&str> = left.iter().map(|&i| reads[i].key).collect();
        ks.sort_unstable();
        ks.dedup();
        // Asked again each round: a promotion the owner had no room for is retried (one in
        // progress is not started twice).
        if !promote(&ks) {
            return;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(std::time::Duration::from_millis(20));
        let Ok((_, found)) = sh.lookup(&ks) else {
            break;
        };
        let mut ready: Vec<Read<'_>> = Vec::new();
        let mut which: Vec<usize> = Vec::new();
        for &i in &left {
            let r = &reads[i];
            let Ok(k) = ks.binary_search(&r.key) else {
                continue;
            };
            let g = &found[k];
            let in_memory = g.replicas.iter().any(|d| !on_disk(&d));
            if g.code == code::OK && g.version == r.found.version && in_memory {
                ready.push(Read {
                    key: r.key,
                    dst: r.dst,
                    off: r.off,
                    len: r.len,
                    found: g,
                });
                which.push(i);
            }
        }
        if !ready.is_empty() {
            // SAFETY: the same destinations, per this fn's contract; `found` holds them now.
            let got = unsafe { read_replicas(sh, &ready, fresh) };
            for (i, r) in which.iter().zip(got) {
                out[*i] = r;
            }
            left.retain(|i| !which.contains(i));
        }
        sh.read_done(&found, &ks);
    }
}
