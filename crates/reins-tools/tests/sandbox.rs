//! The OS sandbox with real processes. Where the host cannot give an isolation layer, the test checks that the
//! required mode refuses to run (fail closed) instead.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use reins_tools::{
    CommandConfig, CommandError, CommandOutcome, CommandRunner, Preset, SandboxError, SandboxMode, Termination,
    Workspace, probe,
};
use tokio_util::sync::CancellationToken;

fn sh(name: &str, script: &str) -> Preset {
    Preset::new(name, "sh", vec!["-c".into(), script.into()])
}

fn runner(root: &Path, presets: Vec<Preset>, sandbox: SandboxMode) -> CommandRunner {
    let ws = Arc::new(Workspace::open(root).expect("open"));
    let config = CommandConfig { sandbox, timeout: Duration::from_secs(60), ..Default::default() };
    CommandRunner::new(ws, presets, config).expect("runner")
}

async fn run(r: &CommandRunner, name: &str) -> Result<CommandOutcome, CommandError> {
    tokio::time::timeout(Duration::from_secs(120), r.run(name, &[], &CancellationToken::new()))
        .await
        .expect("the run must end")
}

fn full_support() -> bool {
    let s = probe();
    s.landlock_abi.is_some() && s.seccomp && s.namespaces
}

struct Fixture {
    _tmp: tempfile::TempDir,
    ws: std::path::PathBuf,
    outside: std::path::PathBuf,
}

fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().expect("tmp");
    let ws = tmp.path().join("ws");
    let outside = tmp.path().join("outside");
    std::fs::create_dir_all(ws.join(".git")).expect("mkdir");
    std::fs::create_dir_all(&outside).expect("mkdir");
    std::fs::write(ws.join(".git/config"), "[core]\n").expect("write");
    Fixture { _tmp: tmp, ws, outside }
}

#[test]
fn probe_reports_the_host() {
    let s = probe();
    let text = s.render();
    assert!(text.contains("landlock:") && text.contains("seccomp:"), "{text}");
    assert!(!s.kernel.is_empty());
}

#[tokio::test]
async fn sandboxed_command_cannot_write_outside_or_to_protected_paths() {
    let fx = fixture();
    // A symlink inside the workspace that points outside does not help either.
    std::os::unix::fs::symlink(&fx.outside, fx.ws.join("out-link")).expect("symlink");
    let script = format!(
        "echo inside > inside.txt; echo tmp > \"$TMPDIR/t\" && cat \"$TMPDIR/t\"; \
         (echo escaped > '{}/escaped.txt'); (echo pwned >> .git/config); (: > .git/new); \
         (echo linked > out-link/linked.txt); echo done",
        fx.outside.display()
    );
    let r = runner(&fx.ws, vec![sh("try", &script)], SandboxMode::Required);
    if !full_support() {
        let e = run(&r, "try").await.expect_err("must refuse");
        assert!(matches!(e, CommandError::Sandbox(SandboxError::Unavailable(_))), "{e}");
        assert!(!fx.ws.join("inside.txt").exists(), "the refused command ran");
        return;
    }
    let o = run(&r, "try").await.expect("run");
    assert_eq!(o.termination, Termination::Exited { code: 0 }, "{o:?}");
    assert_eq!(o.stdout, "tmp\ndone\n", "{o:?}");
    assert!(o.sandbox.contains("landlock"), "{}", o.sandbox);
    assert_eq!(std::fs::read_to_string(fx.ws.join("inside.txt")).expect("read"), "inside\n");
    assert!(!fx.outside.join("escaped.txt").exists(), "wrote outside the workspace");
    assert_eq!(std::fs::read_to_string(fx.ws.join(".git/config")).expect("read"), "[core]\n");
    assert!(!fx.ws.join(".git/new").exists(), "wrote a protected path");
    assert!(!fx.outside.join("linked.txt").exists(), "wrote outside through a symlink");
    assert_eq!(o.stderr.lines().count(), 4, "four refused writes: {}", o.stderr);

    // Control: without the sandbox the same command does escape, so the test above can fail.
    let r = runner(&fx.ws, vec![sh("try", &script)], SandboxMode::Off);
    run(&r, "try").await.expect("run");
    assert!(fx.outside.join("escaped.txt").exists());
}

