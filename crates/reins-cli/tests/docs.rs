//! The README and the book (docs/src) cannot rot: every fenced example in them is checked.
//!
//! Each fenced block is checked by its info string:
//! - `toml`: an agent file, parsed and validated by reins-agent's own loader (`AgentDef::from_toml`), or a
//!   user config (with `[profiles.NAME]`, through `UserConfig::parse`), or a `[dependencies]` table naming crates
//!   of the workspace;
//! - `json`: a script file (an array: `reins::parse_script`) or an outcome file (an object: `reins::Outcome`);
//! - `sh`: every `reins` command names a real subcommand and only flags its `--help` lists; `cargo` commands name
//!   real packages, benches and examples; offline `reins` commands (`reins demo`, `reins run --model script:FILE`
//!   with a file of docs/examples) are run and must succeed, and a `# prints: TEXT` comment is compared with what
//!   they print;
//! - `rust`: a whole file of the repository (named in its first line), which the tests build;
//! - `text`: shown as it is (output, a preamble), not checked;
//! - `LANG,ignore`: a fragment on purpose, not checked (keep them rare).
//!
//! Also: every relative link in the README, CONTRIBUTING.md and the book resolves to a file (and its `#anchor` to a
//! heading), SUMMARY.md lists every chapter, the README stays a front door (at most 300 lines, the two set-up commands
//! first, the test command the one .ci/run runs), and with `REINS_MDBOOK` set (`.ci/setup-mdbook.sh`) the book builds.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{Dir, reins};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// README.md and every Markdown file of docs/src, as (path relative to the root, text).
fn doc_files() -> Vec<(String, String)> {
    let root = root();
    let mut files = vec!["README.md".to_owned(), "CONTRIBUTING.md".to_owned()];
    let mut dirs = vec![root.join("docs/src")];
    let mut found = Vec::new();
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                found.push(path.strip_prefix(&root).unwrap().to_string_lossy().into_owned());
            }
        }
    }
    found.sort();
    files.extend(found);
    files.into_iter().map(|f| (f.clone(), std::fs::read_to_string(root.join(&f)).unwrap())).collect()
}

/// A fenced code block.
#[derive(Debug)]
struct Block {
    file: String,
    /// The line of the opening fence (1-based).
    line: usize,
    lang: String,
    tags: Vec<String>,
    body: String,
}

impl Block {
    fn at(&self) -> String {
        format!("{}:{}", self.file, self.line)
    }
}

/// The fenced blocks of a Markdown text (``` or ~~~ fences, indented ones included; the indentation is removed).
fn blocks(file: &str, text: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut lines = text.lines().enumerate();
    while let Some((i, line)) = lines.next() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        let fence: String = trimmed.chars().take_while(|&c| c == '`' || c == '~').collect();
        if fence.len() < 3 || fence.chars().any(|c| c != fence.chars().next().unwrap()) {
            continue;
        }
        let info = trimmed[fence.len()..].trim();
        let mut parts = info.split(',').map(|s| s.trim().to_owned());
        let lang = parts.next().unwrap_or_default();
        let tags = parts.collect();
        let mut body = String::new();
        for (_, l) in lines.by_ref() {
            if l.trim_start().starts_with(&fence) && l.trim() == fence {
                break;
            }
            body.push_str(l.get(indent.min(l.len() - l.trim_start().len())..).unwrap_or(""));
            body.push('\n');
        }
        out.push(Block { file: file.to_owned(), line: i + 1, lang, tags, body });
    }
    out
}

fn all_blocks() -> Vec<Block> {
    doc_files().iter().flat_map(|(f, t)| blocks(f, t)).collect()
}

fn checked(blocks: &[Block], lang: &str) -> Vec<usize> {
    (0..blocks.len()).filter(|&i| blocks[i].lang == lang && !blocks[i].tags.iter().any(|t| t == "ignore")).collect()
}

#[test]
fn the_block_extractor_reads_fences_as_markdown_does() {
    let text = "a\n```toml\nx = 1\n```\n1. step\n   ```sh,ignore\n   reins demo\n   ```\n````md\n```\n````\n";
    let b = blocks("t.md", text);
    assert_eq!(b.len(), 3, "{b:?}");
    assert_eq!((b[0].lang.as_str(), b[0].body.as_str(), b[0].line), ("toml", "x = 1\n", 2));
    assert_eq!(
        (b[1].lang.as_str(), b[1].tags.clone(), b[1].body.as_str()),
        ("sh", vec!["ignore".to_owned()], "reins demo\n")
    );
    assert_eq!(b[2].body, "```\n");
}

