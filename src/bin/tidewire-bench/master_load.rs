//! `tidewire-bench master-load`: many Store clients against one master, speaking the master's
//! own protocol (no engine, no data bytes): each client holds one connection and mounts a
//! segment, then every client in turn puts a 4 KiB object (PutStart + PutEnd), asks whether it
//! exists, gets its replica list and ends the read (ReadDone), with a heartbeat every second.
//! Prints requests/s, latency percentiles of single requests, and the master's threads and
//! resident memory when its pid is given.

use crate::args::{self, UsageError};
use crate::procstat;
use std::net::TcpStream;
use std::time::{Duration, Instant};
use tidewire::store::proto::{self, KeyVersion, PutItem, Reply, Request, WriteConfig};

/// One simulated client.
struct Client {
    id: u64,
    conn: TcpStream,
    serial: u64,
    last_ping: Instant,
}

/// Sends `req` and waits for its reply (one-way requests get none).
fn call(conn: &mut TcpStream, req: &Request) -> Result<Option<Reply>, String> {
    let one_way = matches!(req, Request::ReadDone { .. });
    let flags = if one_way { proto::FLAG_ONE_WAY } else { 0 };
    proto::write_frame(conn, flags, &proto::encode(req)).map_err(|e| format!("send: {e}"))?;
    if one_way {
        return Ok(None);
    }
    let (_, body) = proto::read_frame(conn).map_err(|e| format!("reply: {e:?}"))?;
    let reply: Reply = proto::decode(&body)?;
    if let Reply::Error { code, message } = &reply {
        return Err(format!("master error {code}: {message}"));
    }
    Ok(Some(reply))
}

impl Client {
    fn connect(master: &str, id: u64) -> Result<Client, String> {
        let mut conn = TcpStream::connect(master).map_err(|e| format!("connect {master}: {e}"))?;
        let _ = conn.set_nodelay(true);
        let _ = conn.set_read_timeout(Some(Duration::from_secs(30)));
        let mount = Request::Mount {
            client_id: id,
            name: format!("load-{id}"),
            base: 1 << 40,
            size: 256 << 20,
        };
        call(&mut conn, &mount)?;
        Ok(Client {
            id,
            conn,
            serial: 0,
            last_ping: Instant::now(),
        })
    }

    /// One round: put, exists, get, read done (and a heartbeat when due); each request's
    /// latency goes to `lat` (microseconds).
    fn round(&mut self, lat: &mut Vec<u32>) -> Result<(), String> {
        let key = format!("{:016x}{:048x}", self.id, self.serial);
        self.serial += 1;
        let id = self.id;
        let mut timed = |c: &mut TcpStream, r: &Request| {
            let t0 = Instant::now();
            let out = call(c, r);
            lat.push(t0.elapsed().as_micros().min(u32::MAX as u128) as u32);
            out
        };
        if self.last_ping.elapsed() >= Duration::from_secs(1) {
            timed(&mut self.conn, &Request::Ping { client_id: id })?;
            self.last_ping = Instant::now();
        }
        let start = Request::PutStart {
            client_id: id,
            upsert: true,
            items: vec![PutItem {
                key: key.clone(),
                size: 4096,
            }],
            config: WriteConfig {
                replica_num: 1,
                local_segment: format!("load-{id}"),
                ..WriteConfig::default()
            },
        };
        let version = match timed(&mut self.conn, &start)? {
            Some(Reply::Started { results }) if results.first().is_some_and(|r| r.code == 0) => {
                results[0].version
            }
            other => return Err(format!("put start: {other:?}")),
        };
        let items = vec![KeyVersion {
            key: key.clone(),
            version,
        }];
        timed(
            &mut self.conn,
            &Request::PutEnd {
                client_id: id,
                items: items.clone(),
            },
        )?;
        timed(
            &mut self.conn,
            &Request::Exist {
                keys: vec![key.clone()],
            },
        )?;
        timed(
            &mut self.conn,
            &Request::Get {
                client_id: id,
                keys: vec![key],
            },
        )?;
        call(
            &mut self.conn,
            &Request::ReadDone {
                client_id: id,
                items,
            },
        )?;
        Ok(())
    }
}

/// Options: `--master HOST:PORT` (required), `--clients N` (default 1000), `--threads N`
/// (default min(clients, 16)), `--duration S` (default 5 s), `--master-pid P`.
pub fn main(argv: &[String]) -> Result<i32, UsageError> {
    let p = args::parse(
        argv,
        &["master", "clients", "threads", "duration", "master-pid"],
        &[],
    )?;
    let master = p
        .get("master")
        .ok_or_else(|| UsageError("--master HOST:PORT is required".into()))?
        .to_string();
    let clients = p.count("clients", 1000, 100_000)?;
    let threads = p
        .count("threads", clients.min(16), 1024)?
        .min(clients)
        .max(1);
    let duration = p.duration("duration", Duration::from_secs(5))?;
    let pid = p.u64("master-pid")?.map(|v| v as u32);
    let before = pid.and_then(procstat::usage);
    let t0 = Instant::now();
    let mut groups: Vec<Vec<Client>> = (0..threads).map(|_| Vec::new()).collect();
    for i in 0..clients {
        match Client::connect(&master, 1_000_000 + i as u64) {
            Ok(c) => groups[i % threads].push(c),
            Err(e) => {
                eprintln!("master-load: client {i}: {e}");
                return Ok(1);
            }
        }
    }
    let connected = t0.elapsed();
    let during = std::sync::Mutex::new(None);
    let deadline = Instant::now() + duration;
    let results: Vec<Result<Vec<u32>, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = groups
            .iter_mut()
            .map(|g| {
                s.spawn(move || {
                    let mut lat = Vec::new();
                    while Instant::now() < deadline {
                        for c in g.iter_mut() {
                            c.round(&mut lat)?;
                        }
                    }
                    Ok(lat)
                })
            })
            .collect();
        // Midway through, the master's threads and memory under load.
        std::thread::sleep(duration / 2);
        *during.lock().unwrap() = pid.and_then(procstat::usage);
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut lat = Vec::new();
    for r in results {
        match r {
            Ok(l) => lat.extend(l),
            Err(e) => {
                eprintln!("master-load: {e}");
                return Ok(1);
            }
        }
    }
    for g in &mut groups {
        for c in g.iter_mut() {
            let _ = call(
                &mut c.conn,
                &Request::Unmount {
                    client_id: c.id,
                    name: format!("load-{}", c.id),
                },
            );
        }
    }
    lat.sort_unstable();
    let pct = |q: f64| lat.get(((lat.len() as f64 - 1.0) * q) as usize).copied();
    let rate = lat.len() as f64 / duration.as_secs_f64();
    println!(
        "master-load: {clients} clients on {threads} threads, connected in {:.2} s",
        connected.as_secs_f64()
    );
    println!(
        "RESULT clients={clients} requests={} requests_per_s={rate:.0} p50_us={} p99_us={} max_us={}",
        lat.len(),
        pct(0.5).unwrap_or(0),
        pct(0.99).unwrap_or(0),
        lat.last().copied().unwrap_or(0)
    );
    if let Some(u) = *during.lock().unwrap() {
        let base = before.map_or(0, |b| b.rss);
        println!(
            "MASTER threads={} rss_mib={:.1} rss_growth_mib={:.1} fds={}",
            u.threads,
            u.rss as f64 / (1 << 20) as f64,
            u.rss.saturating_sub(base) as f64 / (1 << 20) as f64,
            u.fds
        );
    }
    Ok(0)
}
