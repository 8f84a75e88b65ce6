//! `reins chat` through a pseudo-terminal (rexpect: the chat is the session leader of a new pty, so Ctrl-C
//! written to it is a real SIGINT from the terminal), with a scripted model: a conversation with an inline
//! approval, a Ctrl-C that cancels only its turn, `/cost`, `/exit`, `/compact`, and SIGTERM mid-turn; then
//! `reins sessions show` and `--resume` see every turn. (rexpect reads the terminal's bytes one char each:
//! the needles are ASCII.)

use std::path::Path;
use std::process::Command;

use rexpect::process::wait::WaitStatus;
use rexpect::session::PtySession;
use serde_json::{Value, json};

mod common;
use common::{Dir, reins, serve_once};

/// How long one expectation may wait (a loaded machine builds and starts things slowly).
const WAIT_MS: u64 = 60_000;

/// `reins chat` on a new pseudo-terminal, with the script, the workspace and the store of `dir`.
fn chat(dir: &Dir, script: &Value, extra: &[&str]) -> PtySession {
    let script_file = dir.file("script.json", &script.to_string());
    let model = format!("script:{}", script_file.display());
    let mut args = vec!["--model", &model];
    args.extend_from_slice(extra);
    spawn(dir, &args)
}

/// `reins chat ARGS` on a new pseudo-terminal, with the workspace and the store of `dir`.
fn spawn(dir: &Dir, args: &[&str]) -> PtySession {
    let ws = dir.0.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let mut c: Command = reins();
    // The pseudo-terminal is the chat's standard input (`reins()` gives other tests none).
    c.stdin(std::process::Stdio::inherit());
    c.arg("chat")
        .arg("--store")
        .arg(dir.store())
        .arg("--workspace")
        .arg(&ws)
        .args(["--test-tools", "--no-sandbox"])
        .args(args)
        .env("TERM", "xterm")
        .env("XDG_STATE_HOME", dir.0.join("state"))
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY");
    let options = rexpect::reader::Options::new().timeout_ms(Some(WAIT_MS)).strip_ansi_escape_codes(true);
    rexpect::session::spawn_with_options(c, options).unwrap()
}