#[test]
fn every_block_says_what_it_is() {
    let known = ["toml", "json", "sh", "rust", "text"];
    let bad: Vec<String> = all_blocks()
        .iter()
        .filter(|b| !known.contains(&b.lang.as_str()))
        .map(|b| format!("{}: ```{} (give one of {known:?}, with `,ignore` for a fragment)", b.at(), b.lang))
        .collect();
    assert!(bad.is_empty(), "fenced blocks without a checked kind:\n{}", bad.join("\n"));
    let ignored = all_blocks().iter().filter(|b| b.tags.iter().any(|t| t == "ignore")).count();
    assert!(ignored <= 3, "{ignored} blocks are marked ignore: make them checkable instead");
}

// ---------------------------------------------------------------------------------------------------------------
// TOML and JSON

/// The agent-file examples, parsed and validated as `reins run --agent` would.
#[test]
fn every_toml_example_is_a_valid_agent_file() {
    let blocks = all_blocks();
    let toml = checked(&blocks, "toml");
    assert!(toml.len() >= 4, "the README and the book show agent files: found {}", toml.len());
    let mut failures = Vec::new();
    let (mut manifests, mut users) = (0, 0);
    for i in toml {
        let b = &blocks[i];
        if b.body.trim_start().starts_with("[dependencies]") {
            manifests += 1;
            if let Err(e) = check_manifest(&b.body) {
                failures.push(format!("{}: {e}", b.at()));
            }
        } else if b.body.contains("[profiles.") {
            users += 1;
            if let Err(e) = reins_agent::UserConfig::parse(&b.body, Path::new("config.toml")) {
                failures.push(format!("{}: {e}", b.at()));
            }
        } else if b.body.contains("[[cases]]") || b.body.contains("[[checks]]") {
            if let Err(e) = check_eval_file(&b.body) {
                failures.push(format!("{}: {e}", b.at()));
            }
        } else if let Err(e) = reins_agent::AgentDef::from_toml(&b.body, &root()) {
            failures.push(format!("{}: {e}", b.at()));
        }
    }
    assert!(failures.is_empty(), "agent-file examples that do not load:\n{}", failures.join("\n"));
    assert!(manifests >= 1 && users >= 1, "a [dependencies] example {manifests}, a user config {users}");
}

/// An eval suite (with `[[cases]]`) or a case folder's `case.toml` (with `[[checks]]`): every key known to reins-eval's
/// own parser and every check valid (a verifier's `files` directory is not looked for).
fn check_eval_file(text: &str) -> Result<(), String> {
    let cases: Vec<reins_eval::CaseFile> = if text.contains("[[cases]]") {
        reins_agent::parse_toml::<reins_eval::SuiteFile>(text).map_err(|e| e.to_string())?.cases
    } else {
        vec![reins_agent::parse_toml::<reins_eval::CaseFile>(text).map_err(|e| e.to_string())?]
    };
    for case in cases {
        for def in &case.checks {
            let def = reins_eval::CheckDef { files: None, ..def.clone() };
            reins_eval::Check::from_def(&def, &root()).map_err(|(key, why)| format!("{key}: {why}"))?;
        }
    }
    Ok(())
}

/// A `[dependencies]` example (the library guide's): TOML whose Reins crates are the workspace's and whose other
/// crates are the ones the workspace itself depends on.
fn check_manifest(text: &str) -> Result<(), String> {
    let table: toml::Table = toml::from_str(text).map_err(|e| e.to_string())?;
    let deps = table.get("dependencies").and_then(|d| d.as_table()).ok_or("no [dependencies] table")?;
    let workspace: toml::Table =
        toml::from_str(&std::fs::read_to_string(root().join("Cargo.toml")).unwrap()).map_err(|e| e.to_string())?;
    let known = workspace["workspace"]["dependencies"].as_table().ok_or("no [workspace.dependencies]")?;
    for name in deps.keys() {
        if !known.contains_key(name) {
            return Err(format!("{name} is not a crate of the workspace nor one it uses"));
        }
    }
    Ok(())
}

