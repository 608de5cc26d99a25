//! Registered memory: registering and unregistering ranges (kept in step with every backend and
//! the published descriptor), shared buffers, and looking up where a range lives.

use super::Engine;
use crate::error::{Error, ErrorKind, Result, fail};

impl Engine {
    /// Registers `[addr, addr+len)`. `location` is kept and published (`"cpu:N"`, `"cuda:N"`,
    /// `"*"`); peers can never touch a region registered with `remote_accessible == false`.
    pub fn register_memory(
        &self,
        addr: u64,
        len: u64,
        location: &str,
        remote_accessible: bool,
    ) -> Result<()> {
        let fresh = self
            .inner
            .registry
            .register(addr, len, location, remote_accessible)?;
        if fresh {
            self.inner
                .register_backends(&[(addr, len)], remote_accessible)?;
        }
        self.inner.publish_logged();
        Ok(())
    }

    /// Registers several ranges, all or none.
    pub fn register_memory_batch(&self, ranges: &[(u64, u64)], location: &str) -> Result<()> {
        self.register_ranges(ranges, location, true)
    }

    /// Registers several ranges local-only (peers can never touch them), all or none, with one
    /// descriptor publish for the lot.
    pub fn register_memory_batch_local(&self, ranges: &[(u64, u64)], location: &str) -> Result<()> {
        self.register_ranges(ranges, location, false)
    }

    /// All or none: ranges registered here are rolled back when a backend registration of the
    /// new ones fails; one descriptor publish for the lot.
    fn register_ranges(
        &self,
        ranges: &[(u64, u64)],
        location: &str,
        remote_accessible: bool,
    ) -> Result<()> {
        let fresh = self
            .inner
            .registry
            .register_all(ranges, location, remote_accessible)?;
        let new: Vec<(u64, u64)> = ranges
            .iter()
            .zip(&fresh)
            .filter(|(_, f)| **f)
            .map(|(r, _)| *r)
            .collect();
        if let Err(e) = self.inner.register_backends(&new, remote_accessible) {
            for &(a, _) in &new {
                let _ = self.inner.registry.unregister(a);
            }
            return Err(e);
        }
        self.inner.publish_logged();
        Ok(())
    }

    /// Drops one registration of the region starting at `addr`.
    pub fn unregister_memory(&self, addr: u64) -> Result<()> {
        if self.inner.registry.unregister(addr)? {
            self.inner.unregister_backends(addr);
        }
        self.inner.publish_logged();
        Ok(())
    }

    /// Location of the registered region containing `addr` (`"cuda:N"`, `"cpu:N"`, or what was
    /// given at registration).
    pub fn memory_location(&self, addr: u64) -> Result<String> {
        self.inner
            .registry
            .region_of(addr)
            .map(|r| r.location)
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::AddressNotRegistered,
                    format!("{addr:#x} is not inside a registered region"),
                )
            })
    }

    /// CUDA device of the registered region containing `addr`; `None` for host memory or an
    /// address outside every region. Never calls the driver (the device was decided at
    /// registration).
    pub fn memory_device(&self, addr: u64) -> Option<u32> {
        self.inner.registry.region_of(addr).and_then(|r| r.device)
    }

    /// Unregisters every address; returns the first error after trying them all.
    pub fn unregister_memory_batch(&self, addrs: &[u64]) -> Result<()> {
        let mut first = None;
        for &a in addrs {
            match self.inner.registry.unregister(a) {
                Ok(true) => self.inner.unregister_backends(a),
                Ok(false) => {}
                Err(e) => {
                    first.get_or_insert(e);
                }
            }
        }
        self.inner.publish_logged();
        first.map_or(Ok(()), Err)
    }

    /// Allocates `len` zeroed bytes of shared memory (`allocate_managed_buffer`: a memfd that
    /// verified same-host peers map and `memcpy` into, see `transport::shared_buffers`),
    /// registered remote-accessible with location `"cpu:0"` and published; returns the address.
    /// Free with [`free_shared`](Self::free_shared).
    pub fn alloc_shared(&self, len: u64) -> Result<u64> {
        let shared = self.inner.registry.shared();
        let addr = shared.alloc(len)?;
        let registered = self
            .inner
            .registry
            .register(addr, len, "cpu:0", true)
            .and_then(|_| self.inner.register_backends(&[(addr, len)], true));
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
            self.inner.unregister_backends(addr);
        }
        shared.free(addr)?;
        self.inner.publish_logged();
        Ok(())
    }
}
