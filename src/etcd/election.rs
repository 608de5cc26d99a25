//! Leader election over etcd, as Mooncake's Store masters elect: the leader's `host:rpc_port`
//! sits in one key (`mooncake-store/<cluster>/master_view`) bound to the leader's lease, written
//! by a create-if-absent transaction. Standbys watch the key and campaign as soon as it goes.
//!
//! A leader renews its lease every third of its time to live and steps down on its own once it
//! could not renew for a whole time to live (measured from the moment it sent the last renewal
//! that succeeded, which is never later than etcd's own clock for that lease), so a leader cut
//! off from etcd stops leading before etcd lets anyone else win. It also steps down when its key
//! was deleted or taken over. [`Election::is_leader`] checks that deadline itself, so it is true
//! only while the lease is known to be alive, even if the election thread is stuck in a call.

use super::watch::EventKind;
use super::{EtcdClient, KeyValue};
use crate::error::{Error, ErrorKind, Result};
use crate::log::Level;
use crate::sync::{LockClean, Recover};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Mooncake's lease time to live for the master view, seconds.
pub const DEFAULT_LEASE_TTL: i64 = 5;

/// The cluster name when `MC_STORE_CLUSTER_ID` is unset (Mooncake's default).
pub const DEFAULT_CLUSTER_ID: &str = "mooncake_cluster";

/// The leader key for `cluster` (empty = [`DEFAULT_CLUSTER_ID`]).
pub fn master_view_key(cluster: &str) -> String {
    let cluster = cluster.trim();
    let cluster = if cluster.is_empty() {
        DEFAULT_CLUSTER_ID
    } else {
        cluster
    };
    format!("mooncake-store/{cluster}/master_view")
}

/// The leader key for the cluster named by `MC_STORE_CLUSTER_ID`.
pub fn master_view_key_from_env() -> String {
    master_view_key(&std::env::var("MC_STORE_CLUSTER_ID").unwrap_or_default())
}

/// Reads the current leader: its value (`host:rpc_port`) and the revision that created the key
/// (the view version), or `None` when no one leads.
pub fn read_leader(client: &EtcdClient, key: &str) -> Result<Option<(String, i64)>> {
    let (kv, _) = client.get(key.as_bytes())?;
    Ok(kv.map(|kv| {
        (
            String::from_utf8_lossy(&kv.value).into_owned(),
            kv.create_revision,
        )
    }))
}

/// What to elect and how.
#[derive(Debug, Clone)]
pub struct ElectionConfig {
    /// etcd connection string (`h1:p;h2:p`, `etcd://...`).
    pub endpoints: String,
    /// The leader key (see [`master_view_key`]).
    pub key: String,
    /// This contender's value, written into the key when it wins (`host:rpc_port`).
    pub value: String,
    /// Lease time to live, seconds (etcd may grant more; at least 1).
    pub lease_ttl: i64,
}

/// Where this contender stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// No leader known yet (starting, between leaders, or etcd unreachable).
    Unknown,
    /// Another contender leads; its value.
    Follower(String),
    /// This contender leads; `view_version` is the etcd revision of its win.
    Leader {
        /// etcd revision at which the key was created.
        view_version: i64,
    },
}

/// A snapshot of [`Election`]'s state.
#[derive(Debug, Clone)]
pub struct Status {
    /// The role.
    pub role: Role,
    /// When the role last changed.
    pub since: Instant,
    /// Bumped on every role change.
    pub generation: u64,
    /// The last etcd failure, cleared by the next success.
    pub last_error: Option<String>,
    /// The leader's view version (the etcd revision that created the leader key) as this
    /// contender knows it: its own while leading, the other's while following.
    pub leader_view: Option<i64>,
}

struct State {
    status: Status,
    /// Lease this contender currently holds (0 = none).
    lease: i64,
    /// While leading: the time after which the lease may have ended.
    leading_until: Option<Instant>,
    stopped: bool,
}

struct Shared {
    client: EtcdClient,
    cfg: ElectionConfig,
    ttl: Mutex<Duration>,
    state: Mutex<State>,
    changed: Condvar,
}

