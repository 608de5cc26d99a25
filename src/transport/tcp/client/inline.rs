//! Replies read by the submitting thread itself (inline round trip), on one lane or spread
//! over several: whichever lane has a reply arriving is served first, each lane in order.

use super::*;
use crate::transport::tcp::net::{SPIN_WAIT, spin_readable, wait_readable};

/// How long a submitting thread waits for the next reply to begin arriving before it hands the
/// rest to the lanes' receiver threads.
pub(super) const INLINE_WAIT: Duration = Duration::from_millis(2);

/// Slices awaiting a reply on one lane: (lane, its receiver thread's queue, slices in order).
pub(super) type LaneReplies<'a> = (
    usize,
    &'a Sender<Expect>,
    std::vec::IntoIter<(Slice, VmSent)>,
);

/// Reads the replies of every lane in `lanes` on the calling thread. The caller holds each
/// lane's sending half, so nothing else is posted to those lanes meanwhile; whatever has not
/// begun to arrive within [`INLINE_WAIT`] of the last progress goes to the receiver threads,
/// still in order.
pub(super) fn receive(sh: &Shared, lanes: &mut [LaneReplies<'_>]) {
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
            return;
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
}

/// Sends a READ batch whose caller waits for it on `lane` (whose sending half `tx` the caller
/// holds) in runs of [`WAITED_INLINE_READ_RUN`] requests, and reads each run's replies on the
/// calling thread once the next run is sent: the peer always has requests queued, and never
/// more unread replies than two runs (see the constant for why that bounds the headers in
/// flight).
pub(super) fn read_in_runs(sh: &Shared, lane: usize, tx: &mut send::LaneTx, slices: Vec<Slice>) {
    let mut slices = slices.into_iter();
    let mut unread: Option<Vec<(Slice, VmSent)>> = None;
    loop {
        let mut run: Vec<Slice> = slices.by_ref().take(WAITED_INLINE_READ_RUN).collect();
        if run.is_empty() {
            break;
        }
        let mine = tx.send_collect(sh, lane, &mut run, true);
        if let Some(prev) = unread.replace(mine) {
            receive(sh, &mut [(lane, &tx.expect, prev.into_iter())]);
        }
    }
    if let Some(last) = unread {
        receive(sh, &mut [(lane, &tx.expect, last.into_iter())]);
    }
}
