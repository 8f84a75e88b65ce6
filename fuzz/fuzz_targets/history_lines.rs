//! Bytes → the lines of `reins chat`'s history file (`reins_cli::history_lines::parse`, whole or cut): every entry not
//! blank and reading back alone from its own line; never a panic. The same check runs on stable as property tests in
//! `crates/reins-cli/tests/parsers.rs`. Run with `cargo +nightly fuzz run history_lines`.
#![no_main]

#[path = "../../crates/reins-cli/tests/fuzz_support/mod.rs"]
mod fuzz_support;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(e) = fuzz_support::check_history(data) {
        panic!("{e}");
    }
});
