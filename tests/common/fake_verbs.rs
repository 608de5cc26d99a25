//! The fake verbs provider (`tests/fake_verbs`), built with gcc for the RDMA tests.

use std::path::PathBuf;
use std::process::Command;

/// Builds `libibverbs.so.1` from `tests/fake_verbs` into `subdir` of the target's test
/// directory and returns its path. The library is written under a per-process name and renamed
/// into place, so test binaries building it at the same time do not see a half-written file.
pub fn build_fake_verbs(subdir: &str) -> PathBuf {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fake_verbs");
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(subdir);
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("libibverbs.so.1");
    let tmp = dir.join(format!("libibverbs.so.1.{}", std::process::id()));
    let st = Command::new("gcc")
        .args(["-shared", "-fPIC", "-O1", "-Wall", "-o"])
        .arg(&tmp)
        .arg(src.join("fake_ibverbs.c"))
        .arg(format!(
            "-Wl,--version-script={}",
            src.join("fake_ibverbs.map").display()
        ))
        .arg("-Wl,-soname,libibverbs.so.1")
        .status()
        .expect("running gcc");
    assert!(st.success(), "building the fake verbs provider failed");
    std::fs::rename(&tmp, &out).unwrap();
    out
}
