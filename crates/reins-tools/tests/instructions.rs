//! What a model is told about its workspace: the preamble, `AGENTS.md` read through the confined open
//! (huge, binary, invalid UTF-8, symlinked out of the workspace, a FIFO).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use reins_tools::instructions::join;
use reins_tools::{
    AgentsMd, CommandConfig, CommandRunner, Preset, SandboxMode, Workspace, WorkspaceConfig, load_agents_md, preamble,
};

fn ws(root: &Path) -> Workspace {
    Workspace::open(root).expect("open")
}

#[test]
fn the_preamble_says_what_the_workspace_is_what_is_refused_and_which_presets_exist() {
    let tmp = tempfile::tempdir().unwrap();
    let config = WorkspaceConfig { protected: vec![".git".into(), "**/*.pem".into()], ..WorkspaceConfig::default() };
    let w = Arc::new(Workspace::open_with(tmp.path(), config).unwrap());
    let text = preamble(&w, None);
    for needle in ["relative to the workspace root", "`..`", "Absolute paths", "symbolic links", "`.git`", "`**/*.pem`"]
    {
        assert!(text.contains(needle), "{needle:?} missing from:\n{text}");
    }
    assert!(text.contains("no run_command tool"), "{text}");
    assert!(!text.contains(&tmp.path().display().to_string()), "the host path is never told: {text}");

    let mut grep = Preset::new("grep", "grep", vec!["-rn".into()]);
    grep.arg_schema = Some(serde_json::json!({"type": "array", "items": {"type": "string"}}));
    let cmd = CommandConfig { sandbox: SandboxMode::Off, ..CommandConfig::default() };
    let runner = CommandRunner::new(w.clone(), vec![Preset::new("test", "true", vec![]), grep], cmd).unwrap();
    let text = preamble(&w, Some(&runner));
    assert!(text.contains("run_command runs a command by preset name, never a shell"), "{text}");
    assert!(text.contains("`test`") && text.contains("`grep` (accepts args)"), "{text}");
    assert!(!text.contains("no run_command tool"), "{text}");
}

#[test]
fn agents_md_is_read_from_the_root_with_a_heading() {
    let tmp = tempfile::tempdir().unwrap();
    assert_eq!(load_agents_md(&ws(tmp.path()), 1024), AgentsMd::Absent);
    assert_eq!(AgentsMd::Absent.section(), None);
    // Only the root's file counts.
    std::fs::create_dir(tmp.path().join("sub")).unwrap();
    std::fs::write(tmp.path().join("sub/AGENTS.md"), "nested").unwrap();
    assert_eq!(load_agents_md(&ws(tmp.path()), 1024), AgentsMd::Absent);
    std::fs::write(tmp.path().join("AGENTS.md"), "Run `make check` before you finish.\n").unwrap();
    let got = load_agents_md(&ws(tmp.path()), 1024);
    assert_eq!(got, AgentsMd::Loaded { text: "Run `make check` before you finish.\n".into(), note: None });
    let section = got.section().unwrap();
    assert!(section.starts_with("The workspace's AGENTS.md"), "{section}");
    assert!(section.ends_with("Run `make check` before you finish.\n"), "{section}");
    assert_eq!(got.note(), None);
}

#[test]
fn a_huge_agents_md_is_cut_on_a_character_boundary_with_a_note() {
    let tmp = tempfile::tempdir().unwrap();
    // 3-byte characters: a 1000-byte cap falls inside one.
    std::fs::write(tmp.path().join("AGENTS.md"), "漢".repeat(100_000)).unwrap();
    let AgentsMd::Loaded { text, note } = load_agents_md(&ws(tmp.path()), 1000) else { panic!("loaded") };
    assert_eq!(text, "漢".repeat(333), "whole characters only, at most the cap");
    let note = note.expect("a note");
    assert!(note.contains("only its first 1000 bytes (of 300000)"), "{note}");
    let section = load_agents_md(&ws(tmp.path()), 1000).section().unwrap();
    assert!(section.ends_with(&format!("[{note}]")), "the model is told too");
}

