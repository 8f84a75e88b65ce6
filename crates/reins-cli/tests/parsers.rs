//! The fuzz targets' checks of the command's parsers (`tests/fuzz_support`) as property tests on stable.

mod fuzz_support;

use proptest::prelude::*;

/// Text that reaches every branch: blanks, slashes, escapes, words and spaces.
fn chat_text() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            Just("/".to_owned()),
            Just("//".to_owned()),
            Just(" ".to_owned()),
            Just("\n".to_owned()),
            Just("\t".to_owned()),
            "[a-z]{1,6}",
            "\\PC{1,4}",
        ],
        0..8,
    )
    .prop_map(|parts| parts.concat())
}

/// NUL-separated flag and variable values, often well formed.
fn otel_fields() -> impl Strategy<Value = String> {
    let url = prop_oneof![
        Just(String::new()),
        Just("http://127.0.0.1:4318".to_owned()),
        Just("https://c:4317/".to_owned()),
        Just("http://t:9/custom/path".to_owned()),
        Just("c:4318".to_owned()),
        Just("http://".to_owned()),
        "\\PC{0,12}",
    ];
    let protocol = prop_oneof![
        Just(String::new()),
        Just("grpc".to_owned()),
        Just("http/protobuf".to_owned()),
        Just("http/json".to_owned()),
        "\\PC{0,6}"
    ];
    let switch =
        prop_oneof![Just(String::new()), Just("true".to_owned()), Just("none".to_owned()), Just("otlp".to_owned())];
    (url.clone(), url.clone(), url, protocol.clone(), protocol, switch.clone(), switch)
        .prop_map(|(f, e, t, p, tp, d, x)| [f, e, t, p, tp, d, x].join("\0"))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn chat_lines_keep_their_promise(text in chat_text(), bytes in proptest::collection::vec(any::<u8>(), 0..64),
                                     any_text in "\\PC{0,40}", slash in any::<bool>()) {
        prop_assert_eq!(fuzz_support::check_chat_line(text.as_bytes()), Ok(()));
        prop_assert_eq!(fuzz_support::check_chat_line(&bytes), Ok(()));
        let any_text = if slash { format!("/{any_text}") } else { any_text };
        prop_assert_eq!(fuzz_support::check_chat_line(any_text.as_bytes()), Ok(()));
    }

    #[test]
    fn history_files_keep_their_promise(entries in proptest::collection::vec("\\PC{0,12}|[\"\\\\\\n]{1,4}", 0..6),
                                        noise in proptest::collection::vec(any::<u8>(), 0..200), cut in any::<bool>()) {
        let mut bytes = vec![u8::from(cut)];
        for e in &entries {
            bytes.extend_from_slice(reins_cli::history_lines::encode(e).as_bytes());
            bytes.push(b'\n');
        }
        bytes.extend_from_slice(&noise);
        prop_assert_eq!(fuzz_support::check_history(&bytes), Ok(()));
        prop_assert_eq!(fuzz_support::check_history(&noise), Ok(()));
    }

    #[test]
    fn otel_settings_keep_their_promise(fields in otel_fields(), bytes in proptest::collection::vec(any::<u8>(), 0..64),
                                        flag in ".{0,40}", endpoint in ".{0,40}", protocol in ".{0,16}") {
        prop_assert_eq!(fuzz_support::check_otel_env(fields.as_bytes()), Ok(()));
        prop_assert_eq!(fuzz_support::check_otel_env(&bytes), Ok(()));
        // Any text as the flag, the generic endpoint and protocol (a variable never holds a NUL).
        let any = [flag, endpoint, String::new(), protocol].map(|f| f.replace('\0', "")).join("\0");
        prop_assert_eq!(fuzz_support::check_otel_env(any.as_bytes()), Ok(()));
    }
}

/// The checks can fail: inputs a wrong parser would get past them are caught by hand-written cases.
#[test]
fn well_formed_settings_export_and_bad_ones_name_their_variable() {
    let resolve = |flag: Option<&str>, pairs: &[(&str, &str)]| {
        reins_cli::otel_env::resolve(flag, |n| pairs.iter().find(|(k, _)| *k == n).map(|(_, v)| (*v).to_owned()))
    };
    let t = resolve(None, &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")]).unwrap().unwrap();
    assert_eq!(t.endpoint, "http://c:4318/v1/traces");
    assert!(
        resolve(None, &[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "ftp://x")]).unwrap_err().contains("TRACES_ENDPOINT")
    );
    assert_eq!(fuzz_support::check_otel_env(b"\0http://c:4318\0\0grpc"), Ok(()));
    assert_eq!(fuzz_support::check_chat_line(b" //x"), Ok(()));
    assert_eq!(fuzz_support::check_history(b"\x01\"cut\"\n\"a\"\n"), Ok(()));
}
