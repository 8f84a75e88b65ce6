//! File tools against a real filesystem: traversal, symlinks, hard links, special files, odd names, big and
//! binary files, protected paths, and a symlink-swap race.

use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use reins::{Registry, ToolContext, ToolError, ToolOutput};
use reins_tools::{RelPath, Resolver, Workspace, WorkspaceConfig, WorkspaceError, file_tools};
use serde_json::json;
use tokio_util::sync::CancellationToken;

struct Fixture {
    _tmp: tempfile::TempDir,
    root: std::path::PathBuf,
    outside: std::path::PathBuf,
}

fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path().join("ws");
    let outside = tmp.path().join("outside");
    fs::create_dir_all(root.join("a/b/c")).expect("mkdir");
    fs::create_dir_all(outside.join("a/b/c")).expect("mkdir");
    fs::create_dir_all(outside.join("b/c")).expect("mkdir");
    fs::create_dir_all(outside.join("c")).expect("mkdir");
    for dir in ["", "a/b/c", "b/c", "c"] {
        fs::write(outside.join(dir).join("f.txt"), "OUTSIDE\n").expect("write");
    }
    fs::write(root.join("a/b/c/f.txt"), "inside\n").expect("write");
    fs::write(root.join("hello.txt"), "line1\nline2\nline3\n").expect("write");
    Fixture { _tmp: tmp, root, outside }
}

fn both(root: &Path) -> Vec<Workspace> {
    let auto = Workspace::open(root).expect("open");
    assert!(auto.uses_openat2(), "this kernel should have openat2");
    let walk = Workspace::open_with(root, WorkspaceConfig { resolver: Resolver::Walk, ..Default::default() })
        .expect("open walk");
    assert!(!walk.uses_openat2());
    vec![auto, walk]
}

fn p(s: &str) -> RelPath {
    RelPath::parse(s).expect("valid path")
}

fn no_host_path(msg: &str, fx: &Fixture) {
    let host = fx.root.parent().expect("parent").to_string_lossy().into_owned();
    assert!(!msg.contains(&host), "error leaks a host path: {msg}");
    assert!(!msg.contains("/tmp"), "error leaks a host path: {msg}");
}

#[test]
fn traversal_and_absolute_paths_are_refused() {
    let fx = fixture();
    for ws in both(&fx.root) {
        for bad in ["../outside/f.txt", "a/../../outside/f.txt", "a/b/../../../x", ".."] {
            let e = RelPath::parse(bad).expect_err(bad);
            assert!(matches!(e, WorkspaceError::Escapes(_)), "{bad}: {e}");
            no_host_path(&e.to_string(), &fx);
        }
        let abs = fx.root.join("hello.txt");
        let e = RelPath::parse(&abs.to_string_lossy()).expect_err("absolute");
        assert!(matches!(e, WorkspaceError::Absolute));
        no_host_path(&e.to_string(), &fx);
        assert!(matches!(RelPath::parse("/etc/passwd"), Err(WorkspaceError::Absolute)));
        // The root itself is not a file.
        assert!(matches!(ws.read_text(&RelPath::root(), None), Err(WorkspaceError::Root)));
        assert!(matches!(ws.write(&RelPath::root(), b"x"), Err(WorkspaceError::Root)));
        assert_eq!(ws.read_text(&p("./a//b/c/f.txt"), None).expect("read"), "inside\n");
    }
}

