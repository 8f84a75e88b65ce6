//! Behaviour pinned byte for byte: the JSON events, the outcome file and the recorded session log of the real `reins`
//! binary on (1) `reins demo` (its readable output and its recorded session), (2) the demo's script run through
//! `reins run --json --output` and (3) a 1,000-step scripted run, compared with the golden files under
//! `tests/golden/`. Only what legitimately varies between runs is normalised (see [`normalise`]).
//!
//! A refactor of the engine must leave these files unchanged. Where a change of behaviour is meant, regenerate them
//! with `REINS_UPDATE_GOLDEN=1 cargo test -p reins-cli --test golden_events` and review the diff like code.

mod common;

use std::path::Path;

use common::{Dir, reins};
use serde_json::{Value, json};

/// Replaces, in `text`, what varies from run to run and host to host, and nothing else:
/// - each literal in `paths` (temporary directories) by its placeholder;
/// - every UUID (run, session and call ids made by Reins) by `<ID-n>`, numbered in order of first appearance, so
///   that which lines share an id stays pinned;
/// - every RFC 3339 UTC timestamp (`2026-12-01T23:02:23.595Z`) by `<TS>`;
/// - the number after `"duration_ms":` (JSON, with or without a space) and before ` ms` (readable output) by `<MS>`;
/// - the text of `[sandbox: …]` (what isolation this host's kernel offers) by `<SANDBOX>`;
/// - the Reins version after `"reins_version":` by `<VERSION>`.
fn normalise(text: &str, paths: &[(&str, &str)]) -> String {
    let mut text = text.to_owned();
    // Longest first, so that a path inside another is not replaced half.
    let mut paths = paths.to_vec();
    paths.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
    for (path, placeholder) in paths {
        text = text.replace(path, placeholder);
    }
    let text = replace_uuids(&text);
    let text = replace_timestamps(&text);
    let text = replace_after(&text, "\"duration_ms\":", "<MS>", |c| c == ' ', is_number_char);
    let text = replace_ms_suffix(&text);
    let text = replace_after(&text, "[sandbox: ", "<SANDBOX>", |_| false, |c| c != ']');
    replace_after(&text, "\"reins_version\":", "\"<VERSION>\"", |c| c == ' ', |c| c != ',' && c != '}')
}

fn is_number_char(c: char) -> bool {
    c.is_ascii_digit() || matches!(c, '.' | '-' | 'e' | 'E' | '+')
}

/// After each `marker`, skips characters for which `skip` holds, then replaces the longest run for which `take`
/// holds (if not empty) by `placeholder`.
fn replace_after(
    text: &str,
    marker: &str,
    placeholder: &str,
    skip: fn(char) -> bool,
    take: fn(char) -> bool,
) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(marker) {
        let (head, tail) = rest.split_at(at + marker.len());
        out.push_str(head);
        let skipped = tail.len() - tail.trim_start_matches(skip).len();
        out.push_str(&tail[..skipped]);
        let tail = &tail[skipped..];
        let taken = tail.len() - tail.trim_start_matches(take).len();
        if taken > 0 {
            out.push_str(placeholder);
        }
        rest = &tail[taken..];
    }
    out.push_str(rest);
    out
}

/// `12.5 ms` / `0.1 ms` / `16 ms` in readable output → `<MS> ms`.
fn replace_ms_suffix(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(" ms") {
        let head = &rest[..at];
        let digits = head.len() - head.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.').len();
        let before = head[..head.len() - digits].chars().next_back();
        if digits > 0 && matches!(before, None | Some(' ' | '(' | '·')) {
            out.push_str(&head[..head.len() - digits]);
            out.push_str("<MS>");
        } else {
            out.push_str(head);
        }
        out.push_str(" ms");
        rest = &rest[at + 3..];
    }
    out.push_str(rest);
    out
}

