//! run_command with real processes: process-group kill, bounded drain, output caps, environment scrubbing,
//! resource limits, argument schemas.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use reins::{Registry, ToolContext, ToolError, ToolOutput};
use reins_tools::{
    CommandConfig, CommandError, CommandRunner, Preset, ResourceLimits, RunCommand, SandboxMode, Termination, Workspace,
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

fn sh(name: &str, script: &str) -> Preset {
    Preset::new(name, "sh", vec!["-c".into(), script.into()])
}

fn runner(root: &Path, presets: Vec<Preset>) -> CommandRunner {
    let ws = Arc::new(Workspace::open(root).expect("open"));
    let config = CommandConfig { sandbox: SandboxMode::Off, timeout: Duration::from_secs(60), ..Default::default() };
    CommandRunner::new(ws, presets, config).expect("runner")
}

/// Processes (not zombies) whose command line contains `needle`.
fn living_with(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else { return found };
    for entry in dir.flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let line = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if line.contains(needle) {
            found.push(format!("{}: {line}", entry.file_name().to_string_lossy()));
        }
    }
    found
}

async fn run(r: &CommandRunner, name: &str, args: &[&str]) -> reins_tools::CommandOutcome {
    let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
    tokio::time::timeout(Duration::from_secs(120), r.run(name, &args, &CancellationToken::new()))
        .await
        .expect("the run must end")
        .expect("run")
}

#[tokio::test]
async fn exit_codes_signals_stdin_and_cwd() {
    let tmp = tempfile::tempdir().expect("tmp");
    std::fs::create_dir(tmp.path().join("sub")).expect("mkdir");
    let mut in_sub = Preset::new("pwd", "pwd", vec![]);
    in_sub.cwd = Some("sub".into());
    let r = runner(
        tmp.path(),
        vec![
            sh("seven", "echo out; echo err >&2; exit 7"),
            sh("term", "kill -TERM $$"),
            Preset::new("cat", "cat", vec![]),
            in_sub,
        ],
    );
    let o = run(&r, "seven", &[]).await;
    assert_eq!(o.termination, Termination::Exited { code: 7 });
    assert_eq!((o.stdout.as_str(), o.stderr.as_str()), ("out\n", "err\n"));
    assert_eq!(run(&r, "term", &[]).await.termination, Termination::Signaled { signal: 15 });
    // stdin is /dev/null: cat ends at once.
    let o = run(&r, "cat", &[]).await;
    assert_eq!((o.termination, o.stdout.as_str()), (Termination::Exited { code: 0 }, ""));
    let o = run(&r, "pwd", &[]).await;
    let canonical = std::fs::canonicalize(tmp.path().join("sub")).expect("canon");
    assert_eq!(o.stdout.trim_end(), canonical.to_string_lossy());
}

#[tokio::test]
async fn a_working_directory_swapped_for_a_symlink_is_refused() {
    let tmp = tempfile::tempdir().expect("tmp");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(ws.join("sub")).expect("mkdir");
    let mut p = Preset::new("pwd", "pwd", vec![]);
    p.cwd = Some("sub".into());
    let r = runner(&ws, vec![p]);
    std::fs::remove_dir(ws.join("sub")).expect("rmdir");
    std::os::unix::fs::symlink(tmp.path(), ws.join("sub")).expect("symlink");
    let e = r.run("pwd", &[], &CancellationToken::new()).await.expect_err("must refuse");
    assert!(matches!(e, CommandError::Cwd { .. }), "{e}");
    assert!(e.to_string().contains("symbolic link"), "{e}");
    assert!(!e.to_string().contains(&*tmp.path().to_string_lossy()), "{e}");
}

