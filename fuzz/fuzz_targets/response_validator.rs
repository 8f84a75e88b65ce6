//! Bytes → JSON → `reins::parse_response`, and the raw text → `reins::parse_script`: never a panic, and
//! an accepted response holds its invariants. Run with `cargo +nightly fuzz run response_validator`.
#![no_main]

#[path = "../../crates/reins/tests/fuzz_support/mod.rs"]
mod fuzz_support;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    fuzz_support::check_response_bytes(data);
});