/// The agent files in docs/examples (the commands of the docs name them) load too.
#[test]
fn the_example_files_load() {
    let dir = root().join("docs/examples");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        match path.extension().and_then(|e| e.to_str()) {
            Some("toml") if path.file_name().is_some_and(|n| n == "config.toml") => {
                reins_agent::UserConfig::parse(&text, &path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                assert!(
                    all_blocks().iter().any(|b| b.lang == "toml" && b.body == text),
                    "{} is not shown",
                    path.display()
                );
            }
            Some("toml") => {
                reins_agent::AgentDef::from_toml(&text, &dir).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                // The docs show the agent files they run, as they are.
                assert!(
                    all_blocks().iter().any(|b| b.lang == "toml" && b.body == text),
                    "{} is shown in no toml block of the docs (show it as it is)",
                    path.display()
                );
            }
            Some("json") => {
                reins::parse_script(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            }
            _ => continue,
        }
        seen += 1;
    }
    assert!(seen >= 2);
}

/// A JSON example is a script file (an array of turns) or an outcome file (an object), read by Reins' own types.
#[test]
fn every_json_example_is_a_script_or_an_outcome() {
    let blocks = all_blocks();
    let json = checked(&blocks, "json");
    let (mut scripts, mut outcomes) = (0, 0);
    let mut failures = Vec::new();
    for i in json {
        let b = &blocks[i];
        let value: serde_json::Value = match serde_json::from_str(&b.body) {
            Ok(v) => v,
            Err(e) => {
                failures.push(format!("{}: not JSON: {e}", b.at()));
                continue;
            }
        };
        let result = if value.is_array() {
            scripts += 1;
            reins::parse_script(&b.body).map(drop).map_err(|e| e.to_string())
        } else {
            outcomes += 1;
            serde_json::from_value::<reins::Outcome>(value).map(drop).map_err(|e| format!("not an outcome: {e}"))
        };
        if let Err(e) = result {
            failures.push(format!("{}: {e}", b.at()));
        }
    }
    assert!(failures.is_empty(), "JSON examples that do not load:\n{}", failures.join("\n"));
    assert!(scripts >= 1 && outcomes >= 1, "scripts {scripts}, outcomes {outcomes}");
}

/// The loaders the checks use refuse what the issue found in the README (`approve` below `[commands]`), so a
/// broken example cannot pass.
#[test]
fn the_checks_refuse_a_broken_example() {
    let broken = "model = \"openai:gpt-4.1-mini\"\n[commands]\nsandbox = \"required\"\napprove = \"writes\"\n";
    let err = reins_agent::AgentDef::from_toml(broken, &root()).unwrap_err().to_string();
    assert!(err.contains("commands.approve"), "{err}");
    assert!(reins::parse_script(r#"[{"content": "x", "bogus": 1}]"#).is_err());
    assert!(serde_json::from_str::<reins::Outcome>(r#"{"status": "finished"}"#).is_err());
}

// ---------------------------------------------------------------------------------------------------------------
// Shell

/// One simple command of a shell example: its words, and what a trailing `# prints: TEXT` comment says.
#[derive(Debug)]
struct ShellCommand {
    at: String,
    words: Vec<String>,
    prints: Option<String>,
}

/// The simple commands of a shell block: lines joined at a trailing `\`, comments dropped (a `# prints: TEXT`
/// comment kept for the command it ends), split at `|`, `&&`, `||`, `;` and `&`, without redirections and leading
/// variable assignments.
fn shell_commands(b: &Block) -> Vec<ShellCommand> {
    let mut logical: Vec<(usize, String)> = Vec::new();
    let mut pending: Option<(usize, String)> = None;
    for (i, line) in b.body.lines().enumerate() {
        let (start, mut acc) = pending.take().unwrap_or((i, String::new()));
        if let Some(head) = line.strip_suffix('\\') {
            acc.push_str(head);
            acc.push(' ');
            pending = Some((start, acc));
        } else {
            acc.push_str(line);
            logical.push((start, acc));
        }
    }
    let mut out = Vec::new();
    for (i, line) in logical {
        let (code, prints) = match line.find(" # prints: ") {
            Some(p) => (line[..p].to_owned(), Some(line[p + " # prints: ".len()..].trim().to_owned())),
            None => (line.clone(), None),
        };
        let words =
            shlex::split(&code).unwrap_or_else(|| panic!("{}:{}: not shell words: {line}", b.file, b.line + 1 + i));
        let mut current: Vec<String> = Vec::new();
        let mut commands = Vec::new();
        let mut skip_next = false;
        for w in words {
            if skip_next {
                skip_next = false;
                continue;
            }
            if w.starts_with('#') {
                break;
            }
            match w.as_str() {
                "|" | "&&" | "||" | ";" | "&" => commands.push(std::mem::take(&mut current)),
                ">" | ">>" | "<" | "2>" | "2>>" => skip_next = true,
                _ if w.starts_with('>') || w.starts_with("2>") => {}
                _ if current.is_empty() && is_assignment(&w) => {}
                _ => current.push(w),
            }
        }
        commands.push(current);
        let n = commands.iter().filter(|c| !c.is_empty()).count();
        for (k, words) in commands.into_iter().filter(|c| !c.is_empty()).enumerate() {
            let prints = if k + 1 == n { prints.clone() } else { None };
            out.push(ShellCommand { at: format!("{}:{}", b.file, b.line + 1 + i), words, prints });
        }
    }
    out
}

fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') && !name.starts_with('-')
    })
}

#[test]
fn shell_commands_are_split_as_a_shell_would() {
    let b = Block {
        file: "t.md".into(),
        line: 1,
        lang: "sh".into(),
        tags: vec![],
        body: "git diff | reins run --model m -   # the prompt from stdin\nX=1 reins \\\n  demo > out.txt 2>&1 &\n\
               reins run --model script:t.json \"Say hi\"  # prints: hi there\n"
            .into(),
    };
    let c = shell_commands(&b);
    let words: Vec<Vec<&str>> = c.iter().map(|c| c.words.iter().map(String::as_str).collect()).collect();
    assert_eq!(
        words,
        vec![
            vec!["git", "diff"],
            vec!["reins", "run", "--model", "m", "-"],
            vec!["reins", "demo"],
            vec!["reins", "run", "--model", "script:t.json", "Say hi"]
        ]
    );
    assert_eq!(c[3].prints.as_deref(), Some("hi there"));
    assert_eq!(c[2].at, "t.md:3");
}

/// `reins [SUBCOMMAND...] --help`, cached.
struct Help(HashMap<Vec<String>, Option<String>>);

impl Help {
    fn get(&mut self, path: &[String]) -> Option<String> {
        self.0
            .entry(path.to_vec())
            .or_insert_with(|| {
                let out = reins().args(path).arg("--help").output().unwrap();
                out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
            })
            .clone()
    }
}

/// The subcommands a help text lists under `Commands:`.
fn subcommands(help: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut inside = false;
    for line in help.lines() {
        if line.starts_with("Commands:") {
            inside = true;
        } else if inside && line.starts_with("  ") && !line.starts_with("   ") {
            if let Some(name) = line.split_whitespace().next() {
                out.insert(name.to_owned());
            }
        } else if inside && !line.starts_with(' ') && !line.is_empty() {
            inside = false;
        }
    }
    out
}

/// Whether a help text lists the flag (`--name`, or a short `-x`) as a whole word.
fn lists_flag(help: &str, flag: &str) -> bool {
    help.match_indices(flag).any(|(i, _)| {
        let before = help[..i].chars().next_back();
        let after = help[i + flag.len()..].chars().next();
        !before.is_some_and(|c| c.is_alphanumeric() || c == '-')
            && !after.is_some_and(|c| c.is_alphanumeric() || c == '-' || c == '_')
    })
}

/// Checks a `reins` command against the command's own help: the subcommands exist, every flag is one of theirs.
/// Returns the subcommand path.
fn check_reins_words(words: &[String], help: &mut Help) -> Result<Vec<String>, String> {
    let mut path: Vec<String> = Vec::new();
    let mut rest = words[1..].iter().peekable();
    while let Some(w) = rest.peek() {
        if w.starts_with('-') {
            break;
        }
        let text = help.get(&path).ok_or_else(|| format!("`reins {} --help` fails", path.join(" ")))?;
        let subs = subcommands(&text);
        if subs.is_empty() {
            break;
        }
        if !subs.contains(w.as_str()) {
            return Err(format!("`reins {}` has no subcommand {w:?} (it has {subs:?})", path.join(" ")));
        }
        path.push(rest.next().unwrap().clone());
    }
    let text = help.get(&path).ok_or_else(|| format!("`reins {} --help` fails", path.join(" ")))?;
    for w in rest {
        if w == "--" {
            break;
        }
        let flag = if let Some(long) = w.strip_prefix("--") {
            format!("--{}", long.split('=').next().unwrap_or(long))
        } else if w.len() == 2 && w.starts_with('-') && w != "-" {
            w.clone()
        } else {
            continue;
        };
        if !lists_flag(&text, &flag) {
            return Err(format!("`reins {}` has no flag {flag}", path.join(" ")));
        }
    }
    Ok(path)
}

/// What a `cargo` command names (a package with `-p`, a bench, an example) exists.
fn check_cargo_words(words: &[String]) -> Result<(), String> {
    let root = root();
    let package = words.windows(2).find(|w| w[0] == "-p" || w[0] == "--package").map(|w| w[1].clone());
    let dir = match &package {
        Some(p) if p == "reins" => root.join("crates/reins"),
        Some(p) => root.join("crates").join(p),
        None => root.clone(),
    };
    if !dir.join("Cargo.toml").is_file() {
        return Err(format!("no package {package:?} in the workspace"));
    }
    for (flag, sub) in [("--bench", "benches"), ("--example", "examples"), ("--test", "tests")] {
        if let Some(name) = words.windows(2).find(|w| w[0] == flag).map(|w| w[1].clone()) {
            let file = dir.join(sub).join(format!("{name}.rs"));
            if !file.is_file() {
                return Err(format!("{flag} {name}: no {}", file.display()));
            }
        }
    }
    Ok(())
}

/// A scratch directory holding docs/examples both under the files' own names and under their repository paths;
/// `config.toml` is also the user config of the commands run there (`xdg/reins/config.toml`).
fn fixtures() -> Dir {
    let dir = Dir::new("docs-fixtures");
    let examples = root().join("docs/examples");
    std::fs::create_dir_all(dir.0.join("docs/examples")).unwrap();
    std::fs::create_dir_all(dir.0.join("xdg/reins")).unwrap();
    std::fs::copy(examples.join("config.toml"), dir.0.join("xdg/reins/config.toml")).unwrap();
    for entry in std::fs::read_dir(&examples).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap();
        std::fs::copy(&path, dir.0.join(name)).unwrap();
        std::fs::copy(&path, dir.0.join("docs/examples").join(name)).unwrap();
    }
    dir
}

/// Whether a `reins` command runs offline as written: `reins demo`, `--version`, `sandbox-check`, `sessions list`,
/// `config show` of the agent files in docs/examples, or `reins run` on a script of docs/examples with nothing that
/// needs the outside world or a recorded session.
fn offline(path: &[String], words: &[String], fixtures: &Path) -> bool {
    let path: Vec<&str> = path.iter().map(String::as_str).collect();
    match path.as_slice() {
        [] => words.iter().any(|w| w == "--version" || w == "--help"),
        ["demo"] | ["sandbox-check"] | ["sessions", "list"] => true,
        ["config", "show"] => {
            let agents = words.windows(2).filter(|w| w[0] == "--agent").map(|w| w[1].clone()).collect::<Vec<_>>();
            !words.iter().any(|w| w == "--resume") && agents.iter().all(|a| fixtures.join(a).is_file())
        }
        ["run"] => {
            let script = words.iter().find_map(|w| w.strip_prefix("script:"));
            let needs_more =
                ["--mcp", "--resume", "--workspace", "--agent", "--config", "--image", "--otlp", "--base-url"];
            script.is_some_and(|s| fixtures.join(s).is_file())
                && !words.iter().any(|w| needs_more.contains(&w.split('=').next().unwrap_or(w)))
                && !words.iter().any(|w| w == "-")
        }
        _ => false,
    }
}

#[test]
fn every_shell_example_names_real_commands_and_offline_ones_run() {
    let blocks = all_blocks();
    let fixtures = fixtures();
    let store = fixtures.0.join("sessions.db");
    let mut help = Help(HashMap::new());
    let mut failures = Vec::new();
    let (mut reins_commands, mut ran, mut compared) = (0, 0, 0);
    let mut run_kinds: BTreeMap<String, usize> = BTreeMap::new();
    for i in checked(&blocks, "sh") {
        for c in shell_commands(&blocks[i]) {
            let program = c.words[0].as_str();
            let result = match program {
                "reins" => {
                    reins_commands += 1;
                    check_reins_words(&c.words, &mut help).and_then(|path| {
                        if !offline(&path, &c.words, &fixtures.0) {
                            return Ok(());
                        }
                        let out = reins()
                            .args(&c.words[1..])
                            .current_dir(&fixtures.0)
                            .env("REINS_STORE", &store)
                            .env("XDG_CONFIG_HOME", fixtures.0.join("xdg"))
                            .env_remove("OPENAI_API_KEY")
                            .env_remove("ANTHROPIC_API_KEY")
                            .output()
                            .unwrap();
                        ran += 1;
                        *run_kinds.entry(path.join(" ")).or_default() += 1;
                        let stdout = String::from_utf8_lossy(&out.stdout);
                        if !out.status.success() {
                            return Err(format!(
                                "exit {:?}\nstdout: {stdout}\nstderr: {}",
                                out.status.code(),
                                String::from_utf8_lossy(&out.stderr)
                            ));
                        }
                        if let Some(expected) = &c.prints {
                            compared += 1;
                            if stdout.trim() != expected {
                                return Err(format!("printed {:?}, the docs say {expected:?}", stdout.trim()));
                            }
                        }
                        Ok(())
                    })
                }
                "cargo" => check_cargo_words(&c.words),
                _ => Ok(()),
            };
            if let Err(e) = result {
                failures.push(format!("{}: `{}`: {e}", c.at, c.words.join(" ")));
            }
        }
    }
    assert!(failures.is_empty(), "shell examples that are wrong:\n{}", failures.join("\n\n"));
    assert!(reins_commands >= 50, "only {reins_commands} reins commands found");
    for kind in ["demo", "run", "config show", "sessions list", "sandbox-check"] {
        assert!(run_kinds.contains_key(kind), "no `reins {kind}` of the docs was run: {run_kinds:?}");
    }
    assert!(compared >= 1, "no `# prints:` output was compared");
    assert!(ran >= 4, "{ran}");
}

/// The shell check catches a flag or a subcommand that does not exist.
#[test]
fn the_shell_check_refuses_what_does_not_exist() {
    let mut help = Help(HashMap::new());
    let words = |s: &str| s.split(' ').map(str::to_owned).collect::<Vec<_>>();
    assert!(check_reins_words(&words("reins run --model x --max-steps 3 -"), &mut help).is_ok());
    assert!(check_reins_words(&words("reins sessions show ID --json"), &mut help).is_ok());
    let e = check_reins_words(&words("reins run --max-stepz 3"), &mut help).unwrap_err();
    assert!(e.contains("--max-stepz"), "{e}");
    let e = check_reins_words(&words("reins sessions shwo ID"), &mut help).unwrap_err();
    assert!(e.contains("shwo"), "{e}");
    assert!(check_cargo_words(&words("cargo bench -p reins --bench harness")).is_ok());
    assert!(check_cargo_words(&words("cargo bench -p reins --bench nope")).is_err());
    assert!(check_cargo_words(&words("cargo test -p reins-nope")).is_err());
}

// ---------------------------------------------------------------------------------------------------------------
// Rust

/// A Rust block is a whole file of the repository (an example the tests build), named in its first line.
#[test]
fn every_rust_example_is_a_file_the_tests_build() {
    let blocks = all_blocks();
    let rust = checked(&blocks, "rust");
    assert!(!rust.is_empty());
    let mut failures = Vec::new();
    for i in rust {
        let b = &blocks[i];
        let first = b.body.lines().next().unwrap_or("");
        let Some(file) = std::fs::read_to_string(root().join(example_path(&b.body))).ok() else {
            failures.push(format!("{}: the first line names no file of the repository: {first}", b.at()));
            continue;
        };
        if file != b.body {
            failures.push(format!("{}: differs from {} (copy the file as it is)", b.at(), example_path(&b.body)));
        }
    }
    assert!(failures.is_empty(), "Rust examples that are not files the tests build:\n{}", failures.join("\n"));
}

/// `crates/…/examples/NAME.rs`, from a first line like `// … cargo run -p CRATE --example NAME`.
fn example_path(body: &str) -> String {
    let first = body.lines().next().unwrap_or("");
    let words: Vec<&str> = first.split_whitespace().collect();
    let krate = words.windows(2).find(|w| w[0] == "-p").map(|w| w[1]).unwrap_or("");
    let name = words.windows(2).find(|w| w[0] == "--example").map(|w| w[1]).unwrap_or("");
    format!("crates/{krate}/examples/{name}.rs")
}

// ---------------------------------------------------------------------------------------------------------------
// Links and the book

/// The id mdBook (and GitHub) give a heading: lower case, spaces as `-`, only letters, digits, `-` and `_` kept.
fn heading_id(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The ids of a Markdown file's headings (outside code blocks).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut fence = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fence = !fence;
        } else if !fence && line.starts_with('#') {
            out.insert(heading_id(line.trim_start_matches('#')));
        }
    }
    out
}

