//! Running an eval through the library: attempts' private directories, and their records.

use std::path::Path;

use reins_eval::{Eval, Options, evals_root};
use tokio_util::sync::CancellationToken;

/// Runs a one-case suite of the script `script` for `epochs` epochs, one attempt at a time; the workspace each
/// attempt's session recorded, in order.
async fn workspaces(dir: &Path, script: &str, epochs: u32) -> Vec<String> {
    std::fs::write(dir.join("s.json"), script).unwrap();
    std::fs::write(dir.join("agent.toml"), "model = \"script:s.json\"\n").unwrap();
    std::fs::write(dir.join("suite.toml"), "agent = \"agent.toml\"\n[[cases]]\nid = \"c\"\nprompt = \"p\"\n").unwrap();
    let store = reins_store::Store::open(dir.join("sessions.db")).unwrap();
    let options = Options { epochs, ..Options::default() };
    let eval = Eval::create(&evals_root(store.path()), &dir.join("suite.toml"), &[], options).unwrap();
    let mut done = 0;
    let end = eval.run(&store, &CancellationToken::new(), &mut |_| done += 1).await.unwrap();
    assert_eq!((end.ran, done), (epochs as usize, epochs as usize));
    let attempts = eval.dir.attempts().unwrap();
    assert_eq!(attempts.len(), epochs as usize, "every attempt recorded");
    let sessions = store.list().unwrap();
    attempts
        .iter()
        .map(|a| {
            let id = a.session_id.as_deref().unwrap();
            sessions.iter().find(|s| s.id == id).and_then(|s| s.workspace.clone()).unwrap()
        })
        .collect()
}

#[tokio::test]
async fn an_attempt_that_leaves_its_workspace_empty_hands_it_to_the_next_and_all_are_removed_at_the_end() {
    let dir = tempfile::tempdir().unwrap();
    let places = workspaces(dir.path(), r#"[{"content": "ok"}]"#, 3).await;
    assert_eq!(places.len(), 3);
    assert!(places.iter().all(|p| *p == places[0]), "an empty workspace serves the next attempt: {places:?}");
    assert!(!Path::new(&places[0]).exists(), "removed when the eval's run ended");
}

#[tokio::test]
async fn an_attempt_that_wrote_in_its_workspace_leaves_the_next_a_fresh_one() {
    let dir = tempfile::tempdir().unwrap();
    let script = r#"[
        {"content": "", "tool_calls": [{"id": "1", "name": "write_file", "arguments": {"path": "x.txt", "content": "x"}}]},
        {"content": "done"}
    ]"#;
    let places = workspaces(dir.path(), script, 2).await;
    assert_ne!(places[0], places[1], "a workspace the agent wrote in is never handed on");
    for p in &places {
        assert!(!Path::new(p).exists(), "{p} removed after its attempt");
    }
}