#[test]
fn symlinks_at_every_depth_are_refused() {
    let fx = fixture();
    let outside = &fx.outside;
    // (component to replace, symlink target) for each depth of a/b/c/f.txt.
    let cases = [
        ("a", outside.join("a")),
        ("a/b", outside.join("b")),
        ("a/b/c", outside.join("c")),
        ("a/b/c/f.txt", outside.join("f.txt")),
    ];
    for (component, target) in cases {
        let link = fx.root.join(component);
        let saved = fx.root.join("saved");
        fs::rename(&link, &saved).expect("move aside");
        std::os::unix::fs::symlink(&target, &link).expect("symlink");
        for ws in both(&fx.root) {
            let e = ws.read_text(&p("a/b/c/f.txt"), None).expect_err("must refuse");
            assert!(matches!(e, WorkspaceError::Symlink(_)), "{component}: {e}");
            no_host_path(&e.to_string(), &fx);
            let e = ws.write(&p("a/b/c/f.txt"), b"pwned").expect_err("must refuse");
            assert!(matches!(e, WorkspaceError::Symlink(_)), "{component}: {e}");
            let e = ws.edit(&p("a/b/c/f.txt"), "OUTSIDE", "pwned", 1).expect_err("must refuse");
            assert!(matches!(e, WorkspaceError::Symlink(_)), "{component}: {e}");
            if component != "a/b/c/f.txt" {
                assert!(ws.list(&p("a/b/c"), 1, 100).is_err(), "{component}: listing through a symlink");
            }
        }
        fs::remove_file(&link).expect("rm link");
        fs::rename(&saved, &link).expect("restore");
    }
    // A relative symlink that stays inside is refused too: no component is ever followed.
    std::os::unix::fs::symlink("hello.txt", fx.root.join("alias")).expect("symlink");
    for ws in both(&fx.root) {
        assert!(matches!(ws.read_text(&p("alias"), None), Err(WorkspaceError::Symlink(_))));
        let listing = ws.list(&RelPath::root(), 1, 100).expect("list");
        let alias = listing.entries.iter().find(|e| e.path == "alias").expect("alias listed");
        assert_eq!(alias.kind, reins_tools::EntryKind::Symlink);
    }
    for dir in ["", "a/b/c", "b/c", "c"] {
        assert_eq!(fs::read_to_string(outside.join(dir).join("f.txt")).expect("read"), "OUTSIDE\n");
    }
}

#[test]
fn a_symlinked_root_is_resolved_once() {
    let fx = fixture();
    let base = fx.root.parent().expect("parent");
    let link = base.join("link-to-ws");
    std::os::unix::fs::symlink(&fx.root, &link).expect("symlink");
    let ws = Workspace::open(link.join("a")).expect("open through a symlinked component");
    assert_eq!(ws.read_text(&p("b/c/f.txt"), None).expect("read"), "inside\n");
    // Re-point the link: the workspace keeps its handle on the original directory.
    fs::remove_file(&link).expect("rm");
    std::os::unix::fs::symlink(&fx.outside, &link).expect("symlink");
    assert_eq!(ws.read_text(&p("b/c/f.txt"), None).expect("read"), "inside\n");
    ws.write(&p("b/c/f.txt"), b"new").expect("write");
    assert_eq!(fs::read_to_string(fx.root.join("a/b/c/f.txt")).expect("read"), "new");
    assert_eq!(fs::read_to_string(fx.outside.join("a/b/c/f.txt")).expect("read"), "OUTSIDE\n");
}

#[test]
fn hard_links_are_replaced_never_written_through() {
    let fx = fixture();
    for (i, ws) in both(&fx.root).into_iter().enumerate() {
        let target = fx.outside.join(format!("target{i}"));
        fs::write(&target, "precious\n").expect("write");
        let name = format!("hard{i}");
        fs::hard_link(&target, fx.root.join(&name)).expect("hard link");
        // Reading shows the linked content (the inode is in the workspace)...
        assert_eq!(ws.read_text(&p(&name), None).expect("read"), "precious\n");
        // ...but writing and editing replace the entry, never the shared inode.
        ws.write(&p(&name), b"replaced\n").expect("write");
        assert_eq!(fs::read_to_string(&target).expect("read"), "precious\n");
        fs::remove_file(fx.root.join(&name)).expect("rm");
        fs::hard_link(&target, fx.root.join(&name)).expect("hard link");
        ws.edit(&p(&name), "precious", "edited", 1).expect("edit");
        assert_eq!(fs::read_to_string(&target).expect("read"), "precious\n");
        assert_eq!(fs::read_to_string(fx.root.join(&name)).expect("read"), "edited\n");
    }
}

