//! The client's connections to the master: a small pool of blocking TCP streams, each request
//! with connect and reply deadlines. A pooled connection that turns out dead is retried once on a
//! fresh one; failures map to `RPC_FAIL`/`RPC_TIMEOUT`, never a hang.

use super::StoreError;
use super::proto::{self, FLAG_ONE_WAY, FrameError, Reply, Request, code};
use crate::sync::{LockClean, Recover};
use std::net::TcpStream;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long a caller polls for the master's reply (yielding the CPU between polls) before it
/// sleeps in the kernel. Most replies come sooner (1,024-key `Exist`: ~150 us), and a reply to
/// a sleeping thread waits for its wake-up: polling took a 128-key `batch_is_exist` from 68-108
/// to 41 us p50 and a 1,024-key one from 280-293 to 250 us; 500 us polled no better.
const REPLY_SPIN: Duration = Duration::from_micros(200);

const POOL_MAX: usize = 16;

/// Requests in flight at once per client, each on its own connection; more wait for one to
/// finish, so a process's thread count does not set its connection count at the master (512
/// threads in 8 processes need 128, not 512). Heartbeats do not wait.
const IN_FLIGHT_MAX: usize = POOL_MAX;

/// Pause between attempts to reach the leader during a failover.
const HA_RETRY_PAUSE: Duration = Duration::from_millis(100);

/// Words in a standby master's refusal; a client then looks for the leader again.
pub const STANDBY_MARK: &str = "standby";
const POOL_IDLE: Duration = Duration::from_secs(60);

/// How a client finds the master: a fixed `host:port`, or the leader named in etcd.
enum Target {
    Fixed,
    Elected {
        etcd: crate::etcd::EtcdClient,
        key: String,
    },
}

/// Connections to one master (with HA, to whichever master leads now).
pub struct MasterConn {
    addr: Mutex<(String, u16)>,
    target: Target,
    connect_timeout: Duration,
    rpc_timeout: Duration,
    auth_key: crate::auth::AuthKey,
    pool: Mutex<Vec<(TcpStream, Instant)>>,
    /// Requests in flight (bounded by [`IN_FLIGHT_MAX`]).
    busy: Mutex<usize>,
    freed: Condvar,
}

/// One request's place among those in flight; given back on drop.
struct InFlight<'a>(&'a MasterConn);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        *self.0.busy.lock_clean() -= 1;
        self.0.freed.notify_one();
    }
}

fn io_code(e: &std::io::Error) -> i32 {
    match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => code::RPC_TIMEOUT,
        _ => code::RPC_FAIL,
    }
}

impl MasterConn {
    /// A connection pool for `host:port`, or for the elected master when the address is
    /// `etcd://h1:p;h2:p` (the leader is read from etcd now, and again whenever the master in use
    /// stops answering or says it is a standby). Nothing is connected yet. With `auth_key` on,
    /// every new connection proves it to the master first.
    pub fn new(
        address: &str,
        connect_timeout: Duration,
        rpc_timeout: Duration,
        auth_key: crate::auth::AuthKey,
    ) -> Result<MasterConn, StoreError> {
        let bad = |e: crate::Error| {
            StoreError::new(
                code::INVALID_PARAMS,
                format!("master address {address:?}: {e}"),
            )
        };
        let (target, addr) = match address.trim().strip_prefix("etcd://") {
            Some(list) => {
                let etcd = crate::etcd::EtcdClient::new(list, connect_timeout).map_err(bad)?;
                let key = crate::etcd::election::master_view_key_from_env();
                (Target::Elected { etcd, key }, (String::new(), 0))
            }
            None => (
                Target::Fixed,
                crate::metadata::parse_host_port(address, 50051).map_err(bad)?,
            ),
        };
        let conn = MasterConn {
            addr: Mutex::new(addr),
            target,
            connect_timeout,
            rpc_timeout,
            auth_key,
            pool: Mutex::default(),
            busy: Mutex::new(0),
            freed: Condvar::new(),
        };
        if matches!(conn.target, Target::Elected { .. }) {
            conn.find_leader()?;
        }
        Ok(conn)
    }

