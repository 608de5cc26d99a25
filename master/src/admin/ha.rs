//! The HA state the admin routes report (`/ha_status`, `/role`, `/leader`, `/health`), set by
//! the election loop.

use std::sync::Mutex;
use tidewire::sync::LockClean;

/// A master's runtime state, as Mooncake names it (`/ha_status`; `/role` maps it to `leader` or
/// `standby`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuntimeState {
    /// Not campaigning yet.
    Starting,
    /// Another master leads.
    Standby,
    /// Campaigning, no leader known.
    Candidate,
    /// Won; rebuilding state from the journal.
    Recovering,
    /// Won; replaying the journal's tail.
    CatchingUp,
    /// Won; about to serve.
    LeaderWarmup,
    /// Serving requests.
    Serving,
}

impl RuntimeState {
    /// Mooncake's name (`/ha_status`).
    pub fn as_str(self) -> &'static str {
        match self {
            RuntimeState::Starting => "starting",
            RuntimeState::Standby => "standby",
            RuntimeState::Candidate => "candidate",
            RuntimeState::Recovering => "recovering",
            RuntimeState::CatchingUp => "catching_up",
            RuntimeState::LeaderWarmup => "leader_warmup",
            RuntimeState::Serving => "serving",
        }
    }

    /// `leader` or `standby` (`/role`).
    pub fn role(self) -> &'static str {
        match self {
            RuntimeState::LeaderWarmup | RuntimeState::Serving => "leader",
            _ => "standby",
        }
    }
}

/// What the HA loop last reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HaView {
    /// Runtime state.
    pub state: RuntimeState,
    /// The leader's RPC address, when known.
    pub leader: Option<String>,
    /// The leader's view version (the etcd revision of its win), when known.
    pub view_version: Option<u64>,
}

/// The master's HA state for the admin routes; the HA loop updates it.
#[derive(Debug)]
pub struct HaStatus {
    enabled: bool,
    view: Mutex<HaView>,
}

impl HaStatus {
    /// A master without HA: serving, no leader view (as Mooncake's non-HA master).
    pub fn standalone() -> HaStatus {
        HaStatus {
            enabled: false,
            view: Mutex::new(HaView {
                state: RuntimeState::Serving,
                leader: None,
                view_version: None,
            }),
        }
    }

    /// A master with HA, before it campaigns.
    pub fn ha() -> HaStatus {
        HaStatus {
            enabled: true,
            view: Mutex::new(HaView {
                state: RuntimeState::Starting,
                leader: None,
                view_version: None,
            }),
        }
    }

    /// Records a change.
    pub fn set(&self, state: RuntimeState, leader: Option<String>, view_version: Option<u64>) {
        *self.view.lock_clean() = HaView {
            state,
            leader,
            view_version,
        };
    }

    /// The current view.
    pub fn view(&self) -> HaView {
        self.view.lock_clean().clone()
    }

    /// Whether HA is on.
    pub fn enabled(&self) -> bool {
        self.enabled
    }
}
