//! Same-process transfers: a checked memcpy, no sockets. Used for the engine's own segment and
//! for a peer engine living in this process.

use crate::error::{Error, ErrorKind, Result};
use crate::memory::{Access, Registry, raw};
use crate::transport::{Opcode, Slice, Transport};
use std::sync::{Arc, Weak};

/// The memcpy transport: this engine's own segment (`owner == None`) or the registry of a peer
/// engine living in this process (checked with remote-access rules; gone = `Socket`).
pub struct MemCopy {
    mine: Arc<Registry>,
    owner: Option<Weak<Registry>>,
}

impl MemCopy {
    /// Copies within this engine's own registered memory.
    pub fn own(mine: Arc<Registry>) -> MemCopy {
        MemCopy { mine, owner: None }
    }

    /// Copies to and from a peer engine of this process.
    pub fn in_process(mine: Arc<Registry>, owner: Weak<Registry>) -> MemCopy {
        MemCopy {
            mine,
            owner: Some(owner),
        }
    }

    fn copy_slice(&self, owner: &Registry, access: Access, s: &Slice, stream: bool) -> Result<u64> {
        copy(&self.mine, owner, access, s, stream).map(|_| s.len)
    }
}

impl Transport for MemCopy {
    fn path_name(&self) -> &'static str {
        match self.owner {
            None => "local",
            Some(_) => "in-process",
        }
    }

    fn submit_all(&self, slices: Vec<Slice>) {
        let owner = self.owner.as_ref().map(Weak::upgrade);
        let stream = slices.iter().map(|s| s.len).sum::<u64>() >= raw::STREAM_MIN_TOTAL;
        for s in slices {
            let res = match &owner {
                None => self.copy_slice(&self.mine, Access::Local, &s, stream),
                Some(Some(o)) => self.copy_slice(o, Access::Remote, &s, stream),
                Some(None) => {
                    s.done.finish(Err(ErrorKind::Socket));
                    continue;
                }
            };
            s.done.finish(res.map_err(|e| {
                tw_log!(crate::log::Level::Warn, "same-host transfer: {e}");
                e.kind()
            }));
        }
    }
}

/// Copies between this engine's registered memory (`mine`) and memory registered with `owner`
/// (this engine again for the local segment, or a peer engine of this process). The remote range
/// is checked with `access` rules; with `Access::Remote` a refusal reads as the owner's
/// rejection, exactly as its TCP server would answer, and the owner's `unregister` waits for the
/// copy. GPU memory on either side is copied by the CUDA driver. `stream`: the slice belongs to
/// a batch large enough for streaming stores ([`raw::STREAM_MIN_TOTAL`]).
fn copy(mine: &Registry, owner: &Registry, access: Access, s: &Slice, stream: bool) -> Result<()> {
    let (op, local, remote, len) = (s.op, s.local, s.remote, s.len);
    let a = mine.check_place(local, len, Access::Local)?;
    let (src, dst) = match op {
        Opcode::Read => (remote, local),
        Opcode::Write => (local, remote),
    };
    let run = |b: Option<u32>| {
        if let Some(dev) = a.or(b) {
            return crate::gpu::copy(dev, dst, src, len as usize);
        }
        // SAFETY: both ranges were just checked against their owners' registries, and the
        // owner's stays registered until this copy returns (its registry is read-locked).
        unsafe { raw::copy(src, dst, len as usize, stream) };
        Ok(())
    };
    match access {
        // This engine's own segment: its user races only itself.
        Access::Local => run(owner.check_place(remote, len, access)?),
        // A peer engine's memory: the copy holds the peer's registry (shared, so copies run in
        // parallel), so its `unregister` returns only after the copy is over. Only the owner's
        // lock is held: two engines copying into each other cannot deadlock.
        Access::Remote => {
            let mut checked = false;
            owner
                .with_checked(remote, len, access, |b| {
                    checked = true;
                    run(b)
                })
                // A refusal reads as the owner's rejection, as its TCP server would answer.
                .map_err(|e| match checked {
                    true => e,
                    false => Error::new(ErrorKind::Rejected, e.message().to_string()),
                })
        }
    }
}
