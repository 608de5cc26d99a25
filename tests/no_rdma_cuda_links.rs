//! The shared library must load on hosts without RDMA or CUDA: no `NEEDED` entry for their
//! libraries (they are opened at run time), and every `tw_` function the header declares is
//! exported.

use std::path::{Path, PathBuf};
use std::process::Command;

const FORBIDDEN: [&str; 5] = ["libibverbs", "librdmacm", "libmlx5", "libcuda", "libcudart"];

/// `target/<profile>/libtidewire.so` for the profile this test was built with; built with
/// cargo when missing.
fn library() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    // target/<profile>/deps/<test binary>
    let profile_dir = exe.parent().and_then(Path::parent).unwrap().to_path_buf();
    let lib = profile_dir.join("libtidewire.so");
    if !lib.exists() {
        let cargo = option_env!("CARGO").unwrap_or("cargo");
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "--lib", "--manifest-path"])
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"));
        if profile_dir.file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        let st = cmd.status().expect("running cargo build --lib");
        assert!(st.success(), "cargo build --lib failed");
    }
    assert!(lib.exists(), "{} not found", lib.display());
    lib
}

fn tool(prog: &str, args: &[&str], lib: &Path) -> String {
    let out = Command::new(prog)
        .args(args)
        .arg(lib)
        .output()
        .unwrap_or_else(|e| panic!("running {prog}: {e}"));
    assert!(
        out.status.success(),
        "{prog} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn no_needed_entry_for_rdma_or_cuda() {
    let lib = library();
    let dynamic = tool("readelf", &["-d", "-W"], &lib);
    let needed: Vec<&str> = dynamic
        .lines()
        .filter(|l| l.contains("(NEEDED)"))
        .filter_map(|l| l.split('[').nth(1)?.split(']').next())
        .collect();
    assert!(
        !needed.is_empty(),
        "no NEEDED entries parsed from:\n{dynamic}"
    );
    assert!(needed.contains(&"libc.so.6"), "{needed:?}");
    for n in &needed {
        for bad in FORBIDDEN {
            assert!(!n.starts_with(bad), "{} links {n}", lib.display());
        }
    }
    eprintln!("{}: NEEDED {needed:?}", lib.display());
}

/// Function names declared in a C header (declarations only, not comments).
fn declared_functions(header: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut in_comment = false;
    for line in header.lines() {
        let t = line.trim_start();
        if in_comment {
            in_comment = !t.contains("*/");
            continue;
        }
        if t.starts_with("/*") {
            in_comment = !t.contains("*/");
            continue;
        }
        if t.starts_with("//") || t.starts_with('*') || t.starts_with('#') {
            continue;
        }
        let mut rest = t;
        while let Some(pos) = rest.find("tw_") {
            let tail = &rest[pos..];
            let end = tail
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(tail.len());
            let boundary =
                pos == 0 || !rest[..pos].ends_with(|c: char| c.is_alphanumeric() || c == '_');
            if boundary && tail[end..].starts_with('(') {
                names.push(tail[..end].to_string());
            }
            rest = &tail[end..];
        }
    }
    names.sort();
    names.dedup();
    names
}

#[test]
fn every_header_function_is_exported() {
    let lib = library();
    let header_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("include/tidewire.h");
    let header = std::fs::read_to_string(&header_path).unwrap();
    let declared = declared_functions(&header);
    assert!(
        declared.len() >= 20,
        "only {} functions parsed from the header: {declared:?}",
        declared.len()
    );
    for must in [
        "tw_engine_new",
        "tw_batch_submit",
        "tw_scatter_submit",
        "tw_last_error_message",
    ] {
        assert!(declared.iter().any(|d| d == must), "{must} not parsed");
    }
    let syms = tool("nm", &["-D", "--defined-only"], &lib);
    let exported: std::collections::HashSet<&str> = syms
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (_, kind, name) = (f.next()?, f.next()?, f.next()?);
            (kind == "T").then_some(name)
        })
        .collect();
    let missing: Vec<&String> = declared
        .iter()
        .filter(|d| !exported.contains(d.as_str()))
        .collect();
    assert!(missing.is_empty(), "declared but not exported: {missing:?}");
    eprintln!("{} header functions, all exported", declared.len());
}
