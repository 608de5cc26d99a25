//! Fuzz target: `tidewire_master::fuzzing::http_request` (see `master/src/fuzzing.rs`): one
//! request on the master's HTTP port (metadata service and admin routes).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    tidewire_master::fuzzing::http_request(data);
});
