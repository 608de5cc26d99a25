//! A small HTTP/1.1 server (one request per connection, on the connection core, up to a cap,
//! bounded head and body, deadlines) for the master's HTTP metadata service and its admin routes
//! (Prometheus metrics and the rest, see `admin`).
//!
//! Metadata protocol (Mooncake's HTTP metadata backend):
//! `GET /metadata?key=K` → 200 + body or 404; `PUT` stores the body (200); `DELETE` → 200 or 404;
//! an empty key → 400.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::RawFd;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tidewire::log::Level;
use tidewire::net::{self, AtCap, Limits, Listening, Next, Prefixed, Session, Want, Worker};
use tidewire::sync::LockClean;
use tidewire::tw_log;

pub(crate) const MAX_HEAD: usize = 16 << 10;
const MAX_BODY: usize = 16 << 20;
const MAX_CONNECTIONS: usize = 128;
/// Most bytes the metadata store keeps (keys and values together).
const MAX_STORED: usize = 1 << 30;
const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// A parsed request.
#[derive(Debug)]
pub struct HttpRequest {
    /// Method (`GET`, `PUT`, ...).
    pub method: String,
    /// Path without the query.
    pub path: String,
    /// Decoded query parameters.
    pub query: HashMap<String, String>,
    /// The query string as sent (after `?`, not decoded).
    pub raw_query: String,
    /// Body.
    pub body: Vec<u8>,
}

impl HttpRequest {
    /// The first value of query parameter `name`, percent-decoded to the exact bytes sent
    /// (`+` is a space); `None` when absent.
    pub fn param(&self, name: &str) -> Option<Vec<u8>> {
        self.raw_query
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| p.split_once('=').unwrap_or((p, "")))
            .find(|(k, _)| percent_decode_bytes(k) == name.as_bytes())
            .map(|(_, v)| percent_decode_bytes(v))
    }
}

/// Writes a body piece by piece: called once with a sink that sends each piece it is given.
pub type BodyWriter =
    dyn Fn(&mut dyn FnMut(&[u8]) -> std::io::Result<()>) -> std::io::Result<()> + Send + Sync;

/// A body streamed after the head (`Transfer-Encoding: chunked`), for replies too large to
/// build whole; the writer takes what it needs from master state piece by piece, holding no
/// lock while a piece is written.
#[derive(Clone)]
pub struct Streamed(pub Arc<BodyWriter>);

impl std::fmt::Debug for Streamed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Streamed(..)")
    }
}

impl PartialEq for Streamed {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Streamed {}

/// A reply: status, content type, extra headers, body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpResponse {
    /// Status code.
    pub status: u16,
    /// `Content-Type`.
    pub content_type: &'static str,
    /// More headers (names and values without CR or LF).
    pub headers: Vec<(&'static str, String)>,
    /// Body.
    pub body: Vec<u8>,
    /// A body written after the head instead of `body`, chunked.
    pub stream: Option<Streamed>,
}

impl HttpResponse {
    /// A reply without extra headers.
    pub fn new(status: u16, content_type: &'static str, body: impl Into<Vec<u8>>) -> Self {
        HttpResponse {
            status,
            content_type,
            headers: Vec::new(),
            body: body.into(),
            stream: None,
        }
    }

    /// A reply whose body `write` streams (chunked) after the head.
    pub fn streamed(
        status: u16,
        content_type: &'static str,
        write: impl Fn(&mut dyn FnMut(&[u8]) -> std::io::Result<()>) -> std::io::Result<()>
        + Send
        + Sync
        + 'static,
    ) -> Self {
        let mut r = HttpResponse::new(status, content_type, Vec::new());
        r.stream = Some(Streamed(Arc::new(write)));
        r
    }

    /// Adds a header.
    pub fn header(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }
}

impl From<(u16, &'static str, Vec<u8>)> for HttpResponse {
    fn from((status, content_type, body): (u16, &'static str, Vec<u8>)) -> Self {
        HttpResponse::new(status, content_type, body)
    }
}

/// Limits of one server.
#[derive(Debug, Clone, Copy)]
pub struct HttpLimits {
    /// Longest request head (request line and headers), in bytes; a longer one gets 400.
    pub max_head: usize,
    /// Connections served at once; one more gets 503.
    pub max_connections: usize,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            max_head: MAX_HEAD,
            max_connections: MAX_CONNECTIONS,
        }
    }
}

/// Answers one request.
pub type HttpHandler = dyn Fn(&HttpRequest) -> HttpResponse + Send + Sync;

