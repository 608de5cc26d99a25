//! `--enable_ha`: the master campaigns for Mooncake's `master_view` key in etcd and serves only
//! while it leads. A standby answers every request with an error naming the leader (clients
//! given `etcd://...` then look the leader up again). On winning, a master with `--enable_oplog`
//! rebuilds segments and objects from the journal before it serves. A leader that loses its
//! lease stops serving at once and exits, to come back as a standby under its supervisor.

use crate::flags::HaFlags;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tidewire::etcd::EtcdClient;
use tidewire::etcd::election::{
    DEFAULT_CLUSTER_ID, Election, ElectionConfig, Role, master_view_key,
};
use tidewire::etcd::journal::{Fence, Journal, JournalTail};
use tidewire::etcd::journal_writer::{CompactPolicy, JournalWriter};
use tidewire::log::Level;
use tidewire::store::conn::STANDBY_MARK;
use tidewire::tw_log;
use tidewire_master::Master;
use tidewire_master::admin::{HaStatus, RuntimeState};

/// The cluster's name in etcd's keys: `--cluster_id`, else `MC_STORE_CLUSTER_ID`, else
/// Mooncake's `mooncake_cluster`.
pub fn cluster(ha: &HaFlags) -> String {
    let from_env = || std::env::var("MC_STORE_CLUSTER_ID").unwrap_or_default();
    let c = match ha.cluster_id.trim() {
        "" => from_env(),
        given => given.to_string(),
    };
    match c.trim() {
        "" => DEFAULT_CLUSTER_ID.to_string(),
        c => c.to_string(),
    }
}

fn journal_prefix(ha: &HaFlags) -> String {
    format!("tidewire-store/{}/journal/", cluster(ha))
}

/// A standby's reader of the leader's journal: it polls the journal every second on a thread
/// of its own, so that on winning the standby reads only what was written since (at a million
/// objects, reading the whole journal takes seconds of the failover).
struct Tailer {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<JournalTail>,
}

/// How often a standby reads what the leader wrote.
const TAIL_EVERY: Duration = Duration::from_secs(1);

impl Tailer {
    fn start(ha: &HaFlags) -> Option<Tailer> {
        let client = match EtcdClient::new(&ha.endpoints, Duration::from_secs(3)) {
            Ok(c) => Arc::new(c),
            Err(e) => {
                tw_log!(
                    Level::Warn,
                    "journal tail: {e}; reading it all on taking over"
                );
                return None;
            }
        };
        let stop = Arc::new(AtomicBool::new(false));
        let (stopped, prefix) = (stop.clone(), journal_prefix(ha));
        let thread = std::thread::Builder::new()
            .name("tw-journal-tail".into())
            .spawn(move || {
                let mut tail = JournalTail::new(client, &prefix);
                while !stopped.load(Ordering::Relaxed) {
                    if let Err(e) = tail.poll() {
                        tw_log!(Level::Debug, "journal tail: {e}; reading it again");
                    }
                    let until = Instant::now() + TAIL_EVERY;
                    while !stopped.load(Ordering::Relaxed) && Instant::now() < until {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                }
                tail
            })
            .ok()?;
        Some(Tailer { stop, thread })
    }

    /// Stops polling (a poll under way finishes) and hands over what was read.
    fn finish(self) -> Option<JournalTail> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().ok()
    }
}

fn take_over(
    master: &Arc<Master>,
    ha: &HaFlags,
    key: &str,
    view: i64,
    tail: Option<JournalTail>,
) -> Result<(), String> {
    if !ha.oplog {
        return Ok(());
    }
    let client = Arc::new(
        EtcdClient::new(&ha.endpoints, Duration::from_secs(3)).map_err(|e| e.to_string())?,
    );
    let fence = Fence {
        key: key.to_string(),
        create_revision: view,
    };
    let t0 = Instant::now();
    let prefix = journal_prefix(ha);
    let read_before = tail.as_ref().map_or(0, JournalTail::records);
    let opened = match tail {
        Some(t) => {
            Journal::open_from_tail(client.clone(), &prefix, fence.clone(), t).or_else(|e| {
                tw_log!(Level::Warn, "journal: {e}; reading it all");
                Journal::open(client, &prefix, fence)
            })
        }
        None => Journal::open(client, &prefix, fence),
    };
    let (journal, rec) = opened.map_err(|e| e.to_string())?;
    let read = t0.elapsed();
    let (segs, objs) = master.restore(&rec)?;
    eprintln!(
        "tidewire-master: restored {segs} segment(s) and {objs} object(s) from the journal ({} record(s) after the snapshot, {read_before} of them read while standing by; read in {read:?}, rebuilt in {:?})",
        rec.records.len(),
        t0.elapsed() - read
    );
    let m = master.clone();
    let writer = JournalWriter::start(
        journal,
        Box::new(move || m.snapshot_json()),
        CompactPolicy::default(),
    )
    .map_err(|e| e.to_string())?;
    master.attach_journal(Arc::new(writer));
    Ok(())
}

/// Campaigns and gates `master`, reporting each change in `status` (the admin routes' view);
/// returns only on a fatal error (the process then exits).
pub fn run(master: Arc<Master>, ha: &HaFlags, advertised: &str, status: &HaStatus) -> String {
    let key = master_view_key(&cluster(ha));
    let election = match Election::start(ElectionConfig {
        endpoints: ha.endpoints.clone(),
        key: key.clone(),
        value: advertised.to_string(),
        lease_ttl: ha.lease_ttl,
    }) {
        Ok(e) => e,
        Err(e) => return e.to_string(),
    };
    status.set(RuntimeState::Candidate, None, None);
    let mut generation = 0;
    let mut leading = false;
    let mut tailer: Option<Tailer> = None;
    loop {
        let st = election.wait_change(generation, Duration::from_millis(100));
        generation = st.generation;
        if leading {
            if !election.is_leader() {
                master.set_standby(Some(format!(
                    "tidewire-master: {STANDBY_MARK}; lost leadership"
                )));
                status.set(RuntimeState::Standby, None, None);
                return "lost leadership (lease not renewed); exiting".into();
            }
            continue;
        }
        match st.role {
            Role::Leader { view_version } if election.is_leader() => {
                let view = u64::try_from(view_version).ok();
                let state = if ha.oplog {
                    RuntimeState::Recovering
                } else {
                    RuntimeState::LeaderWarmup
                };
                status.set(state, Some(advertised.to_string()), view);
                let tail = tailer.take().and_then(Tailer::finish);
                if let Err(e) = take_over(&master, ha, &key, view_version, tail) {
                    return format!("taking over: {e}");
                }
                if let Some(kv) = master.kv_events() {
                    kv.number_after_predecessor();
                }
                master.set_standby(None);
                status.set(RuntimeState::Serving, Some(advertised.to_string()), view);
                leading = true;
                eprintln!("tidewire-master: leading as {advertised} (view {view_version})");
            }
            Role::Follower(l) => {
                master.set_standby(Some(format!(
                    "tidewire-master: {STANDBY_MARK}; the leader is {l}"
                )));
                // The leader's view version, as Mooncake's standby reports it.
                let view = st.leader_view.and_then(|v| u64::try_from(v).ok());
                status.set(RuntimeState::Standby, Some(l), view);
                if ha.oplog && tailer.is_none() {
                    tailer = Tailer::start(ha);
                }
            }
            _ => {
                master.set_standby(Some(format!(
                    "tidewire-master: {STANDBY_MARK}; no leader elected yet"
                )));
                status.set(RuntimeState::Candidate, None, None);
            }
        }
    }
}
