//! Fuzz target: `tidewire::fuzzing::handshake_frame` (see `src/fuzzing.rs`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    tidewire::fuzzing::handshake_frame(data);
});
