//! Values in several pieces (`put_from_pieces` / `get_into_pieces`, Mooncake's multi-buffer
//! calls) against a real `tidewire-master` process: 128 keys of 64-256 KiB in 1-4 pieces,
//! written from one client and read back split differently, across engines and from the
//! segment owner's own memory; bad pieces; readers during upserts of a value in pieces.

mod common;
use common::master::TestMaster;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use tidewire::store::caller_memory::Piece;
use tidewire::store::{WriteConfig, code};

type Master = TestMaster;

/// xorshift64*: reproducible sizes and split points without a crate.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Splits `len` bytes at `base` into 1-4 pieces (`gap` bytes apart in memory when the layout
/// leaves room: the pieces need not be adjacent).
fn split(rng: &mut Rng, base: u64, len: u64, gap: u64) -> Vec<Piece> {
    let n = 1 + rng.below(4);
    let mut cuts: Vec<u64> = (1..n).map(|_| 1 + rng.below(len - 1)).collect();
    cuts.sort_unstable();
    cuts.dedup();
    let mut out = Vec::new();
    let mut at = 0;
    for (i, c) in cuts.into_iter().chain([len]).enumerate() {
        out.push((base + at + i as u64 * gap, c - at));
        at = c;
    }
    out
}

/// Where piece layouts put key `i`: each key owns a 260 KiB slot (values are at most 256 KiB
/// plus up to 3 gaps of 1 KiB).
const SLOT: u64 = 260 << 10;

fn bytes_of(pieces: &[Piece]) -> Vec<u8> {
    let mut v = Vec::new();
    for &(a, l) in pieces {
        // SAFETY: every piece lies inside a buffer of the test that is alive and not written.
        v.extend_from_slice(unsafe { std::slice::from_raw_parts(a as *const u8, l as usize) });
    }
    v
}

