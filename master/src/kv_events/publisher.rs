//! The publisher thread: takes up to [`MAX_BATCH`] events off the queue, numbers the message,
//! encodes it, sends it on the PUB socket (never blocking: a subscriber past its high-water mark
//! loses messages, which its sequence numbers show) and keeps it for replay. It sleeps while the
//! queue is empty; a push wakes it.

use super::{Event, KvEvents, MAX_BATCH, wire};
use std::sync::Arc;
use std::sync::atomic::{Ordering, fence};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tidewire::tw_log;

/// Messages the PUB socket queues per subscriber before it drops (libzmq's default is 1,000).
const SEND_HWM: i32 = 100_000;

/// The longest the publisher sleeps without a wake-up (a safety net; pushes wake it).
const IDLE_WAIT: Duration = Duration::from_millis(100);

/// After a message of fewer than [`MAX_BATCH`] events (the queue ran dry), how long the
/// publisher lets events gather before it looks again: fuller messages, and a few thousand
/// wake-ups a second at most instead of one per put (a wake-up costs the put path a syscall and
/// the machine a context switch). Events wait at most about this long.
const GATHER: Duration = Duration::from_micros(500);

pub(super) fn start(ev: Arc<KvEvents>) -> Result<(), String> {
    let endpoint = ev.cfg.bind_endpoint.clone();
    let ctx = zmq::Context::new();
    let sock = ctx
        .socket(zmq::PUB)
        .map_err(|e| format!("kv events: ZMQ PUB socket: {e}"))?;
    sock.set_sndhwm(SEND_HWM)
        .and_then(|_| sock.set_linger(0))
        .map_err(|e| format!("kv events: ZMQ socket options: {e}"))?;
    sock.bind(&endpoint)
        .map_err(|e| format!("--kv_events_bind_endpoint={endpoint}: cannot bind: {e}"))?;
    let e = ev.clone();
    let handle = std::thread::Builder::new()
        .name("tw-kv-events".into())
        .spawn(move || run(&e, ctx, sock))
        .map_err(|e| format!("kv events: thread: {e}"))?;
    let _ = ev.thread.set(handle.thread().clone());
    tw_log!(
        tidewire::log::Level::Info,
        "kv_events publisher enabled on {endpoint} backend_id={}",
        ev.cfg.backend_id
    );
    Ok(())
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The publisher's numbering: sequence numbers and event ids, and the queue losses it has
/// accounted for.
pub(super) struct Numbering {
    pub(super) seq: u64,
    pub(super) next_id: u64,
    overflowed_seen: u64,
}

impl Numbering {
    pub(super) fn new() -> Numbering {
        Numbering {
            seq: 0,
            next_id: 1,
            overflowed_seen: 0,
        }
    }

    /// Accounts for events the queue dropped since the last call: they use up their event
    /// ids, and one sequence number is skipped so subscribers see the gap. Returns whether any
    /// were lost.
    pub(super) fn account_losses(&mut self, ev: &KvEvents) -> bool {
        // A leader that took over numbers above its predecessor.
        let first = ev.first_seq.load(Ordering::SeqCst);
        self.seq = self.seq.max(first - 1);
        let overflowed = ev.stats.overflowed.load(Ordering::SeqCst);
        let lost = overflowed - self.overflowed_seen;
        if lost == 0 {
            return false;
        }
        self.overflowed_seen = overflowed;
        self.next_id += lost;
        self.seq += 1;
        ev.lost_before(self.seq + 1);
        // Everything lost was pushed before this: an inventory read after it reflects them.
        ev.stats.last_seq.store(self.seq, Ordering::SeqCst);
        true
    }
}

/// Takes up to [`MAX_BATCH`] events and publishes them as one message (after accounting for
/// losses). Returns the number of events taken (0: nothing was sent).
pub(super) fn publish_once(
    ev: &KvEvents,
    n: &mut Numbering,
    batch: &mut Vec<Event>,
    send: &mut dyn FnMut(u64, &[u8]) -> bool,
) -> usize {
    batch.clear();
    while batch.len() < MAX_BATCH {
        match ev.pop() {
            Some(e) => batch.push(e),
            None => break,
        }
    }
    n.account_losses(ev);
    if batch.is_empty() {
        return 0;
    }
    let mut payload = Vec::with_capacity(256 * batch.len());
    let counted = wire::encode_batch(&ev.cfg, now_ms(), n.next_id, batch, &mut payload);
    n.next_id += batch.len() as u64;
    n.seq += 1;
    let s = &ev.stats;
    s.skipped_unparsed_keys
        .fetch_add(counted.unparsed, Ordering::Relaxed);
    if send(n.seq, &payload) {
        s.published_batches.fetch_add(1, Ordering::Relaxed);
        s.published_events
            .fetch_add(counted.events, Ordering::Relaxed);
    } else {
        // Replay still has it: a subscriber that notices the gap gets it back.
        s.dropped_events
            .fetch_add(counted.events, Ordering::Relaxed);
    }
    ev.keep(n.seq, payload.into());
    s.last_seq.store(n.seq, Ordering::SeqCst);
    batch.len()
}

fn run(ev: &KvEvents, _ctx: zmq::Context, sock: zmq::Socket) {
    let mut n = Numbering::new();
    let mut batch = Vec::with_capacity(MAX_BATCH);
    let mut failures = 0u64;
    let mut send = |seq: u64, payload: &[u8]| {
        let sent = sock
            .send(&b""[..], zmq::SNDMORE | zmq::DONTWAIT)
            .and_then(|_| sock.send(&seq.to_be_bytes()[..], zmq::SNDMORE | zmq::DONTWAIT))
            .and_then(|_| sock.send(payload, zmq::DONTWAIT));
        if let Err(e) = &sent {
            failures += 1;
            if failures.is_power_of_two() {
                tw_log!(
                    tidewire::log::Level::Warn,
                    "kv events: send of message {seq} failed ({failures} so far): {e}"
                );
            }
        }
        sent.is_ok()
    };
    loop {
        match publish_once(ev, &mut n, &mut batch, &mut send) {
            MAX_BATCH => continue,
            0 => {}
            _ => {
                // The queue ran dry: let the next events gather (no push wakes us meanwhile).
                std::thread::sleep(GATHER);
                continue;
            }
        }
        ev.idle.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if ev.queued() {
            ev.idle.store(false, Ordering::SeqCst);
            continue;
        }
        std::thread::park_timeout(IDLE_WAIT);
        ev.idle.store(false, Ordering::SeqCst);
    }
}
