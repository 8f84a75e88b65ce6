//! Bytes → a schema (first line) and tool-call arguments (the rest) → the specialised argument validator and
//! the jsonschema path: the same verdict wherever the schema is in the specialised subset. Run with
//! `cargo +nightly fuzz run arguments_validator`.
#![no_main]

#[path = "../../crates/reins/tests/fuzz_support/mod.rs"]
mod fuzz_support;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    fuzz_support::check_arguments_validator_bytes(data);
});
