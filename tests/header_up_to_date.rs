//! `include/tidewire.h` must be exactly what cbindgen generates from `src/ffi/` today.
//! `UPDATE_HEADER=1 cargo test --test header_up_to_date` rewrites it.

use std::path::Path;

#[test]
fn native_header_matches_the_code() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config =
        cbindgen::Config::from_file(root.join("cbindgen.toml")).expect("cbindgen.toml parses");
    let mut out = Vec::new();
    cbindgen::Builder::new()
        .with_config(config)
        .with_src(root.join("src/ffi/native/mod.rs"))
        .with_src(root.join("src/ffi/status.rs"))
        .with_src(root.join("src/ffi/store/mod.rs"))
        .generate()
        .expect("cbindgen generates")
        .write(&mut out);
    let generated = String::from_utf8(out).unwrap();
    let path = root.join("include/tidewire.h");
    if std::env::var_os("UPDATE_HEADER").is_some() {
        std::fs::write(&path, &generated).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "include/tidewire.h is out of date with src/ffi/: run `make header` and commit it"
    );
}

#[test]
fn header_version_macros_match_cargo() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let h = std::fs::read_to_string(root.join("include/tidewire.h")).unwrap();
    let mut parts = env!("CARGO_PKG_VERSION").split('.');
    for name in ["MAJOR", "MINOR", "PATCH"] {
        let want = format!("#define TIDEWIRE_VERSION_{name} {}", parts.next().unwrap());
        assert!(h.contains(&want), "missing {want:?}");
    }
}
