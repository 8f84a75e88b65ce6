//! Harbor task directories (Terminal-Bench 2's format) as cases: `instruction.md` is the prompt, `environment/`
//! the workspace fixture, `tests/test.sh` the hidden verifier (its `reward.txt` / `reward.json` the score), and
//! `task.toml`'s `[agent] timeout_sec` and `[verifier] timeout_sec` the deadlines. Without a container: the
//! `[environment]` table (image, CPUs, memory, network) is not honoured, and the tests' absolute paths `/tests`,
//! `/logs/verifier` and `/app` are rewritten to the verifier's directory, its logs and the workspace.

use std::path::Path;
use std::time::Duration;

use crate::check::{Check, Kind, Verifier};
use crate::suite::Case;

fn seconds(table: &toml::Table, section: &str) -> Option<f64> {
    match table.get(section)?.get("timeout_sec")? {
        toml::Value::Float(x) if *x > 0.0 && x.is_finite() => Some(*x),
        toml::Value::Integer(n) if *n > 0 => Some(*n as f64),
        _ => None,
    }
}

/// The case of the Harbor task at `dir`, or why not.
pub fn case(dir: &Path) -> Result<Case, String> {
    let task = dir.join("task.toml");
    let text = reins_agent::read_bounded(&task, crate::suite::MAX_SUITE_BYTES)
        .map_err(|e| format!("cannot read {}: {e}", task.display()))?;
    let table: toml::Table = toml::from_str(&text).map_err(|e| format!("{}: {}", task.display(), e.message()))?;
    let instruction = dir.join("instruction.md");
    let prompt = reins_agent::read_bounded(&instruction, crate::suite::MAX_SUITE_BYTES)
        .map_err(|e| format!("cannot read {}: {e}", instruction.display()))?;
    let tests = dir.join("tests");
    if !tests.join("test.sh").is_file() {
        return Err(format!("{}: a Harbor task needs tests/test.sh", dir.display()));
    }
    let id = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .filter(|n| !n.is_empty())
        .ok_or_else(|| format!("{}: no folder name for the case's id", dir.display()))?;
    let mut overrides = serde_json::Map::new();
    if let Some(s) = seconds(&table, "agent") {
        overrides.insert("limits".into(), serde_json::json!({ "timeout": format!("{}ms", (s * 1000.0) as u64) }));
    }
    let verifier = Verifier {
        command: vec!["bash".into(), "{verifier}/test.sh".into()],
        files: Some(tests),
        timeout: seconds(&table, "verifier").map_or(Duration::from_secs(600), Duration::from_secs_f64),
        threshold: 1.0,
        harbor: true,
    };
    let environment = dir.join("environment");
    Ok(Case {
        id,
        origin: task.display().to_string(),
        prompt,
        own_agent: None,
        overrides,
        workspace: environment.is_dir().then_some(environment),
        checks: vec![Check { name: "verifier".into(), kind: Kind::Verifier(verifier), weight: 1.0 }],
    })
}

/// Rewrites the container paths in the text files under `dir`: `/tests` to `tests`, `/logs/verifier` to `logs`,
/// `/app` to `workspace` (whole path components only).
pub fn rewrite_paths(dir: &Path, tests: &Path, logs: &Path, workspace: &Path) -> std::io::Result<()> {
    let Ok(re) = regex::Regex::new(r"(^|[^\w./-])(/logs/verifier|/tests|/app)\b") else {
        return Ok(());
    };
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d)? {
            let entry = entry?;
            let ty = entry.file_type()?;
            if ty.is_dir() {
                stack.push(entry.path());
                continue;
            }
            if !ty.is_file() {
                continue;
            }
            let Ok(text) = std::fs::read_to_string(entry.path()) else { continue };
            let new = re.replace_all(&text, |c: &regex::Captures<'_>| {
                let to = match &c[2] {
                    "/logs/verifier" => logs,
                    "/tests" => tests,
                    _ => workspace,
                };
                format!("{}{}", &c[1], to.display())
            });
            if new != text {
                std::fs::write(entry.path(), new.as_bytes())?;
            }
        }
    }
    Ok(())
}
