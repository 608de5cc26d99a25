//! Metadata-only calls: sizes, existence, removal.

use super::keys::key_ok;
use super::proto::{self, Reply, Request, code, key_chunks};
use super::shared::StoreClient;

impl StoreClient {
    /// Sizes (a lease-free peek is not available: this grants a lease like Mooncake's query).
    pub fn sizes(&self, keys: &[&str]) -> Vec<Result<u64, i32>> {
        let mut out: Vec<Result<u64, i32>> = vec![Err(code::INVALID_PARAMS); keys.len()];
        let idx: Vec<usize> = (0..keys.len()).filter(|&i| key_ok(keys[i])).collect();
        for chunk in key_chunks(&idx, |&i| keys[i]) {
            let ks: Vec<&str> = chunk.iter().map(|&i| keys[i]).collect();
            match self.shared.lookup(&ks) {
                Ok((_, results)) => {
                    for (g, &i) in results.iter().zip(chunk) {
                        out[i] = if g.code == code::OK {
                            Ok(g.size)
                        } else {
                            Err(g.code)
                        };
                    }
                    self.shared.read_done(&results, &ks);
                }
                Err(c) => chunk.iter().for_each(|&i| out[i] = Err(c)),
            }
        }
        out
    }

    fn codes(&self, keys: &[&str], encode: impl Fn(&[&str]) -> Vec<u8>) -> Vec<i32> {
        let mut out = vec![code::INVALID_PARAMS; keys.len()];
        let idx: Vec<usize> = (0..keys.len()).filter(|&i| key_ok(keys[i])).collect();
        for chunk in key_chunks(&idx, |&i| keys[i]) {
            let named: Vec<&str> = chunk.iter().map(|&i| keys[i]).collect();
            match self.shared.conn.call_encoded(&encode(&named)) {
                Ok(Reply::Codes { codes }) if codes.len() == chunk.len() => {
                    for (c, &i) in codes.into_iter().zip(chunk) {
                        out[i] = c;
                    }
                }
                Ok(_) => chunk.iter().for_each(|&i| out[i] = code::RPC_FAIL),
                Err(e) => chunk.iter().for_each(|&i| out[i] = e.code),
            }
        }
        out
    }

    /// Per key: 1 present, 0 absent, negative on error. Grants a lease (as Mooncake).
    pub fn exist(&self, keys: &[&str]) -> Vec<i32> {
        self.codes(keys, proto::encode_exist)
    }

    /// Per key: 0, `OBJECT_NOT_FOUND`, `OBJECT_HAS_LEASE` (unless `force`), ...
    pub fn remove(&self, keys: &[&str], force: bool) -> Vec<i32> {
        self.codes(keys, |keys| {
            proto::encode(&Request::Remove {
                keys: keys.iter().map(|k| k.to_string()).collect(),
                force,
            })
        })
    }

    /// A mass removal in stretches: each call removes for at most the master's stretch time
    /// (well inside the reply deadline, however many objects there are) and says where to go
    /// on; the counts add up to what was removed. A master that does it all in one answer
    /// (`Reply::Count`) is taken at its word.
    fn removed(&self, make: impl Fn(Option<u64>) -> Request) -> i64 {
        let mut total = 0i64;
        let mut from = 0u64;
        loop {
            match self.shared.conn.call(&make(Some(from))) {
                Ok(Reply::Removed { count, next }) => {
                    total = total.saturating_add(count);
                    match next {
                        Some(n) => from = n,
                        None => return total,
                    }
                }
                Ok(Reply::Count { count }) => return total.saturating_add(count),
                Ok(_) => return code::RPC_FAIL as i64,
                Err(e) => return e.code as i64,
            }
        }
    }

    /// Removes keys matching `pattern`; the count, or a negative code.
    pub fn remove_by_regex(&self, pattern: &str, force: bool) -> i64 {
        self.removed(|from| Request::RemoveByRegex {
            pattern: pattern.to_string(),
            force,
            from,
        })
    }

    /// Removes every key; the count, or a negative code.
    pub fn remove_all(&self, force: bool) -> i64 {
        self.removed(|from| Request::RemoveAll { force, from })
    }
}