#[test]
fn fifos_and_devices_are_refused_without_blocking() {
    let fx = fixture();
    let dir = rustix::fs::open(&fx.root, rustix::fs::OFlags::DIRECTORY, rustix::fs::Mode::empty()).expect("open");
    rustix::fs::mknodat(&dir, "pipe", rustix::fs::FileType::Fifo, rustix::fs::Mode::from_raw_mode(0o644), 0)
        .expect("mkfifo");
    // A character device (the same numbers as /dev/null): needs root, which CI is.
    rustix::fs::mknodat(
        &dir,
        "null",
        rustix::fs::FileType::CharacterDevice,
        rustix::fs::Mode::from_raw_mode(0o666),
        rustix::fs::makedev(1, 3),
    )
    .expect("mknod needs root (CI runs as root)");
    for ws in both(&fx.root) {
        for (name, kind) in [("pipe", "FIFO"), ("null", "character device")] {
            let e = ws.read_text(&p(name), None).expect_err("must refuse");
            assert!(matches!(e, WorkspaceError::NotRegular { kind: k, .. } if k == kind), "{name}: {e}");
            assert!(ws.read_text(&p(name), Some((1, Some(2)))).is_err());
            let e = ws.write(&p(name), b"x").expect_err("must refuse");
            assert!(matches!(e, WorkspaceError::NotRegular { .. }), "{name}: {e}");
            assert!(ws.edit(&p(name), "a", "b", 1).is_err());
        }
        let e = ws.read_text(&p("a"), None).expect_err("dir");
        assert!(matches!(e, WorkspaceError::IsADirectory(_)), "{e}");
        let listing = ws.list(&RelPath::root(), 1, 100).expect("list");
        let kinds: Vec<_> = listing.entries.iter().map(|e| (e.path.as_str(), e.kind)).collect();
        assert!(kinds.contains(&("pipe", reins_tools::EntryKind::Fifo)), "{kinds:?}");
        assert!(kinds.contains(&("null", reins_tools::EntryKind::CharDevice)), "{kinds:?}");
    }
    // Still special files: the writes above did not replace them.
    let st = fs::symlink_metadata(fx.root.join("pipe")).expect("stat");
    assert!(std::os::unix::fs::FileTypeExt::is_fifo(&st.file_type()));
}

#[test]
fn non_utf8_names_are_listed_escaped_and_do_not_break_search() {
    let fx = fixture();
    let name = std::ffi::OsStr::from_bytes(b"caf\xff\x01.txt");
    fs::write(fx.root.join(name), "needle\n").expect("write");
    fs::write(fx.root.join("plain.txt"), "needle\n").expect("write");
    for ws in both(&fx.root) {
        let listing = ws.list(&RelPath::root(), 1, 100).expect("list");
        assert!(listing.entries.iter().any(|e| e.path == "caf\\xff\\x01.txt"), "{:?}", listing.entries);
        let q = reins_tools::SearchQuery {
            pattern: "needle".into(),
            path: RelPath::root(),
            glob: None,
            case_insensitive: false,
            max_matches: 10,
        };
        let r = reins_tools::search(&ws, &q, &CancellationToken::new()).expect("search");
        assert_eq!(r.matches.len(), 1, "{r:?}");
        assert_eq!(r.matches[0].path, "plain.txt");
        assert!(r.files_skipped >= 1);
    }
}

#[test]
fn huge_and_binary_files() {
    let fx = fixture();
    // 300 KiB of text lines: over the 256 KiB whole-file limit.
    let mut big = String::new();
    let mut n = 0;
    while big.len() < 300 * 1024 {
        n += 1;
        big.push_str(&format!("line {n}\n"));
    }
    fs::write(fx.root.join("big.txt"), &big).expect("write");
    // A sparse 8 GiB file: never loaded.
    let sparse = fs::File::create(fx.root.join("sparse.bin")).expect("create");
    sparse.set_len(8 << 30).expect("set_len");
    fs::write(fx.root.join("bin.dat"), b"abc\0def\n").expect("write");
    for ws in both(&fx.root) {
        let e = ws.read_text(&p("big.txt"), None).expect_err("too large");
        assert!(matches!(e, WorkspaceError::TooLarge { limit: 262144, .. }), "{e}");
        let tail = ws.read_text(&p("big.txt"), Some((n - 1, None))).expect("range");
        assert_eq!(tail, format!("line {}\nline {n}\n", n - 1));
        assert_eq!(ws.read_text(&p("big.txt"), Some((2, Some(3)))).expect("range"), "line 2\nline 3\n");
        let e = ws.read_text(&p("big.txt"), Some((n + 5, None))).expect_err("past end");
        assert!(e.to_string().contains(&format!("has {n} lines")), "{e}");
        // The whole-file range is cut at the limit with a marker, not loaded beyond it.
        let all = ws.read_text(&p("big.txt"), Some((1, None))).expect("range");
        assert!(all.len() < 262144 + 200 && all.contains("cut at the 262144-byte limit"));
        assert!(matches!(ws.read_text(&p("sparse.bin"), None), Err(WorkspaceError::TooLarge { .. })));
        assert!(matches!(ws.read_text(&p("sparse.bin"), Some((1, Some(1)))), Err(WorkspaceError::Binary(_))));
        assert!(matches!(ws.read_text(&p("bin.dat"), None), Err(WorkspaceError::Binary(_))));
        assert!(matches!(ws.edit(&p("bin.dat"), "abc", "x", 1), Err(WorkspaceError::Binary(_))));
        assert!(matches!(ws.edit(&p("big.txt"), "line 1\n", "x", 1), Err(WorkspaceError::TooLarge { .. })));
    }
}

