//! Attacks from a hostile repository and a hostile model (issue 16): a config's own `protected` list cannot drop
//! the `.git` protection, commands cannot leave protected paths that did not exist when they started, `search`
//! opens ignore files only beneath the root (no symlink, no FIFO, bounded), and a symlinked `search` path is
//! refused without a walk.

use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use reins::{Agent, Limits, Message, ModelResponse, Registry, ScriptedModel, Status, ToolCall, ToolContext, ToolError};
use reins_tools::{
    CommandConfig, CommandRunner, Preset, RelPath, RunCommand, SandboxMode, SearchError, SearchQuery, Workspace,
    WorkspaceConfig, WorkspaceError, file_tools, probe,
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const FSMONITOR: &str = "fsmonitor";

struct Fixture {
    _tmp: tempfile::TempDir,
    root: std::path::PathBuf,
    outside: std::path::PathBuf,
}

fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path().join("ws");
    let outside = tmp.path().join("outside");
    fs::create_dir_all(root.join(".git/hooks")).expect("mkdir");
    fs::create_dir_all(root.join("sub/.git")).expect("mkdir");
    fs::create_dir_all(&outside).expect("mkdir");
    fs::write(root.join(".git/config"), "[core]\n\tbare = false\n").expect("write");
    fs::write(root.join("sub/.git/config"), "[core]\n").expect("write");
    fs::write(root.join("a.txt"), "needle in a\n").expect("write");
    Fixture { _tmp: tmp, root, outside }
}

/// A workspace whose configuration has a `protected` list of its own, without `.git`.
fn own_list(root: &Path) -> Arc<Workspace> {
    let config = WorkspaceConfig {
        protected: vec!["secret/**".into(), "*.lock".into(), "**/*.pem".into()],
        ..Default::default()
    };
    Arc::new(Workspace::open_with(root, config).expect("open"))
}

fn p(s: &str) -> RelPath {
    RelPath::parse(s).expect("valid path")
}

fn ctx() -> ToolContext {
    ToolContext::new("1", CancellationToken::new())
}

async fn call(registry: &Registry, name: &str, args: serde_json::Value) -> Result<String, ToolError> {
    let tool = registry.check(name, &args).map_err(|e| ToolError::InvalidArguments(e.to_string()))?.clone();
    tool.call(args, ctx()).await.map(|o| o.into_text())
}

fn no_fsmonitor(fx: &Fixture) {
    for config in [".git/config", "sub/.git/config"] {
        let text = fs::read_to_string(fx.root.join(config)).expect("read");
        assert!(!text.contains(FSMONITOR), "{config} was written: {text}");
    }
    assert!(!fx.root.join(".git/hooks/x").exists(), "a hook was written");
}

#[test]
fn a_configured_protected_list_adds_to_the_git_default_and_never_replaces_it() {
    let fx = fixture();
    let ws = own_list(&fx.root);
    assert!(ws.protected_globs().iter().any(|g| g == "**/.git"), "{:?}", ws.protected_globs());
    assert!(ws.protected_globs().iter().any(|g| g == "*.lock"), "{:?}", ws.protected_globs());
    for path in [".git/config", ".git/hooks/x", "sub/.git/config", "new.lock", "secret/k"] {
        assert!(ws.is_protected(&p(path)), "{path}");
        assert!(matches!(ws.write(&p(path), b"x"), Err(WorkspaceError::Protected(_))), "{path}");
    }
    let edit = ws.edit(&p(".git/config"), "bare = false", "bare = false\n\tfsmonitor = touch /tmp/pwned", 1);
    assert!(matches!(edit, Err(WorkspaceError::Protected(_))), "{edit:?}");
    // An empty list is no way around it either.
    let ws =
        Workspace::open_with(&fx.root, WorkspaceConfig { protected: Vec::new(), ..Default::default() }).expect("open");
    assert!(ws.is_protected(&p(".git/config")) && ws.is_protected(&p("a/b/.git/hooks/pre-commit")));
    no_fsmonitor(&fx);
}