fn replace_uuids(text: &str) -> String {
    fn is_uuid(b: &[u8]) -> bool {
        b.len() == 36
            && b.iter().enumerate().all(|(i, c)| match i {
                8 | 13 | 18 | 23 => *c == b'-',
                _ => c.is_ascii_digit() || (b'a'..=b'f').contains(c),
            })
    }
    let mut seen: Vec<String> = Vec::new();
    let mut out = String::with_capacity(text.len());
    let bytes = text.as_bytes();
    let mut i = 0;
    let mut copied = 0;
    while i + 36 <= bytes.len() {
        let boundary = i == 0 || !bytes[i - 1].is_ascii_alphanumeric();
        if boundary && is_uuid(&bytes[i..i + 36]) && bytes.get(i + 36).is_none_or(|c| !c.is_ascii_alphanumeric()) {
            let id = &text[i..i + 36];
            let n = match seen.iter().position(|s| s == id) {
                Some(n) => n,
                None => {
                    seen.push(id.to_owned());
                    seen.len() - 1
                }
            };
            out.push_str(&text[copied..i]);
            out.push_str(&format!("<ID-{}>", n + 1));
            i += 36;
            copied = i;
        } else {
            i += 1;
        }
    }
    out.push_str(&text[copied..]);
    out
}

fn replace_timestamps(text: &str) -> String {
    // YYYY-MM-DDTHH:MM:SS, an optional fraction, then Z or +00:00.
    fn len_at(b: &[u8]) -> Option<usize> {
        let shape = b"dddd-dd-ddTdd:dd:dd";
        if b.len() < shape.len() {
            return None;
        }
        for (c, s) in b.iter().zip(shape) {
            let ok = if *s == b'd' { c.is_ascii_digit() } else { c == s };
            if !ok {
                return None;
            }
        }
        let mut n = shape.len();
        if b.get(n) == Some(&b'.') {
            n += 1;
            while b.get(n).is_some_and(u8::is_ascii_digit) {
                n += 1;
            }
        }
        if b.get(n) == Some(&b'Z') {
            Some(n + 1)
        } else if b[n..].starts_with(b"+00:00") {
            Some(n + 6)
        } else {
            None
        }
    }
    let mut out = String::with_capacity(text.len());
    let bytes = text.as_bytes();
    let (mut i, mut copied) = (0, 0);
    while i < bytes.len() {
        match len_at(&bytes[i..]) {
            Some(n) => {
                out.push_str(&text[copied..i]);
                out.push_str("<TS>");
                i += n;
                copied = i;
            }
            None => i += 1,
        }
    }
    out.push_str(&text[copied..]);
    out
}

/// Compares `actual` with the golden file `name`, or writes it there under `REINS_UPDATE_GOLDEN=1`.
fn check(name: &str, actual: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(name);
    if std::env::var_os("REINS_UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (REINS_UPDATE_GOLDEN=1 writes it)", path.display()));
    if expected != actual {
        let mismatch = expected.lines().zip(actual.lines()).position(|(e, a)| e != a);
        let line = mismatch.unwrap_or_else(|| expected.lines().count().min(actual.lines().count()));
        let saved = std::env::temp_dir().join(format!("reins-golden-actual-{name}"));
        let _ = std::fs::write(&saved, actual);
        panic!(
            "{name} differs from its golden file from line {}:\n  golden: {:?}\n  actual: {:?}\n(the whole output is in {})",
            line + 1,
            expected.lines().nth(line),
            actual.lines().nth(line),
            saved.display()
        );
    }
}

