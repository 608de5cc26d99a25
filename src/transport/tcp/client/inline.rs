//! The inline round trip: which batches the submitting thread sends itself, and its reading of
//! their replies, on one lane or spread over several (whichever lane has a reply arriving is
//! served first, each lane in order).

use super::*;
use crate::sync::LockClean;
use crate::transport::tcp::net::{SPIN_WAIT, spin_readable, wait_readable};

/// How long a submitting thread waits for the next reply to begin arriving before it hands the
/// rest to the lanes' receiver threads.
pub(super) const INLINE_WAIT: Duration = Duration::from_millis(2);

/// Requests up to this many bytes in all may be sent, and their replies read, by the submitting
/// thread itself when a lane is idle (the KV-cache block pattern: a few blocks of 64-256 KiB);
/// larger ones are queued so that the lane threads share them without holding up the caller.
const INLINE_MAX_BYTES: u64 = 2 << 20;

/// When the submitting thread waits for the batch anyway (`Engine::submit_for_wait`) and
/// batches stay on one lane (`spread` off), it moves READ batches of any size itself (the peer
/// gathers the replies, this thread only receives), and batches with WRITEs up to 4 MiB
/// (beyond, two lane threads sending in parallel win). 2 CPUs, two processes: READ 1 MiB x4
/// 1.4-1.5x, 1 MiB x32 1.2-1.3x, store `batch_get_into` of 256 MiB 59-64 -> 48-52 ms (with a
/// 64 MiB cap / none); WRITE 1 MiB x4 1.2x, but 1 MiB x32 0.8x had it been inline.
const WAITED_INLINE_READ_BYTES: u64 = u64::MAX;
const WAITED_INLINE_WRITE_BYTES: u64 = 4 << 20;

/// Such a waited READ batch may hold any number of slices, more than one gathered send
/// ([`ClientConfig::gather`]). Its headers go out in runs of at most this many, and the caller
/// reads one run's replies only after sending the next: a run's headers must fit in the socket
/// buffers while the peer is blocked sending the replies we have not read yet, and 1024 x 24 B
/// is far below the receive buffer Linux gives a TCP socket (128 KiB by default; the `tcp_rmem`
/// minimum of 4 KiB only under memory pressure). 2 CPUs, two processes: 16 MiB x32 READ
/// (512 slices of 1 MiB) 4.7 -> 6.3 GB/s; READ of 32,768 x 128 B (scatter) 15.4-16.6 -> 7.3-8.2 ms,
/// of 4,096 x 128 B 1.7 -> 1.05-1.2 ms (no lane-thread hand-offs).
const WAITED_INLINE_READ_RUN: usize = 1024;

/// Inline requests of at least this many bytes in all are spread over every idle lane (each
/// lane's server thread sends or receives its part in parallel).
const SPREAD_MIN_BYTES: u64 = 256 << 10;

/// Whether inline batches are spread over the lanes when the configuration does not say: on
/// hosts with 4 or more CPUs. With fewer, a same-host peer's server threads plus the caller
/// outnumber the CPUs, and one lane whose server gathers its replies into one send wins
/// (READ 256 KiB x4: 4.7 vs 3.1 GB/s on 2 CPUs).
pub fn spread_by_default() -> bool {
    crate::cpus::available() >= 4
}