/// The targets of a Markdown text's inline links and images, outside code (blocks and spans).
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fence = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fence = !fence;
            continue;
        }
        if fence {
            continue;
        }
        // Code spans out, then every `](target)`.
        let mut plain = String::new();
        for (k, part) in line.split('`').enumerate() {
            if k % 2 == 0 {
                plain.push_str(part);
            }
        }
        let mut rest = plain.as_str();
        while let Some(p) = rest.find("](") {
            let after = &rest[p + 2..];
            let end = after.find(')').unwrap_or(after.len());
            out.push(after[..end].trim().to_owned());
            rest = &after[end..];
        }
    }
    out
}

#[test]
fn every_relative_link_resolves() {
    let root = root();
    let mut files = doc_files();
    let extra = "docs/examples/README.md";
    files.push((extra.to_owned(), std::fs::read_to_string(root.join(extra)).unwrap()));
    let mut failures = Vec::new();
    let mut checked = 0;
    for (file, text) in &files {
        let dir = root.join(file).parent().unwrap().to_path_buf();
        for target in links(text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (path, anchor) = match target.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (target.as_str(), None),
            };
            let resolved = if path.is_empty() { root.join(file) } else { dir.join(path) };
            if !resolved.exists() {
                failures.push(format!("{file}: ({target}): no {}", resolved.display()));
                continue;
            }
            if let Some(anchor) = anchor {
                let text = std::fs::read_to_string(&resolved).unwrap_or_default();
                if !anchors(&text).contains(anchor) {
                    failures.push(format!("{file}: ({target}): no heading #{anchor} in {path}"));
                }
            }
        }
    }
    assert!(failures.is_empty(), "broken links:\n{}", failures.join("\n"));
    assert!(checked >= 50, "{checked}");
}

