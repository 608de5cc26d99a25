//! Fuzz target: `tidewire::fuzzing::auth_frames` (see `src/fuzzing.rs`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    tidewire::fuzzing::auth_frames(data);
});