/// A running HTTP server (on the connection core, `tidewire::net`); dropping it stops accepting.
pub struct HttpServer {
    addr: SocketAddr,
    _listening: Listening,
}

impl HttpServer {
    /// Serves `handler` on `listener` with the default limits.
    pub fn start(listener: TcpListener, handler: Arc<HttpHandler>) -> std::io::Result<HttpServer> {
        Self::start_with(listener, handler, HttpLimits::default())
    }

    /// Serves `handler` on `listener` within `limits`.
    pub fn start_with(
        listener: TcpListener,
        handler: Arc<HttpHandler>,
        limits: HttpLimits,
    ) -> std::io::Result<HttpServer> {
        let addr = listener.local_addr()?;
        let core_limits = Limits {
            max_connections: limits.max_connections.max(1),
            idle_timeout: IO_TIMEOUT,
            first_request: IO_TIMEOUT,
            head_timeout: IO_TIMEOUT,
            at_cap: AtCap::Refuse,
        };
        let service = Arc::new(HttpService { handler, limits });
        let listening = net::serve(listener, service, core_limits)?;
        Ok(HttpServer {
            addr,
            _listening: listening,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

struct HttpService {
    handler: Arc<HttpHandler>,
    limits: HttpLimits,
}

impl net::Service for HttpService {
    fn name(&self) -> &'static str {
        "http"
    }

    fn open(&self, stream: &TcpStream) -> Box<dyn Session> {
        let _ = stream.set_read_timeout(Some(IO_TIMEOUT));
        let _ = stream.set_write_timeout(Some(IO_TIMEOUT));
        Box::new(HttpSession {
            handler: self.handler.clone(),
            max_head: self.limits.max_head,
            scanned: 0,
        })
    }

    fn refuse(&self, fd: RawFd) {
        let mut out = Vec::new();
        let _ = respond(&mut out, HttpResponse::new(503, "text/plain", "busy"));
        net::write_now(fd, &out);
    }
}

/// One request per connection.
struct HttpSession {
    handler: Arc<HttpHandler>,
    max_head: usize,
    /// How far the head has been searched for its end.
    scanned: usize,
}

impl Session for HttpSession {
    fn want(&mut self, head: &[u8]) -> Want {
        let from = self.scanned.saturating_sub(3);
        let Some(p) = head[from..].windows(4).position(|w| w == b"\r\n\r\n") else {
            self.scanned = head.len();
            return if head.len() > self.max_head {
                Want::Ready // answered with 400 by the worker
            } else {
                Want::More(self.max_head + 1)
            };
        };
        let end = from + p + 4;
        let total = std::str::from_utf8(&head[..end])
            .ok()
            .and_then(content_length)
            .map(|n| end.saturating_add(n));
        match total {
            Some(t) if t <= net::SMALL_FRAME && head.len() < t => Want::More(t),
            _ => Want::Ready,
        }
    }

    fn serve(&mut self, stream: &TcpStream, head: Vec<u8>, _worker: &Worker) -> Next {
        let mut r = Prefixed::new(&head, stream);
        // The handler builds the whole reply (and drops every lock it took) before a byte is
        // written, so a slow peer never holds master state.
        let reply = match read_request(&mut r, self.max_head) {
            Ok(req) => (self.handler)(&req),
            Err((status, m)) => {
                tw_log!(Level::Debug, "http: {m}");
                HttpResponse::new(status, "text/plain", m.into_bytes())
            }
        };
        let _ = respond(&mut r, reply);
        let _ = stream.shutdown(std::net::Shutdown::Write);
        Next::Close
    }
}

/// The reactor's side of a request for the fuzzer: a function of the bytes received so far
/// that answers `Some(n)` (wait for `n` bytes) or `None` (hand it to a worker).
pub(crate) fn fuzz_want(max_head: usize) -> impl FnMut(&[u8]) -> Option<usize> {
    let handler: Arc<HttpHandler> = Arc::new(|_| HttpResponse::new(200, "text/plain", ""));
    let mut session = HttpSession {
        handler,
        max_head,
        scanned: 0,
    };
    move |head| match session.want(head) {
        Want::More(n) => Some(n),
        _ => None,
    }
}

/// The `Content-Length` of a request head (0 when absent); `None` when it does not parse.
fn content_length(head: &str) -> Option<usize> {
    for l in head.split("\r\n").skip(1) {
        if let Some((k, v)) = l.split_once(':') {
            if k.trim().eq_ignore_ascii_case("content-length") {
                return v.trim().parse().ok();
            }
        }
    }
    Some(0)
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        413 => "Payload Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Error",
    }
}

pub(crate) fn respond(s: &mut impl Write, r: HttpResponse) -> std::io::Result<()> {
    let length = match r.stream {
        Some(_) => "Transfer-Encoding: chunked".to_string(),
        None => format!("Content-Length: {}", r.body.len()),
    };
    let mut head = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\n{length}\r\nConnection: close\r\n",
        r.status,
        reason(r.status),
        r.content_type,
    );
    for (k, v) in &r.headers {
        head.push_str(k);
        head.push_str(": ");
        head.push_str(v);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes())?;
    match r.stream {
        None => s.write_all(&r.body)?,
        Some(Streamed(write)) => {
            // Each piece one chunk; a failure midway leaves the body without its last chunk,
            // so the peer sees it incomplete.
            write(&mut |piece: &[u8]| {
                if piece.is_empty() {
                    return Ok(());
                }
                s.write_all(format!("{:x}\r\n", piece.len()).as_bytes())?;
                s.write_all(piece)?;
                s.write_all(b"\r\n")
            })?;
            s.write_all(b"0\r\n\r\n")?;
        }
    }
    s.flush()
}

/// Percent-decodes a query component (`+` is a space), invalid UTF-8 replaced.
pub fn percent_decode(s: &str) -> String {
    String::from_utf8_lossy(&percent_decode_bytes(s)).into_owned()
}

/// Percent-decodes a query component to its exact bytes (`+` is a space; a `%` not followed by
/// two hex digits stays as it is).
pub fn percent_decode_bytes(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => match (hex_digit(b[i + 1]), hex_digit(b[i + 2])) {
                // Two hex digits exactly (`from_str_radix` would also take a sign: `%+1`).
                (Some(hi), Some(lo)) => {
                    out.push(hi << 4 | lo);
                    i += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            b'+' => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    out
}

fn hex_digit(c: u8) -> Option<u8> {
    (c as char).to_digit(16).map(|d| d as u8)
}

pub(crate) fn read_request(
    s: &mut impl Read,
    max_head: usize,
) -> Result<HttpRequest, (u16, String)> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p;
        }
        if buf.len() > max_head {
            return Err((400, "request head too large".into()));
        }
        match s.read(&mut chunk) {
            Ok(0) => return Err((400, "truncated request".into())),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) => return Err((400, format!("reading request: {e}"))),
        }
    };
    let head = std::str::from_utf8(&buf[..head_end])
        .map_err(|_| (400, "head is not UTF-8".to_string()))?;
    let mut lines = head.split("\r\n");
    let mut first = lines.next().unwrap_or("").split_whitespace();
    let method = first.next().unwrap_or("").to_string();
    let target = first.next().unwrap_or("").to_string();
    let mut length = 0usize;
    for l in lines {
        if let Some((k, v)) = l.split_once(':') {
            if k.trim().eq_ignore_ascii_case("content-length") {
                length = v
                    .trim()
                    .parse()
                    .map_err(|_| (400, "bad Content-Length".to_string()))?;
            } else if k.trim().eq_ignore_ascii_case("transfer-encoding") {
                return Err((400, "chunked bodies are not supported".into()));
            }
        }
    }
    if length > MAX_BODY {
        return Err((413, format!("body of {length} bytes exceeds {MAX_BODY}")));
    }
    let mut body = buf[head_end + 4..].to_vec();
    if body.len() < length {
        let have = body.len();
        body.resize(length, 0);
        s.read_exact(&mut body[have..])
            .map_err(|e| (400, format!("reading body: {e}")))?;
    }
    body.truncate(length);
    let (path, q) = target.split_once('?').unwrap_or((&target, ""));
    let query = q
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect();
    Ok(HttpRequest {
        method,
        path: path.to_string(),
        query,
        raw_query: q.to_string(),
        body,
    })
}

