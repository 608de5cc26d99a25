//! The walk over the backend list, with toy backends: routing order, layering, registration
//! rollback, and a transport reached through `Route::Other` (what a new backend starts with).

use super::*;
use crate::transport::{Slice, Transport};
use std::sync::{Arc, Mutex};

type Log = Arc<Mutex<Vec<String>>>;

struct Toy {
    name: &'static str,
    take: bool,
    refuse_memory: bool,
    log: Log,
}

struct ToyPath(&'static str);

impl Transport for ToyPath {
    fn path_name(&self) -> &'static str {
        self.0
    }

    fn submit_all(&self, _slices: Vec<Slice>) {}
}

impl Toy {
    fn note(&self, what: &str) {
        self.log
            .lock()
            .unwrap()
            .push(format!("{what} {}", self.name));
    }
}

impl Backend for Toy {
    fn name(&self) -> &'static str {
        self.name
    }

    fn register(&self, _ranges: &[(u64, u64)], _remote: bool) -> std::result::Result<(), String> {
        self.note("register");
        if self.refuse_memory {
            return Err(format!("{} refuses", self.name));
        }
        Ok(())
    }

    fn unregister(&self, _base: u64) {
        self.note("unregister");
    }

    fn connect(&self, _peer: &PeerSegment<'_>) -> Result<Option<Route>> {
        self.note("connect");
        Ok(self
            .take
            .then(|| Route::Other(Arc::new(ToyPath(self.name)))))
    }

    fn upgrade(&self, _peer: &PeerSegment<'_>, route: Route) -> Route {
        self.note("upgrade");
        route
    }
}

fn list(spec: &[(&'static str, bool, bool)], log: &Log) -> Vec<Box<dyn Backend>> {
    spec.iter()
        .map(|&(name, take, refuse_memory)| {
            Box::new(Toy {
                name,
                take,
                refuse_memory,
                log: log.clone(),
            }) as Box<dyn Backend>
        })
        .collect()
}

fn desc() -> SegmentDesc {
    SegmentDesc::decode(
        br#"{"buffers":[],"name":"peer:1","protocol":"tcp","rdma_server_name":"","tcp_data_host":"127.0.0.1","tcp_data_port":2,"tcp_proto_version":2,"timestamp":""}"#,
    )
    .unwrap()
}

#[test]
fn the_first_backend_that_takes_a_segment_routes_it_and_every_one_may_layer_over_it() {
    let log = Log::default();
    let backends = list(
        &[("a", false, false), ("b", true, false), ("c", true, false)],
        &log,
    );
    let (d, rpc) = (desc(), ("127.0.0.1".to_string(), 1));
    let peer = PeerSegment {
        name: "peer:1",
        rpc: &rpc,
        desc: &d,
    };
    let route = connect_first(&backends, &peer)
        .unwrap()
        .expect("b takes it");
    assert_eq!(route.path_name(), "b");
    assert!(route.same(&route.clone()));
    let other = connect_first(&backends, &peer).unwrap().unwrap();
    assert!(!route.same(&other), "each connect is its own endpoint");
    assert_eq!(
        log.lock().unwrap()[..5],
        [
            "connect a",
            "connect b",
            "upgrade a",
            "upgrade b",
            "upgrade c"
        ]
    );
    let none = list(&[("a", false, false)], &log);
    assert!(connect_first(&none, &peer).unwrap().is_none());
}

#[test]
fn a_refused_registration_is_undone_everywhere() {
    let log = Log::default();
    let backends = list(
        &[("a", false, false), ("b", false, true), ("c", false, false)],
        &log,
    );
    let registry = Registry::default();
    let buf = vec![0u8; 4096];
    let range = (buf.as_ptr() as u64, buf.len() as u64);
    registry.register(range.0, range.1, "cpu:0", true).unwrap();
    let e = register_all(&backends, &registry, &[range], true).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Internal);
    assert_eq!(
        *log.lock().unwrap(),
        ["register a", "register b", "unregister a"]
    );
    assert!(
        registry.region_of(range.0).is_none(),
        "the engine registration is undone"
    );
}