/// A contender for the leader key. Campaigns on a background thread from [`Election::start`]
/// until dropped (dropping a leader revokes its lease, so the key goes at once). Thread-safe.
pub struct Election {
    shared: Arc<Shared>,
}

enum Campaign {
    Won {
        lease: i64,
        revision: i64,
    },
    Lost {
        leader: KeyValue,
        revision: i64,
    },
    /// The key went between the compare and the read: campaign again.
    Retry,
}

/// Safety margin kept between a leader's own deadline and its lease's end in etcd.
const MARGIN: Duration = Duration::from_millis(150);

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock_clean()
    }

    fn ttl(&self) -> Duration {
        *self.ttl.lock_clean()
    }

    fn stopped(&self) -> bool {
        self.lock().stopped
    }

    fn set_role(&self, role: Role) {
        let view = match role {
            Role::Leader { view_version } => Some(view_version),
            _ => None,
        };
        self.set_role_view(role, view);
    }

    /// Sets the role and the leader's view version (see [`Status::leader_view`]).
    fn set_role_view(&self, role: Role, view: Option<i64>) {
        let mut s = self.lock();
        if s.status.role != role || s.status.leader_view != view {
            s.status.role = role;
            s.status.leader_view = view;
            s.status.since = Instant::now();
            s.status.generation += 1;
            self.changed.notify_all();
        }
    }

    fn note_error(&self, e: &Error) {
        let mut s = self.lock();
        if s.status.last_error.as_deref() != Some(e.message()) {
            tw_log!(Level::Warn, "election {}: {}", self.cfg.key, e.message());
            s.status.last_error = Some(e.message().to_string());
            self.changed.notify_all();
        }
    }

    fn clear_error(&self) {
        self.lock().status.last_error = None;
    }

    /// Sleeps up to `d`; returns true when stopped meanwhile.
    fn pause(&self, d: Duration) -> bool {
        let s = self.lock();
        let (s, _) = self
            .changed
            .wait_timeout_while(s, d, |s| !s.stopped)
            .recover();
        s.stopped
    }

    /// One attempt: a fresh lease and the create-if-absent transaction.
    fn campaign(&self) -> Result<Campaign> {
        let granted_at = Instant::now();
        let lease = self.client.lease_grant(self.cfg.lease_ttl.max(1))?;
        let ttl = Duration::from_secs(lease.ttl as u64);
        *self.ttl.lock_clean() = ttl;
        let outcome =
            self.client
                .put_if_absent(self.cfg.key.as_bytes(), self.cfg.value.as_bytes(), lease.id);
        let won = match &outcome {
            Ok(o) if o.succeeded => true,
            // A retried transaction whose first try landed finds our own value on our lease.
            Ok(o) => o.existing.as_ref().is_some_and(|kv| kv.lease == lease.id),
            Err(_) => false,
        };
        if won {
            let mut s = self.lock();
            s.lease = lease.id;
            s.leading_until = Some(granted_at + ttl.saturating_sub(MARGIN));
            return Ok(Campaign::Won {
                lease: lease.id,
                revision: outcome.map(|o| o.revision)?,
            });
        }
        if let Err(e) = self.client.lease_revoke(lease.id) {
            tw_log!(Level::Debug, "election: revoking an unused lease: {e}");
        }
        let o = outcome?;
        match o.existing {
            Some(leader) => Ok(Campaign::Lost {
                leader,
                revision: o.revision,
            }),
            None => Ok(Campaign::Retry),
        }
    }

    /// Leads until the lease cannot be renewed in time, the key is no longer ours, or stop.
    fn lead(&self, lease: i64) {
        let mut next = Instant::now() + self.ttl() / 3;
        loop {
            let until = match self.lock().leading_until {
                Some(u) => u,
                None => return,
            };
            if self.pause(next.min(until).saturating_duration_since(Instant::now())) {
                return;
            }
            let now = Instant::now();
            if now >= until {
                tw_log!(
                    Level::Warn,
                    "election {}: lease {lease:x} not renewed for {:?}; stepping down",
                    self.cfg.key,
                    self.ttl()
                );
                return;
            }
            if now < next {
                continue;
            }
            let sent = Instant::now();
            match self.client.lease_keepalive(lease) {
                Ok(Some(ttl)) => match self.still_ours(lease) {
                    Ok(true) => {
                        self.clear_error();
                        let ttl = Duration::from_secs(ttl as u64);
                        self.lock().leading_until = Some(sent + ttl.saturating_sub(MARGIN));
                        next = sent + ttl / 3;
                    }
                    Ok(false) => {
                        tw_log!(
                            Level::Warn,
                            "election {}: the key was deleted or taken over; stepping down",
                            self.cfg.key
                        );
                        return;
                    }
                    Err(e) => {
                        self.note_error(&e);
                        next = Instant::now() + self.ttl() / 12;
                    }
                },
                Ok(None) => {
                    tw_log!(
                        Level::Warn,
                        "election {}: lease {lease:x} ended; stepping down",
                        self.cfg.key
                    );
                    return;
                }
                Err(e) => {
                    self.note_error(&e);
                    next = Instant::now() + self.ttl() / 12;
                }
            }
        }
    }

    fn still_ours(&self, lease: i64) -> Result<bool> {
        let (kv, _) = self.client.get(self.cfg.key.as_bytes())?;
        Ok(kv.is_some_and(|kv| kv.lease == lease && kv.value == self.cfg.value.as_bytes()))
    }

    /// Watches the key from `revision` until it is deleted (returns `Ok`) or etcd fails.
    fn follow(&self, mut revision: i64) -> Result<()> {
        let window = self
            .ttl()
            .clamp(Duration::from_secs(1), Duration::from_secs(3));
        let key = self.cfg.key.as_bytes();
        loop {
            if self.stopped() {
                return Ok(());
            }
            let mut stream = self.client.watch(key, b"", revision + 1, window)?;
            while let Some(msg) = stream.next_message()? {
                if msg.canceled {
                    break; // compacted or canceled: read the key afresh below
                }
                for ev in msg.events {
                    revision = revision.max(ev.kv.mod_revision);
                    match ev.kind {
                        EventKind::Delete => return Ok(()),
                        EventKind::Put => self.set_role_view(
                            Role::Follower(String::from_utf8_lossy(&ev.kv.value).into_owned()),
                            Some(ev.kv.create_revision),
                        ),
                    }
                }
            }
            let (kv, rev) = self.client.get(key)?;
            match kv {
                None => return Ok(()),
                Some(kv) => {
                    self.set_role_view(
                        Role::Follower(String::from_utf8_lossy(&kv.value).into_owned()),
                        Some(kv.create_revision),
                    );
                    revision = rev;
                }
            }
            self.clear_error();
        }
    }

    fn step_down(&self) {
        let lease = {
            let mut s = self.lock();
            s.leading_until = None;
            std::mem::take(&mut s.lease)
        };
        self.set_role(Role::Unknown);
        if lease != 0 {
            let _ = self.client.lease_revoke(lease);
        }
    }

    fn run(&self) {
        while !self.stopped() {
            match self.campaign() {
                Ok(Campaign::Won { lease, revision }) => {
                    self.clear_error();
                    tw_log!(
                        Level::Info,
                        "election {}: leading as {} (view {revision})",
                        self.cfg.key,
                        self.cfg.value
                    );
                    self.set_role(Role::Leader {
                        view_version: revision,
                    });
                    self.lead(lease);
                    self.step_down();
                }
                Ok(Campaign::Retry) => {}
                Ok(Campaign::Lost { leader, revision }) => {
                    self.clear_error();
                    self.set_role_view(
                        Role::Follower(String::from_utf8_lossy(&leader.value).into_owned()),
                        Some(leader.create_revision),
                    );
                    if let Err(e) = self.follow(revision) {
                        self.note_error(&e);
                        if self.pause(self.ttl() / 5) {
                            return;
                        }
                    }
                }
                Err(e) => {
                    self.note_error(&e);
                    self.set_role(Role::Unknown);
                    if self.pause(self.ttl() / 5) {
                        return;
                    }
                }
            }
        }
    }
}

