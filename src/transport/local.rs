//! Same-process transfers: a checked memcpy, no sockets. Used for the engine's own segment and
//! for a peer engine living in this process.

use crate::error::{Error, ErrorKind, Result};
use crate::memory::{Access, Registry, raw};
use crate::transport::Opcode;

/// Copies between this engine's registered memory (`mine`) and memory registered with `owner`
/// (this engine again for the local segment, or a peer engine of this process). The remote range
/// is checked with `access` rules; with `Access::Remote` a refusal reads as the owner's
/// rejection, exactly as its TCP server would answer. GPU memory on either side is copied by the
/// CUDA driver.
pub fn copy(
    mine: &Registry,
    owner: &Registry,
    access: Access,
    op: Opcode,
    local: u64,
    remote: u64,
    len: u64,
) -> Result<()> {
    let a = mine.check_place(local, len, Access::Local)?;
    let b = owner
        .check_place(remote, len, access)
        .map_err(|e| match access {
            Access::Remote => Error::new(ErrorKind::Rejected, e.message().to_string()),
            Access::Local => e,
        })?;
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
