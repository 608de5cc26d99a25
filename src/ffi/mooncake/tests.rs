//! Unit tests: the code mapping, NULL handling and the transport-installation model.

use super::*;
use std::ffi::CStr;

#[test]
fn every_kind_maps_into_both_domains() {
    let status_codes = [1, 2, 3, 4, 7, 8, 102, 103, 200, 202];
    let errno_codes = [-1, -2, -3, -4, -7, -102, -103, -200, -202, -303];
    for k in ErrorKind::ALL {
        let (s, e) = codes(k);
        assert!(status_codes.contains(&s), "{k:?} → status {s}");
        assert!(errno_codes.contains(&e), "{k:?} → errno {e}");
    }
}

#[test]
fn mooncake_specific_codes() {
    assert_eq!(codes(ErrorKind::InvalidArgument), (1, -1));
    assert_eq!(codes(ErrorKind::NullArgument), (1, -1));
    assert_eq!(codes(ErrorKind::TooManyRequests), (2, -2));
    assert_eq!(codes(ErrorKind::AddressNotRegistered), (3, -3));
    assert_eq!(codes(ErrorKind::Busy), (4, -4));
    assert_eq!(codes(ErrorKind::AddressOverlapped), (7, -7));
    // A freed or forged batch id is an invalid argument in the Status domain.
    assert_eq!(codes(ErrorKind::InvalidId).0, 1);
    // Unknown target_id: kInvalidArgument for submits, ERR_METADATA for genNotifyInEngine.
    assert_eq!(codes(ErrorKind::UnknownSegment), (1, -200));
    assert_eq!(codes(ErrorKind::Unsupported).0, 8);
    assert_eq!(codes(ErrorKind::Socket), (102, -102));
    assert_eq!(codes(ErrorKind::Metadata), (200, -200));
}

#[test]
fn domain_helpers_keep_their_sign() {
    for k in ErrorKind::ALL {
        let e = Error::new(k, "x");
        assert!(fail_status("t", &e) > 0);
        assert!(fail_errno("t", &e) < 0);
    }
    assert_eq!(status_of("t", Ok(())), 0);
    assert_eq!(errno_of("t", Ok(())), 0);
}

#[test]
fn null_arguments_are_errors_not_crashes() {
    let null = std::ptr::null_mut();
    assert!(
        createTransferEngine(std::ptr::null(), c"127.0.0.1".as_ptr(), c"".as_ptr(), 0, 1).is_null()
    );
    assert!(
        createTransferEngine(
            c"P2PHANDSHAKE".as_ptr(),
            std::ptr::null(),
            c"".as_ptr(),
            0,
            1
        )
        .is_null()
    );
    assert_eq!(openSegment(null, c"x".as_ptr()), -1);
    assert_eq!(allocateBatchID(null, 1), INVALID_BATCH);
    assert_eq!(submitTransfer(null, 1, std::ptr::null_mut(), 0), 1);
    assert_eq!(freeBatchID(null, 1), 1);
    assert_eq!(registerLocalMemory(null, null, 1, c"*".as_ptr(), 1), -1);
    assert_eq!(discoverTopology(null), -1);
    assert_eq!(freeNotifsMsgBuf(std::ptr::null_mut(), 3), 0);
    let mut n = 7;
    assert!(getNotifsFromEngine(null, &mut n).is_null());
    assert_eq!(n, 0);
    destroyTransferEngine(null);
}

#[test]
fn unsupported_metadata_scheme_returns_null() {
    for m in [
        c"redis://127.0.0.1:6379",
        c"https://127.0.0.1:1/metadata",
        c"consul://127.0.0.1:1",
    ] {
        let e = createTransferEngine(
            m.as_ptr(),
            c"127.0.0.1".as_ptr(),
            c"127.0.0.1".as_ptr(),
            0,
            1,
        );
        assert!(e.is_null(), "{m:?}");
    }
}

#[test]
fn transport_installation_model() {
    let e = createTransferEngine(
        c"P2PHANDSHAKE".as_ptr(),
        c"127.0.0.1".as_ptr(),
        c"127.0.0.1".as_ptr(),
        0,
        0,
    );
    assert!(!e.is_null());
    if !truthy_env("MC_FORCE_TCP") {
        let b = allocateBatchID(e, 1);
        assert_ne!(b, INVALID_BATCH);
        assert_eq!(
            submitTransfer(e, b, std::ptr::null_mut(), 0),
            8,
            "no transport yet"
        );
        assert_eq!(openSegment(e, c"127.0.0.1:1".as_ptr()), -1);
        assert_eq!(freeBatchID(e, b), 0);
    }
    assert!(installTransport(e, c"rdma".as_ptr(), std::ptr::null_mut()).is_null());
    assert!(installTransport(e, c"nvmeof".as_ptr(), std::ptr::null_mut()).is_null());
    let mut bad = [
        c"[1,2".as_ptr().cast_mut().cast::<c_void>(),
        std::ptr::null_mut(),
    ];
    assert!(installTransport(e, c"tcp".as_ptr(), bad.as_mut_ptr()).is_null());
    let mut empty = [
        c"".as_ptr().cast_mut().cast::<c_void>(),
        std::ptr::null_mut(),
    ];
    let t1 = installTransport(e, c"tcp".as_ptr(), empty.as_mut_ptr());
    let t2 = installTransport(e, c"tcp".as_ptr(), std::ptr::null_mut());
    assert!(!t1.is_null());
    assert_eq!(t1, t2, "same transport handle");
    let mut buf = [0 as c_char; 64];
    assert_eq!(getLocalIpAndPort(e, buf.as_mut_ptr(), buf.len()), 0);
    // SAFETY: getLocalIpAndPort NUL-terminates within the buffer.
    let name = unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_str()
        .unwrap()
        .to_string();
    assert!(name.starts_with("127.0.0.1:"), "{name}");
    let own = std::ffi::CString::new(format!("/{name}")).unwrap();
    assert_eq!(
        openSegment(e, own.as_ptr()),
        0,
        "own name is the local segment"
    );
    let mut tiny = [0x55 as c_char; 4];
    assert_eq!(getLocalIpAndPort(e, tiny.as_mut_ptr(), tiny.len()), 0);
    assert_eq!(tiny, [b'1' as c_char, b'2' as c_char, b'7' as c_char, 0]);
    destroyTransferEngine(e);
}
