//! Bytes → the `--otlp` flag and the standard OpenTelemetry variables (`reins_cli::otel_env::resolve`): export off, or
//! to an http(s) URL by a supported protocol, or an error naming the variable; never a panic. The same check runs on
//! stable as property tests in `crates/reins-cli/tests/parsers.rs`. Run with `cargo +nightly fuzz run otel_env`.
#![no_main]

#[path = "../../crates/reins-cli/tests/fuzz_support/mod.rs"]
mod fuzz_support;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(e) = fuzz_support::check_otel_env(data) {
        panic!("{e}");
    }
});
