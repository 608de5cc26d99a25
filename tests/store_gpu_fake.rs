//! GPU buffers in the Store against the fake CUDA driver (`tests/fake_cuda/fake_cuda.c`, loaded
//! through the same dlopen path as the real one): device memory registered with the store
//! client, values put from it and read into it, both to and from another engine's segment
//! (staged over TCP) and this client's own segment (driver copies), whole, in pieces and in
//! session ranges. The fake's device pointers are inaccessible to the host, so a path that
//! touched device memory without the driver would crash this test.

mod common;
#[path = "fake_cuda/mod.rs"]
mod fake;

use common::master::TestMaster;
use std::sync::Once;
use tidewire::store::caller_memory::Piece;
use tidewire::store::code;
use tidewire::store::sessions::RangeFrag;

fn setup() -> fake::Fake {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| fake::set_cuda_lib(fake::lib_path().to_str().unwrap()));
    assert!(tidewire::gpu::is_available(), "fake driver loads");
    let f = fake::Fake::open();
    f.reset();
    f
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

#[test]
fn device_buffers_put_and_get_through_remote_and_own_segments() {
    // One at a time: the other test injects copy failures into the process-wide fake driver.
    let _one_at_a_time = common::serial();
    let f = setup();
    let m = TestMaster::start();
    let owner = m.client(64 << 20); // the remote segment
    let gpu_client = m.client(32 << 20); // its own segment too
    let len = (2 << 20) + 4321;
    let data = pattern(len, 3);
    let src = f.alloc(0, &data);
    let dst = f.alloc(0, &vec![0; len]);
    let eng = gpu_client.engine();
    eng.register_memory(src.ptr, len as u64, "*", false)
        .unwrap();
    eng.register_memory(dst.ptr, len as u64, "*", false)
        .unwrap();
    assert_eq!(eng.memory_location(src.ptr).unwrap(), "cuda:0");

    // To the other engine's segment (preferred) and to our own: both from device memory.
    for (key, seg) in [
        ("gpu/remote", owner.hostname()),
        ("gpu/own", gpu_client.hostname()),
    ] {
        let cfg = tidewire::store::WriteConfig {
            preferred_segments: vec![seg.clone()],
            ..Default::default()
        };
        let items = [(key, src.ptr, len as u64)];
        // SAFETY: `src` is registered device memory of `len` bytes, unchanged during the call.
        assert_eq!(unsafe { gpu_client.put_from(&items, true, &cfg) }, vec![0]);
        let reps = gpu_client.replicas(&[key]);
        assert_eq!(
            reps[0].as_ref().unwrap()[0].endpoint,
            seg,
            "{key} placed as asked"
        );

        // A host reader in another process's engine sees the bytes.
        let mut host = vec![0u8; len];
        let back = [(key, host.as_mut_ptr() as u64, len as u64)];
        // SAFETY: `host` is writable for `len` bytes.
        assert_eq!(unsafe { owner.get_into(&back) }, vec![len as i64]);
        assert!(host == data, "{key}: bytes written from device memory");

        // Read back into device memory: whole, then in two pieces.
        let into = [(key, dst.ptr, len as u64)];
        // SAFETY: `dst` is registered device memory of `len` bytes.
        assert_eq!(unsafe { gpu_client.get_into(&into) }, vec![len as i64]);
        assert!(f.read(&dst) == data, "{key}: bytes read into device memory");
        let half = (len / 2) as u64;
        let pieces: [Piece; 2] = [(dst.ptr + half, len as u64 - half), (dst.ptr, half)];
        // SAFETY: the pieces are disjoint ranges of `dst`.
        let n = unsafe { gpu_client.get_into_pieces(&[(key, &pieces)]) };
        assert_eq!(n, vec![len as i64]);
        let got = f.read(&dst);
        assert!(got[half as usize..] == data[..len - half as usize]);
        assert!(got[..half as usize] == data[len - half as usize..]);

        // A session range into device memory.
        assert_eq!(gpu_client.get_session_start(&[key]), vec![code::OK]);
        let frag: [RangeFrag; 1] = [(dst.ptr, 4096, 100)];
        // SAFETY: the fragment lies in `dst`.
        let n = unsafe { gpu_client.get_session_ranges(&[(key, &frag)]) };
        assert_eq!(n, vec![4096]);
        assert!(f.read(&dst)[..4096] == data[100..4196]);
        gpu_client.get_session_end(&[key]);
    }
    assert_eq!(f.violations(), 0);
    assert!(
        f.calls("cuMemcpyAsync") + f.calls("cuMemcpy") > 0,
        "own-segment copies used the driver"
    );
    drop((owner, gpu_client));
    f.free(src);
    f.free(dst);
}

#[test]
fn a_failing_device_copy_fails_the_key_not_the_process() {
    let _one_at_a_time = common::serial();
    let f = setup();
    let m = TestMaster::start();
    let c = m.client(16 << 20);
    let len = 64 << 10;
    let data = pattern(len, 5);
    let src = f.alloc(0, &data);
    c.engine()
        .register_memory(src.ptr, len as u64, "*", false)
        .unwrap();
    f.fail("cuMemcpyAsync", 0, -1);
    let items = [("gpu/fail", src.ptr, len as u64)];
    // SAFETY: registered device memory of `len` bytes.
    let r = unsafe { c.put_from(&items, true, &Default::default()) };
    f.reset();
    assert!(r[0] < 0, "a failed driver copy is an error: {r:?}");
    assert_eq!(
        c.exist(&["gpu/fail"]),
        vec![0],
        "nothing half-written is visible"
    );
    drop(c);
    f.free(src);
}