#[test]
fn pieces_round_trip_across_engines_and_in_the_owner() {
    let m = Master::start();
    let server = m.client(192 << 20);
    let writer = m.client(0);
    const N: usize = 128;
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut src = vec![0u8; N * SLOT as usize];
    let base = src.as_mut_ptr() as u64;
    // The source is registered; the destinations are not (the call registers them).
    writer
        .engine()
        .register_memory(base, src.len() as u64, "cpu:0", false)
        .unwrap();
    let keys: Vec<String> = (0..N).map(|i| format!("multi/{i}")).collect();
    let mut want: Vec<Vec<u8>> = Vec::new();
    let mut put_pieces: Vec<Vec<Piece>> = Vec::new();
    for i in 0..N {
        let len = (64 << 10) + rng.below(192 << 10) + 1;
        let p = split(&mut rng, base + i as u64 * SLOT, len, 1024);
        for &(a, l) in &p {
            let at = (a - base) as usize;
            for b in &mut src[at..at + l as usize] {
                *b = (rng.next() >> 56) as u8;
            }
        }
        want.push(bytes_of(&p));
        put_pieces.push(p);
    }
    let items: Vec<(&str, &[Piece])> = keys
        .iter()
        .zip(&put_pieces)
        .map(|(k, p)| (k.as_str(), p.as_slice()))
        .collect();
    // SAFETY: every piece is inside `src`, alive and unchanged during the call.
    let r = unsafe { writer.put_from_pieces(&items, false, &WriteConfig::default()) };
    assert_eq!(r, vec![0; N]);

    // Read back split at other points, by the writer (engine READs) and by the segment owner
    // (memcpy from its own segment); and whole, through the copying get.
    for reader in [&writer, &server] {
        let mut dst = vec![0u8; N * SLOT as usize];
        let dbase = dst.as_mut_ptr() as u64;
        let get_pieces: Vec<Vec<Piece>> = (0..N)
            .map(|i| split(&mut rng, dbase + i as u64 * SLOT, want[i].len() as u64, 512))
            .collect();
        let items: Vec<(&str, &[Piece])> = keys
            .iter()
            .zip(&get_pieces)
            .map(|(k, p)| (k.as_str(), p.as_slice()))
            .collect();
        // SAFETY: every piece is inside `dst`, alive, disjoint and unshared during the call.
        let r = unsafe { reader.get_into_pieces(&items) };
        let sizes: Vec<i64> = want.iter().map(|w| w.len() as i64).collect();
        assert_eq!(r, sizes);
        for i in 0..N {
            assert!(bytes_of(&get_pieces[i]) == want[i], "key {i} differs");
        }
    }
    let ks: Vec<&str> = keys.iter().map(String::as_str).collect();
    for (f, w) in writer.get_values(&ks).into_iter().zip(&want) {
        assert!(f.unwrap().bytes() == &w[..]);
    }

    // A create-only put keeps the old value; an upsert replaces it (in pieces of another split).
    let other = vec![7u8; 100 << 10];
    let ob = other.as_ptr() as u64;
    let two: [Piece; 2] = [(ob, 30 << 10), (ob + (30 << 10), 70 << 10)];
    // SAFETY: the pieces are inside `other`, alive and unchanged.
    let r = unsafe { writer.put_from_pieces(&[("multi/0", &two)], false, &WriteConfig::default()) };
    assert_eq!(r, vec![0]);
    assert!(writer.get_values(&["multi/0"])[0].as_ref().unwrap().bytes() == &want[0][..]);
    // SAFETY: as above.
    let r = unsafe { writer.put_from_pieces(&[("multi/0", &two)], true, &WriteConfig::default()) };
    assert_eq!(r, vec![0]);
    assert!(writer.get_values(&["multi/0"])[0].as_ref().unwrap().bytes() == &other[..]);

    // Written into the writer's own segment (memcpy both ways) when it prefers it.
    let local = m.client(64 << 20);
    let own = WriteConfig {
        preferred_segments: vec![local.hostname()],
        ..WriteConfig::default()
    };
    // SAFETY: as above.
    let r = unsafe { local.put_from_pieces(&[("own", &two)], true, &own) };
    assert_eq!(r, vec![0]);
    let mut back = vec![0u8; 100 << 10];
    let bb = back.as_mut_ptr() as u64;
    let three: [Piece; 3] = [
        (bb, 1),
        (bb + 1, 50 << 10),
        (bb + 1 + (50 << 10), (50 << 10) - 1),
    ];
    // SAFETY: the pieces are inside `back`, disjoint and unshared.
    let r = unsafe { local.get_into_pieces(&[("own", &three)]) };
    assert_eq!(r, vec![100 << 10]);
    assert!(back == other);
}

#[test]
fn bad_pieces_fail_their_key_only() {
    let m = Master::start();
    let _server = m.client(64 << 20);
    let c = m.client(0);
    let v = vec![3u8; 8192];
    let a = v.as_ptr() as u64;
    // Below the kernel's lowest mappable address (`vm.mmap_min_addr`): never mapped.
    let gone = 4096u64;
    let ok: [Piece; 2] = [(a, 4096), (a + 4096, 4096)];
    let with_empty: [Piece; 3] = [(a, 4096), (0, 0), (a + 4096, 4096)];
    let null: [Piece; 2] = [(a, 4096), (0, 4096)];
    let zeros: [Piece; 2] = [(a, 0), (0, 0)];
    let unmapped: [Piece; 2] = [(a, 4096), (gone, 4096)];
    let wcfg = WriteConfig::default();
    // SAFETY: every mapped piece is inside `v`, alive and unchanged; the unmapped one is refused
    // before it is touched.
    let r = unsafe {
        c.put_from_pieces(
            &[
                ("ok", &ok),
                ("empty-piece", &with_empty),
                ("null", &null),
                ("zeros", &zeros),
                ("none", &[]),
                ("unmapped", &unmapped),
                ("", &ok),
            ],
            true,
            &wcfg,
        )
    };
    let bad = code::INVALID_PARAMS;
    assert_eq!(r, vec![0, 0, bad, bad, bad, bad, bad]);
    assert_eq!(c.sizes(&["empty-piece"])[0], Ok(8192));
    assert_eq!(c.sizes(&["null"])[0], Err(code::OBJECT_NOT_FOUND));

    // Reads: too little room, NULL and unmapped pieces fail their key; more room than the value
    // is fine (the rest is untouched); a miss is -704.
    let mut d = vec![0xEEu8; 3 * 8192];
    let b = d.as_mut_ptr() as u64;
    let small: [Piece; 2] = [(b, 4096), (b + 4096, 4095)];
    let roomy: [Piece; 2] = [(b + 8192, 5000), (b + 16384, 8192)];
    let dnull: [Piece; 2] = [(b, 4096), (0, 4096)];
    let dgone: [Piece; 2] = [(b, 4096), (gone, 4096)];
    // SAFETY: every mapped piece is inside `d`, disjoint and unshared; the others are refused.
    let r = unsafe {
        c.get_into_pieces(&[
            ("ok", &small),
            ("ok", &roomy),
            ("ok", &dnull),
            ("ok", &dgone),
            ("ok", &[]),
            ("missing", &roomy),
            ("", &roomy),
        ])
    };
    let bad = bad as i64;
    assert_eq!(r, vec![bad, 8192, bad, bad, bad, -704, bad]);
    assert!(d[8192..8192 + 5000].iter().all(|&x| x == 3));
    assert!(d[8192 + 5000..16384].iter().all(|&x| x == 0xEE));
    assert!(d[16384..16384 + 3192].iter().all(|&x| x == 3));
    assert!(d[16384 + 3192..].iter().all(|&x| x == 0xEE));
}