/// The HTTP metadata key-value store.
#[derive(Default)]
pub struct MetadataStore {
    map: Mutex<HashMap<String, Vec<u8>>>,
    bytes: std::sync::atomic::AtomicUsize,
}

impl MetadataStore {
    /// Answers `/metadata?key=K` requests.
    pub fn handle(&self, r: &HttpRequest) -> HttpResponse {
        self.answer(r).into()
    }

    fn answer(&self, r: &HttpRequest) -> (u16, &'static str, Vec<u8>) {
        if r.path != "/metadata" {
            return (404, "text/plain", b"not found".to_vec());
        }
        let key = r.query.get("key").map(|k| k.trim()).unwrap_or("");
        if key.is_empty() {
            return (
                400,
                "application/json",
                b"metadata key is required".to_vec(),
            );
        }
        let mut m = self.map.lock_clean();
        match r.method.as_str() {
            "GET" => match m.get(key) {
                Some(v) => (200, "application/json", v.clone()),
                None => (404, "application/json", b"metadata not found".to_vec()),
            },
            "PUT" => {
                let held = self.bytes.load(Ordering::Relaxed);
                let old = m.get(key).map_or(0, |v| key.len() + v.len());
                let new = key.len() + r.body.len();
                if held - old + new > MAX_STORED {
                    return (413, "text/plain", b"metadata store is full".to_vec());
                }
                m.insert(key.to_string(), r.body.clone());
                self.bytes.store(held - old + new, Ordering::Relaxed);
                (200, "application/json", b"metadata updated".to_vec())
            }
            "DELETE" => match m.remove(key) {
                Some(v) => {
                    self.bytes.fetch_sub(key.len() + v.len(), Ordering::Relaxed);
                    (200, "application/json", b"metadata deleted".to_vec())
                }
                None => (404, "application/json", b"metadata not found".to_vec()),
            },
            _ => (405, "text/plain", b"method not allowed".to_vec()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reactor's view of a request arriving a few bytes at a time: not ready until the
    /// head's end, then until the whole small body; a head past the limit goes to a worker (to
    /// be answered 400).
    #[test]
    fn http_heads_are_found_across_reads() {
        let handler: Arc<HttpHandler> = Arc::new(|_| HttpResponse::new(200, "text/plain", ""));
        let mut session = HttpSession {
            handler,
            max_head: 64,
            scanned: 0,
        };
        let req = b"PUT /metadata?key=k HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello";
        let head_end = req.len() - 5;
        for n in 0..head_end {
            assert_eq!(session.want(&req[..n]), Want::More(65), "at {n} bytes");
        }
        assert_eq!(session.want(&req[..head_end]), Want::More(req.len()));
        assert_eq!(session.want(&req[..req.len() - 1]), Want::More(req.len()));
        assert_eq!(session.want(req), Want::Ready);

        session.scanned = 0;
        let junk = [b'a'; 65];
        assert_eq!(session.want(&junk[..64]), Want::More(65));
        assert_eq!(session.want(&junk), Want::Ready);
    }

    #[test]
    fn decodes_queries() {
        assert_eq!(
            percent_decode("mooncake%2Fram%2F1.2.3.4%3A5"),
            "mooncake/ram/1.2.3.4:5"
        );
        assert_eq!(percent_decode("a+b%2"), "a b%2");
        assert_eq!(percent_decode("%zz"), "%zz");
        // Two hex digits exactly, no sign (the `+` then stands for a space as anywhere).
        assert_eq!(percent_decode("%-1%1"), "%-1%1");
        assert_eq!(percent_decode("%+1"), "% 1");
        assert_eq!(percent_decode_bytes("a%00b%20c%ff"), b"a\0b c\xff");
    }

    #[test]
    fn params_decode_to_exact_bytes() {
        let r = HttpRequest {
            method: "GET".into(),
            path: "/q".into(),
            query: HashMap::new(),
            raw_query: "x=1&k%65y=a%00%2C+b&key=second&empty".into(),
            body: Vec::new(),
        };
        assert_eq!(r.param("key").as_deref(), Some(&b"a\0, b"[..]));
        assert_eq!(r.param("x").as_deref(), Some(&b"1"[..]));
        assert_eq!(r.param("empty").as_deref(), Some(&b""[..]));
        assert_eq!(r.param("nope"), None);
    }

    #[test]
    fn metadata_store_speaks_the_protocol() {
        let st = MetadataStore::default();
        let req = |m: &str, k: &str, b: &[u8]| HttpRequest {
            method: m.into(),
            path: "/metadata".into(),
            query: HashMap::from([("key".to_string(), k.to_string())]),
            raw_query: format!("key={k}"),
            body: b.to_vec(),
        };
        assert_eq!(st.handle(&req("GET", "k", b"")).status, 404);
        assert_eq!(st.handle(&req("PUT", "k", b"{}")).status, 200);
        assert_eq!(st.handle(&req("GET", "k", b"")).body, b"{}");
        assert_eq!(st.handle(&req("DELETE", "k", b"")).status, 200);
        assert_eq!(st.handle(&req("DELETE", "k", b"")).status, 404);
        assert_eq!(st.handle(&req("GET", "", b"")).status, 400);
    }
}