#[tokio::test]
async fn file_tools_refuse_git_under_a_config_with_its_own_list() {
    let fx = fixture();
    let registry = Registry::new(file_tools(own_list(&fx.root))).expect("registry");
    let edit = json!({"path": ".git/config", "old_text": "bare = false", "new_text": "fsmonitor = sh -c evil"});
    let err = call(&registry, "edit_file", edit).await.expect_err("edit .git/config");
    assert!(err.to_string().contains("protected"), "{err}");
    let err = call(&registry, "write_file", json!({"path": ".git/hooks/x", "content": "#!/bin/sh\nevil\n"}))
        .await
        .expect_err("write a hook");
    assert!(err.to_string().contains("protected"), "{err}");
    let err = call(&registry, "write_file", json!({"path": "sub/.git/config", "content": "[core]\nfsmonitor=x\n"}))
        .await
        .expect_err("nested .git");
    assert!(err.to_string().contains("protected"), "{err}");
    let err = call(&registry, "write_file", json!({"path": "new.lock", "content": "x"})).await.expect_err("lock");
    assert!(err.to_string().contains("protected"), "{err}");
    no_fsmonitor(&fx);
    assert!(!fx.root.join("new.lock").exists());
}

#[tokio::test]
async fn write_file_refuses_a_trailing_slash() {
    let fx = fixture();
    let registry = Registry::new(file_tools(own_list(&fx.root))).expect("registry");
    for path in ["new.txt/", "new.txt/.", "a.txt/"] {
        let err = call(&registry, "write_file", json!({"path": path, "content": "x"})).await.expect_err(path);
        assert!(matches!(err, ToolError::InvalidArguments(_)) && err.to_string().contains("trailing"), "{err}");
    }
    assert!(!fx.root.join("new.txt").exists(), "write_file \"new.txt/\" created a file");
    assert_eq!(fs::read_to_string(fx.root.join("a.txt")).expect("read"), "needle in a\n");
    let err = call(&registry, "edit_file", json!({"path": "a.txt/", "old_text": "a", "new_text": "b"}))
        .await
        .expect_err("edit with a slash");
    assert!(err.to_string().contains("trailing"), "{err}");
    let err = call(&registry, "read_file", json!({"path": "a.txt/"})).await.expect_err("read with a slash");
    assert!(err.to_string().contains("trailing"), "{err}");
    assert!(call(&registry, "list_dir", json!({"path": "sub/"})).await.is_ok());
}

fn sh(name: &str, script: &str) -> Preset {
    Preset::new(name, "sh", vec!["-c".into(), script.into()])
}

fn runner(ws: Arc<Workspace>, presets: Vec<Preset>, sandbox: SandboxMode) -> Arc<CommandRunner> {
    let config = CommandConfig { sandbox, timeout: Duration::from_secs(60), ..Default::default() };
    Arc::new(CommandRunner::new(ws, presets, config).expect("runner"))
}

fn full_support() -> bool {
    let s = probe();
    s.landlock_abi.is_some() && s.seccomp && s.namespaces
}

#[tokio::test]
async fn presets_cannot_write_git_under_a_config_with_its_own_list() {
    if !full_support() {
        eprintln!("skipped: this host has no full sandbox (the fail-closed test covers it)");
        return;
    }
    let fx = fixture();
    let presets = vec![
        sh("config", "printf '\\tfsmonitor = touch /tmp/pwned\\n' >> .git/config"),
        sh("hook", "printf '#!/bin/sh\\nevil\\n' > .git/hooks/x"),
        sh("nested", "printf 'fsmonitor = x\\n' >> sub/.git/config"),
        sh("swap", "mv .git .git-old"),
    ];
    let r = runner(own_list(&fx.root), presets, SandboxMode::Required);
    for name in ["config", "hook", "nested", "swap"] {
        let out = r.run(name, &[], &CancellationToken::new()).await.expect("ran");
        assert!(
            !matches!(out.termination, reins_tools::Termination::Exited { code: 0 }),
            "{name} succeeded: {}",
            out.render()
        );
    }
    no_fsmonitor(&fx);
    assert!(fx.root.join(".git/config").exists());
}