#[test]
fn a_binary_or_invalid_agents_md_is_handled_with_a_note() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("AGENTS.md"), b"\x7fELF\0\0\x01binary").unwrap();
    let got = load_agents_md(&ws(tmp.path()), 1024);
    let AgentsMd::Skipped { reason } = &got else { panic!("{got:?}") };
    assert!(reason.contains("binary"), "{reason}");
    assert!(got.section().unwrap().contains("was not read: it is a binary file"));
    assert!(!got.section().unwrap().contains("ELF"));

    std::fs::write(tmp.path().join("AGENTS.md"), b"caf\xe9 rules").unwrap();
    let AgentsMd::Loaded { text, note } = load_agents_md(&ws(tmp.path()), 1024) else { panic!() };
    assert_eq!(text, "caf\u{FFFD} rules");
    assert!(note.unwrap().contains("not valid UTF-8"));
}

#[test]
fn agents_md_through_a_symlink_is_never_read_even_inside_the_workspace() {
    let tmp = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.md"), "OUTSIDE-SECRET-MARKER").unwrap();
    let root = tmp.path().join("ws");
    std::fs::create_dir(&root).unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret.md"), root.join("AGENTS.md")).unwrap();
    let got = load_agents_md(&ws(&root), 1024);
    let AgentsMd::Skipped { reason } = &got else { panic!("{got:?}") };
    assert!(reason.contains("symbolic link"), "{reason}");
    assert!(!format!("{got:?}").contains("OUTSIDE-SECRET-MARKER"));
    assert!(got.note().unwrap().contains("AGENTS.md was not read"));
    // A link to a file inside the workspace is refused just the same.
    std::fs::remove_file(root.join("AGENTS.md")).unwrap();
    std::fs::write(root.join("real.md"), "inside").unwrap();
    std::os::unix::fs::symlink("real.md", root.join("AGENTS.md")).unwrap();
    assert!(matches!(load_agents_md(&ws(&root), 1024), AgentsMd::Skipped { .. }));
}

#[test]
fn an_agents_md_that_is_a_fifo_or_a_directory_is_skipped_without_blocking() {
    let tmp = tempfile::tempdir().unwrap();
    rustix::fs::mkfifoat(rustix::fs::CWD, tmp.path().join("AGENTS.md"), rustix::fs::Mode::from_raw_mode(0o600))
        .unwrap();
    let t0 = Instant::now();
    let got = load_agents_md(&ws(tmp.path()), 1024);
    assert!(t0.elapsed() < Duration::from_secs(10), "never waits for a writer");
    assert!(
        matches!(&got, AgentsMd::Skipped { reason } if reason.contains("FIFO") || reason.contains("fifo")),
        "{got:?}"
    );
    std::fs::remove_file(tmp.path().join("AGENTS.md")).unwrap();
    std::fs::create_dir(tmp.path().join("AGENTS.md")).unwrap();
    assert!(matches!(load_agents_md(&ws(tmp.path()), 1024), AgentsMd::Skipped { .. }));
}

#[test]
fn parts_are_joined_in_order_without_empty_ones() {
    assert_eq!(join([Some("a\n"), None, Some("  \n"), Some("b")]), Some("a\n\nb".to_owned()));
    assert_eq!(join::<_, &str>([None, Some("")]), None);
}

proptest! {
    /// Whatever the file holds, the text given is at most the cap (valid UTF-8 input: a prefix of it,
    /// cut only at the cap and then said so), and nothing panics.
    #[test]
    fn agents_md_is_bounded_for_any_content(
        content in proptest::collection::vec(any::<u8>(), 0..600),
        text in "(\\PC|[é漢😀\n]){0,200}",
        cap in 1u64..400,
        valid in any::<bool>(),
    ) {
        let tmp = tempfile::tempdir().unwrap();
        let bytes = if valid { text.as_bytes().to_vec() } else { content };
        std::fs::write(tmp.path().join("AGENTS.md"), &bytes).unwrap();
        match load_agents_md(&ws(tmp.path()), cap) {
            AgentsMd::Absent => prop_assert!(false, "the file is there"),
            AgentsMd::Skipped { reason } => prop_assert!(bytes[..bytes.len().min(cap as usize)].contains(&0), "{}", reason),
            AgentsMd::Loaded { text: got, note } => {
                let cut = bytes.len() as u64 > cap;
                prop_assert_eq!(note.as_deref().is_some_and(|n| n.contains("was cut")), cut);
                if let Ok(s) = std::str::from_utf8(&bytes) {
                    prop_assert!(s.starts_with(&got));
                    prop_assert!(got.len() as u64 <= cap);
                    if cut {
                        prop_assert!(got.len() as u64 + 4 > cap, "cut at the cap, less at most a character");
                    }
                }
            }
        }
    }
}