#[test]
fn protected_paths_are_readable_not_writable() {
    let fx = fixture();
    fs::create_dir_all(fx.root.join(".git")).expect("mkdir");
    fs::create_dir_all(fx.root.join("sub/.git")).expect("mkdir");
    fs::create_dir_all(fx.root.join("keys")).expect("mkdir");
    fs::write(fx.root.join(".git/config"), "[core]\n").expect("write");
    fs::write(fx.root.join("keys/id.pem"), "KEY\n").expect("write");
    let config =
        WorkspaceConfig { protected: vec![".git".into(), "**/.git".into(), "**/*.pem".into()], ..Default::default() };
    let ws = Workspace::open_with(&fx.root, config).expect("open");
    assert_eq!(ws.read_text(&p(".git/config"), None).expect("read"), "[core]\n");
    for path in [".git/config", ".git/new", ".git", "sub/.git/HEAD", "keys/id.pem", "new.pem"] {
        let e = ws.write(&p(path), b"x").expect_err(path);
        assert!(matches!(e, WorkspaceError::Protected(_)), "{path}: {e}");
    }
    assert!(matches!(ws.edit(&p(".git/config"), "core", "x", 1), Err(WorkspaceError::Protected(_))));
    assert_eq!(fs::read_to_string(fx.root.join(".git/config")).expect("read"), "[core]\n");
    ws.write(&p("sub/git.txt"), b"ok").expect("not protected");
    assert!(
        Workspace::open_with(&fx.root, WorkspaceConfig { protected: vec!["a[".into()], ..Default::default() }).is_err()
    );
}

#[test]
fn write_and_edit_behave() {
    let fx = fixture();
    let ws = Workspace::open(&fx.root).expect("open");
    let r = ws.write(&p("new.txt"), b"one two two\n").expect("write");
    assert!(r.created);
    assert!(!ws.write(&p("new.txt"), b"one two two\n").expect("write").created);
    assert!(matches!(ws.write(&p("missing/x.txt"), b"x"), Err(WorkspaceError::ParentMissing(_))));
    assert!(matches!(ws.write(&p("a"), b"x"), Err(WorkspaceError::IsADirectory(_))));
    assert!(matches!(ws.write(&p("hello.txt/x"), b"x"), Err(WorkspaceError::NotADirectory(_))));
    let e = ws.edit(&p("new.txt"), "three", "3", 1).expect_err("missing");
    assert!(e.to_string().contains("was not found"), "{e}");
    let e = ws.edit(&p("new.txt"), "two", "2", 1).expect_err("ambiguous");
    assert!(e.to_string().contains("occurs 2 times"), "{e}");
    assert_eq!(ws.edit(&p("new.txt"), "two", "2", 2).expect("edit"), 2);
    assert_eq!(fs::read_to_string(fx.root.join("new.txt")).expect("read"), "one 2 2\n");
    // The mode of a replaced file is kept; no temporary files are left behind.
    std::os::unix::fs::PermissionsExt::set_mode(
        &mut fs::metadata(fx.root.join("hello.txt")).expect("m").permissions(),
        0o600,
    );
    fs::set_permissions(fx.root.join("hello.txt"), std::os::unix::fs::PermissionsExt::from_mode(0o600)).expect("chmod");
    ws.write(&p("hello.txt"), b"x").expect("write");
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&fs::metadata(fx.root.join("hello.txt")).expect("m").permissions());
    assert_eq!(mode & 0o777, 0o600);
    let leftovers: Vec<_> = fs::read_dir(&fx.root)
        .expect("readdir")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(".reins-tmp"))
        .collect();
    assert!(leftovers.is_empty());
}

