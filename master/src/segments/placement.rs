//! Placement: choosing the segments a new object's replicas go to, per [`Strategy`].

use super::*;
use tidewire::sync::{LockClean, RwLockClean};

impl Segments {
    fn next_random(&self) -> u64 {
        // xorshift on a shared state: placement only needs to spread, not to be unpredictable.
        let mut x = self.rng.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed) | 1;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    }

    /// Allocates `len` bytes on up to `replica_num` distinct segments (at least one);
    /// `NO_AVAILABLE_HANDLE` when not even one fits.
    pub fn allocate(&self, len: u64, cfg: &WriteConfig, strategy: Strategy) -> Result<Placed, i32> {
        let want = cfg.replica_num.max(1) as usize;
        let preferences = !cfg.preferred_segments.is_empty()
            || (strategy == Strategy::LocalFirst && !cfg.local_segment.is_empty());
        if want == 1 && !preferences {
            if let Some(p) = self.allocate_one(len, strategy) {
                return Ok(p);
            }
        }
        let segs: Vec<Arc<Segment>> = {
            let t = self.table.read_clean();
            if t.by_id.is_empty() {
                return Err(code::NO_AVAILABLE_HANDLE);
            }
            let mut order: Vec<Arc<Segment>> = Vec::with_capacity(t.by_id.len());
            let push = |name: &str, order: &mut Vec<Arc<Segment>>| {
                if let Some(id) = t.by_name.get(name) {
                    let s = &t.by_id[id];
                    if s.disk.is_none() && !order.iter().any(|o| o.id == s.id) {
                        order.push(s.clone());
                    }
                }
            };
            for p in &cfg.preferred_segments {
                push(p, &mut order);
            }
            if strategy == Strategy::LocalFirst && !cfg.local_segment.is_empty() {
                push(&cfg.local_segment, &mut order);
            }
            let mut rest: Vec<Arc<Segment>> = t
                .by_id
                .values()
                .filter(|s| s.placeable() && !order.iter().any(|o| o.id == s.id))
                .cloned()
                .collect();
            rest.sort_by_key(|s| s.id);
            match strategy {
                Strategy::FreeRatioFirst => {
                    let ratio = |s: &Segment| {
                        let a = s.alloc.lock_clean();
                        ((a.size() - a.used()) as f64) / (a.size().max(1) as f64)
                    };
                    let mut keyed: Vec<(f64, Arc<Segment>)> =
                        rest.into_iter().map(|s| (ratio(&s), s)).collect();
                    keyed.sort_by(|a, b| b.0.total_cmp(&a.0));
                    rest = keyed.into_iter().map(|(_, s)| s).collect();
                }
                _ => {
                    // A weighted shuffle (Efraimidis-Spirakis): each segment comes first with a
                    // chance in proportion to its free bytes, so an empty node that just joined
                    // takes its share of new objects, not all of them, and a full one few.
                    let mut keyed: Vec<(f64, Arc<Segment>)> = rest
                        .into_iter()
                        .map(|s| {
                            let free = {
                                let a = s.alloc.lock_clean();
                                (a.size() - a.used()) as f64
                            };
                            let u = ((self.next_random() >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
                            (-u.ln() / free.max(1.0), s)
                        })
                        .collect();
                    keyed.sort_by(|a, b| a.0.total_cmp(&b.0));
                    rest = keyed.into_iter().map(|(_, s)| s).collect();
                }
            }
            order.extend(rest);
            order
        };
        let mut out = Placed {
            replicas: Vec::with_capacity(want),
            descs: Vec::with_capacity(want),
        };
        for s in segs.into_iter().filter(|s| s.placeable()) {
            if out.replicas.len() == want {
                break;
            }
            let off = s.alloc.lock_clean().alloc(len);
            if let Some(offset) = off {
                out.replicas.push(Replica { seg: s.id, offset });
                out.descs.push(ReplicaDesc {
                    endpoint: endpoint_of(&s.name).to_string(),
                    addr: s.base + offset,
                    len,
                });
            }
        }
        if out.replicas.is_empty() {
            Err(code::NO_AVAILABLE_HANDLE)
        } else {
            Ok(out)
        }
    }
}

impl Segments {
    /// The common case (one replica, no preferred segment): the segment the strategy ranks
    /// first, found in one pass under the table's read lock, with no list built. `None` when
    /// it has no room (the caller then tries every segment in order).
    fn allocate_one(&self, len: u64, strategy: Strategy) -> Option<Placed> {
        let t = self.table.read_clean();
        let mut best: Option<(f64, &Arc<Segment>)> = None;
        let mut placeable = t.by_id.values().filter(|s| s.placeable());
        let only = placeable.clone().nth(1).is_none();
        for s in &mut placeable {
            if only {
                best = Some((0.0, s));
                break;
            }
            let (free, size) = {
                let a = s.alloc.lock_clean();
                ((a.size() - a.used()) as f64, a.size().max(1) as f64)
            };
            // Lower ranks first: the largest free fraction, or an exponential draw weighted
            // by free bytes (the first element of the weighted shuffle `allocate` does).
            let rank = match strategy {
                Strategy::FreeRatioFirst => -(free / size),
                _ => {
                    let u = ((self.next_random() >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
                    -u.ln() / free.max(1.0)
                }
            };
            if best.is_none_or(|(r, b)| rank < r || (rank == r && s.id < b.id)) {
                best = Some((rank, s));
            }
        }
        let (_, s) = best?;
        let offset = s.alloc.lock_clean().alloc(len)?;
        Some(Placed {
            replicas: vec![Replica { seg: s.id, offset }],
            descs: vec![ReplicaDesc {
                endpoint: endpoint_of(&s.name).to_string(),
                addr: s.base + offset,
                len,
            }],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replicas_land_on_distinct_segments_best_effort() {
        let s = Segments::default();
        let a = s.mount(1, "a:1", 0x1000, 1 << 20).unwrap();
        let b = s.mount(2, "b:1", 0x9000_0000, 1 << 20).unwrap();
        assert_eq!(
            s.mount(1, "a:1", 0x1000, 1 << 20),
            Ok(a),
            "re-mount is a no-op"
        );
        assert_eq!(s.mount(3, "a:1", 0, 10), Err(code::SEGMENT_ALREADY_EXISTS));
        let cfg = WriteConfig {
            replica_num: 3,
            ..WriteConfig::default()
        };
        let r = s.allocate(1000, &cfg, Strategy::Random).unwrap().replicas;
        assert_eq!(r.len(), 2);
        assert_ne!(r[0].seg, r[1].seg);
        let pref = WriteConfig {
            replica_num: 1,
            preferred_segments: vec!["b:1".into()],
            ..WriteConfig::default()
        };
        assert_eq!(
            s.allocate(10, &pref, Strategy::Random).unwrap().replicas[0].seg,
            b
        );
        assert_eq!(
            s.allocate(2 << 20, &pref, Strategy::Random),
            Err(code::NO_AVAILABLE_HANDLE)
        );
        for x in &r {
            s.free(x, 1000);
        }
        s.unmount(a);
        assert_eq!(s.usage().0, 1);
    }

    #[test]
    fn random_placement_follows_free_space() {
        let s = Segments::default();
        s.mount(1, "full:1", 0x1000, 64 << 20).unwrap();
        s.mount(2, "empty:1", 0x1000_0000, 64 << 20).unwrap();
        let on = |name: &str| WriteConfig {
            preferred_segments: vec![name.into()],
            ..WriteConfig::default()
        };
        // 56 of full's 64 MiB in use.
        for _ in 0..56 {
            s.allocate(1 << 20, &on("full:1"), Strategy::Random)
                .unwrap();
        }
        let mut to_empty = 0;
        for _ in 0..1000 {
            let r = s
                .allocate(1024, &WriteConfig::default(), Strategy::Random)
                .unwrap();
            to_empty += (r.descs[0].endpoint == "empty:1") as u32;
            s.free(&r.replicas[0], 1024);
        }
        // Free bytes 8 : 64, so about 889 of 1000 go to the empty segment; not all of them.
        assert!((820..=950).contains(&to_empty), "{to_empty}");
    }
}
