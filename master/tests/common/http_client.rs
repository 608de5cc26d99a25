//! An HTTP/1.1 peer of the master's admin routes: one request per connection, the reply read
//! whole and parsed.

use serde_json::Value;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// A reply as the peer reads it.
pub struct Resp {
    /// Status code.
    pub status: u16,
    /// Headers, names in lowercase.
    pub headers: HashMap<String, String>,
    /// Body.
    pub body: Vec<u8>,
}

impl Resp {
    /// The body as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", String::from_utf8_lossy(&self.body)))
    }
    /// The body as UTF-8 text.
    pub fn text(&self) -> String {
        String::from_utf8(self.body.clone()).unwrap()
    }
    /// Header `name` (any case); empty when absent.
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
            .unwrap_or("")
    }
}

/// A reply read whole.
pub fn parse(raw: &[u8]) -> Resp {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a reply head");
    let head = std::str::from_utf8(&raw[..end]).unwrap();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let headers: HashMap<String, String> = headers;
    let mut body = raw[end + 4..].to_vec();
    if headers.get("transfer-encoding").map(String::as_str) == Some("chunked") {
        body = dechunk(&body);
    }
    Resp {
        status,
        headers,
        body,
    }
}

/// A chunked body's bytes; panics unless it ends with its last (empty) chunk.
fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let eol = b
            .windows(2)
            .position(|w| w == b"\r\n")
            .expect("a chunk size");
        let n = usize::from_str_radix(std::str::from_utf8(&b[..eol]).unwrap().trim(), 16).unwrap();
        b = &b[eol + 2..];
        if n == 0 {
            assert_eq!(b, b"\r\n", "the body ends after its last chunk");
            return out;
        }
        out.extend_from_slice(&b[..n]);
        assert_eq!(&b[n..n + 2], b"\r\n");
        b = &b[n + 2..];
    }
}

/// Sends `method target` on a new connection and reads the whole reply (its length checked).
pub fn request(addr: SocketAddr, method: &str, target: &str) -> Resp {
    request_with(addr, method, target, None)
}

/// Sends `method target` with `body` (when given) and reads the whole reply.
pub fn request_with(addr: SocketAddr, method: &str, target: &str, body: Option<&[u8]>) -> Resp {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut req = format!("{method} {target} HTTP/1.1\r\nHost: x\r\n").into_bytes();
    if let Some(b) = body {
        req.extend_from_slice(format!("Content-Length: {}\r\n", b.len()).as_bytes());
    }
    req.extend_from_slice(b"\r\n");
    req.extend_from_slice(body.unwrap_or_default());
    s.write_all(&req).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let r = parse(&raw);
    if let Some(n) = r.headers.get("content-length") {
        assert_eq!(n.parse::<usize>().unwrap(), r.body.len());
    }
    r
}

/// A GET of `target`.
pub fn get(addr: SocketAddr, target: &str) -> Resp {
    request(addr, "GET", target)
}

/// Percent-encodes every byte that is not unreserved.
pub fn enc(b: &[u8]) -> String {
    b.iter()
        .map(|c| match c {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (*c as char).to_string()
            }
            _ => format!("%{c:02X}"),
        })
        .collect()
}