impl Election {
    /// Checks that etcd answers, then campaigns on a background thread. Fails (naming the
    /// endpoints) when the connection string is bad or no endpoint answers.
    pub fn start(cfg: ElectionConfig) -> Result<Election> {
        if cfg.value.is_empty() || cfg.key.is_empty() {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "election: empty key or value",
            ));
        }
        let ttl = Duration::from_secs(cfg.lease_ttl.max(1) as u64);
        // Each call must end well inside a renewal period, whichever endpoint answers.
        let per_call = (ttl / 4).clamp(Duration::from_millis(250), Duration::from_secs(2));
        let client = EtcdClient::new(&cfg.endpoints, per_call)?;
        read_leader(&client, &cfg.key).map_err(|e| {
            Error::new(
                ErrorKind::Metadata,
                format!(
                    "election at {}: cannot start: {}",
                    client.endpoint_list(),
                    e.message()
                ),
            )
        })?;
        let shared = Arc::new(Shared {
            client,
            cfg,
            ttl: Mutex::new(ttl),
            state: Mutex::new(State {
                status: Status {
                    role: Role::Unknown,
                    since: Instant::now(),
                    generation: 0,
                    last_error: None,
                    leader_view: None,
                },
                lease: 0,
                leading_until: None,
                stopped: false,
            }),
            changed: Condvar::new(),
        });
        let s2 = shared.clone();
        std::thread::Builder::new()
            .name("tw-election".into())
            .spawn(move || s2.run())
            .map_err(|e| Error::new(ErrorKind::Internal, format!("starting election: {e}")))?;
        Ok(Election { shared })
    }

    /// The current state.
    pub fn status(&self) -> Status {
        self.shared.lock().status.clone()
    }

    /// True while this contender leads and its lease is known to be alive.
    pub fn is_leader(&self) -> bool {
        let s = self.shared.lock();
        matches!(s.status.role, Role::Leader { .. })
            && s.leading_until.is_some_and(|u| Instant::now() < u)
    }

    /// The leader's value as this contender knows it (its own while leading).
    pub fn leader(&self) -> Option<String> {
        match self.status().role {
            Role::Leader { .. } => Some(self.shared.cfg.value.clone()),
            Role::Follower(v) => Some(v),
            Role::Unknown => None,
        }
    }

    /// The lease time to live etcd granted (the configured one until the first grant).
    pub fn lease_ttl(&self) -> Duration {
        self.shared.ttl()
    }

    /// Waits up to `timeout` for the generation to move past `generation`; returns the state.
    pub fn wait_change(&self, generation: u64, timeout: Duration) -> Status {
        let s = self.shared.lock();
        let (s, _) = self
            .shared
            .changed
            .wait_timeout_while(s, timeout, |s| {
                s.status.generation == generation && !s.stopped
            })
            .recover();
        s.status.clone()
    }

    /// Stops campaigning; a leader revokes its lease so that the key goes at once.
    pub fn resign(&self) {
        let lease = {
            let mut s = self.shared.lock();
            s.stopped = true;
            s.leading_until = None;
            self.shared.changed.notify_all();
            std::mem::take(&mut s.lease)
        };
        self.shared.set_role(Role::Unknown);
        if lease != 0 {
            if let Err(e) = self.shared.client.lease_revoke(lease) {
                tw_log!(
                    Level::Warn,
                    "election {}: revoking lease on resign: {e}",
                    self.shared.cfg.key
                );
            }
        }
    }
}

impl Drop for Election {
    fn drop(&mut self) {
        self.resign();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_layout() {
        assert_eq!(
            master_view_key(""),
            "mooncake-store/mooncake_cluster/master_view"
        );
        assert_eq!(master_view_key(" c1 "), "mooncake-store/c1/master_view");
    }
}
