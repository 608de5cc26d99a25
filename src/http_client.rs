//! The blocking HTTP/1.1 client shared by the metadata stores (`ureq`, plain http only): one
//! agent per store with a deadline on every call, and response bodies read up to a fixed cap.

use std::time::Duration;

/// Largest response body a metadata store reads (a descriptor is a few KiB; a range over many
/// segments stays far below this). Bigger bodies fail with a clear error instead of growing.
pub const MAX_RESPONSE: u64 = 16 << 20;

/// An agent whose calls (connect, request and body together) end within `deadline`. It keeps
/// idle connections for reuse and never follows redirects.
pub fn agent(deadline: Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .timeout_global(Some(deadline))
        .timeout_connect(Some(deadline))
        .user_agent("tidewire")
        .build()
        .into()
}

/// An agent for long-lived streams: connect and response head within `deadline`, the body for
/// at most `window`, after which reads fail with a time-out.
pub fn stream_agent(deadline: Duration, window: Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .timeout_connect(Some(deadline))
        .timeout_send_request(Some(deadline))
        .timeout_recv_response(Some(deadline))
        .timeout_recv_body(Some(window))
        .max_idle_connections(0)
        .user_agent("tidewire")
        .build()
        .into()
}

/// Reads a whole response body, at most [`MAX_RESPONSE`] bytes.
pub fn read_body(
    resp: &mut ureq::http::Response<ureq::Body>,
) -> std::result::Result<Vec<u8>, String> {
    resp.body_mut()
        .with_config()
        .limit(MAX_RESPONSE)
        .read_to_vec()
        .map_err(|e| describe(&e))
}

/// True when `e` says the peer could not be reached or answered too late (worth trying another
/// endpoint), false for a protocol-level failure.
pub fn is_transport(e: &ureq::Error) -> bool {
    matches!(
        e,
        ureq::Error::Io(_)
            | ureq::Error::Timeout(_)
            | ureq::Error::HostNotFound
            | ureq::Error::ConnectionFailed
    )
}

/// A short human description of a ureq error.
pub fn describe(e: &ureq::Error) -> String {
    match e {
        ureq::Error::BodyExceedsLimit(n) => {
            format!("response body larger than {n} bytes; refusing to read more")
        }
        ureq::Error::Timeout(t) => format!("deadline passed ({t})"),
        ureq::Error::Io(io) => io.to_string(),
        other => other.to_string(),
    }
}
