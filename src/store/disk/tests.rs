use super::files::ReadMiss;
use super::*;

fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tw-disk-{tag}-{}-{}", std::process::id(), now_ms()));
    std::fs::create_dir_all(&d).unwrap();
    // The temp dir itself may sit behind a symlink on some systems: resolve it.
    d.canonicalize().unwrap()
}

fn cfg(d: &Path) -> DiskConfig {
    DiskConfig {
        path: d.to_string_lossy().into_owned(),
        quota: 64 << 20,
        file_limit: 1 << 20,
    }
}

fn read(t: &DiskTier, h: &Held) -> Result<Vec<u8>, ReadMiss> {
    let mut v = vec![0u8; h.len as usize];
    t.files().read(h.loc, &h.key, h.len, 0, &mut v).map(|_| v)
}

fn value(i: usize, n: usize) -> Vec<u8> {
    (0..n).map(|j| (i * 31 + j * 7) as u8).collect()
}

#[test]
fn records_are_read_back_whole_and_in_part() {
    let d = temp_dir("rw");
    let t = DiskTier::open(&cfg(&d)).unwrap();
    let v = value(1, 10_000);
    let loc = t.append(&[("k1", &v)])[0].clone().unwrap();
    let h = Held {
        key: "k1".into(),
        loc,
        len: v.len() as u64,
    };
    assert_eq!(read(&t, &h).unwrap(), v);
    let mut part = vec![0u8; 100];
    t.files().read(loc, "k1", 10_000, 5_000, &mut part).unwrap();
    assert_eq!(part, v[5_000..5_100]);
    // Another key or size at that locator is a miss, not bytes.
    let mut buf = vec![0u8; 10_000];
    assert!(matches!(
        t.files().read(loc, "k2", 10_000, 0, &mut buf),
        Err(ReadMiss::Corrupt(_))
    ));
    assert!(matches!(
        t.files().read(loc, "k1", 9_999, 0, &mut buf[..9_999]),
        Err(ReadMiss::Corrupt(_))
    ));
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_restart_adopts_whole_records_and_drops_torn_and_ended_ones() {
    let d = temp_dir("restart");
    let (a, b, c);
    {
        let t = DiskTier::open(&cfg(&d)).unwrap();
        // A second owner of the directory is refused while the first lives.
        let second = DiskTier::open(&cfg(&d)).err().unwrap();
        assert!(second.message.contains("in use"), "{second:?}");
        let locs: Vec<u64> = t
            .append(&[("a", &value(1, 5000)), ("b", &value(2, 7000))])
            .into_iter()
            .map(|r| r.unwrap())
            .collect();
        (a, b) = (locs[0], locs[1]);
        t.drop_records(&[b]);
        c = t.append(&[("c", &value(3, 300))])[0].clone().unwrap();
    }
    // Tear the last record: cut the file inside c's value.
    let (no, at) = record::place(c);
    let f = OpenOptions::new()
        .write(true)
        .open(d.join(file_name(no)))
        .unwrap();
    f.set_len(at + HEADER_LEN as u64 + 1 + 100).unwrap();
    drop(f);
    let t = DiskTier::open(&cfg(&d)).unwrap();
    let held = t.held();
    assert_eq!(
        held.iter().map(|h| h.key.as_str()).collect::<Vec<_>>(),
        ["a"]
    );
    assert_eq!(held[0].loc, a);
    assert_eq!(read(&t, &held[0]).unwrap(), value(1, 5000));
    // New records go to a new file, after the old ones.
    let n = t.append(&[("d", &value(4, 10))])[0].clone().unwrap();
    assert!(record::place(n).0 > no);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_flipped_value_byte_is_a_miss() {
    let d = temp_dir("flip");
    let t = DiskTier::open(&cfg(&d)).unwrap();
    let v = value(9, 4000);
    let loc = t.append(&[("x", &v)])[0].clone().unwrap();
    let (no, at) = record::place(loc);
    let f = OpenOptions::new()
        .write(true)
        .open(d.join(file_name(no)))
        .unwrap();
    f.write_all_at(&[v[123] ^ 0x40], at + HEADER_LEN as u64 + 1 + 123)
        .unwrap();
    let h = Held {
        key: "x".into(),
        loc,
        len: 4000,
    };
    assert!(matches!(read(&t, &h), Err(ReadMiss::Corrupt(_))));
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn the_quota_evicts_the_oldest_files_first() {
    let d = temp_dir("quota");
    let mut c = cfg(&d);
    c.quota = 4 << 20;
    c.file_limit = 1 << 20;
    let t = DiskTier::open(&c).unwrap();
    let v = value(5, 500_000);
    let mut locs = Vec::new();
    for i in 0..8 {
        locs.push(t.append(&[(&format!("k{i}"), &v)])[0].clone().unwrap());
    }
    let gone = t.enforce_quota();
    assert!(t.used() <= c.quota / 10 * 8, "{} over", t.used());
    let gone_keys: Vec<&str> = gone.iter().map(|h| h.key.as_str()).collect();
    assert_eq!(gone_keys[0], "k0", "oldest first: {gone_keys:?}");
    assert!(gone.iter().all(|h| read(&t, h).is_err()));
    let kept = t.held();
    assert!(kept.iter().any(|h| h.key == "k7"));
    for h in &kept {
        assert_eq!(read(&t, h).unwrap(), v);
    }
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn bad_paths_are_refused_with_a_reason() {
    let d = temp_dir("paths");
    let msg = |p: &str| {
        DiskTier::open(&DiskConfig {
            path: p.into(),
            ..cfg(&d)
        })
        .err()
        .unwrap()
        .message
    };
    assert!(msg("").contains("empty"));
    assert!(msg("relative/dir").contains("not absolute"));
    assert!(msg(&format!("{}/missing", d.display())).contains("missing"));
    assert!(msg(&format!("{}/../x", d.display())).contains(".."));
    std::os::unix::fs::symlink(&d, d.join("link")).unwrap();
    assert!(msg(&format!("{}/link", d.display())).contains("symbolic link"));
    std::fs::write(d.join("file"), b"x").unwrap();
    assert!(msg(&format!("{}/file", d.display())).contains("not a directory"));
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn tier_names_round_trip() {
    let n = TierName {
        id: "0123456789abcdef".into(),
        owner: "127.0.0.1:1234".into(),
        path: "/a/b".into(),
    };
    assert_eq!(TierName::parse(&n.to_name()), Some(n));
    assert_eq!(TierName::parse("127.0.0.1:1234"), None);
}
