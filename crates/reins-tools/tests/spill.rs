//! Large results of the built-in tools lose nothing: a command printing about 2 MB (a real process) is cut for
//! the model and written whole beneath the workspace's scratch folder, and the model reads its middle back with
//! `read_file` from the file the marker names; a symlink planted in the spill folder's place is refused.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reins::{Agent, FnModel, Message, ModelResponse, Registry, Status, Tool, ToolCall};
use reins_tools::{CommandConfig, CommandRunner, Preset, RunCommand, SandboxMode, Spill, SpillTool, Workspace};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const LINES: usize = 40_000;
const BOUND: usize = 32_000;

fn line(n: usize) -> String {
    format!("line {n:06} {}\n", "x".repeat(40))
}

/// The file tools and `run_command` with a preset printing [`LINES`] lines of 53 bytes (2.1 MB), spilled.
fn tools(root: &Path) -> Vec<Arc<dyn Tool>> {
    tools_capped(root, Some(4 << 20))
}

/// The same with the preset's own output cap (`None`: the runner's, 64 KiB a stream).
fn tools_capped(root: &Path, cap: Option<usize>) -> Vec<Arc<dyn Tool>> {
    let ws = Arc::new(Workspace::open(root).unwrap());
    let script = format!("seq -f 'line %06g {}' 1 {LINES}", "x".repeat(40));
    let mut preset = Preset::new("big", "sh", vec!["-c".into(), script]);
    preset.output_cap = cap;
    let config = CommandConfig { sandbox: SandboxMode::Off, timeout: Duration::from_secs(60), ..Default::default() };
    let runner =
        Arc::new(CommandRunner::new(ws.clone(), vec![preset], config).unwrap().with_spill(Spill::new(root, BOUND)));
    let mut tools = reins_tools::file_tools(ws);
    tools.push(Arc::new(RunCommand::new(runner)));
    SpillTool::wrap_all(tools, Spill::new(root, BOUND))
}

/// Runs the agent whose model calls `run_command` then reads lines 20,000–20,002 of the file the marker names;
/// returns the outcome's status and the results the model was shown.
async fn read_back(root: &Path) -> (Status, Vec<String>) {
    read_back_with(tools(root), "is in ").await
}

/// [`read_back`] with these tools, the file being the one named after `named_after` in the first result.
async fn read_back_with(tools: Vec<Arc<dyn Tool>>, named_after: &'static str) -> (Status, Vec<String>) {
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen_by_model = Arc::clone(&seen);
    let model = Arc::new(FnModel::new(move |req: &reins::ModelRequest| {
        let mut seen = seen_by_model.lock().unwrap();
        if let Some(Message::ToolResult(r)) = req.messages.last() {
            seen.push(r.content.clone());
        }
        Ok(match seen.len() {
            0 => ModelResponse::tool_calls("", vec![ToolCall::new("big", "run_command", json!({"command": "big"}))]),
            1 => {
                let path =
                    seen[0].split(named_after).nth(1).and_then(|s| s.split(':').next()).unwrap_or("?").to_owned();
                let read = json!({"path": path, "start_line": 20_000, "end_line": 20_002});
                ModelResponse::tool_calls("", vec![ToolCall::new("read", "read_file", read)])
            }
            _ => ModelResponse::text("read it"),
        })
    }));
    let registry = Registry::new(tools).unwrap();
    let agent = Agent::builder_shared(model).registry(registry).build().unwrap();
    let outcome = agent.run("read the middle", CancellationToken::new()).await;
    let seen = seen.lock().unwrap().clone();
    (outcome.status, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2_mb_command_output_is_spilled_and_the_model_reads_its_middle_back() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let (status, seen) = read_back(&root).await;
    assert_eq!(status, Status::Completed);
    let shown = &seen[0];
    assert!(shown.chars().count() <= BOUND, "{}", shown.chars().count());
    assert!(shown.contains(&line(1)) && shown.contains(&line(LINES)), "{}", &shown[..300]);
    assert!(!shown.contains(&line(20_001)));
    assert!(shown.contains("read it with read_file and start_line/end_line"), "{}", &shown[..300]);
    let path = shown.split("is in ").nth(1).and_then(|s| s.split(':').next()).unwrap();
    assert!(path.starts_with(".reins/spill/run_command-"), "{path}");
    // The model got the middle back: the rendered outcome has a few lines before stdout's first.
    let whole = std::fs::read_to_string(root.join(path)).unwrap();
    let offset = whole.lines().position(|l| l == line(1).trim_end()).unwrap();
    let expected: String = (20_000..=20_002).map(|n| whole.lines().nth(n - 1).unwrap().to_owned() + "\n").collect();
    assert_eq!(seen[1], expected);
    assert_eq!(seen[1], (20_000 - offset..=20_002 - offset).map(line).collect::<String>());
    assert!(whole.len() > LINES * 53, "{}", whole.len());
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(root.join(path)).unwrap().permissions().mode() & 0o777, 0o600);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_symlink_planted_at_the_spill_folder_is_refused_and_the_result_only_cut() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    std::fs::create_dir(root.join(".reins")).unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), root.join(".reins/spill")).unwrap();
    let (status, seen) = read_back(&root).await;
    assert_eq!(status, Status::Completed);
    let shown = &seen[0];
    // Cut by the run's bound, with its own marker and no file named; nothing written through the link.
    assert!(shown.chars().count() <= BOUND, "{}", shown.chars().count());
    assert!(shown.contains("characters omitted") && !shown.contains("is in "), "{}", &shown[..300]);
    assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0);
    assert!(std::fs::symlink_metadata(root.join(".reins/spill")).unwrap().file_type().is_symlink());
}

/// Under the command's own cap (64 KiB a stream), the whole stdout goes to a file of its own, named at the top of
/// the result, where the model reads its middle back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_over_its_own_cap_has_its_whole_stdout_in_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let (status, seen) = read_back_with(tools_capped(&root, None), "the whole stdout is in ").await;
    assert_eq!(status, Status::Completed);
    let shown = &seen[0];
    assert!(shown.chars().count() <= BOUND, "{}", shown.chars().count());
    assert!(
        shown.starts_with("exit code 0\n[the whole stdout is in .reins/spill/run_command__stdout-"),
        "{shown:.300}"
    );
    assert_eq!(seen[1], (20_000..=20_002).map(line).collect::<String>());
    let path = shown.split("the whole stdout is in ").nth(1).and_then(|s| s.split(':').next()).unwrap();
    assert_eq!(std::fs::read_to_string(root.join(path)).unwrap(), (1..=LINES).map(line).collect::<String>());
}