#[tokio::test]
async fn timeout_kills_the_whole_group() {
    let tmp = tempfile::tempdir().expect("tmp");
    let mut p = sh("forker", "sleep 3117 & sleep 3118 & (sleep 3119 & wait) & echo started; wait");
    p.timeout = Some(Duration::from_secs(2));
    let r = runner(tmp.path(), vec![p]);
    let o = run(&r, "forker", &[]).await;
    assert_eq!(o.termination, Termination::TimedOut);
    assert_eq!(o.stdout, "started\n");
    // Killed and reaped by the time the run returned (zombies have no command line; give init a moment).
    let mut left = Vec::new();
    for _ in 0..50 {
        left = [living_with("sleep 3117"), living_with("sleep 3118"), living_with("sleep 3119")].concat();
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(left.is_empty(), "survivors: {left:?}");
}

#[tokio::test]
async fn cancellation_kills_the_whole_group() {
    let tmp = tempfile::tempdir().expect("tmp");
    let r = Arc::new(runner(tmp.path(), vec![sh("sleeper", "sleep 3217 & sleep 3218 & wait")]));
    let cancel = CancellationToken::new();
    let task = {
        let (r, cancel) = (r.clone(), cancel.clone());
        tokio::spawn(async move { r.run("sleeper", &[], &cancel).await })
    };
    for _ in 0..600 {
        if !living_with("sleep 3218").is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!living_with("sleep 3218").is_empty(), "the command never started");
    cancel.cancel();
    let o = tokio::time::timeout(Duration::from_secs(60), task).await.expect("ends").expect("join").expect("run");
    assert_eq!(o.termination, Termination::Cancelled);
    let mut left = Vec::new();
    for _ in 0..50 {
        left = [living_with("sleep 3217"), living_with("sleep 3218")].concat();
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(left.is_empty(), "survivors: {left:?}");
}

#[tokio::test]
async fn an_escaped_grandchild_holding_the_pipe_cannot_hang_the_run() {
    let tmp = tempfile::tempdir().expect("tmp");
    // setsid leaves the process group; the grandchild keeps stdout open after the leader exits.
    let r = runner(tmp.path(), vec![sh("escape", "setsid sleep 3317 & echo leader-done")]);
    let o = run(&r, "escape", &[]).await;
    assert_eq!(o.termination, Termination::Exited { code: 0 });
    assert_eq!(o.stdout, "leader-done\n");
    for line in living_with("sleep 3317") {
        if let Some(pid) = line.split(':').next() {
            let _ = std::process::Command::new("kill").args(["-9", pid]).status();
        }
    }
}

#[tokio::test]
async fn output_floods_are_capped() {
    let tmp = tempfile::tempdir().expect("tmp");
    let mut flood = sh("flood", "yes 0123456789 | head -c 20000000; echo tail-marker; yes e | head -c 300000 >&2");
    flood.output_cap = Some(64 * 1024);
    let r = runner(tmp.path(), vec![flood]);
    let o = run(&r, "flood", &[]).await;
    assert_eq!(o.termination, Termination::Exited { code: 0 });
    assert_eq!(o.stdout_dropped, 20_000_000 + 12 - 65536);
    assert!(o.stdout.len() <= 65536 + 64, "{}", o.stdout.len());
    assert!(o.stdout.starts_with("0123456789\n"));
    assert!(o.stdout.ends_with("tail-marker\n"));
    assert!(o.stdout.contains(&format!("[... {} bytes dropped ...]", o.stdout_dropped)));
    assert_eq!(o.stderr_dropped, 300_000 - 65536);
}

#[tokio::test]
async fn lossy_decoding_of_invalid_utf8() {
    let tmp = tempfile::tempdir().expect("tmp");
    let r = runner(tmp.path(), vec![Preset::new("bytes", "printf", vec!["a\\377b".into()])]);
    assert_eq!(run(&r, "bytes", &[]).await.stdout, "a\u{fffd}b");
}

#[tokio::test]
async fn resource_limits_apply() {
    let tmp = tempfile::tempdir().expect("tmp");
    let limits = ResourceLimits {
        cpu_seconds: Some(1),
        address_space_bytes: Some(4 << 30),
        open_files: Some(77),
        processes: Some(4096),
        file_size_bytes: Some(1 << 20),
    };
    let mut show = Preset::new("show", "cat", vec!["/proc/self/limits".into()]);
    show.limits = Some(limits);
    let mut dd =
        Preset::new("dd", "dd", vec!["if=/dev/zero".into(), "of=big".into(), "bs=1024".into(), "count=4096".into()]);
    dd.limits = Some(limits);
    let mut spin = sh("spin", "while :; do :; done");
    spin.limits = Some(limits);
    let r = runner(tmp.path(), vec![show, dd, spin]);
    let o = run(&r, "show", &[]).await;
    let limit = |what: &str| -> Vec<String> {
        let line = o.stdout.lines().find(|l| l.starts_with(what)).unwrap_or_default();
        line[what.len()..].split_whitespace().take(2).map(str::to_owned).collect()
    };
    assert_eq!(limit("Max cpu time"), ["1", "1"]);
    assert_eq!(limit("Max file size"), ["1048576", "1048576"]);
    assert_eq!(limit("Max open files"), ["77", "77"]);
    assert_eq!(limit("Max processes"), ["4096", "4096"]);
    assert_eq!(limit("Max address space"), ["4294967296", "4294967296"]);
    let o = run(&r, "dd", &[]).await;
    assert_eq!(o.termination, Termination::Signaled { signal: libc::SIGXFSZ }, "{o:?}");
    assert_eq!(std::fs::metadata(tmp.path().join("big")).expect("stat").len(), 1 << 20);
    let o = run(&r, "spin", &[]).await;
    assert!(
        matches!(o.termination, Termination::Signaled { signal } if signal == libc::SIGXCPU || signal == libc::SIGKILL),
        "{o:?}"
    );
}

/// Run in a child test process whose environment carries fake secrets (see `secrets_never_reach_the_child`).
#[tokio::test]
#[ignore = "run by secrets_never_reach_the_child in a child process with secrets in its environment"]
async fn secret_probe() {
    assert!(std::env::var_os("REINS_SECRET_PROBE").is_some(), "run through secrets_never_reach_the_child");
    let tmp = tempfile::tempdir().expect("tmp");
    let mut named = Preset::new("named", "env", vec![]);
    named.env = vec!["MY_API_KEY".into()];
    let ws = Arc::new(Workspace::open(tmp.path()).expect("open"));
    let config = CommandConfig {
        sandbox: SandboxMode::Off,
        env_allow: vec!["PATH".into(), "MY_*".into(), "GITHUB_TOKEN".into()],
        ..Default::default()
    };
    let r = CommandRunner::new(ws, vec![Preset::new("env", "env", vec![]), named], config).expect("runner");
    let plain = run(&r, "env", &[]).await.stdout;
    assert!(plain.contains("MY_PLAIN=visible"), "{plain}");
    assert!(plain.contains("PATH="), "{plain}");
    for secret in ["k-123", "s-456", "t-789", "p-000", "gh-111"] {
        assert!(!plain.contains(secret), "secret reached the child: {plain}");
    }
    assert!(!plain.contains("UNLISTED"), "{plain}");
    let named = run(&r, "named", &[]).await.stdout;
    assert!(named.contains("MY_API_KEY=k-123"), "{named}");
    assert!(!named.contains("s-456"), "{named}");
    println!("SECRET-PROBE-RAN");
}

#[test]
fn secrets_never_reach_the_child() {
    let exe = std::env::current_exe().expect("exe");
    let out = std::process::Command::new(exe)
        .args(["--exact", "secret_probe", "--ignored", "--nocapture", "--test-threads=1"])
        .env("REINS_SECRET_PROBE", "1")
        .env("MY_API_KEY", "k-123")
        .env("MY_SECRET", "s-456")
        .env("MY_TOKEN", "t-789")
        .env("MY_PASSWORD", "p-000")
        .env("GITHUB_TOKEN", "gh-111")
        .env("MY_PLAIN", "visible")
        .env("UNLISTED", "x")
        .output()
        .expect("run the probe");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}");
    assert!(text.contains("SECRET-PROBE-RAN"), "the probe did not run: {text}");
}

#[tokio::test]
async fn arguments_follow_the_preset_schema() {
    let tmp = tempfile::tempdir().expect("tmp");
    let mut echo = Preset::new("echo", "echo", vec!["fixed".into()]);
    echo.arg_schema = Some(json!({"type": "array", "items": {"type": "string", "pattern": "^[a-z]+$"}, "maxItems": 2}));
    let r = runner(tmp.path(), vec![echo, Preset::new("noargs", "true", vec![])]);
    assert_eq!(run(&r, "echo", &["ab", "cd"]).await.stdout, "fixed ab cd\n");
    let cancel = CancellationToken::new();
    let bad = |args: &[&str]| args.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    let e = r.run("echo", &bad(&["; rm -rf /"]), &cancel).await.expect_err("pattern");
    assert!(matches!(e, CommandError::Args { .. }), "{e}");
    assert!(r.run("echo", &bad(&["a", "b", "c"]), &cancel).await.is_err());
    let e = r.run("noargs", &bad(&["x"]), &cancel).await.expect_err("no args");
    assert!(e.to_string().contains("takes no arguments"), "{e}");
    let e = r.run("rm", &[], &cancel).await.expect_err("unknown");
    assert!(matches!(e, CommandError::Unknown(..)), "{e}");
}

#[test]
fn invalid_presets_are_refused_when_built() {
    let tmp = tempfile::tempdir().expect("tmp");
    let ws = Arc::new(Workspace::open(tmp.path()).expect("open"));
    let build = |p: Vec<Preset>| CommandRunner::new(ws.clone(), p, CommandConfig::default());
    assert!(matches!(build(vec![Preset::new("1bad", "true", vec![])]), Err(CommandError::BadPreset { .. })));
    assert!(matches!(
        build(vec![Preset::new("a", "true", vec![]), Preset::new("a", "true", vec![])]),
        Err(CommandError::Duplicate(_))
    ));
    assert!(build(vec![Preset::new("a", "no-such-program-reins", vec![])]).is_err());
    let mut p = Preset::new("a", "true", vec![]);
    p.cwd = Some("../x".into());
    assert!(build(vec![p]).is_err());
    let mut p = Preset::new("a", "true", vec![]);
    p.arg_schema = Some(json!({"type": 5}));
    assert!(build(vec![p]).is_err());
}

#[tokio::test]
async fn run_command_tool() {
    let tmp = tempfile::tempdir().expect("tmp");
    let mut slow = sh("slow", "sleep 30");
    slow.timeout = Some(Duration::from_millis(300));
    let r = Arc::new(runner(tmp.path(), vec![sh("hello", "echo hello"), slow]));
    let registry = Registry::builder().tool(RunCommand::new(r)).build().expect("registry");
    let spec = &registry.specs()[0];
    assert_eq!(spec.input_schema["properties"]["command"]["enum"], json!(["hello", "slow"]));
    let ctx = ToolContext::new("1", CancellationToken::new());
    let tool = registry.check("run_command", &json!({"command": "hello"})).expect("valid").clone();
    let out = tool.call(json!({"command": "hello"}), ctx.clone()).await.expect("ok");
    let ToolOutput::Text(text) = out else { panic!("text expected") };
    // No measured duration in the text: the same command gives the same result (replays compare equal).
    assert_eq!(text, "exit code 0\n[stdout]\nhello\n[stderr]\n[sandbox: off]");
    assert!(registry.check("run_command", &json!({"command": "bash -c id"})).is_err());
    let e = tool.call(json!({"command": "slow"}), ctx.clone()).await.expect_err("timeout");
    assert!(matches!(&e, ToolError::Failed(m) if m.contains("timed out")), "{e}");
    let cancelled = ToolContext::new("2", CancellationToken::new());
    cancelled.cancel.cancel();
    assert_eq!(tool.call(json!({"command": "slow"}), cancelled).await, Err(ToolError::Cancelled));
}

#[tokio::test]
async fn run_command_hands_the_idempotency_key_to_the_command() {
    let tmp = tempfile::tempdir().expect("tmp");
    let r = Arc::new(runner(tmp.path(), vec![sh("key", "printf '%s' \"$REINS_IDEMPOTENCY_KEY\"")]));
    let registry = Registry::builder().tool(RunCommand::new(r.clone())).build().expect("registry");
    let tool = registry.check("run_command", &json!({"command": "key"})).expect("valid").clone();
    let ctx = ToolContext::new("c1", CancellationToken::new()).with_idempotency_key("sess/run/2/c1");
    let ToolOutput::Text(text) = tool.call(json!({"command": "key"}), ctx).await.expect("ok") else {
        panic!("text expected")
    };
    assert!(text.contains("[stdout]\nsess/run/2/c1\n"), "{text}");
    // Outside a tool call (no key) the variable is not set.
    let out = r.run("key", &[], &CancellationToken::new()).await.expect("runs");
    assert!(out.render().contains("[stdout]\n[stderr]"), "{}", out.render());
    assert_eq!(reins_tools::IDEMPOTENCY_KEY_ENV, "REINS_IDEMPOTENCY_KEY");
}