/// Cuts `slices` (`bytes` in all) into at most `parts` runs of consecutive slices with about
/// the same number of bytes each.
fn split_by_bytes(slices: Vec<Slice>, bytes: u64, parts: usize) -> Vec<Vec<Slice>> {
    let mut out: Vec<Vec<Slice>> = Vec::with_capacity(parts);
    let mut cur = Vec::new();
    let (mut acc, mut done) = (0u64, 0u64);
    let share = bytes.div_ceil(parts.max(1) as u64);
    for s in slices {
        acc += s.len;
        cur.push(s);
        if acc >= share * (done + 1) && out.len() + 1 < parts {
            out.push(std::mem::take(&mut cur));
            done += 1;
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// Sends `slices` from the calling thread, and reads their replies there, when they are small
/// enough (or the caller waits for them anyway), carry no GPU memory (staging runs on a lane's
/// own stream and buffers, never on the application's thread), nothing is queued and a lane is
/// idle; spread over every idle lane when they are large enough to gain from it. Gives them
/// back (`Err`) to be queued for the lanes otherwise, and a large waited READ also while the
/// peer's [`pace::ReadPace`] says the caller has lately been reading slowly.
pub(super) fn try_submit(sh: &Shared, slices: Vec<Slice>) -> Result<(), Vec<Slice>> {
    let (bytes, gpu, writes) = slices.iter().fold((0u64, false, false), |(b, g, w), s| {
        (b + s.len, g || s.gpu.is_some(), w || s.op == Opcode::Write)
    });
    let waited = !sh.cfg.spread && slices.first().is_some_and(|s| s.done.caller_waits());
    let (inline_max, max_slices) = match (waited, writes) {
        (true, false) => (WAITED_INLINE_READ_BYTES, usize::MAX),
        (true, true) => (WAITED_INLINE_WRITE_BYTES, sh.cfg.gather),
        (false, _) => (INLINE_MAX_BYTES, sh.cfg.gather),
    };
    // A large waited READ goes to the lanes for a while after the caller read some slowly
    // (when they can read it in parallel: more than one slice).
    let paced = waited && !writes && bytes >= pace::PACED_MIN_BYTES && slices.len() > 1;
    if gpu
        || bytes > inline_max
        || slices.len() > max_slices
        || !sh.queue.is_empty()
        || (paced && !sh.pace.caller_reads(Instant::now()))
    {
        return Err(slices);
    }
    let spread = sh.cfg.spread && bytes >= SPREAD_MIN_BYTES && slices.len() > 1;
    let mut idle = Vec::new();
    for (lane, m) in sh.lanes_tx.iter().enumerate() {
        let guard = m.try_lock_clean();
        if let Some(g) = guard {
            idle.push((lane, g));
            if !spread {
                break;
            }
        }
    }
    if idle.is_empty() {
        return Err(slices);
    }
    if waited && !writes {
        // `waited` means one lane (no spread): any number of slices, in runs.
        let (lane, tx) = &mut idle[0];
        let start = Instant::now();
        let read_here = read_in_runs(sh, *lane, tx, slices);
        if paced && read_here {
            let now = Instant::now();
            sh.pace.record(bytes, now - start, now);
        }
    } else {
        let parts = split_by_bytes(slices, bytes, idle.len());
        let mine: Vec<_> = idle
            .iter_mut()
            .zip(parts)
            .map(|((lane, tx), mut part)| tx.send_collect(sh, *lane, &mut part, true))
            .collect();
        let mut lanes: Vec<LaneReplies<'_>> = idle
            .iter()
            .zip(mine)
            .filter(|(_, m)| !m.is_empty())
            .map(|((lane, tx), m)| (*lane, &tx.expect, m.into_iter()))
            .collect();
        if !lanes.is_empty() {
            receive(sh, &mut lanes);
        }
    }
    let owed = sh.addr.vm_pid != 0 && idle.iter().any(|(lane, _)| sh.owed_count(*lane) > 0);
    drop(idle);
    if owed {
        // Owed "copy done" frames ride on the next request, or go out shortly.
        sh.arm_done_flush();
    }
    Ok(())
}

/// Slices awaiting a reply on one lane: (lane, its receiver thread's queue, slices in order).
pub(super) type LaneReplies<'a> = (
    usize,
    &'a Sender<Expect>,
    std::vec::IntoIter<(Slice, VmSent)>,
);

/// Reads the replies of every lane in `lanes` on the calling thread. The caller holds each
/// lane's sending half, so nothing else is posted to those lanes meanwhile; whatever has not
/// begun to arrive within [`INLINE_WAIT`] of the last progress goes to the receiver threads,
/// still in order. True when every reply was read here.
pub(super) fn receive(sh: &Shared, lanes: &mut [LaneReplies<'_>]) -> bool {
    let mut rx: Vec<_> = lanes.iter().map(|(lane, _, _)| sh.lane_rx(*lane)).collect();
    let mut heads: Vec<Option<(Slice, VmSent)>> = lanes.iter_mut().map(|l| l.2.next()).collect();
    let mut deadline = Instant::now() + INLINE_WAIT;
    let mut fds: Vec<libc::pollfd> = Vec::with_capacity(lanes.len());
    loop {
        let mut progressed = false;
        fds.clear();
        for i in 0..lanes.len() {
            while heads[i].is_some() {
                match rx[i].poll_fd() {
                    None => {
                        let (s, vm) = heads[i].take().expect("checked");
                        reply::handle_reply(sh, lanes[i].0, &mut rx[i], s, vm);
                        heads[i] = lanes[i].2.next();
                        progressed = true;
                    }
                    Some(fd) => {
                        fds.push(libc::pollfd {
                            fd,
                            events: libc::POLLIN,
                            revents: 0,
                        });
                        break;
                    }
                }
            }
        }
        if fds.is_empty() {
            return true;
        }
        let now = Instant::now();
        if progressed {
            deadline = now + INLINE_WAIT;
        }
        if now >= deadline
            || !(spin_readable(&mut fds, SPIN_WAIT) || wait_readable(&mut fds, deadline - now))
        {
            break;
        }
        for (i, r) in rx.iter_mut().enumerate() {
            if let Some(fd) = r.poll_fd().filter(|_| heads[i].is_some()) {
                if fds.iter().any(|p| p.fd == fd && p.revents != 0) {
                    r.mark_readable();
                }
            }
        }
    }
    // Hand the rest over, each lane in order.
    for (i, (lane, expect, rest)) in lanes.iter_mut().enumerate() {
        for (s, vm) in heads[i].take().into_iter().chain(rest) {
            if let Err(Expect::Reply(s, _)) = sh.post(*lane, expect, Expect::Reply(s, vm)) {
                s.done.finish(Err(ErrorKind::Shutdown));
            }
        }
    }
    false
}

/// Sends a READ batch whose caller waits for it on `lane` (whose sending half `tx` the caller
/// holds) in runs of [`WAITED_INLINE_READ_RUN`] requests, and reads each run's replies on the
/// calling thread once the next run is sent: the peer always has requests queued, and never
/// more unread replies than two runs (see the constant for why that bounds the headers in
/// flight). True when every reply was read here (none failed before sending, none handed to
/// the receiver thread).
///
/// Replies come in the order the requests went out, so whoever reads them must take them in
/// that order. The caller holds one run it has sent but not read while it reads the one before:
/// when part of that earlier run goes to the receiver thread (its replies were slow to come),
/// the run held goes there too, behind it; when sending the next run had to reconnect, the run
/// held was lost with the old connection and is re-sent. Read here instead, it would take
/// replies meant for other requests: every byte landing in another request's place, and every
/// request reported complete.
pub(super) fn read_in_runs(
    sh: &Shared,
    lane: usize,
    tx: &mut send::LaneTx,
    slices: Vec<Slice>,
) -> bool {
    let mut slices = slices.into_iter();
    let mut unread: Option<Vec<(Slice, VmSent)>> = None;
    let mut all_here = true;
    loop {
        let mut run: Vec<Slice> = slices.by_ref().take(WAITED_INLINE_READ_RUN).collect();
        if run.is_empty() {
            break;
        }
        let sent = run.len();
        let generation = tx.generation;
        let mine = tx.send_collect(sh, lane, &mut run, true);
        all_here &= mine.len() == sent;
        if tx.generation != generation {
            // A new connection: the receiver thread reads the new stream from its next message
            // on, so no reply of the old one can be read any more.
            if let Some(held) = unread.take() {
                all_here = false;
                lost_with_connection(sh, lane, held);
            }
        }
        if let Some(prev) = unread.replace(mine) {
            if !receive(sh, &mut [(lane, &tx.expect, prev.into_iter())]) {
                all_here = false;
                if let Some(held) = unread.take() {
                    hand_over(sh, lane, &tx.expect, held);
                }
            }
        }
    }
    if let Some(last) = unread {
        all_here &= receive(sh, &mut [(lane, &tx.expect, last.into_iter())]);
    }
    all_here
}

/// Posts `held` (sent on `lane`, replies not read) to the lane's receiver thread, in order.
fn hand_over(sh: &Shared, lane: usize, expect: &Sender<Expect>, held: Vec<(Slice, VmSent)>) {
    for (s, vm) in held {
        if let Err(Expect::Reply(s, _)) = sh.post(lane, expect, Expect::Reply(s, vm)) {
            s.done.finish(Err(ErrorKind::Shutdown));
        }
    }
}

/// Fails or re-queues `held`, sent on a connection of `lane` that has since been replaced
/// before their replies were read (what the receiver does with the slices of a broken stream).
fn lost_with_connection(sh: &Shared, lane: usize, held: Vec<(Slice, VmSent)>) {
    for (s, _) in held {
        sh.credit[lane].give(s.len);
        sh.fail_or_retry(s, ErrorKind::Socket, true);
    }
}
