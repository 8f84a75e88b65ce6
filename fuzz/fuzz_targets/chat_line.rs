//! Bytes → a line typed into `reins chat` (`reins_cli::chat_line::parse`): blanks are nothing, a command a word and its
//! trimmed rest, a message the text as typed; never a panic. The same check runs on stable as property tests in
//! `crates/reins-cli/tests/parsers.rs`. Run with `cargo +nightly fuzz run chat_line`.
#![no_main]

#[path = "../../crates/reins-cli/tests/fuzz_support/mod.rs"]
mod fuzz_support;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(e) = fuzz_support::check_chat_line(data) {
        panic!("{e}");
    }
});
