//! Bytes → an agent file and a user config (`reins-agent`): read, or refused with one line naming a key or a
//! line of the file, never a panic; what is read round-trips through TOML and JSON and resolves over the
//! defaults. Run with `cargo +nightly fuzz run agent_definition`.
#![no_main]

#[path = "../../crates/reins-agent/tests/fuzz_support/mod.rs"]
mod fuzz_support;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(e) = fuzz_support::check_definition_bytes(data) {
        panic!("{e}");
    }
});