#[test]
fn list_dir_is_sorted_and_bounded() {
    let fx = fixture();
    let ws = Workspace::open(&fx.root).expect("open");
    fs::write(fx.root.join("b.txt"), "").expect("w");
    let l = ws.list(&RelPath::root(), 3, 100).expect("list");
    let paths: Vec<_> = l.entries.iter().map(|e| e.path.clone()).collect();
    assert_eq!(paths, ["a", "a/b", "a/b/c", "b.txt", "hello.txt"]);
    let l = ws.list(&RelPath::root(), 5, 2).expect("list");
    assert_eq!(l.entries.len(), 2);
    assert_eq!(l.omitted, 4);
    assert!(matches!(ws.list(&p("nope"), 1, 10), Err(WorkspaceError::NotFound(_))));
    assert!(matches!(ws.list(&p("hello.txt"), 1, 10), Err(WorkspaceError::NotADirectory(_))));
}

#[test]
fn search_honours_gitignore_and_bounds() {
    let fx = fixture();
    fs::write(fx.root.join(".gitignore"), "ignored/\n").expect("w");
    fs::create_dir_all(fx.root.join("ignored")).expect("mkdir");
    fs::create_dir_all(fx.root.join(".git")).expect("mkdir");
    fs::write(fx.root.join("ignored/x.txt"), "needle\n").expect("w");
    fs::write(fx.root.join(".git/x.txt"), "needle\n").expect("w");
    fs::write(fx.root.join("bin.dat"), b"needle\0\n").expect("w");
    let many: String = (0..50).map(|i| format!("needle {i}\n")).collect();
    fs::write(fx.root.join("many.txt"), many).expect("w");
    fs::write(fx.root.join("one.rs"), "fn x() {}\nlet NEEDLE = 1;\n").expect("w");
    let ws = Workspace::open(&fx.root).expect("open");
    let q = |pattern: &str, max: usize, ci: bool, glob: Option<&str>| reins_tools::SearchQuery {
        pattern: pattern.into(),
        path: RelPath::root(),
        glob: glob.map(Into::into),
        case_insensitive: ci,
        max_matches: max,
    };
    let cancel = CancellationToken::new();
    let r = reins_tools::search(&ws, &q("needle", 1000, false, None), &cancel).expect("search");
    assert_eq!(r.matches.len(), 50, "{r:?}");
    assert!(r.matches.iter().all(|m| m.path == "many.txt"));
    assert_eq!(r.matches[3].line, 4);
    assert_eq!(r.matches[3].text, "needle 3");
    let r = reins_tools::search(&ws, &q("needle", 5, true, None), &cancel).expect("search");
    assert_eq!(r.matches.len(), 5);
    assert!(r.truncated);
    let r = reins_tools::search(&ws, &q("needle", 100, true, Some("*.rs")), &cancel).expect("search");
    assert_eq!(
        r.matches,
        vec![reins_tools::SearchMatch { path: "one.rs".into(), line: 2, text: "let NEEDLE = 1;".into() }]
    );
    assert!(matches!(
        reins_tools::search(&ws, &q("(", 5, false, None), &cancel),
        Err(reins_tools::SearchError::Pattern(_))
    ));
    let mut sub = q("inside", 10, false, None);
    sub.path = p("a/b");
    let r = reins_tools::search(&ws, &sub, &cancel).expect("search");
    assert_eq!(r.matches[0].path, "a/b/c/f.txt");
    sub.path = p("a/b/c/f.txt");
    let r = reins_tools::search(&ws, &sub, &cancel).expect("search a file");
    assert_eq!(r.matches.len(), 1, "{r:?}");
    assert_eq!(r.matches[0].path, "a/b/c/f.txt");
    sub.path = p("nope");
    assert!(matches!(reins_tools::search(&ws, &sub, &cancel), Err(reins_tools::SearchError::Path(_))));
}

fn ctx() -> ToolContext {
    ToolContext::new("1", CancellationToken::new())
}

