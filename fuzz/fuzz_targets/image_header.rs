//! Bytes → the image sniffer and header parser (`reins::image::dimensions`, `reins::Image::from_bytes`):
//! never a panic; an accepted image has dimensions, a SHA-256, token costs, and reads back from its JSON.
//! Run with `cargo +nightly fuzz run image_header`.
#![no_main]

#[path = "../../crates/reins/tests/media_support/mod.rs"]
mod media_support;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    media_support::check_image_bytes(data);
});