#[test]
fn the_link_check_finds_a_broken_link_and_anchor() {
    assert_eq!(links("see [a](b.md#c) and `[x](y)` and ![i](img.png)"), vec!["b.md#c", "img.png"]);
    assert_eq!(heading_id("The outcome file (`--output`)"), "the-outcome-file---output");
    assert_eq!(heading_id(" `reins run` flags"), "reins-run-flags");
    assert!(anchors("# A\n```\n# not\n```\n## B c\n").contains("b-c"));
    assert!(!anchors("```\n# not\n```\n").contains("not"));
}

#[test]
fn the_summary_lists_every_chapter() {
    let src = root().join("docs/src");
    let summary = std::fs::read_to_string(src.join("SUMMARY.md")).unwrap();
    let listed: BTreeSet<String> = links(&summary).into_iter().collect();
    let on_disk: BTreeSet<String> = std::fs::read_dir(&src)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".md") && n != "SUMMARY.md")
        .collect();
    assert_eq!(listed, on_disk, "SUMMARY.md and docs/src disagree");
    let book = std::fs::read_to_string(root().join("docs/book.toml")).unwrap();
    assert!(book.contains("create-missing = false"));
}

/// The README is a front door: short, with the two set-up commands first, and the test command is what CI runs.
#[test]
fn the_readme_is_a_front_door() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(lines <= 300, "the README has {lines} lines: move reference material into the book");
    let first = blocks("README.md", &readme).into_iter().next().unwrap();
    let commands: Vec<&str> = first.body.lines().map(|l| l.split('#').next().unwrap_or("").trim()).collect();
    assert_eq!(commands, ["cargo run --release -p reins-cli -- demo", "cargo test --workspace"], "{}", first.at());
    let heading = readme.lines().position(|l| l.starts_with("## ")).unwrap();
    assert!(readme.lines().nth(heading).unwrap().contains("Set-up"), "the set-up section comes first");
    let ci = std::fs::read_to_string(root().join(".ci/run")).unwrap();
    assert!(
        ci.lines().any(|l| l.trim_start().starts_with("cargo test --workspace")),
        ".ci/run runs the README's test command"
    );
    assert!(ci.contains(".ci/setup-*.sh"), ".ci/run sources the setup scripts (mdBook's among them)");
}

