//! The CLI's files in layers: a command module (what `main.rs` dispatches a subcommand to) uses shared modules and
//! never another command's; a shared module never uses a command module; the shared modules use each other
//! without a circle. Every file of `src/` is listed here as one or the other, so a new file is placed on purpose.
//!
//! A use is any `crate::NAME` path outside a comment: a `use crate::…` line, a `use crate::{…}` group or a path
//! written inline.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The command modules, by command: the files of one command may use each other.
const COMMANDS: &[(&str, &[&str])] = &[
    ("demo", &["demo"]),
    ("run", &["run"]),
    ("chat", &["chat"]),
    ("approve", &["approve_cli"]),
    ("sessions", &["sessions_cli"]),
    ("replay", &["replay_cli"]),
    ("ui", &["view_cli"]),
    ("sandbox-check", &["tools_cli"]),
    ("mcp", &["mcp_cli", "mcp_login", "mcp_serve"]),
    ("config", &["agent_cli"]),
    ("models", &["models_cli"]),
    ("worker, submit, status, result, cancel", &["durable_cli"]),
    ("eval", &["eval_cli"]),
];

/// The shared modules: what several commands use. They use no command module.
const SHARED: &[&str] = &[
    // A run: its flags, the agent resolved, the session store, the run set up and driven, its outcome.
    "run_args",
    "resolve",
    "store_open",
    "run_session",
    "outcome_file",
    "mcp_servers",
    "mcp_prompt",
    // Approvals: decisions given on the command line, the terminal's approver; Restate as a client.
    "decisions",
    "terminal_approver",
    "elicit_cli",
    "restate_client",
    // Flag groups of a run and what they do.
    "instructions_cli",
    "media_cli",
    "providers_cli",
    "telemetry",
    "heartbeat",
    // One session's page; the loopback address a server listens on.
    "session_page",
    "loopback",
    // The terminal: output, rendering, signals, exit codes, history, scratch copies.
    "exit",
    "output",
    "render",
    "signals",
    "history",
    "scratch_copy",
    // The library target (src/lib.rs), used by path `reins_cli::…`.
    "chat_line",
    "history_lines",
    "otel_env",
];

/// The roots: `main.rs` declares and dispatches to every module, `lib.rs` is the library target's.
const ROOTS: &[&str] = &["main", "lib"];

/// The modules each source file uses (`crate::NAME`, comments left out), by file stem.
fn uses() -> BTreeMap<String, BTreeSet<String>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(&dir).expect("src/ is readable") {
        let path = entry.expect("a directory entry").path();
        if path.extension().is_none_or(|x| x != "rs") {
            continue;
        }
        let stem = path.file_stem().expect("a file name").to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&path).expect("a source file is readable");
        out.insert(stem.clone(), used_modules(&text, &stem));
    }
    out
}

/// The first segment after each `crate::` of `text` outside `//` comments, and each name of a `use crate::{…}`
/// group; `$crate::` (a macro's) and the file's own name are left out.
fn used_modules(text: &str, own: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut in_group = false;
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        if in_group {
            found.extend(group_names(code));
            in_group = !code.contains('}');
            continue;
        }
        let mut rest = code;
        while let Some(i) = rest.find("crate::") {
            let macro_path = rest[..i].ends_with('$');
            let after = &rest[i + "crate::".len()..];
            if let Some(group) = after.strip_prefix('{') {
                found.extend(group_names(group.split('}').next().unwrap_or("")));
                in_group = !group.contains('}');
            } else if !macro_path {
                let name: String = after.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
                found.insert(name);
            }
            rest = after;
        }
    }
    found.retain(|m| !m.is_empty() && m != own);
    found
}

