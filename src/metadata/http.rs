//! A small blocking HTTP/1.1 client for Mooncake's metadata protocol:
//! `GET/PUT/DELETE <base>?key=<escaped key>`, where only status 200 counts as success.

use crate::error::{Error, ErrorKind, Result};
use std::io::{Read, Write};
use std::time::Duration;

/// A metadata server base URL (`http://host:port/path`).
#[derive(Debug, Clone)]
pub struct HttpStore {
    host: String,
    port: u16,
    path: String,
    timeout: Duration,
}

/// Percent-encodes everything but RFC 3986 unreserved characters (as `curl_easy_escape`).
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl HttpStore {
    /// Parses the base URL. `https://` is refused: this build carries no TLS.
    pub fn new(url: &str, timeout: Duration) -> Result<HttpStore> {
        if url.starts_with("https://") {
            return Err(Error::new(
                ErrorKind::Unsupported,
                "https metadata servers need TLS, which this build does not include; use http://",
            ));
        }
        let rest = url.strip_prefix("http://").ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidArgument,
                format!("{url:?} is not an http:// URL"),
            )
        })?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let (host, port) = super::parse_host_port(authority, 80)?;
        Ok(HttpStore {
            host,
            port,
            path: path.to_string(),
            timeout,
        })
    }

    fn request(&self, method: &str, key: &str, body: Option<&str>) -> Result<(u16, Vec<u8>)> {
        let mut s = super::rpc::connect(&self.host, self.port, self.timeout)
            .map_err(|e| Error::new(ErrorKind::Metadata, format!("metadata server: {e}")))?;
        let _ = s.set_read_timeout(Some(self.timeout));
        let _ = s.set_write_timeout(Some(self.timeout));
        let sep = if self.path.contains('?') { '&' } else { '?' };
        let body = body.unwrap_or("");
        let req = format!(
            "{method} {}{sep}key={} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            self.path,
            escape(key),
            super::join_host_port(&self.host, self.port),
            body.len()
        );
        let io = |e: std::io::Error| {
            Error::new(
                ErrorKind::Metadata,
                format!("metadata server {method} {key}: {e}"),
            )
        };
        s.write_all(req.as_bytes()).map_err(io)?;
        let mut resp = Vec::new();
        s.read_to_end(&mut resp).map_err(io)?;
        parse_response(&resp).map_err(|m| {
            Error::new(
                ErrorKind::Metadata,
                format!("metadata server {method} {key}: {m}"),
            )
        })
    }

    /// GET: `Ok(Some(body))` on 200, `Ok(None)` on any other status.
    pub fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        let (status, body) = self.request("GET", key, None)?;
        Ok((status == 200).then_some(body))
    }

    /// PUT a JSON value; anything but 200 is an error.
    pub fn put(&self, key: &str, json: &str) -> Result<()> {
        match self.request("PUT", key, Some(json))? {
            (200, _) => Ok(()),
            (s, b) => Err(Error::new(
                ErrorKind::Metadata,
                format!("PUT {key}: status {s}: {}", String::from_utf8_lossy(&b)),
            )),
        }
    }

    /// DELETE; anything but 200 is an error.
    pub fn delete(&self, key: &str) -> Result<()> {
        match self.request("DELETE", key, None)? {
            (200, _) => Ok(()),
            (s, _) => Err(Error::new(
                ErrorKind::Metadata,
                format!("DELETE {key}: status {s}"),
            )),
        }
    }
}

fn parse_response(resp: &[u8]) -> std::result::Result<(u16, Vec<u8>), String> {
    let split = resp
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("truncated response")?;
    let head = std::str::from_utf8(&resp[..split]).map_err(|_| "response head is not UTF-8")?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status: u16 = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let mut chunked = false;
    let mut length = None;
    for l in lines {
        if let Some((k, v)) = l.split_once(':') {
            let (k, v) = (k.trim().to_ascii_lowercase(), v.trim());
            if k == "transfer-encoding" && v.eq_ignore_ascii_case("chunked") {
                chunked = true;
            } else if k == "content-length" {
                length = v.parse::<usize>().ok();
            }
        }
    }
    let raw = &resp[split + 4..];
    let body = if chunked {
        dechunk(raw)?
    } else if let Some(n) = length {
        raw.get(..n)
            .ok_or("body shorter than Content-Length")?
            .to_vec()
    } else {
        raw.to_vec()
    };
    Ok((status, body))
}

fn dechunk(mut raw: &[u8]) -> std::result::Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let eol = raw
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("bad chunk header")?;
        let size_text = std::str::from_utf8(&raw[..eol]).map_err(|_| "bad chunk size")?;
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| "bad chunk size")?;
        raw = &raw[eol + 2..];
        if size == 0 {
            return Ok(out);
        }
        out.extend_from_slice(raw.get(..size).ok_or("truncated chunk")?);
        raw = raw.get(size + 2..).ok_or("truncated chunk")?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_like_curl() {
        assert_eq!(
            escape("mooncake/ram/127.0.0.1:1500"),
            "mooncake%2Fram%2F127.0.0.1%3A1500"
        );
    }

    #[test]
    fn parses_responses() {
        let r = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}junk";
        assert_eq!(parse_response(r).unwrap(), (200, b"{}".to_vec()));
        let r = b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
        assert_eq!(parse_response(r).unwrap(), (404, b"abcde".to_vec()));
        assert!(parse_response(b"HTTP/1.1 200").is_err());
        assert!(HttpStore::new("https://x/y", Duration::from_secs(1)).is_err());
        let s = HttpStore::new("http://127.0.0.1:8080/metadata", Duration::from_secs(1)).unwrap();
        assert_eq!((s.port, s.path.as_str()), (8080, "/metadata"));
    }
}
