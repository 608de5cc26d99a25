//! A version's replicas: the usual single replica inline in the record (no allocation), more
//! in one boxed slice.

use super::super::segments::Replica;

/// One or more replicas (never none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Replicas {
    One(Replica),
    Many(Box<[Replica]>),
}

impl Replicas {
    /// `None` when `v` is empty.
    pub(super) fn from_vec(mut v: Vec<Replica>) -> Option<Replicas> {
        match v.len() {
            0 => None,
            1 => Some(Replicas::One(v[0])),
            _ => {
                v.shrink_to_fit();
                Some(Replicas::Many(v.into_boxed_slice()))
            }
        }
    }

    pub(super) fn as_slice(&self) -> &[Replica] {
        match self {
            Replicas::One(r) => std::slice::from_ref(r),
            Replicas::Many(v) => v,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.as_slice().len()
    }

    /// The replicas `keep` accepts; `None` when none is left.
    pub(super) fn kept(&self, mut keep: impl FnMut(&Replica) -> bool) -> Option<Replicas> {
        match self {
            Replicas::One(r) => keep(r).then_some(Replicas::One(*r)),
            Replicas::Many(v) => {
                Replicas::from_vec(v.iter().copied().filter(|r| keep(r)).collect())
            }
        }
    }
}
