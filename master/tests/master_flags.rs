//! The `tidewire-master` binary's command line as a user meets it: `--help` prints exactly the
//! golden text checked in beside the flag table, and a bad command line exits with status 2 and
//! a message naming the flag.

use std::process::Command;

fn run(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tidewire-master"))
        .args(args)
        .output()
        .expect("tidewire-master runs")
}

#[test]
fn help_prints_the_golden_text() {
    let golden = include_str!("../src/bin/tidewire-master/flags/help.golden.txt");
    for flag in ["--help", "-h", "-help"] {
        let out = run(&[flag]);
        assert!(out.status.success(), "{flag}: {:?}", out.status);
        assert_eq!(String::from_utf8_lossy(&out.stdout), golden, "{flag}");
    }
}

#[test]
fn a_bad_command_line_exits_2_naming_the_flag() {
    for (args, says) in [
        (&["--no_such_flag=1"][..], "unknown flag --no_such_flag"),
        (
            &["--rpc_port=x"][..],
            "--rpc_port: \"x\" is not a valid number",
        ),
        (&["--rpc_port"][..], "--rpc_port needs a value"),
        (&["--enable_ha"][..], "--enable_ha needs --etcd_endpoints"),
    ] {
        let out = run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }
}
