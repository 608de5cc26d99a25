//! Fuzz target: `tidewire::fuzzing::http_response` (see `src/fuzzing.rs`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    tidewire::fuzzing::http_response(data);
});