/// `*.lock` is protected and `new.lock` does not exist when the command starts: the command may create it, but
/// it does not stay, and the call is an error that says so. The same for a `.git` created from nothing.
#[tokio::test]
async fn a_protected_path_a_command_creates_does_not_stay() {
    let modes = if full_support() { vec![SandboxMode::Required, SandboxMode::Off] } else { vec![SandboxMode::Off] };
    for mode in modes {
        let fx = fixture();
        fs::create_dir_all(fx.root.join("deep/er")).expect("mkdir");
        fs::create_dir_all(fx.root.join("plain")).expect("mkdir");
        fs::write(fx.root.join("old.lock"), "old\n").expect("write");
        let script = "echo x > new.lock && echo y > deep/er/new.pem && mkdir -p plain/.git/hooks && \
                      printf 'fsmonitor = x\\n' > plain/.git/config && ln -s /etc/passwd link.lock && \
                      echo ok > fine.txt";
        let r = runner(own_list(&fx.root), vec![sh("make", script)], mode);
        let out = r.run("make", &[], &CancellationToken::new()).await.expect("ran");
        assert_eq!(out.termination, reins_tools::Termination::Exited { code: 0 }, "{mode:?}: {}", out.render());
        for created in ["new.lock", "deep/er/new.pem", "plain/.git", "link.lock"] {
            assert!(fs::symlink_metadata(fx.root.join(created)).is_err(), "{mode:?}: {created} stayed");
            assert!(out.protected_created.iter().any(|c| c.contains(created)), "{mode:?}: {:?}", out.protected_created);
        }
        assert_eq!(out.protected_created.len(), 4, "{:?}", out.protected_created);
        assert!(out.protected_check_complete);
        // What existed before, and what is not protected, is left alone.
        assert_eq!(fs::read_to_string(fx.root.join("old.lock")).expect("old"), "old\n");
        assert_eq!(fs::read_to_string(fx.root.join("fine.txt")).expect("fine"), "ok\n");
        assert!(fs::metadata("/etc/passwd").is_ok(), "the symlink's target was removed");
        assert!(out.render().contains("protected paths, which were removed"), "{}", out.render());

        // Through the tool it is an error result, with the output still there.
        let tool = RunCommand::new(runner(own_list(&fx.root), vec![sh("make", "echo x > again.lock")], mode));
        let err = reins::Tool::call(&tool, json!({"command": "make"}), ctx()).await.expect_err("an error");
        assert!(err.to_string().contains("created protected paths") && err.to_string().contains("again.lock"));
        assert!(!fx.root.join("again.lock").exists());
    }
}

/// The engine's tool timeout drops the call's future: the check still runs when it is dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_protected_path_created_before_a_tool_timeout_does_not_stay() {
    let fx = fixture();
    let r = runner(own_list(&fx.root), vec![sh("slow", "echo x > late.lock; sleep 60")], SandboxMode::Off);
    let tool = Arc::new(RunCommand::new(r));
    let model = Arc::new(ScriptedModel::new(vec![
        ModelResponse::tool_calls("", vec![ToolCall::new("c1", "run_command", json!({"command": "slow"}))]),
        ModelResponse::text("done"),
    ]));
    let registry = Registry::new(vec![tool as Arc<dyn reins::Tool>]).expect("registry");
    let limits = Limits { tool_timeout: Some(Duration::from_secs(2)), ..Limits::default() };
    let agent = Agent::builder_shared(model).registry(registry).limits(limits).build().expect("agent");
    let started = Instant::now();
    let outcome = agent.run("go", CancellationToken::new()).await;
    assert_eq!(outcome.status, Status::Completed, "{:?}", outcome.error);
    assert!(started.elapsed() < Duration::from_secs(30));
    assert!(!fx.root.join("late.lock").exists(), "late.lock stayed after the timeout");
}

fn query(pattern: &str, path: &str) -> SearchQuery {
    SearchQuery { pattern: pattern.into(), path: p(path), glob: None, case_insensitive: false, max_matches: 100 }
}

fn mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo").arg(path).status().expect("mkfifo");
    assert!(status.success());
}

/// Runs `search` on a thread and waits at most `limit` for it: a hang fails the test instead of blocking it.
fn bounded_search(
    ws: Arc<Workspace>,
    q: SearchQuery,
    limit: Duration,
) -> Result<reins_tools::SearchReport, SearchError> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(reins_tools::search(&ws, &q, &CancellationToken::new()));
    });
    rx.recv_timeout(limit).expect("search hung")
}

