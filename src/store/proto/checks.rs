//! The bounds every message is checked against before the master acts on it (see
//! [`Request::validate`](super::Request::validate)).

use super::{KeyVersion, MAX_BATCH, MAX_KEY_LEN, MAX_NAME_LEN};

/// One key: 1 to [`MAX_KEY_LEN`] bytes.
pub(super) fn check_key(k: &str) -> Result<(), String> {
    if k.is_empty() {
        return Err("empty key".into());
    }
    if k.len() > MAX_KEY_LEN {
        return Err(format!("key of {} bytes exceeds {MAX_KEY_LEN}", k.len()));
    }
    Ok(())
}

/// A batch: at most [`MAX_BATCH`] items.
pub(super) fn check_batch(n: usize) -> Result<(), String> {
    if n > MAX_BATCH {
        return Err(format!("batch of {n} keys exceeds {MAX_BATCH}"));
    }
    Ok(())
}

/// A segment name or endpoint: 1 to [`MAX_NAME_LEN`] bytes.
pub(super) fn check_name(n: &str) -> Result<(), String> {
    if n.is_empty() || n.len() > MAX_NAME_LEN {
        return Err(format!(
            "segment name of {} bytes is out of 1..={MAX_NAME_LEN}",
            n.len()
        ));
    }
    Ok(())
}

/// A batch of (key, version) items.
pub(super) fn check_versions(items: &[KeyVersion]) -> Result<(), String> {
    check_batch(items.len())?;
    items.iter().try_for_each(|i| check_key(&i.key))
}

/// Checks a batch of keys against the bounds (what [`Request::validate`] checks of a request's
/// keys): the count and each key's length.
pub fn check_keys<K: AsRef<str>>(keys: &[K]) -> Result<(), String> {
    check_batch(keys.len())?;
    keys.iter().try_for_each(|k| check_key(k.as_ref()))
}

/// A segment name a caller gave (it may be empty or name nothing mounted: the master answers
/// that in its own terms): at most [`MAX_NAME_LEN`] bytes.
pub(super) fn check_segment_name(n: &str) -> Result<(), String> {
    if n.len() > MAX_NAME_LEN {
        return Err(format!(
            "segment name of {} bytes exceeds {MAX_NAME_LEN}",
            n.len()
        ));
    }
    Ok(())
}
