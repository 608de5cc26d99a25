//! Entry points for the fuzz targets in `fuzz/`: every decoder a peer can reach, fed arbitrary
//! bytes. Not part of the API (hidden from the docs); each function must return normally for any
//! input, which is what the fuzzer checks.

use crate::metadata::SegmentDesc;
use crate::metadata::rpc::{self, MsgType};
use crate::sync::LockClean;
use crate::transport::tcp::wire::{HEADER_LEN, Header, STATUS_LEN, parse_status, status_frame};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// A data-connection request header and a v2 status frame: decoding never fails, and a decoded
/// header encodes back to the same meaning.
pub fn data_frames(data: &[u8]) {
    if let Some(b) = data.get(..HEADER_LEN) {
        let h = Header::decode(b.try_into().expect("24 bytes"));
        assert_eq!(Header::decode(&h.encode()), h);
    }
    if let Some(b) = data.get(..STATUS_LEN) {
        if let Some(code) = parse_status(b.try_into().expect("8 bytes")) {
            assert_eq!(parse_status(&status_frame(code)), Some(code));
        }
    }
}

/// A handshake frame (length, type, body) as a peer sends it, then its body as a segment
/// descriptor when it claims to be one.
pub fn handshake_frame(data: &[u8]) {
    if let Ok((ty, body)) = rpc::read_frame(&mut &data[..], rpc::DEFAULT_MAX_FRAME) {
        if MsgType::from_u8(ty) == Some(MsgType::Metadata) {
            let _ = SegmentDesc::decode(&body);
        }
    }
}

/// A segment descriptor's JSON (from a handshake reply or a metadata server).
pub fn descriptor_json(data: &[u8]) {
    if let Ok(d) = SegmentDesc::decode(data) {
        // Whatever decodes re-encodes and decodes to the same descriptor.
        let again = SegmentDesc::decode(d.encode().as_bytes()).expect("re-decodes");
        assert_eq!(again.buffers, d.buffers);
    }
}

/// A fixture serving the current input as the whole response to every connection.
struct Responder {
    port: u16,
    input: Mutex<Vec<u8>>,
}

fn responder() -> &'static Responder {
    static R: OnceLock<&'static Responder> = OnceLock::new();
    R.get_or_init(|| {
        let l = TcpListener::bind("127.0.0.1:0").expect("binding a loopback port");
        let r: &'static Responder = Box::leak(Box::new(Responder {
            port: l.local_addr().expect("bound").port(),
            input: Mutex::new(Vec::new()),
        }));
        std::thread::spawn(move || {
            for c in l.incoming() {
                let Ok(mut c) = c else { continue };
                let _ = c.set_read_timeout(Some(Duration::from_millis(200)));
                let mut req = [0u8; 4096];
                let _ = c.read(&mut req);
                let body = r.input.lock_clean().clone();
                let _ = c.write_all(&body);
            }
        });
        r
    })
}

/// An HTTP metadata server's response: the whole client (status line, headers, body, size and
/// time bounds) against a loopback server that answers with `data` and closes.
pub fn http_response(data: &[u8]) {
    let r = responder();
    *r.input.lock_clean() = data.to_vec();
    let url = format!("http://127.0.0.1:{}/metadata", r.port);
    if let Ok(store) =
        crate::metadata::service::http::HttpStore::new(&url, Duration::from_millis(500))
    {
        let _ = store.get("fuzz/key");
    }
}

/// A request on a live engine's handshake/RPC port (notifications, descriptor requests, probes,
/// RDMA handshakes, the old untyped protocol): `data` is sent as is. The engine must answer or
/// close, and keep serving.
pub fn rpc_request(data: &[u8]) {
    static ENGINE: OnceLock<crate::Engine> = OnceLock::new();
    let e = ENGINE.get_or_init(|| {
        let mut cfg = crate::Config::default();
        for (k, v) in [
            ("rdma", "off"),
            ("same_host", "0"),
            ("connect_timeout_ms", "300"),
        ] {
            cfg.set(k, v).expect("valid option");
        }
        crate::Engine::new(cfg).expect("engine starts")
    });
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", e.rpc_port())) else {
        return;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    let _ = s.write_all(data);
    let _ = s.shutdown(std::net::Shutdown::Write);
    let mut reply = Vec::new();
    let _ = s.take(4 << 20).read_to_end(&mut reply);
    // Notifications pile up otherwise.
    let _ = e.take_notifications();
}

/// Bytes a peer sends on a fresh connection, in memory: what it writes back is kept and
/// ignored, and a read past the input ends the stream.
struct Scripted<'a> {
    input: &'a [u8],
    output: Vec<u8>,
}

impl Read for Scripted<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.input.read(buf)
    }
}

impl Write for Scripted<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.output.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl crate::auth::AuthStream for Scripted<'_> {
    fn set_read_deadline_in(&mut self, _: Duration) -> std::io::Result<()> {
        Ok(())
    }
}

/// The authentication exchange (`auth_key` set) fed arbitrary peer bytes, on both sides: as a
/// server reading a hello and a client proof, and as a client reading a server proof. Neither
/// may accept them (the nonces are fresh, so no input can carry a valid proof).
pub fn auth_frames(data: &[u8]) {
    use crate::auth::{AuthKey, Purpose, client, server};
    let key = AuthKey::new("fuzz");
    let deadline = std::time::Instant::now() + Duration::from_secs(1);
    for purpose in [Purpose::Data, Purpose::Rpc] {
        let mut s = Scripted {
            input: data,
            output: Vec::new(),
        };
        assert!(server(&mut s, &key, purpose, deadline).is_err());
        let mut c = Scripted {
            input: data,
            output: Vec::new(),
        };
        assert!(client(&mut c, &key, purpose, deadline).is_err());
    }
}

