//! Helpers shared by the `reins` command's tests.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;

/// The `reins` binary. Its sessions go to a store of this test process, never the user's own.
pub fn reins() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_reins"));
    c.env("REINS_STORE", std::env::temp_dir().join(format!("reins-cli-test-{}.db", std::process::id())));
    c
}

/// A fresh directory under the system temp dir, removed on drop.
pub struct Dir(pub PathBuf);

impl Dir {
    pub fn new(name: &str) -> Dir {
        let p = std::env::temp_dir().join(format!("reins-cli-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Dir(p)
    }

    /// Writes `content` to the file `name` in the directory.
    pub fn file(&self, name: &str, content: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, content).unwrap();
        p
    }

    /// A session store in the directory.
    pub fn store(&self) -> PathBuf {
        self.0.join("sessions.db")
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
