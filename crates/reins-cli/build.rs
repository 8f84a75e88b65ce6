//! Records the commit `reins --version` names: `git rev-parse --short=12 HEAD` (with `-dirty` when the work
//! tree has changes), or `unknown` where there is no git or no repository (a crate tarball).

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    Some(String::from_utf8(out.stdout).ok()?.trim().to_owned())
}

fn main() {
    let commit =
        git(&["rev-parse", "--short=12", "HEAD"]).filter(|c| !c.is_empty() && c.bytes().all(|b| b.is_ascii_hexdigit()));
    let value = match &commit {
        Some(c) => {
            let dirty = Command::new("git")
                .args(["diff", "--quiet", "HEAD", "--"])
                .status()
                .map(|s| s.code() == Some(1))
                .unwrap_or(false);
            if dirty { format!("{c}-dirty") } else { c.clone() }
        }
        None => "unknown".to_owned(),
    };
    println!("cargo:rustc-env=REINS_GIT_COMMIT={value}");
    // Build again when HEAD moves (a commit, a checkout); without a repository there is nothing to watch.
    for path in ["HEAD", "index"] {
        if let Some(p) = git(&["rev-parse", "--git-path", path]) {
            println!("cargo:rerun-if-changed={p}");
        }
    }
    if let Some(head_ref) = git(&["symbolic-ref", "-q", "HEAD"]) {
        if let Some(p) = git(&["rev-parse", "--git-path", &head_ref]) {
            println!("cargo:rerun-if-changed={p}");
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}
