//! Golden tests of the journal format: fixed records encode to the bytes checked in here (what
//! the journal has always held, so journals written by older binaries still load), those bytes
//! decode back to the same records, and malformed records are refused, never read as zeros.

use super::*;
use std::sync::Arc;

fn at(segment: &str, offset: u64, len: u64) -> ReplicaAt {
    ReplicaAt {
        segment: Arc::from(segment),
        offset,
        len,
    }
}

fn k(s: &str) -> Cow<'static, str> {
    Cow::Owned(s.to_string())
}

/// Each record with its bytes, exactly as the journal holds them.
fn golden() -> Vec<(Record<'static>, &'static str)> {
    vec![
        (
            Record::Mount {
                client: 7,
                name: k("127.0.0.1:12345"),
                base: 140_000_000_000,
                size: 1 << 30,
            },
            r#"{"base":140000000000,"client":7,"name":"127.0.0.1:12345","op":"mount","size":1073741824}"#,
        ),
        (
            Record::Unmount {
                name: k("127.0.0.1:12345"),
            },
            r#"{"name":"127.0.0.1:12345","op":"unmount"}"#,
        ),
        (
            Record::Put {
                key: k("k\u{0}1 \u{e9}\"\\\n"),
                size: 4096,
                replicas: vec![at("segA", 0, 4096), at("segB", 8192, 4096)],
                hard_pin: true,
                version: None,
            },
            "{\"hard_pin\":true,\"key\":\"k\\u00001 \u{e9}\\\"\\\\\\n\",\"op\":\"put\",\
             \"replicas\":[[\"segA\",0,4096],[\"segB\",8192,4096]],\"size\":4096}",
        ),
        (
            Record::Put {
                key: k("plain"),
                size: 0,
                replicas: vec![],
                hard_pin: false,
                version: Some(7),
            },
            r#"{"hard_pin":false,"key":"plain","op":"put","replicas":[],"size":0,"version":7}"#,
        ),
        (
            Record::Hold {
                key: k("obj/1"),
                version: 42,
                writer: u64::MAX,
                replicas: vec![at("segA", 4096, 100)],
            },
            r#"{"key":"obj/1","op":"hold","replicas":[["segA",4096,100]],"version":42,"writer":18446744073709551615}"#,
        ),
        (
            Record::Unhold {
                key: k("obj/1"),
                version: 42,
            },
            r#"{"key":"obj/1","op":"unhold","version":42}"#,
        ),
        (
            Record::Del { key: k("obj/1") },
            r#"{"key":"obj/1","op":"del"}"#,
        ),
    ]
}

#[test]
fn records_encode_to_the_golden_bytes() {
    for (record, bytes) in golden() {
        assert_eq!(record.encode(), bytes, "{record:?}");
    }
}

#[test]
fn golden_bytes_decode_to_their_records() {
    for (record, bytes) in golden() {
        assert_eq!(Record::decode(bytes).as_ref(), Ok(&record), "{bytes}");
    }
}

#[test]
fn a_snapshot_encodes_to_the_golden_bytes_and_decodes_in_apply_order() {
    let names = [(Arc::<str>::from("segA"), 64u64)];
    let snap = encode_snapshot(
        [Record::Mount {
            client: 1,
            name: k("segA"),
            base: 4096,
            size: 1 << 20,
        }],
        [Record::Put {
            key: k("a"),
            size: 8,
            replicas: placed(names.to_vec(), 8),
            hard_pin: false,
            version: None,
        }],
        [Record::Hold {
            key: k("b"),
            version: 5,
            writer: 2,
            replicas: vec![at("segA", 128, 16)],
        }],
    );
    let golden = concat!(
        r#"{"holds":[{"key":"b","op":"hold","replicas":[["segA",128,16]],"version":5,"writer":2}],"#,
        r#""objects":[{"hard_pin":false,"key":"a","op":"put","replicas":[["segA",64,8]],"size":8}],"#,
        r#""segments":[{"base":4096,"client":1,"name":"segA","op":"mount","size":1048576}]}"#
    );
    assert_eq!(snap, golden);
    let ops: Vec<&str> = decode_snapshot(golden)
        .unwrap()
        .iter()
        .map(|r| match r {
            Ok(Record::Mount { .. }) => "mount",
            Ok(Record::Put { .. }) => "put",
            Ok(Record::Hold { .. }) => "hold",
            _ => "other",
        })
        .collect();
    assert_eq!(ops, ["mount", "put", "hold"]);
    assert_eq!(
        encode_snapshot([], [], []),
        r#"{"holds":[],"objects":[],"segments":[]}"#
    );
}

#[test]
fn malformed_records_are_refused_not_read_as_zeros() {
    for line in [
        "",
        "not json",
        "[1,2]",
        r#"["del","a"]"#,
        r#"{"key":"a"}"#,
        r#"{"op":7,"key":"a"}"#,
        r#"{"op":"rename","key":"a"}"#,
        r#"{"op":"del"}"#,
        r#"{"op":"del","key":5}"#,
        r#"{"op":"unhold","key":"a"}"#,
        r#"{"op":"unhold","key":"a","version":-1}"#,
        r#"{"op":"unhold","key":"a","version":1.5}"#,
        r#"{"op":"unhold","key":"a","version":"1"}"#,
        r#"{"op":"mount","name":"s","base":1,"size":2}"#,
        r#"{"op":"unmount"}"#,
        r#"{"op":"put","key":"a","size":1,"replicas":[["s",0,1]]}"#,
        r#"{"op":"put","key":"a","size":1,"hard_pin":1,"replicas":[]}"#,
        r#"{"op":"put","key":"a","size":1,"hard_pin":false}"#,
        r#"{"op":"put","key":"a","size":1,"hard_pin":false,"replicas":[["s",0]]}"#,
        r#"{"op":"put","key":"a","size":1,"hard_pin":false,"replicas":[["s",0,1,2]]}"#,
        r#"{"op":"put","key":"a","size":1,"hard_pin":false,"replicas":[[1,0,1]]}"#,
        r#"{"op":"hold","key":"a","version":1,"writer":2,"replicas":{"s":0}}"#,
        r#"{"op":"hold","key":"a","version":1,"replicas":[]}"#,
    ] {
        let err = Record::decode(line).expect_err(line);
        assert!(
            err.to_string().starts_with("malformed journal record"),
            "{err}"
        );
    }
    for snap in ["", "[]", r#"{"objects":{}}"#] {
        assert!(decode_snapshot(snap).is_err(), "{snap}");
    }
    let one_bad = decode_snapshot(r#"{"objects":[{"op":"del"},{"op":"del","key":"x"}]}"#);
    let one_bad = one_bad.unwrap();
    assert!(one_bad[0].is_err());
    assert_eq!(one_bad[1], Ok(Record::Del { key: k("x") }));
}

#[test]
fn fields_in_another_order_or_extra_fields_still_decode() {
    let r = Record::decode(r#"{"version":3,"op":"unhold","extra":[1],"key":"z"}"#).unwrap();
    assert_eq!(
        r,
        Record::Unhold {
            key: k("z"),
            version: 3
        }
    );
}
