//! Bytes → a request target and the entries of a session → `reins-view`'s view, page and request parsers:
//! never a panic, the page's data block always escaped for HTML and parsing back. Run with
//! `cargo +nightly fuzz run session_view`.
#![no_main]

#[path = "../../crates/reins-view/tests/fuzz_support/mod.rs"]
mod fuzz_support;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(e) = fuzz_support::check(data) {
        panic!("{e}");
    }
});
