//! Bytes → the content of a recorded session's last log row in a real store → `Store::load` and
//! everything rebuilt from it: read, or refused with an error naming the session or the store; never a
//! panic. Run with `cargo +nightly fuzz run session_log`.
#![no_main]

use std::sync::OnceLock;

#[path = "../../crates/reins-store/tests/fuzz_support/mod.rs"]
mod fuzz_support;

static FIXTURE: OnceLock<fuzz_support::Fixture> = OnceLock::new();

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let f = FIXTURE.get_or_init(|| {
        fuzz_support::Fixture::new(std::env::temp_dir().join(format!("reins-fuzz-session-log-{}", std::process::id())))
    });
    if let Err(e) = fuzz_support::check_log_row(f, data) {
        panic!("{e}");
    }
});
