//! Same-engine transfers: a checked memcpy, no sockets.

use crate::error::{ErrorKind, Result};
use crate::memory::{Access, Registry, raw};
use crate::transport::Opcode;

/// Copies between two ranges of this engine's registered memory, checking both first.
pub fn copy(registry: &Registry, op: Opcode, local: u64, remote: u64, len: u64) -> Result<()> {
    let a = registry.check_place(local, len, Access::Local)?;
    let b = registry.check_place(remote, len, Access::Local)?;
    let (src, dst) = match op {
        Opcode::Read => (remote, local),
        Opcode::Write => (local, remote),
    };
    if let Some(dev) = a.or(b) {
        return crate::gpu::copy(dev, dst, src, len as usize);
    }
    // SAFETY: both ranges were just checked against the registry.
    unsafe { raw::copy(src, dst, len as usize) };
    Ok(())
}

/// Copies between this engine's registered memory and a peer engine of the same process. The
/// remote range is checked against the owner's registry with remote access rules, exactly as
/// the owner's TCP server checks a wire request (a failure reads as the peer's rejection).
pub fn copy_between(
    mine: &Registry,
    owner: &Registry,
    op: Opcode,
    local: u64,
    remote: u64,
    len: u64,
) -> Result<()> {
    let a = mine.check_place(local, len, Access::Local)?;
    let b = owner
        .check_place(remote, len, Access::Remote)
        .map_err(|e| crate::error::Error::new(ErrorKind::Rejected, e.message().to_string()))?;
    let (src, dst) = match op {
        Opcode::Read => (remote, local),
        Opcode::Write => (local, remote),
    };
    if let Some(dev) = a.or(b) {
        return crate::gpu::copy(dev, dst, src, len as usize);
    }
    // SAFETY: both ranges were just checked against their owners' registries.
    unsafe { raw::copy(src, dst, len as usize) };
    Ok(())
}
