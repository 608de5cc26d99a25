//! The reactor: one thread per process that accepts, reads heads, keeps the deadlines of parked
//! connections and hands ready ones to the pool (see the module docs of `net`).

use super::pool::{Job, Pool, Worker};
use super::sys::{self, CONN_EVENTS, Epoll, LEVEL_IN, Wake};
use super::{AtCap, Limits, Next, Service, Session, Want};
use crate::log::Level;
use crossbeam_channel::{Receiver, Sender};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The epoll token of the wake-up eventfd.
pub(super) const WAKE: u64 = u64::MAX;
/// Listener tokens carry this bit; connection tokens are `generation << 32 | index`.
const LISTENER: u64 = 1 << 62;
/// Most connections taken from one listener per reactor turn (fairness between listeners).
const ACCEPT_BURST: usize = 64;
/// The accept queue asked for on every listening socket.
pub(super) const ACCEPT_BACKLOG: i32 = 4096;
/// The pause after `accept` failed for want of descriptors or memory.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// Sweeps of expired deadlines run at most this often.
const SWEEP_EVERY: Duration = Duration::from_millis(20);
/// A connection must have been quiet this long to be evicted at the cap.
const EVICT_QUIET: Duration = Duration::from_millis(100);
/// The longest the reactor sleeps without looking at the clock.
const MAX_SLEEP: Duration = Duration::from_millis(500);

pub(super) enum Cmd {
    Add(Box<ListenerState>, Sender<u32>),
    Remove(u32, Sender<()>, bool),
    Stop,
}

/// A worker's hand-back of a connection.
struct Done {
    index: u32,
    generation: u32,
    stream: TcpStream,
    session: Box<dyn Session>,
    next: Next,
}

pub(super) struct ListenerState {
    socket: TcpListener,
    service: Arc<dyn Service>,
    limits: Limits,
    open: usize,
    busy: usize,
    /// Set while the listener is being removed: answered once `busy` is 0.
    removing: Option<Sender<()>>,
    paused_until: Option<Instant>,
    last_warn: Option<Instant>,
}

impl ListenerState {
    pub(super) fn new(socket: TcpListener, service: Arc<dyn Service>, limits: Limits) -> Self {
        ListenerState {
            socket,
            service,
            limits,
            open: 0,
            busy: 0,
            removing: None,
            paused_until: None,
            last_warn: None,
        }
    }
}

enum State {
    /// Fields drop in this order: the session (which may name the socket) before the socket.
    Parked {
        session: Box<dyn Session>,
        stream: TcpStream,
    },
    Busy,
}

struct Conn {
    listener: u32,
    fd: RawFd,
    state: State,
    head: Vec<u8>,
    deadline: Instant,
    head_since: Option<Instant>,
    last_active: Instant,
}

struct Slot {
    generation: u32,
    conn: Option<Conn>,
}

pub(super) struct Reactor {
    epoll: Epoll,
    wake: Arc<Wake>,
    cmds: Receiver<Cmd>,
    done_tx: Sender<Done>,
    done_rx: Receiver<Done>,
    pool: Arc<Pool>,
    listeners: Vec<Option<ListenerState>>,
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// Scratch for heads read from sockets.
    buf: Vec<u8>,
    /// The earliest deadline of a parked connection, when known.
    next_deadline: Option<Instant>,
    last_sweep: Instant,
    /// Connections open over every listener, and how many may be before the quietest idle one
    /// is evicted to take a new one (see `descriptors`).
    open_total: usize,
    budget: usize,
}

impl Reactor {
    pub(super) fn new(
        epoll: Epoll,
        wake: Arc<Wake>,
        cmds: Receiver<Cmd>,
        pool: Arc<Pool>,
    ) -> Reactor {
        let (done_tx, done_rx) = crossbeam_channel::unbounded();
        Reactor {
            epoll,
            wake,
            cmds,
            done_tx,
            done_rx,
            pool,
            listeners: Vec::new(),
            slots: Vec::new(),
            free: Vec::new(),
            buf: vec![0u8; 64 << 10],
            next_deadline: None,
            last_sweep: Instant::now(),
            open_total: 0,
            budget: super::descriptors::connection_budget(),
        }
    }

