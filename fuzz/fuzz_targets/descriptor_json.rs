//! Fuzz target: `tidewire::fuzzing::descriptor_json` (see `src/fuzzing.rs`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    tidewire::fuzzing::descriptor_json(data);
});
