//! RDMA handshakes from many sender names, against the fake verbs provider
//! (`tests/fake_verbs`). Passive endpoints are capped (`rdma_max_passive_endpoints`) and the
//! oldest is evicted, so queue pairs stay bounded and a legitimate peer still connects and
//! transfers after the flood.

mod common;
use common::Buf;
use common::fake_verbs::build_fake_verbs;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;
use tidewire::engine::TaskState;
use tidewire::metadata::rpc::{self, MsgType};
use tidewire::{Config, Engine, Opcode, Request};

/// Builds the fake provider once per test process (gcc, into the target directory).
fn fake_lib() -> PathBuf {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| build_fake_verbs("fake_verbs_hostile"))
        .clone()
}

fn rdma_engine(opts: &[(&str, &str)]) -> Engine {
    let lib = fake_lib();
    // SAFETY: this binary's only test sets this once, before any engine reads it.
    unsafe { std::env::set_var("TW_IBVERBS_LIB", &lib) };
    let mut cfg = Config::default();
    cfg.set("rdma", "on").unwrap();
    cfg.set("same_host", "0").unwrap();
    for (k, v) in opts {
        cfg.set(k, v).unwrap();
    }
    Engine::new(cfg).expect("engine with RDMA starts")
}

fn live_qps() -> u64 {
    // SAFETY: the provider is loaded (NOLOAD only finds it); the symbol has this signature.
    unsafe {
        let lib = libloading::os::unix::Library::open(
            Some(fake_lib()),
            libloading::os::unix::RTLD_NOW | libc::RTLD_NOLOAD,
        )
        .expect("fake provider is loaded");
        let f: libloading::os::unix::Symbol<unsafe extern "C" fn() -> u64> =
            lib.get(b"fake_verbs_live_qps").unwrap();
        f()
    }
}

#[test]

fn rdma_handshake_flood_is_capped() {
    const CAP: u64 = 8;
    let t = rdma_engine(&[("rdma_max_passive_endpoints", &CAP.to_string())]);
    let buf = Buf::pattern(1 << 20, 5);
    t.register_memory(buf.addr(), buf.len(), "cpu:0", true)
        .unwrap();
    let desc = t.local_descriptor();
    let dev = desc.devices[0].name.clone();
    let gid = desc.devices[0].gid.clone();
    let before = live_qps();
    // 40 sender names x 64 queue pairs: 2560 QPs if nothing is capped (the fake has 1024).
    for n in 0..40 {
        let body = serde_json::json!({
            "local_nic_path": format!("evil-{n}:1@{dev}"),
            "peer_nic_path": format!("{}@{dev}", t.name()),
            "local_gid": gid,
            "local_lid": 0,
            "qp_num": (1..=64).collect::<Vec<u32>>(),
            "payload": "",
            "reply_msg": "",
        });
        let to = rpc::Peer {
            host: t.rpc_host(),
            port: t.rpc_port(),
            timeout: Duration::from_secs(5),
            max_len: 1 << 20,
            key: &Default::default(),
        };
        let _ = rpc::call(to, MsgType::Connection, body.to_string().as_bytes());
    }
    let held = live_qps() - before;
    assert!(
        held <= CAP * 64,
        "{held} passive queue pairs held, cap {CAP} endpoints"
    );
    // A legitimate peer still connects and transfers.
    let i = rdma_engine(&[]);
    let local = Buf::new(1 << 20, 0);
    i.register_memory(local.addr(), local.len(), "cpu:0", true)
        .unwrap();
    let seg = i.open_segment(t.name()).unwrap();
    let b = i.alloc_batch(1).unwrap();
    i.submit(
        b,
        &[Request {
            op: Opcode::Read,
            local: local.addr(),
            segment: seg,
            remote: buf.addr(),
            len: 1 << 20,
        }],
    )
    .unwrap();
    let _ = i.wait_batch(b, Some(Duration::from_secs(10)));
    assert_eq!(i.task_status(b, 0).unwrap().state, TaskState::Completed);
    assert!(local.0 == buf.0, "bytes arrive over RDMA after the flood");
}