fn stdout_of(out: &std::process::Output) -> String {
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// The recorded session `id` of `store`, as `reins sessions export` writes it.
fn export(store: &Path, id: &str) -> String {
    let out = reins().args(["sessions", "export", id, "--store"]).arg(store).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    stdout_of(&out)
}

/// The session id named by the `run_end` event of `events`.
fn session_of(events: &str) -> String {
    let last: Value = serde_json::from_str(events.lines().last().unwrap()).unwrap();
    assert_eq!(last["type"], "run_end", "{events}");
    last["session_id"].as_str().unwrap().to_owned()
}

/// The workspace a session line of an export names.
fn workspace_of(export: &str) -> String {
    let first: Value = serde_json::from_str(export.lines().next().unwrap()).unwrap();
    first["session"]["workspace"].as_str().unwrap().to_owned()
}

/// The demo's scripted turns (crates/reins-cli/src/demo.rs) as a script file.
fn demo_script() -> Value {
    json!([
        {"content": "I'll announce the release, then check the build.",
         "tool_calls": [{"id": "call_1", "name": "echo", "arguments": {"text": "Release 0.1 is out: thanks, team!"}}],
         "usage": {"input_tokens": 120, "output_tokens": 24}},
        {"content": "", "tool_calls": [{"id": "call_2", "name": "echo", "arguments": {"txt": "Build status?"}}],
         "usage": {"input_tokens": 170, "output_tokens": 12}},
        {"content": "My mistake: the property is `text`.",
         "tool_calls": [{"id": "call_3", "name": "echo", "arguments": {"text": "Build status?"}},
                        {"id": "call_4", "name": "fail", "arguments": {"message": "build server unreachable (simulated)"}}],
         "usage": {"input_tokens": 260, "output_tokens": 30}},
        {"content": "I'll record the release notes in the workspace and count their lines.",
         "tool_calls": [{"id": "call_5", "name": "write_file",
                         "arguments": {"path": "RELEASE.md", "content": "# Release 0.1\n\n- the harness core\n- workspace tools\n"}},
                        {"id": "call_6", "name": "run_command", "arguments": {"command": "lines"}}],
         "usage": {"input_tokens": 380, "output_tokens": 40}},
        {"content": "",
         "tool_calls": [{"id": "call_7", "name": "read_file", "arguments": {"path": "../../etc/passwd"}},
                        {"id": "call_8", "name": "read_file", "arguments": {"path": "RELEASE.md", "start_line": 1, "end_line": 1}}],
         "usage": {"input_tokens": 450, "output_tokens": 30}},
        {"content": "Release announced and recorded in RELEASE.md (4 lines). The build server could not be reached, so the build status is unknown; please check it by hand.",
         "usage": {"input_tokens": 520, "output_tokens": 32}}
    ])
}

/// 1,000 steps of tool calls, then an answer. Each step is one of five kinds (by step number modulo 5): a call of
/// `echo` whose text is cut by `--max-tool-result-chars`, a call that fails, a batch of two calls, a call with
/// invalid arguments and a call of an unknown tool. Every turn reports usage.
fn long_script() -> Value {
    let mut turns = Vec::with_capacity(1001);
    for i in 0..1000u32 {
        let id = |k: u32| format!("c{i}_{k}");
        let calls = match i % 5 {
            0 => json!([{"id": id(0), "name": "echo", "arguments": {"text": format!("step {i}: {}", "x".repeat(80))}}]),
            1 => json!([{"id": id(0), "name": "fail", "arguments": {"message": format!("failure {i}")}}]),
            2 => json!([{"id": id(0), "name": "echo", "arguments": {"text": format!("a{i}")}},
                        {"id": id(1), "name": "fail", "arguments": {"message": format!("b{i}")}}]),
            3 => json!([{"id": id(0), "name": "echo", "arguments": {"txt": i}}]),
            _ => json!([{"id": id(0), "name": "no_such_tool", "arguments": {}}]),
        };
        let content = if i % 2 == 0 { format!("Step {i}.") } else { String::new() };
        turns.push(json!({"content": content, "tool_calls": calls,
                          "usage": {"input_tokens": 100 + i, "output_tokens": 10 + i % 7}}));
    }
    turns.push(json!({"content": "All 1,000 steps are done.", "usage": {"input_tokens": 1200, "output_tokens": 8}}));
    Value::Array(turns)
}

/// Runs `reins run` with `args` and returns (stdout: the JSON events, the outcome file, the session export).
fn run_json(dir: &Dir, args: &[&str], expected_code: i32) -> (String, String, String) {
    let outcome = dir.0.join("outcome.json");
    let out = reins()
        .arg("run")
        .args(args)
        .arg("--json")
        .arg("--output")
        .arg(&outcome)
        .arg("--store")
        .arg(dir.store())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(expected_code), "{}", String::from_utf8_lossy(&out.stderr));
    let events = stdout_of(&out);
    let outcome = std::fs::read_to_string(&outcome).unwrap();
    let session = export(&dir.store(), &session_of(&events));
    (events, outcome, session)
}