/// A master RPC frame as the master reads it (`store::proto`): header checks, then the body
/// decoded as a client [`Request`](crate::store::proto::Request). A decoded request encodes and
/// decodes back to itself.
pub fn master_request(data: &[u8]) {
    use crate::store::proto::{Request, decode, encode, read_frame};
    let mut r = data;
    if let Ok((_, body)) = read_frame(&mut r) {
        if let Ok(req) = decode::<Request>(&body) {
            let _ = req.name();
            let again: Request = decode(&encode(&req)).expect("a decoded request re-encodes");
            assert_eq!(again, req);
        }
    }
    // The body alone, as the decoder sees it once a frame was read; the master's borrowing
    // decoder of `Exist` agrees with it on every body.
    match (
        crate::store::proto::decode_exist(data),
        decode::<Request>(data),
    ) {
        (Some(Ok(keys)), Ok(Request::Exist { keys: owned })) => assert_eq!(keys, owned),
        (Some(Ok(_)), other) => panic!("a borrowed Exist where the owned decoder gave {other:?}"),
        (Some(Err(_)), Ok(Request::Exist { .. })) => panic!("an Exist refused only when borrowed"),
        _ => {}
    }
}

/// A master reply as a store client reads it (a master is a peer too): the frame, then the
/// body decoded as a [`Reply`](crate::store::proto::Reply).
pub fn master_reply(data: &[u8]) {
    use crate::store::proto::{Reply, decode, read_frame};
    let mut r = data;
    if let Ok((_, body)) = read_frame(&mut r) {
        let _ = decode::<Reply>(&body);
    }
    let _ = decode::<Reply>(data);
}

#[cfg(test)]
mod tests {
    #[test]
    fn fuzz_seeds_are_refused_without_panics() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/seeds/auth_frames");
        let mut n = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let data = std::fs::read(entry.unwrap().path()).unwrap();
            super::auth_frames(&data);
            n += 1;
        }
        assert!(n >= 4, "{n} seeds");
        super::auth_frames(&[]);
    }

    /// The master-protocol seeds, as the current encoding writes them: each body, and the same
    /// body framed.
    fn master_seeds() -> Vec<(&'static str, String, Vec<u8>)> {
        use crate::store::proto::{
            GetResult, PutItem, ReplicaDesc, Reply, Request, WriteConfig, encode, write_frame,
        };
        let requests = [
            Request::Ping { client_id: 7 },
            Request::Exist {
                keys: vec!["a".into(), "b\0c".into()],
            },
            Request::RemoveAll {
                force: true,
                from: Some(0),
            },
            Request::PutStart {
                client_id: 3,
                upsert: true,
                items: vec![PutItem {
                    key: "k".into(),
                    size: 4096,
                }],
                config: WriteConfig {
                    replica_num: 1,
                    ..WriteConfig::default()
                },
            },
        ];
        let replies = [
            Reply::Ok,
            Reply::Error {
                code: -704,
                message: "missing".into(),
            },
            Reply::Replicas {
                lease_ms: 5000,
                hold_ms: 60_000,
                results: vec![GetResult {
                    code: 0,
                    size: 4096,
                    version: 9,
                    replicas: vec![ReplicaDesc {
                        endpoint: "127.0.0.1:15000".into(),
                        addr: 0x7f00_0000_0000,
                        len: 4096,
                    }],
                }],
            },
        ];
        let bodies = |target: &'static str, encoded: Vec<Vec<u8>>| {
            encoded.into_iter().enumerate().flat_map(move |(i, body)| {
                let mut frame = Vec::new();
                write_frame(&mut frame, 0, &body).unwrap();
                [
                    (target, format!("body{i}"), body),
                    (target, format!("frame{i}"), frame),
                ]
            })
        };
        let mut seeds: Vec<_> =
            bodies("master_request", requests.iter().map(encode).collect()).collect();
        seeds.extend(bodies("master_reply", replies.iter().map(encode).collect()));
        seeds
    }

    /// The seeds in fuzz/seeds/master_* are the current encoding's (a protocol change that
    /// forgets them leaves the fuzzers starting from bytes the decoder rejects at once).
    /// `TW_UPDATE_SEEDS=1 cargo test --release --lib master_seeds` rewrites them.
    #[test]
    fn master_seeds_are_current() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/seeds");
        let update = std::env::var_os("TW_UPDATE_SEEDS").is_some();
        for target in ["master_request", "master_reply"] {
            let dir = std::path::Path::new(root).join(target);
            let want: Vec<_> = master_seeds()
                .into_iter()
                .filter(|(t, ..)| *t == target)
                .collect();
            if update {
                let _ = std::fs::remove_dir_all(&dir);
                std::fs::create_dir_all(&dir).unwrap();
                for (_, name, bytes) in &want {
                    std::fs::write(dir.join(name), bytes).unwrap();
                }
            }
            let mut have: Vec<String> = std::fs::read_dir(&dir)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            have.sort();
            let mut names: Vec<String> = want.iter().map(|(_, n, _)| n.clone()).collect();
            names.sort();
            assert_eq!(
                have, names,
                "{target}: run TW_UPDATE_SEEDS=1 (see this test's doc)"
            );
            for (_, name, bytes) in &want {
                let on_disk = std::fs::read(dir.join(name)).unwrap();
                assert_eq!(
                    &on_disk, bytes,
                    "{target}/{name} is stale: run TW_UPDATE_SEEDS=1 (see this test's doc)"
                );
                if target == "master_request" {
                    super::master_request(bytes);
                } else {
                    super::master_reply(bytes);
                }
            }
        }
    }
}
