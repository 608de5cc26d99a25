//! Fuzz target: `tidewire::fuzzing::master_reply` (see `src/fuzzing.rs`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    tidewire::fuzzing::master_reply(data);
});
