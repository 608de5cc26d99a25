//! A small HTTP/1.1 server (one request per connection, thread per connection up to a cap,
//! bounded head and body, deadlines) for the master's HTTP metadata service and its Prometheus
//! metrics.
//!
//! Metadata protocol (Mooncake's HTTP metadata backend):
//! `GET /metadata?key=K` → 200 + body or 404; `PUT` stores the body (200); `DELETE` → 200 or 404;
//! an empty key → 400.

use crate::log::Level;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

const MAX_HEAD: usize = 16 << 10;
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
    /// Body.
    pub body: Vec<u8>,
}

/// Status, content type, body.
pub type HttpResponse = (u16, &'static str, Vec<u8>);

/// Answers one request.
pub type HttpHandler = dyn Fn(&HttpRequest) -> HttpResponse + Send + Sync;

/// A running HTTP server; dropping it stops accepting.
pub struct HttpServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    fd: i32,
    thread: Option<JoinHandle<()>>,
}

impl HttpServer {
    /// Serves `handler` on `listener`.
    pub fn start(listener: TcpListener, handler: Arc<HttpHandler>) -> std::io::Result<HttpServer> {
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let fd = listener.as_raw_fd();
        let st = stop.clone();
        let active = Arc::new(AtomicUsize::new(0));
        let thread = std::thread::Builder::new()
            .name("tw-master-http".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    // Acquire pairs with the Release in drop.
                    if st.load(Ordering::Acquire) {
                        break;
                    }
                    let Ok(s) = conn else {
                        std::thread::sleep(Duration::from_millis(10));
                        continue;
                    };
                    if active.fetch_add(1, Ordering::AcqRel) >= MAX_CONNECTIONS {
                        active.fetch_sub(1, Ordering::AcqRel);
                        let mut s = s;
                        let _ = respond(&mut s, (503, "text/plain", b"busy".to_vec()));
                        continue;
                    }
                    let (h, a) = (handler.clone(), active.clone());
                    let spawned = std::thread::Builder::new()
                        .name("tw-master-http-conn".into())
                        .spawn(move || {
                            serve(s, &*h);
                            a.fetch_sub(1, Ordering::AcqRel);
                        });
                    if spawned.is_err() {
                        active.fetch_sub(1, Ordering::AcqRel);
                    }
                }
            })?;
        Ok(HttpServer {
            addr,
            stop,
            fd,
            thread: Some(thread),
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        // Release pairs with the Acquire in the accept loop.
        self.stop.store(true, Ordering::Release);
        // SAFETY: `fd` is the listener owned by the accept thread, open until it exits;
        // shutdown(2) makes a blocked accept return on Linux.
        unsafe { libc::shutdown(self.fd, libc::SHUT_RDWR) };
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        413 => "Payload Too Large",
        503 => "Service Unavailable",
        _ => "Error",
    }
}

fn respond(s: &mut TcpStream, (status, ctype, body): HttpResponse) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        reason(status),
        body.len()
    );
    s.write_all(head.as_bytes())?;
    s.write_all(&body)?;
    s.flush()
}

fn serve(mut s: TcpStream, handler: &HttpHandler) {
    let _ = s.set_read_timeout(Some(IO_TIMEOUT));
    let _ = s.set_write_timeout(Some(IO_TIMEOUT));
    let reply = match read_request(&mut s) {
        Ok(req) => handler(&req),
        Err((status, m)) => {
            tw_log!(Level::Debug, "http: {m}");
            (status, "text/plain", m.into_bytes())
        }
    };
    let _ = respond(&mut s, reply);
    let _ = s.shutdown(std::net::Shutdown::Write);
}

/// Percent-decodes a query component (`+` is a space).
pub fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(v) => {
                        out.push(v);
                        i += 3;
                        continue;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn read_request(s: &mut TcpStream) -> Result<HttpRequest, (u16, String)> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p;
        }
        if buf.len() > MAX_HEAD {
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
        let mut m = self.map.lock().unwrap_or_else(|e| e.into_inner());
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

    #[test]
    fn decodes_queries() {
        assert_eq!(
            percent_decode("mooncake%2Fram%2F1.2.3.4%3A5"),
            "mooncake/ram/1.2.3.4:5"
        );
        assert_eq!(percent_decode("a+b%2"), "a b%2");
        assert_eq!(percent_decode("%zz"), "%zz");
    }

    #[test]
    fn metadata_store_speaks_the_protocol() {
        let st = MetadataStore::default();
        let req = |m: &str, k: &str, b: &[u8]| HttpRequest {
            method: m.into(),
            path: "/metadata".into(),
            query: HashMap::from([("key".to_string(), k.to_string())]),
            body: b.to_vec(),
        };
        assert_eq!(st.handle(&req("GET", "k", b"")).0, 404);
        assert_eq!(st.handle(&req("PUT", "k", b"{}")).0, 200);
        assert_eq!(st.handle(&req("GET", "k", b"")).2, b"{}");
        assert_eq!(st.handle(&req("DELETE", "k", b"")).0, 200);
        assert_eq!(st.handle(&req("DELETE", "k", b"")).0, 404);
        assert_eq!(st.handle(&req("GET", "", b"")).0, 400);
    }
}