/// `mdbook build docs` passes (with REINS_MDBOOK, which `.ci/setup-mdbook.sh` exports; required on CI).
#[test]
fn the_book_builds() {
    let Some(mdbook) = std::env::var_os("REINS_MDBOOK") else {
        assert!(std::env::var_os("CI").is_none(), "CI must build the book: source .ci/setup-mdbook.sh");
        eprintln!("REINS_MDBOOK is not set: the book is not built (source .ci/setup-mdbook.sh)");
        return;
    };
    let out_dir = Dir::new("docs-book");
    let out = Command::new(mdbook).arg("build").arg(root().join("docs")).arg("-d").arg(&out_dir.0).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "mdbook build docs failed:\n{stderr}");
    assert!(!stderr.contains("WARN") && !stderr.contains("ERROR"), "mdbook warned:\n{stderr}");
    for chapter in
        ["index.html", "cli.html", "agent-file.html", "contracts.html", "security.html", "images/session-view.png"]
    {
        assert!(out_dir.0.join(chapter).is_file(), "the book has no {chapter}");
    }
}

/// The exit codes the book lists (the JSON contracts' table) are the ones `reins --help` prints: the same code for
/// each status, no status left out on either side.
#[test]
fn the_exit_code_table_matches_the_command() {
    let doc = std::fs::read_to_string(root().join("docs/src/contracts.md")).unwrap();
    let documented: BTreeMap<u8, String> = doc
        .lines()
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let code = cells.get(1)?.parse::<u8>().ok()?;
            let status = cells.get(2)?.strip_prefix('`')?.strip_suffix('`')?;
            Some((code, status.to_owned()))
        })
        .collect();
    let out = reins().arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    let section = help.split("Exit codes:").nth(1).expect("`reins --help` lists the exit codes");
    let printed: BTreeMap<u8, String> = section
        .lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            let code = words.next()?.parse::<u8>().ok()?;
            let status = words.next()?;
            // A run's status, as the outcome names it (not "internal error", "bad input", ...).
            serde_json::from_value::<reins::Status>(serde_json::json!(status)).ok().map(|_| (code, status.to_owned()))
        })
        .collect();
    assert!(documented.len() >= 12, "{documented:?}");
    assert_eq!(documented, printed, "docs/src/contracts.md's exit codes and `reins --help`'s disagree");
}

