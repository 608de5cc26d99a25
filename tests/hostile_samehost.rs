//! The same-host shortcut (`process_vm_*`) under attack, with real processes (this test binary
//! re-run with a role variable):
//!
//! - Row 1: a third process republishes a victim engine's `tw_pid`/`tw_token`/`tw_token_addr`
//!   in its own descriptor and answers OK to every validate-only header. An honest initiator's
//!   WRITE must never land in the victim's memory.
//! - Row 12: a same-host transfer of >= 64 KiB into a peer's GPU memory (fake CUDA driver) must
//!   succeed over TCP staging: device memory never takes the kernel-copy shortcut.

mod common;
#[path = "fake_cuda/mod.rs"]
mod fake;

use common::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use tidewire::engine::TaskState;
use tidewire::metadata::descriptor::SharedBufDesc;
use tidewire::metadata::rpc;
use tidewire::metadata::{BufferDesc, SegmentDesc};
use tidewire::{Engine, Opcode, Request};

const ROLE_VAR: &str = "TW_HOSTILE_ROLE";
const LEN: usize = 256 << 10;
const SECRET_FILL: u8 = 0x5A;

/// Blocks until stdin closes (the parent is done) or 60 s pass.
fn serve_until_stdin_closes() {
    let (tx, rx) = mpsc::channel::<()>();
    std::thread::spawn(move || {
        let mut sink = [0u8; 64];
        let mut stdin = std::io::stdin().lock();
        while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
        let _ = tx.send(());
    });
    let _ = rx.recv_timeout(Duration::from_secs(60));
}

/// Child role "victim": an engine with the same-host path on, a buffer registered with
/// `remote_accessible = false` and a secret buffer never registered.
#[test]
#[ignore = "child process role, started by the other tests"]
fn child_victim_main() {
    if std::env::var(ROLE_VAR).as_deref() != Ok("victim") {
        return;
    }
    let e = engine_with(&[("same_host", "1")]);
    let private = Buf::new(LEN, SECRET_FILL);
    let secret = Buf::new(LEN, SECRET_FILL);
    e.register_memory(private.addr(), private.len(), "cpu:0", false)
        .unwrap();
    // A shared buffer, open to verified same-host peers of the victim itself.
    let shared = e.alloc_shared(LEN as u64).unwrap();
    // SAFETY: the engine just allocated LEN bytes at `shared`; they live until it is dropped.
    unsafe { std::ptr::write_bytes(shared as *mut u8, SECRET_FILL, LEN) };
    let d = e.local_descriptor();
    let shm = &d.tw_shm[0];
    println!(
        "READY {} {} {} {} {} {} {} {} {} {}",
        d.tw_pid,
        d.tw_token,
        d.tw_token_addr,
        private.addr(),
        secret.addr(),
        shared,
        d.tw_shm_ctl,
        shm.fd,
        shm.slot,
        shm.generation
    );
    serve_until_stdin_closes();
    drop(e);
    drop((private, secret));
}

/// Child role "gpu": an engine with the same-host path on and GPU memory (fake driver) registered.
#[test]
#[ignore = "child process role, started by the other tests"]
fn child_gpu_target_main() {
    if std::env::var(ROLE_VAR).as_deref() != Ok("gpu") {
        return;
    }
    fake::set_cuda_lib(fake::lib_path().to_str().unwrap());
    let f = fake::Fake::open();
    let dev = f.alloc(0, &vec![0u8; LEN]);
    let e = engine_with(&[("same_host", "1")]);
    e.register_memory(dev.ptr, LEN as u64, "*", true).unwrap();
    assert!(e.memory_location(dev.ptr).unwrap().starts_with("cuda"));
    println!("READY {} {}", e.name(), dev.ptr);
    serve_until_stdin_closes();
    drop(e);
    f.free(dev);
}

/// A child of this binary in `role`; killed and reaped on drop. `fields` is its READY line.
struct Child2 {
    child: Child,
    stdin: Option<ChildStdin>,
    fields: Vec<String>,
}

impl Child2 {
    fn spawn(role: &str, entry: &str) -> Child2 {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", entry, "--nocapture", "--ignored"])
            .env(ROLE_VAR, role)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel::<String>();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line.starts_with("READY ") {
                    let _ = tx.send(line);
                }
            }
        });
        let mut c = Child2 {
            child,
            stdin,
            fields: Vec::new(),
        };
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("child READY");
        c.fields = line.split_whitespace().skip(1).map(String::from).collect();
        c
    }

    fn num(&self, i: usize) -> u64 {
        self.fields[i].parse().unwrap()
    }
}

