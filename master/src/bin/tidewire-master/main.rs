//! tidewire-master: the Store's metadata service. Binds exactly the addresses it is given
//! (RPC, optional HTTP metadata, metrics and admin routes), logs one JSON line `{"rpc_port":..}` per listener
//! once ready, and runs until killed.

mod flags;
mod ha;

use std::net::TcpListener;
use std::sync::Arc;
use tidewire_master::Master;
use tidewire_master::admin::{Admin, AdminOptions, HaStatus};
use tidewire_master::http::{HttpServer, MetadataStore};
use tidewire_master::server::{MasterServer, ServerOptions};

fn bind(host: &str, port: u16, what: &str) -> Result<TcpListener, String> {
    let addrs = tidewire::metadata::resolve(host, port).map_err(|e| format!("{what}: {e}"))?;
    let mut last = String::new();
    for a in addrs {
        match TcpListener::bind(a) {
            Ok(l) => return Ok(l),
            Err(e) => last = format!("{a}: {e}"),
        }
    }
    Err(format!("{what}: cannot bind {host}:{port}: {last}"))
}

fn run(f: flags::Flags) -> Result<(), String> {
    for note in &f.notes {
        eprintln!("tidewire-master: {note}");
    }
    let master = Arc::new(Master::new(f.master.clone()));
    if let Some(kv) = &f.kv_events {
        let ev = tidewire_master::kv_events::KvEvents::new(kv.clone());
        if f.ha.is_some() {
            ev.mute_until_leading();
        }
        ev.start()?;
        master.enable_kv_events(ev);
    }
    if f.ha.is_some() {
        master.set_standby(Some(format!(
            "tidewire-master: {}; no leader elected yet",
            tidewire::store::conn::STANDBY_MARK
        )));
    }
    let rpc = bind(&f.rpc_address, f.rpc_port, "rpc")?;
    let defaults = ServerOptions::default();
    let opts = ServerOptions {
        max_connections: f.max_connections,
        idle_timeout: f.idle_timeout.unwrap_or(defaults.idle_timeout),
        // Never logged: the value is a secret.
        auth_key: tidewire::auth::AuthKey::new(&std::env::var("TW_AUTH_KEY").unwrap_or_default()),
        ..defaults
    };
    let server = MasterServer::start(master.clone(), rpc, opts).map_err(|e| e.to_string())?;
    let mut ready = serde_json::json!({"rpc_port": server.local_addr().port()});
    let _http = if f.enable_http_metadata_server {
        let l = bind(
            &f.http_metadata_server_host,
            f.http_metadata_server_port,
            "http metadata",
        )?;
        let store = Arc::new(MetadataStore::default());
        let s =
            HttpServer::start(l, Arc::new(move |r| store.handle(r))).map_err(|e| e.to_string())?;
        ready["http_metadata_port"] = s.local_addr().port().into();
        Some(s)
    } else {
        None
    };
    let ha_status = Arc::new(if f.ha.is_some() {
        HaStatus::ha()
    } else {
        HaStatus::standalone()
    });
    // The metrics address serves the admin routes (/metrics, /health, /get_all_segments, ...).
    // They are optional: a taken port (another master's default 9003) is a warning, not an
    // outage.
    let _metrics = if f.enable_metric_reporting {
        let host = f
            .metrics_host
            .clone()
            .unwrap_or_else(|| f.rpc_address.clone());
        match bind(&host, f.metrics_port, "metrics") {
            Ok(l) => {
                let admin = Admin::new(master.clone(), ha_status.clone(), AdminOptions::default());
                let s = admin.serve(l).map_err(|e| e.to_string())?;
                ready["metrics_port"] = s.local_addr().port().into();
                Some(s)
            }
            Err(e) => {
                eprintln!("tidewire-master: metrics disabled: {e}");
                None
            }
        }
    } else {
        None
    };
    println!("{ready}");
    eprintln!(
        "tidewire-master: serving on {} (lease {:?}, client_ttl {:?})",
        server.local_addr(),
        f.master.lease_ttl,
        f.master.client_ttl
    );
    if let Some(ha) = &f.ha {
        let host = match f.rpc_address.as_str() {
            "0.0.0.0" | "::" | "" => {
                tidewire::metadata::first_lan_ipv4().unwrap_or_else(|| "127.0.0.1".into())
            }
            h => h.to_string(),
        };
        let advertised = tidewire::metadata::join_host_port(&host, server.local_addr().port());
        return Err(ha::run(master, ha, &advertised, &ha_status));
    }
    loop {
        std::thread::park();
    }
}

fn main() {
    tidewire_master::tune_allocator();
    let args: Vec<String> = std::env::args().skip(1).collect();
    match flags::parse(&args) {
        Ok(None) => print!("{}", flags::usage()),
        Ok(Some(f)) => {
            if let Err(e) = run(f) {
                eprintln!("tidewire-master: {e}");
                std::process::exit(1);
            }
        }
        Err(e) => {
            // One line per problem (every refused flag is named).
            for line in e.lines() {
                eprintln!("tidewire-master: {line}");
            }
            std::process::exit(2);
        }
    }
}
