//! Mooncake's HTTP metadata protocol: `GET/PUT/DELETE <base>?key=<escaped key>`, where only
//! status 200 counts as success. Every call has a deadline and reads at most
//! [`crate::http_client::MAX_RESPONSE`] bytes.

use crate::error::{Error, ErrorKind, Result};
use crate::http_client as web;
use std::time::Duration;

/// A metadata server base URL (`http://host:port/path`).
#[derive(Debug, Clone)]
pub struct HttpStore {
    base: String,
    agent: ureq::Agent,
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
    /// Checks the base URL. `https://` is refused: this build carries no TLS.
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
        let authority = rest.split(['/', '?']).next().unwrap_or_default();
        crate::addr::parse_host_port(authority, 80)?;
        let base = if rest.contains(['/', '?']) {
            url.to_string()
        } else {
            format!("{url}/")
        };
        base.parse::<ureq::http::Uri>().map_err(|e| {
            Error::new(
                ErrorKind::InvalidArgument,
                format!("metadata URL {url:?}: {e}"),
            )
        })?;
        Ok(HttpStore {
            base,
            agent: web::agent(timeout),
        })
    }

    fn url(&self, key: &str) -> String {
        let sep = if self.base.contains('?') { '&' } else { '?' };
        format!("{}{sep}key={}", self.base, escape(key))
    }

    fn request(&self, method: &str, key: &str, body: Option<&str>) -> Result<(u16, Vec<u8>)> {
        let url = self.url(key);
        let fail = |m: String| {
            Error::new(
                ErrorKind::Metadata,
                format!("metadata server {method} {key}: {m}"),
            )
        };
        let sent = match (method, body) {
            ("PUT", Some(b)) => self
                .agent
                .put(&url)
                .header("Content-Type", "application/json")
                .send(b),
            ("DELETE", _) => self.agent.delete(&url).call(),
            _ => self.agent.get(&url).call(),
        };
        let mut resp = sent.map_err(|e| fail(web::describe(&e)))?;
        let status = resp.status().as_u16();
        let body = web::read_body(&mut resp).map_err(fail)?;
        Ok((status, body))
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
    fn builds_urls() {
        assert!(HttpStore::new("https://x/y", Duration::from_secs(1)).is_err());
        assert!(HttpStore::new("ftp://x/y", Duration::from_secs(1)).is_err());
        let s = HttpStore::new("http://127.0.0.1:8080/metadata", Duration::from_secs(1)).unwrap();
        assert_eq!(s.url("a/b"), "http://127.0.0.1:8080/metadata?key=a%2Fb");
        let s = HttpStore::new("http://h:1", Duration::from_secs(1)).unwrap();
        assert_eq!(s.url("k"), "http://h:1/?key=k");
        let s = HttpStore::new("http://h:1/m?x=1", Duration::from_secs(1)).unwrap();
        assert_eq!(s.url("k"), "http://h:1/m?x=1&key=k");
    }
}