/// The agent-file reference names every key: for each table of an agent file, the keys reins-agent's own parser
/// accepts (as its error for an unknown key lists them) each appear in the agent-file chapter or, for presets and MCP
/// servers, the tools chapter.
#[test]
fn the_agent_file_reference_names_every_key() {
    let docs = ["agent-file.md", "tools.md"]
        .iter()
        .map(|f| std::fs::read_to_string(root().join("docs/src").join(f)).unwrap())
        .collect::<Vec<_>>()
        .join("\n");
    let tables =
        ["", "[provider]", "[limits]", "[context]", "[workspace]", "[commands]", "[[presets]]", "[mcp.x]", "[[hooks]]"];
    let mut missing = Vec::new();
    let mut keys = 0;
    for table in tables {
        let text = format!("{table}\nnot_a_key_of_any_table = 1\n");
        let err = reins_agent::AgentDef::from_toml(&text, &root()).unwrap_err().to_string();
        let expected = err.split("expected one of").nth(1).unwrap_or_else(|| panic!("{table}: {err}"));
        for key in expected.split('`').skip(1).step_by(2) {
            keys += 1;
            let named = [
                format!("`{key}`"),
                format!("\n{key} ="),
                format!("also {key}"),
                format!(", {key}"),
                format!("[{key}]"),
                format!("[{key}."),
                format!("[[{key}]]"),
            ]
            .iter()
            .any(|k| docs.contains(k.as_str()));
            if !named {
                missing.push(format!("{table} {key}"));
            }
        }
    }
    assert!(keys >= 80, "{keys}");
    assert!(missing.is_empty(), "keys the agent-file reference does not name:\n{}", missing.join("\n"));
}

