use super::*;

#[test]
fn setter_validates() {
    let mut c = Config::default();
    c.set("tcp_lanes", "4").unwrap();
    assert_eq!(c.tcp_lanes, 4);
    assert_eq!(
        c.set("tcp_lanes", "0").unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        c.set("tcp_lanes", "x").unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    c.set("tcp_spread", "off").unwrap();
    assert_eq!(c.tcp_spread, Some(false));
    c.set("tcp_spread", "auto").unwrap();
    assert_eq!(c.tcp_spread, None);
    c.set("tcp_congestion", "system").unwrap();
    assert_eq!(
        c.tcp_congestion,
        crate::transport::tcp::sockopt::Congestion::System
    );
    for (key, bad) in [("tcp_spread", "maybe"), ("tcp_congestion", "no such")] {
        assert_eq!(
            c.set(key, bad).unwrap_err().kind(),
            ErrorKind::InvalidArgument,
            "{key}={bad}"
        );
    }
    assert_eq!(
        c.set("nope", "1").unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        c.set("metadata", "redis://x:6379").unwrap_err().kind(),
        ErrorKind::Unsupported
    );
    c.set("metadata", "etcd://127.0.0.1:2379;127.0.0.1:2380")
        .unwrap();
    c.set("metadata", "127.0.0.1:2379").unwrap();
    c.set("metadata", "http://127.0.0.1:1/metadata").unwrap();
    assert!(!c.is_p2p());
    assert_eq!(
        c.set("local_server_name", "").unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
}

/// The table is the one home of every option: each key once, each variable once, every
/// default read back through its own setter unchanged, no default written into a help, and
/// every field of `Config` reachable through a key.
#[test]
fn one_row_per_option_and_nothing_drifts() {
    let mut keys = std::collections::HashSet::new();
    let mut vars = std::collections::HashSet::new();
    let base = Config::base();
    for o in OPTIONS {
        assert!(keys.insert(o.key), "{} twice", o.key);
        for e in o.env {
            assert!(vars.insert(e.var()), "{} twice", e.var());
        }
        assert!(
            !o.help.contains("default"),
            "{}: the default is generated",
            o.key
        );
        let mut c = Config::base();
        c.set(o.key, &o.get(&base)).unwrap();
        assert_eq!(o.get(&c), o.get(&base), "{} does not read back", o.key);
        assert!(o.help_line().starts_with(o.help));
    }
    // Each field's value moves when, and only when, its own key is set: a field without a
    // key (or a key writing the wrong field) shows up in the Debug text.
    let fields = format!("{:?}", base).matches(": ").count();
    assert_eq!(OPTIONS.len(), fields, "one key per Config field");
    for (o, other) in [
        ("tcp_lanes", "7"),
        ("slice_size", "8192"),
        ("connect_timeout_ms", "1234"),
        ("rdma", "off"),
        ("tcp_spread", "on"),
        ("auth_key", "k"),
    ] {
        let mut c = Config::base();
        c.set(o, other).unwrap();
        for p in OPTIONS.iter().filter(|p| p.key != o) {
            assert_eq!(p.get(&c), p.get(&base), "setting {o} moved {}", p.key);
        }
        assert_ne!(c.get(o), base.get(o), "{o}");
    }
}

#[test]
fn help_names_the_default_and_the_variables() {
    let help: std::collections::HashMap<_, _> = Config::help().into_iter().collect();
    assert_eq!(
        help["tcp_lanes"],
        "connections per peer, 1..=16 (default 2); env MC_TCP_LANES_PER_PEER, \
         MC_TCP_MAX_CONNECTIONS_PER_PEER, TW_TCP_LANES"
    );
    assert_eq!(
        help["rpc_port"],
        "handshake port, 0 = any free port (default 0)"
    );
    assert!(help["auth_key"].contains("(default empty); env TW_AUTH_KEY"));
}

/// A `CONFIG_KEYS = (...)` tuple in the Python package (a copy kept by hand) must name
/// exactly the keys of [`OPTIONS`].
#[test]
fn python_config_keys_match_the_table() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/python/tidewire");
    let mut copies = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "py") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let Some(start) = text.find("\nCONFIG_KEYS = (") else {
            continue;
        };
        let body = &text[start..];
        let body = &body[..body.find(')').unwrap()];
        let mut python: Vec<&str> = body.split('"').skip(1).step_by(2).collect();
        let mut rust: Vec<&str> = OPTIONS.iter().map(|o| o.key).collect();
        python.sort_unstable();
        rust.sort_unstable();
        assert_eq!(python, rust, "{}: CONFIG_KEYS", path.display());
        copies += 1;
    }
    assert!(copies <= 1, "CONFIG_KEYS is written {copies} times");
}
