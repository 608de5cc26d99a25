//! The process's connection core: the reactor thread and the pool, started with the first
//! server and stopped with the last, and the handle of one listening socket.

use super::pool::Pool;
use super::reactor::{ACCEPT_BACKLOG, Cmd, ListenerState, Reactor, WAKE};
use super::sys::{self, Epoll, LEVEL_IN, Wake};
use super::{Limits, Service};
use crate::sync::LockClean;
use crossbeam_channel::Sender;
use std::net::TcpListener;
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;

/// This process's core: the reactor thread and the pool, shared by every server.
struct Core {
    wake: Arc<Wake>,
    cmds: Sender<Cmd>,
    thread: Mutex<Option<JoinHandle<()>>>,
    pool: Arc<Pool>,
}

static CORE: Mutex<Weak<Core>> = Mutex::new(Weak::new());

fn core() -> std::io::Result<Arc<Core>> {
    let mut slot = CORE.lock_clean();
    if let Some(c) = slot.upgrade() {
        return Ok(c);
    }
    super::descriptors::raise_limit();
    let epoll = Epoll::new()?;
    let wake = Arc::new(Wake::new()?);
    epoll.add(wake.fd(), LEVEL_IN, WAKE)?;
    let (cmds, cmd_rx) = crossbeam_channel::unbounded();
    let pool = Pool::new();
    let mut reactor = Reactor::new(epoll, wake.clone(), cmd_rx, pool.clone());
    let thread = std::thread::Builder::new()
        .name("tw-net-reactor".into())
        .spawn(move || crate::guard::guarded("net reactor", || reactor.run()))?;
    let c = Arc::new(Core {
        wake,
        cmds,
        thread: Mutex::new(Some(thread)),
        pool,
    });
    *slot = Arc::downgrade(&c);
    Ok(c)
}

impl Drop for Core {
    fn drop(&mut self) {
        let _ = self.cmds.send(Cmd::Stop);
        self.wake.wake();
        if let Some(t) = self.thread.lock_clean().take() {
            let _ = t.join();
        }
        self.pool.stop();
    }
}

/// Threads the connection core runs now in this process (the reactor and the workers); 0 when
/// no server is running.
pub fn core_threads() -> usize {
    let c = CORE.lock_clean().upgrade();
    c.map_or(0, |c| 1 + c.pool.threads())
}

/// A listening socket served by the core; dropping it stops the listener (see [`super::serve`]).
pub struct Listening {
    core: Arc<Core>,
    id: u32,
}

impl Drop for Listening {
    fn drop(&mut self) {
        let (tx, rx) = crossbeam_channel::bounded(1);
        // A worker dropping a server must not wait for its own connection to come back.
        let wait = !super::pool::on_worker();
        if self.core.cmds.send(Cmd::Remove(self.id, tx, wait)).is_ok() {
            self.core.wake.wake();
            let _ = rx.recv();
        }
    }
}

pub(super) fn listen(
    socket: TcpListener,
    service: Arc<dyn Service>,
    limits: Limits,
) -> std::io::Result<Listening> {
    socket.set_nonblocking(true)?;
    sys::raise_backlog(socket.as_raw_fd(), ACCEPT_BACKLOG);
    let core = core()?;
    let state = Box::new(ListenerState::new(socket, service, limits));
    let (tx, rx) = crossbeam_channel::bounded(1);
    core.cmds
        .send(Cmd::Add(state, tx))
        .map_err(|_| std::io::Error::other("net: the reactor has stopped"))?;
    core.wake.wake();
    let id = rx
        .recv()
        .map_err(|_| std::io::Error::other("net: the reactor has stopped"))?;
    if id == u32::MAX {
        return Err(std::io::Error::other(
            "net: cannot watch the listening socket",
        ));
    }
    Ok(Listening { core, id })
}