    /// HA: reads the leader from etcd and points the pool at it.
    fn find_leader(&self) -> Result<(), StoreError> {
        let Target::Elected { etcd, key } = &self.target else {
            return Ok(());
        };
        let leader = crate::etcd::election::read_leader(etcd, key)
            .map_err(|e| StoreError::new(code::RPC_FAIL, format!("finding the master: {e}")))?
            .ok_or_else(|| {
                StoreError::new(
                    code::RPC_FAIL,
                    format!("no master leads (etcd key {key} is empty)"),
                )
            })?;
        let hp = crate::metadata::parse_host_port(&leader.0, 50051).map_err(|e| {
            StoreError::new(
                code::RPC_FAIL,
                format!("leader address {:?}: {e}", leader.0),
            )
        })?;
        let mut a = self.addr.lock_clean();
        if *a != hp {
            tw_log!(
                crate::log::Level::Info,
                "store: master is {}:{} (view {})",
                hp.0,
                hp.1,
                leader.1
            );
            *a = hp;
            drop(a);
            self.reset();
        }
        Ok(())
    }

    fn fresh(&self) -> Result<TcpStream, StoreError> {
        let (host, port) = self.addr.lock_clean().clone();
        if port == 0 {
            return Err(StoreError::new(code::RPC_FAIL, "no master known"));
        }
        let s = crate::metadata::rpc::connect(&host, port, self.connect_timeout).map_err(|e| {
            StoreError::new(
                code::RPC_FAIL,
                format!("master {host}:{port} unreachable: {e}"),
            )
        })?;
        let _ = s.set_nodelay(true);
        let _ = s.set_write_timeout(Some(self.rpc_timeout));
        let by = Instant::now() + self.connect_timeout;
        crate::auth::client(&mut &s, &self.auth_key, crate::auth::Purpose::Store, by).map_err(
            |e| {
                tw_log!(crate::log::Level::Warn, "store: master {host}:{port}: {e}");
                StoreError::new(code::RPC_FAIL, format!("master {host}:{port}: {e}"))
            },
        )?;
        let _ = s.set_read_timeout(Some(self.rpc_timeout));
        Ok(s)
    }

    fn pooled(&self) -> Option<TcpStream> {
        let mut p = self.pool.lock_clean();
        while let Some((s, t)) = p.pop() {
            if t.elapsed() < POOL_IDLE {
                return Some(s);
            }
        }
        None
    }

    fn give_back(&self, s: TcpStream) {
        let mut p = self.pool.lock_clean();
        if p.len() < POOL_MAX {
            p.push((s, Instant::now()));
        }
    }

    /// Drops every pooled connection (after the master went away).
    pub fn reset(&self) {
        self.pool.lock_clean().clear();
    }

    fn exchange(
        &self,
        s: &mut TcpStream,
        body: &[u8],
        one_way: bool,
    ) -> Result<Option<Reply>, (bool, StoreError)> {
        // `bool`: the failure happened before the master could have seen the request.
        let flags = if one_way { FLAG_ONE_WAY } else { 0 };
        proto::write_frame(s, flags, body).map_err(|e| {
            (
                true,
                StoreError::new(io_code(&e), format!("sending to master: {e}")),
            )
        })?;
        if one_way {
            return Ok(None);
        }
        let mut pfd = [libc::pollfd {
            fd: std::os::fd::AsRawFd::as_raw_fd(s),
            events: libc::POLLIN,
            revents: 0,
        }];
        // Whether the reply came while polling or not, the read below takes it (or waits).
        crate::net::spin_readable(&mut pfd, REPLY_SPIN);
        match proto::read_frame(s) {
            Ok((_, b)) => proto::decode::<Reply>(&b)
                .map(Some)
                .map_err(|m| (false, StoreError::new(code::RPC_FAIL, m))),
            Err(FrameError::Closed) => Err((
                true,
                StoreError::new(code::RPC_FAIL, "master closed the connection"),
            )),
            Err(FrameError::Io(e)) => Err((
                false,
                StoreError::new(io_code(&e), format!("master reply: {e}")),
            )),
            Err(FrameError::Bad(m)) => Err((false, StoreError::new(code::RPC_FAIL, m))),
        }
    }

