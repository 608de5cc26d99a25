//! Same-engine transfers: a checked memcpy, no sockets.

use crate::error::Result;
use crate::memory::{Access, Registry, raw};
use crate::transport::Opcode;

/// Copies between two ranges of this engine's registered memory, checking both first.
pub fn copy(registry: &Registry, op: Opcode, local: u64, remote: u64, len: u64) -> Result<()> {
    registry.check(local, len, Access::Local)?;
    registry.check(remote, len, Access::Local)?;
    let (src, dst) = match op {
        Opcode::Read => (remote, local),
        Opcode::Write => (local, remote),
    };
    // SAFETY: both ranges were just checked against the registry.
    unsafe { raw::copy(src, dst, len as usize) };
    Ok(())
}