fn dir_str(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn the_demo_prints_and_records_what_it_did() {
    let dir = Dir::new("golden-demo");
    let tmp = dir.0.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let out = reins().arg("demo").env("REINS_STORE", dir.store()).env("TMPDIR", &tmp).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = stdout_of(&out);
    let id = stdout
        .split("recorded as session ")
        .nth(1)
        .and_then(|rest| rest.split('.').next())
        .unwrap_or_else(|| panic!("no session id in {stdout}"))
        .to_owned();
    let session = export(&dir.store(), &id);
    let workspace = workspace_of(&session);
    let paths = [(workspace.as_str(), "<WORKSPACE>"), (dir_str(&dir.0), "<TMP>")];
    check("demo.stdout", &normalise(&stdout, &paths));
    check("demo.session.jsonl", &normalise(&session, &paths));
}

#[test]
fn the_demo_script_as_json_events_and_outcome() {
    let dir = Dir::new("golden-demo-run");
    let ws = dir.0.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let script = dir.file("demo.json", &demo_script().to_string());
    let args = [
        "--model",
        &format!("script:{}", script.display()),
        "--test-tools",
        "--workspace",
        dir_str(&ws),
        "--preset",
        "lines=wc -l RELEASE.md",
        "--accept-weaker-sandbox",
        "--max-steps",
        "10",
        "--max-tool-calls",
        "10",
        "Announce the release to the team and tell me the build status.",
    ];
    let (events, outcome, session) = run_json(&dir, &args, 0);
    let paths = [(dir_str(&dir.0), "<TMP>")];
    check("demo_run.events.jsonl", &normalise(&events, &paths));
    check("demo_run.outcome.json", &normalise(&outcome, &paths));
    check("demo_run.session.jsonl", &normalise(&session, &paths));
}

#[test]
fn a_thousand_step_scripted_run() {
    let dir = Dir::new("golden-1000");
    let script = dir.file("long.json", &long_script().to_string());
    let args = [
        "--model",
        &format!("script:{}", script.display()),
        "--test-tools",
        "--events-content",
        "--max-steps",
        "1001",
        "--max-tool-result-chars",
        "60",
        "--max-context-chars",
        "6000",
        "--instructions",
        "Work through the steps.",
        "Run the thousand steps.",
    ];
    let (events, outcome, session) = run_json(&dir, &args, 0);
    assert_eq!(events.lines().filter(|l| l.contains(r#""type":"model_start""#)).count(), 1001);
    let paths = [(dir_str(&dir.0), "<TMP>")];
    check("steps1000.events.jsonl", &normalise(&events, &paths));
    check("steps1000.outcome.json", &normalise(&outcome, &paths));
    check("steps1000.session.jsonl", &normalise(&session, &paths));
}

#[test]
fn normalise_replaces_only_what_varies() {
    let line = r#"{"run_id":"58e66159-17b5-45ed-a464-d2782182c5e2","ts":"2026-12-01T23:02:23.595Z","duration_ms":0.0347,"x":"call_1 3 ms","y":"58e66159-17b5-45ed-a464-d2782182c5e2","p":"/tmp/a/b","s":"[sandbox: landlock(abi 7)]"}"#;
    assert_eq!(
        normalise(line, &[("/tmp/a", "<TMP>")]),
        r#"{"run_id":"<ID-1>","ts":"<TS>","duration_ms":<MS>,"x":"call_1 <MS> ms","y":"<ID-1>","p":"<TMP>/b","s":"[sandbox: <SANDBOX>]"}"#
    );
    assert_eq!(normalise("step 1 · model 0.1 ms · 2 tool call(s)", &[]), "step 1 · model <MS> ms · 2 tool call(s)");
    assert_eq!(normalise(r#""duration_ms": 12.5,"#, &[]), r#""duration_ms": <MS>,"#);
}