    /// Sends once; with HA, while the master in use is gone or a standby (a failover, or a
    /// new leader still rebuilding its state), finds the leader again and resends, for at most
    /// the connect timeout, then returns the last error.
    fn send(&self, req: &Request, one_way: bool) -> Result<Option<Reply>, StoreError> {
        let ping = matches!(req, Request::Ping { .. });
        self.send_body(&proto::encode(req), ping, one_way)
    }

    /// [`send`](Self::send) of an encoded request (`ping`: a heartbeat, which takes no place
    /// among the requests in flight).
    fn send_body(
        &self,
        body: &[u8],
        ping: bool,
        one_way: bool,
    ) -> Result<Option<Reply>, StoreError> {
        let _place = match ping {
            true => None,
            false => Some(self.in_flight()?),
        };
        let mut last = self.send_once(body, one_way);
        if matches!(self.target, Target::Fixed) {
            return last;
        }
        let retryable = |r: &Result<Option<Reply>, StoreError>| match r {
            Err(e) => e.code == code::RPC_FAIL || e.code == code::RPC_TIMEOUT,
            Ok(Some(Reply::Error { code: c, message })) => {
                *c == code::RPC_FAIL && message.contains(STANDBY_MARK)
            }
            Ok(_) => false,
        };
        let deadline = Instant::now() + self.connect_timeout;
        while retryable(&last) && Instant::now() < deadline {
            std::thread::sleep(HA_RETRY_PAUSE);
            self.reset();
            last = match self.find_leader() {
                Ok(()) => self.send_once(body, one_way),
                Err(e) => match last {
                    Err(f) if !f.message.contains(&e.message) => Err(StoreError::new(
                        f.code,
                        format!("{}; {}", f.message, e.message),
                    )),
                    Err(f) => Err(f),
                    Ok(_) => Err(e),
                },
            };
        }
        last
    }

    /// Waits (at most the reply deadline) until fewer than [`IN_FLIGHT_MAX`] requests are in
    /// flight, and takes a place among them.
    fn in_flight(&self) -> Result<InFlight<'_>, StoreError> {
        let busy = self.busy.lock_clean();
        let (mut busy, waited) = self
            .freed
            .wait_timeout_while(busy, self.rpc_timeout, |n| *n >= IN_FLIGHT_MAX)
            .recover();
        if waited.timed_out() && *busy >= IN_FLIGHT_MAX {
            return Err(StoreError::new(
                code::RPC_TIMEOUT,
                format!("{IN_FLIGHT_MAX} master requests of this client still in flight"),
            ));
        }
        *busy += 1;
        Ok(InFlight(self))
    }

    fn send_once(&self, body: &[u8], one_way: bool) -> Result<Option<Reply>, StoreError> {
        if let Some(mut s) = self.pooled() {
            match self.exchange(&mut s, body, one_way) {
                Ok(r) => {
                    self.give_back(s);
                    return Ok(r);
                }
                // A stale pooled connection: the master restarted or dropped it while idle.
                Err((true, _)) => self.reset(),
                Err((false, e)) => return Err(e),
            }
        }
        let mut s = self.fresh()?;
        let r = self.exchange(&mut s, body, one_way).map_err(|(_, e)| e)?;
        self.give_back(s);
        Ok(r)
    }

    /// Sends a request and waits for its reply; `Reply::Error` becomes an error.
    pub fn call(&self, req: &Request) -> Result<Reply, StoreError> {
        replied(self.send(req, false))
    }

    /// [`call`](Self::call) of a request (not a heartbeat) already encoded, by an encoder that
    /// borrows its keys such as [`proto::encode_exist`].
    pub fn call_encoded(&self, body: &[u8]) -> Result<Reply, StoreError> {
        replied(self.send_body(body, false, false))
    }

    /// Sends a one-way message (errors are only logged).
    pub fn notify(&self, req: &Request) {
        if let Err(e) = self.send(req, true) {
            tw_log!(
                crate::log::Level::Debug,
                "store: one-way {} to master: {e}",
                req.name()
            );
        }
    }
}

/// A call's outcome: the reply, with `Reply::Error` (or no reply at all) as an error.
fn replied(sent: Result<Option<Reply>, StoreError>) -> Result<Reply, StoreError> {
    match sent? {
        Some(Reply::Error { code, message }) => Err(StoreError::new(code, message)),
        Some(r) => Ok(r),
        None => Err(StoreError::new(code::RPC_FAIL, "no reply")),
    }
}
