//! A TCP relay on 127.0.0.1 that tests can cut: while cut, it closes every connection it relays
//! and every new one at once, so whatever talks through it loses its peer for real.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A relay to one target port.
pub struct Proxy {
    pub port: u16,
    cut: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    open: Arc<Mutex<Vec<TcpStream>>>,
}

fn pump(mut from: TcpStream, mut to: TcpStream, cut: Arc<AtomicBool>) {
    let mut buf = [0u8; 16384];
    let _ = from.set_read_timeout(Some(Duration::from_millis(100)));
    loop {
        if cut.load(Ordering::SeqCst) {
            break;
        }
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break,
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

impl Proxy {
    /// Starts relaying 127.0.0.1:<new port> to 127.0.0.1:`target`.
    pub fn start(target: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let open = Arc::new(Mutex::new(Vec::new()));
        let (c, s, o) = (cut.clone(), stop.clone(), open.clone());
        std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                let client = match listener.accept() {
                    Ok((client, _)) => client,
                    Err(_) => {
                        std::thread::sleep(Duration::from_millis(5));
                        continue;
                    }
                };
                let _ = client.set_nonblocking(false);
                if c.load(Ordering::SeqCst) {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                let mut list = o.lock().unwrap();
                list.retain(|t: &TcpStream| t.peer_addr().is_ok());
                list.push(client.try_clone().unwrap());
                list.push(server.try_clone().unwrap());
                drop(list);
                let (c1, c2) = (c.clone(), c.clone());
                let (a, b) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                std::thread::spawn(move || pump(client, server, c1));
                std::thread::spawn(move || pump(b, a, c2));
            }
        });
        Proxy {
            port,
            cut,
            stop,
            open,
        }
    }

    /// Drops every relayed connection and refuses new ones until [`Proxy::restore`].
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        for s in self.open.lock().unwrap().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    /// Relays again.
    pub fn restore(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.cut();
    }
}
