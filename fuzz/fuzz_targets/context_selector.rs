//! Bytes → a budget and a sequence of messages → `Transcript::from_messages` → `select`: the selection
//! starts with the first user message, is a suffix of whole groups, fits the budget and keeps every
//! newest group that fits. Run with `cargo +nightly fuzz run context_selector`.
#![no_main]

#[path = "../../crates/reins/tests/fuzz_support/mod.rs"]
mod fuzz_support;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = fuzz_support::check_selector_bytes(data);
});
