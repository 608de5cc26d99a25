//! The HTTP metadata test server (`tests/interop/http_metadata_server.py`, run with python3) on
//! a free port of 127.0.0.1; stopped when dropped.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub struct MetadataServer {
    child: Child,
    pub port: u16,
}

impl MetadataServer {
    pub fn start() -> MetadataServer {
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/interop/http_metadata_server.py"
        );
        let mut child = Command::new("python3")
            .args([script, "--port", "0", "--exit-on-stdin-eof"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs the metadata server");
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).expect("server prints its port");
        MetadataServer {
            port: v["port"].as_u64().unwrap() as u16,
            child,
        }
    }

    /// The `metadata` setting that points engines at this server.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/metadata", self.port)
    }

    /// Every key the server holds.
    #[allow(dead_code)] // not every test binary that includes `common` lists keys
    pub fn keys(&self) -> Vec<String> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        write!(
            s,
            "GET /keys HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut resp = String::new();
        s.read_to_string(&mut resp).unwrap();
        let body = resp.split("\r\n\r\n").nth(1).unwrap();
        serde_json::from_str(body).unwrap()
    }
}

impl Drop for MetadataServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