/// The book documents every flag of every command: each `--flag` a `reins … --help` lists appears in the README or
/// the book.
#[test]
fn every_flag_of_every_command_is_documented() {
    let docs: String = doc_files().into_iter().map(|(_, text)| text).collect::<Vec<_>>().join("\n");
    let mut help = Help(HashMap::new());
    let mut paths: Vec<Vec<String>> = vec![vec![]];
    let mut missing = Vec::new();
    let mut flags = 0;
    while let Some(path) = paths.pop() {
        let text = help.get(&path).unwrap_or_else(|| panic!("`reins {} --help` fails", path.join(" ")));
        for sub in subcommands(&text) {
            if sub != "help" {
                paths.push(path.iter().cloned().chain([sub]).collect());
            }
        }
        for line in text.lines() {
            let line = line.trim_start();
            let line = if line.len() > 4 && line.starts_with('-') && &line[2..4] == ", " { &line[4..] } else { line };
            let Some(name) = line.strip_prefix("--") else { continue };
            let flag: String =
                format!("--{}", name.split(|c: char| !(c.is_alphanumeric() || c == '-')).next().unwrap_or(""));
            if flag == "--help" || flag == "--version" {
                continue;
            }
            flags += 1;
            if !lists_flag(&docs, &flag) {
                missing.push(format!("reins {} {flag}", path.join(" ")));
            }
        }
    }
    assert!(flags >= 100, "{flags}");
    assert!(missing.is_empty(), "flags the docs never mention:\n{}", missing.join("\n"));
}