#[test]
fn hostile_ignore_files_are_never_followed_blocked_on_or_read_unbounded() {
    // A .gitignore that is a symlink to /dev/zero (unbounded), a FIFO (blocks a plain open), a symlink to a file
    // outside the workspace (whose rules must not be read), and one nested FIFO .ignore.
    let fx = fixture();
    fs::write(fx.outside.join("rules"), "*.txt\n").expect("write");
    std::os::unix::fs::symlink("/dev/zero", fx.root.join(".gitignore")).expect("symlink");
    fs::create_dir_all(fx.root.join("f")).expect("mkdir");
    mkfifo(&fx.root.join("f/.gitignore"));
    mkfifo(&fx.root.join("f/.ignore"));
    fs::write(fx.root.join("f/b.txt"), "needle in b\n").expect("write");
    fs::create_dir_all(fx.root.join("o")).expect("mkdir");
    std::os::unix::fs::symlink(fx.outside.join("rules"), fx.root.join("o/.gitignore")).expect("symlink");
    fs::write(fx.root.join("o/c.txt"), "needle in c\n").expect("write");
    fs::create_dir_all(fx.root.join(".git/info")).expect("mkdir");
    std::os::unix::fs::symlink("/dev/zero", fx.root.join(".git/info/exclude")).expect("symlink");
    let ws = Arc::new(Workspace::open(&fx.root).expect("open"));
    for start in [".", "f", "o"] {
        let r = bounded_search(ws.clone(), query("needle", start), Duration::from_secs(20)).expect("search");
        let paths: Vec<&str> = r.matches.iter().map(|m| m.path.as_str()).collect();
        let want: &[&str] = match start {
            "." => &["a.txt", "f/b.txt", "o/c.txt"],
            "f" => &["f/b.txt"],
            _ => &["o/c.txt"],
        };
        // `o/c.txt` is found: the outside file's `*.txt` was never read.
        assert_eq!(paths, want, "{start}: {r:?}");
    }
}

#[test]
fn regular_ignore_files_still_work_including_a_parent_one() {
    let fx = fixture();
    fs::write(fx.root.join(".gitignore"), "*.log\nbuild/\n").expect("write");
    fs::create_dir_all(fx.root.join("src/build")).expect("mkdir");
    fs::write(fx.root.join("src/x.log"), "needle\n").expect("write");
    fs::write(fx.root.join("src/build/y.txt"), "needle\n").expect("write");
    fs::write(fx.root.join("src/z.txt"), "needle\n").expect("write");
    fs::write(fx.root.join("src/.ignore"), "z.txt\n").expect("write");
    fs::write(fx.root.join("src/.gitignore"), "!x.log\n").expect("write");
    let ws = Arc::new(Workspace::open(&fx.root).expect("open"));
    for start in [".", "src"] {
        let r = bounded_search(ws.clone(), query("needle", start), Duration::from_secs(20)).expect("search");
        let paths: Vec<&str> = r.matches.iter().map(|m| m.path.as_str()).collect();
        // `!x.log` in src/.gitignore re-includes it; `.ignore` leaves z.txt out; build/ stays ignored.
        let want: &[&str] = if start == "." { &["a.txt", "src/x.log"] } else { &["src/x.log"] };
        assert_eq!(paths, want, "{start}: {r:?}");
    }
}