    pub(super) fn run(&mut self) {
        let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; 256];
        loop {
            let now = Instant::now();
            let sleep = self
                .next_wake()
                .map_or(MAX_SLEEP, |t| t.saturating_duration_since(now))
                .min(MAX_SLEEP);
            let n = match self.epoll.wait(&mut events, sleep) {
                Ok(n) => n,
                Err(e) => {
                    tw_log!(Level::Error, "net: epoll_wait failed: {e}");
                    std::thread::sleep(Duration::from_millis(10));
                    0
                }
            };
            for ev in &events[..n] {
                let token = ev.u64;
                if token == WAKE {
                    self.wake.drain();
                } else if token & LISTENER != 0 {
                    self.accept((token & !LISTENER) as u32);
                } else {
                    self.progress((token & 0xffff_ffff) as u32, (token >> 32) as u32);
                }
            }
            while let Ok(d) = self.done_rx.try_recv() {
                self.hand_back(d);
            }
            while let Ok(cmd) = self.cmds.try_recv() {
                match cmd {
                    Cmd::Add(l, ack) => {
                        let id = self.add_listener(*l);
                        let _ = ack.send(id);
                    }
                    Cmd::Remove(id, ack, wait) => self.remove_listener(id, ack, wait),
                    Cmd::Stop => return,
                }
            }
            self.timers();
            // Work queued behind workers that all block (a slow peer each) gets more workers.
            self.pool.grow_if_starved();
        }
    }

    /// When the reactor must next look at the clock: the earliest parked deadline (no sooner
    /// than the next allowed sweep) or a paused listener's resumption.
    fn next_wake(&self) -> Option<Instant> {
        let sweep = self
            .next_deadline
            .map(|d| d.max(self.last_sweep + SWEEP_EVERY));
        let resume = self
            .listeners
            .iter()
            .flatten()
            .filter_map(|l| l.paused_until)
            .min();
        match (sweep, resume) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn add_listener(&mut self, l: ListenerState) -> u32 {
        let id = match self.listeners.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                self.listeners.push(None);
                self.listeners.len() - 1
            }
        } as u32;
        if let Err(e) = self
            .epoll
            .add(l.socket.as_raw_fd(), LEVEL_IN, LISTENER | id as u64)
        {
            tw_log!(Level::Error, "net: cannot watch a listening socket: {e}");
            return u32::MAX;
        }
        self.listeners[id as usize] = Some(l);
        id
    }

    fn remove_listener(&mut self, id: u32, ack: Sender<()>, wait: bool) {
        let Some(l) = self.listeners.get_mut(id as usize).and_then(Option::as_mut) else {
            let _ = ack.send(());
            return;
        };
        let _ = self.epoll.delete(l.socket.as_raw_fd());
        l.paused_until = None;
        let mut parked = Vec::new();
        for (i, s) in self.slots.iter().enumerate() {
            if let Some(c) = &s.conn {
                if c.listener == id {
                    match c.state {
                        State::Parked { .. } => parked.push(i as u32),
                        // Only this thread closes connection sockets, so `fd` is open.
                        State::Busy => sys::shutdown_fd(c.fd),
                    }
                }
            }
        }
        for i in parked {
            self.close(i);
        }
        let l = self.listeners[id as usize].as_mut().expect("present");
        if l.busy == 0 || !wait {
            let _ = ack.send(());
            if l.busy == 0 {
                self.listeners[id as usize] = None;
            } else {
                l.removing = Some(crossbeam_channel::bounded(1).0);
            }
        } else {
            l.removing = Some(ack);
        }
    }

    fn accept(&mut self, id: u32) {
        for _ in 0..ACCEPT_BURST {
            let Some(l) = self.listeners.get_mut(id as usize).and_then(Option::as_mut) else {
                return;
            };
            if l.removing.is_some() || l.paused_until.is_some() {
                return;
            }
            let stream = match l.socket.accept() {
                Ok((s, _)) => s,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    let starved = matches!(
                        e.raw_os_error(),
                        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
                    );
                    // Out of descriptors: an idle connection gives its own back for this one.
                    if starved && self.evict_quietest(None) {
                        continue;
                    }
                    let l = self.listeners[id as usize].as_mut().expect("present");
                    if starved {
                        // Stop watching the socket for a moment: it stays readable while the
                        // descriptors are gone, and accepting again at once would spin.
                        let _ = self.epoll.delete(l.socket.as_raw_fd());
                        l.paused_until = Some(Instant::now() + ACCEPT_BACKOFF);
                        if l.last_warn
                            .is_none_or(|t| t.elapsed() >= Duration::from_secs(1))
                        {
                            l.last_warn = Some(Instant::now());
                            tw_log!(
                                Level::Warn,
                                "{}: accept: {e}; backing off",
                                l.service.name()
                            );
                        }
                    } else {
                        tw_log!(Level::Debug, "{}: accept: {e}", l.service.name());
                    }
                    return;
                }
            };
            if l.open >= l.limits.max_connections && !self.make_room(id, &stream) {
                continue;
            }
            if self.open_total >= self.budget {
                // Keep the process's reserve of descriptors; with nothing idle to close, the
                // new connection is taken anyway (it already holds its descriptor).
                self.evict_quietest(None);
            }
            self.admit(id, stream);
        }
    }

    /// At the cap: evicts the quietest parked connection of listener `id` (per its limits) or
    /// refuses `stream`. True when `stream` may be admitted.
    fn make_room(&mut self, id: u32, stream: &TcpStream) -> bool {
        let l = self.listeners[id as usize].as_mut().expect("present");
        let warn = l
            .last_warn
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(1));
        if l.limits.at_cap == AtCap::EvictQuietest && self.evict_quietest(Some(id)) {
            return true;
        }
        let l = self.listeners[id as usize].as_mut().expect("present");
        if warn {
            l.last_warn = Some(Instant::now());
            tw_log!(
                Level::Warn,
                "{}: {} connections open; refusing {:?}",
                l.service.name(),
                l.open,
                stream.peer_addr().ok()
            );
        }
        l.service.refuse(stream.as_raw_fd());
        false
    }

    /// Closes the connection parked longest without a request (at least [`EVICT_QUIET`]) of
    /// listener `only`, or of any listener whose rule at the cap is to evict. True when one was
    /// closed.
    fn evict_quietest(&mut self, only: Option<u32>) -> bool {
        let now = Instant::now();
        let listeners = &self.listeners;
        let evicts = |l: u32| {
            only.map_or_else(
                || {
                    listeners[l as usize]
                        .as_ref()
                        .is_some_and(|s| s.limits.at_cap == AtCap::EvictQuietest)
                },
                |o| o == l,
            )
        };
        let quietest = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.conn.as_ref().map(|c| (i, c)))
            .filter(|(_, c)| matches!(c.state, State::Parked { .. }) && evicts(c.listener))
            .filter(|(_, c)| now.duration_since(c.last_active) >= EVICT_QUIET)
            .min_by_key(|(_, c)| c.last_active)
            .map(|(i, _)| i as u32);
        quietest.inspect(|&i| self.close(i)).is_some()
    }

    fn admit(&mut self, id: u32, stream: TcpStream) {
        let l = self.listeners[id as usize].as_mut().expect("present");
        let session = l.service.open(&stream);
        let now = Instant::now();
        let deadline = now + l.limits.first_request.min(l.limits.idle_timeout);
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(Slot {
                    generation: 0,
                    conn: None,
                });
                (self.slots.len() - 1) as u32
            }
        };
        let slot = &mut self.slots[index as usize];
        slot.generation = slot.generation.wrapping_add(1);
        let token = (slot.generation as u64) << 32 | index as u64;
        let fd = stream.as_raw_fd();
        if let Err(e) = self.epoll.add(fd, CONN_EVENTS, token) {
            tw_log!(
                Level::Warn,
                "{}: cannot watch a connection: {e}",
                l.service.name()
            );
            self.free.push(index);
            return;
        }
        l.open += 1;
        self.open_total += 1;
        slot.conn = Some(Conn {
            listener: id,
            fd,
            state: State::Parked { stream, session },
            head: Vec::new(),
            deadline,
            head_since: None,
            last_active: now,
        });
        let generation = slot.generation;
        self.note_deadline(deadline);
        // Bytes may have arrived before the socket was watched.
        self.progress(index, generation);
    }

    fn note_deadline(&mut self, d: Instant) {
        self.next_deadline = Some(self.next_deadline.map_or(d, |n| n.min(d)));
    }

    /// Reads what a parked connection has of its next head, and hands it to a worker once
    /// the head is complete (or closes it).
    fn progress(&mut self, index: u32, generation: u32) {
        loop {
            let Some(slot) = self.slots.get_mut(index as usize) else {
                return;
            };
            if slot.generation != generation {
                return;
            }
            let Some(c) = slot.conn.as_mut() else { return };
            let State::Parked { session, .. } = &mut c.state else {
                return; // a worker has it; it looks at the socket itself
            };
            let at_most = match session.want(&c.head) {
                Want::Ready => return self.dispatch(index),
                Want::Close => return self.close(index),
                Want::More(n) if n > c.head.len() => n,
                Want::More(_) => return self.close(index),
            };
            let room = (at_most - c.head.len()).min(self.buf.len());
            match sys::recv_now(c.fd, &mut self.buf[..room]) {
                Ok(0) => return self.close(index),
                Ok(k) => {
                    c.head.extend_from_slice(&self.buf[..k]);
                    if c.head_since.is_none() {
                        let now = Instant::now();
                        c.head_since = Some(now);
                        let limits = self.listeners[c.listener as usize]
                            .as_ref()
                            .expect("present")
                            .limits;
                        c.deadline = c.deadline.min(now + limits.head_timeout);
                        let d = c.deadline;
                        self.note_deadline(d);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    // Wait for the next bytes: the one-shot registration fired (or was never
                    // used since a worker had the connection).
                    let token = (generation as u64) << 32 | index as u64;
                    if self.epoll.rearm(c.fd, CONN_EVENTS, token).is_err() {
                        return self.close(index);
                    }
                    return;
                }
                Err(_) => return self.close(index),
            }
        }
    }

    fn dispatch(&mut self, index: u32) {
        let slot = &mut self.slots[index as usize];
        let generation = slot.generation;
        let c = slot.conn.as_mut().expect("present");
        let State::Parked { stream, session } = std::mem::replace(&mut c.state, State::Busy) else {
            unreachable!("dispatch of a busy connection")
        };
        let head = std::mem::take(&mut c.head);
        c.head_since = None;
        self.listeners[c.listener as usize]
            .as_mut()
            .expect("present")
            .busy += 1;
        let (done, wake) = (self.done_tx.clone(), self.wake.clone());
        let job: Job = Box::new(move |w: &Worker| {
            let mut session = session;
            let mut next = Next::Close;
            crate::guard::guarded("net session", || {
                next = session.serve(&stream, head, w);
            });
            let _ = done.send(Done {
                index,
                generation,
                stream,
                session,
                next,
            });
            wake.wake();
        });
        self.pool.run(job);
    }

    fn hand_back(&mut self, d: Done) {
        let Some(slot) = self.slots.get_mut(d.index as usize) else {
            return;
        };
        if slot.generation != d.generation {
            return;
        }
        let Some(c) = slot.conn.as_mut() else { return };
        let id = c.listener as usize;
        let l = self.listeners[id].as_mut().expect("present");
        l.busy -= 1;
        let closing = l.removing.is_some();
        let now = Instant::now();
        c.state = State::Parked {
            stream: d.stream,
            session: d.session,
        };
        c.last_active = now;
        c.deadline = now + l.limits.idle_timeout;
        let deadline = c.deadline;
        if closing || d.next == Next::Close {
            self.close(d.index);
        } else {
            self.note_deadline(deadline);
            self.progress(d.index, d.generation);
        }
        let l = self.listeners[id].as_mut().expect("present");
        if l.busy == 0 {
            if let Some(ack) = l.removing.take() {
                let _ = ack.send(());
                self.listeners[id] = None;
            }
        }
    }

    /// Ends a parked connection: its session first (which may hold state naming the socket),
    /// then the socket.
    fn close(&mut self, index: u32) {
        let slot = &mut self.slots[index as usize];
        let Some(c) = slot.conn.take() else { return };
        self.open_total -= 1;
        if let Some(l) = self.listeners[c.listener as usize].as_mut() {
            l.open -= 1;
        }
        drop(c); // a parked one's session, then its socket (the field order of `State`)
        self.free.push(index);
    }

    /// Closes parked connections past their deadline; resumes paused listeners.
    fn timers(&mut self) {
        let now = Instant::now();
        for id in 0..self.listeners.len() {
            let Some(l) = self.listeners[id].as_mut() else {
                continue;
            };
            if l.paused_until.is_some_and(|t| t <= now) {
                l.paused_until = None;
                let fd = l.socket.as_raw_fd();
                if let Err(e) = self.epoll.add(fd, LEVEL_IN, LISTENER | id as u64) {
                    tw_log!(
                        Level::Error,
                        "net: cannot watch a listening socket again: {e}"
                    );
                }
            }
        }
        if self.next_deadline.is_none_or(|d| d > now) || now < self.last_sweep + SWEEP_EVERY {
            return;
        }
        self.last_sweep = now;
        let mut expired = Vec::new();
        let mut next: Option<Instant> = None;
        for (i, s) in self.slots.iter().enumerate() {
            let Some(c) = &s.conn else { continue };
            if !matches!(c.state, State::Parked { .. }) {
                continue;
            }
            if c.deadline <= now {
                expired.push(i as u32);
            } else {
                next = Some(next.map_or(c.deadline, |n| n.min(c.deadline)));
            }
        }
        self.next_deadline = next;
        for i in expired {
            let c = self.slots[i as usize].conn.as_ref().expect("present");
            let name = self.listeners[c.listener as usize]
                .as_ref()
                .map_or("net", |l| l.service.name());
            let why = if c.head_since.is_some() {
                "a request head that did not arrive in time"
            } else {
                "an idle connection"
            };
            tw_log!(Level::Debug, "{name}: closing {why}");
            self.close(i);
        }
    }
}