#[test]
fn values_in_pieces_are_never_torn_under_upserts() {
    let m = Master::start();
    let _server = m.client(96 << 20);
    let c = m.client(0);
    let sizes = [256u64 << 10, 256 << 10, 1 << 20, 64 << 10];
    let src = vec![0u8; 1 << 20];
    let z: [Piece; 1] = [(src.as_ptr() as u64, sizes[0])];
    // SAFETY: inside `src`, alive and unchanged.
    let r = unsafe { c.put_from_pieces(&[("t", &z)], true, &WriteConfig::default()) };
    assert_eq!(r, vec![0]);
    let stop = AtomicBool::new(false);
    let seen = AtomicUsize::new(0);
    std::thread::scope(|s| {
        let readers: Vec<_> = (0..3)
            .map(|t| {
                let (c, stop, seen) = (&c, &stop, &seen);
                s.spawn(move || {
                    let mut bad = Vec::new();
                    let mut buf = vec![0u8; (1 << 20) + 4096];
                    let b = buf.as_mut_ptr() as u64;
                    let step = 1000 + t as u64 * 777;
                    let pieces: [Piece; 3] = [
                        (b, step),
                        (b + step, 100_000),
                        (b + step + 100_000, (1 << 20) + 4096 - step - 100_000),
                    ];
                    while !stop.load(Ordering::Relaxed) {
                        // SAFETY: the pieces are inside `buf`, disjoint, owned by this thread.
                        let r = unsafe { c.get_into_pieces(&[("t", &pieces)]) }[0];
                        if r > 0 {
                            seen.fetch_add(1, Ordering::Relaxed);
                            let head = &buf[..r as usize];
                            if !sizes.contains(&(r as u64)) || head.iter().any(|&x| x != head[0]) {
                                bad.push(r);
                            }
                        }
                    }
                    bad
                })
            })
            .collect();
        let mut v = src;
        for i in 0..120usize {
            let len = sizes[i % sizes.len()];
            v.fill((i % 251) as u8);
            let base = v.as_ptr() as u64;
            let cut = 1 + (i as u64 * 4099) % (len - 1);
            let p: [Piece; 2] = [(base, cut), (base + cut, len - cut)];
            // SAFETY: inside `v`, alive and unchanged during the call.
            let r = unsafe { c.put_from_pieces(&[("t", &p)], true, &WriteConfig::default()) };
            assert_eq!(r, vec![0]);
        }
        stop.store(true, Ordering::Relaxed);
        for r in readers {
            assert_eq!(
                r.join().unwrap(),
                Vec::<i64>::new(),
                "torn or odd-sized reads"
            );
        }
    });
    assert!(seen.load(Ordering::Relaxed) > 0);
}
