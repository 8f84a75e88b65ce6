//! What the store writes is readable by its user only, whatever the umask: its directory (when the store
//! makes it) 0700, the database and its `-wal` and `-shm` files 0600. (A test binary of its own: it sets the
//! process's umask.)

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::{TempDir, rt};
use reins::{Agent, ModelResponse, ScriptedModel, Status};
use reins_store::{SessionMeta, Store};
use tokio_util::sync::CancellationToken;

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

fn with_suffix(p: &Path, suffix: &str) -> std::path::PathBuf {
    let mut s = p.as_os_str().to_owned();
    s.push(suffix);
    s.into()
}

#[test]
fn the_store_its_wal_and_the_directory_it_makes_are_private_under_umask_022() {
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o022));
    let dir = TempDir::new("private");
    let path = dir.path().join("made/by-reins/sessions.db");
    let store = Store::open(&path).unwrap();
    let meta = SessionMeta { model: Some("scripted".into()), workspace: None, prices: None, config: None };
    let agent = Agent::builder(ScriptedModel::new(vec![ModelResponse::text("done")]))
        .journal(store.journal(meta))
        .build()
        .unwrap();
    let outcome = rt().block_on(agent.run("go", CancellationToken::new()));
    assert_eq!(outcome.status, Status::Completed);
    // The store is still open: its write-ahead log and shared-memory index are there.
    assert_eq!(mode(&dir.path().join("made")), 0o700);
    assert_eq!(mode(&dir.path().join("made/by-reins")), 0o700);
    assert_eq!(mode(&path), 0o600);
    for suffix in ["-wal", "-shm"] {
        let p = with_suffix(&path, suffix);
        assert!(p.exists(), "{} while the store is open", p.display());
        assert_eq!(mode(&p), 0o600, "{}", p.display());
    }
    drop(agent);
    drop(store);

    // A store an older Reins made readable by others (and its files) is made private when opened.
    for suffix in ["", "-wal", "-shm"] {
        let p = with_suffix(&path, suffix);
        if p.exists() {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
    }
    let _store = Store::open(&path).unwrap();
    for suffix in ["", "-wal", "-shm"] {
        let p = with_suffix(&path, suffix);
        if p.exists() {
            assert_eq!(mode(&p), 0o600, "{}", p.display());
        }
    }
}
