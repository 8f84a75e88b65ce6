//! Bytes → `reins::OutputSchema::parse`: never a panic; an accepted schema makes a final-answer tool the
//! registry accepts and reads back from its own JSON. Run with `cargo +nightly fuzz run output_schema`.
#![no_main]

#[path = "../../crates/reins/tests/media_support/mod.rs"]
mod media_support;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    media_support::check_output_schema_bytes(data);
});
