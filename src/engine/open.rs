//! Opening, closing and refreshing remote segments, and what is known about each.

use super::segments::{LOCAL_SEGMENT, Segment, SegmentId};
use super::{Engine, Inner};
use crate::error::{Error, ErrorKind, Result, fail};
use crate::log::Level;
use crate::metadata::SegmentDesc;
use crate::sync::{LockClean, Recover, RwLockClean};
use crate::transport::Transport;
use std::sync::Arc;

impl Engine {
    /// This engine's descriptor as peers see it.
    pub fn local_descriptor(&self) -> SegmentDesc {
        self.inner.local_desc()
    }

    /// Opens (or finds in the cache) the segment `name` and returns its id. The engine's own name
    /// is segment 0. Leading `/` are ignored, as in Mooncake.
    pub fn open_segment(&self, name: &str) -> Result<SegmentId> {
        let name = name.trim_start_matches('/');
        if name.is_empty() {
            return fail(ErrorKind::InvalidArgument, "empty segment name");
        }
        if name == self.inner.name {
            return Ok(LOCAL_SEGMENT);
        }
        let _serial = self.inner.open_lock.lock_clean();
        if let Some(id) = self.inner.segments.read_clean().id_of(name) {
            return self.revalidate(id, name);
        }
        let seg = self.inner.fetch_segment(name)?;
        Ok(self.inner.segments.write_clean().insert(seg))
    }

    /// A cached segment whose descriptor the metadata watch saw change is read again; one whose
    /// descriptor is gone is an error; when the store cannot be reached the cached one is kept.
    fn revalidate(&self, id: SegmentId, name: &str) -> Result<SegmentId> {
        let Some(store) = &self.inner.store else {
            return Ok(id);
        };
        let key = self.inner.keys.ram(name);
        if !store.is_stale(&key) {
            return Ok(id);
        }
        match store.get(&key) {
            Ok(Some(_)) => self.refresh_segment(id).map(|_| id),
            Ok(None) => fail(
                ErrorKind::UnknownSegment,
                format!("segment {name:?} is no longer on the metadata server"),
            ),
            Err(e) => {
                tw_log!(
                    Level::Warn,
                    "segment {name}: keeping the cached descriptor: {e}"
                );
                Ok(id)
            }
        }
    }

    /// Forgets a segment id. Transfers already submitted to it finish normally. Backends then
    /// release what no open segment uses any more (TCP peers that had no work within the
    /// transfer deadline are stopped, their threads and connections released).
    pub fn close_segment(&self, id: SegmentId) -> Result<()> {
        if id == LOCAL_SEGMENT {
            return Ok(());
        }
        let removed = self.inner.segments.write_clean().remove(id);
        if removed {
            self.inner.segment_closed();
            Ok(())
        } else {
            fail(
                ErrorKind::UnknownSegment,
                format!("segment {id} is not open"),
            )
        }
    }

    /// Re-fetches a segment's descriptor (after the peer registered more memory).
    pub fn refresh_segment(&self, id: SegmentId) -> Result<()> {
        if id == LOCAL_SEGMENT {
            return Ok(());
        }
        let seg = self.inner.segment(id)?;
        let fresh = self.inner.fetch_segment(&seg.name)?;
        let state = fresh.state.into_inner().recover();
        *seg.state.write_clean() = state;
        Ok(())
    }

    /// Refreshes every open segment; returns the first error after trying them all.
    pub fn refresh_all_segments(&self) -> Result<()> {
        let all = self.inner.segments.read_clean().all();
        let mut first = None;
        for (id, _) in all {
            if let Err(e) = self.refresh_segment(id) {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// The cached descriptor of an open segment (0 = this engine).
    pub fn segment_descriptor(&self, id: SegmentId) -> Result<SegmentDesc> {
        if id == LOCAL_SEGMENT {
            return Ok(self.inner.local_desc());
        }
        Ok((*self.inner.segment(id)?.desc()).clone())
    }

    /// How bytes reach segment `id` now: `"local"`, `"in-process"`, `"same-host"`, `"tcp"` or
    /// `"unsupported"`.
    pub fn segment_path(&self, id: SegmentId) -> Result<&'static str> {
        if id == LOCAL_SEGMENT {
            return Ok("local");
        }
        Ok(match self.inner.segment(id)?.route() {
            Some(route) => route.path_name(),
            None => "unsupported",
        })
    }
}

impl Inner {
    /// The open segment `id`.
    pub(super) fn segment(&self, id: SegmentId) -> Result<Arc<Segment>> {
        self.segments.read_clean().get(id).ok_or_else(|| {
            Error::new(
                ErrorKind::UnknownSegment,
                format!("segment {id} is not open"),
            )
        })
    }
}