#[tokio::test]
async fn tools_through_the_registry() {
    let fx = fixture();
    let ws = Arc::new(Workspace::open(&fx.root).expect("open"));
    let registry = Registry::new(file_tools(ws)).expect("registry");
    let names: Vec<_> = registry.specs().iter().map(|s| s.name.clone()).collect();
    assert_eq!(names, ["read_file", "write_file", "edit_file", "list_dir", "search"]);
    let call = |name: &str, args: serde_json::Value| {
        let tool = registry.check(name, &args).cloned();
        async move {
            match tool {
                Ok(t) => t.call(args, ctx()).await,
                Err(e) => Err(ToolError::InvalidArguments(e.to_string())),
            }
        }
    };
    let out = call("read_file", json!({"path": "hello.txt", "start_line": 2, "end_line": 2})).await;
    assert_eq!(out, Ok(ToolOutput::Text("line2\n".into())));
    let out = call("write_file", json!({"path": "w.txt", "content": "hi"})).await;
    assert_eq!(out, Ok(ToolOutput::Text("created `w.txt` (2 bytes)".into())));
    let out = call("edit_file", json!({"path": "w.txt", "old_text": "hi", "new_text": "ho"})).await;
    assert_eq!(out, Ok(ToolOutput::Text("edited `w.txt`: 1 replacement".into())));
    let out = call("list_dir", json!({})).await.expect("list").into_text();
    assert_eq!(out, "a/\nhello.txt\nw.txt\n");
    let out = call("search", json!({"pattern": "^ho$"})).await.expect("search").into_text();
    assert!(out.starts_with("w.txt:1:ho\n"), "{out}");
    let abs = fx.outside.join("f.txt").to_string_lossy().into_owned();
    let err = call("read_file", json!({"path": abs})).await.expect_err("absolute");
    no_host_path(&err.to_string(), &fx);
    let err = call("read_file", json!({"path": "../outside/f.txt"})).await.expect_err("traversal");
    assert!(err.to_string().contains("leaves the workspace"), "{err}");
    let err = call("read_file", json!({"path": "hello.txt", "bogus": 1})).await.expect_err("schema");
    assert!(matches!(err, ToolError::InvalidArguments(_)));
}

/// Another thread swaps `d` between a real directory and a symlink to the outside thousands of times while the
/// tools read and write through it: nothing outside is ever read or written.
#[test]
fn symlink_swap_race_never_escapes() {
    for resolver in [Resolver::Auto, Resolver::Walk] {
        let fx = fixture();
        let d = fx.root.join("d");
        let real = fx.root.join("d.real");
        fs::create_dir_all(&d).expect("mkdir");
        fs::write(d.join("f.txt"), "inside\n").expect("write");
        fs::create_dir_all(fx.outside.join("d")).expect("mkdir");
        fs::write(fx.outside.join("d/f.txt"), "OUTSIDE\n").expect("write");
        let ws = Workspace::open_with(&fx.root, WorkspaceConfig { resolver, ..Default::default() }).expect("open");
        let stop = Arc::new(AtomicBool::new(false));
        let swaps = {
            let stop = stop.clone();
            let (d, real, target) = (d.clone(), real.clone(), fx.outside.join("d"));
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) || n < 5000 {
                    fs::rename(&d, &real).expect("rename away");
                    std::os::unix::fs::symlink(&target, &d).expect("symlink");
                    std::thread::yield_now();
                    fs::remove_file(&d).expect("rm symlink");
                    fs::rename(&real, &d).expect("rename back");
                    // Leave the real directory in place a little, so that some operations succeed.
                    for _ in 0..20 {
                        std::thread::yield_now();
                    }
                    n += 1;
                }
                n
            })
        };
        let (mut ok_reads, mut ok_writes) = (0, 0);
        for i in 0..5000 {
            match ws.read_text(&p("d/f.txt"), None) {
                Ok(text) => {
                    assert!(!text.contains("OUTSIDE"), "escaped on read");
                    ok_reads += 1;
                }
                Err(e) => no_host_path(&e.to_string(), &fx),
            }
            if ws.write(&p(&format!("d/w{}.txt", i % 7)), b"inside\n").is_ok() {
                ok_writes += 1;
            }
            let _ = ws.edit(&p("d/f.txt"), "inside", "inside", 1);
            let _ = ws.list(&p("d"), 2, 10).map(|l| {
                assert!(l.entries.iter().all(|e| e.path.starts_with('w') || e.path == "f.txt"), "{:?}", l.entries)
            });
        }
        stop.store(true, Ordering::Relaxed);
        let n = swaps.join().expect("swapper");
        assert!(n >= 5000);
        assert!(ok_reads > 0 && ok_writes > 0, "the race test never succeeded ({ok_reads} reads, {ok_writes} writes)");
        let outside: Vec<_> = fs::read_dir(fx.outside.join("d")).expect("readdir").filter_map(|e| e.ok()).collect();
        assert_eq!(outside.len(), 1, "a file was created outside");
        assert_eq!(fs::read_to_string(fx.outside.join("d/f.txt")).expect("read"), "OUTSIDE\n");
    }
}