/// The module names of a `use crate::{a::b, c, d::{e, f}}` group's text (the first segment of each path).
fn group_names(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut depth = 0usize;
    let mut at_start = true;
    let mut name = String::new();
    for c in text.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => at_start = true,
            c if at_start && depth == 0 && (c.is_ascii_alphanumeric() || c == '_') => name.push(c),
            c if at_start && depth == 0 && !c.is_whitespace() => {
                if !name.is_empty() {
                    names.push(std::mem::take(&mut name));
                }
                at_start = false;
            }
            _ => {}
        }
        if c == ',' && depth == 0 && !name.is_empty() {
            names.push(std::mem::take(&mut name));
        }
    }
    if !name.is_empty() {
        names.push(name);
    }
    names
}

/// The command a module belongs to, if it is a command module.
fn command_of(module: &str) -> Option<&'static str> {
    COMMANDS.iter().find(|(_, files)| files.contains(&module)).map(|(command, _)| *command)
}

#[test]
fn every_file_is_a_command_module_or_a_shared_one() {
    let mut problems = Vec::new();
    for module in uses().keys() {
        let listed = usize::from(command_of(module).is_some())
            + usize::from(SHARED.contains(&module.as_str()))
            + usize::from(ROOTS.contains(&module.as_str()));
        if listed != 1 {
            problems.push(format!(
                "src/{module}.rs is listed {listed} times: list it once in tests/layering.rs, under COMMANDS if \
                 `main.rs` dispatches a subcommand to it, else under SHARED"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn commands_never_use_each_other_and_shared_modules_use_no_command() {
    let mut problems = Vec::new();
    for (module, used) in &uses() {
        if ROOTS.contains(&module.as_str()) {
            continue;
        }
        let mine = command_of(module);
        for other in used {
            let Some(theirs) = command_of(other) else { continue };
            match mine {
                Some(mine) if mine == theirs => {}
                Some(mine) => problems.push(format!(
                    "src/{module}.rs (the command `{mine}`) uses crate::{other} (the command `{theirs}`): commands \
                     never use each other; move what both need into a shared module (ARCHITECTURE.md, reins-cli)"
                )),
                None => problems.push(format!(
                    "src/{module}.rs (shared) uses crate::{other} (the command `{theirs}`): a shared module uses no \
                     command module; move what it needs out of the command into a shared module"
                )),
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn shared_modules_use_each_other_without_a_circle() {
    let uses = uses();
    let shared = |m: &String| SHARED.contains(&m.as_str());
    // Depth-first search; a module met again on the current path closes a circle.
    fn visit(
        m: &str,
        uses: &BTreeMap<String, BTreeSet<String>>,
        shared: &dyn Fn(&String) -> bool,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == m) {
            let mut circle = path[i..].to_vec();
            circle.push(m.to_owned());
            return Some(circle);
        }
        if !done.insert(m.to_owned()) {
            return None;
        }
        path.push(m.to_owned());
        for next in uses.get(m).into_iter().flatten().filter(|n| shared(n)) {
            if let Some(circle) = visit(next, uses, shared, path, done) {
                return Some(circle);
            }
        }
        path.pop();
        None
    }
    let mut done = BTreeSet::new();
    for module in uses.keys().filter(|m| shared(m)) {
        let circle = visit(module, &uses, &shared, &mut Vec::new(), &mut done);
        assert!(
            circle.is_none(),
            "shared modules in a circle: {} (each uses the next); move what they share into one of them or a \
             module beneath both",
            circle.unwrap_or_default().join(" -> ")
        );
    }
}

#[test]
fn the_parser_finds_every_kind_of_use() {
    let text = "use crate::exit::{CliError, usage};\nuse crate::{render, output::flush, a::{b, c}};\n\
                use crate::{\n    store_open,\n    x::y,\n};\nlet _ = crate::telemetry::start();\n\
                // crate::commented::out\n$crate::macro_only::stdout_text(s)\n";
    let found: Vec<String> = used_modules(text, "me").into_iter().collect();
    assert_eq!(found, ["a", "exit", "output", "render", "store_open", "telemetry", "x"]);
}
