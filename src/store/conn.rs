//! The client's connections to the master: a small pool of blocking TCP streams, each request
//! with connect and reply deadlines. A pooled connection that turns out dead is retried once on a
//! fresh one; failures map to `RPC_FAIL`/`RPC_TIMEOUT`, never a hang.

use super::StoreError;
use super::proto::{self, FLAG_ONE_WAY, FrameError, Reply, Request, code};
use std::net::TcpStream;
use std::sync::Mutex;
use std::time::{Duration, Instant};

const POOL_MAX: usize = 16;
const POOL_IDLE: Duration = Duration::from_secs(60);

/// Connections to one master.
pub struct MasterConn {
    host: String,
    port: u16,
    connect_timeout: Duration,
    rpc_timeout: Duration,
    pool: Mutex<Vec<(TcpStream, Instant)>>,
}

fn io_code(e: &std::io::Error) -> i32 {
    match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => code::RPC_TIMEOUT,
        _ => code::RPC_FAIL,
    }
}

impl MasterConn {
    /// A connection pool for `host:port` (nothing is connected yet).
    pub fn new(
        address: &str,
        connect_timeout: Duration,
        rpc_timeout: Duration,
    ) -> Result<MasterConn, StoreError> {
        let (host, port) = crate::metadata::parse_host_port(address, 50051).map_err(|e| {
            StoreError::new(
                code::INVALID_PARAMS,
                format!("master address {address:?}: {e}"),
            )
        })?;
        Ok(MasterConn {
            host,
            port,
            connect_timeout,
            rpc_timeout,
            pool: Mutex::default(),
        })
    }

    fn fresh(&self) -> Result<TcpStream, StoreError> {
        let s = crate::metadata::rpc::connect(&self.host, self.port, self.connect_timeout)
            .map_err(|e| {
                StoreError::new(
                    code::RPC_FAIL,
                    format!("master {}:{} unreachable: {e}", self.host, self.port),
                )
            })?;
        let _ = s.set_nodelay(true);
        let _ = s.set_read_timeout(Some(self.rpc_timeout));
        let _ = s.set_write_timeout(Some(self.rpc_timeout));
        Ok(s)
    }

    fn pooled(&self) -> Option<TcpStream> {
        let mut p = self.pool.lock().unwrap_or_else(|e| e.into_inner());
        while let Some((s, t)) = p.pop() {
            if t.elapsed() < POOL_IDLE {
                return Some(s);
            }
        }
        None
    }

    fn give_back(&self, s: TcpStream) {
        let mut p = self.pool.lock().unwrap_or_else(|e| e.into_inner());
        if p.len() < POOL_MAX {
            p.push((s, Instant::now()));
        }
    }

    /// Drops every pooled connection (after the master went away).
    pub fn reset(&self) {
        self.pool.lock().unwrap_or_else(|e| e.into_inner()).clear();
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

    fn send(&self, req: &Request, one_way: bool) -> Result<Option<Reply>, StoreError> {
        let body = proto::encode(req);
        if let Some(mut s) = self.pooled() {
            match self.exchange(&mut s, &body, one_way) {
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
        let r = self.exchange(&mut s, &body, one_way).map_err(|(_, e)| e)?;
        self.give_back(s);
        Ok(r)
    }

    /// Sends a request and waits for its reply; `Reply::Error` becomes an error.
    pub fn call(&self, req: &Request) -> Result<Reply, StoreError> {
        match self.send(req, false)? {
            Some(Reply::Error { code, message }) => Err(StoreError::new(code, message)),
            Some(r) => Ok(r),
            None => Err(StoreError::new(code::RPC_FAIL, "no reply")),
        }
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
