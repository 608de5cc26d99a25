//! `Exist` with its keys borrowed, not copied: the same bytes on the wire as
//! [`Request::Exist`](super::Request::Exist), encoded from the caller's key slices and decoded
//! into slices of the received body. Existence queries are the serving stacks' most frequent
//! call (one per prefix lookup, 128-1,024 keys each), and the two copies of every key (a
//! `String` on each side) were a quarter of a 1,024-key call's time on the master.

use serde::ser::{SerializeStructVariant, Serializer};
use serde::{Deserialize, Serialize};

/// `Request::Exist`'s variant index, the varint that opens its body (checked against the enum
/// by the tests: the order of `Request`'s variants is the protocol).
pub(super) const EXIST_TAG: u32 = 9;

/// Encodes `Request::Exist { keys }` from borrowed keys.
pub fn encode_exist(keys: &[&str]) -> Vec<u8> {
    super::encode(&ExistOut { keys })
}

/// Decodes a body that is an `Exist`, borrowing its keys from `body`; `None` when the body is
/// another request (or too short to say), so the caller decodes it as a [`super::Request`].
/// The keys are not checked against the bounds: [`super::check_keys`] does that, as
/// [`super::Request::validate`] does for the owned form.
pub fn decode_exist(body: &[u8]) -> Option<Result<Vec<&str>, String>> {
    let (tag, rest) = postcard::take_from_bytes::<u32>(body).ok()?;
    if tag != EXIST_TAG {
        return None;
    }
    Some(match postcard::take_from_bytes::<ExistIn<'_>>(rest) {
        Ok((m, [])) => Ok(m.keys),
        Ok((_, extra)) => Err(format!(
            "malformed message: {} bytes after its end",
            extra.len()
        )),
        Err(e) => Err(format!("malformed message: {e}")),
    })
}

/// The encoder's view: the variant of `Request` it stands for, then its one field.
struct ExistOut<'a> {
    keys: &'a [&'a str],
}

impl Serialize for ExistOut<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut v = s.serialize_struct_variant("Request", EXIST_TAG, "Exist", 1)?;
        v.serialize_field("keys", self.keys)?;
        v.end()
    }
}

/// The decoder's view of the fields after the variant index.
#[derive(Deserialize)]
struct ExistIn<'a> {
    #[serde(borrow)]
    keys: Vec<&'a str>,
}

#[cfg(test)]
mod tests {
    use super::super::{Request, decode, encode};
    use super::*;

    #[test]
    fn borrowed_exist_is_the_owned_one_on_the_wire() {
        let keys = ["a", "", "k\0with nul", "ключ", &"x".repeat(300)];
        let owned = Request::Exist {
            keys: keys.iter().map(|k| k.to_string()).collect(),
        };
        let body = encode_exist(&keys);
        assert_eq!(body, encode(&owned), "same bytes as Request::Exist");
        assert_eq!(decode::<Request>(&body), Ok(owned));
        assert_eq!(decode_exist(&body), Some(Ok(keys.to_vec())));
        let none: [&str; 0] = [];
        assert_eq!(decode_exist(&encode_exist(&none)), Some(Ok(vec![])));
    }

    #[test]
    fn other_requests_and_bad_bodies() {
        assert_eq!(decode_exist(&encode(&Request::Ping { client_id: 7 })), None);
        let remove = Request::Remove {
            keys: vec!["a".into()],
            force: false,
        };
        assert_eq!(decode_exist(&encode(&remove)), None);
        assert_eq!(decode_exist(&[]), None, "too short to say");
        let mut body = encode_exist(&["abc"]);
        body.push(0);
        assert!(
            decode_exist(&body).is_some_and(|r| r.is_err()),
            "trailing byte"
        );
        let body = encode_exist(&["abc"]);
        assert!(decode_exist(&body[..body.len() - 1]).is_some_and(|r| r.is_err()));
        // A key that is not UTF-8.
        let mut body = encode_exist(&["abc"]);
        let last = body.len() - 1;
        body[last] = 0xff;
        assert!(decode_exist(&body).is_some_and(|r| r.is_err()));
    }
}