fn show(dir: &Dir, id: &str) -> Value {
    let out = reins().args(["sessions", "show", id, "--json", "--store"]).arg(dir.store()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The session id the chat names when it ends.
fn session_id(text: &str) -> String {
    let marker = "this chat is session ";
    let at = text.find(marker).unwrap_or_else(|| panic!("no session named in {text:?}"));
    text[at + marker.len()..].chars().take_while(|c| c.is_ascii_hexdigit() || *c == '-').collect()
}

/// Every transcript item of a session, as (role, content).
fn transcript(session: &Value) -> Vec<(String, String)> {
    session["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "message")
        .map(|e| {
            let m = &e["data"];
            (m["role"].as_str().unwrap_or_default().to_owned(), m["content"].as_str().unwrap_or_default().to_owned())
        })
        .collect()
}

fn runs(session: &Value) -> Vec<Value> {
    session["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "run_end")
        .map(|e| e["data"].clone())
        .collect()
}

fn exit_code(p: &PtySession) -> i32 {
    match p.process().wait().unwrap() {
        WaitStatus::Exited(_, code) => code,
        other => panic!("the chat did not exit: {other:?}"),
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

#[test]
fn a_chat_asks_inline_survives_a_cancelled_turn_and_records_every_turn() {
    let dir = Dir::new("chat-turns");
    let script = json!([
        {"content": "Writing it.", "tool_calls": [{"id": "w1", "name": "write_file", "arguments": {"path": "a.txt", "content": "hi"}}],
         "usage": {"input_tokens": 10, "output_tokens": 3}},
        {"content": "Wrote a.txt.", "usage": {"input_tokens": 20, "output_tokens": 4}},
        {"content": "", "tool_calls": [{"id": "e1", "name": "echo", "arguments": {"text": "working"}}]},
        {"delay_ms": 600000, "content": "never shown"},
        {"content": "Third \u{1b}[2Janswer.", "usage": {"input_tokens": 30, "output_tokens": 5}}
    ]);
    let mut p = chat(&dir, &script, &[]);
    p.exp_string("/help").unwrap();
    // Turn 1: a write waits for a decision, asked inline; approved, it runs once.
    p.send_line("please write a.txt").unwrap();
    p.exp_string("Writing it.").unwrap();
    p.exp_string("write_file").unwrap();
    p.exp_string("[e]dit").unwrap();
    p.send_line("y").unwrap();
    p.exp_string(" write_file [ok]").unwrap();
    p.exp_string("Wrote a.txt.").unwrap();
    assert_eq!(read(&dir.0.join("ws/a.txt")), "hi");
    // Turn 2: Ctrl-C while the model is thinking cancels this turn only.
    p.exp_string("> ").unwrap();
    p.send_line("now something slow").unwrap();
    p.exp_string(" echo [ok]").unwrap();
    p.send_control('c').unwrap();
    p.exp_string("cancelling the turn").unwrap();
    p.exp_string("aborted").unwrap();
    p.exp_string("the conversation goes on").unwrap();
    // Turn 3 works; the model's control sequences are shown, not sent.
    p.exp_string("> ").unwrap();
    p.send_line("and again, \\").unwrap();
    p.exp_string(". ").unwrap();
    p.send_line("on two lines").unwrap();
    p.exp_string("Third \\x1b[2Janswer.").unwrap();
    p.send_line("/cost").unwrap();
    p.exp_string("this chat: 3 turn(s)").unwrap();
    p.exp_string("60 in / 12 out tokens").unwrap();
    p.exp_string("3 run(s)").unwrap();
    p.send_line("/exit").unwrap();
    let tail = p.exp_eof().unwrap();
    assert_eq!(exit_code(&p), 0, "{tail}");
    let id = session_id(&tail);

    let session = show(&dir, &id);
    assert_eq!(session["session"]["status"], "completed", "{session}");
    let statuses: Vec<String> = runs(&session).iter().map(|r| r["status"].as_str().unwrap().to_owned()).collect();
    assert_eq!(statuses, ["completed", "aborted", "completed"]);
    let items = transcript(&session);
    let users: Vec<&str> = items.iter().filter(|(r, _)| r == "user").map(|(_, c)| c.as_str()).collect();
    assert_eq!(users, ["please write a.txt", "now something slow", "and again, \non two lines"]);
    assert!(items.iter().any(|(r, c)| r == "assistant" && c == "Wrote a.txt."), "{items:?}");
    assert!(items.iter().any(|(r, c)| r == "assistant" && c == "Third \u{1b}[2Janswer."), "{items:?}");
    // The approval is in the session log.
    let decided = session["entries"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["kind"] == "event" && e["data"]["type"] == "approval_decided" && e["data"]["call_id"] == "w1");
    assert!(decided, "{session}");

    // `reins run --resume` continues the same conversation: the model is sent every turn.
    let next = dir.file("next.json", &json!([{"content": "Fourth."}]).to_string());
    let out_file = dir.0.join("out.json");
    let out = reins()
        .args(["run", "--resume", &id, "--store"])
        .arg(dir.store())
        .arg("--model")
        .arg(format!("script:{}", next.display()))
        .arg("--output")
        .arg(&out_file)
        .arg("and four")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let outcome: Value = serde_json::from_str(&read(&out_file)).unwrap();
    let contents: Vec<&str> =
        outcome["messages"].as_array().unwrap().iter().filter_map(|m| m["content"].as_str()).collect();
    for said in
        ["please write a.txt", "Wrote a.txt.", "now something slow", "and again, \non two lines", "and four", "Fourth."]
    {
        assert!(contents.contains(&said), "{said:?} not in {contents:?}");
    }

    // `reins chat --resume ID` continues it too, and says where it stands.
    let again = json!([{"content": "Fifth."}]);
    let mut p = chat(&dir, &again, &["--resume", &id]);
    p.exp_string(&format!("continuing session {id}")).unwrap();
    p.exp_string("last answer: Fourth.").unwrap();
    p.send_line("five").unwrap();
    p.exp_string("Fifth.").unwrap();
    p.exp_string("> ").unwrap();
    p.send_control('d').unwrap();
    p.exp_eof().unwrap();
    assert_eq!(exit_code(&p), 0);
    assert_eq!(runs(&show(&dir, &id)).len(), 5);
}

#[test]
fn sigterm_mid_turn_ends_the_turn_aborted_and_the_chat() {
    let dir = Dir::new("chat-term");
    let script = json!([
        {"content": "", "tool_calls": [{"id": "e1", "name": "echo", "arguments": {"text": "working"}}]},
        {"delay_ms": 600000, "content": "never shown"}
    ]);
    let mut p = chat(&dir, &script, &[]);
    p.exp_string("/help").unwrap();
    p.send_line("go").unwrap();
    p.exp_string(" echo [ok]").unwrap();
    p.process_mut().signal(rexpect::process::signal::Signal::SIGTERM).unwrap();
    p.exp_string("SIGTERM received").unwrap();
    let tail = p.exp_eof().unwrap();
    assert_eq!(exit_code(&p), 7, "{tail}");
    let id = session_id(&tail);
    let session = show(&dir, &id);
    assert_eq!(session["session"]["status"], "aborted", "{session}");
    assert_eq!(runs(&session).len(), 1);
}

#[test]
fn compact_summarizes_the_conversation_in_the_session() {
    let dir = Dir::new("chat-compact");
    let script = json!([
        {"content": "One."},
        {"content": "Two."},
        {"content": "A short summary."},
        {"content": "Three."}
    ]);
    let mut p = chat(&dir, &script, &["--context-strategy", "summarize", "--max-context-chars", "100000"]);
    p.exp_string("/help").unwrap();
    p.send_line("/compact").unwrap();
    p.exp_string("cannot compact: there is nothing to compact yet").unwrap();
    p.send_line("first").unwrap();
    p.exp_string("One.").unwrap();
    p.send_line("second").unwrap();
    p.exp_string("Two.").unwrap();
    p.send_line("/compact").unwrap();
    p.exp_string("compaction").unwrap();
    p.exp_string("summarized").unwrap();
    p.send_line("third").unwrap();
    p.exp_string("Three.").unwrap();
    p.send_line("/exit").unwrap();
    let tail = p.exp_eof().unwrap();
    assert_eq!(exit_code(&p), 0, "{tail}");
    let session = show(&dir, &session_id(&tail));
    let items = transcript(&session);
    assert!(items.iter().any(|(r, c)| r == "summary" && c.contains("A short summary.")), "{items:?}");
    assert_eq!(runs(&session).len(), 4);
}

#[test]
fn without_a_terminal_chat_says_so() {
    let out = reins()
        .args(["chat", "--model", "script:/nonexistent.json"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("needs a terminal on standard input"), "{err}");
}

#[test]
fn a_real_models_text_streams_as_it_arrives_once_and_escaped() {
    let dir = Dir::new("chat-stream");
    let fixture = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../reins-providers/tests/fixtures/anthropic/text.sse");
    let sse = std::fs::read_to_string(fixture).unwrap().replace(r#""text": "Hello!""#, r#""text": "Hello!\u001b[2J""#);
    let (url, got) = serve_once("text/event-stream", sse);
    let mut p = spawn(&dir, &["--model", "anthropic:claude-sonnet-4-5", "--base-url", &url]);
    p.exp_string("/help").unwrap();
    p.send_line("hi").unwrap();
    p.exp_string("Hello!\\x1b[2J How can I help?").unwrap();
    let (_, body) = got.recv().unwrap();
    assert_eq!(body["stream"], true);
    // Streamed, it is not printed again when the response is complete.
    let between = p.exp_string("> ").unwrap();
    assert!(!between.contains("How can I help"), "{between:?}");
    p.send_line("/exit").unwrap();
    p.exp_eof().unwrap();
    assert_eq!(exit_code(&p), 0);
}

#[test]
fn time_limits_each_turn_and_a_withdrawn_question_does_not_eat_the_next_message() {
    let dir = Dir::new("chat-timeout");
    let script = json!([
        {"content": "", "tool_calls": [{"id": "w1", "name": "write_file", "arguments": {"path": "a.txt", "content": "hi"}}]},
        {"delay_ms": 1500, "content": "Slow but in time."},
        {"delay_ms": 1500, "content": "Again in time."}
    ]);
    let mut p = chat(&dir, &script, &["--timeout", "2s"]);
    p.exp_string("/help").unwrap();
    p.send_line("write it").unwrap();
    p.exp_string("[e]dit").unwrap();
    // Nobody answers: the turn's deadline passes while the question is on the screen.
    p.exp_string("withdrawn").unwrap();
    p.exp_string("timeout").unwrap();
    // Enter ends the withdrawn question; the next line, typed ahead at once, is the next message (the line
    // editor keeps what it read ahead between two prompts).
    p.send_line("").unwrap();
    // Each turn has its own 2 s: two turns of 1.5 s each complete.
    p.send_line("next").unwrap();
    p.exp_string("Slow but in time.").unwrap();
    p.send_line("and next").unwrap();
    p.exp_string("Again in time.").unwrap();
    p.send_line("/exit").unwrap();
    let tail = p.exp_eof().unwrap();
    assert_eq!(exit_code(&p), 0, "{tail}");
    assert!(!dir.0.join("ws/a.txt").exists(), "the call never ran");
    let session = show(&dir, &session_id(&tail));
    let statuses: Vec<String> = runs(&session).iter().map(|r| r["status"].as_str().unwrap().to_owned()).collect();
    assert_eq!(statuses, ["timeout", "completed", "completed"]);
}

#[test]
fn token_limits_cover_the_whole_chat() {
    let dir = Dir::new("chat-tokens");
    let script = json!([
        {"content": "One.", "usage": {"input_tokens": 10, "output_tokens": 3}},
        {"content": "Two.", "usage": {"input_tokens": 10, "output_tokens": 3}},
        {"content": "Three."}
    ]);
    let mut p = chat(&dir, &script, &["--max-total-tokens", "20"]);
    p.exp_string("/help").unwrap();
    p.send_line("first").unwrap();
    p.exp_string("One.").unwrap();
    // 13 spent: the second turn has 7 left, and its 13 pass them.
    p.send_line("second").unwrap();
    p.exp_string("token_limit").unwrap();
    p.send_line("third").unwrap();
    p.exp_string("this chat has used its --max-total-tokens (20)").unwrap();
    p.send_line("/exit").unwrap();
    let tail = p.exp_eof().unwrap();
    assert_eq!(exit_code(&p), 0, "{tail}");
    assert_eq!(runs(&show(&dir, &session_id(&tail))).len(), 2, "the third message was not sent");
}

#[test]
fn ctrl_c_at_a_question_cancels_the_turn_and_at_the_prompt_clears_the_line() {
    let dir = Dir::new("chat-keys");
    let script = json!([
        {"content": "", "tool_calls": [{"id": "w1", "name": "write_file", "arguments": {"path": "a.txt", "content": "hi"}}]},
        {"content": "Fine."}
    ]);
    let mut p = chat(&dir, &script, &[]);
    p.exp_string("/help").unwrap();
    p.send_line("write it").unwrap();
    p.exp_string("[e]dit").unwrap();
    p.send_control('c').unwrap();
    p.exp_string("cancelling the turn").unwrap();
    p.exp_string("aborted").unwrap();
    p.exp_string("> ").unwrap();
    // At the prompt Ctrl-C drops what was typed: only the next line is sent.
    p.send("not this").unwrap();
    p.flush().unwrap();
    p.send_control('c').unwrap();
    p.exp_string("Ctrl-D or /exit ends the chat").unwrap();
    p.send_line("but this").unwrap();
    p.exp_string("Fine.").unwrap();
    p.send_line("/exit").unwrap();
    let tail = p.exp_eof().unwrap();
    assert_eq!(exit_code(&p), 0, "{tail}");
    assert!(!dir.0.join("ws/a.txt").exists(), "the cancelled call never ran");
    let session = show(&dir, &session_id(&tail));
    let users: Vec<String> = transcript(&session).into_iter().filter(|(r, _)| r == "user").map(|(_, c)| c).collect();
    assert_eq!(users, ["write it", "but this"]);
}

#[test]
fn resume_in_a_chat_continues_another_session() {
    let dir = Dir::new("chat-resume");
    let earlier = dir.file("earlier.json", &json!([{"content": "Earlier."}]).to_string());
    let out_file = dir.0.join("out.json");
    let out = reins()
        .args(["run", "--store"])
        .arg(dir.store())
        .arg("--model")
        .arg(format!("script:{}", earlier.display()))
        .arg("--output")
        .arg(&out_file)
        .arg("old question")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let old: Value = serde_json::from_str(&read(&out_file)).unwrap();
    let old_id = old["session_id"].as_str().unwrap().to_owned();

    let mut p = chat(&dir, &json!([{"content": "New."}]), &[]);
    p.exp_string("/help").unwrap();
    p.send_line("/resume").unwrap();
    p.exp_string("usage: /resume ID").unwrap();
    p.send_line("/resume 00000000-no-such").unwrap();
    p.exp_string("error").unwrap();
    p.send_line(&format!("/resume {}", &old_id[..8])).unwrap();
    p.exp_string(&format!("continuing session {old_id}")).unwrap();
    p.exp_string("last answer: Earlier.").unwrap();
    p.send_line("a follow-up").unwrap();
    p.exp_string("New.").unwrap();
    p.send_line("/exit").unwrap();
    let tail = p.exp_eof().unwrap();
    assert_eq!(exit_code(&p), 0, "{tail}");
    assert_eq!(session_id(&tail), old_id);
    let session = show(&dir, &old_id);
    let users: Vec<String> = transcript(&session).into_iter().filter(|(r, _)| r == "user").map(|(_, c)| c).collect();
    assert_eq!(users, ["old question", "a follow-up"]);
}

#[test]
fn a_session_waiting_for_an_approval_is_asked_about_first() {
    let dir = Dir::new("chat-waiting");
    let ws = dir.0.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let first = json!([{"content": "", "tool_calls": [{"id": "w1", "name": "write_file", "arguments": {"path": "a.txt", "content": "hi"}}]}]);
    let script = dir.file("first.json", &first.to_string());
    let out_file = dir.0.join("out.json");
    // Without a terminal `reins run` leaves the call waiting (exit 14).
    let out = reins()
        .args(["run", "--approve", "writes", "--store"])
        .arg(dir.store())
        .arg("--workspace")
        .arg(&ws)
        .arg("--model")
        .arg(format!("script:{}", script.display()))
        .arg("--output")
        .arg(&out_file)
        .arg("write a.txt")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(14), "{}", String::from_utf8_lossy(&out.stderr));
    let id = serde_json::from_str::<Value>(&read(&out_file)).unwrap()["session_id"].as_str().unwrap().to_owned();

    let mut p = chat(&dir, &json!([{"content": "Written."}]), &["--resume", &id]);
    p.exp_string(&format!("continuing session {id}")).unwrap();
    p.exp_string("[e]dit").unwrap();
    p.send_line("y").unwrap();
    p.exp_string("Written.").unwrap();
    p.exp_string("> ").unwrap();
    p.send_line("/exit").unwrap();
    let tail = p.exp_eof().unwrap();
    assert_eq!(exit_code(&p), 0, "{tail}");
    assert_eq!(read(&ws.join("a.txt")), "hi");
    let statuses: Vec<String> =
        runs(&show(&dir, &id)).iter().map(|r| r["status"].as_str().unwrap().to_owned()).collect();
    assert_eq!(statuses, ["awaiting_approval", "completed"]);
}

#[test]
fn history_is_kept_in_a_private_file_and_recalled_by_the_next_chat() {
    let dir = Dir::new("chat-history");
    let mut p = chat(&dir, &json!([{"content": "One."}]), &[]);
    p.exp_string("/help").unwrap();
    p.send_line("the first question").unwrap();
    p.exp_string("One.").unwrap();
    p.send_line("/exit").unwrap();
    p.exp_eof().unwrap();
    let file = dir.0.join("state/reins/chat_history");
    assert_eq!(read(&file), "\"the first question\"\n\"/exit\"\n");
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);

    // Up twice: the first question again.
    let mut p = chat(&dir, &json!([{"content": "Two."}]), &[]);
    p.exp_string("/help").unwrap();
    // (`send` is buffered: each key is flushed.)
    p.exp_string("> ").unwrap();
    p.send("\x1b[A").unwrap();
    p.flush().unwrap();
    p.exp_string("> /exit").unwrap();
    p.send("\x1b[A").unwrap();
    p.flush().unwrap();
    p.exp_string("> the first question").unwrap();
    p.send("\r").unwrap();
    p.flush().unwrap();
    p.exp_string("Two.").unwrap();
    p.send_line("/exit").unwrap();
    let tail = p.exp_eof().unwrap();
    let users: Vec<String> =
        transcript(&show(&dir, &session_id(&tail))).into_iter().filter(|(r, _)| r == "user").map(|(_, c)| c).collect();
    assert_eq!(users, ["the first question"]);

    // A symlink in its place is refused (nothing written through it); --no-history writes nothing.
    std::fs::remove_file(&file).unwrap();
    std::os::unix::fs::symlink(dir.0.join("elsewhere"), &file).unwrap();
    let mut p = chat(&dir, &json!([]), &[]);
    p.exp_string("kept in memory only").unwrap();
    p.send_line("/exit").unwrap();
    p.exp_eof().unwrap();
    assert!(!dir.0.join("elsewhere").exists());
    std::fs::remove_file(&file).unwrap();
    let mut p = chat(&dir, &json!([]), &["--no-history"]);
    p.exp_string("/help").unwrap();
    p.send_line("/exit").unwrap();
    p.exp_eof().unwrap();
    assert!(!file.exists());
}

/// Issue 22, item 13: `reins chat --resume ID` on the script that recorded the session goes on with its next turn
/// (it answered with the first one again), and the chat's later turns take the turns after it.
#[test]
fn a_chat_resumed_on_its_script_continues_at_the_next_turn() {
    let dir = Dir::new("chat-script-position");
    let script = dir
        .file("turns.json", &json!([{"content": "First."}, {"content": "Second."}, {"content": "Third."}]).to_string());
    let model = format!("script:{}", script.display());
    let out_file = dir.0.join("out.json");
    let out = reins()
        .args(["run", "--store"])
        .arg(dir.store())
        .args(["--model", &model, "--output"])
        .arg(&out_file)
        .arg("one")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let id = serde_json::from_str::<Value>(&read(&out_file)).unwrap()["session_id"].as_str().unwrap().to_owned();

    let mut p = spawn(&dir, &["--model", &model, "--resume", &id]);
    p.exp_string(&format!("continuing session {id}")).unwrap();
    p.send_line("two").unwrap();
    p.exp_string("Second.").unwrap();
    p.send_line("three").unwrap();
    p.exp_string("Third.").unwrap();
    p.send_line("/exit").unwrap();
    let tail = p.exp_eof().unwrap();
    assert_eq!(exit_code(&p), 0, "{tail}");
    let answers: Vec<String> =
        transcript(&show(&dir, &id)).into_iter().filter(|(r, _)| r == "assistant").map(|(_, c)| c).collect();
    assert_eq!(answers, ["First.", "Second.", "Third."]);
}