/// A TCP connection to a listener on 127.0.0.1 works without the sandbox and fails inside it.
#[tokio::test]
async fn sandboxed_command_cannot_open_a_tcp_socket() {
    let fx = fixture();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let python = ["python3", "python"]
        .into_iter()
        .find(|p| std::process::Command::new(p).arg("-c").arg("pass").output().is_ok_and(|o| o.status.success()))
        .expect("python3 is needed for this test (CI machines have Python 3.11)");
    let code = format!(
        "import socket\ntry:\n s = socket.create_connection(('127.0.0.1', {port}), timeout=5)\n print('connected')\n\
         except OSError as e:\n print('refused', e.errno)\n"
    );
    let preset = Preset::new("connect", python, vec!["-c".into(), code]);
    let mut allowed = preset.clone();
    allowed.name = "connect-net".into();
    allowed.network = true;

    let open = runner(&fx.ws, vec![preset.clone()], SandboxMode::Off);
    assert_eq!(run(&open, "connect").await.expect("run").stdout, "connected\n");

    let sandboxed = runner(&fx.ws, vec![preset, allowed], SandboxMode::Required);
    if !full_support() {
        let e = run(&sandboxed, "connect").await.expect_err("must refuse");
        assert!(matches!(e, CommandError::Sandbox(SandboxError::Unavailable(_))), "{e}");
        return;
    }
    let o = run(&sandboxed, "connect").await.expect("run");
    assert_eq!(o.stdout, format!("refused {}\n", libc::EPERM), "{o:?}");
    // A preset that allows the network keeps it (no network namespace, no socket filter).
    let o = run(&sandboxed, "connect-net").await.expect("run");
    assert_eq!(o.stdout, "connected\n", "{o:?}");
    drop(listener);
}

#[tokio::test]
async fn best_effort_runs_and_reports_what_applied() {
    let fx = fixture();
    let r = runner(&fx.ws, vec![sh("ok", "echo ok")], SandboxMode::BestEffort);
    let o = run(&r, "ok").await.expect("run");
    assert_eq!(o.stdout, "ok\n");
    if full_support() {
        assert!(!o.sandbox.contains("WEAKER"), "{}", o.sandbox);
    } else {
        assert!(o.sandbox.contains("WEAKER"), "{}", o.sandbox);
    }
    let r = runner(&fx.ws, vec![sh("ok", "echo ok")], SandboxMode::Off);
    assert_eq!(run(&r, "ok").await.expect("run").sandbox, "off");
}

#[test]
fn required_mode_fails_closed_when_a_layer_is_missing() {
    let fx = fixture();
    let ws = Arc::new(Workspace::open(&fx.ws).expect("open"));
    let req = reins_tools::SandboxRequest { workspace: ws, writable: vec![], network: false };
    let host = probe().clone();
    let cases = [
        (reins_tools::SandboxSupport { landlock_abi: None, ..host.clone() }, "Landlock"),
        (reins_tools::SandboxSupport { seccomp: false, ..host.clone() }, "seccomp"),
        // .git exists, so without mount namespaces protected paths would be writable.
        (reins_tools::SandboxSupport { namespaces: false, user_namespaces: false, ..host.clone() }, "protected"),
    ];
    for (support, needle) in cases {
        let e = reins_tools::prepare_with(&req, SandboxMode::Required, &support).expect_err(needle);
        assert!(matches!(&e, SandboxError::Unavailable(m) if m.contains(needle)), "{e}");
        assert!(e.to_string().contains("--no-sandbox"), "{e}");
        let weaker = reins_tools::prepare_with(&req, SandboxMode::BestEffort, &support).expect("best effort");
        assert!(weaker.summary().contains("WEAKER"), "{}", weaker.summary());
    }
}

#[tokio::test]
async fn sandboxed_command_cannot_ptrace() {
    let fx = fixture();
    let code = "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nr = libc.ptrace(0, 0, 0, 0)\n\
                print(r, ctypes.get_errno())\n";
    let preset = Preset::new("trace", "python3", vec!["-c".into(), code.into()]);
    let open = runner(&fx.ws, vec![preset.clone()], SandboxMode::Off);
    assert_eq!(run(&open, "trace").await.expect("run").stdout, "0 0\n");
    let r = runner(&fx.ws, vec![preset], SandboxMode::Required);
    if !full_support() {
        assert!(run(&r, "trace").await.is_err());
        return;
    }
    assert_eq!(run(&r, "trace").await.expect("run").stdout, format!("-1 {}\n", libc::EPERM));
}

/// io_uring_setup (syscall 425 on x86_64 and aarch64) is denied with EPERM inside the sandbox.
#[tokio::test]
async fn sandboxed_command_cannot_use_io_uring() {
    let fx = fixture();
    let code = "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nparams = ctypes.create_string_buffer(120)\n\
                r = libc.syscall(425, 4, params)\nprint('fd' if r >= 0 else 'err', 0 if r >= 0 else ctypes.get_errno())\n";
    let preset = Preset::new("uring", "python3", vec!["-c".into(), code.into()]);
    let r = runner(&fx.ws, vec![preset], SandboxMode::Required);
    if !full_support() {
        assert!(run(&r, "uring").await.is_err());
        return;
    }
    assert_eq!(run(&r, "uring").await.expect("run").stdout, format!("err {}\n", libc::EPERM));
}
