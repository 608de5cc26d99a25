//! A peer whose replies pause now and then (a loaded host: its server thread descheduled for a
//! few milliseconds), in front of a READ batch that the waiting caller moves itself in runs of
//! 1024 requests. Part of a run then goes to the lane's receiver thread; every reply must still
//! be read into its own request's place. Found by the benchmark's scatter point (32,768 x 128 B
//! READs) under load: the call returned success with fragments in each other's slots. Also a
//! peer that closes the connection inside a run (the caller reconnects holding a run unread).

mod common;
use common::*;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tidewire::Opcode;
use tidewire::metadata::rpc;
use tidewire::metadata::{BufferDesc, SegmentDesc};

const FRAG: u64 = 128;
/// Local distance between fragments: each lands with a gap after it.
const STRIDE: u64 = 256;
/// Where the fake peer says its buffer is (it holds no memory: it computes the bytes).
const REMOTE_BASE: u64 = 0x7000_0000_0000;

/// The byte the fake peer returns at remote address `a` (no two fragments alike).
fn byte_at(a: u64) -> u8 {
    (a.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8
}

/// What the fake peer does after a given reply (numbered from 1 over all its connections).
#[derive(Clone, Copy, PartialEq)]
enum After {
    /// Sleeps this long before reading the next request.
    Pause(Duration),
    /// Closes the connection, requests unanswered.
    Close,
}

/// Answers every v2 READ with its bytes, and after each reply numbered in `script` does what it
/// says.
fn serve_data(mut c: TcpStream, served: Arc<AtomicUsize>, script: &[(usize, After)]) {
    let _ = c.set_read_timeout(Some(Duration::from_secs(30)));
    let mut h = [0u8; 24];
    let mut reply = Vec::new();
    while c.read_exact(&mut h).is_ok() {
        let size = u64::from_le_bytes(h[..8].try_into().unwrap());
        let addr = u64::from_le_bytes(h[8..16].try_into().unwrap());
        if h[16] != 0x80 {
            return; // only v2 READs are expected: the initiator's transfer fails
        }
        reply.clear();
        reply.extend_from_slice(&[0u8, 0, 0, 0, 0x56, 0x54, 0x43, 0x4d]);
        reply.extend((addr..addr + size).map(byte_at));
        if c.write_all(&reply).is_err() {
            return;
        }
        let n = served.fetch_add(1, Ordering::SeqCst) + 1;
        match script.iter().find(|(at, _)| *at == n) {
            Some((_, After::Pause(d))) => std::thread::sleep(*d),
            Some((_, After::Close)) => return,
            None => {}
        }
    }
}

/// A fake peer (Mooncake's protocol, no tidewire extensions): a handshake port answering with a descriptor of one buffer at
/// [`REMOTE_BASE`], and a data port served by [`serve_data`]. Returns the segment name.
fn scripted_peer(len: u64, script: Vec<(usize, After)>) -> String {
    let rpc_l = TcpListener::bind("127.0.0.1:0").unwrap();
    let data_l = TcpListener::bind("127.0.0.1:0").unwrap();
    let name = format!("127.0.0.1:{}", rpc_l.local_addr().unwrap().port());
    let desc = SegmentDesc {
        buffers: vec![BufferDesc {
            addr: REMOTE_BASE,
            length: len,
            name: name.clone(),
            ..Default::default()
        }],
        devices: Vec::new(),
        name: name.clone(),
        priority_matrix: None,
        protocol: "tcp".into(),
        rdma_server_name: String::new(),
        tcp_data_host: "127.0.0.1".into(),
        tcp_data_port: data_l.local_addr().unwrap().port(),
        tcp_proto_version: 2,
        timestamp: String::new(),
        tw_host_id: String::new(),
        tw_pid: 0,
        tw_token: 0,
        tw_token_addr: 0,
        tw_version: 0,
        tw_shm_ctl: 0,
        tw_shm: Vec::new(),
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
    let served = Arc::new(AtomicUsize::new(0));
    std::thread::spawn(move || {
        for c in data_l.incoming().take(16) {
            let Ok(c) = c else { continue };
            let (served, script) = (served.clone(), script.clone());
            std::thread::spawn(move || serve_data(c, served, &script));
        }
    });
    name
}

/// 4,096 READs of 128 B into gapped local slots, sent by the waiting caller in four runs of
/// 1024 (after one READ that connects the lane) from a peer following `script`. Every fragment
/// must land in its own slot and every gap stay zero.
fn scatter_read_from(script: Vec<(usize, After)>) {
    const N: u64 = 4096;
    let name = scripted_peer(N * FRAG, script);
    let a = engine_with(&[("tcp_lanes", "1"), ("tcp_spread", "off")]);
    let local = Buf::new((N * STRIDE) as usize, 0);
    share(&a, &[&local]);
    let seg = a.open_segment(&name).unwrap();
    let read = |i: u64| tidewire::Request {
        op: Opcode::Read,
        local: local.addr() + i * STRIDE,
        segment: seg,
        remote: REMOTE_BASE + i * FRAG,
        len: FRAG,
    };
    // One READ first (reply 1), so that the lane is connected: the batch's first submit on a
    // fresh connection goes to the receiver thread whole.
    let batch = a.alloc_batch(1).unwrap();
    a.submit_and_wait(batch, &[read(0)], Some(Duration::from_secs(20)))
        .unwrap();
    a.free_batch(batch).unwrap();
    let reqs: Vec<_> = (0..N).map(read).collect();
    let batch = a.alloc_batch(N as usize).unwrap();
    a.submit_and_wait(batch, &reqs, Some(Duration::from_secs(20)))
        .unwrap();
    a.free_batch(batch).unwrap();
    let misplaced: Vec<u64> = (0..N)
        .filter(|&i| {
            let slot = &local.0[(i * STRIDE) as usize..((i + 1) * STRIDE) as usize];
            let (frag, gap) = slot.split_at(FRAG as usize);
            let remote = REMOTE_BASE + i * FRAG;
            frag.iter().zip(remote..).any(|(&b, at)| b != byte_at(at))
                || gap.iter().any(|&b| b != 0)
        })
        .collect();
    assert!(
        misplaced.is_empty(),
        "{} of {N} fragments not where they belong (first: {:?}); every request reported complete",
        misplaced.len(),
        &misplaced[..misplaced.len().min(8)]
    );
    drop(a);
}

/// The peer pauses 30 ms once inside each of the first three runs, far past the 2 ms the caller
/// waits for a reply to begin before it hands the rest of the run to the receiver thread.
#[test]
fn paused_replies_of_a_waited_read_land_in_their_own_slots() {
    let pause = After::Pause(Duration::from_millis(30));
    scatter_read_from(vec![(1 + 300, pause), (1 + 1300, pause), (1 + 2300, pause)]);
}

/// The peer closes the connection inside the first run: the caller reconnects to send the
/// third run while it still holds the second, sent on the old connection, unread.
#[test]
fn a_connection_lost_mid_run_leaves_no_reply_in_the_wrong_slot() {
    scatter_read_from(vec![(1 + 300, After::Close)]);
}
