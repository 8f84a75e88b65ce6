//! The checks of the fuzz targets `chat_line`, `history_lines` and `otel_env` (`fuzz/fuzz_targets/`), also run
//! on stable as property tests (`tests/parsers.rs`): any bytes through the command's parsers of what people and
//! the environment give it (`reins_cli`). Never a panic, and what each parser accepts keeps its promise.
#![allow(dead_code)] // each fuzz target uses one check

use reins_cli::chat_line::{self, Said};
use reins_cli::history_lines;
use reins_cli::otel_env::{self, Protocol};

/// The variables [`check_otel_env`] sets, in the order the input's NUL-separated fields give them.
pub const OTEL_VARS: [&str; 6] = [
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_SDK_DISABLED",
    "OTEL_TRACES_EXPORTER",
];

fn ensure(ok: bool, what: impl FnOnce() -> String) -> Result<(), String> {
    if ok { Ok(()) } else { Err(what()) }
}

/// Bytes (as text) typed into `reins chat`: blanks are nothing; a command is `/WORD REST` with a word without
/// blanks or a leading slash and REST trimmed; `//text` is the message `/text`; anything else the message as
/// typed.
pub fn check_chat_line(data: &[u8]) -> Result<(), String> {
    let text = String::from_utf8_lossy(data);
    let said = chat_line::parse(&text);
    let lead = text.trim_start();
    match said {
        Said::Nothing => ensure(text.trim().is_empty(), || format!("{text:?} is not blank")),
        Said::Message(m) if lead.starts_with("//") => {
            ensure(format!("/{m}") == lead, || format!("{text:?}: the escaped message is {m:?}"))
        }
        Said::Message(m) => {
            ensure(m == text && !lead.starts_with('/'), || format!("{text:?} read as the message {m:?}"))
        }
        Said::Command(word, rest) => ensure(
            lead.starts_with('/')
                && !word.starts_with('/')
                && !word.chars().any(char::is_whitespace)
                && rest == rest.trim()
                && lead[1..].starts_with(word),
            || format!("{text:?} read as the command {word:?} {rest:?}"),
        ),
    }
}

/// Bytes as a history file (the first byte says whether they begin inside it): every entry is not blank and
/// reads back alone from its own line.
pub fn check_history(data: &[u8]) -> Result<(), String> {
    let (cut, bytes) = match data.split_first() {
        Some((first, rest)) => (first & 1 == 1, rest),
        None => (false, data),
    };
    for entry in history_lines::parse(bytes, cut) {
        ensure(!entry.trim().is_empty(), || format!("a blank entry {entry:?}"))?;
        let line = history_lines::encode(&entry);
        ensure(!line.contains('\n'), || format!("{entry:?} encodes over lines: {line:?}"))?;
        let back = history_lines::parse(format!("{line}\n").as_bytes(), false);
        ensure(back == [entry.clone()], || format!("{entry:?} reads back as {back:?}"))?;
    }
    Ok(())
}

/// Bytes as NUL-separated fields: the `--otlp` flag (empty: none; checked as the command line checks it), then
/// the values of [`OTEL_VARS`]. Export is off, or goes to an http(s) URL with a host by a supported protocol (an
/// HTTP endpoint from the generic variable or the flag ending in a path), or the error names the variable.
pub fn check_otel_env(data: &[u8]) -> Result<(), String> {
    let text = String::from_utf8_lossy(data);
    let mut fields = text.split('\0');
    let flag = fields.next().filter(|f| !f.is_empty()).and_then(|f| otel_env::parse_url(f).ok());
    let values: Vec<Option<String>> =
        OTEL_VARS.iter().map(|_| fields.next().map(str::trim).filter(|v| !v.is_empty()).map(str::to_owned)).collect();
    let var = |name: &str| OTEL_VARS.iter().position(|v| *v == name).and_then(|i| values[i].clone());
    match otel_env::resolve(flag.as_deref(), var) {
        Ok(None) => ensure(flag.is_none(), || format!("the flag {flag:?} exported nothing")),
        Ok(Some(t)) => {
            ensure(otel_env::parse_url(&t.endpoint).is_ok(), || format!("{:?} is not an http(s) URL", t.endpoint))?;
            let given_as_is = flag.is_none() && values[1].is_some();
            ensure(
                t.protocol == Protocol::Grpc || given_as_is || t.endpoint.contains("/v1/traces") || flag.is_some(),
                || format!("{:?} over HTTP without a traces path", t.endpoint),
            )
        }
        Err(e) => ensure(e.contains("OTEL_EXPORTER_OTLP_"), || format!("the error {e:?} names no variable")),
    }
}
