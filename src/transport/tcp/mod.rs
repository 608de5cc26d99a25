//! TCP transport, wire-compatible with Mooncake (v1 and v2 framing). See `README.md` here for
//! the lane design.

pub mod client;
pub mod net;
pub mod peer_identity;
mod replies;
pub mod server;
pub mod sockopt;
mod stage;
pub mod wire;
