//! Shared buffers (`allocate_managed_buffer`): host memory the engine allocates backed by a
//! memfd, registered remote-accessible and mapped by verified same-host peers, which then copy
//! with `memcpy` (see `memory::shared` for the revocation fence and `transport::shm` for the
//! peer side). Peers elsewhere reach the buffer like any registered memory.

use super::Engine;
use crate::error::{ErrorKind, Result, fail};

impl Engine {
    /// Allocates `len` zeroed bytes of shared memory, registered remote-accessible with location
    /// `"cpu:0"` and published; returns the address. Free with [`free_shared`](Self::free_shared).
    pub fn alloc_shared(&self, len: u64) -> Result<u64> {
        let shared = self.inner.registry.shared();
        let addr = shared.alloc(len)?;
        let registered = self
            .inner
            .registry
            .register(addr, len, "cpu:0", true)
            .and_then(|_| self.inner.rdma_register(&[(addr, len)], true));
        if let Err(e) = registered {
            let _ = self.inner.registry.unregister(addr);
            let _ = shared.free(addr);
            return Err(e);
        }
        shared.open(addr);
        self.inner.publish_logged();
        Ok(addr)
    }

    /// Unregisters (every registration of) the shared buffer at `addr` and releases it: when this
    /// returns no peer byte lands in it any more, and the memory is unmapped. `InvalidArgument`
    /// for an address that is not a live shared buffer of this engine (double free included).
    pub fn free_shared(&self, addr: u64) -> Result<()> {
        let shared = self.inner.registry.shared();
        if !shared.contains(addr) {
            return fail(
                ErrorKind::InvalidArgument,
                format!("{addr:#x} is not a shared buffer of this engine"),
            );
        }
        // Already unregistered by the caller is fine: the buffer is released all the same.
        if self.inner.registry.unregister_all(addr).is_ok() {
            self.inner.rdma_unregister(addr);
        }
        shared.free(addr)?;
        self.inner.publish_logged();
        Ok(())
    }
}