impl Drop for Child2 {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(5) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Reads `len` bytes at `addr` in process `pid`.
fn peek(pid: u32, addr: u64, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    let local = libc::iovec {
        iov_base: out.as_mut_ptr().cast(),
        iov_len: len,
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: len,
    };
    // SAFETY: both iovecs describe `len` bytes; the kernel checks the remote side.
    let n = unsafe { libc::process_vm_readv(pid as i32, &local, 1, &remote, 1, 0) };
    assert_eq!(n, len as isize, "reading the victim's memory");
    out
}

/// The impostor: a handshake port that answers with a descriptor carrying the victim's identity
/// and a buffer at `addr`, and a data port that answers OK to every request (consuming WRITE
/// payloads). Serves for at most 30 s.
fn impostor(
    victim_pid: u32,
    token: u64,
    token_addr: u64,
    addrs: &[u64],
    shm: Option<(i32, SharedBufDesc)>,
) -> String {
    let rpc_l = TcpListener::bind("127.0.0.1:0").unwrap();
    let data_l = TcpListener::bind("127.0.0.1:0").unwrap();
    let name = format!("127.0.0.1:{}", rpc_l.local_addr().unwrap().port());
    let desc = SegmentDesc {
        buffers: addrs
            .iter()
            .map(|&a| BufferDesc {
                addr: a,
                length: LEN as u64,
                name: name.clone(),
                ..Default::default()
            })
            .collect(),
        devices: Vec::new(),
        name: name.clone(),
        priority_matrix: None,
        protocol: "tcp".into(),
        rdma_server_name: String::new(),
        tcp_data_host: "127.0.0.1".into(),
        tcp_data_port: data_l.local_addr().unwrap().port(),
        tcp_proto_version: 2,
        timestamp: String::new(),
        tw_host_id: std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .unwrap()
            .trim()
            .to_string(),
        tw_pid: victim_pid,
        tw_token: token,
        tw_token_addr: token_addr,
        tw_version: 2,
        tw_shm_ctl: shm.as_ref().map_or(0, |s| s.0),
        tw_shm: shm.into_iter().map(|s| s.1).collect(),
    };
    let reply = desc.encode();
    std::thread::spawn(move || {
        for c in rpc_l.incoming().take(16) {
            let Ok(mut c) = c else { continue };
            let _ = c.set_read_timeout(Some(Duration::from_secs(5)));
            if let Ok((ty, _)) = rpc::read_frame(&mut c, 1 << 20) {
                let _ = rpc::write_frame(&mut c, ty, reply.as_bytes());
            }
        }
    });
    std::thread::spawn(move || {
        for c in data_l.incoming().take(16) {
            let Ok(c) = c else { continue };
            std::thread::spawn(move || answer_everything_ok(c));
        }
    });
    name
}

fn answer_everything_ok(mut c: TcpStream) {
    let _ = c.set_read_timeout(Some(Duration::from_secs(30)));
    let ok = [0u8, 0, 0, 0, 0x56, 0x54, 0x43, 0x4d];
    let mut h = [0u8; 24];
    while c.read_exact(&mut h).is_ok() {
        let size = u64::from_le_bytes(h[..8].try_into().unwrap()) as usize;
        let (write, vm) = (h[16] & 0x3f == 1, h[16] & 0x40 != 0);
        if write && !vm {
            let mut sink = vec![0u8; size];
            if c.read_exact(&mut sink).is_err() {
                return;
            }
        }
        if c.write_all(&ok).is_err() {
            return;
        }
        if !write && !vm && c.write_all(&vec![0u8; size]).is_err() {
            return;
        }
    }
}

fn write_one(e: &Engine, local: &Buf, seg: i32, remote: u64) -> TaskState {
    let b = e.alloc_batch(1).unwrap();
    e.submit(
        b,
        &[Request {
            op: Opcode::Write,
            local: local.addr(),
            segment: seg,
            remote,
            len: local.len(),
        }],
    )
    .unwrap();
    let _ = e.wait_batch(b, Some(Duration::from_secs(10)));
    let st = e.task_status(b, 0).unwrap().state;
    e.free_batch(b).unwrap();
    st
}

/// Row 1: the impostor republishes the victim's identity; the initiator's WRITE must not land in
/// the victim's unregistered memory nor in memory it registered `remote_accessible = false`.
#[test]
fn forged_same_host_identity_never_writes_victim_memory() {
    let victim = Child2::spawn("victim", "child_victim_main");
    let pid = victim.num(0) as u32;
    let (token, token_addr) = (victim.num(1), victim.num(2));
    let (private, secret) = (victim.num(3), victim.num(4));
    let name = impostor(pid, token, token_addr, &[private, secret], None);
    let i = engine_with(&[("same_host", "1")]);
    let src = Buf::pattern(LEN, 1);
    i.register_memory(src.addr(), src.len(), "cpu:0", true)
        .unwrap();
    let seg = i.open_segment(&name).unwrap();
    for addr in [private, secret] {
        let _ = write_one(&i, &src, seg, addr);
        let now = peek(pid, addr, LEN);
        let changed = now.iter().filter(|&&b| b != SECRET_FILL).count();
        assert_eq!(
            changed, 0,
            "{changed} bytes of the victim's memory at {addr:#x} overwritten"
        );
    }
    assert_ne!(
        i.segment_path(seg).unwrap(),
        "same-host",
        "the impostor's segment must not use the same-host path"
    );
}

/// Row 1 for shared buffers: the impostor also republishes the victim's shared buffer (control
/// fd, buffer fd, slot, generation); the initiator must not map it, so its WRITE never lands there.
#[test]
fn forged_identity_never_maps_the_victims_shared_buffers() {
    let victim = Child2::spawn("victim", "child_victim_main");
    let pid = victim.num(0) as u32;
    let (token, token_addr) = (victim.num(1), victim.num(2));
    let shared = victim.num(5);
    let desc = SharedBufDesc {
        addr: shared,
        len: LEN as u64,
        fd: victim.num(7) as i32,
        slot: victim.num(8) as u32,
        generation: victim.num(9),
    };
    let name = impostor(
        pid,
        token,
        token_addr,
        &[shared],
        Some((victim.num(6) as i32, desc)),
    );
    let i = engine_with(&[("same_host", "1")]);
    let src = Buf::pattern(LEN, 1);
    i.register_memory(src.addr(), src.len(), "cpu:0", true)
        .unwrap();
    let seg = i.open_segment(&name).unwrap();
    assert_ne!(
        i.segment_path(seg).unwrap(),
        "shared-memory",
        "the impostor's segment must not map the victim's buffers"
    );
    let _ = write_one(&i, &src, seg, shared);
    let now = peek(pid, shared, LEN);
    let changed = now.iter().filter(|&&b| b != SECRET_FILL).count();
    assert_eq!(
        changed, 0,
        "{changed} bytes of the victim's shared buffer overwritten"
    );
}

/// Row 12: a same-host WRITE and READ of 256 KiB into a peer's GPU memory complete (staged over
/// TCP), with the bytes intact.
#[test]
fn same_host_into_gpu_memory_uses_tcp_staging() {
    let target = Child2::spawn("gpu", "child_gpu_target_main");
    let (name, dev_ptr) = (target.fields[0].clone(), target.num(1));
    let i = engine_with(&[("same_host", "1")]);
    let src = Buf::pattern(LEN, 12);
    let back = Buf::new(LEN, 0);
    i.register_memory(src.addr(), src.len(), "cpu:0", true)
        .unwrap();
    i.register_memory(back.addr(), back.len(), "cpu:0", true)
        .unwrap();
    let seg = i.open_segment(&name).unwrap();
    assert_eq!(
        write_one(&i, &src, seg, dev_ptr),
        TaskState::Completed,
        "WRITE into the peer's GPU memory"
    );
    let b = i.alloc_batch(1).unwrap();
    i.submit(
        b,
        &[Request {
            op: Opcode::Read,
            local: back.addr(),
            segment: seg,
            remote: dev_ptr,
            len: LEN as u64,
        }],
    )
    .unwrap();
    let _ = i.wait_batch(b, Some(Duration::from_secs(10)));
    assert_eq!(i.task_status(b, 0).unwrap().state, TaskState::Completed);
    assert!(
        back.0 == src.0,
        "bytes intact through the peer's GPU memory"
    );
}