/// The whole engine, with a real tool timeout: a run over a FIFO `.gitignore` and a `/dev/zero` one completes,
/// and the test (its runtime waits for blocking tasks when it is dropped) exits.
#[test]
fn a_run_searching_a_hostile_repository_ends_and_the_process_can_exit() {
    let fx = fixture();
    mkfifo(&fx.root.join(".gitignore"));
    fs::create_dir_all(fx.root.join("z")).expect("mkdir");
    std::os::unix::fs::symlink("/dev/zero", fx.root.join("z/.gitignore")).expect("symlink");
    fs::write(fx.root.join("z/d.txt"), "needle in d\n").expect("write");
    let root = fx.root.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("rt");
        let outcome = rt.block_on(async move {
            let ws = Arc::new(Workspace::open(&root).expect("open"));
            let model = Arc::new(ScriptedModel::new(vec![
                ModelResponse::tool_calls("", vec![ToolCall::new("s", "search", json!({"pattern": "needle"}))]),
                ModelResponse::text("done"),
            ]));
            let limits = Limits { tool_timeout: Some(Duration::from_secs(5)), ..Limits::default() };
            let registry = Registry::new(file_tools(ws)).expect("registry");
            Agent::builder_shared(model)
                .registry(registry)
                .limits(limits)
                .build()
                .expect("agent")
                .run("go", CancellationToken::new())
                .await
        });
        drop(rt); // waits for every blocking task: a search stuck on the FIFO would hang here
        let _ = tx.send(outcome);
    });
    let outcome = rx.recv_timeout(Duration::from_secs(60)).expect("the run or its runtime hung");
    assert_eq!(outcome.status, Status::Completed, "{:?}", outcome.error);
    let result = outcome.messages.iter().find_map(|m| match m {
        Message::ToolResult(r) => Some(r.clone()),
        _ => None,
    });
    let result = result.expect("a tool result");
    assert!(!result.is_error, "{result:?}");
    assert!(
        result.content.contains("a.txt:1:needle in a") && result.content.contains("z/d.txt:1:needle in d"),
        "{result:?}"
    );
}

#[test]
fn a_symlinked_search_path_is_refused_without_a_walk() {
    let fx = fixture();
    fs::write(fx.outside.join("secret.txt"), "needle outside\n").expect("write");
    std::os::unix::fs::symlink("/", fx.root.join("rootlink")).expect("symlink");
    std::os::unix::fs::symlink(&fx.outside, fx.root.join("outlink")).expect("symlink");
    std::os::unix::fs::symlink(fx.outside.join("secret.txt"), fx.root.join("filelink")).expect("symlink");
    fs::create_dir_all(fx.root.join("d")).expect("mkdir");
    std::os::unix::fs::symlink(&fx.outside, fx.root.join("d/inner")).expect("symlink");
    for resolver in [reins_tools::Resolver::Auto, reins_tools::Resolver::Walk] {
        let ws =
            Arc::new(Workspace::open_with(&fx.root, WorkspaceConfig { resolver, ..Default::default() }).expect("open"));
        for path in ["rootlink", "outlink", "filelink", "d/inner", "outlink/secret.txt", "rootlink/etc"] {
            let r = bounded_search(ws.clone(), query("needle", path), Duration::from_secs(10));
            assert!(matches!(r, Err(SearchError::Path(WorkspaceError::Symlink(_)))), "{resolver:?} {path}: {r:?}");
        }
        // The symlinks met during a walk are not followed either.
        let r = bounded_search(ws.clone(), query("needle", "."), Duration::from_secs(10)).expect("search");
        assert!(r.matches.iter().all(|m| !m.text.contains("outside")), "{r:?}");
    }
}

#[tokio::test]
async fn a_zero_resource_limit_is_refused_when_the_runner_is_built_with_its_name() {
    let fx = fixture();
    let ws = own_list(&fx.root);
    let zero = reins_tools::ResourceLimits { open_files: Some(0), ..Default::default() };
    let mut preset = sh("x", "true");
    preset.limits = Some(zero);
    let err = CommandRunner::new(ws.clone(), vec![preset], CommandConfig::default()).err().expect("refused");
    assert!(err.to_string().contains("open_files must be at least 1"), "{err}");
    let config = CommandConfig { limits: zero, ..Default::default() };
    let err = CommandRunner::new(ws.clone(), vec![sh("x", "true")], config).err().expect("refused");
    assert!(err.to_string().contains("[commands] limits.open_files must be at least 1"), "{err}");
    // A limit too small to start under (but not zero) says why, not "uncategorized error".
    let mut preset = sh("x", "true");
    preset.limits = Some(reins_tools::ResourceLimits { open_files: Some(1), ..Default::default() });
    let r = CommandRunner::new(ws, vec![preset], CommandConfig { sandbox: SandboxMode::Off, ..Default::default() })
        .expect("runner");
    match r.run("x", &[], &CancellationToken::new()).await {
        Err(e) => assert!(!e.to_string().contains("uncategorized"), "{e}"),
        Ok(out) => assert!(!out.render().contains("uncategorized"), "{}", out.render()),
    }
}
